"""Parse-ahead: a file tail's columnar chunks parsed on helper processes (the second core).

Contract: :class:`ChunkParsePool` ``(processes)`` parses chunks with
:func:`~agent.ingest.columnar.parse.parse_chunk` on ``processes`` worker processes (``spawn``:
nothing inherited; started on first use). ``submit(fmt, fields, chunk)`` returns a future of
the chunk's :class:`~agent.ingest.columnar.chunk.ParsedChunk` — exactly what ``parse_chunk``
gives in this process (its ``repairs`` are counted in the result, added to no counter: the
caller adds them) — or raises what ``parse_chunk`` raises there (``UnsupportedChunk``). A
worker process that dies (a crash on a crafted line) breaks the pool: its futures raise
``BrokenProcessPool``, the caller parses those chunks itself, and the next ``submit`` starts a
new pool (``restarts`` counts them). Only bytes of a log and the reader's settings cross the
process boundary in; Arrow tables (pickled as Arrow IPC buffers) and rejected lines come back.

``submit(..., plan=)`` (an :class:`~agent.ingest.columnar.aggregate.AggregationPlan`): the
worker process also aggregates the parsed rows for the plan's jobs; when it could, the
``ParsedChunk`` comes back with ``aggregated`` set and no table (``table`` and ``line_index``
None: a summary of the timestamps and per-epoch partial states cross the pipe instead of the
rows), else with the table as above.

Who uses it: :class:`~agent.ingest.tail.FileTail` (``parse_pool``), when a poll finds more
than one chunk waiting (a backlog: catch-up after a restart, a burst, ``elf run``): it hands
some reads to the pool as byte ranges it does not read itself (``handed.py``) and parses the
others itself, then consumes all in file order, so
results, counters, offsets and quarantined lines are those of parsing every chunk itself. A
tail keeping up with its file reads one chunk per poll and never uses the pool. The agent
starts one pool of ``parse_processes`` processes (``[runtime]``, default 0: off; docs/ingest.md,
"Both cores") shared by its file inputs. A worker exits within
:data:`PARENT_CHECK_SECONDS` of its agent's death (kill -9 included): no orphan outlives it.
"""

from __future__ import annotations

import os
import threading
import time
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from multiprocessing import get_context
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # a format name or a custom LogFormat (both picklable)
    from agent.ingest.columnar.aggregate import AggregationPlan
    from agent.ingest.parsers import Format


#: how often a worker process checks that the process that started it is alive: a worker
#: outlives a killed agent (kill -9, a crash) by at most this long, instead of holding its
#: memory (~100 MB) as an orphan for good
PARENT_CHECK_SECONDS = 0.5


def _init(parent: int) -> None:
    """A worker process's start: ``parent`` is the agent's pid, as the agent saw it (a
    worker that finds another parent here was orphaned while it started: it exits)."""
    from agent.ingest.columnar.allocator import keep_chunk_memory
    from agent.ingest.columnar.pandas_probe import answer_pandas_probe

    keep_chunk_memory()
    answer_pandas_probe()
    watch = threading.Thread(
        target=_exit_with_parent, args=(parent,), name="parent-watch", daemon=True
    )
    watch.start()


def _exit_with_parent(parent: int) -> None:
    """Exit once the parent is gone (the kernel re-parents an orphan: its ppid changes). A
    worker blocked on its task queue would never notice otherwise: it holds that pipe's
    write end too, so no end-of-file reaches it."""
    while os.getppid() == parent:
        time.sleep(PARENT_CHECK_SECONDS)  # a periodic check, not a wait on this process's state
    os._exit(0)


#: where a worker process finds a chunk: its bytes, or ``(path, offset, length, xxh3-64)`` —
#: the tail's open file as ``/proc/<pid>/fd/<n>`` (the same inode even after a rotation),
#: read there with ``pread``: piping 4 MiB costs the tail's thread ~3 ms, a fifth of parsing
#: it; the digest proves the bytes are the ones the tail read — or ``(path, offset, length,
#: carried length, carried xxh3-64)``: a range the tail did not read (``handed.py``)
ChunkSource = bytes | tuple[str, int, int, int] | tuple[str, int, int, int, int]


def read_verified(fd: int, offset: int, length: int, digest: int) -> bytes | None:
    """``length`` bytes at ``offset`` of the open file ``fd``, or None unless they are all
    there and hash (xxh3-64) to ``digest``: the bytes the process that handed them over read."""
    import xxhash

    from agent.ingest.columnar.handed import pread_exact

    data = pread_exact(fd, offset, length)
    return data if data is not None and xxhash.xxh3_64_intdigest(data) == digest else None


def _bytes(source: ChunkSource) -> tuple[bytes, int] | None:
    """The chunk's bytes and, for a handed range, their xxh3-64 (-1 otherwise)."""
    if isinstance(source, bytes):
        return source, -1
    try:
        fd = os.open(source[0], os.O_RDONLY)
    except OSError:
        return None
    try:
        if len(source) == 5:
            from agent.ingest.columnar.handed import read_handed

            return read_handed(fd, *source[1:])
        data = read_verified(fd, *source[1:])
        return None if data is None else (data, -1)
    finally:
        os.close(fd)


def _parse(
    fmt: Format, fields: frozenset[str] | None, source: ChunkSource, plan: Any = None
) -> Any:
    """The chunk's ParsedChunk (pre-aggregated for ``plan`` when it can be), or None when its
    bytes could not be read here."""
    from agent.ingest.columnar.lines import longest_line, newline_positions
    from agent.ingest.columnar.parse import parse_chunk

    got = _bytes(source)
    if got is None:
        return None
    chunk, digest = got
    ends = newline_positions(chunk)
    parsed = parse_chunk(fmt, chunk, fields=fields, ends=ends)
    parsed.longest = longest_line(ends)  # the tail needs no newline scan of its own
    parsed.digest = digest
    if plan is not None and parsed.table.num_rows:
        aggregated = plan.aggregate(parsed.table)
        if aggregated is not None:  # the rows stay here: only their aggregates go back
            # (no table and no line index either: pickling an empty table costs ~0.1 ms on
            # each side and the line index 4 bytes a row, per chunk)
            parsed.aggregated = aggregated
            parsed.table = parsed.line_index = None
    return parsed


class ChunkParsePool:
    """Worker processes parsing columnar chunks (see module docstring)."""

    def __init__(self, processes: int) -> None:
        if processes < 1:
            raise ValueError("processes must be >= 1")
        self.processes = processes
        self.restarts = 0
        self.chunks = 0
        self._pool: ProcessPoolExecutor | None = None

    def _executor(self) -> ProcessPoolExecutor:
        if self._pool is None:
            self._pool = ProcessPoolExecutor(
                self.processes,
                mp_context=get_context("spawn"),
                initializer=_init,
                initargs=(os.getpid(),),
            )
        return self._pool

    def warm(self) -> None:
        """Start the worker processes now (else the first chunks wait for them)."""
        futures = [self.submit("raw", None, b"\n") for _ in range(self.processes)]
        for fut in futures:
            fut.result()

    def submit(
        self,
        fmt: Format,
        fields: frozenset[str] | None,
        chunk: ChunkSource,
        plan: AggregationPlan | None = None,
    ) -> Future[Any]:
        """A future of ``parse_chunk(fmt, chunk, fields=fields)`` (see module docstring;
        pre-aggregated for ``plan`` when given), or of None when the worker process could not
        read the chunk (the caller parses it)."""
        self.chunks += 1
        try:
            return self._executor().submit(_parse, fmt, fields, chunk, plan)
        except BrokenProcessPool:  # a worker process died earlier: a new pool
            assert self._pool is not None
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None
            self.restarts += 1
            return self._executor().submit(_parse, fmt, fields, chunk, plan)

    def pids(self) -> list[int]:
        """The worker processes' ids (none before the first chunk or ``warm``)."""
        # (the executor keeps them in a private dict: read defensively, for the benchmark)
        processes = getattr(self._pool, "_processes", None) or {}
        return [p.pid for p in list(processes.values())]

    def close(self) -> None:
        """Stop the worker processes."""
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
