"""One job on one agent: its worker, forwarder and master roles over the job's m trees.

Contract (see ``docs/agent-runtime.md``):

* **Worker** (the agent has one of the job's inputs): records → ``Job.map`` → per-epoch CBT
  (:class:`~agent.runtime.epochs.worker.Worker`); each closed epoch's snapshot is split by
  key-hash range into the m tree partitions and offered to each tree's barrier as the local
  contribution (:mod:`agent.runtime.job.pipeline`).
* **Forwarder / master**: per tree an :class:`~srt.dataplane.barrier.EpochCombiner` merges the
  local snapshot with every child's for an epoch (:mod:`agent.runtime.job.trees`), then sends
  the epoch to the parent (:class:`~srt.dataplane.upstream.UpstreamSender`, kept until
  acknowledged) or — at the root — stores it as the epoch's result and runs the job's master
  hooks (result, feedback multicast for iterative jobs, "empty" multicast for synchronous
  batches).
* **Fault tolerance** — late contributions, the results passed to a new master, what a
  result lacks, the standby, who the origins are — is :attr:`JobRuntime.recovery`
  (:class:`~agent.runtime.recovery.recovery.Recovery`): the runtime and its parts tell it
  what happens on this path (an own epoch closed, a result stored, an epoch already emitted
  here, the root role gained or lost) and it reaches the runtime through a narrow host.
* **Peers are checked** before anything of theirs touches state
  (:mod:`agent.runtime.job.trees`): every snapshot a peer sends must be of one of the job's
  trees, within the barrier's epoch bounds (503 ``epoch_ahead``) and match the expectation
  for its epoch (the aggregator of the job instance that reduces it, the key schema), else
  409 ``incompatible``, counted and logged.
* **Bounds** (``RuntimeTunables``): the master's results are held within
  ``result_memory_bytes`` per job — older epochs are spilled (compressed snapshot bytes) to
  ``<data_dir>/results`` (a temp directory without one) off the event loop and read back on
  demand, within ``result_spill_bytes``; an epoch dropped by a bound is answered 410 with the
  reason (:class:`~agent.runtime.results.store.ResultStore`). The worker's open epochs share
  ``worker_memory_bytes`` of resident compressed CBT buffers (the rest spills to
  ``<data_dir>/spill``). :meth:`JobRuntime.stop` then :meth:`JobRuntime.release` free
  everything the job holds: results, spill files, barriers, senders and the worker's trees.

**A facade over named parts** (like Flink's ``TaskManagerServices``), each in its own module
of ``agent/runtime/job/`` and given only the narrow :class:`~agent.runtime.job.host.JobHost`
view of this runtime: ``pipeline`` (:mod:`~agent.runtime.job.pipeline`), ``trees``
(:mod:`~agent.runtime.job.trees`), ``control`` (multicasts and ``send_to``,
:mod:`~agent.runtime.job.control`), ``changes`` (runtime changes,
:mod:`~agent.runtime.job.spec_changes`), ``queries`` (results serving,
:mod:`~agent.runtime.job.queries`), ``report`` (status and timings,
:mod:`~agent.runtime.job.report`), ``taps`` (live samples of its records,
:mod:`~agent.runtime.job.tap`) and ``context`` (the job's
:class:`~agent.jobs.job.JobContext`, :mod:`~agent.runtime.job.context`). The agent reaches
them by name (``runtime.queries.results(...)``); this class keeps the life cycle and the core
calls (``work``, ``deliver``, ``status``, ``roles``, ...); the parts reach fault tolerance
only through :class:`~agent.runtime.job.host.RecoveryHooks`.

A runtime reaches its agent only through the narrow services of ``agent/runtime/services.py``
(network and trees, job table, inputs, background tasks, the record executor) and reads its
timings from :class:`~agent.tunables.RuntimeTunables`; the agent passes both in.

**Threads.** The worker's state (``Worker``, the job's ``map``, its CBTs) is touched only on the
agent's record thread (:mod:`agent.runtime.record_thread`): :meth:`JobRuntime.work` (records in,
closed epochs out) runs there, as do the worker side of runtime changes and control messages;
everything else — barriers, senders, the master's store and hooks — stays on the event loop
(:meth:`JobRuntime.deliver`). The loop reads the worker only through a copy the record thread
publishes (``pipeline.worker_stats()``). A runtime built without an agent runs them inline.
The job's CPU budget is the pipeline's (:mod:`agent.runtime.job.pipeline`).
"""

from __future__ import annotations

import inspect
import logging
import math
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from agent.jobs.job import Job, create_job, maybe_await
from agent.jobs.spec import JobSpec
from agent.jobs.table import JobEntry
from agent.runtime.epochs.clock import EpochClock
from agent.runtime.epochs.late import LateRecords, late_dead_letter
from agent.runtime.epochs.worker import Worker
from agent.runtime.job.context import RuntimeContext
from agent.runtime.job.control import JobControl
from agent.runtime.job.host import is_root, tree_view
from agent.runtime.job.late_reports import LateReporter
from agent.runtime.job.pipeline import EpochPipeline
from agent.runtime.job.queries import ResultQueries
from agent.runtime.job.report import JobReport
from agent.runtime.job.spec_changes import SpecChanges, operator_for
from agent.runtime.job.trees import TreeLinks
from agent.runtime.memory_budget import Held, MemoryConsumer
from agent.runtime.record_thread import InlineRecords
from agent.runtime.recovery.offsets import TreeOutflow
from agent.runtime.recovery.recovery import Recovery
from agent.runtime.results.lake_sink import LakeTarget, sink_for, warm_imports
from agent.runtime.results.late_ledger import LateLedger
from agent.runtime.results.previews import Previews
from agent.runtime.results.spill import ResultSpill
from agent.runtime.results.store import ResultStore
from agent.runtime.services import (
    NO_OBSERVER,
    EpochObserver,
    InputService,
    JobTableService,
    NetworkService,
    RecordExecutor,
    Spawner,
)
from agent.tunables import RuntimeTunables
from cbt import Snapshot
from srt import EpochCombiner, SnapshotName, UpstreamSender, app_id, tree_ids
from srt.dataplane.lineage import Lineage
from srt.trees.types import JoinTimeout

log = logging.getLogger(__name__)


def _worker_for(
    job: Job, inputs: list[str], tunables: RuntimeTunables, data_dir: str | None, origin: int
) -> Worker | None:
    """The job's worker here (None: this agent has none of the job's inputs); its late
    records are sampled to ``<data_dir>/deadletter/late/<job>.jsonl``."""
    if not inputs:
        return None
    spill = str(Path(data_dir) / "spill") if data_dir else None
    name = job.spec.name
    dead = late_dead_letter(data_dir, name) if data_dir else None
    late = LateRecords(name, format(origin, "x"), dead_letter=dead)
    return Worker(job, memory_budget_bytes=tunables.worker_memory_bytes, spill_dir=spill, late=late)


def _store_for(name: str, tunables: RuntimeTunables, data_dir: str | None) -> ResultStore:
    """The results a master of the job holds, within their bounds (module contract)."""
    results_dir = str(Path(data_dir) / "results") if data_dir else None
    return ResultStore(
        budget_bytes=tunables.result_memory_bytes,
        spill_budget_bytes=tunables.result_spill_bytes,
        # opened when first needed: most agents never master a given job
        spill_factory=lambda: ResultSpill(results_dir, name),
        job=name,
    )


class JobRuntime:
    """The roles of one job on one agent (see module contract).

    ``entry`` is the job-table entry to run; ``network``, ``job_table``, ``inputs`` and
    ``tasks`` are the agent's services (``agent/runtime/services.py``); ``lake`` is where
    the master's results go (None: no lake). Raises ``ValueError`` (or a job class's error)
    when the job cannot run here; the agent counts that and skips the job.
    """

    def __init__(
        self,
        entry: JobEntry,
        *,
        network: NetworkService,
        job_table: JobTableService,
        inputs: InputService,
        tasks: Spawner,
        tunables: RuntimeTunables | None = None,
        lake: LakeTarget | None = None,
        records: RecordExecutor | None = None,
        data_dir: str | None = None,
    ) -> None:
        self.network = network
        self.job_table = job_table
        self.input_service = inputs
        self.tasks = tasks
        self.records: RecordExecutor = records or InlineRecords()
        self.tunables = t = tunables or RuntimeTunables()
        # a restarted agent resumes past the epochs it passed on (recovery/offsets.py)
        self.spec = inputs.resume_spec(JobSpec.from_dict(entry.spec))
        self.name = self.spec.name
        self.version = entry.version  # of the job-table entry whose spec runs here
        self.job: Job = create_job(self.spec)
        self.app_id = app_id(self.spec.name, self.spec.creator)
        self.tree_list = tree_ids(self.app_id, self.spec.trees, self.spec.placement or 0)
        self.tree_set = set(self.tree_list)
        wanted = set(self.spec.inputs) if self.spec.inputs else inputs.input_names()
        self.inputs = sorted(wanted & inputs.input_names())
        self.worker = _worker_for(self.job, self.inputs, t, data_dir, network.node_id)
        self.operator = operator_for(self.job, self.spec)
        self.combiners: dict[int, EpochCombiner] = {}
        self.senders: dict[int, UpstreamSender] = {}
        self.store = _store_for(self.name, t, data_dir)
        self.counters: dict[str, int] = {}
        #: read-only hook: told of stored epochs and multicasts (the agent's metrics)
        self.observer: EpochObserver = NO_OBSERVER
        self._stopped = False
        # the named parts (agent/runtime/job/host.py), each with its own state
        self.context = RuntimeContext(self)
        self.trees = TreeLinks(self, emit=self._emit)
        self.pipeline, self.control = EpochPipeline(self), JobControl(self)
        #: the job's tap point (``elf tap``: live samples of its records; the pipeline's)
        self.taps = self.pipeline.taps
        #: as master: the late records the origins reported, per epoch (results' ``late``)
        self.late_ledger = LateLedger()
        self.changes, self.queries = SpecChanges(self), ResultQueries(self)
        self.pipeline.late_reports = LateReporter(
            self,
            master_url=self.queries.master_url,
            forget_master_url=self.queries.forget_master_url,
            local=self.accept_late_records,
        )
        self.report = JobReport(self)
        self.job.bind(self.context)
        #: all fault tolerance (agent/runtime/recovery/); it reaches this runtime only
        #: through _Host
        self.recovery = _recovery_for(self, JobSpec.from_dict(entry.spec), data_dir)
        self.lake = sink_for(self, lake, tunables=t)  # None unless the agent has a lake
        self.previews = _previews_for(self)

    def count(self, what: str, n: int = 1) -> None:
        self.counters[what] = self.counters.get(what, 0) + n

    def seen_epoch(self) -> int | None:
        """The newest epoch of any record offered to this job's worker (None: none yet)."""
        clock = self.clock
        if clock is None or clock.max_seen_time == -math.inf:
            return None
        return clock.epoch_of(clock.max_seen_time)

    @property
    def stopped(self) -> bool:
        """True from the moment :meth:`stop` began: the job takes no new work."""
        return self._stopped

    # ---- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> None:
        trees = self.network.trees
        assert trees is not None
        await self.recovery.start(origin=self.worker is not None)
        if self.worker is None:
            return
        # the agent's clock may be on its slow idle period (no job ran here): tick now
        self.input_service.tick_now(self.inputs)
        for tid in self.tree_list:
            self.ensure_tree(tid)
            try:
                await trees.join(tid, job=self.name, subscriber=True)
            except JoinTimeout:  # the tree manager keeps trying; its callbacks finish the job
                self.count("join_timeouts")
                continue
            self.parent_changed(tid)
            self.children_changed(tid)
            if is_root(self, tid) and not self.recovery.is_rooted(tid):
                # root before this runtime existed (a peer's join made this agent the tree's
                # root while the job was being installed here): the event was missed
                self.root_changed(tid, True)

    async def stop(self, graceful: bool) -> None:
        self._stopped = True
        self.recovery.close()
        self.previews.close()
        trees = self.network.trees
        if graceful and trees is not None:  # results to a successor; an origin says its end
            await self.recovery.stopping(origin=self.worker is not None)
        if trees is not None:
            for tid in self.tree_list:
                if trees.view(tid) is not None:
                    try:
                        await trees.leave(tid)
                    except Exception as exc:  # leaving is best effort; the tree repairs itself
                        log.info("leaving tree of %s failed: %r", self.name, exc)
        for sender in self.senders.values():
            await sender.close()
        if self.lake is not None:
            await self.lake.flush()

    async def release(self) -> None:
        """After :meth:`stop` (and after the agent read the job's final outflow for its
        offsets): free what the stopped job holds (issue 13: a stopped job freed nothing): stored
        results and their spill files, early contributions, barriers, senders, the worker's
        open epochs and their spill files, recent bookkeeping. The worker is closed on the
        record thread, after any work already submitted for it (only that thread touches it)."""
        self.store.close()
        self.combiners.clear()
        self.senders.clear()
        if self.worker is not None:
            await self.records.run(self.worker.close)
        self.pipeline.sent_at.clear()
        self.control.release()
        self.queries.release()
        await self.recovery.release()

    async def call_job(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run a job-class hook without holding the event loop: a plain (synchronous) hook runs
        on the record thread, after the records submitted before it and never beside the
        job's ``map``; a coroutine hook runs on the loop, where it awaits other services
        (it yields while it waits) — a coroutine that computes for long without awaiting is
        the job author's bug, documented in docs/agent-jobs.md."""
        if inspect.iscoroutinefunction(fn):
            return await fn(*args)
        return await maybe_await(await self.records.run(fn, *args))

    # ---- the core calls, on the parts (agent/runtime/job/) -----------------------------------

    def work(self, batches: dict[str, list[dict[str, Any]]]) -> list[tuple[int, list[Snapshot]]]:
        """Record thread: records in, closed epochs out (:meth:`EpochPipeline.work`)."""
        return self.pipeline.work(batches)

    def deliver(self, closed: list[tuple[int, list[Snapshot]]], now: float) -> None:
        """Event loop: closed epochs to the trees (:meth:`EpochPipeline.deliver`)."""
        self.pipeline.deliver(closed, now)

    def tick_due(self, now: float) -> float:
        """Record thread: when this job needs its next tick if no record arrives
        (:meth:`EpochPipeline.tick_due`)."""
        return self.pipeline.tick_due(now)

    def backlog_full(self) -> bool:
        """Whether the job's records waiting for its CPU budget reached their bound (the
        agent then leaves the inputs it reads unpolled; :class:`EpochPipeline`)."""
        return self.pipeline.backlog_full()

    def ensure_tree(self, tid: int) -> EpochCombiner:
        """The barrier of tree ``tid``, built when first needed (:class:`TreeLinks`)."""
        return self.trees.ensure_tree(tid)

    def parent_changed(self, tid: int) -> None:
        """The tree manager's callback (:meth:`TreeLinks.parent_changed`)."""
        self.trees.parent_changed(tid)

    def children_changed(self, tid: int) -> None:
        """The tree manager's callback (:meth:`TreeLinks.children_changed`)."""
        self.trees.children_changed(tid)

    def child_moved(self, tid: int, child: int) -> None:
        """A child left or moved to another parent (alive): a pin kept for it while its
        replicated position was served ends (:meth:`TreeLinks.unpin_child`)."""
        self.trees.unpin_child(tid, child)

    def job_for(self, epoch: int) -> Job:
        """The job instance whose aggregate ``epoch`` was reduced with (:class:`SpecChanges`)."""
        return self.changes.job_for(epoch)

    @property
    def clock(self) -> EpochClock | None:
        """The worker's event-time clock; None when this agent has no input of the job."""
        return self.report.clock

    def outflow(self) -> list[TreeOutflow] | None:
        """Where each of the job's trees stands here (:meth:`JobReport.outflow`)."""
        return self.report.outflow()

    @property
    def is_master(self) -> bool:
        """Whether this agent is the root of the job's first tree now."""
        return self.report.is_master

    def roles(self) -> list[str]:
        """This agent's roles in the job: worker, forwarder, master."""
        return self.report.roles()

    def memory_consumers(self) -> list[MemoryConsumer]:
        """What this job holds within the agent's memory budget (each bound by its own
        tunable, its cap): the master's resident results (spilled past their limit), the
        worker's resident compressed buffers (spilled), fault tolerance's retained epochs
        (shed). ``agent/runtime/memory_budget.py``."""
        t, store, worker = self.tunables, self.store, self.worker
        consumers: list[MemoryConsumer] = [
            Held(
                f"results of job {self.name}",
                "spill",
                t.result_memory_bytes,
                lambda: store.resident_bytes,
                self._limit_results,
            )
        ]
        if worker is not None:
            consumers.append(
                Held(
                    f"worker buffers of job {self.name}",
                    "spill",
                    t.worker_memory_bytes,
                    worker.memory_bytes,
                    worker.set_memory_budget,
                )
            )
        return consumers + self.recovery.memory_consumers()

    def _limit_results(self, limit: int) -> None:
        self.store.set_budget(limit)
        if not self._stopped:
            self.pipeline.bound_results()

    def status(self) -> dict[str, Any]:
        """The job's status here (:meth:`JobReport.status`)."""
        return self.report.status()

    # ---- the root role and the results path (fault tolerance: self.recovery) -----------------

    def root_changed(self, tid: int, is_root: bool) -> None:
        """The tree manager's callback: this agent became (or stopped being) ``tid``'s root."""
        self.ensure_tree(tid)
        if is_root and self.recovery.is_rooted(tid):
            return  # already the root here (the missed-event path of start() ran first)
        if not is_root:
            self.recovery.lost_root(tid)  # the new master publishes what it takes over
        self.parent_changed(tid)
        if is_root:
            if self.lake is not None:
                warm_imports()  # a master writes the lake: its modules load off the loop
            self.recovery.became_root(tid)
            if tid == self.tree_list[0] and self.store.term_of(tid) > 1:
                # another master took the late reports before: their counts are unknown here
                self.late_ledger.unknown_before(self.spec.schedule.epoch_of(time.time()) + 1)

    def accept_late_records(self, origin: str, epochs: Mapping[int, Mapping[str, int]]) -> bool:
        """An origin's late-record report (agent/runtime/job/late_reports.py): into the
        ledger behind each epoch's ``late`` field (agent/runtime/results/late_ledger.py).
        False, and nothing counted, when this agent is not the job's master (any more)."""
        if not self.is_master:
            return False
        added = self.late_ledger.add(origin, epochs)
        self.count("late_reports")
        # a job whose state derives from results flags it too (WINDOW SESSION); the others
        # cost no hop to the record thread per report
        if added and type(self.job).on_late_records is not Job.on_late_records:
            self.tasks.spawn(self._late_to_job(added), f"{self.name} late records")
        return True

    async def _late_to_job(self, added: dict[int, int]) -> None:
        """The job's ``on_late_records`` for each epoch whose late count grew (its total, or
        what this report added where the total is unknown here); the closed windows it
        flagged go to the lake again, as new versions."""
        for epoch, more in added.items():
            if n := self.late_ledger.records(epoch) or more:
                job = self.changes.job_for(epoch)
                revised = await self.call_job(job.on_late_records, epoch, n)
                for closed_at in revised if isinstance(revised, list) else ():
                    if isinstance(closed_at, int):
                        revise = self.pipeline.sessions_to_lake
                        revise(self.changes.job_for(closed_at), closed_at, revised=True)

    def late_records(self, epoch: int) -> int | None:
        """As master: the late records reported for ``epoch`` so far - a window's: those of
        its panes (``JobSpec.window_bounds``) - (None: forgotten)."""
        return self.late_ledger.records(*(self.spec.window_bounds(epoch) or (epoch, epoch)))

    def lake_fenced(self, tid: int, epoch: int, newer_term: int) -> None:
        """The lake holds a newer term's version of (tree, epoch) (results/lake_sink.py)."""
        self.recovery.lake_fenced(tid, epoch, newer_term)

    def preview_stored(self, tid: int, epoch: int, result: Any) -> None:
        """A tentative preview was stored (agent/runtime/results/previews.py): counted, to the
        lake as any tentative version; no job hook."""
        self.count("tentative_previews")
        self.recovery.publish(tid, epoch)
        self.pipeline.bound_results()

    def _emit(self, tid: int, epoch: int, snap: Snapshot) -> None:
        """A barrier's epoch: at the root, stored as the result (or folded in, when a previous
        master handed it over first); elsewhere sent to the parent."""
        if self._stopped:
            return
        lineage = self.combiners[tid].lineage_of(epoch)
        if is_root(self, tid):
            me = self.network.node_id
            if self.recovery.route_replica(tid, me, epoch, snap, lineage) is None:
                self.store_root(tid, epoch, snap, lineage)  # else: the replica's, as a member
            return
        self.pipeline.send_up(tid, epoch, snap, lineage)

    def store_root(self, tid: int, epoch: int, snap: Snapshot, lineage: Lineage | None) -> None:
        """As the root: an epoch's result stored (or folded in, when a previous master handed
        it over first)."""
        if self._stopped:
            return
        if self.store.peek(tid, epoch) is None and self.recovery.committed_duplicate(
            SnapshotName(self.name, tid, epoch, self.network.node_id), lineage
        ):
            return  # a restart re-read an epoch a master committed: the lake's version stands
        expected, doubtful = self.recovery.expected(epoch)
        stored_at = time.time()
        if self.store.put(
            tid, epoch, snap, stored_at, origins=lineage, expected=expected, doubtful=doubtful
        ):
            self.observer.epoch_stored(self.name, self.spec.schedule.end(epoch), stored_at)
            self.recovery.epoch_stored(tid, epoch, lineage)
            self.tasks.spawn(self.pipeline.master_epoch(tid, epoch, snap), f"{self.name} result")
            self.previews.stored(tid, epoch)
        else:
            # The epoch is stored already: a previous master handed it over before our
            # barrier got here (a restarted master re-reading the epochs it missed while
            # dead). What we add is a late contribution, folded in by lineage - dropped,
            # the result would lack our origin for good.
            self.count("emitted_after_handover")
            name = SnapshotName(self.name, tid, epoch, self.network.node_id)
            self.recovery.fold_in(name, snap, lineage)


def _recovery_for(rt: JobRuntime, submitted: JobSpec, data_dir: str | None) -> Recovery:
    """The job's fault tolerance; ``submitted`` is the spec before ``resume_spec`` moved its
    start (the job's identity across restarts)."""
    return Recovery(
        _Host(rt),
        network=rt.network,
        tasks=rt.tasks,
        tunables=rt.tunables,
        store=rt.store,
        app_id=rt.app_id,
        identity=[submitted.name, submitted.creator, submitted.start_epoch],
        data_dir=data_dir,
    )


def _previews_for(rt: JobRuntime) -> Previews:
    """As master: tentative previews of held-up epochs, and their timeline."""
    spec = lambda: rt.spec  # noqa: E731 - a runtime change replaces the spec
    return Previews(
        rt.name,
        rt.store,
        combiner=rt.combiners.get,
        is_root=lambda tid: is_root(rt, tid),
        deadline_for=lambda epoch: spec().tentative_deadline_for(epoch),
        closes_at=lambda epoch: spec().schedule.end(epoch) + spec().allowed_lateness,
        seconds_of=lambda epoch: spec().schedule.seconds_of(epoch),
        expected=rt.recovery.expected,
        on_stored=rt.preview_stored,
    )


class _Host:
    """The :class:`~agent.runtime.recovery.host.RecoveryHost` a runtime gives its
    :class:`~agent.runtime.recovery.recovery.Recovery`: the job as fault tolerance sees it."""

    def __init__(self, runtime: JobRuntime) -> None:
        self._rt = runtime
        self.name = runtime.name
        self.tree_list = runtime.tree_list

    @property
    def spec(self) -> JobSpec:
        return self._rt.spec

    @property
    def stopped(self) -> bool:
        return self._rt.stopped

    @property
    def is_origin(self) -> bool:
        return self._rt.worker is not None

    @property
    def has_lake(self) -> bool:
        return self._rt.lake is not None

    @property
    def previews(self) -> Previews:
        return self._rt.previews

    def is_root(self, tid: int) -> bool:
        return is_root(self._rt, tid)

    def known_tree(self, tid: int) -> None:
        self._rt.trees.known_tree(tid)

    def ensure_tree(self, tid: int) -> EpochCombiner:
        return self._rt.ensure_tree(tid)

    def barrier(self, tid: int) -> EpochCombiner | None:
        return self._rt.combiners.get(tid)

    def take_queued(self, tid: int, upto: int | None = None) -> list[tuple[int, bytes]]:
        return self._rt.senders[tid].take_queued(upto)

    def count(self, what: str, n: int = 1) -> None:
        self._rt.count(what, n)

    async def multicast(self, tid: int, message: dict[str, Any]) -> Any:
        return await self._rt.control.multicast(tid, message)

    async def master_url(self, tid: int) -> str:
        return await self._rt.queries.master_url(tid)

    def forget_master_url(self, tid: int, exc: BaseException | None = None) -> None:
        self._rt.queries.forget_master_url(tid, exc)

    async def replay_result(
        self, epoch: int, snap: Snapshot, quality: tuple[str, list[str]] | None = None
    ) -> None:
        rt = self._rt
        job = rt.job_for(epoch)
        if quality is not None:
            await rt.call_job(job.on_epoch_quality, epoch, *quality)
        await rt.call_job(job.on_epoch_result, epoch, snap)
        rt.pipeline.sessions_to_lake(job, epoch)

    def bound_results(self) -> None:
        self._rt.pipeline.bound_results()

    def lake_epoch(self, tid: int, epoch: int) -> None:
        lake = self._rt.lake
        if lake is not None:
            lake.epoch(tid, epoch)

    def seen_epoch(self) -> int | None:
        return self._rt.seen_epoch()

    def parent_of(self, tid: int) -> int | None:
        view = tree_view(self._rt, tid)
        parent = getattr(view, "parent", None)
        return None if parent is None else parent.id

    def parent_url_of(self, tid: int) -> str | None:
        view = tree_view(self._rt, tid)
        return None if view is None else view.parent_url

    def child_urls(self, tid: int) -> dict[int, str]:
        view = tree_view(self._rt, tid)
        return {} if view is None else dict(view.child_urls)

    def child_domains(self, tid: int) -> dict[int, str]:
        view = tree_view(self._rt, tid)
        return {} if view is None else {c: n.domain for c, n in view.children.items()}

    async def acked_up(self, tid: int, epoch: int, timeout: float) -> bool:
        return await self._rt.senders[tid].acked_past(epoch, timeout)

    def new_barrier(
        self, tid: int, emit: Callable[[int, Snapshot], None], first_epoch: int | None = None
    ) -> EpochCombiner:
        return self._rt.trees.new_barrier(tid, emit, floating=True, first_epoch=first_epoch)

    def store_root(self, tid: int, epoch: int, snap: Snapshot, origins: Lineage | None) -> None:
        self._rt.store_root(tid, epoch, snap, origins)

    def pin_children(self, tid: int, members: Iterable[int], seconds: float) -> None:
        self._rt.trees.pin_children(tid, members, seconds)

    def unpin_child(self, tid: int, member: int) -> None:
        self._rt.trees.unpin_child(tid, member)
