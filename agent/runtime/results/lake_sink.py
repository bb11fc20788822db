"""A job master's hand-off of epoch results to the rollup lake (``spark_sink``).

Contract: :func:`lake_target` turns the agent's config (``lake``; default ``<data_dir>/lake``
when a data directory is set, ``"off"`` disables it) into a :class:`LakeTarget`, or None when
there is no lake; :func:`sink_for` opens a job's :class:`LakeSink` on a target. The sink reads
the job only through :class:`EpochSource` (its name, trees, spec, level operator, stored
results and job instances). Every agent process shares one
:class:`~spark_sink.buffer.LakeWriter` per (lake, buffer directory): one writer thread, so the
event loop never waits for the lake; the same thread compacts the lake's complete hours and
applies its retention (``spark_sink/compaction.py``). :meth:`LakeSink.epoch` is called by the
master when it stores an epoch's result, folds a late contribution into one, or absorbs
results on hand-over; it captures the current (immutable) snapshot and the thread turns it
into rows — the same rows the results API reports (top-k applied per tree; a job's named
``result_rows`` applied to this tree's pairs; a job whose aggregator holds DataSketches
sketches gets ``lake_rows`` with each key's sketch binaries, :func:`lake_sketches`) — and
writes them with the stored result's
``version``, ``tentative``, ``coverage`` and ``lacking`` (the origins a tentative result still
lacks), its fencing ``term`` and whether it is ``partial`` (it lacks retired origins), the
first tree's with the epoch's ``late_records`` as reported so far - and, for
a top-k job, the tree's ``accuracy`` estimate, computed in that thread
(:func:`agent.runtime.results.quality.snapshot_accuracy`; 1.0 when final). **Versions**: every call
writes the epoch's current version as a new lake file; the
lake shows readers the newest version and streaming queries every new one
(``spark_sink/lake.py``). The version is the result's own (``EpochResult.version``, set by the
master, replicated to its standby with the result), and never less than 1 + the late
contributions folded into it, so a result changed by late data is a new version even where
the master does not number versions itself; the same version is written with the same rows
(a re-push after a master change writes nothing new, adds no rows). **Fencing**: the stored
result's ``term`` (the master's, only ever growing) goes with it; the lake refuses a write
under a lower term than it holds for the epoch (``spark_sink/fencing.py``): that write is not
retried, it is counted (``lake_fenced_writes``), logged at WARNING (job, tree, epoch, both
terms; within a log budget) and reported to the runtime's
:meth:`EpochSource.lake_fenced`, on the event loop when the epoch was handed over from one.
**Sessions**: a job that closes windows of its own (``Job.closed_windows``: ELF QL's ``WINDOW
SESSION``) gets, with :meth:`LakeSink.sessions` (called by the master once the job was fed the
epoch), one more file per epoch under the job name :func:`sessions_job` (``<name>~sessions``:
``~`` is never in a job name): the sessions that epoch closed, one named row each
(``window_start``, ``window_end``, the SELECT columns, ``flags``), version 1 under the stored
result's term and with its state (an epoch closes its sessions once; a new master's term
supersedes them with the ones it rebuilt), empty when it closed none; a new version when the
master flagged them since (``Job.on_late_records``: late records they could hold).
:meth:`LakeSink.history` reads an epoch this master does not hold back from the lake
(``agent/runtime/results/lake_history.py``). The buffer directory is ``<data_dir>/lake-buffer`` (or
a per-node one under the system temp directory when the agent has no data directory). A
sink opens the writer - and with it pyarrow - with its first write (a read-back reads the
lake without it), or at once when the buffer directory holds rollups an earlier run left (the
writer drains them). The writer's modules are imported in a thread once an agent of the
process becomes a job's master (:func:`warm_imports`, called by the runtime): imported on the
loop at the first write, pyarrow (and the pandas its probe then loaded) stalled every agent
of the process for about a second, and a 128-agent process missed its probes and heartbeats
for that long; its
``stats()`` say ``opened: False`` until then. A stopping job's :meth:`LakeSink.flush` waits at
most ``stop_flush_seconds`` (``RuntimeTunables``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import tempfile
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from agent.ingest.columnar.pandas_probe import answer_pandas_probe
from agent.runtime.results import quality
from agent.runtime.results.lake_history import LakeHistory
from agent.tunables import RuntimeTunables
from overlay.logbudget import LogBudget

if TYPE_CHECKING:  # spark_sink (pyarrow) is imported only when a lake is configured
    from agent.jobs.job import Job
    from agent.jobs.spec import JobSpec
    from agent.runtime.results.epoch_result import EpochResult
    from cbt import Snapshot
    from spark_sink.buffer import LakeWriter
    from spark_sink.fencing import FencedWrite
    from spark_sink.lake import Rollup
    from srt.dataplane.operators import LevelOperator

log = logging.getLogger(__name__)
_WRITERS: dict[tuple[str, str], LakeWriter] = {}
_LOCK = threading.Lock()
#: what opening a writer and building its first rollup import (a second or more, cold); not
#: pandas: pyarrow's probe for it is answered first (agent/ingest/columnar/pandas_probe.py)
WRITER_MODULES = ("spark_sink.buffer", "spark_sink.compaction", "spark_sink.lake")
_warming: threading.Thread | None = None


def warm_imports() -> threading.Thread:
    """Import :data:`WRITER_MODULES` in a daemon thread, once per process, so that no event
    loop imports them (module contract); returns that thread. Safe to race: a loop that needs
    a module first waits on the import lock for the thread's import, and a failed import here
    is simply done again where the module is used."""
    global _warming
    with _LOCK:
        if _warming is not None:
            return _warming
        _warming = threading.Thread(target=_import_all, name="elf-lake-imports", daemon=True)
        _warming.start()
        return _warming


def _import_all() -> None:
    import importlib

    answer_pandas_probe()  # before pyarrow loads here: its first pa.array loads no pandas

    for module in WRITER_MODULES:
        with contextlib.suppress(Exception):  # its user imports it again and reports
            importlib.import_module(module)


_DEFAULTS = RuntimeTunables()


class StoredResults(Protocol):
    """A master's stored epochs (:class:`~agent.runtime.results.store.ResultStore`)."""

    def get(self, tree: int, epoch: int) -> EpochResult | None: ...
    def load(self, tree: int, epoch: int) -> Snapshot: ...


class EpochSource(Protocol):
    """What the sink reads of the job whose results it writes (a
    :class:`~agent.runtime.job.runtime.JobRuntime`); spec, operator and job instances are read per
    epoch because a runtime change replaces them."""

    @property
    def name(self) -> str: ...
    @property
    def tree_list(self) -> Sequence[int]: ...
    @property
    def spec(self) -> JobSpec: ...
    @property
    def operator(self) -> LevelOperator: ...
    @property
    def store(self) -> StoredResults: ...
    @property
    def job(self) -> Job: ...
    def job_for(self, epoch: int) -> Job: ...
    def count(self, what: str, n: int = 1) -> None: ...
    def lake_fenced(self, tree_id: int, epoch: int, newer_term: int) -> None:
        """The lake refused this master's result of (tree, epoch): it holds the epoch under
        ``newer_term``, above the stored result's term (a newer master publishes it)."""

    def late_records(self, epoch: int) -> int | None:
        """As master: the late records the origins reported for ``epoch`` so far (None:
        unknown)."""


class LakeTarget(NamedTuple):
    """Where an agent's rollups go: the lake, and the local buffer directory on the way."""

    location: str
    buffer_dir: str


def lake_target(lake: str | None, data_dir: str | None, node_id: int) -> LakeTarget | None:
    """The agent's lake target (``lake`` and ``data_dir`` from its config), or None without
    a lake. The buffer is ``<data_dir>/lake-buffer``, else per node under the temp directory."""
    if not lake:
        return None
    if data_dir:
        buffer_dir = str(Path(data_dir) / "lake-buffer")
    else:
        node = f"{node_id:040x}"[:12]
        buffer_dir = str(Path(tempfile.gettempdir()) / f"elf-lake-buffer-{node}")
    return LakeTarget(lake, buffer_dir)


def writer_for(location: str, buffer_dir: str, tunables: RuntimeTunables = _DEFAULTS) -> LakeWriter:
    """The process-wide writer for (lake location, buffer directory); its upkeep (compaction
    of complete hours, deletion of replaced files, retention) follows ``tunables``
    (``lake_compact_seconds``, ``lake_compact_grace``, ``lake_retention_days``) of the job
    that opened it first."""
    from spark_sink.buffer import LakeWriter
    from spark_sink.compaction import LakeMaintenance

    key = (location, buffer_dir)
    with _LOCK:
        writer = _WRITERS.get(key)
        if writer is None:
            upkeep = LakeMaintenance(
                every=tunables.lake_compact_seconds,
                grace=tunables.lake_compact_grace,
                retention_days=tunables.lake_retention_days,
            )
            writer = _WRITERS[key] = LakeWriter(location, buffer_dir, maintenance=upkeep)
        return writer


class LakeSink:
    """Hands one job's stored epoch results (as master) to the lake writer."""

    def __init__(
        self,
        runtime: EpochSource,
        writer: LakeWriter | Callable[[], LakeWriter],
        *,
        stop_flush_seconds: float = _DEFAULTS.stop_flush_seconds,
        location: str | None = None,
    ) -> None:
        self.runtime = runtime
        # a callable opens the writer (and loads pyarrow) with the first write:
        # an agent that never masters the job never loads the Arrow stack for it
        self._writer: LakeWriter | None = None if callable(writer) else writer
        self._open_writer = writer if callable(writer) else None
        #: the lake's location (reading back does not need the writer)
        self.location = location if self._writer is None else self._writer.location
        self.stop_flush_seconds = stop_flush_seconds
        job = runtime.job
        params = runtime.spec.params or {}
        self.key_names = getattr(job, "lake_key_names", None) or params.get("lake_key_names")
        self.value_names = getattr(job, "lake_value_names", None) or params.get("lake_value_names")
        self._history: LakeHistory | None = None
        self._log = LogBudget(log)  # a fenced master may be refused every epoch it holds

    def epoch(self, tid: int, epoch: int) -> None:
        """Queue the stored result of (tree, epoch) for the lake (no-op if none stored)."""
        rt = self.runtime
        result = rt.store.get(tid, epoch)
        if result is None or tid not in rt.tree_list:
            return
        held, completed_at = result.snapshot, result.completed_at
        version, tentative, coverage, lacking = result_version(result)
        term = int(getattr(result, "term", 0) or 0)
        policy = result.policy
        partial = bool(getattr(result, "partial", False))
        top_k, operator, spec, job = rt.spec.top_k, rt.operator, rt.spec, rt.job_for(epoch)
        store = rt.store
        # the first tree's master keeps the job's late-record reports (results/late_ledger.py)
        late = rt.late_records(epoch) if tid == rt.tree_list[0] else None

        from spark_sink.lake import Rollup, normalize

        def build() -> Rollup:
            # a spilled epoch (spilled before the writer got to it) is read back here, in
            # the writer thread
            snap = held if held is not None else store.load(tid, epoch)
            pairs = list(snap if top_k is None else operator.result(snap))
            normalized = [[normalize(k), normalize(v)] for k, v in pairs]
            sketches = lake_sketches(snap, pairs)
            if sketches is None:
                named = job.result_rows(normalized)
            else:  # the lake keeps each sketch's binary beside its estimate
                named = job.lake_rows(normalized, sketches)
            accuracy = (
                None
                if top_k is None
                else quality.snapshot_accuracy(
                    snap,
                    k=top_k,
                    largest=spec.top_k_largest,
                    coverage=coverage,
                    tentative=tentative,
                )
            )
            return Rollup(
                policy=policy,
                term=term,
                version=version,
                tentative=tentative,
                partial=partial,
                coverage=coverage,
                lacking=lacking,
                accuracy=accuracy,
                late_records=late,
                job=rt.name,
                tree=rt.tree_list.index(tid),
                trees=len(rt.tree_list),
                epoch=epoch,
                epoch_seconds=spec.schedule.seconds_of(epoch),
                start_time=spec.schedule.start(epoch) if spec.epoch_schedule else None,
                rows=pairs,
                named_rows=named,
                key_names=self.key_names,
                value_names=self.value_names,
                completed_at=completed_at,
            )

        self.writer.submit(build, fenced=self._on_fenced(tid, epoch, term))
        rt.count("lake_submitted")

    def sessions(
        self, tid: int, epoch: int, rows: Sequence[dict[str, Any]], version: int = 1
    ) -> None:
        """Queue the rows of the sessions ``epoch`` closed (module contract: **Sessions**)
        for the lake, as the job ``sessions_job(name)``, as ``version`` (a later one when the
        master flagged them since: late records); a fenced write is counted
        (``lake_fenced_session_writes``): the epoch's own file says the rest."""
        rt = self.runtime
        result = rt.store.get(tid, epoch)
        if result is None or tid not in rt.tree_list:
            return
        _, tentative, coverage, lacking = result_version(result)
        term, spec = int(getattr(result, "term", 0) or 0), rt.spec
        named = [dict(r) for r in rows]  # as they are now (the master may flag them later)

        from spark_sink.lake import Rollup

        def build() -> Rollup:
            return Rollup(
                policy=result.policy,
                term=term,
                version=version,
                tentative=tentative,
                partial=bool(getattr(result, "partial", False)),
                coverage=coverage,
                lacking=lacking,
                job=sessions_job(rt.name),
                tree=0,
                trees=1,
                epoch=epoch,
                epoch_seconds=spec.schedule.seconds_of(epoch),
                start_time=spec.schedule.start(epoch) if spec.epoch_schedule else None,
                rows=[],
                named_rows=named,
                completed_at=result.completed_at,
            )

        def fenced(exc: FencedWrite) -> None:
            rt.count("lake_fenced_session_writes")

        self.writer.submit(build, fenced=fenced)
        rt.count("lake_session_submitted")

    def _on_fenced(self, tid: int, epoch: int, term: int) -> Callable[[FencedWrite], None]:
        """The writer thread's callback for a fenced write of (tree, epoch): handled on the
        event loop this epoch was handed over from (there is none in synchronous use)."""
        try:
            loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            loop = None

        def fenced(exc: FencedWrite) -> None:
            if loop is None:
                self._fenced(tid, epoch, term, exc.newer_term)
                return
            with contextlib.suppress(RuntimeError):  # the loop is closed: the agent stopped
                loop.call_soon_threadsafe(self._fenced, tid, epoch, term, exc.newer_term)

        return fenced

    def _fenced(self, tid: int, epoch: int, term: int, newer_term: int) -> None:
        rt = self.runtime
        rt.count("lake_fenced_writes")
        self._log.warning(
            f"fenced {rt.name}",
            "lake: job %s tree %x epoch %d not written: its term %d is fenced by term %d in "
            "the lake (a newer master publishes this epoch)",
            rt.name,
            tid,
            epoch,
            term,
            newer_term,
        )
        hook = getattr(rt, "lake_fenced", None)  # optional until the runtime implements it
        if hook is not None:
            hook(tid, epoch, newer_term)

    async def history(self, tid: int, epoch: int) -> dict[str, Any] | None:
        """Tree ``tid``'s result for ``epoch`` read back from the lake (off the loop,
        bounded), as ``local_results`` reports a tree's part; None if the lake has none."""
        rt = self.runtime
        if tid not in rt.tree_list:
            return None
        if self._history is None:
            self._history = LakeHistory(str(self.location), rt.name, count=rt.count)
        return await self._history.tree_epoch(
            rt.tree_list.index(tid), len(rt.tree_list), epoch, rt.spec.schedule.start(epoch)
        )

    @property
    def writer(self) -> LakeWriter:
        """The process-wide writer, opened on first use (:func:`sink_for`)."""
        if self._writer is None:
            assert self._open_writer is not None
            self._writer = self._open_writer()
        return self._writer

    async def flush(self) -> None:
        """Wait (off the loop, bounded) for queued rollups to be written or buffered."""
        if self._writer is None:
            return  # nothing was ever handed to it
        done = await asyncio.to_thread(self.writer.flush, self.stop_flush_seconds)
        if not done:
            log.warning(
                "lake: %s stopping with rollups still queued or buffered: %s",
                self.runtime.name,
                self.writer.stats(),
            )

    def stats(self) -> dict[str, Any]:
        if self._writer is None:
            return {"opened": False, "queued": 0, "pending": 0, "last_error": None}
        return {"opened": True, **self._writer.stats()}


#: what a job's session rows are written under in the lake (``~`` is never in a job name)
SESSIONS_SUFFIX = "~sessions"


def sessions_job(name: str) -> str:
    """The lake's job name for the sessions job ``name`` closes (module contract)."""
    return name + SESSIONS_SUFFIX


def lake_sketches(snap: Snapshot, pairs: Sequence[tuple[Any, Any]]) -> list[Any] | None:
    """Per pair, the DataSketches binaries of its key's sketch aggregates
    (``cbt.sketches.sketch_binaries``), or None when the job's aggregator holds no sketch: the
    lake keeps them beside the estimates (``<column>_sketch``, docs/spark-sink.md)."""
    from cbt.sketches import holds_sketches, sketch_binaries

    agg = snap.agg
    if not holds_sketches(agg):
        return None
    return [sketch_binaries(agg, snap.state(k)) for k, _ in pairs]


def result_version(result: EpochResult) -> tuple[int, bool, float, tuple[str, ...]]:
    """(version, tentative, coverage, lacking) of a stored result (module contract); results
    from before the master tracked them are final, complete, version 1 + late folds."""
    version = int(getattr(result, "version", 1) or 1)
    version = max(version, 1 + len(result.late_names))
    tentative = bool(getattr(result, "tentative", False))
    coverage = float(getattr(result, "coverage", 1.0))
    lacking = tuple(str(x) for x in getattr(result, "lacking", ()) or ())
    return version, tentative, coverage, lacking


def sink_for(
    runtime: EpochSource,
    target: LakeTarget | None,
    *,
    tunables: RuntimeTunables = _DEFAULTS,
) -> LakeSink | None:
    """The job's lake sink on ``target`` (the process-wide writer), or None without a lake."""
    if target is None:
        return None

    def open_writer() -> LakeWriter:
        return writer_for(target.location, target.buffer_dir, tunables)

    # rollups an earlier run left buffered are written now (the writer drains them); else
    # the writer opens with this agent's first lake write for the job
    buffered = Path(target.buffer_dir)
    writer = open_writer() if buffered.is_dir() and any(buffered.glob("*.parquet")) else None
    return LakeSink(
        runtime,
        writer or open_writer,
        stop_flush_seconds=tunables.stop_flush_seconds,
        location=target.location,
    )
