"""One-shot local mode: an ELF QL query over a finished file, on this machine, no cluster.

Contract: :func:`run_file` reads ``path`` in chunks of whole lines (``chunk_bytes``) through a
:class:`~agent.ingest.tail.FileTail` with the columnar path installed (bad lines counted and
kept as samples exactly as an agent does), runs the query's worker with epochs from the
file's own timestamps and a watermark that never drops a row as late (every epoch stays open
until the end of the file, so out-of-order lines are kept) - unless ``allowed_lateness`` is
given (``elf run --allowed-lateness``): then the agent's rule applies (a row whose epoch ended
at or before the newest timestamp so far minus it is late: left out of the results, counted
per epoch in :attr:`RunResult.late`, as an agent would count it); CBT buffers past
``memory_bytes`` spill to a temporary directory), then returns :class:`RunResult`: per epoch
(in order; window queries: per window end) the query's result rows after HAVING, ORDER BY and
LIMIT, exactly what the master's results API would give for one agent holding the file
(``WINDOW SESSION``: :attr:`RunResult.sessions`, every session of the file as a master closes
them, the last ones at its end). The query's FROM is not checked (the file is the input).
``epoch_seconds`` replaces the default 1 s epochs of a query without WINDOW; with a WINDOW it
must agree (``ValueError`` otherwise, never ignored). ``progress(done_bytes, total_bytes)`` is
called after every chunk. ``fmt`` is a format name or a custom
:class:`~agent.log_format.LogFormat` (``elf run --log-format``); without one it is sniffed from
the first line (json or nginx).
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent.ingest.columnar.allocator import keep_chunk_memory
from agent.ingest.columnar.json_lines import use_arrow_reader
from agent.ingest.columnar.pandas_probe import answer_pandas_probe
from agent.ingest.columnar.reader import ChunkReader
from agent.ingest.parsers import Format, make_parser
from agent.ingest.records import Quarantine
from agent.ingest.tail import FileTail
from agent.jobs.job import create_job, parse_spec
from agent.jobs.ql_job import spec_from_query
from agent.ql import compile_query
from agent.ql.sessions import flag_rows, state_items
from agent.runtime.epochs.clock import EpochClock
from agent.runtime.epochs.worker import Worker

#: event-time lateness that keeps every epoch of a finished file open to its end
_NEVER_LATE = 1e12


@dataclass
class RunResult:
    """What :func:`run_file` computed."""

    columns: list[str]
    epoch_seconds: float
    epochs: list[tuple[int, list[dict[str, Any]]]] = field(default_factory=list)
    input: dict[str, Any] = field(default_factory=dict)
    worker: dict[str, Any] = field(default_factory=dict)
    rejected_samples: list[dict[str, Any]] = field(default_factory=list)
    #: ``WINDOW SESSION``: the session rows (``columns`` then lead with window_start,
    #: window_end and end with flags), in the order they closed; else None
    sessions: list[dict[str, Any]] | None = None
    #: with ``allowed_lateness``: epoch → records refused as late (not in its rows)
    late: dict[int, int] = field(default_factory=dict)

    @property
    def late_records(self) -> int:
        """Records later than the allowed lateness: not in any epoch's rows."""
        return sum(self.late.values())


def query_spec(text: str, epoch_seconds: float | None, **overrides: Any) -> dict[str, Any]:
    """The ql job spec of ``text`` with ``--epoch-seconds`` applied or refused (ValueError
    saying why): a query without WINDOW takes it; a WINDOW fixes the epochs, so a different
    value is refused."""
    compiled = compile_query(text)
    if epoch_seconds is not None:
        if compiled.query.window is not None and epoch_seconds != compiled.epoch_seconds:
            raise ValueError(
                f"--epoch-seconds {epoch_seconds:g} disagrees with the query's "
                f"{compiled.query.window.to_sql()}, which makes epochs of "
                f"{compiled.epoch_seconds:g} s; drop --epoch-seconds or change the WINDOW"
            )
        overrides["epoch_seconds"] = epoch_seconds
    return spec_from_query("elf-run", "elf", text, **overrides)


def sniff_format(path: str | Path) -> str:
    """``json`` when the file's first non-blank line starts with ``{``, else ``nginx``."""
    with open(path, "rb") as f:
        for line in f:
            if line.strip():
                return "json" if line.lstrip().startswith(b"{") else "nginx"
    return "json"


def run_file(
    text: str,
    path: str | Path,
    fmt: Format | None = None,
    *,
    epoch_seconds: float | None = None,
    columnar: bool = True,
    chunk_bytes: int = 4 << 20,
    memory_bytes: int = 256 << 20,
    progress: Callable[[int, int], None] | None = None,
    processes: int = 1,
    allowed_lateness: float | None = None,
) -> RunResult:
    """Run query ``text`` over the finished file ``path`` (see module docstring)."""
    keep_chunk_memory()
    answer_pandas_probe()
    fmt = fmt or sniff_format(path)
    spec = parse_spec(query_spec(text, epoch_seconds))
    job = create_job(spec)
    lateness = _NEVER_LATE if allowed_lateness is None else allowed_lateness
    clock = EpochClock(spec.epoch_seconds, lateness, None, schedule=spec.schedule)
    total = Path(path).stat().st_size
    quarantine = Quarantine()
    tail = FileTail(
        path,
        parser=make_parser(fmt),
        quarantine=quarantine,
        read_size=chunk_bytes,
        max_line_bytes=max(1 << 20, chunk_bytes),
    )
    if columnar:
        use_arrow_reader(True)  # the user's own finished file, in this one-shot process
        tail.columnar = ChunkReader(fmt, job.batch_projection(), tail.parser.repairs)  # type: ignore[attr-defined]
    with tempfile.TemporaryDirectory(prefix="elf-run-") as spill:
        worker = Worker(job, clock=clock, memory_budget_bytes=memory_bytes, spill_dir=spill)
        if processes > 1:
            return _run_parallel(job, worker, spec, path, fmt, quarantine, processes,
                                 columnar, chunk_bytes, total, progress)  # fmt: skip
        result = _new_result(job, spec)
        name = Path(path).name
        try:
            while True:
                batch = tail.poll()
                _feed(worker, name, batch)
                if allowed_lateness is not None:  # epochs the watermark passed are final
                    _emit(result, job, spec, worker.poll())
                done = tail.stats()["bytes"]
                if progress is not None:
                    progress(min(done, total), total)
                if not batch and not getattr(batch, "skipped", 0) and done >= total:
                    break
            _feed(worker, name, tail.drain())  # an unterminated last line
            _finish(result, job, spec, worker)
            result.worker = worker.stats()
        finally:
            worker.close()
            tail.close()
    result.input = tail.stats()
    result.rejected_samples = quarantine.entries()
    return result


def _new_result(job: Any, spec: Any) -> RunResult:
    """An empty result of the query: for ``WINDOW SESSION``, with the session columns."""
    compiled = job.compiled
    result = RunResult(list(compiled.columns), spec.epoch_seconds)
    if job.sessions is not None:
        result.columns = list(compiled.output_columns)
        result.sessions = []
    return result


def _run_parallel(
    job: Any, worker: Worker, spec: Any, path: str | Path, fmt: Format, quarantine: Quarantine,
    processes: int, columnar: bool, chunk_bytes: int, total: int,
    progress: Callable[[int, int], None] | None,
) -> RunResult:  # fmt: skip
    """:func:`run_file` on ``processes`` worker processes (:mod:`agent.runtime.local.parallel`,
    columnar: parse and per-chunk aggregation there, the clock and the CBT here)."""
    from agent.runtime.local.parallel import ParallelFileIngest

    ingest = ParallelFileIngest(
        path, worker, fmt, processes=processes, prefilter=True, quarantine=quarantine,
        read_size=chunk_bytes, max_line_bytes=max(1 << 20, chunk_bytes), columnar=columnar,
    )  # fmt: skip
    result = _new_result(job, spec)
    try:
        ingest.run(lambda closed: _emit(result, job, spec, closed))
        if progress is not None:
            progress(total, total)
        _finish(result, job, spec, worker)
        result.worker = worker.stats()
    finally:
        ingest.close()
        worker.close()
    counters = ingest.counters
    result.input = {**counters, "quarantine": quarantine.stats()}
    result.rejected_samples = quarantine.entries()
    return result


def _feed(worker: Worker, name: str, batch: Any) -> None:
    """One batch to the worker; the records its clock refused as late counted per epoch."""
    worker.process(batch)
    if late := worker.clock.take_late():
        worker.late.collect(name, late, watermark=worker.clock.current_watermark)


def _late(worker: Worker) -> dict[int, int]:
    """Epoch → late records, from what the worker's late records queued (every epoch up to
    their report bound; the rest are in ``worker.stats()["late"]`` only)."""
    return {e: sum(c.values()) for e, c in sorted(worker.late.take_report().items())}


def _emit(result: RunResult, job: Any, spec: Any, closed: list[tuple[int, Any]]) -> None:
    """Closed epochs' result rows into ``result``, in epoch order (a sliding window's filler
    epochs - no window ends there - left out); for ``WINDOW SESSION``, the sessions those
    epochs close (``agent.ql.sessions``, as at a master)."""
    tracker = job.sessions
    for epoch, snap in closed:
        if spec.window_bounds(epoch) is None:
            continue
        if tracker is not None:
            result.epochs.append((epoch, []))
            result.sessions.extend(tracker.feed(epoch, state_items(snap)))  # type: ignore[union-attr]
        else:
            result.epochs.append((epoch, job.result_rows(snap)))


def _finish(result: RunResult, job: Any, spec: Any, worker: Worker) -> None:
    """The end of the input: the epochs still open, the sessions still open, the late counts."""
    _emit(result, job, spec, worker.finish())
    if job.sessions is not None:
        result.sessions.extend(job.sessions.flush())  # type: ignore[union-attr]
    result.late = _late(worker)
    if job.sessions is not None and result.late:  # sessions late records could change say so
        flag_rows(result.sessions, result.late, spec.schedule.epoch_of, job.sessions.gap)  # type: ignore[arg-type]
