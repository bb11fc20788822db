"""One job on one agent: its worker, forwarder and master roles over the job's m trees.

Contract (see ``docs/agent-runtime.md``):

* **Worker** (the agent has one of the job's inputs): records → ``Job.map`` → per-epoch CBT
  (:class:`~agent.runtime.epochs.worker.Worker`); each closed epoch's snapshot is split by key-hash
  range
  into the m tree partitions and offered to each tree's barrier as the local contribution.
* **Forwarder / master**: per tree an :class:`~srt.dataplane.barrier.EpochCombiner` merges the local
  snapshot with every child's for an epoch, then sends the epoch to the parent
  (:class:`~srt.dataplane.upstream.UpstreamSender`, kept until acknowledged) or — at the root —
  stores
  it as the epoch's result and runs the job's master hooks (result, feedback multicast for
  iterative jobs, "empty" multicast for synchronous batches).
* **Late contributions** — a snapshot for an epoch its receiver already emitted (a child that
  joined or moved mid-epoch) — bypass the tree and go straight to the tree's master, which
  folds them into that epoch once per origin; results stay exact and the epoch is marked
  ``updated``.
* **Hand-over**: a master that loses the root role (a closer agent joined, or it stops)
  sends its stored results to the new master over the data plane.
* **Peers are checked** before anything of theirs touches state: every snapshot a peer
  sends (a child's, a late contribution, a hand-over item, a ``send_to``) must be of one of
  the job's trees, within the barrier's epoch bounds (503 ``epoch_ahead``) and match
  :meth:`JobRuntime.expectation` for its epoch - the aggregator and parameters of the job
  instance that reduces that epoch (they change with a runtime change of aggregate) and the
  job's key schema (``Job.keys_problem``) - else 409 ``incompatible``, counted and logged.
* **Bounds** (``RuntimeTunables``): the master's results are held within
  ``result_memory_bytes`` per job — older epochs are spilled (compressed snapshot bytes) to
  ``<data_dir>/results`` (a temp directory without one) off the event loop and read back on
  demand, within ``result_spill_bytes``; an epoch dropped by a bound is answered 410 with the
  reason (:class:`~agent.runtime.results.store.ResultStore`). The worker's open epochs share
  ``worker_memory_bytes`` of resident compressed CBT buffers (the rest spills to
  ``<data_dir>/spill``). :meth:`JobRuntime.stop` frees everything the job holds: results,
  spill files, barriers, senders and the worker's trees.

A runtime reaches its agent only through the narrow services of ``agent/runtime/services.py``
(network and trees, job table, inputs, background tasks, the record executor) and reads its
timings from :class:`~agent.tunables.RuntimeTunables`; the agent passes both in.

**Threads.** The worker's state (``Worker``, the job's ``map``, its CBTs) is touched only on the
agent's record thread (:mod:`agent.runtime.record_thread`): :meth:`JobRuntime.work` (records in,
closed epochs out) runs there, as do the worker side of runtime changes and control messages;
everything else — barriers, senders, the master's store and hooks — stays on the event loop
(:meth:`JobRuntime.deliver`). The loop reads the worker only through :meth:`worker_stats`, a
copy published by the record thread. A runtime built without an agent runs them inline.

**CPU budget.** ``work`` measures the job's thread CPU time; a job over its budget
(:class:`~agent.runtime.epochs.cpu_budget.CpuBudget`, ``RuntimeTunables.cpu_budget_share`` of one
core
over ``cpu_budget_window`` s) processes no new records until it is back under: they wait in
order in its backlog (bounded: a full backlog stops the agent polling the inputs the job reads,
so they back up at the source), its idle clock is kept from advancing over them, and it is
reported (``cpu`` in its status, ``cpu_throttled`` counter, a WARNING naming the job).
"""

from __future__ import annotations

import asyncio
import base64
import inspect
import logging
import math
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import orjson

from agent.errors import BadRequest, Gone, NotFound, Unavailable
from agent.jobs.changes import parse_change
from agent.jobs.job import Job, create_job, maybe_await
from agent.jobs.spec import JobSpec
from agent.jobs.table import RUNNING, JobEntry
from agent.jsonable import jsonable
from agent.runtime.epochs.clock import EpochClock
from agent.runtime.epochs.cpu_budget import CpuBudget
from agent.runtime.epochs.window_panes import whole_share
from agent.runtime.epochs.worker import Worker
from agent.runtime.record_thread import InlineRecords
from agent.runtime.recovery.absence import Absence
from agent.runtime.recovery.checkpoints import CheckpointSender
from agent.runtime.recovery.fencing import MasterTerms
from agent.runtime.recovery.loss import OriginLoss
from agent.runtime.recovery.membership import Membership
from agent.runtime.recovery.offsets import TreeOutflow, write_atomically
from agent.runtime.recovery.retention import RetainedEpochs
from agent.runtime.recovery.standby import Replica, ReplicationLog, standby_for
from agent.runtime.results.lake_history import provenance
from agent.runtime.results.lake_sink import LakeTarget, sink_for
from agent.runtime.results.previews import TentativePreviews
from agent.runtime.results.spill import ResultSpill
from agent.runtime.results.store import ResultStore
from agent.runtime.results.topk_quality import MISSING, AccuracyCache, merged_accuracy
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
from srt.dataplane.compat import Expectation, admit
from srt.dataplane.lineage import Lineage, counted, covered, describe
from srt.dataplane.lineage import decode as lineage_of
from srt.dataplane.lineage import encode as with_lineage
from srt.dataplane.operators import level_operator_for
from srt.errors import Incompatible, Reject, RetryLater
from srt.trees.types import JoinTimeout

log = logging.getLogger(__name__)

#: epochs of clock skew a peer may be ahead of this agent's ``max_future`` horizon (as the
#: barrier's ``max_ahead``)
HORIZON_SLACK = 10_000


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
        self.records: RecordExecutor = records or InlineRecords()
        self.job_table = job_table
        self.input_service = inputs
        self.tasks = tasks
        self.tunables = tunables or RuntimeTunables()
        # a restarted agent resumes past the epochs it already passed on
        # (agent/runtime/recovery/offsets.py)
        self.spec = inputs.resume_spec(JobSpec.from_dict(entry.spec))
        self.name = self.spec.name
        self.version = entry.version  # of the job-table entry whose spec runs here
        self.changes_applied: OrderedDict[int, float] = OrderedDict()  # version → time
        self.job: Job = create_job(self.spec)
        self.app_id = app_id(self.spec.name, self.spec.creator)
        self.tree_list = tree_ids(self.app_id, self.spec.trees, self.spec.placement or 0)
        self.tree_set = set(self.tree_list)
        wanted = set(self.spec.inputs) if self.spec.inputs else inputs.input_names()
        self.inputs = sorted(wanted & inputs.input_names())
        t = self.tunables
        self.worker: Worker | None = (
            Worker(
                self.job,
                memory_budget_bytes=t.worker_memory_bytes,
                spill_dir=str(Path(data_dir) / "spill") if data_dir else None,
            )
            if self.inputs
            else None
        )
        self.operator = level_operator_for(
            self.job.make_aggregator(),
            top_k=self.spec.top_k,
            largest=self.spec.top_k_largest,
            approximate=self.spec.top_k_approximate,
        )
        self.combiners: dict[int, EpochCombiner] = {}
        self.senders: dict[int, UpstreamSender] = {}
        self._results_dir = str(Path(data_dir) / "results") if data_dir else None
        self.store = ResultStore(
            budget_bytes=t.result_memory_bytes,
            spill_budget_bytes=t.result_spill_bytes,
            # opened when first needed: most agents never master a given job
            spill_factory=lambda: ResultSpill(self._results_dir, self.name),
            job=self.name,
        )
        self._spilling = False
        #: as master of a top-k job: its results' accuracy estimates
        #: (agent/runtime/results/quality.py)
        self.accuracy = AccuracyCache()
        self._estimating: set[tuple[int, int]] = set()  # (tree, epoch) estimates under way
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
            network,
            replicas=lambda: self.spec.checkpoint_replicas,
            committed=self.committed.get,
            delay=t.checkpoint_delay,
            seen=self._seen_epoch,
            now_epoch=lambda: self.spec.schedule.epoch_of(time.time()),
        )
        #: as master: laggard probes, origins lost for good and their re-issue (loss.py)
        self.loss = OriginLoss(
            _LossHost(self),
            network,
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
        self.multicasts: list[dict[str, Any]] = []  # recent control messages received
        self.multicast_stats: list[dict[str, Any]] = []  # as master: reached, elapsed
        self.sent_at: OrderedDict[tuple[int, int], float] = OrderedDict()  # upward sends
        self.counters: dict[str, int] = {}
        #: read-only hook: told of stored epochs and multicasts (the agent's metrics)
        self.observer: EpochObserver = NO_OBSERVER
        self._log = LogBudget(log)  # refusals of peer data: counted, logged within a budget
        self._last_timer = 0.0
        self._master_urls: dict[int, tuple[asyncio.Future[str], float]] = {}
        self._master_nodes: dict[int, int] = {}  # tree → the node id its master URL names
        self._standby_urls: dict[int, str] = {}  # the standby's node id → its data-plane URL
        self._context = _Context(self)
        self.job.bind(self._context)
        #: (first epoch of the next aggregate, the job instance used before it), oldest first
        self._jobs_before: list[tuple[int, Job]] = []
        #: per job instance (by id, the instance kept alive alongside): what its epochs accept
        self._expectations: dict[int, tuple[Job, Expectation]] = {}
        self._stopped = False
        self.cpu = CpuBudget(self.tunables.cpu_budget_share, self.tunables.cpu_budget_window)
        #: records waiting for the CPU budget, per batch, in arrival order (record thread)
        self._backlog: deque[tuple[str, Any]] = deque()
        self._backlog_records = 0
        #: closed epoch → its record count here, from the record thread to deliver
        self._closed_records: dict[int, int] = {}
        self._throttled = False
        #: the worker's stats as the record thread last published them (None: no worker)
        self._worker_stats = self.worker.stats() if self.worker is not None else None
        self._changing = asyncio.Lock()  # one runtime change at a time, in version order
        # None unless the agent has a rollup lake
        self.lake = sink_for(self, lake, tunables=self.tunables)
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
        self.sent_at.clear()
        self.multicasts.clear()
        self._master_urls.clear()
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

    # ---- tree bookkeeping --------------------------------------------------------------------

    def ensure_tree(self, tid: int) -> EpochCombiner:
        combiner = self.combiners.get(tid)
        if combiner is None:
            combiner = EpochCombiner(
                job=self.name,
                tree=tid,
                expect_local=self.worker is not None,
                children=(),
                emit=lambda epoch, snap, tid=tid: self._emit(tid, epoch, snap),
                operator=self.operator,
                first_epoch=self.spec.start_epoch,
                expect=self.expectation,
                horizon=self._horizon,
                origin=self.network.node_id,
                straggler_epochs=self.spec.straggler_epochs,
                straggler_wait=self._straggler_wait,
            )
            self.combiners[tid] = combiner
            self.senders[tid] = UpstreamSender(
                self.network.client,
                job=self.name,
                tree=tid,
                sender=self.network.node_id,
                tunables=self.network.srt_tunables,
            )
            self.senders[tid].on_refused = lambda url, tid=tid: self._parent_refused(tid, url)
        return combiner

    # ---- what peers may send (module contract: "peers are checked") ---------------------------

    def expectation(self, epoch: int | None) -> Expectation:
        """What a snapshot of ``epoch`` must be: the aggregator of the job instance that
        reduces that epoch (None: the current one) and its key check."""
        job = self.job if epoch is None else self.job_for(epoch)
        cached = self._expectations.get(id(job))
        if cached is None or cached[0] is not job:
            key_check = None if type(job).keys_problem is Job.keys_problem else job.keys_problem
            cached = (job, Expectation(job.make_aggregator(), key_check=key_check))
            live = {id(j) for _, j in self._jobs_before} | {id(self.job)}
            self._expectations = {k: v for k, v in self._expectations.items() if k in live}
            self._expectations[id(job)] = cached
        return cached[1]

    def _horizon(self) -> int | None:
        """The highest epoch a peer may send: a worker drops records more than ``max_future``
        seconds ahead of its clock, so no honest snapshot is later than that epoch (plus the
        barrier's ``max_ahead`` for clock skew). None when the spec sets no ``max_future``."""
        if self.spec.max_future is None:
            return None
        ahead = time.time() + self.spec.max_future
        return self.spec.schedule.epoch_of(ahead) + HORIZON_SLACK

    def _known_tree(self, tid: int) -> None:
        if tid not in self.tree_set:
            self.count("refused_unknown_tree")
            log.warning(
                "job %s: refused a peer's data for tree %x (not one of its trees)", self.name, tid
            )
            raise RetryLater("unknown_job", f"tree {tid:x} is not a tree of job {self.name!r}")

    def parent_changed(self, tid: int) -> None:
        view = self._view(tid)
        if view is None:
            return
        if getattr(view, "parent", None) is not None:
            self._was_member.add(tid)
        self.ensure_tree(tid)
        self.senders[tid].set_parent(view.parent_url)

    def _parent_refused(self, tid: int, url: str) -> None:
        """Our parent's data-plane port refused the snapshot: its process is gone (a master
        killed, say). Telling the overlay at once lets the tree re-form - and the standby
        take over - in about one send instead of after heartbeat and probe timeouts."""
        view = self._view(tid)
        parent = getattr(view, "parent", None)
        if parent is not None and view.parent_url == url:
            self.count("parent_refused")
            self.network.peer_gone(parent.id)

    def children_changed(self, tid: int) -> None:
        view = self._view(tid)
        if view is None:
            return
        self.ensure_tree(tid).set_children(view.children.keys())

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

    def _straggler_wait(self, epoch: int) -> float:
        """How long an epoch must have been open before its barrier may leap over a
        straggler: ``straggler_epochs - 0.5`` epochs of time (the half epoch absorbs the
        agents' tick and closing jitter), so members far apart in epochs but not in time - a
        catch-up after a restart or of old logs - are never leapt."""
        seconds = self.spec.schedule.seconds_of(epoch) or self.spec.epoch_seconds
        return max(0.0, self.spec.straggler_epochs - 0.5) * seconds

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

    def tick(self, batches: dict[str, list[dict[str, Any]]], now: float) -> None:
        """Feed new records (per input name) to the worker, offer closed epochs to the trees'
        barriers, run the master's timer: :meth:`work` then :meth:`deliver`, inline."""
        self.deliver(self.work(batches), now)

    def work(self, batches: dict[str, list[dict[str, Any]]]) -> list[tuple[int, list[Snapshot]]]:
        """Record thread: feed new records to the worker (within the job's CPU budget; see
        the module's contract) and return the epochs its watermark closed, each split into
        the m tree partitions."""
        if self._stopped or self.worker is None:
            return []
        worker = self.worker
        for name, records in batches.items():
            if records or getattr(records, "skipped", 0):  # lines a prefilter skipped
                self._backlog.append((name, records))
                self._backlog_records += len(records)
        over = self.cpu.over()
        if over and self._backlog:
            self._throttle_started()
        started = time.thread_time()
        while self._backlog and not over:
            name, records = self._backlog.popleft()
            self._backlog_records -= len(records)
            ts_field = self.input_service.timestamp_field(name)
            worker.process(records, ts_field=ts_field, skipped=getattr(records, "skipped", 0))
            spent = time.thread_time() - started
            self.cpu.charge(spent)
            started += spent
            over = self.cpu.over()
        if self._backlog:
            # records are waiting here, not absent: the idle clock must not close their epochs
            worker.clock.touch()
        elif self._throttled:
            self._throttled = False
            log.info("job %s: back within its CPU budget", self.name)
        closed = []
        for epoch, snap in worker.poll():
            closed.append((epoch, snap.split_by_hash(len(self.tree_list))))
        # the records of each closed epoch travel with its lineage (the master's coverage);
        # handed to the loop with the epochs (deliver pops them: bounded by what it delivers)
        self._closed_records.update(worker.take_closed_records())
        self.cpu.charge(time.thread_time() - started)
        self._worker_stats = worker.stats()
        return closed

    def _throttle_started(self) -> None:
        self.cpu.throttled_ticks += 1
        self.count("cpu_throttled")
        if not self._throttled:
            self._throttled = True
            self.cpu.episodes += 1
            log.warning(
                "job %s: over its CPU budget (%.0f %% of a core over %.0f s, budget %.0f %%); "
                "throttled, %d records waiting",
                self.name,
                100 * self.cpu.used() / self.cpu.window,
                self.cpu.window,
                100 * self.cpu.share,
                self._backlog_records,
            )

    def backlog_full(self) -> bool:
        """Whether the records waiting for this job's CPU budget reached their bound (the
        agent then leaves the inputs it reads unpolled)."""
        return self._backlog_records >= self.tunables.max_backlog_records

    def deliver(self, closed: list[tuple[int, list[Snapshot]]], now: float) -> None:
        """Event loop: offer the closed epochs' partitions to the trees' barriers, run the
        master's timer."""
        if self._stopped:
            return
        for epoch, parts in closed:
            # a window needing a pane from before this worker's first whole one is short here
            complete = whole_share(
                self.spec,
                epoch,
                submitted_start=self._identity[2],
                incomplete_until=self.incomplete_until,
            )
            if not complete:
                self.count("incomplete_epochs")
            # every tree's part counts the origin's records of the epoch: a tree's coverage
            # is a share, and the origin's share is the same in each key range (as estimated)
            records = self._closed_records.pop(epoch, None)
            for tid, part in zip(self.tree_list, parts, strict=True):
                if complete:
                    self.retained.keep(tid, epoch, part, records)
                    self.checkpoints.closed(tid, epoch)
                res = self.ensure_tree(tid).offer_local(
                    epoch, part, complete=complete, records=records
                )
                if res == "stale" and complete:
                    # our barrier passed the epoch without our own records (it leapt over
                    # our worker, or our input joined after the epoch went up): they go to
                    # the master, which folds them in by lineage (never twice)
                    self.count("late_local")
                    name = SnapshotName(self.name, tid, epoch, self.network.node_id)
                    own = {self.network.node_id: records} if records is not None else None
                    self._fold_late(name, part, counted((self.network.node_id,), own))
        if closed:
            for tid in self.tree_list:
                self.previews.watch(tid)
        interval = type(self.job).timer_interval
        if interval and now - self._last_timer >= interval and self.is_master:
            self._last_timer = now
            self.tasks.spawn(self.call_job(self.job.on_timer), f"{self.name} on_timer")

    def cpu_status(self) -> dict[str, Any]:
        """The job's CPU budget here: share used over the window, throttling, backlog."""
        return {
            **self.cpu.stats(),
            "throttled": self._throttled,
            "backlog_records": self._backlog_records,
        }

    def worker_stats(self) -> dict[str, Any] | None:
        """The worker's counters as the record thread last published them (None: no worker).
        The loop reads this copy, never the live worker, so it never waits on or races the
        record thread."""
        return self._worker_stats

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
                self.tasks.spawn(self._master_epoch(tid, epoch, snap), f"{self.name} result")
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
        name = SnapshotName(self.name, tid, epoch, self.network.node_id)
        payload = snap.to_bytes()
        self.senders[tid].send(name, payload if lineage is None else with_lineage(lineage, payload))
        self.sent_at[(tid, epoch)] = time.time()
        while len(self.sent_at) > 256:
            self.sent_at.popitem(last=False)

    def _bound_results(self) -> None:
        """Past the results' byte budget, spill the oldest epochs (one background task at a
        time; encoding and writing run in a thread, never on the event loop)."""
        if self._spilling or self._stopped or not self.store.over_budget():
            return
        self._spilling = True
        self.tasks.spawn(self._spill_results(), f"{self.name} spill results")

    async def _spill_results(self) -> None:
        try:
            while not self._stopped and (batch := self.store.spill_candidates()):
                for tid, epoch, snap in batch:
                    size: int | None = None
                    try:
                        size = await asyncio.to_thread(self.store.spill_write, tid, epoch, snap)
                    except OSError as exc:  # disk full, say: keep it resident, say so
                        self.count("result_spill_errors")
                        log.warning("job %s: spilling epoch %d failed: %r", self.name, epoch, exc)
                    if self._stopped:
                        return
                    self.store.spilled(tid, epoch, snap, size)
                    if size is None:
                        return
                    self.count("results_spilled")
        finally:
            self._spilling = False

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

    def offer_child(
        self, name: SnapshotName, snap: Snapshot, origins: Lineage | None = None
    ) -> str:
        """A child's snapshot (``POST /srt/v1/snapshot``): admitted by the tree's barrier
        first (409 ``incompatible`` / 503 ``epoch_ahead``, nothing recorded), then merged, or
        folded in at the master when its epoch was already emitted here."""
        self._known_tree(name.tree)
        combiner = self.ensure_tree(name.tree)
        snap = combiner.check(name.epoch, snap, name.sender)
        if self.worker is not None and not self._stopped:
            # The child closed this epoch by the same clock as ours: read our inputs and close
            # our own share now rather than at our next tick, which would hold the whole
            # subtree back by up to a tick interval at every level. (Reading first matters: a
            # watermark advanced by the idle clock must not close an epoch whose records are
            # waiting in the input.)
            self.input_service.tick_now(self.inputs)
        result = combiner.offer_child(name.sender, name.epoch, snap, origins)
        self.previews.watch(name.tree)
        if result != "stale":
            return result
        emitted = combiner.lineage_of(name.epoch)
        if origins is not None and emitted is not None and origins <= emitted:
            self.count("late_duplicates")  # already passed on inside this epoch's result
            return "duplicate"
        self.count("late_contributions")
        return self._fold_late(name, snap, origins)

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

    async def _master_epoch(self, tid: int, epoch: int, snap: Snapshot) -> None:
        job = self.job_for(epoch)
        await self.call_job(job.on_epoch_result, epoch, snap)
        if self.spec.mode == "iterative":
            value = await self.call_job(job.feedback_for, epoch, snap)
            if value is not None:
                await self._multicast(tid, {"kind": "feedback", "epoch": epoch, "value": value})
        elif self.spec.mode == "batch":
            await self._multicast(tid, {"kind": "empty", "epoch": epoch})

    async def _multicast(self, tid: int, message: dict[str, Any]) -> Any:
        trees = self.network.trees
        assert trees is not None
        sent = time.time()
        result = await trees.multicast(
            tid, {**message, "sent_at": sent}, timeout=self.tunables.multicast_timeout
        )
        self.multicast_stats.append(
            {
                "kind": message.get("kind"),
                "epoch": message.get("epoch"),
                "sent_at": sent,
                "reached": result.reached,
                "ms": result.elapsed_s * 1000,
            }
        )
        del self.multicast_stats[:-64]
        self.observer.multicast_done(self.name, str(message.get("kind")), result.elapsed_s)
        return result

    async def on_multicast(self, tid: int, message: dict[str, Any]) -> None:
        self.multicasts.append({"tree": f"{tid:040x}", **message, "received_at": time.time()})
        del self.multicasts[:-64]
        if message.get("kind") == "change":
            await self._on_change(message)
            return
        if message.get("kind") == "lost":
            self._on_lost(tid, message.get("origin"))
            return
        if message.get("kind") == "commit":
            self._on_commit(tid, message)
            return
        if self.worker is not None:
            await maybe_await(await self.records.run(self.worker.on_multicast, message))
        else:
            if message.get("kind") == "feedback":
                self.job.feedback = message.get("value")
            await self.call_job(self.job.on_multicast, message)

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

    async def serve_change(self, body: Any) -> dict[str, Any]:
        """At the master: validate a change, record the new spec in the job table (so agents
        that join later run it too), multicast it down the tree and report when every agent
        has applied it."""
        started = time.time()
        change = parse_change(body)
        spec = change.apply(self.spec, self._newest_event_time())
        version = self.version
        if spec is not None:
            version = await self.job_table.publish_spec(spec, base_version=self.version)
            await self.apply_spec(spec.to_dict(), version)
        result = await self._multicast(self.tree_list[0], change.message(version, spec))
        if spec is not None:  # agents off the job's tree learn it through the job table
            self.tasks.spawn(self.job_table.announce_entry(self.name), f"announce {self.name}")
        return {
            "job": self.name,
            "version": version,
            "agents_reached": result.reached,
            "missing": [f"{m:040x}" for m in result.missing],
            "applied_ms": round((time.time() - started) * 1000, 3),
            "multicast_ms": round(result.elapsed_s * 1000, 3),
        }

    def _newest_event_time(self) -> float | None:
        """This agent's newest event time for the job (None: no record seen here)."""
        if self.worker is None:
            return None
        # one float the record thread writes: a read from the loop sees an old or new value
        newest = self.worker.clock.max_event_time
        return newest if math.isfinite(newest) else None

    async def _on_change(self, message: dict[str, Any]) -> None:
        if message.get("spec") is not None:
            version = message.get("version")
            if isinstance(version, int) and version > self.version:
                await self.apply_spec(message["spec"], version)
        if self.worker is not None and (message.get("empty") or message.get("batch")):
            control = {"kind": "batch" if message.get("batch") else "empty"}
            await self.records.run(self.worker.on_multicast, control)
        elif message.get("batch"):
            self.job.feedback = None
        if message.get("batch"):
            self.tasks.spawn(self.call_job(self.job.on_multicast, {"kind": "batch"}), "batch")

    async def apply_spec(self, spec_dict: Any, version: int) -> bool:
        """Switch to a newer spec between two records (no restart): the job instance re-runs
        ``setup()`` with it, keeping its state; the level operator follows a new top-k. A spec
        that fails here is counted and logged, and the old one keeps running. The job and
        worker side (``setup()``, the worker's swap) runs on the record thread, between two
        batches; the rest on the loop; one change at a time."""
        async with self._changing:
            if version <= self.version or self._stopped:
                return False
            return await self._apply_spec(spec_dict, version)

    async def _apply_spec(self, spec_dict: Any, version: int) -> bool:
        job, old = self.job, self.spec
        try:
            spec = JobSpec.from_dict(spec_dict)
            if spec.start_epoch != old.start_epoch:  # a resumed agent's own start
                spec = spec.with_changes(start_epoch=old.start_epoch)
        except ValueError as exc:
            self.count("changes_refused")
            log.warning("job %s: change to version %d refused: %s", self.name, version, exc)
            return False
        if spec.aggregator_since != old.aggregator_since and spec.aggregator_since is not None:
            new_job = await self.records.run(self._switch_job, spec, version)
            if new_job is None:
                return False
            new_job.bind(self._context)
            self._jobs_before.append((spec.aggregator_since, self.job))
            del self._jobs_before[:-8]
            self.job = job = new_job
        else:
            if not await self.records.run(self._reconfigure_job, job, old, spec, version):
                return False
        if (spec.top_k, spec.top_k_largest, spec.top_k_approximate) != (
            self.spec.top_k,
            self.spec.top_k_largest,
            self.spec.top_k_approximate,
        ):
            self.operator = level_operator_for(
                job.make_aggregator(),
                top_k=spec.top_k,
                largest=spec.top_k_largest,
                approximate=spec.top_k_approximate,
            )
            for combiner in self.combiners.values():
                combiner.operator = self.operator
        for combiner in self.combiners.values():
            combiner.straggler_epochs = spec.straggler_epochs
        self.spec, self.version = spec, version
        self.job_table.record_entry(JobEntry(self.name, spec_dict, RUNNING, version))
        self.changes_applied[version] = time.time()
        while len(self.changes_applied) > 64:
            self.changes_applied.popitem(last=False)
        self.count("changes_applied")
        return True

    def _reconfigure_job(self, job: Job, old: JobSpec, spec: JobSpec, version: int) -> bool:
        """Record thread: same aggregate; the running instance re-runs ``setup()`` with the
        new spec."""
        try:
            job.spec, job.params = spec, spec.params
            job.setup()
            if self.worker is not None:
                self.worker.replace_job(job)
                self._worker_stats = self.worker.stats()
        except ValueError as exc:  # the master validated it: a version skew, say
            job.spec, job.params = old, old.params
            job.setup()
            self.count("changes_refused")
            log.warning("job %s: change to version %d refused: %s", self.name, version, exc)
            return False
        return True

    def _switch_job(self, spec: JobSpec, version: int) -> Job | None:
        """Record thread: a new aggregate (and map) from epoch ``spec.aggregator_since`` on: a
        new job instance; the current one keeps mapping, and rendering results of, earlier
        epochs."""
        first = spec.aggregator_since
        assert first is not None
        try:
            job = create_job(spec)
            if self.worker is not None:
                self.worker.switch_job(job, first)
                self._worker_stats = self.worker.stats()
        except ValueError as exc:
            self.count("changes_refused")
            log.warning("job %s: change to version %d refused: %s", self.name, version, exc)
            return None
        return job

    def job_for(self, epoch: int) -> Job:
        """The job instance whose aggregate ``epoch`` was reduced with (they differ only
        after a runtime change of aggregate; see :meth:`_switch_job`)."""
        for first, job in self._jobs_before:  # oldest first
            if epoch < first:
                return job
        return self.job

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

    async def receive(self, sender: int, paos: Snapshot | Any) -> None:
        """A peer's ``send_to`` (``POST /agent/v1/recv``) to the job's ``on_recv``: a snapshot
        must match the current aggregate and key schema (409 ``incompatible``); an exception
        from ``on_recv`` answers 400 ``recv_refused`` (counted, logged), never a 500."""
        if isinstance(paos, Snapshot):
            try:
                paos = admit(self.expectation(None), paos)
            except Incompatible as exc:
                self.count("refused_incompatible")
                self._log.warning(
                    "refused_incompatible",
                    "job %s: refused a send_to snapshot from %x: %s",
                    self.name,
                    sender,
                    exc.detail,
                )
                raise
        try:
            await self.call_job(self.job.on_recv, sender, paos)
        except Exception as exc:
            self.count("recv_errors")
            self._log.warning(
                "recv_errors", "job %s: on_recv refused data from %x: %r", self.name, sender, exc
            )
            raise Reject(400, "recv_refused", f"the job's on_recv raised {exc!r}"[:300]) from None

    # ---- results and queries -----------------------------------------------------------------

    async def _master_url(self, tid: int) -> str:
        """The data-plane URL of the tree's master: ours, a cached answer (a few seconds
        old at most, shared by concurrent callers) or a fresh tree query."""
        trees = self.network.trees
        assert trees is not None
        view = trees.view(tid)
        if view is not None and view.is_root:
            return self.network.data_url
        now = time.monotonic()
        cached = self._master_urls.get(tid)
        if cached is not None and (not cached[0].done() or cached[1] > now):
            return await asyncio.shield(cached[0])
        lookup = asyncio.ensure_future(self._ask_master_url(tid))
        self._master_urls[tid] = (lookup, now + self.tunables.master_url_ttl)
        try:
            return await asyncio.shield(lookup)
        except Exception:
            self._master_urls.pop(tid, None)
            raise

    async def _ask_master_url(self, tid: int) -> str:
        trees = self.network.trees
        assert trees is not None
        try:
            reply = await trees.query(tid, {"op": "where"}, timeout=5.0)
        except Exception as exc:
            raise Unavailable(f"the master of {self.name!r} did not answer: {exc}") from None
        try:
            self._master_nodes[tid] = int(str(reply.get("node_id")), 16)
        except ValueError:
            self._master_nodes.pop(tid, None)
        return str(reply["data_url"])

    def forget_master_url(self, tid: int, exc: BaseException | None = None) -> None:
        """Drop the cached master URL of ``tid``; if ``exc`` says that master's port refused
        us, its process is gone: tell the overlay (the next lookup then routes past it to the
        standby instead of waiting for the failure detector)."""
        self._master_urls.pop(tid, None)
        node = self._master_nodes.pop(tid, None)
        if node is not None and isinstance(exc, DataPlaneError) and exc.reason == "refused":
            self.network.peer_gone(node)

    async def local_results(self, tid: int, epoch: Any) -> dict[str, Any]:
        """This master's result for (tree, epoch); ``gone`` names the bound that dropped an
        epoch it no longer holds. A spilled epoch is read back in a thread."""
        epochs = self.store.epochs(tid)
        if epoch is None:
            return {"epochs": epochs}
        result = self.store.get(tid, int(epoch))
        if result is None:  # an epoch before this master, or dropped: the lake may have it
            found = await self.lake.history(tid, int(epoch)) if self.lake is not None else None
            if found is not None and found["rows"] is not None:
                return {"epochs": epochs, **found}
            gone = self.store.gone(tid, int(epoch)) or (found or {}).get("gone")
            return {"epochs": epochs, "rows": None, "gone": gone}
        snap = result.snapshot
        if snap is None:
            try:
                snap = await asyncio.to_thread(self.store.load, tid, int(epoch))
            except Exception as exc:  # deleted meanwhile or damaged: say so, never guess
                self.count("result_spill_read_errors")
                return {"epochs": epochs, "rows": None, "gone": f"spill file unreadable: {exc}"}
        pairs = snap if self.spec.top_k is None else self.operator.result(snap)
        quality: dict[str, Any] = {}
        if self.spec.top_k is not None:  # the tree's accuracy estimate and its candidates
            quality = await self.accuracy.answer(
                tid, int(epoch), result, snap, k=self.spec.top_k, largest=self.spec.top_k_largest
            )
        return {
            "epochs": epochs,
            "rows": [[jsonable(k), jsonable(v)] for k, v in pairs],
            "updated": result.updated,
            "completed_at": result.completed_at,
            "version": result.version,
            "term": result.term,
            "tentative": result.tentative,
            "partial": result.partial,
            "state": result.state,
            "preview": result.preview,
            "coverage": result.coverage,
            "lacking": list(result.lacking),
            "origins": None if result.origins is None else len(covered(result.origins)),
            **quality,
        }

    def accuracy_now(self, tid: int, epoch: int, result: Any) -> float | None:
        """As master of a top-k job: the accuracy estimate of a stored result if computed
        already, else None - and it is computed in the background (off the loop) for the next
        reader (the dashboard's summary, built on the loop, never waits for it)."""
        if self.spec.top_k is None:
            return None
        got = self.accuracy.peek(tid, epoch, result.version)
        if got is not MISSING:
            return got
        snap = result.snapshot
        if snap is not None and (tid, epoch) not in self._estimating:
            self._estimating.add((tid, epoch))
            # this version's figures, as they are now: a fold meanwhile is another version
            now = SimpleNamespace(
                version=result.version, coverage=result.coverage, tentative=result.tentative
            )

            async def estimate() -> None:
                try:
                    await self.accuracy.answer(
                        tid, epoch, now, snap, k=self.spec.top_k or 1,
                        largest=self.spec.top_k_largest,
                    )  # fmt: skip
                finally:
                    self._estimating.discard((tid, epoch))

            self.tasks.spawn(estimate(), f"{self.name} accuracy")
        return None

    async def _tree_results(self, tid: int, epoch: int | None) -> dict[str, Any]:
        body = {"job": self.name, "tree": tid, "epoch": epoch}
        for attempt in range(2):  # a cached master URL may be stale after a hand-over
            url = await self._master_url(tid)
            if url == self.network.data_url:
                return await self.local_results(tid, epoch)
            try:
                return await self.network.client.post_json(url, "/agent/v1/results", body)
            except DataPlaneError as exc:
                self.forget_master_url(tid, exc)
                if attempt:
                    raise Unavailable(f"the master of {self.name!r} failed: {exc}") from None
        raise AssertionError("unreachable")

    async def results(self, epoch: int | None) -> dict[str, Any]:
        """The job's result for ``epoch`` (default: the newest epoch all m masters have)."""
        if epoch is not None and epoch < 0:
            raise BadRequest("epoch must be ≥ 0")
        if epoch is None:
            listings = await asyncio.gather(*(self._tree_results(t, None) for t in self.tree_list))
            common = set.intersection(*(set(x["epochs"]) for x in listings))
            if not common:
                raise NotFound(f"job {self.name!r} has no complete epoch yet")
            epoch = max(common)
        parts = await asyncio.gather(*(self._tree_results(t, epoch) for t in self.tree_list))
        missing = [i for i, p in enumerate(parts) if p.get("rows") is None]
        gone = sorted({str(p["gone"]) for p in parts if p.get("gone")})
        if gone:  # partly or wholly dropped by a bound: never a silently partial answer
            raise Gone(
                f"job {self.name!r}: epoch {epoch} is no longer held by its master "
                f"({'; '.join(gone)}); read it from the lake"
            )
        if len(missing) == len(parts):
            raise NotFound(f"job {self.name!r} has no result for epoch {epoch}")
        held = [p for p in parts if p.get("rows") is not None]
        rows = [row for p in held for row in p["rows"]]
        if self.spec.top_k is not None:
            # Trees own disjoint key ranges, so the global top k is among the trees' top k;
            # the stable sort keeps the trees' hash order among equal values.
            rows.sort(key=lambda r: r[1], reverse=self.spec.top_k_largest)
            del rows[self.spec.top_k :]
        # e.g. QL: named columns, HAVING, ORDER BY
        named = await self.call_job(self.job_for(epoch).result_rows, rows)
        return {
            "job": self.name,
            "epoch": epoch,
            "epoch_seconds": self.spec.schedule.seconds_of(epoch),
            "epoch_start": self.spec.schedule.start(epoch),
            "complete": not missing,
            "updated": any(p.get("updated") for p in parts),
            # tentative until every expected origin is in (docs/fault-tolerance.md)
            "tentative": (tentative := bool(missing) or any(p.get("tentative") for p in parts)),
            # partial: lacks only origins given up on (retired, past repair)
            "partial": (partial := not tentative and any(p.get("partial") for p in parts)),
            "state": "tentative" if tentative else "partial" if partial else "final",
            "preview": any(p.get("preview") for p in parts),
            "coverage": min((float(p.get("coverage", 1.0)) for p in held), default=0.0),
            "accuracy": (
                None
                if self.spec.top_k is None or missing
                else await merged_accuracy(held, self.spec.top_k)
            ),
            "lacking": sorted({o for p in parts for o in p.get("lacking") or ()}),
            "version": max((int(p.get("version", 1)) for p in held), default=1),
            "term": max((int(p.get("term", 0)) for p in held), default=0),
            "rows": rows if named is None else named,
            **provenance(parts),
        }

    async def answer_query(self, message: Any) -> dict[str, Any]:
        if not isinstance(message, dict):
            return {"error": "query message must be a JSON object", "status": 400}
        reply = await self.call_job(self.job.on_query, message)
        if not isinstance(reply, dict):
            return {"error": "the job's on_query returned no object", "status": 500}
        return reply

    async def query_master(self, message: dict[str, Any]) -> dict[str, Any]:
        return await self._context.route(self.app_id, message)

    # ---- progress, for durable offsets (offsets.JobProgress) ---------------------------------

    @property
    def clock(self) -> EpochClock | None:
        """The worker's event-time clock; None when this agent has no input of the job."""
        return self.worker.clock if self.worker is not None else None

    def outflow(self) -> list[TreeOutflow] | None:
        """Where each of the job's trees stands here: its barrier's next epoch, the oldest
        epoch its parent has not acknowledged, whether this agent masters it; None while a
        tree has no barrier yet."""
        out = []
        for tid in self.tree_list:
            combiner = self.combiners.get(tid)
            if combiner is None:
                return None
            view = self._view(tid)
            is_root = view is not None and view.is_root
            sender = self.senders.get(tid)
            oldest = None
            if sender is not None and not is_root:  # a root's emitted epochs are stored
                queued = sender.pending()["queued"]
                oldest = queued[0] if queued else None
            committed = self.committed.get(tid)
            if committed is not None and self.spec.mode == "window":
                # a restarted worker rebuilds its open windows' panes from what it re-reads:
                # the read position stays window_size - 1 epochs behind the commit (the
                # re-sent windows up to the commit are duplicates, dropped by lineage)
                committed -= self.spec.window_size - 1
            out.append(TreeOutflow(combiner.next_epoch, oldest, is_root, committed))
        return out

    # ---- status ------------------------------------------------------------------------------

    @property
    def is_master(self) -> bool:
        view = self._view(self.tree_list[0])
        return bool(view is not None and view.is_root)

    def roles(self) -> list[str]:
        roles = []
        if self.worker is not None:
            roles.append("worker")
        views = [v for t in self.tree_list if (v := self._view(t)) is not None]
        if any(v.children and not v.is_root for v in views):
            roles.append("forwarder")
        if any(v.is_root for v in views):
            roles.append("master")
        return roles

    def status(self) -> dict[str, Any]:
        views = [v for t in self.tree_list if (v := self._view(t)) is not None]
        return {
            "app_id": f"{self.app_id:040x}",
            "tree_ids": [f"{t:040x}" for t in self.tree_list],
            "roles": self.roles(),
            "inputs": self.inputs,
            "trees": [v.to_dict() for v in views],
            "barrier": {f"{t:040x}": c.pending() for t, c in self.combiners.items()},
            "stragglers": self._stragglers(),
            "upstream": {f"{t:040x}": s.pending() for t, s in self.senders.items()},
            "worker": self.worker_stats(),
            "cpu": self.cpu_status(),
            "results": {f"{t:040x}": self.store.epochs(t)[-8:] for t in self.store.trees()},
            "memory": {"results": self.store.stats(), **self._worker_memory()},
            "multicasts_received": len(self.multicasts),
            "multicast_stats": self.multicast_stats[-8:],
            "counters": dict(self.counters),
            "committed": {f"{t:040x}": e for t, e in self.committed.items()},
            "retained": self.retained.stats(),
            "checkpoints": self.checkpoints.stats(),
            "losses": self.loss.status(),
            "replication": self.replication.stats(),
            "replicas": {f"{t:040x}": r.stats() for t, r in self.replicas.items()},
            "origins_expected": self.membership.origins(),
            "membership": self.membership_status(),
            "terms": self.fence.stats(time.time()),
            "lake": self.lake.stats() if self.lake is not None else None,
        }

    def _stragglers(self) -> dict[str, Any]:
        """Straggler leaping here (every tree's barrier) and tentative previews as master."""
        leaps = sorted(
            (leap for c in self.combiners.values() for leap in c.leaps),
            key=lambda leap: leap.emitted_at,
        )
        return {
            "straggler_epochs": self.spec.straggler_epochs,
            "leapt": sum(c.counters["leapt"] for c in self.combiners.values()),
            "leapt_epochs": sum(c.counters["leapt_epochs"] for c in self.combiners.values()),
            "stale_leapt": sum(c.counters["stale_leapt"] for c in self.combiners.values()),
            "recent_leaps": [leap.to_dict() for leap in leaps[-16:]],
            "tentative_deadline": self.spec.tentative_deadline_for(
                self.spec.schedule.epoch_of(time.time())
            ),
            "previews": self.previews.stats(),
        }

    def _worker_memory(self) -> dict[str, Any]:
        if self.worker is None:
            return {}
        return {
            "worker_bytes": self.worker.memory_bytes(),
            "worker_budget_bytes": self.worker.memory_budget_bytes,
        }

    def timings(self, recent: int = 64) -> dict[str, Any]:
        """Epoch and control latency evidence (wall-clock seconds), for operators and the
        benchmark: when this agent sent each recent epoch upward, when the epochs it masters
        completed, and when the recent control multicasts were sent and received."""
        sent = list(self.sent_at.items())[-recent:]
        return {
            "sent_at": [[f"{t:040x}", e, at] for (t, e), at in sent],
            "completed_at": [
                [f"{t:040x}", e, r.completed_at]
                for t in self.store.trees()
                for e in self.store.epochs(t)[-recent:]
                if (r := self.store.get(t, e)) is not None
            ],
            "multicasts_received": [
                {k: m.get(k) for k in ("kind", "epoch", "sent_at", "received_at")}
                for m in self.multicasts[-recent:]
            ],
            "multicasts_sent": self.multicast_stats[-recent:],
            "changes_applied": [[v, at] for v, at in self.changes_applied.items()],
            # as master: per epoch, closed (epoch clock) / preview / stored / final times
            "epochs": self.previews.timeline(recent),
            "leaps": [leap.to_dict() for c in self.combiners.values() for leap in c.leaps],
        }


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


class _Context:
    """The :class:`~agent.jobs.job.JobContext` the runtime gives each job instance."""

    def __init__(self, runtime: JobRuntime) -> None:
        self._rt = runtime

    @property
    def node_id(self) -> int:
        return self._rt.network.node_id

    @property
    def is_master(self) -> bool:
        return self._rt.is_master

    @property
    def feedback(self) -> Any:
        return self._rt.job.feedback

    async def subscribe(self, app: int) -> None:
        trees = self._rt.network.trees
        assert trees is not None
        await trees.join(self._rt.job_table.master_tree(app), job=self._rt.name, subscriber=False)

    async def send_to(self, node_id: int, paos: Snapshot | dict[str, Any]) -> None:
        network = self._rt.network
        url = await network.data_url_of(node_id)
        body: dict[str, Any] = {"job": self._rt.name, "from": f"{network.node_id:040x}"}
        if isinstance(paos, Snapshot):
            body["snapshot"] = base64.b64encode(paos.to_bytes()).decode()
        else:
            body["data"] = paos
        await network.client.post_json(url, "/agent/v1/recv", body)

    async def multicast(self, message: dict[str, Any]) -> Any:
        if not self._rt.is_master:
            raise BadRequest("only the job's master can multicast")
        if "kind" in message and message["kind"] in ("feedback", "empty"):
            raise BadRequest("multicast kinds 'feedback' and 'empty' are reserved")
        return await self._rt._multicast(self._rt.tree_list[0], message)

    async def route(self, app: int, message: dict[str, Any]) -> dict[str, Any]:
        trees = self._rt.network.trees
        assert trees is not None
        tree = self._rt.job_table.master_tree(app)
        try:
            reply = await trees.query(tree, {"op": "job_query", "message": message}, timeout=10.0)
        except Exception as exc:
            raise Unavailable(f"no reply from the master of app {app:040x}: {exc}") from None
        if "error" in reply:
            status = reply.get("status", 400)
            raise (NotFound if status == 404 else BadRequest)(str(reply["error"]))
        return reply
