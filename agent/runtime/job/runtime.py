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
* **Late contributions** — a snapshot for an epoch its receiver already emitted (a child that
  joined or moved mid-epoch) — bypass the tree and go straight to the tree's master, which
  folds them into that epoch once per origin; results stay exact and the epoch is marked
  ``updated``.
* **Hand-over**: a master that loses the root role (a closer agent joined, or it stops)
  sends its stored results to the new master over the data plane.
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
:mod:`~agent.runtime.job.status`) and ``context`` (the job's
:class:`~agent.jobs.job.JobContext`, :mod:`~agent.runtime.job.context`). The agent reaches
them by name (``runtime.queries.results(...)``); this class keeps the life cycle and the core
calls (``work``, ``deliver``, ``status``, ``roles``, ...), and the fault tolerance, which the
parts reach only through :class:`~agent.runtime.job.host.RecoveryHooks`.

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

import asyncio
import base64
import inspect
import logging
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from agent.jobs.job import Job, create_job, maybe_await
from agent.jobs.spec import JobSpec
from agent.jobs.table import JobEntry
from agent.runtime.epochs.clock import EpochClock
from agent.runtime.epochs.window_panes import whole_share
from agent.runtime.epochs.worker import Worker
from agent.runtime.job.context import RuntimeContext
from agent.runtime.job.control import JobControl
from agent.runtime.job.pipeline import EpochPipeline
from agent.runtime.job.queries import ResultQueries
from agent.runtime.job.spec_changes import SpecChanges, operator_for
from agent.runtime.job.status import JobReport
from agent.runtime.job.trees import TreeLinks
from agent.runtime.record_thread import InlineRecords
from agent.runtime.recovery.absence import Absence
from agent.runtime.recovery.checkpoints import CheckpointSender
from agent.runtime.recovery.fencing import MasterTerms
from agent.runtime.recovery.loss import OriginLoss
from agent.runtime.recovery.membership import Membership
from agent.runtime.recovery.offsets import TreeOutflow, write_atomically
from agent.runtime.recovery.retention import RetainedEpochs
from agent.runtime.recovery.standby import Replica, ReplicationLog, standby_for
from agent.runtime.results.lake_sink import LakeTarget, sink_for
from agent.runtime.results.previews import TentativePreviews
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
from overlay.logbudget import LogBudget
from srt import DataPlaneError, EpochCombiner, SnapshotName, UpstreamSender, app_id, tree_ids
from srt.dataplane.lineage import Lineage, counted, describe
from srt.dataplane.lineage import decode as lineage_of
from srt.dataplane.lineage import encode as with_lineage
from srt.errors import Reject
from srt.trees.types import JoinTimeout

log = logging.getLogger(__name__)

REPAIR_BATCH = 16  # epochs asked of one origin per repair request
REPLICA_BATCH = 32  # epochs sent to the standby per replication request
HANDOVER_ATTEMPTS = 30  # ~1 min with back-off
LEAVE_TIMEOUT = 3.0  # a stopping origin's end declaration, per tree
MEMBERS_SHARED = 3  # the tree's closest agents a master shares its membership with
MEMBERS_SHARE_PERIOD = 5.0  # seconds between those shares (a new successor learns in time)


def _write_json(path: Path, body: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(path, orjson.dumps(body))


def _decode_snapshot(value: Any) -> Snapshot:
    if not isinstance(value, str):
        raise ValueError("snapshot must be base64 text")
    return Snapshot.from_bytes(base64.b64decode(value, validate=True))


def _worker_for(
    job: Job, inputs: list[str], tunables: RuntimeTunables, data_dir: str | None
) -> Worker | None:
    """The job's worker here (None: this agent has none of the job's inputs)."""
    if not inputs:
        return None
    spill = str(Path(data_dir) / "spill") if data_dir else None
    return Worker(job, memory_budget_bytes=tunables.worker_memory_bytes, spill_dir=spill)


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
        self.worker = _worker_for(self.job, self.inputs, t, data_dir)
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
        self.changes, self.queries = SpecChanges(self), ResultQueries(self)
        self.report = JobReport(self)
        self.job.bind(self.context)
        self._build_recovery(entry, data_dir)
        # None unless the agent has a rollup lake
        self.lake = sink_for(self, lake, tunables=self.tunables)

    def _build_recovery(self, entry: JobEntry, data_dir: str | None) -> None:
        """The job's fault tolerance (agent/runtime/recovery/; docs/fault-tolerance.md):
        its state and the hooks the parts call (:class:`_RecoveryHooks`). One block, so
        that ``recovery/``'s facade can replace it whole."""
        t = self.tunables
        #: as master: which origins each epoch should cover, and who is absent, left or
        #: retired (tentative vs final vs partial; membership.py, retirement.py)
        self.membership = Membership()
        self.absence = Absence(self.membership, self.store, _AbsenceHost(self))
        #: the fencing term of each tree this agent masters (fencing.py)
        self.fence = MasterTerms(t.master_settle_seconds)
        self.store.term_of = self.fence.term
        self.store.given_up_for = self._given_up_for
        self._data_dir = data_dir
        self._members_dirty = False
        self._members_writing = False
        submitted = JobSpec.from_dict(entry.spec)  # before resume_spec moved its start
        self._identity = [submitted.name, submitted.creator, submitted.start_epoch]
        #: per tree: the master's commit watermark as last heard (as master: our own)
        self.committed: dict[int, int] = {}
        #: as origin: our own snapshots of uncommitted epochs, for the master's repair
        self.retained = RetainedEpochs(self.name, t.retained_bytes)
        #: as origin: hot replicas of those snapshots on overlay neighbours (checkpoints.py)
        self.checkpoints = CheckpointSender(
            self.name,
            self.retained,
            self.network,
            replicas=lambda: self.spec.checkpoint_replicas,
            committed=self.committed.get,
            delay=t.checkpoint_delay,
            seen=self._seen_epoch,
            now_epoch=lambda: self.spec.schedule.epoch_of(time.time()),
        )
        #: as master: laggard probes, origins lost for good and their re-issue (loss.py)
        self.loss = OriginLoss(
            _LossHost(self),
            self.network,
            watch_interval=t.tick_seconds,
            suspect_after=t.laggard_probe_after,
            loss_timeout=t.loss_timeout,
        )
        self._repairing: set[int] = set()  # trees whose repair loop runs (as master)
        self._rooted: set[int] = set()  # trees whose becoming the root was handled here
        self._watching_absence = False
        #: as a likely next master: the current master's membership and term, per tree
        #: (shared with the tree's closest agents: a root that inherits no state learns who
        #: the origins are from it, even when the master and its standby died together)
        self._member_copies: dict[int, tuple[Any, int]] = {}
        self._members_shared_at = 0.0
        self._was_member: set[int] = set()  # trees in which this agent has had a parent
        #: epochs up to this one may miss records here: other jobs had read them from a
        #: shared input before this job started (see :meth:`started_after_others`)
        self.incomplete_until: int | None = None
        #: as master: what each tree's standby holds; as standby: the masters' replicas
        self.replication = ReplicationLog()
        self.replicas: dict[int, Replica] = {}
        self._replicating: set[int] = set()
        self._log = LogBudget(log)  # refusals of peer data: counted, logged within a budget
        self._standby_urls: dict[int, str] = {}  # the standby's node id → its data-plane URL
        self.hooks = _RecoveryHooks(self)
        #: as master: tentative previews of held-up epochs, and their timeline
        self.previews = TentativePreviews(
            self.name,
            self.store,
            combiner=self.combiners.get,
            is_root=self._is_root,
            deadline_for=lambda epoch: self.spec.tentative_deadline_for(epoch),
            closes_at=lambda epoch: self.spec.schedule.end(epoch) + self.spec.allowed_lateness,
            seconds_of=lambda epoch: self.spec.schedule.seconds_of(epoch),
            expected=lambda epoch: (
                self.membership.expected(epoch),
                self.membership.doubt is not None,
            ),
            on_stored=self._preview_stored,
        )

    def count(self, what: str, n: int = 1) -> None:
        self.counters[what] = self.counters.get(what, 0) + n

    def _seen_epoch(self) -> int | None:
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
        await self._load_origins()
        if self.worker is None:
            return
        self.tasks.spawn(self.checkpoints.run(), f"{self.name} checkpoints")
        for tid in self.tree_list:
            self.tasks.spawn(self._announce_origin(tid), f"{self.name} origin")
        for tid in self.tree_list:
            self.ensure_tree(tid)
            try:
                await trees.join(tid, job=self.name, subscriber=True)
            except JoinTimeout:  # the tree manager keeps trying; its callbacks finish the job
                self.count("join_timeouts")
                continue
            self.parent_changed(tid)
            self.children_changed(tid)
            if self._is_root(tid) and tid not in self._rooted:
                # root before this runtime existed (a peer's join made this agent the tree's
                # root while the job was being installed here): the event was missed
                self.root_changed(tid, True)

    async def stop(self, graceful: bool) -> None:
        self._stopped = True
        self.checkpoints.close()
        self.previews.close()
        trees = self.network.trees
        if graceful and trees is not None:
            for tid in self.tree_list:
                view = trees.view(tid)
                if view is not None and view.is_root and self.store.epochs(tid):
                    await self._hand_over_to_successor(tid)
            if self.worker is not None:  # an origin: declare its end (docs/fault-tolerance.md)
                await asyncio.gather(*(self._declare_leave(t) for t in self.tree_list))
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
        self.replicas.clear()
        path = self._origins_file()
        if path is not None:  # the job is over: who its origins were no longer matters
            await asyncio.to_thread(path.unlink, missing_ok=True)

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

    def status(self) -> dict[str, Any]:
        """The job's status here (:meth:`JobReport.status`)."""
        return self.report.status()

    # ---- bridge: what the fault-tolerance methods below call of the parts (once they live
    # in recovery/, its host calls the parts and this section goes) --------------------------

    async def _master_url(self, tid: int) -> str:
        return await self.queries.master_url(tid)

    def forget_master_url(self, tid: int, exc: BaseException | None = None) -> None:
        self.queries.forget_master_url(tid, exc)

    def _known_tree(self, tid: int) -> None:
        self.trees.known_tree(tid)

    def _bound_results(self) -> None:
        self.pipeline.bound_results()

    async def _multicast(self, tid: int, message: dict[str, Any]) -> Any:
        return await self.control.multicast(tid, message)

    # ---- fault tolerance (agent/runtime/recovery/) -------------------------------------------

    def root_changed(self, tid: int, is_root: bool) -> None:
        self.ensure_tree(tid)
        if is_root and tid in self._rooted:
            return  # already the root here (the missed-event path of start() ran first)
        if not is_root:
            self._rooted.discard(tid)
            self.fence.not_root(tid)  # the new master publishes what it takes over
            if self.store.epochs(tid):
                self.tasks.spawn(self._hand_over(tid), f"hand over {self.name}")
        self.parent_changed(tid)
        if is_root:
            self._rooted.add(tid)
            self.loss.watch(tid)
            was_member = tid in self._was_member
            took_over = self._take_over(tid)  # claims its term, settled, if it did
            copy = None if took_over else self._member_copies.pop(tid, None)
            if copy is not None:  # the old master's membership, as it shared it
                self.membership.restore(copy[0])
                self.fence.hear(tid, copy[1])
                self.count("member_copies_used")
            knew = bool(self.membership.members_set())
            if not took_over:
                self.fence.became_root(tid, time.time(), settled=False)
                self.tasks.spawn(self._settle(tid), f"{self.name} settle")
            log.info("job %s tree %x: master under term %d", self.name, tid, self.fence.term(tid))
            self._members_changed()  # the term is persisted beside the members
            if (was_member and copy is None and not took_over) or (
                not knew and not took_over and self._running_before()
            ):
                # others fed this tree before; which, this master may not know
                self.membership.doubt_until_told(self.network.node_id)
            self._keep_queued(tid)
            self._knowledge_gained(tid)
            self._watch_absence()

    def _running_before(self) -> bool:
        """This agent ran the job before (its read positions resumed it past the submitted
        start epoch: a restart): another agent may have been its master meanwhile. A job's
        first master - even of a job replaying history - resumed nothing."""
        submitted, resumed = self._identity[2], self.spec.start_epoch
        return submitted is not None and resumed is not None and resumed > submitted

    async def _settle(self, tid: int) -> None:
        """An unsettled master (fencing.py): publish what waited once it settles, if it is
        still the root then."""
        while not self._stopped:
            wait = self.fence.settle_in(tid, time.time())
            if wait is None:
                break
            await asyncio.sleep(wait)
        if self._stopped or not self._is_root(tid):
            return
        self._publish_deferred(tid)

    def _publish_deferred(self, tid: int) -> None:
        """This master settled: publish the lake writes that waited, each stamped first with
        the term it is published under (a hand-over may have raised it meanwhile)."""
        for epoch in sorted(self.fence.settle(tid, time.time())):
            self.store.assess(tid, epoch)
            self._publish(tid, epoch)

    def _publish(self, tid: int, epoch: int) -> None:
        """A version of (tree, epoch) to the lake - once this master has settled."""
        if self.lake is None:
            return
        if self.fence.settled(tid, time.time()):
            self.lake.epoch(tid, epoch)
        else:
            self.fence.defer(tid, epoch)

    def lake_fenced(self, tid: int, epoch: int, newer_term: int) -> None:
        """The lake holds a newer term's version of (tree, epoch) than ours: a master under
        that term exists (or existed). Still the root here: claim above it and publish again
        (the lake keeps the highest; each version says what it lacks)."""
        if self.fence.hear(tid, newer_term) and self._is_root(tid):
            term = self.fence.claim(tid)
            self.count("term_claims_after_fence")
            self._members_changed()
            log.warning(
                "job %s tree %x epoch %d: the lake holds term %d; still the root here, "
                "claiming term %d",
                self.name,
                tid,
                epoch,
                newer_term,
                term,
            )
            self.store.assess(tid, epoch)
            self._publish(tid, epoch)

    def _keep_queued(self, tid: int) -> None:
        """This agent became the tree's root (its master died or moved): the epochs it had
        emitted but not yet delivered to the old master are results now, not lost."""
        for epoch, payload in self.senders[tid].take_queued():
            origins, raw = lineage_of(payload)
            try:
                snap = Snapshot.from_bytes(raw)
            except Exception as exc:  # our own bytes: a bug, said loudly
                log.error(
                    "job %s epoch %d: own queued snapshot unreadable: %r", self.name, epoch, exc
                )
                continue
            self.count("queued_kept_as_root")
            self._fold_late(
                SnapshotName(self.name, tid, epoch, self.network.node_id), snap, origins
            )

    def _view(self, tid: int) -> Any:
        trees = self.network.trees
        return trees.view(tid) if trees is not None else None

    def _is_root(self, tid: int) -> bool:
        view = self._view(tid)
        return view is not None and view.is_root

    def _preview_stored(self, tid: int, epoch: int, result: Any) -> None:
        """A tentative preview was stored (agent/runtime/results/previews.py): counted, to the lake
        as any tentative version; no job hook, no replica, no commit."""
        self.count("tentative_previews")
        self._publish(tid, epoch)
        self._bound_results()

    # ---- the data path -----------------------------------------------------------------------
    def _emit(self, tid: int, epoch: int, snap: Snapshot) -> None:
        if self._stopped:
            return
        view = self._view(tid)
        lineage = self.combiners[tid].lineage_of(epoch)
        if view is not None and view.is_root:
            expected = self.membership.expected(epoch)
            doubtful = self.membership.doubt is not None
            stored_at = time.time()
            if self.store.put(
                tid, epoch, snap, stored_at, origins=lineage, expected=expected, doubtful=doubtful
            ):
                self.observer.epoch_stored(self.name, self.spec.schedule.end(epoch), stored_at)
                self._observe(epoch, lineage)
                self._report_missing(tid, epoch)
                self._replicate(tid)
                self._publish(tid, epoch)
                self.tasks.spawn(
                    self.pipeline.master_epoch(tid, epoch, snap), f"{self.name} result"
                )
                self._bound_results()
                self.previews.stored(tid, epoch)
            else:
                # The epoch is stored already: a previous master handed it over before our
                # barrier got here (a restarted master re-reading the epochs it missed while
                # dead). What we add is a late contribution, folded in by lineage - dropped,
                # the result would lack our origin for good.
                self.count("emitted_after_handover")
                name = SnapshotName(self.name, tid, epoch, self.network.node_id)
                self._fold_late(name, snap, lineage)
            return
        self.pipeline.send_up(tid, epoch, snap, lineage)

    def commit_watermark(self, tid: int) -> tuple[int | None, dict[int, int]]:
        """As master: the highest epoch C such that every stored epoch up to C is final or
        partial, or tentative lacking only origins declared absent (None if none) - and,
        for each such absent origin, the first epoch up to C it lacks: its own commit stays
        below that, so it re-sends those epochs when it comes back (docs/fault-tolerance.md,
        "Commit")."""
        absent = self.membership.absent().keys()
        watermark: int | None = None
        held: dict[int, int] = {}
        for epoch in self.store.epochs(tid):
            result = self.store.peek(tid, epoch)
            if result is not None and result.preview:
                break  # a preview never commits: the barrier's result replaces it
            if result is not None and result.tentative:
                waiting = result.missing - result.given_up
                if result.doubtful or not waiting <= absent:
                    break
                for origin in waiting:
                    held.setdefault(origin, epoch)
            watermark = epoch
        return watermark, held

    def _advance_commit(self, tid: int) -> None:
        """Move the tree's commit watermark and tell the tree (agents then let their read
        positions pass the committed epochs: agent/runtime/recovery/offsets.py). With a standby,
        only
        epochs whose current version it holds can be committed."""
        watermark, held = self.commit_watermark(tid)
        if watermark is not None and self._standby(tid) is not None:
            upto = self.replication.replicated_upto(tid, self.store.versions(tid))
            watermark = None if upto is None else min(watermark, upto)
        if watermark is None or watermark <= self.committed.get(tid, -1):
            return
        self.committed[tid] = watermark
        self.retained.commit(tid, watermark)
        self.count("commits")
        message = {
            "kind": "commit",
            "epoch": watermark,
            "term": self.fence.term(tid),
            "held": {format(o, "x"): e for o, e in held.items() if e <= watermark},
        }
        self.tasks.spawn(self._multicast(tid, message), f"{self.name} commit")

    def started_after_others(self, newest_read: float, inputs: list[str]) -> None:
        """Other jobs on this agent had already read ``inputs`` up to event time
        ``newest_read`` when this job started: its records of the epochs up to that one may
        be incomplete here. They are not contributed as this origin's (the master reports
        them tentative, lacking this agent) rather than counted partly and called whole."""
        if self.worker is None or self.spec.start_epoch is None:
            return
        last = self.spec.schedule.epoch_of(newest_read)
        if last < self.spec.start_epoch:
            return  # everything read so far is before this job's first epoch
        self.incomplete_until = last
        log.warning(
            "job %s: input(s) %s were already read up to event time %.3f by other jobs when "
            "it started here: epochs %d..%d are incomplete on this agent and not contributed "
            "as its own (the master reports them tentative, lacking this agent)",
            self.name,
            ", ".join(inputs),
            newest_read,
            self.spec.start_epoch,
            last,
        )

    # ---- who the origins are, across a master's restart ------------------------------------

    async def _announce_origin(self, tid: int) -> None:
        """Tell the tree's master this agent reads the job's input from its first epoch on,
        before any of its epochs can close: the master then expects it from that epoch, and a
        result that lacks it is tentative - even the job's first, even before the tree
        reached this agent. Retried (the master may not run the job yet) until it answered."""
        start = self.spec.start_epoch
        if start is None:
            return
        body = {
            "job": self.name,
            "tree": tid,
            "origin": f"{self.network.node_id:x}",
            "from": start,
            "url": self.network.data_url,  # the master probes and pulls it directly
        }
        delay = 0.1
        for _ in range(HANDOVER_ATTEMPTS):
            if self._stopped:
                return
            try:
                url = await self._master_url(tid)
                if url == self.network.data_url:
                    self.origin_joined(tid, self.network.node_id, start, self.network.data_url)
                else:
                    await self.network.client.post_json(url, "/agent/v1/origin", body)
                return
            except Exception as exc:
                self.forget_master_url(tid, exc)
                log.info("job %s: announcing this origin failed: %r; retrying", self.name, exc)
            await asyncio.sleep(delay)
            delay = min(2.0, delay * 2)
        self.count("origin_announce_failed")

    def origin_joined(self, tid: int, origin: int, start: int, url: Any = None) -> None:
        """As master (``POST /agent/v1/origin``): ``origin`` reads the job's input from
        epoch ``start`` on (its data-plane ``url``, if given, is where it is probed)."""
        self._known_tree(tid)
        self.loss.learn_url(origin, url)
        if self.membership.join(origin, start, time.time()):
            self.count("origins_announced")
            self._members_changed()
        view = self._view(tid)
        if view is not None and view.is_root:
            self._replicate(tid)

    def _given_up_for(self, epoch: int) -> Lineage:
        """Origins retired from a later epoch on: their absence from ``epoch`` is for good."""
        retired = self.membership.retired_before()
        return frozenset(o for o, first_out in retired.items() if epoch < first_out)

    def origin_left(self, tid: int, origin: int, through: int) -> bool:
        """As master (``POST /agent/v1/leave``): ``origin`` stopped gracefully after
        delivering its epochs up to ``through`` (retirement.py). True if it was expected."""
        self._known_tree(tid)
        left = self.absence.left(origin, through)
        for t in self.tree_list:
            if self._is_root(t):
                self._replicate(t)
        return left

    def retire_origin(self, origin: int, why: str) -> dict[str, Any]:
        """As master of the job: retire ``origin`` now (``elf retire``; retirement.py).
        Raises ``KeyError`` if it is not a member, ``LookupError`` if this agent masters
        none of the job's trees."""
        if not any(self._is_root(t) for t in self.tree_list):
            raise LookupError(f"this agent masters none of job {self.name!r}'s trees")
        return self.absence.retire(origin, why, time.time())

    def membership_status(self) -> dict[str, Any]:
        """As master: the absent, retired and left origins (empty elsewhere)."""
        if not any(self._is_root(t) for t in self.tree_list):
            return {"absent": [], "retired": [], "left": []}
        return self.membership.status(self.spec.retire_after)

    async def master_urls(self) -> list[str]:
        """The data-plane URLs of the job's masters (one per tree, deduplicated)."""
        urls = await asyncio.gather(*(self._master_url(t) for t in self.tree_list))
        return sorted(set(urls))

    def _watch_absence(self) -> None:
        """As master: one loop retiring origins silent for ``retire_after`` (retirement.py)."""
        if not self._watching_absence:
            self._watching_absence = True
            self.tasks.spawn(self._absence_loop(), f"{self.name} retire_after")

    async def _absence_loop(self) -> None:
        try:
            while not self._stopped and any(self._is_root(t) for t in self.tree_list):
                now = time.time()
                if now - self._members_shared_at >= MEMBERS_SHARE_PERIOD:
                    self._members_shared_at = now
                    for tid in self.tree_list:
                        if self._is_root(tid):
                            self.tasks.spawn(self._share_members(tid), f"{self.name} members")
                await asyncio.sleep(min(1.0, self.spec.retire_after / 4))
                self.absence.check(time.time())
        finally:
            self._watching_absence = False

    async def _share_members(self, tid: int) -> None:
        """As master: the membership and term to the tree's closest other agents - the next
        masters if this one and its standby die - so none of them becomes a root that does
        not know who the origins are (best effort, bounded: MEMBERS_SHARED agents)."""
        body = {
            "job": self.name,
            "tree": tid,
            "term": self.fence.term(tid),
            "membership": self.membership.export(),
        }

        async def send(node: Any) -> None:
            try:
                url = await asyncio.wait_for(self.network.data_url_of(node), LEAVE_TIMEOUT)
                await asyncio.wait_for(
                    self.network.client.post_json(url, "/agent/v1/members", body), LEAVE_TIMEOUT
                )
            except Exception as exc:  # it may be down: the next round tries again
                log.info("job %s: members to %x: %r", self.name, node.id, exc)

        await asyncio.gather(*(send(n) for n in self._next_roots(tid, MEMBERS_SHARED)))

    def accept_members(self, tid: int, body: dict[str, Any]) -> None:
        """As a likely next master (``POST /agent/v1/members``): keep the master's membership
        and term (replacing an older copy). Raises ``ValueError`` on a malformed body."""
        self._known_tree(tid)
        term, state = body.get("term"), body.get("membership")
        if type(term) is not int or term < 0 or not isinstance(state, dict):
            raise ValueError("term must be a non-negative integer and membership an object")
        held = self._member_copies.get(tid)
        if held is None or held[1] <= term:
            self._member_copies[tid] = (state, term)
        self.fence.hear(tid, term)

    def _knowledge_gained(self, tid: int) -> None:
        """This master learnt who the origins are (a hand-over, a replica, a copy): its
        doubtful results expect them now - new versions, flagged for whom they lack."""
        if self.membership.doubt is not None or not self._is_root(tid):
            return
        changed = self.store.resolve_doubt(tid, self.membership.expected)
        if changed:
            self.count("doubts_resolved", len(changed))
            self.versions_changed([(tid, e) for e in changed])
            self._schedule_repair(tid)

    def versions_changed(self, changed: list[tuple[int, int]]) -> None:
        """New versions of stored results (a retirement, a share past repair): publish,
        replicate, commit."""
        for tid, epoch in changed:
            self._publish(tid, epoch)
        for tid in {t for t, _ in changed}:
            self._replicate(tid)

    def _origins_file(self) -> Path | None:
        if self._data_dir is None:
            return None
        # per node: logical agents of one process may share a data directory
        name = f"{self.network.node_id:040x}-{self.app_id:040x}.json"
        return Path(self._data_dir) / "origins" / name

    async def _load_origins(self) -> None:
        """A restarted master still knows the job's origins (else its first results, holding
        only what reached it since, would look complete)."""
        path = self._origins_file()
        if path is None:
            return
        try:
            raw = await asyncio.to_thread(path.read_bytes)
            state = orjson.loads(raw)
        except FileNotFoundError:
            return
        except (OSError, orjson.JSONDecodeError) as exc:
            log.warning("job %s: origins file %s unreadable (%r); ignored", self.name, path, exc)
            return
        if isinstance(state, dict) and state.get("identity") == self._identity:
            self.membership.restore_members(state.get("members"), time.time())
            self.fence.restore(state.get("terms"))

    def _observe(self, epoch: int, origins: Lineage | None) -> None:
        """As master: note who a result covers; persist the members when they change."""
        if self.membership.observe(epoch, origins, time.time()):
            self._members_changed()

    def _members_changed(self) -> None:
        """Persist the members, one write at a time (a change during a write is written
        after it: concurrent writers would race on the temporary file); share them with the
        likely next masters at the absence loop's next round."""
        self._members_shared_at = 0.0
        if self._origins_file() is None:
            return
        self._members_dirty = True
        if not self._members_writing:
            self._members_writing = True
            self.tasks.spawn(self._write_members(), f"{self.name} origins")

    async def _write_members(self) -> None:
        path = self._origins_file()
        assert path is not None
        try:
            while self._members_dirty and not self._stopped:
                self._members_dirty = False
                body = {
                    "identity": self._identity,
                    "members": self.membership.members(),
                    "terms": self.fence.export(),
                }
                try:
                    await asyncio.to_thread(_write_json, path, body)
                except OSError as exc:  # disk full, say: the next change tries again
                    self.count("origins_write_errors")
                    log.warning("job %s: origins file %s not written: %r", self.name, path, exc)
                    return
        finally:
            self._members_writing = False

    # ---- the master's standby (agent/runtime/recovery/standby.py) -------------------------------

    def _standby(self, tid: int) -> Any:
        if not self.tunables.standby_replication:
            return None
        return standby_for(tid, self.network.node_id, self.network.neighbours())

    def _replicate(self, tid: int) -> None:
        """A stored result changed at this master: bring the standby up to date (one loop
        per tree), then advance the commit watermark."""
        if self._stopped:
            return
        if tid in self._replicating:
            return
        self._replicating.add(tid)
        self.tasks.spawn(self._replication_loop(tid), f"{self.name} replicate")

    async def _replication_loop(self, tid: int) -> None:
        try:
            while not self._stopped:
                view = self._view(tid)
                if view is None or not view.is_root:
                    return
                target = self._standby(tid)
                self.replication.retarget(tid, None if target is None else target.id)
                versions = self.store.versions(tid)
                self.replication.forget(tid, versions)
                due = [] if target is None else self.replication.due(tid, versions)
                if not due:
                    self._replicating.discard(tid)  # before any await: no change is missed
                    self._advance_commit(tid)
                    return
                if not await self._send_replica(tid, target, due[:REPLICA_BATCH]):
                    await asyncio.sleep(self.tunables.repair_interval)
        finally:
            self._replicating.discard(tid)

    async def _send_replica(self, tid: int, target: Any, epochs: list[int]) -> bool:
        plan = self.store.export_plan(tid, epochs=set(epochs))
        exported = await asyncio.to_thread(self.store.encode_plan, plan)
        items = [
            dict(item, snapshot=base64.b64encode(item["snapshot"]).decode()) for item in exported
        ]
        body = {
            "job": self.name,
            "tree": tid,
            "master": f"{self.network.node_id:x}",
            "items": items,
            "expected": {**self.membership.export(), "urls": self.loss.export_urls()},
            "committed": self.committed.get(tid),
            "term": self.fence.term(tid),
        }
        try:
            # the standby's URL is asked over the overlay once, not per epoch (a round trip)
            url = self._standby_urls.get(target.id) or await self.network.data_url_of(target)
            self._standby_urls = {target.id: url}
            await self.network.client.post_json(url, "/agent/v1/replica", body)
        except Exception as exc:
            self._standby_urls.pop(target.id, None)
            self.count("replica_failures")
            log.info("job %s: replicating to standby %x failed: %r", self.name, target.id, exc)
            return False
        self.replication.acknowledged(tid, target.id, {i["epoch"]: i["version"] for i in exported})
        self.count("replica_items_sent", len(exported))
        return True

    def accept_replica(self, tid: int, body: dict[str, Any]) -> dict[str, Any]:
        """As standby (``POST /agent/v1/replica``): keep the master's replicated state.
        Raises ``ValueError`` on a malformed body (a 400), nothing kept."""
        self._known_tree(tid)
        master = int(str(body["master"]), 16)
        raw = body["items"]
        if not isinstance(raw, list) or len(raw) > 4 * REPLICA_BATCH:
            raise ValueError("items must be a list of at most 128 epochs")
        items = []
        for item in raw:
            if not isinstance(item, dict) or type(item.get("epoch")) is not int:
                raise ValueError("every item needs an integer epoch")
            if type(item.get("version", 1)) is not int:
                raise ValueError("an item's version must be an integer")
            items.append(dict(item, snapshot=base64.b64decode(item["snapshot"], validate=True)))
        committed = body.get("committed")
        if committed is not None and type(committed) is not int:
            raise ValueError("committed must be an integer or null")
        replica = self.replicas.get(tid)
        if replica is None or replica.master != master:
            replica = self.replicas[tid] = Replica(master, self.store.retention)
        kept = replica.add(items)
        replica.expected = body.get("expected")
        term = body.get("term", 0)
        if type(term) is not int or term < 0:
            raise ValueError("term must be a non-negative integer")
        replica.term = max(replica.term, term)
        self.fence.hear(tid, term)
        if committed is not None:
            replica.committed = max(committed, replica.committed or committed)
        self.count("replica_items_kept", kept)
        return {"kept": kept}

    def _take_over(self, tid: int) -> bool:
        """This agent just became the tree's root: if it was the standby, the dead master's
        replicated state becomes its own (no committed epoch lost, job state replayed), under
        a term above the dead master's (settled: it publishes at once). False when it held no
        replica to take over."""
        replica = self.replicas.pop(tid, None)
        if replica is None or not replica.items:
            return False
        self.fence.hear(tid, replica.term)
        self.fence.became_root(tid, time.time(), settled=True)
        combiner = self.ensure_tree(tid)
        items = list(replica.items.values())
        try:
            taken = self.store.absorb(
                tid, items, check=lambda epoch, snap: combiner.check(epoch, snap, "standby")
            )
        except Exception as exc:  # a bad replica must not stop the take-over: say so
            self.count("takeover_failed")
            log.warning("job %s: standby replica of tree %x unusable: %r", self.name, tid, exc)
            return True
        self.membership.restore(replica.expected)
        self.loss.learn_urls(replica.expected)
        if replica.committed is not None:
            self.committed[tid] = max(replica.committed, self.committed.get(tid, -1))
        epochs = sorted(replica.items)
        # the dead master may not have written (or buffered) some of them yet: each is
        # published again under this master's term (the lake fences the dead one's)
        for epoch in epochs:
            self._publish(tid, epoch)
        self.count("takeovers")
        log.warning(
            "job %s tree %x: took over as master from the standby replica of %x "
            "(%d epochs, committed up to %s), term %d",
            self.name,
            tid,
            replica.master,
            taken,
            replica.committed,
            self.fence.term(tid),
        )
        self.tasks.spawn(self._replay(tid, epochs), f"{self.name} replay")
        self._replicate(tid)
        self._schedule_repair(tid)  # what the replica's epochs lack is pulled from here on
        return True

    async def _replay(self, tid: int, epochs: list[int]) -> None:
        """Rebuild the job instance's result-derived state (``on_epoch_result`` in epoch
        order) from results this master took over."""
        for epoch in epochs:
            result = self.store.get(tid, epoch)
            if result is None:
                continue
            snap = result.snapshot
            if snap is None:
                try:
                    snap = await asyncio.to_thread(self.store.load, tid, epoch)
                except Exception:
                    continue
            if self._stopped:
                return
            try:
                await self.call_job(self.job_for(epoch).on_epoch_result, epoch, snap)
            except Exception as exc:  # the job's own hook failed: its state lacks the epoch
                self.count("replay_errors")
                log.warning("job %s: replaying epoch %d failed: %r", self.name, epoch, exc)
        self.count("epochs_replayed", len(epochs))

    # ---- repair by pull (docs/fault-tolerance.md) -------------------------------------------

    def _schedule_repair(self, tid: int) -> None:
        if tid in self._repairing or self._stopped:
            return
        self._repairing.add(tid)
        self.tasks.spawn(self._repair(tid), f"{self.name} repair")

    def lacking(self, tid: int) -> dict[int, list[int]]:
        """As master: origin → the tentative epochs that lack it (its share not given up)."""
        wanted: dict[int, list[int]] = {}
        for epoch, origins in sorted(self.store.missing(tid, -1).items()):
            for origin in origins:
                wanted.setdefault(origin, []).append(epoch)
        return wanted

    async def _repair(self, tid: int) -> None:
        """Ask each lacking origin for its own snapshots of the epochs it is missing from,
        every ``repair_interval``, until no repairable epoch is tentative."""
        try:
            while not self._stopped:
                await asyncio.sleep(self.tunables.repair_interval)
                view = self._view(tid)
                wanted = self.lacking(tid) if view is not None and view.is_root else {}
                if not wanted:
                    return
                # concurrently: a dead origin's lookup must not hold up a live one's repair
                await asyncio.gather(
                    *(self._pull(tid, o, epochs[-REPAIR_BATCH:]) for o, epochs in wanted.items())
                )
        finally:
            self._repairing.discard(tid)

    async def _pull(self, tid: int, origin: int, epochs: list[int]) -> None:
        body = {"job": self.name, "tree": tid, "origin": f"{origin:x}", "epochs": epochs}
        self.count("repair_requests")
        try:
            if origin == self.network.node_id:  # this master lacks its own share: no round trip
                reply: Any = await self.resend(tid, origin, epochs)
            else:
                url = self.loss.urls.get(origin) or await self.network.data_url_of(origin)
                reply = await self.network.client.post_json(url, "/agent/v1/resend", body)
            parts = reply.get("epochs") if isinstance(reply, dict) else None
            if not isinstance(parts, dict):
                raise ValueError("reply without an epochs object")
            decoded = {
                int(k): await asyncio.to_thread(_decode_snapshot, v) for k, v in parts.items()
            }
            counts = reply.get("records")
            counts = counts if isinstance(counts, dict) else {}
        except Exception as exc:  # down, not found, or a bad reply: the next round retries
            self.count("repair_unreachable")
            log.info("job %s: repair from origin %x failed: %r", self.name, origin, exc)
            if isinstance(exc, DataPlaneError) and exc.reason == "refused":
                self.loss.refused(origin, "its data-plane port refused a repair pull")
            return
        self.count("repaired", self._fold_own(tid, origin, decoded, counts, epochs))
        # what a live origin no longer holds is past repair (retirement.py)
        self.absence.pulled(tid, origin, epochs, set(decoded))

    def _fold_own(
        self,
        tid: int,
        origin: int,
        parts: dict[int, Snapshot],
        counts: dict[str, Any],
        epochs: Any = None,
    ) -> int:
        """Fold ``origin``'s own snapshots (a repair pull's, or re-issued from its
        checkpoints) as that origin's alone: new or duplicate, never an overlap. Returns how
        many were merged."""
        combiner = self.ensure_tree(tid)
        merged = 0
        for epoch, snap in sorted(parts.items()):
            if epochs is not None and epoch not in epochs:
                continue
            try:
                snap = combiner.check(epoch, snap, origin)
            except Reject:
                self.count("repair_refused")
                continue
            name = SnapshotName(self.name, tid, epoch, origin)
            n = counts.get(str(epoch))
            lineage = counted((origin,), {origin: n} if type(n) is int and n >= 0 else None)
            if self._fold_late(name, snap, lineage) == "merged":
                merged += 1
        return merged

    async def resend(self, tid: int, origin: int, epochs: list[int]) -> dict[str, Any]:
        """As origin (``POST /agent/v1/resend``): our retained snapshots of ``epochs``."""
        if origin != self.network.node_id:
            raise Reject(404, "not_origin", f"this agent is not origin {origin:x}")
        self._known_tree(tid)
        found = [(e, s) for e in epochs[:REPAIR_BATCH] if (s := self.retained.get(tid, e))]
        encoded = await asyncio.to_thread(
            lambda: {str(e): base64.b64encode(s.to_bytes()).decode() for e, s in found}
        )
        counts = {str(e): n for e, _ in found if (n := self.retained.records(tid, e)) is not None}
        return {"epochs": encoded, "records": counts}

    def _report_missing(self, tid: int, epoch: int) -> None:
        """A stored epoch that lacks expected origins is tentative: say so (counted, and a
        WARNING within the log budget naming job, epoch and the origins)."""
        result = self.store.peek(tid, epoch)
        if result is None or not result.tentative:
            return
        self.count("tentative_epochs")
        self._schedule_repair(tid)
        # a lacking origin may be dead: probe it now rather than at the first repair round
        self.loss.suspect(tid, result.missing - result.given_up, time.time())
        self._log.warning(
            "tentative",
            "job %s tree %x epoch %d is tentative: coverage %.3f, lacking origins %s "
            "(their contributions are folded in when they arrive)",
            self.name,
            tid,
            epoch,
            result.coverage,
            ", ".join(result.lacking[:8]),
        )

    def offer_late(self, name: SnapshotName, snap: Snapshot, origins: Lineage | None = None) -> str:
        """A late contribution from a peer (``POST /agent/v1/late``): admitted like a
        child's snapshot (a tree of this job, epoch bounds, expectation), then folded in."""
        self._known_tree(name.tree)
        snap = self.ensure_tree(name.tree).check(name.epoch, snap, name.sender)
        return self._fold_late(name, snap, origins)

    def _fold_late(self, name: SnapshotName, snap: Snapshot, origins: Lineage | None) -> str:
        """A contribution for an epoch already emitted here: fold it in at the master (a
        new version of the epoch), or forward it there."""
        view = self._view(name.tree)
        if view is not None and view.is_root:
            tid, epoch = name.tree, name.epoch
            # Our barrier already passed this epoch as a child (we became the master since):
            # it will never store it here, so what arrives late *is* the epoch's result.
            fresh = self.store.peek(tid, epoch) is None
            passed = fresh and self.ensure_tree(tid).next_epoch > epoch
            folded = self.store.add_late(
                tid,
                epoch,
                name.sender,
                snap,
                time.time(),
                origins=origins,
                materialize=passed,
                expected=self.membership.expected(epoch),
                doubtful=self.membership.doubt is not None,
            )
            stored = self.store.peek(tid, epoch)
            if folded and stored is not None and stored.preview:
                self.previews.refresh(tid, epoch)  # held for the barrier; shown meanwhile
            elif folded and stored is not None:
                self.previews.stored(tid, epoch)
                self._observe(epoch, stored.origins)
                if fresh:
                    self.count("epochs_from_late")
                    self._report_missing(tid, epoch)
                self._publish(tid, epoch)  # a new version of the epoch
                self._replicate(tid)
            self._bound_results()
            return "merged" if folded else "duplicate"
        self.tasks.spawn(self._forward_late(name, snap, origins), f"{self.name} late epoch")
        return "merged"

    async def _forward_late(
        self, name: SnapshotName, snap: Snapshot, origins: Lineage | None
    ) -> None:
        """Deliver a late contribution to the master, retrying (with a fresh master lookup)
        through hand-overs and overload; only a stopping job gives up, and says so."""
        payload = snap.to_bytes()
        if origins is not None:
            payload = with_lineage(origins, payload)
        delay = 0.1
        for _ in range(self.tunables.late_attempts):
            if self._stopped:
                break
            try:
                url = await self._master_url(name.tree)
                status, _ = await self.network.client.request(
                    "POST", url, "/agent/v1/late", payload, name=name
                )
                if status == 200:
                    return
            except Exception as exc:
                log.info("late contribution %s: %r; retrying", name, exc)
                self.forget_master_url(name.tree, exc)
            else:
                self.forget_master_url(name.tree)
            self.count("late_forward_retries")
            await asyncio.sleep(delay)
            delay = min(2.0, delay * 2)
        self.count("late_forward_failed")
        log.warning(
            "job %s epoch %d: late contribution from %x (origins %s) could not reach the "
            "master; dropped here (the epoch stays tentative, lacking them)",
            self.name,
            name.epoch,
            name.sender,
            ", ".join(describe(origins or ())[:8]) or "unknown",
        )

    def _on_commit(self, tid: int, message: dict[str, Any]) -> None:
        """The master committed up to ``epoch`` - except, for an origin it lacks (absent,
        now back), from the first epoch it lacks: that origin keeps (and re-sends) those."""
        self.fence.hear(tid, message.get("term"))
        epoch = message.get("epoch")
        held = message.get("held")
        mine = held.get(format(self.network.node_id, "x")) if isinstance(held, dict) else None
        if type(epoch) is int and type(mine) is int:
            epoch = min(epoch, mine - 1)
        if type(epoch) is int and epoch > self.committed.get(tid, -1):
            self.committed[tid] = epoch
            self.retained.commit(tid, epoch)

    def _on_lost(self, tid: int, origin: Any) -> None:
        """The master declared ``origin`` dead (loss.py): if it is our child, drop it now (the
        overlay fails it, the tree re-forms, our barrier stops waiting for it)."""
        try:
            node = int(str(origin), 16)
        except ValueError:
            return
        combiner = self.combiners.get(tid)
        if combiner is not None and node in combiner.children and node != self.network.node_id:
            self.count("lost_children")
            self.network.peer_gone(node)

    # ---- runtime changes (agent/jobs/changes.py)
    # -----------------------------------------------------
    # ---- hand-over ---------------------------------------------------------------------------

    async def _hand_over(self, tid: int) -> None:
        """No longer the root: give the results to the new master, retrying (the new master
        may not run the job yet - a restarted agent - or may be moving on) until it took
        them, we are the root again, or the job stops."""
        delay = 0.2
        for _ in range(HANDOVER_ATTEMPTS):
            if self._stopped or not self.store.epochs(tid):
                return
            view = self._view(tid)
            if view is not None and view.is_root:
                return  # we are root again
            try:
                url = await self._master_url(tid)
                if url == self.network.data_url:
                    return
                await self._send_results(tid, url)
                return
            except Exception as exc:
                self.forget_master_url(tid, exc)
                self.count("handover_retries")
                log.info("job %s: hand-over of tree %x failed: %r; retrying", self.name, tid, exc)
            await asyncio.sleep(delay)
            delay = min(2.0, delay * 2)
        self.count("handover_failed")
        log.warning(
            "job %s: could not hand tree %x's results to its new master; they stay here (and "
            "in the lake)",
            self.name,
            tid,
        )

    async def _declare_leave(self, tid: int) -> None:
        """Stopping gracefully: tell the tree's master (our successor, if we were it) this
        origin's end - the newest epoch it closed - with its own snapshots of the epochs not
        committed yet, so the master has every epoch it is told to expect from us. Best
        effort, bounded: a master that does not hear it sees an absent origin instead."""
        through = self.retained.newest(tid)
        if through is None:  # it closed no epoch yet: its end is before its first one
            if self.spec.start_epoch is None:
                return
            through = self.spec.start_epoch - 1
        held = self.retained.held(tid)
        body = {
            "job": self.name,
            "tree": tid,
            "origin": f"{self.network.node_id:x}",
            "through": through,
            "epochs": await asyncio.to_thread(
                lambda: {
                    str(e): base64.b64encode(s.to_bytes()).decode()
                    for e in held
                    if (s := self.retained.get(tid, e)) is not None
                }
            ),
            "records": {
                str(e): n for e in held if (n := self.retained.records(tid, e)) is not None
            },
        }
        try:
            if self._is_root(tid):
                nearest = self._next_roots(tid)
                if not nearest:
                    return
                url = await self.network.data_url_of(nearest[0])
            else:
                url = await asyncio.wait_for(self._master_url(tid), LEAVE_TIMEOUT)
            await asyncio.wait_for(
                self.network.client.post_json(url, "/agent/v1/leave", body), LEAVE_TIMEOUT
            )
            self.count("leaves_declared")
        except Exception as exc:
            self.count("leave_failed")
            log.warning(
                "job %s tree %x: could not declare this origin's end to the master (%r): it "
                "will see it absent until it comes back or is retired",
                self.name,
                tid,
                exc,
            )

    async def accept_leave(self, tid: int, origin: int, body: dict[str, Any]) -> bool:
        """As master (``POST /agent/v1/leave``): fold the leaving origin's own snapshots of
        its uncommitted epochs, then stop expecting it after its last epoch. Raises
        ``ValueError`` on a malformed body."""
        self._known_tree(tid)
        through = body.get("through")
        if type(through) is not int or through < 0:
            raise ValueError("through must be a non-negative integer epoch")
        raw = body.get("epochs") or {}
        counts = body.get("records") or {}
        if not isinstance(raw, dict) or not isinstance(counts, dict) or len(raw) > 4096:
            raise ValueError("epochs and records must be objects (at most 4096 epochs)")
        parts = await asyncio.to_thread(
            lambda: {int(k): _decode_snapshot(v) for k, v in raw.items()}
        )
        if parts:
            self.count("leave_epochs_folded", self._fold_own(tid, origin, parts, counts))
        return self.origin_left(tid, origin, through)

    def _next_roots(self, tid: int, count: int = 1) -> list[Any]:
        """The live neighbours XOR-closest to the tree id, this agent left out: who becomes
        the tree's root next if this one goes (the successor first)."""
        others = [n for n in self.network.neighbours() if n.id != self.network.node_id]
        return sorted(others, key=lambda n: n.id ^ tid)[:count]

    async def _hand_over_to_successor(self, tid: int) -> None:
        """Stopping master: give the results to the live agent closest to the tree id."""
        nearest = self._next_roots(tid)
        if not nearest:
            return
        successor = nearest[0]
        try:
            await self._send_results(tid, await self.network.data_url_of(successor))
        except Exception as exc:
            self.count("handover_failed")
            log.warning("hand-over of %s to %s failed: %r", self.name, successor, exc)

    async def _send_results(self, tid: int, url: str) -> None:
        # encoding (and reading spilled epochs) runs in a thread
        exported = await asyncio.to_thread(self.store.encode_plan, self.store.export_plan(tid))
        items = [
            dict(item, snapshot=base64.b64encode(item["snapshot"]).decode()) for item in exported
        ]
        body = {
            "job": self.name,
            "tree": tid,
            "items": items,
            "expected": {**self.membership.export(), "urls": self.loss.export_urls()},
            "term": self.fence.term(tid),
        }
        await self.network.client.post_json(url, "/agent/v1/handover", body)
        self.store.drop_tree(tid)
        self.count("handovers_sent")

    def absorb(
        self, tid: int, items: list[dict[str, Any]], expected: Any = None, term: Any = 0
    ) -> int:
        """A previous master's results (``POST /agent/v1/handover``): every item is admitted
        (tree, epoch bounds, expectation) before any is stored. As the root, this master
        claims a term above the previous master's (fencing.py) and publishes at once."""
        self._known_tree(tid)
        combiner = self.ensure_tree(tid)
        if self._is_root(tid):
            self.fence.handed_over(tid, term)
            self._members_changed()
            self._publish_deferred(tid)
        else:
            self.fence.hear(tid, term)
        taken = self.store.absorb(
            tid, items, check=lambda epoch, snap: combiner.check(epoch, snap, "handover")
        )
        self.membership.restore(expected)  # the previous master's knowledge of origins
        self.loss.learn_urls(expected)
        for epoch in {i["epoch"] for i in items if isinstance(i.get("epoch"), int)}:
            self._publish(tid, epoch)
        self.count("handovers_received")
        self._bound_results()
        epochs = sorted({i["epoch"] for i in items if isinstance(i.get("epoch"), int)})
        self.tasks.spawn(self._replay(tid, epochs), f"{self.name} replay")
        self._replicate(tid)
        if self._is_root(tid):
            # a handed-over epoch may lack origins (ours among them, when we were down):
            # nothing else would ask for them - no new tentative epoch may come
            self._schedule_repair(tid)
            self._knowledge_gained(tid)
        return taken


class _LossHost:
    """The :class:`~agent.runtime.recovery.loss.LossHost` a runtime gives its
    :class:`OriginLoss`."""

    def __init__(self, runtime: JobRuntime) -> None:
        self._rt = runtime
        self.name = runtime.name

    @property
    def node_id(self) -> int:
        return self._rt.network.node_id

    def root_trees(self) -> list[int]:
        rt = self._rt
        if rt._stopped:
            return []
        return [t for t in rt.tree_list if (v := rt._view(t)) is not None and v.is_root]

    def waiting_epoch(self, tid: int) -> tuple[int, frozenset[int]] | None:
        combiner = self._rt.combiners.get(tid)
        if combiner is None:
            return None
        epoch = combiner.next_epoch
        if epoch is None or not combiner.waiting_for(epoch):
            return None
        return epoch, combiner.lineage_of(epoch) or frozenset()

    def closed_at(self, epoch: int) -> float:
        spec = self._rt.spec
        return spec.schedule.end(epoch) + spec.allowed_lateness

    def expected(self, epoch: int) -> frozenset[int]:
        return self._rt.membership.expected(epoch) or frozenset()

    def is_member(self, origin: int) -> bool:
        return origin in self._rt.membership.members_set()

    def declare_absent(self, origin: int, why: str) -> bool:
        return self._rt.membership.declare_absent(origin, why, time.time())

    def is_absent(self, origin: int) -> bool:
        return origin in self._rt.membership.absent()

    async def fold_origin(
        self, tid: int, origin: int, parts: dict[int, bytes], records: dict[str, Any]
    ) -> int:
        decoded = await asyncio.to_thread(
            lambda: {e: Snapshot.from_bytes(b) for e, b in parts.items()}
        )
        return self._rt._fold_own(tid, origin, decoded, records)

    def after_absence(self, origin: int) -> None:
        rt = self._rt
        rt.network.peer_gone(origin)
        rt._members_changed()
        for tid in self.root_trees():
            rt._replicate(tid)
            rt._advance_commit(tid)

    def count(self, what: str, n: int = 1) -> None:
        self._rt.count(what, n)

    def spawn(self, coro: Any, what: str) -> Any:
        return self._rt.tasks.spawn(coro, what)

    async def multicast(self, tid: int, message: dict[str, Any]) -> Any:
        return await self._rt._multicast(tid, message)


class _AbsenceHost:
    """The :class:`~agent.runtime.recovery.absence.AbsenceHost` a runtime gives its Absence."""

    def __init__(self, runtime: JobRuntime) -> None:
        self._rt = runtime
        self.name = runtime.name

    def retire_after(self) -> float:
        return self._rt.spec.retire_after

    def first_epoch_after(self, t: float) -> int:
        return self._rt.spec.schedule.epoch_of(t) + 1

    def versions_changed(self, changed: list[tuple[int, int]]) -> None:
        self._rt.versions_changed(changed)

    def members_changed(self) -> None:
        self._rt._members_changed()

    def count(self, what: str, n: int = 1) -> None:
        self._rt.count(what, n)


class _RecoveryHooks:
    """The :class:`~agent.runtime.job.host.RecoveryHooks` a runtime gives its parts, over its
    own fault-tolerance methods (``recovery/``'s facade takes their place)."""

    def __init__(self, runtime: JobRuntime) -> None:
        self._rt = runtime

    def fold_late(self, name: SnapshotName, snap: Snapshot, origins: Lineage | None) -> str:
        return self._rt._fold_late(name, snap, origins)

    def epoch_closed(self, tid: int, epoch: int, part: Snapshot, records: Any) -> None:
        self._rt.retained.keep(tid, epoch, part, records)
        self._rt.checkpoints.closed(tid, epoch)

    def whole(self, epoch: int) -> bool:
        rt = self._rt
        return whole_share(
            rt.spec,
            epoch,
            submitted_start=rt._identity[2],
            incomplete_until=rt.incomplete_until,
        )

    def had_parent(self, tid: int) -> None:
        self._rt._was_member.add(tid)

    def on_commit(self, tid: int, message: dict[str, Any]) -> None:
        self._rt._on_commit(tid, message)

    def on_lost(self, tid: int, origin: Any) -> None:
        self._rt._on_lost(tid, origin)

    def committed(self, tid: int) -> int | None:
        return self._rt.committed.get(tid)

    def status(self) -> dict[str, Any]:
        rt = self._rt
        return {
            "committed": {f"{t:040x}": e for t, e in rt.committed.items()},
            "retained": rt.retained.stats(),
            "checkpoints": rt.checkpoints.stats(),
            "losses": rt.loss.status(),
            "replication": rt.replication.stats(),
            "replicas": {f"{t:040x}": r.stats() for t, r in rt.replicas.items()},
            "origins_expected": rt.membership.origins(),
            "membership": rt.membership_status(),
            "terms": rt.fence.stats(time.time()),
        }
