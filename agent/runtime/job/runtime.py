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
* **Fault tolerance** - late contributions, the results passed to a new master, what a
  result lacks, the standby, who the origins are - is :attr:`JobRuntime.recovery`
  (:class:`~agent.runtime.recovery.recovery.Recovery`): the runtime tells it what happens
  on this path (an own epoch closed, a result stored, an epoch already emitted here, the
  root role gained or lost) and it reaches the runtime through a narrow host.
* **Peers are checked** before anything of theirs touches state: every snapshot a peer
  sends (a child's, a late contribution, a previous master's item, a ``send_to``) must be of one of
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
from agent.runtime.recovery.offsets import TreeOutflow
from agent.runtime.recovery.recovery import Recovery
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
from srt.dataplane.lineage import Lineage, counted, covered
from srt.dataplane.lineage import encode as with_lineage
from srt.dataplane.operators import level_operator_for
from srt.errors import Incompatible, Reject, RetryLater
from srt.trees.types import JoinTimeout

log = logging.getLogger(__name__)

#: epochs of clock skew a peer may be ahead of this agent's ``max_future`` horizon (as the
#: barrier's ``max_ahead``)
HORIZON_SLACK = 10_000


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
        submitted = JobSpec.from_dict(entry.spec)  # before resume_spec moved its start
        self._identity = [submitted.name, submitted.creator, submitted.start_epoch]
        #: all fault tolerance (agent/runtime/recovery/recovery.py); it reaches this
        #: runtime only through _Host
        self.recovery = Recovery(
            _Host(self),
            network=network,
            tasks=tasks,
            tunables=t,
            store=self.store,
            app_id=self.app_id,
            identity=self._identity,
            data_dir=data_dir,
        )
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
            expected=self.recovery.expected,
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
        await self.recovery.start(origin=self.worker is not None)
        if self.worker is None:
            return
        for tid in self.tree_list:
            self.ensure_tree(tid)
            try:
                await trees.join(tid, job=self.name, subscriber=True)
            except JoinTimeout:  # the tree manager keeps trying; its callbacks finish the job
                self.count("join_timeouts")
                continue
            self.parent_changed(tid)
            self.children_changed(tid)
            if self._is_root(tid) and not self.recovery.is_rooted(tid):
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
        self.sent_at.clear()
        self.multicasts.clear()
        self._master_urls.clear()
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
            self.recovery.parent_seen(tid)
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
        if is_root and self.recovery.is_rooted(tid):
            return  # already the root here (the missed-event path of start() ran first)
        if not is_root:
            self.recovery.lost_root(tid)  # the new master publishes what it takes over
        self.parent_changed(tid)
        if is_root:
            self.recovery.became_root(tid)

    def lake_fenced(self, tid: int, epoch: int, newer_term: int) -> None:
        """The lake holds a newer term's version of (tree, epoch) (results/lake_sink.py)."""
        self.recovery.lake_fenced(tid, epoch, newer_term)

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
        self.recovery.publish(tid, epoch)
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
                incomplete_until=self.recovery.incomplete_until,
            )
            if not complete:
                self.count("incomplete_epochs")
            # every tree's part counts the origin's records of the epoch: a tree's coverage
            # is a share, and the origin's share is the same in each key range (as estimated)
            records = self._closed_records.pop(epoch, None)
            for tid, part in zip(self.tree_list, parts, strict=True):
                if complete:
                    self.recovery.closed(tid, epoch, part, records)
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
                    self.recovery.fold_in(name, part, counted((self.network.node_id,), own))
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
            expected, doubtful = self.recovery.expected(epoch)
            stored_at = time.time()
            if self.store.put(
                tid, epoch, snap, stored_at, origins=lineage, expected=expected, doubtful=doubtful
            ):
                self.observer.epoch_stored(self.name, self.spec.schedule.end(epoch), stored_at)
                self.recovery.epoch_stored(tid, epoch, lineage)
                self.tasks.spawn(self._master_epoch(tid, epoch, snap), f"{self.name} result")
                self.previews.stored(tid, epoch)
            else:
                # The epoch is stored already: a previous master handed it over before our
                # barrier got here (a restarted master re-reading the epochs it missed while
                # dead). What we add is a late contribution, folded in by lineage - dropped,
                # the result would lack our origin for good.
                self.count("emitted_after_handover")
                name = SnapshotName(self.name, tid, epoch, self.network.node_id)
                self.recovery.fold_in(name, snap, lineage)
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
        return self.recovery.fold_in(name, snap, origins)

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
        if self.recovery.on_multicast(tid, message):  # fault tolerance's own kinds
            return
        if self.worker is not None:
            await maybe_await(await self.records.run(self.worker.on_multicast, message))
        else:
            if message.get("kind") == "feedback":
                self.job.feedback = message.get("value")
            await self.call_job(self.job.on_multicast, message)

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
            upto = self.recovery.readable_upto(tid)
            out.append(TreeOutflow(combiner.next_epoch, oldest, is_root, upto))
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
            **self.recovery.status(),
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
        return self._rt._stopped

    @property
    def is_origin(self) -> bool:
        return self._rt.worker is not None

    @property
    def has_lake(self) -> bool:
        return self._rt.lake is not None

    @property
    def previews(self) -> TentativePreviews:
        return self._rt.previews

    def is_root(self, tid: int) -> bool:
        return self._rt._is_root(tid)

    def known_tree(self, tid: int) -> None:
        self._rt._known_tree(tid)

    def ensure_tree(self, tid: int) -> EpochCombiner:
        return self._rt.ensure_tree(tid)

    def barrier(self, tid: int) -> EpochCombiner | None:
        return self._rt.combiners.get(tid)

    def take_queued(self, tid: int) -> list[tuple[int, bytes]]:
        return self._rt.senders[tid].take_queued()

    def count(self, what: str, n: int = 1) -> None:
        self._rt.count(what, n)

    async def multicast(self, tid: int, message: dict[str, Any]) -> Any:
        return await self._rt._multicast(tid, message)

    async def master_url(self, tid: int) -> str:
        return await self._rt._master_url(tid)

    def forget_master_url(self, tid: int, exc: BaseException | None = None) -> None:
        self._rt.forget_master_url(tid, exc)

    async def replay_result(self, epoch: int, snap: Snapshot) -> None:
        rt = self._rt
        await rt.call_job(rt.job_for(epoch).on_epoch_result, epoch, snap)

    def bound_results(self) -> None:
        self._rt._bound_results()

    def lake_epoch(self, tid: int, epoch: int) -> None:
        lake = self._rt.lake
        if lake is not None:
            lake.epoch(tid, epoch)

    def seen_epoch(self) -> int | None:
        return self._rt._seen_epoch()


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
