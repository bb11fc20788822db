"""The epoch pipeline of one job on one agent: records in, closed epochs up the trees.

Contract (:class:`EpochPipeline`, one per job runtime):

* **Record thread** (:meth:`~EpochPipeline.work`): new records (per input name) go to the
  worker within the job's CPU budget (:class:`~agent.runtime.epochs.cpu_budget.CpuBudget`,
  ``RuntimeTunables.cpu_budget_share`` of one core over ``cpu_budget_window`` s). A job over
  its budget processes no new records until it is back under: they wait in order in its
  backlog (bounded: :meth:`~EpochPipeline.backlog_full` stops the agent polling the inputs
  the job reads), its idle clock is kept from advancing over them, and it is reported (``cpu``
  in its status, the ``cpu_throttled`` counter, one WARNING per episode naming the job). The
  epochs the worker's watermark closed are returned, each split into the m tree partitions,
  and the worker's stats are published for the loop (:meth:`~EpochPipeline.worker_stats`).
* **Event loop** (:meth:`~EpochPipeline.deliver`): each closed epoch's partitions are offered to
  the trees' barriers (an origin's whole share goes to its fault tolerance first); a
  partition whose epoch the barrier already passed is a late contribution, folded in at the
  master by lineage. The master's timer (``Job.timer_interval``) runs from here.
* **Up or stored**: an epoch a barrier emits below the root is sent to the parent
  (:meth:`~EpochPipeline.send_up`; when is kept for the timings); at the root the runtime
  stores it and the master's hooks run (:meth:`~EpochPipeline.master_epoch`: the job's
  ``on_epoch_result``, a session query's closed sessions to the lake, then a feedback or
  "empty" multicast for iterative and batch jobs).
* **Late records**: after each batch, what the clock refused as late goes to the worker's
  :class:`~agent.runtime.epochs.late.LateRecords` (counted, sampled to the dead-letter file,
  logged); the counts it queued for the master go to the loop with the closed epochs and on to
  :attr:`EpochPipeline.late_reports` (:mod:`agent.runtime.job.late_reports`).
* **Taps**: each batch the worker is about to process is offered to the job's open taps
  (:attr:`EpochPipeline.taps`, :mod:`agent.runtime.job.tap`): one check per batch when none is
  open; a tap copies at most its limit of records and never blocks or changes them.
* **Bounds**: past the results' byte budget, :meth:`~EpochPipeline.bound_results` spills the
  oldest epochs, one background task at a time, encoding and writing off the event loop.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections import OrderedDict, deque
from typing import Any

import numpy as np

from agent.jobs.job import Job
from agent.runtime.epochs.cpu_budget import CpuBudget
from agent.runtime.job.host import JobHost
from agent.runtime.job.late_reports import LateReporter
from agent.runtime.job.tap import JobTaps
from cbt import Snapshot
from srt import SnapshotName
from srt.dataplane.lineage import Lineage, absent, counted
from srt.dataplane.lineage import encode as with_lineage
from srt.dataplane.operators import select

log = logging.getLogger(__name__)


class EpochPipeline:
    """The data path of one job here (see the module contract). ``cpu`` is the job's CPU
    budget; ``sent_at`` when each recent epoch (tree, epoch) was sent upward (at most 256)."""

    def __init__(self, host: JobHost) -> None:
        self.host = host
        tunables = host.tunables
        self.cpu = CpuBudget(tunables.cpu_budget_share, tunables.cpu_budget_window)
        #: records waiting for the CPU budget, per batch, in arrival order (record thread)
        self._backlog: deque[tuple[str, Any]] = deque()
        self._backlog_records = 0
        #: closed epoch → its record count here, from the record thread to deliver
        self._closed_records: dict[int, int] = {}
        self._throttled = False
        #: the worker's stats as the record thread last published them (None: no worker)
        self._worker_stats = host.worker.stats() if host.worker is not None else None
        self._spilling = False
        self._last_timer = 0.0
        self.sent_at: OrderedDict[tuple[int, int], float] = OrderedDict()  # upward sends
        #: live samples of the records the worker processes (``elf tap``; agent/runtime/job/tap.py)
        self.taps = JobTaps()
        #: late counts for the master, from the record thread to the loop (epochs/late.py)
        self._late_out: deque[dict[int, dict[str, int]]] = deque()
        #: sends them to the master (set by the runtime; None: counted here only)
        self.late_reports: LateReporter | None = None

    def tick(self, batches: dict[str, list[dict[str, Any]]], now: float) -> None:
        """Feed new records (per input name) to the worker, offer closed epochs to the trees'
        barriers, run the master's timer: :meth:`work` then :meth:`deliver`, inline."""
        self.deliver(self.work(batches), now)

    def work(self, batches: dict[str, list[dict[str, Any]]]) -> list[tuple[int, list[Snapshot]]]:
        """Record thread: feed new records to the worker (within the job's CPU budget; see
        the module's contract) and return the epochs its watermark closed, each split into
        the m tree partitions."""
        host = self.host
        if host.stopped or host.worker is None:
            return []
        worker = host.worker
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
            ts_field = host.input_service.timestamp_field(name)
            if self.taps.active:  # one check per batch; empty while nobody taps
                self.taps.offer(name, records, ts_field, worker.clock.epoch_of)
            worker.process(records, ts_field=ts_field, skipped=getattr(records, "skipped", 0))
            if late := worker.clock.take_late():  # counted, sampled, logged (epochs/late.py)
                mark = worker.clock.current_watermark
                worker.late.collect(name, late, watermark=mark, records=records, ts_field=ts_field)
            spent = time.thread_time() - started
            self.cpu.charge(spent)
            started += spent
            over = self.cpu.over()
        if self._backlog:
            # records are waiting here, not absent: the idle clock must not close their epochs
            worker.clock.touch()
        elif self._throttled:
            self._throttled = False
            log.info("job %s: back within its CPU budget", host.name)
        closed = []
        for epoch, snap in worker.poll():
            closed.append((epoch, snap.split_by_hash(len(host.tree_list))))
        # the records of each closed epoch travel with its lineage (the master's coverage);
        # handed to the loop with the epochs (deliver pops them: bounded by what it delivers)
        self._closed_records.update(worker.take_closed_records())
        if report := worker.late.take_report():
            self._late_out.append(report)  # bounded: deliver drains it every tick
        self.cpu.charge(time.thread_time() - started)
        self._worker_stats = worker.stats()
        return closed

    def tick_due(self, now: float) -> float:
        """Record thread: the wall-clock time by which this job needs its next tick if no
        record arrives - ``now`` while records wait for its CPU budget, else the earlier of
        its clock's next close (:meth:`EpochClock.close_due`) and, on the master, its next
        ``on_timer``; ``inf`` when neither comes (the tick loop still ticks every second)."""
        host = self.host
        if host.stopped:
            return math.inf
        if self._backlog:
            return now
        due = math.inf
        if host.worker is not None:
            due = host.worker.clock.close_due(now)
        interval = type(host.job).timer_interval
        if interval and host.is_master:
            due = min(due, self._last_timer + interval)
        return due

    def _throttle_started(self) -> None:
        self.cpu.throttled_ticks += 1
        self.host.count("cpu_throttled")
        if not self._throttled:
            self._throttled = True
            self.cpu.episodes += 1
            log.warning(
                "job %s: over its CPU budget (%.0f %% of a core over %.0f s, budget %.0f %%); "
                "throttled, %d records waiting",
                self.host.name,
                100 * self.cpu.used() / self.cpu.window,
                self.cpu.window,
                100 * self.cpu.share,
                self._backlog_records,
            )

    def backlog_full(self) -> bool:
        """Whether the records waiting for this job's CPU budget reached their bound (the
        agent then leaves the inputs it reads unpolled)."""
        return self._backlog_records >= self.host.tunables.max_backlog_records

    def deliver(self, closed: list[tuple[int, list[Snapshot]]], now: float) -> None:
        """Event loop: offer the closed epochs' partitions to the trees' barriers, run the
        master's timer."""
        host = self.host
        if host.stopped:
            return
        node_id = host.network.node_id
        for epoch, parts in closed:
            # a window needing a pane from before this worker's first whole one is short here
            complete = host.recovery.whole(epoch)
            if not complete:
                host.count("incomplete_epochs")
            # every tree's part counts the origin's records of the epoch: a tree's coverage
            # is a share, and the origin's share is the same in each key range (as estimated)
            records = self._closed_records.pop(epoch, None)
            for tid, part in zip(host.tree_list, parts, strict=True):
                if complete:
                    host.recovery.closed(tid, epoch, part, records)
                res = host.trees.ensure_tree(tid).offer_local(
                    epoch, part, complete=complete, records=records
                )
                if host.recovery.replicated():
                    # a position's holder is one of its members: its own share goes to the
                    # position's replicas as a child's would (empty, with its absence marker,
                    # when incomplete here - the barrier's own rule); a no-op unless this
                    # agent holds a replicated position of the tree
                    own = counted((node_id,), None if records is None else {node_id: records})
                    share = part if complete else select(part, np.empty(0, np.intp))
                    lineage = own if complete else frozenset((absent(node_id),))
                    host.recovery.to_replicas(
                        tid, epoch, with_lineage(lineage, share.to_bytes()), own=True
                    )
                if res == "stale" and complete:
                    # our barrier passed the epoch without our own records (it leapt over
                    # our worker, or our input joined after the epoch went up): they go to
                    # the master, which folds them in by lineage (never twice)
                    host.count("late_local")
                    name = SnapshotName(host.name, tid, epoch, node_id)
                    own = {node_id: records} if records is not None else None
                    host.recovery.fold_in(name, part, counted((node_id,), own))
        if closed:
            for tid in host.tree_list:
                host.previews.watch(tid)
        while self._late_out:
            report = self._late_out.popleft()
            if self.late_reports is not None:
                self.late_reports.add(report)
        if self.late_reports is not None:
            self.late_reports.flush()
        interval = type(host.job).timer_interval
        if interval and now - self._last_timer >= interval and host.is_master:
            self._last_timer = now
            host.tasks.spawn(host.call_job(host.job.on_timer), f"{host.name} on_timer")

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

    def refresh_worker_stats(self) -> None:
        """Record thread: publish the worker's stats now (after its job was replaced)."""
        worker = self.host.worker
        if worker is not None:
            self._worker_stats = worker.stats()

    def send_up(self, tid: int, epoch: int, snap: Snapshot, lineage: Lineage | None) -> None:
        """An epoch a barrier below the root emitted: to the parent, with its lineage."""
        host = self.host
        name = SnapshotName(host.name, tid, epoch, host.network.node_id)
        payload = snap.to_bytes()
        payload = payload if lineage is None else with_lineage(lineage, payload)
        host.senders[tid].send(name, payload)
        if host.recovery.replicated():
            host.recovery.to_replicas(tid, epoch, payload)
        self.sent_at[(tid, epoch)] = time.time()
        while len(self.sent_at) > 256:
            self.sent_at.popitem(last=False)

    async def master_epoch(self, tid: int, epoch: int, snap: Snapshot) -> None:
        """As master, an epoch stored: the job's ``on_epoch_result``, then the feedback
        (iterative jobs) or "empty" (batch jobs) multicast down the tree."""
        host = self.host
        job = host.changes.job_for(epoch)
        stored = host.store.peek(tid, epoch)
        if stored is not None and stored.state != "final":  # final: no hop to the job
            await host.call_job(job.on_epoch_quality, epoch, stored.state, list(stored.lacking))
        await host.call_job(job.on_epoch_result, epoch, snap)
        if tid == host.tree_list[0]:
            self.sessions_to_lake(job, epoch)
        if host.spec.mode == "iterative":
            value = await host.call_job(job.feedback_for, epoch, snap)
            if value is not None:
                await host.control.multicast(
                    tid, {"kind": "feedback", "epoch": epoch, "value": value}
                )
        elif host.spec.mode == "batch":
            await host.control.multicast(tid, {"kind": "empty", "epoch": epoch})

    def sessions_to_lake(self, job: Job, epoch: int, revised: bool = False) -> None:
        """As master, once ``job`` merged ``epoch`` (stored, or replayed by a master that
        took over): the windows it closed with the epoch (``Job.closed_windows``: a session
        query's sessions) to the lake, beside the epoch's own rows; ``revised``: again, as a
        new version (the job flagged them since: ``Job.on_late_records``)."""
        host = self.host
        if host.lake is None:
            return
        closed = job.closed_windows(epoch)
        if closed is None or not isinstance(closed.get("rows"), list):
            return
        rows = closed["rows"]
        # flags are only ever added, a revision adds at least one: 1 + their number grows
        # with each revision, past the first write's 1, with no state kept here
        version = 1 + sum(len(r.get("flags") or ()) for r in rows) if revised else 1
        host.lake.sessions(host.tree_list[0], epoch, rows, version)

    def bound_results(self) -> None:
        """Past the results' byte budget, spill the oldest epochs (one background task at a
        time; encoding and writing run in a thread, never on the event loop)."""
        host = self.host
        if self._spilling or host.stopped or not host.store.over_budget():
            return
        self._spilling = True
        host.tasks.spawn(self._spill_results(), f"{host.name} spill results")

    async def _spill_results(self) -> None:
        host = self.host
        store = host.store
        try:
            while not host.stopped and (batch := store.spill_candidates()):
                for tid, epoch, snap in batch:
                    size: int | None = None
                    try:
                        size = await asyncio.to_thread(store.spill_write, tid, epoch, snap)
                    except OSError as exc:  # disk full, say: keep it resident, say so
                        host.count("result_spill_errors")
                        log.warning("job %s: spilling epoch %d failed: %r", host.name, epoch, exc)
                    if host.stopped:
                        return
                    store.spilled(tid, epoch, snap, size)
                    if size is None:
                        return
                    host.count("results_spilled")
        finally:
            self._spilling = False
