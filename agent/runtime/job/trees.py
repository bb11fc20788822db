"""The job's trees on one agent: a barrier and an upstream sender per tree, and what peers
may send into them.

Contract (:class:`TreeLinks`, one per job runtime, on the event loop):

* :meth:`~TreeLinks.ensure_tree` builds a tree's :class:`~srt.dataplane.barrier.EpochCombiner`
  (the barrier merging the local snapshot with every child's for an epoch; its emitted epochs
  go to the runtime's ``emit``) and :class:`~srt.dataplane.upstream.UpstreamSender` (to the
  parent) once, in the runtime's ``combiners`` and ``senders``.
* The tree manager's callbacks keep them current: :meth:`~TreeLinks.parent_changed` points the
  sender at the new parent, :meth:`~TreeLinks.children_changed` tells the barrier whom to
  wait for. A parent whose port refused a snapshot is reported gone to the overlay at once.
* **Peers are checked** before anything of theirs touches state
  (:meth:`~TreeLinks.offer_child`): the tree must be one of the job's (503 ``unknown_job``),
  the epoch within the barrier's bounds (503 ``epoch_ahead``; :meth:`~TreeLinks.horizon`) and
  the snapshot must match :meth:`~TreeLinks.expectation` for its epoch - the aggregator of the
  job instance that reduces it and the job's key schema - else 409 ``incompatible``. A child's
  snapshot for an epoch already emitted here is a late contribution, folded in at the master
  by lineage (never twice).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable

from agent.jobs.job import Job
from agent.runtime.job.host import JobHost, tree_view
from cbt import Snapshot
from srt import EpochCombiner, SnapshotName, UpstreamSender
from srt.dataplane.compat import Expectation
from srt.dataplane.lineage import Lineage
from srt.errors import RetryLater

log = logging.getLogger(__name__)

#: epochs of clock skew a peer may be ahead of this agent's ``max_future`` horizon (as the
#: barrier's ``max_ahead``)
HORIZON_SLACK = 10_000
#: a dead child whose replicated position a replica serves stays a child this long after
#: each epoch the replica sent (it says when it is done)
POSITION_PIN_SECONDS = 10.0
#: a mirror's copy (adaptive) pins its holder for this share of the latency target plus the
#: slack: the mirror's hedge (half the target) and the copy's way here
MIRROR_PIN_SHARE = 0.5
MIRROR_PIN_SLACK = 1.0


class TreeLinks:
    """The barriers and senders of one job's trees here (see the module contract).
    ``emit(tid, epoch, snapshot)`` is told of each epoch a tree's barrier emits."""

    def __init__(self, host: JobHost, emit: Callable[[int, int, Snapshot], None]) -> None:
        self.host = host
        self._emit = emit
        #: per job instance (by id, the instance kept alive alongside): what its epochs accept
        self._expectations: dict[int, tuple[Job, Expectation]] = {}
        #: per tree: members kept as children until a monotonic time (pin_children)
        self._pins: dict[int, dict[int, float]] = {}
        self._pin_watch: set[int] = set()  # trees whose pins a task watches

    def ensure_tree(self, tid: int) -> EpochCombiner:
        """The barrier of tree ``tid``, built (with its sender) when first needed."""
        host = self.host
        combiner = host.combiners.get(tid)
        if combiner is None:
            combiner = self.new_barrier(
                tid,
                lambda epoch, snap, tid=tid: self._emit(tid, epoch, snap),
                expect_local=host.worker is not None,
            )
            host.combiners[tid] = combiner
            host.senders[tid] = UpstreamSender(
                host.network.client,
                job=host.name,
                tree=tid,
                sender=host.network.node_id,
                tunables=host.network.srt_tunables,
                shortcut=host.network.snapshot_datagrams,
            )
            host.senders[tid].on_refused = lambda url, tid=tid: self._parent_refused(tid, url)
        return combiner

    def new_barrier(
        self,
        tid: int,
        emit: Callable[[int, Snapshot], None],
        *,
        expect_local: bool = False,
        floating: bool = False,
        first_epoch: int | None = None,
    ) -> EpochCombiner:
        """A barrier of tree ``tid`` with the job's operator, checks and straggler rule (the
        tree's own, or - ``floating``: starting at the first epoch offered, not the job's
        start - a replica of its master position's: ``recovery/active_replicas.py``; or
        ``first_epoch``: from that epoch - one epoch of a mirror, ``mirror_position.py``)."""
        host = self.host
        return EpochCombiner(
            job=host.name,
            tree=tid,
            expect_local=expect_local,
            children=(),
            emit=emit,
            operator=host.operator,
            first_epoch=first_epoch
            if first_epoch is not None
            else (None if floating else host.spec.start_epoch),
            expect=self.expectation,
            horizon=self.horizon,
            origin=host.network.node_id,
            straggler_epochs=host.spec.straggler_epochs,
            straggler_wait=self._straggler_wait,
        )

    def pin_children(self, tid: int, members: Iterable[int], seconds: float) -> None:
        """Keep ``members`` among the barrier's children for ``seconds`` (at least; a later
        pin extends it) although the tree layer does not list them: a new root waiting for
        its dead predecessor's members to re-join, or a parent waiting for a dead child whose
        replicated position a replica serves (``recovery/active_replicas.py``)."""
        until = time.monotonic() + seconds
        pins = self._pins.setdefault(tid, {})
        added = False
        for member in members:
            added = added or member not in pins
            pins[member] = max(until, pins.get(member, 0.0))
        if added:
            self.children_changed(tid)
        if tid not in self._pin_watch:
            self._pin_watch.add(tid)
            self.host.tasks.spawn(self._unpin_when_due(tid), f"{self.host.name} pins")

    def unpin_child(self, tid: int, member: int) -> None:
        """``member`` stops being kept among the children (its replica is done, or it
        moved to another parent)."""
        if self._pins.get(tid, {}).pop(member, None) is not None:
            self.children_changed(tid)

    async def _unpin_when_due(self, tid: int) -> None:
        """As pins end, members that never re-joined stop being waited for."""
        try:
            while not self.host.stopped and self._pins.get(tid):
                due = min(self._pins[tid].values()) - time.monotonic()
                await asyncio.sleep(max(0.0, due) + 0.01)
                held = set(self._pins.get(tid, {}))
                if self._pinned(tid) != held:  # some pin ended (a later pin may extend one)
                    self.children_changed(tid)
        finally:
            self._pin_watch.discard(tid)

    def _pinned(self, tid: int) -> set[int]:
        now = time.monotonic()
        pins = {m: t for m, t in self._pins.get(tid, {}).items() if t > now}
        self._pins[tid] = pins
        return set(pins)

    def expectation(self, epoch: int | None) -> Expectation:
        """What a snapshot of ``epoch`` must be: the aggregator of the job instance that
        reduces that epoch (None: the current one) and its key check."""
        host = self.host
        job = host.job if epoch is None else host.changes.job_for(epoch)
        cached = self._expectations.get(id(job))
        if cached is None or cached[0] is not job:
            key_check = None if type(job).keys_problem is Job.keys_problem else job.keys_problem
            cached = (job, Expectation(job.make_aggregator(), key_check=key_check))
            live = {id(j) for _, j in host.changes.jobs_before} | {id(host.job)}
            self._expectations = {k: v for k, v in self._expectations.items() if k in live}
            self._expectations[id(job)] = cached
        return cached[1]

    def horizon(self) -> int | None:
        """The highest epoch a peer may send: a worker drops records more than ``max_future``
        seconds ahead of its clock, so no honest snapshot is later than that epoch (plus the
        barrier's ``max_ahead`` for clock skew). None when the spec sets no ``max_future``."""
        spec = self.host.spec
        if spec.max_future is None:
            return None
        ahead = time.time() + spec.max_future
        return spec.schedule.epoch_of(ahead) + HORIZON_SLACK

    def _straggler_wait(self, epoch: int) -> float:
        """How long an epoch must have been open before its barrier may leap over a
        straggler: ``straggler_epochs - 0.5`` epochs of time (the half epoch absorbs the
        agents' tick and closing jitter), so members far apart in epochs but not in time - a
        catch-up after a restart or of old logs - are never leapt."""
        spec = self.host.spec
        seconds = spec.schedule.seconds_of(epoch) or spec.epoch_seconds
        return max(0.0, spec.straggler_epochs - 0.5) * seconds

    def known_tree(self, tid: int) -> None:
        """Raise 503 ``unknown_job`` (counted, logged) unless ``tid`` is one of the job's
        trees."""
        host = self.host
        if tid not in host.tree_set:
            host.count("refused_unknown_tree")
            log.warning(
                "job %s: refused a peer's data for tree %x (not one of its trees)", host.name, tid
            )
            raise RetryLater("unknown_job", f"tree {tid:x} is not a tree of job {host.name!r}")

    def parent_changed(self, tid: int) -> None:
        """The tree manager's callback: the sender of ``tid`` follows the new parent."""
        view = tree_view(self.host, tid)
        if view is None:
            return
        parent = getattr(view, "parent", None)
        if parent is not None:
            self.host.recovery.parent_seen(tid)
        self.ensure_tree(tid)
        if parent is not None and self.host.recovery.replicated():
            # the old position's replicas hold what was queued for a dead parent (counted)
            self.host.recovery.hand_off(tid, parent.id)
        self.host.senders[tid].set_parent(view.parent_url, via=parent)

    def _parent_refused(self, tid: int, url: str) -> None:
        """Our parent's data-plane port refused the snapshot: its process is gone (a master
        killed, say). Telling the overlay at once lets the tree re-form in about one send
        instead of after heartbeat and probe timeouts."""
        view = tree_view(self.host, tid)
        parent = getattr(view, "parent", None)
        if parent is not None and view.parent_url == url:
            self.host.count("parent_refused")
            self.host.network.peer_gone(parent.id)

    def children_changed(self, tid: int) -> None:
        """The tree manager's callback: the barrier of ``tid`` waits for the new children."""
        view = tree_view(self.host, tid)
        if view is None:
            return
        self.ensure_tree(tid).set_children(set(view.children) | self._pinned(tid))

    def offer_position(
        self, name: SnapshotName, snap: Snapshot, origins: Lineage | None = None
    ) -> str:
        """A replica of the dead child ``name.sender``'s position - or a mirror of a live one -
        sends the position's epoch as the child (``POST /srt/v1/position-snapshot``): the
        child stays pinned while it does, and the epoch is the child's."""
        self.known_tree(name.tree)
        policy = self.host.spec.fault_tolerance
        seconds = POSITION_PIN_SECONDS
        if policy.mirrored:  # a mirror's hedged copy: a hedge window (it never says done)
            seconds = MIRROR_PIN_SHARE * policy.target_ms / 1000.0 + MIRROR_PIN_SLACK
        self.pin_children(name.tree, [name.sender], seconds)
        return self.offer_child(name, snap, origins)

    def offer_child(
        self, name: SnapshotName, snap: Snapshot, origins: Lineage | None = None
    ) -> str:
        """A child's snapshot (``POST /srt/v1/snapshot``): admitted by the tree's barrier
        first (409 ``incompatible`` / 503 ``epoch_ahead``, nothing recorded), then merged, or
        folded in at the master when its epoch was already emitted here."""
        host = self.host
        self.known_tree(name.tree)
        routed = host.recovery.route_replica(name.tree, name.sender, name.epoch, snap, origins)
        if routed is not None:  # an epoch the replica of a dead master's position still owns
            return routed
        combiner = self.ensure_tree(name.tree)
        snap = combiner.check(name.epoch, snap, name.sender)
        if host.worker is not None and not host.stopped:
            # The child closed this epoch by the same clock as ours: read our inputs and close
            # our own share now rather than at our next tick, which would hold the whole
            # subtree back by up to a tick interval at every level. (Reading first matters: a
            # watermark advanced by the idle clock must not close an epoch whose records are
            # waiting in the input.)
            host.input_service.tick_now(host.inputs)
        result = combiner.offer_child(name.sender, name.epoch, snap, origins)
        host.previews.watch(name.tree)
        if result != "stale":
            return result
        emitted = combiner.lineage_of(name.epoch)
        if origins is not None and emitted is not None and origins <= emitted:
            host.count("late_duplicates")  # already passed on inside this epoch's result
            return "duplicate"
        host.count("late_contributions")
        return host.recovery.fold_in(name, snap, origins)
