"""Ingest one log file on several cores: parse and map on worker processes, the epoch clock
and the CBT in this process, in line order.

Contract: :class:`ParallelFileIngest` reads a file from the start to its end (a replay or a
catch-up of a file that is complete; following appends, rotation and truncation is
:class:`~agent.ingest.tail.FileTail`'s job) in chunks cut at newlines and hands each chunk to one
of
``processes`` worker processes. A worker process runs exactly what the single-process path
runs on a chunk — the job's prefilter (:mod:`agent.ingest.fastpath`; ``prefilter=False`` parses
every
line), the input format's parser (projected, :mod:`agent.ingest.projection`, with the prefilter),
the job's ``map`` (``map_keys`` when the job class has it) —
and returns, per parsed record, ``(timestamp, pairs or keys, map error)``, plus the chunk's
line counts and rejected lines. This process consumes the chunks **in file order** and feeds
:meth:`~agent.runtime.epochs.worker.Worker.process_mapped`, so epochs, the watermark, lateness and
error
accounting are those of feeding the same records to ``Worker.process`` in order: the results
are identical to the single-process path (tested against it and a Counter). Rejected lines are
quarantined here with their line numbers and file offsets, as the tail would.

Worker processes are started with ``spawn`` (nothing inherited) and rebuild the job from its
spec (JSON, never pickled code); the job class must be importable there (``ql`` jobs and job
classes registered by ``agent.jobs.ql_job``). ``map`` output crosses the process boundary pickled
by :mod:`multiprocessing` — only keys and values the job produced, never input. What this
buys: parsing and mapping, which dominate the cost of lines that pass the prefilter, run on
all cores; reading, the clock and the CBT stay on one.

``columnar=True`` (a job with a batch path, uniform epochs): a worker process parses its chunk
into Arrow (:class:`~agent.ingest.columnar.reader.ChunkReader`) and pre-aggregates it per
(epoch, key), epochs from the timestamps alone; it returns the timestamps, the partial states
and the rejected lines. This process decides lateness on the timestamps (``assign_many``, in
file order) and merges the partials when every row is accepted, else parses the chunk again
and aggregates only its accepted rows
(:meth:`~agent.runtime.epochs.worker.Worker.process_partials`);
a chunk the columnar parser declines takes the row path here. Results, counters and
quarantined lines equal the single-process path's.
"""

from __future__ import annotations

import mmap
import os
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path
from typing import TYPE_CHECKING, Any

import xxhash

from agent.ingest.columnar.aggregate import TimestampColumn
from agent.ingest.columnar.allocator import keep_chunk_memory
from agent.ingest.columnar.lines import longest_line, newline_positions
from agent.ingest.columnar.pandas_probe import answer_pandas_probe
from agent.ingest.columnar.pool import read_verified
from agent.ingest.records import Quarantine, RecordError
from agent.ingest.tail import CHUNK_BYTES, ROW_READ_BYTES
from agent.runtime.epochs.worker import Worker
from cbt import Snapshot

if TYPE_CHECKING:  # a format name or a custom LogFormat (both picklable)
    from agent.ingest.parsers import Format

Item = tuple[Any, list[Any] | None, str | None]
#: (lines, prefiltered, blank, items, rejects: (line index, offset, reason, message, text))
ChunkResult = tuple[int, int, int, list[Item], list[tuple[int, int, str, str, bytes]]]

_state: dict[str, Any] = {}

#: what a worker process is handed per chunk: its bytes, or ``(offset, length, xxh3-64 of the
#: bytes)`` in the file the worker process opened itself. Reading it there spares piping every
#: byte through the pool (measured on 51 MB: ~85 ms of wall time and ~40 ms of this process's
#: CPU through the pipe, 4 ms by ``pread``); the digest proves the worker read what this
#: process read (a file rewritten under us: the chunk is parsed here instead)
Task = bytes | tuple[int, int, int]
#: an over-long line ``run`` found, queued behind the chunks in flight (line numbers in order)
_LONG_LINE = object()
#: where a chunk is: ``(start, end)`` in the mapped file, or bytes (the unterminated last line
#: with a newline added; an over-long line's first 800 bytes)
Source = bytes | tuple[int, int]


def _cuts(
    mm: mmap.mmap, size: int, read_size: int, limit: int
) -> Iterator[tuple[str, int, Source]]:
    """The file cut into ``(kind, offset, source)``: ``chunk`` (whole lines ending at the last
    newline before a ``read_size`` boundary, or one line longer than ``read_size``), ``long``
    (a line longer than ``limit`` crossing a boundary: its first 800 bytes; skipped) and
    ``last`` (the unterminated last line, newline added), in file order."""
    pos = 0
    while pos < size:
        end = min(pos + read_size, size)
        last_nl = mm.rfind(b"\n", pos, end)
        if last_nl >= 0:
            yield "chunk", pos, (pos, last_nl + 1)
            pos = last_nl + 1
            continue
        nl = mm.find(b"\n", end)  # the line at pos is longer than read_size, or the last one
        line_end = size if nl < 0 else nl
        if line_end - pos > limit:
            yield "long", pos, mm[pos : pos + 800]
        elif nl < 0:
            yield "last", pos, mm[pos:size] + b"\n"
        else:
            yield "chunk", pos, (pos, nl + 1)
        pos = line_end + 1


def _open(path: str | None) -> None:
    if path is not None:
        _state["fd"] = os.open(path, os.O_RDONLY)  # held for the process's life


def _read(task: Task) -> bytes | None:
    """The chunk's bytes, or None when the file no longer holds what the main process read."""
    if isinstance(task, bytes):
        return task
    return read_verified(_state["fd"], *task)


def _init(
    spec: dict[str, Any], fmt: Format, ts_field: str, limit: int, prefilter: bool,
    path: str | None = None,
) -> None:  # fmt: skip
    """Worker-process initializer: the job, parser and prefilter from the spec."""
    keep_chunk_memory()
    answer_pandas_probe()
    _open(path)
    import agent.jobs.ql_job  # noqa: F401  (registers the "ql" job class)
    from agent.ingest.fastpath import prefilter_for
    from agent.ingest.parsers import make_parser  # a format name or a custom LogFormat
    from agent.ingest.projection import projected_parser
    from agent.jobs.job import Job, create_job, parse_spec

    job = create_job(parse_spec(spec))
    keys_only = type(job).map_keys is not Job.map_keys
    projected = projected_parser([job], fmt) if prefilter else None
    _state.update(
        map=job.map_keys if keys_only else job.map,
        parser=projected or make_parser(fmt, ts_field=ts_field),
        prefilter=prefilter_for([job], fmt) if prefilter else None,
        ts_field=ts_field,
        limit=limit,
    )


def _chunk(task: Task) -> ChunkResult | None:
    """Parse and map the newline-terminated lines of the chunk (see module docstring); None
    when it could not be read as the main process read it."""
    data = _read(task)
    if data is None:
        return None
    parse, job_map = _state["parser"].parse, _state["map"]
    ts_field, limit, pre = _state["ts_field"], _state["limit"], _state["prefilter"]
    last_nl = len(data) - 1
    found = None if pre is None else pre.scan(data, 0, last_nl)
    lines: list[bytes] = []
    starts: list[int] = []
    if found is None:
        lines = data[:last_nl].split(b"\n")
        n = len(lines)
        kept = lines if pre is None else pre.select(lines)
    else:
        n = data.count(b"\n")
        starts, kept = found
    items: list[Item] = []
    rejects: list[tuple[int, int, str, str, bytes]] = []
    blank = 0
    at, offset = -1, 0  # index and chunk offset of the last rejected line (split path)
    for j, line in enumerate(kept):
        if len(line) <= limit:
            try:
                rec = parse(line)
            except RecordError as exc:
                reason, message = exc.reason, str(exc)
            except Exception as exc:  # a parser bug costs one line
                reason, message = "parser_error", f"{type(exc).__name__}: {exc}"
            else:
                try:
                    items.append((rec.get(ts_field), list(job_map(rec)), None))
                except Exception as exc:
                    items.append((rec.get(ts_field), None, f"{type(exc).__name__}: {exc}"[:200]))
                continue
            if not line.strip():
                blank += 1
                continue
        else:
            reason, message = "line_too_long", f"line longer than {limit} bytes"
        if found is not None:
            pos = starts[j]
            index = data.count(b"\n", 0, pos)
        else:  # kept lines are in order: walk to this one (amortized one pass)
            at += 1
            if at > 0:
                offset += len(lines[at - 1]) + 1
            while lines[at] is not line:
                offset += len(lines[at]) + 1
                at += 1
            index, pos = at, offset
        rejects.append((index, pos, reason, message, _cut(line, reason)))
    return n, n - len(kept), blank, items, rejects


#: columnar: (lines, prefiltered, blank, ts float64 per accepted row (NaN: no usable
#: timestamp), per-epoch partials [(epoch, keys, states)] or None (the chunk takes the row
#: path here), rejects as in ChunkResult)
ColumnarResult = tuple[int, int, int, Any, list[Any] | None, list[tuple[int, int, str, str, bytes]]]


def _init_columnar(
    spec: dict[str, Any], fmt: Format, ts_field: str, prefilter: bool, limit: int,
    path: str | None = None,
) -> None:  # fmt: skip
    """Worker-process initializer of the columnar mode: the job, its chunk reader, the
    prefilter."""
    keep_chunk_memory()
    answer_pandas_probe()
    _open(path)
    import agent.jobs.ql_job  # noqa: F401  (registers the "ql" job class)
    from agent.ingest.columnar.reader import ChunkReader
    from agent.ingest.fastpath import prefilter_for
    from agent.jobs.job import create_job, parse_spec

    job = create_job(parse_spec(spec))
    _state.update(
        job=job,
        agg=job.make_aggregator(),
        reader=ChunkReader(fmt, job.batch_projection(), None),
        prefilter=prefilter_for([job], fmt) if prefilter else None,
        ts_field=ts_field,
        limit=limit,
        epoch_seconds=job.spec.epoch_seconds,
    )


def _chunk_columnar(task: Task) -> ColumnarResult:
    """Parse a chunk into Arrow and pre-aggregate it per (epoch, key), epochs from the
    timestamps alone (the clock's lateness is decided in the main process)."""
    import numpy as np
    import pyarrow as pa

    from agent.ql.fallback import Unsupported

    data = _read(task)
    if data is None:  # not what the main process read: it parses the chunk itself
        return 0, 0, 0, None, None, []
    limit = _state["limit"]
    ends = newline_positions(data)  # found once: the parser reuses them
    if len(data) > limit and longest_line(ends) > limit:
        return 0, 0, 0, None, None, []  # an over-long line: the row path (here) rejects it
    job = _state["job"]
    try:
        n, kept_count, starts, chunk, parsed = parse_columnar(
            _state["reader"], _state["prefilter"], data, ends
        )
    except Unsupported:
        return 0, 0, 0, None, None, []
    rejects = []
    at, index = 0, 0
    for i, reason, message, line in parsed.rejects if parsed is not None else ():
        if starts is None:
            while index < i:
                at = chunk.index(b"\n", at) + 1
                index += 1
            rejects.append((i, at, reason, message, _cut(line, reason)))
        else:
            pos = starts[i]
            rejects.append((data.count(b"\n", 0, pos), pos, reason, message, _cut(line, reason)))
    if parsed is None or parsed.table.num_rows == 0:
        return n, n - kept_count, kept_count - len(rejects), np.zeros(0), [], rejects
    table = parsed.table
    rows = table.num_rows
    blank = kept_count - rows - len(rejects)
    ts_field = _state["ts_field"]
    if ts_field not in table.column_names:
        return n, n - kept_count, blank, np.full(rows, np.nan), [], rejects
    ts = table.column(ts_field).cast(pa.float64()).to_numpy(zero_copy_only=False)
    good = np.isfinite(ts)
    epochs = np.floor(np.where(good, ts, 0.0) / _state["epoch_seconds"]).astype(np.int64)
    partials: list[Any] = []
    try:
        for e in np.unique(epochs[good]).tolist():
            part = table.filter(pa.array(good & (epochs == e)))
            keys, states = job.aggregate_batch(part, _state["agg"])
            partials.append((e, keys, states, part.num_rows))
    except Unsupported:
        return n, n - kept_count, blank, ts, table, rejects  # aggregated in the main process
    return n, n - kept_count, blank, ts, partials, rejects


def parse_columnar(
    reader: Any, pre: Any, data: bytes, ends: Any = None
) -> tuple[int, int, Any, bytes, Any]:
    """A chunk through the prefilter (if any) and the chunk reader: (lines, kept lines, the
    kept lines' offsets or None, the parsed bytes, the ParsedChunk or None when nothing was
    kept); ``Unsupported`` propagates. ``ends``: the chunk's newline offsets, if known."""
    n = data.count(b"\n") if ends is None else len(ends)
    found = None if pre is None else pre.scan(data, 0, len(data) - 1)
    starts: list[int] | None = None
    if found is not None:
        starts, kept = found
        chunk = b"".join([x + b"\n" for x in kept])
        kept_count, ends = len(kept), None
    else:
        chunk, kept_count = data, n
    parsed = reader.parse(chunk, ends) if kept_count else None
    return n, kept_count, starts, chunk, parsed


def _cut(line: bytes, reason: str) -> bytes:
    return line[:800] if reason == "line_too_long" else line


class ParallelFileIngest:
    """Feeds one file to ``worker`` using ``processes`` worker processes (see module)."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        worker: Worker,
        fmt: Format,
        *,
        processes: int = 2,
        ts_field: str = "ts",
        prefilter: bool = True,
        quarantine: Quarantine | None = None,
        name: str | None = None,
        read_size: int | None = None,
        max_line_bytes: int = 1 << 20,
        columnar: bool = False,
    ) -> None:
        if processes < 1:
            raise ValueError("processes must be >= 1")
        self.path = Path(path)
        self.worker = worker
        self.name = name or str(self.path)
        self.quarantine = quarantine if quarantine is not None else Quarantine()
        self.processes = processes
        self.max_line_bytes = max_line_bytes
        _, self.keys_only = worker.map_function()
        self.fmt, self.ts_field, self.prefilter = fmt, ts_field, prefilter
        # columnar: chunks parsed into Arrow and pre-aggregated per (epoch, key) there; the
        # clock's lateness decided here on the timestamps (docs/ingest.md)
        self.columnar = (
            columnar and worker.job.has_batch_path() and not worker.spec.schedule.changes
        )
        # columnar chunks of CHUNK_BYTES, as the tail's (per-chunk Arrow calls amortized)
        self.read_size = read_size or (CHUNK_BYTES if self.columnar else ROW_READ_BYTES)
        path_text = str(self.path)
        if self.columnar:
            init = _init_columnar
            args: tuple[Any, ...] = (
                worker.spec.to_dict(), fmt, ts_field, prefilter, max_line_bytes, path_text
            )  # fmt: skip
        else:
            init = _init
            args = (worker.spec.to_dict(), fmt, ts_field, max_line_bytes, prefilter, path_text)
        self._pool = ProcessPoolExecutor(
            processes, mp_context=get_context("spawn"), initializer=init, initargs=args
        )
        self._local: dict[str, Any] | None = None  # the main process's own parsers (fallback)
        self._map: mmap.mmap | None = None  # the file, while run() reads it
        self.counters = {
            "lines": 0,
            "records": 0,
            "blank_lines": 0,
            "rejected": 0,
            "prefiltered": 0,
            "bytes": 0,
            "chunks": 0,
        }
        self._line_no = 0

    def warm(self) -> None:
        """Start every worker process now (else they start with the first chunks)."""
        fn = _chunk_columnar if self.columnar else _chunk
        list(self._pool.map(fn, [b"\n"] * self.processes))

    def run(self, on_epochs: Callable[[list[tuple[int, Snapshot]]], None] | None = None) -> int:
        """Read the file to its end; after each chunk the epochs the watermark closed go to
        ``on_epochs``. Returns the number of lines. (``worker.finish()`` is the caller's.)

        The file is mapped, not read: this process only finds the chunks' ends (the last
        newline before each ``read_size`` boundary) and hashes each chunk; the worker
        processes read the bytes themselves (:data:`Task`). Over-long lines are found here
        when they cross a boundary, by the worker processes otherwise."""
        with open(self.path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if not size:
                return 0
            mm = mmap.mmap(f.fileno(), size, access=mmap.ACCESS_READ)
            try:
                mm.madvise(mmap.MADV_SEQUENTIAL)
                self._run_mapped(mm, size, on_epochs)
            finally:
                mm.close()
        return self.counters["lines"]

    def _run_mapped(
        self,
        mm: mmap.mmap,
        size: int,
        on_epochs: Callable[[list[tuple[int, Snapshot]]], None] | None,
    ) -> None:
        inflight: deque[tuple[Future[Any], int, Source]] = deque()
        fn = _chunk_columnar if self.columnar else _chunk
        depth = 2 * self.processes
        self._map = mm
        try:
            for kind, at, source in _cuts(mm, size, self.read_size, self.max_line_bytes):
                if kind == "chunk":
                    first, end = source
                    with memoryview(mm)[first:end] as view:
                        task: Task = (first, end - first, xxhash.xxh3_64_intdigest(view))
                    fut = self._pool.submit(fn, task)
                elif kind == "last":  # the unterminated last line, handed over as bytes
                    fut = self._pool.submit(fn, source)
                else:  # an over-long line: quarantined in line order, after what is in flight
                    fut = Future()
                    fut.set_result(_LONG_LINE)
                inflight.append((fut, at, source))
                while len(inflight) >= depth or (inflight and inflight[0][0].done()):
                    self._consume(*inflight.popleft(), on_epochs)
            while inflight:
                self._consume(*inflight.popleft(), on_epochs)
        finally:
            self._map = None
        self.counters["bytes"] += size

    def _bytes(self, source: Source) -> bytes:
        """A chunk's bytes (read from the mapping again: only for the rare local fallback)."""
        if isinstance(source, bytes):
            return source
        assert self._map is not None
        return self._map[source[0] : source[1]]

    def _reject_long(self, text: bytes, offset: int) -> None:
        self._line_no += 1
        self.counters["lines"] += 1
        self.counters["rejected"] += 1
        self.quarantine.add(
            self.name,
            self._line_no,
            "line_too_long",
            text[:800],
            offset=offset,
            message=f"line longer than {self.max_line_bytes} bytes",
        )

    def _consume(
        self,
        fut: Future[Any],
        base: int,
        source: Source,
        on_epochs: Callable[[list[tuple[int, Snapshot]]], None] | None,
    ) -> None:
        result = fut.result()
        if result is _LONG_LINE:
            self._reject_long(self._bytes(source), base)
        elif self.columnar:
            self._consume_columnar(result, base, lambda: self._bytes(source))
        else:
            self._consume_rows(result or self._local_rows(self._bytes(source)), base)
        clock = self.worker.clock
        if late := clock.take_late():  # counted per epoch (epochs/late.py)
            self.worker.late.collect(self.name, late, watermark=clock.current_watermark)
        closed = self.worker.poll()
        if closed and on_epochs is not None:
            on_epochs(closed)

    def _account(self, n: int, skipped: int, blank: int, records: int, rejects: list[Any],
                 base: int) -> None:  # fmt: skip
        for index, offset, reason, message, text in rejects:
            self.quarantine.add(
                self.name, self._line_no + index + 1, reason, text, offset=base + offset,
                message=message,
            )  # fmt: skip
        self._line_no += n
        c = self.counters
        c["chunks"] += 1
        c["lines"] += n
        c["records"] += records
        c["blank_lines"] += blank
        c["rejected"] += len(rejects)
        c["prefiltered"] += skipped
        if skipped:
            self.worker.process([], skipped=skipped)

    def _consume_columnar(
        self, result: ColumnarResult, base: int, data: Callable[[], bytes]
    ) -> None:
        n, skipped, blank, ts, partials, rejects = result
        if ts is None:  # the chunk cannot be columnar: the row path, here
            self._consume_rows(self._local_rows(data()), base)
            return
        self._account(n, skipped, blank, len(ts), rejects, base)
        if isinstance(partials, list):
            self.worker.process_partials(
                TimestampColumn.of(ts), partials, lambda: self._local_table(data())
            )
        else:
            self.worker.process_table(partials, self.ts_field)

    def _local_parsers(self) -> dict[str, Any]:
        if self._local is None:
            from agent.ingest.columnar.reader import ChunkReader
            from agent.ingest.fastpath import prefilter_for

            job = self.worker.job
            pre = prefilter_for([job], self.fmt) if self.prefilter else None
            reader = ChunkReader(self.fmt, job.batch_projection(), None)
            self._local = {"reader": reader, "prefilter": pre}
        return self._local

    def _local_table(self, data: bytes) -> Any:
        """The chunk's table, parsed here again (a chunk with late rows: rare)."""
        local = self._local_parsers()
        parsed = parse_columnar(local["reader"], local["prefilter"], data)[4]
        return parsed.table

    def _local_rows(self, data: bytes) -> ChunkResult:
        """The row path's result for a chunk, computed here (the columnar parser declined)."""
        _init(
            self.worker.spec.to_dict(), self.fmt, self.ts_field, self.max_line_bytes,
            self.prefilter,
        )  # fmt: skip
        return _chunk(data)

    def _consume_rows(self, result: ChunkResult, base: int) -> None:
        n, skipped, blank, items, rejects = result
        self._account(n, skipped, blank, len(items), rejects, base)
        self.worker.process_mapped(items, keys_only=self.keys_only)

    def close(self) -> None:
        """Stop the worker processes."""
        self._pool.shutdown(wait=True, cancel_futures=True)

    def __enter__(self) -> ParallelFileIngest:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
