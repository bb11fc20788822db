"""Recovery: all fault tolerance of one job on one agent, behind one facade.

Contract (``docs/fault-tolerance.md`` is the long form; each section names its module). A
:class:`~agent.runtime.job.runtime.JobRuntime` holds one :class:`Recovery` as
``runtime.recovery`` and tells it what happens on the job's happy path - an own epoch closed
(:meth:`Recovery.closed`), a result stored (:meth:`epoch_stored`), a late contribution
(:meth:`fold_in`), the root role gained or lost (:meth:`became_root` / :meth:`lost_root`), a
control message (:meth:`on_multicast`), start and stop; the agent's peer routes call its
public methods (replica, hand-over, leave, origin, members, resend, late). It reaches the job
only through :class:`~agent.runtime.recovery.host.RecoveryHost`.

The work is done by parts, each in its own module and each given only the narrow
:class:`~agent.runtime.recovery.host.RecoveryParts` view of this facade:
:mod:`~agent.runtime.recovery.commit` (commit watermarks), :mod:`~agent.runtime.recovery.origins`
(who the origins are: announce, join, leave, retire, absence loop, persistence),
:mod:`~agent.runtime.recovery.repair` (repair by pull, late folds),
:mod:`~agent.runtime.recovery.replication` (standby and take-over) and
:mod:`~agent.runtime.recovery.handover` (hand-over, an origin's leave). The pure state they
share lives here: :class:`Membership`, :class:`Absence`, :class:`MasterTerms` (fencing),
:class:`RetainedEpochs`, :class:`CheckpointSender`, :class:`OriginLoss`,
:class:`ReplicationLog` and the standby's replicas. This module wires them, keeps the root
role's fencing (settle, publish, a fenced lake write) and the two sequences every part shares:
"an epoch was stored" and "results were absorbed".
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from agent.runtime.epochs.window_panes import whole_share
from agent.runtime.memory_budget import Held, MemoryConsumer
from agent.runtime.recovery.absence import Absence
from agent.runtime.recovery.active_replicas import ActiveReplicas
from agent.runtime.recovery.checkpoints import CheckpointSender
from agent.runtime.recovery.commit import Commit
from agent.runtime.recovery.commit_lag import CommitLag
from agent.runtime.recovery.committed_epochs import CommittedEpochs
from agent.runtime.recovery.handover import Handover
from agent.runtime.recovery.host import RecoveryHost
from agent.runtime.recovery.loss import OriginLoss
from agent.runtime.recovery.master_terms import MasterTerms
from agent.runtime.recovery.membership import Membership
from agent.runtime.recovery.origins import Origins
from agent.runtime.recovery.repair import Repair
from agent.runtime.recovery.replication import Replication
from agent.runtime.recovery.retained_epochs import RetainedEpochs
from agent.runtime.recovery.standby import Replica, ReplicationLog
from agent.runtime.results.store import ResultStore
from agent.runtime.services import NetworkService, Spawner
from agent.tunables import RuntimeTunables
from cbt import Snapshot
from srt import SnapshotName
from srt.dataplane.lineage import Lineage

log = logging.getLogger(__name__)

#: the longest a checkpoint round or a laggard probe waits after an epoch's close, however
#: late this tree's commits come (commit_lag.py)
LATE_COMMIT_CAP = 5.0


class Recovery:
    """The fault tolerance of one job on one agent (module contract)."""

    def __init__(
        self,
        host: RecoveryHost,
        *,
        network: NetworkService,
        tasks: Spawner,
        tunables: RuntimeTunables,
        store: ResultStore,
        app_id: int,
        identity: list[Any],
        data_dir: str | None,
    ) -> None:
        self.host = host
        self.name = host.name
        self.network = network
        self.tasks = tasks
        self.store = store
        self._identity = identity
        #: as master: which origins each epoch should cover, and who is absent, left or
        #: retired (tentative vs final vs partial; membership.py, absence.py)
        self.membership = Membership()
        self.absence = Absence(self.membership, store, _AbsenceHost(self))
        #: the fencing term of each tree this agent masters (master_terms.py)
        self.fence = MasterTerms(
            tunables.master_settle_seconds, tunables.master_restart_settle_seconds
        )
        #: per tree: the master's commit watermark as last heard (as master: our own)
        self.committed: dict[int, int] = {}
        #: per tree: the highest commit any master of it made that we heard of, and who it
        #: held back (a re-read share of a committed epoch is a duplicate: committed_epochs.py)
        self.committed_epochs = CommittedEpochs()
        #: as origin: our own snapshots of uncommitted epochs, for the master's repair
        self.retained = RetainedEpochs(self.name, tunables.retained_bytes)
        self._retained_cap = tunables.retained_bytes
        #: how late commits come here: times the checkpoint rounds and laggard probes
        #: (commit_lag.py), from the configured delays up to LATE_COMMIT_CAP
        self.commit_lag = CommitLag()
        self._floors = (tunables.checkpoint_delay, tunables.laggard_probe_after)
        initial = [self.commit_lag.wait(floor, LATE_COMMIT_CAP) for floor in self._floors]
        #: as origin: hot replicas of those snapshots on overlay neighbours (checkpoints.py)
        self.checkpoints = CheckpointSender(
            self.name,
            self.retained,
            network,
            replicas=lambda: host.spec.checkpoint_replicas,
            committed=self.committed.get,
            delay=initial[0],
            seen=host.seen_epoch,
            now_epoch=lambda: host.spec.schedule.epoch_of(time.time()),
        )
        #: as master: laggard probes, origins lost for good and their re-issue (loss.py)
        self.loss = OriginLoss(
            _LossHost(self),
            network,
            watch_interval=tunables.tick_seconds,
            suspect_after=initial[1],
            loss_timeout=tunables.loss_timeout,
        )
        #: as master: what each tree's standby holds; as standby: the masters' replicas
        self.replication = ReplicationLog()
        self.replicas: dict[int, Replica] = {}
        #: epochs up to this one may miss records here: other jobs had read them from a
        #: shared input before this job started (see :meth:`started_after_others`)
        self.incomplete_until: int | None = None
        self._rooted: set[int] = set()  # trees whose becoming the root was handled here
        self._had_parent: set[int] = set()  # trees in which this agent has had a parent
        self.origins = Origins(
            self, network, tasks, app_id=app_id, identity=identity, data_dir=data_dir
        )
        self.repair = Repair(self, network, tasks, tunables)
        self.standby = Replication(self, network, tasks, tunables)
        self.commits = Commit(self, network, tasks, self.standby.standby)
        self.handover = Handover(self, network)
        #: replicated masters (spec fault_tolerance "replicated"): active_replicas.py
        self.active = ActiveReplicas(host, network, tasks)
        store.term_of = self.fence.term
        store.policy_of = lambda: host.spec.fault_tolerance.label()
        store.given_up_for = self.origins.given_up_for

    # ---- the job's life cycle ----------------------------------------------------------------

    async def start(self, *, origin: bool) -> None:
        """Read back who the origins are; as origin, start checkpointing and announce this
        agent to each tree's master."""
        await self.origins.load()
        if not origin:
            return
        self.tasks.spawn(self.checkpoints.run(), f"{self.name} checkpoints")
        for tid in self.host.tree_list:
            self.tasks.spawn(self.origins.announce(tid), f"{self.name} origin")

    def close(self) -> None:
        self.checkpoints.close()

    async def stopping(self, *, origin: bool) -> None:
        """A graceful stop: each tree's results to the successor, then (as origin) this
        origin's end declared to each tree's master."""
        for tid in self.host.tree_list:
            if self.host.is_root(tid) and self.store.epochs(tid):
                await self.handover.to_successor(tid)
        if origin:
            await asyncio.gather(*(self.handover.declare_leave(t) for t in self.host.tree_list))

    async def release(self) -> None:
        self.replicas.clear()
        await self.active.close()
        await self.origins.forget()

    # ---- the root role -----------------------------------------------------------------------

    def is_rooted(self, tid: int) -> bool:
        """Becoming the tree's root was handled here already."""
        return tid in self._rooted

    def parent_seen(self, tid: int) -> None:
        self._had_parent.add(tid)

    def lost_root(self, tid: int) -> None:
        """No longer the tree's root: the new master publishes; the results go to it."""
        self._rooted.discard(tid)
        self.fence.not_root(tid)
        self.active.lost_root(tid)
        if self.store.epochs(tid):
            self.tasks.spawn(self.handover.hand_over(tid), f"hand over {self.name}")

    def became_root(self, tid: int) -> None:
        """This agent became the tree's root: take over the standby replica (settled) or a
        shared membership copy, claim a term, learn who the origins are."""
        self._rooted.add(tid)
        self.loss.watch(tid)
        was_member = tid in self._had_parent
        took_over = self.standby.take_over(tid)  # claims its term, settled, if it did
        copy = None if took_over else self.origins.copies.pop(tid, None)
        if copy is not None:  # the old master's membership, as it shared it
            self.membership.restore(copy[0])
            self.fence.hear(tid, copy[1])
            self.host.count("member_copies_used")
        knew = bool(self.membership.members_set())
        if not took_over:
            self.fence.became_root(
                tid,
                time.time(),
                settled=False,
                restarted=self._running_before() or self.fence.ran_before(tid),
            )
            self.tasks.spawn(self._settle(tid), f"{self.name} settle")
        log.info("job %s tree %x: master under term %d", self.name, tid, self.fence.term(tid))
        self.members_changed()  # the term is persisted beside the members
        if (was_member and copy is None and not took_over) or (
            not knew and not took_over and self._running_before()
        ):
            # others fed this tree before; which, this master may not know
            self.membership.doubt_until_told(self.network.node_id)
        self.repair.keep_queued(tid)
        self.knowledge_gained(tid)
        self.origins.watch_absence()
        self.active.became_root(tid)  # a replica of the dead master's position: its epochs
        # what this agent stored before (as root until a flap, or absorbed) may lack origins:
        # the repair loop ends whenever the agent is not the root, and nothing new may be
        # tentative to start it again
        self.schedule_repair(tid)

    def _running_before(self) -> bool:
        """This agent ran the job before (its read positions resumed it past the submitted
        start epoch: a restart): another agent may have been its master meanwhile. A job's
        first master - even of a job replaying history - resumed nothing."""
        submitted, resumed = self._identity[2], self.host.spec.start_epoch
        return submitted is not None and resumed is not None and resumed > submitted

    async def _settle(self, tid: int) -> None:
        """An unsettled master (master_terms.py): publish what waited once it settles, if it
        is still the root then."""
        while not self.host.stopped:
            wait = self.fence.settle_in(tid, time.time())
            if wait is None:
                break
            await asyncio.sleep(wait)
        if self.host.stopped or not self.host.is_root(tid):
            return
        self.publish_deferred(tid)

    def publish_deferred(self, tid: int) -> None:
        """This master settled: publish the lake writes that waited, each stamped first with
        the term it is published under (a hand-over may have raised it meanwhile)."""
        before = self.fence.term(tid)
        epochs = self.fence.settle(tid, time.time())
        if self.fence.term(tid) != before:  # fenced while it waited: it claimed above
            self.host.count("term_claims_after_fence")
            self.members_changed()  # the term is persisted beside the members
            log.warning(
                "job %s tree %x: fenced while settling; claimed term %d",
                self.name,
                tid,
                self.fence.term(tid),
            )
        for epoch in sorted(epochs):
            self.store.assess(tid, epoch)
            self.publish(tid, epoch)

    def unpublished(self, tid: int, epoch: int) -> bool:
        """Whether this master holds (tree, epoch) unpublished: it has not settled (it waits
        for a predecessor's hand-over), so the lake's version may know more than ours."""
        return self.fence.deferred(tid, epoch)

    def publish(self, tid: int, epoch: int) -> None:
        """A version of (tree, epoch) to the lake - once this master has settled."""
        if not self.host.has_lake:
            return
        if self.fence.settled(tid, time.time()):
            self.host.lake_epoch(tid, epoch)
        else:
            self.fence.defer(tid, epoch)

    def lake_fenced(self, tid: int, epoch: int, newer_term: int) -> None:
        """The lake holds a newer term's version of (tree, epoch) than ours: a master under
        that term exists (or existed). Still the root here: claim above it and publish again
        (the lake keeps the highest; each version says what it lacks)."""
        if not (self.fence.hear(tid, newer_term) and self.host.is_root(tid)):
            return
        term = self.fence.reclaim(tid, time.time())
        if term is not None:  # (else it waits to settle already: it claims then)
            self.host.count("term_claims_after_fence")
            self.members_changed()
            log.warning(
                "job %s tree %x epoch %d: the lake holds term %d; still the root here, "
                "claiming term %d (publishing again in %g s)",
                self.name,
                tid,
                epoch,
                newer_term,
                term,
                self.fence.settle_seconds,
            )
            self.tasks.spawn(self._settle(tid), f"{self.name} settle")
        self.store.assess(tid, epoch)
        self.publish(tid, epoch)  # deferred until settled (master_terms.py)

    # ---- the shared sequences ----------------------------------------------------------------

    def expected(self, epoch: int) -> tuple[Lineage | None, bool]:
        """The origins ``epoch`` should cover, and whether this master doubts it knows them."""
        return self.membership.expected(epoch), self.membership.doubt is not None

    def whole(self, epoch: int) -> bool:
        """Whether this origin's snapshot of ``epoch`` holds its whole share (window_panes.py):
        a window needing a pane from before its first whole one, or an epoch other jobs read
        before this one started (:meth:`started_after_others`), is short here."""
        return whole_share(
            self.host.spec,
            epoch,
            submitted_start=self._identity[2],
            incomplete_until=self.incomplete_until,
        )

    def commit_heard(self, epoch: int) -> None:
        """RecoveryParts: a commit up to ``epoch`` made or heard now (commit_lag.py)."""
        spec = self.host.spec
        lag = time.time() - (spec.schedule.end(epoch) + spec.allowed_lateness)
        self.commit_lag.observe(lag)
        checkpoint_floor, probe_floor = self._floors
        self.checkpoints.delay = self.commit_lag.wait(checkpoint_floor, LATE_COMMIT_CAP)
        self.loss.suspect_after = self.commit_lag.wait(probe_floor, LATE_COMMIT_CAP)

    def closed(self, tid: int, epoch: int, part: Snapshot, records: int | None) -> None:
        """As origin: this agent's own whole share of ``epoch`` closed: kept for repair and
        checkpointed to its neighbours until the master commits it."""
        self.retained.keep(tid, epoch, part, records)
        self.checkpoints.closed(tid, epoch)

    def epoch_stored(
        self, tid: int, epoch: int, origins: Lineage | None, *, new: bool = True
    ) -> None:
        """As master: a result of (tree, epoch) was stored, or got a new version: note whom
        it covers, report it if it is new and tentative, publish, replicate, bound."""
        self.origins.observe(epoch, origins)
        self.active.observe(tid, origins)
        if new:
            self.active.observe_latency(tid, epoch)
            self.repair.report_missing(tid, epoch)
        self.publish(tid, epoch)
        self.replicate(tid)
        self.active.announce(tid)
        self.host.bound_results()

    def absorb_items(
        self, tid: int, items: list[dict[str, Any]], expected: Any, sender: str
    ) -> int:
        """Another master's results (a hand-over's, a standby replica's) into the store, each
        admitted by the tree's barrier first (raises before anything is stored), and its
        knowledge of the origins. Then :meth:`adopted`."""
        combiner = self.host.ensure_tree(tid)
        taken = self.store.absorb(
            tid, items, check=lambda epoch, snap: combiner.check(epoch, snap, sender)
        )
        self.membership.restore(expected)  # the previous master's knowledge of origins
        self.loss.learn_urls(expected)
        return taken

    def adopted(self, tid: int, epochs: list[int], *, repair: bool) -> None:
        """Absorbed ``epochs`` are this master's now: published under its term, the job's
        state replayed from them, the standby brought up to date, what they lack pulled."""
        for epoch in epochs:
            self.publish(tid, epoch)
        self.tasks.spawn(self.standby.replay(tid, epochs), f"{self.name} replay")
        self.replicate(tid)
        if repair:
            self.schedule_repair(tid)

    # ---- what the parts ask of each other (RecoveryParts) ------------------------------------

    def replicate(self, tid: int) -> None:
        self.standby.replicate(tid)

    def advance(self, tid: int) -> None:
        self.commits.advance(tid)

    def schedule_repair(self, tid: int) -> None:
        self.repair.schedule(tid)

    def members_changed(self) -> None:
        self.origins.members_changed()

    def knowledge_gained(self, tid: int) -> None:
        self.origins.knowledge_gained(tid)

    def fold_in(self, name: SnapshotName, snap: Snapshot, origins: Lineage | None) -> str:
        """A contribution for an epoch already emitted here (repair.py)."""
        return self.repair.fold_in(name, snap, origins)

    def fold_own(
        self,
        tid: int,
        origin: int,
        parts: dict[int, Snapshot],
        counts: dict[str, Any],
        epochs: Any = None,
    ) -> int:
        return self.repair.fold_own(tid, origin, parts, counts, epochs)

    def origin_left(self, tid: int, origin: int, through: int) -> bool:
        return self.origins.left(tid, origin, through)

    def next_roots(self, tid: int, count: int = 1) -> list[Any]:
        return self.handover.next_roots(tid, count)

    # ---- control messages and the peer routes -----------------------------------------------

    def on_multicast(self, tid: int, message: dict[str, Any]) -> bool:
        """A control message of fault tolerance (``commit``, ``lost``): handled, True."""
        kind = message.get("kind")
        if kind == "lost":
            self._on_lost(tid, message.get("origin"))
            return True
        if kind == "commit":
            self.commits.on_commit(tid, message)
            return True
        if kind == "replicas":
            self.active.heard_from(tid, message)
            return True
        return False

    def _on_lost(self, tid: int, origin: Any) -> None:
        """The master declared ``origin`` dead (loss.py): if it is our child, drop it now (the
        overlay fails it, the tree re-forms, our barrier stops waiting for it)."""
        try:
            node = int(str(origin), 16)
        except ValueError:
            return
        combiner = self.host.barrier(tid)
        if combiner is not None and node in combiner.children and node != self.network.node_id:
            self.host.count("lost_children")
            self.network.peer_gone(node)

    def readable_upto(self, tid: int) -> int | None:
        """The epoch this agent's read positions may pass for ``tid`` (offsets.py): the
        tree's commit watermark as last heard (None: none yet)."""
        committed = self.committed.get(tid)
        if committed is not None and self.host.spec.mode == "window":
            # a restarted worker rebuilds its open windows' panes from what it re-reads:
            # the read position stays window_size - 1 epochs behind the commit (the
            # re-sent windows up to the commit are duplicates, dropped by lineage)
            committed -= self.host.spec.window_size - 1
        return committed

    def started_after_others(self, newest_read: float, inputs: list[str]) -> None:
        """Other jobs on this agent had already read ``inputs`` up to event time
        ``newest_read`` when this job started: its records of the epochs up to that one may
        be incomplete here. They are not contributed as this origin's (the master reports
        them tentative, lacking this agent) rather than counted partly and called whole."""
        spec = self.host.spec
        if not self.host.is_origin or spec.start_epoch is None:
            return
        last = spec.schedule.epoch_of(newest_read)
        if last < spec.start_epoch:
            return  # everything read so far is before this job's first epoch
        self.incomplete_until = last
        log.warning(
            "job %s: input(s) %s were already read up to event time %.3f by other jobs when "
            "it started here: epochs %d..%d are incomplete on this agent and not contributed "
            "as its own (the master reports them tentative, lacking this agent)",
            self.name,
            ", ".join(inputs),
            newest_read,
            spec.start_epoch,
            last,
        )

    def offer_late(self, name: SnapshotName, snap: Snapshot, origins: Lineage | None = None) -> str:
        """``POST /agent/v1/late`` (repair.py)."""
        return self.repair.offer_late(name, snap, origins)

    async def resend(self, tid: int, origin: int, epochs: list[int]) -> dict[str, Any]:
        """``POST /agent/v1/resend`` (repair.py)."""
        return await self.repair.resend(tid, origin, epochs)

    def lacking(self, tid: int) -> dict[int, list[int]]:
        return self.repair.lacking(tid)

    def commit_watermark(self, tid: int) -> tuple[int | None, dict[int, int]]:
        return self.commits.watermark(tid)

    def origin_joined(self, tid: int, origin: int, start: int, url: Any = None) -> None:
        """``POST /agent/v1/origin`` (origins.py)."""
        self.origins.joined(tid, origin, start, url)

    async def accept_leave(self, tid: int, origin: int, body: dict[str, Any]) -> bool:
        """``POST /agent/v1/leave`` (handover.py)."""
        return await self.handover.accept_leave(tid, origin, body)

    def accept_members(self, tid: int, body: dict[str, Any]) -> None:
        """``POST /agent/v1/members`` (origins.py)."""
        self.origins.accept_members(tid, body)

    def accept_replica(self, tid: int, body: dict[str, Any]) -> dict[str, Any]:
        """``POST /agent/v1/replica`` (replication.py)."""
        return self.standby.accept_replica(tid, body)

    def committed_duplicate(self, name: SnapshotName, origins: Lineage | None) -> bool:
        """As master, of an epoch it does not hold: ``origins``' contribution is a duplicate
        of a committed version (repair.py; committed_epochs.py) - counted, logged, dropped."""
        return self.repair.committed_duplicate(name, origins)

    def absorb(
        self,
        tid: int,
        items: list[dict[str, Any]],
        expected: Any = None,
        term: Any = 0,
        committed: Any = None,
    ) -> int:
        """``POST /agent/v1/handover`` (handover.py)."""
        return self.handover.absorb(tid, items, expected, term, committed)

    def retire_origin(self, origin: int, why: str) -> dict[str, Any]:
        """``elf retire`` at a master (origins.py)."""
        return self.origins.retire(origin, why)

    def membership_status(self) -> dict[str, Any]:
        return self.origins.status()

    async def master_urls(self) -> list[str]:
        """The data-plane URLs of the job's masters (one per tree, deduplicated)."""
        urls = await asyncio.gather(*(self.host.master_url(t) for t in self.host.tree_list))
        return sorted(set(urls))

    def versions_changed(self, changed: list[tuple[int, int]]) -> None:
        self.origins.versions_changed(changed)

    def node_failed(self, node_id: int) -> None:
        """The overlay declared ``node_id`` failed: as master, a lagging origin it was may be
        declared absent after the loss timeout (loss.py)."""
        self.loss.overlay_failed(node_id)
        self.active.node_failed(node_id)

    # ---- replicated positions (active_replicas.py) ----------------------------------------

    def active_positions(self) -> dict[int, int]:
        """Tree → a holder whose position this agent replicates (replicated positions)."""
        return {tid: holders[0] for tid, holders in self.active.held().items()}

    def replica_owns(self, tid: int, epoch: int) -> bool:
        """A replica of a dead master's position here still owns ``epoch`` of ``tid``."""
        return self.active.owns(tid, epoch)

    def replicated(self) -> bool:
        """The job's policy replicates tree positions (members send to replicas too)."""
        return self.active.wanted() > 1

    def to_replicas(self, tid: int, epoch: int, payload: bytes, *, own: bool = False) -> None:
        """An epoch this agent sends up (``own``: its own share as a position's holder), to
        the replicas of the position it is a member of too; an inner holder announces."""
        self.active.to_replicas(tid, epoch, payload, own=own)
        if not own:
            self.active.announce(tid)

    def hand_off(self, tid: int, parent: int | None) -> bool:
        """This agent's parent changed: True when the epochs queued for the old (dead)
        parent are its position's replicas' (the caller drops them from its queue)."""
        return self.active.hand_off(tid, parent)

    def route_replica(
        self, tid: int, sender: int, epoch: int, snap: Snapshot, origins: Lineage | None
    ) -> str | None:
        """After a take-over, a contribution of an epoch the replica still owns: its answer
        (None: the root's own barrier takes it)."""
        return self.active.route(tid, sender, epoch, snap, origins)

    def position(
        self, tid: int, holder: int, members: list[int], parent: dict[str, Any] | None = None
    ) -> None:
        """As a replica of a position of ``tid``: its holder's members (and parent)."""
        self.host.known_tree(tid)
        self.active.position(tid, holder, members, parent)

    def offer_replica(
        self,
        name: SnapshotName,
        snap: Snapshot,
        origins: Lineage | None,
        position: int | None = None,
    ) -> str:
        """As a replica: a member's epoch (``/srt/v1/replica-snapshot``)."""
        self.host.known_tree(name.tree)
        return self.active.offer(name, snap, origins, position)

    def position_event(
        self, tid: int, holder: int, event: str, member: int | None
    ) -> dict[str, Any]:
        """``POST /agent/v1/position/event`` (active_replicas.py)."""
        self.host.known_tree(tid)
        return self.active.event(tid, holder, event, member)

    def position_report(
        self, tid: int, holder: int, parent: int | None, domain: str, children: dict[int, str]
    ) -> None:
        """As master under a replica budget: a holder's place in the tree."""
        self.host.known_tree(tid)
        self.active.report(tid, holder, parent, domain, children)

    def heard_replicas(self, tid: int, message: dict[str, Any]) -> None:
        """An inner holder told this agent, its child, where its replicas are."""
        self.host.known_tree(tid)
        self.active.heard_from(tid, message)

    def memory_consumers(self) -> list[MemoryConsumer]:
        """What fault tolerance holds of this job within the agent's memory budget: this
        origin's retained epochs (shed past their limit; agent/runtime/memory_budget.py)."""
        retained = self.retained
        return [
            Held(
                f"retained epochs of job {self.name}",
                "shed",
                self._retained_cap,
                lambda: retained.bytes,
                retained.set_limit,
            )
        ]

    def status(self) -> dict[str, Any]:
        """Fault tolerance's part of the job's status (the keys the runtime always had)."""
        return {
            "committed": {f"{t:040x}": e for t, e in self.committed.items()},
            "retained": self.retained.stats(),
            "checkpoints": self.checkpoints.stats(),
            "commit_lag": {
                **self.commit_lag.status(),
                "checkpoint_delay_s": round(self.checkpoints.delay, 4),
                "laggard_probe_after_s": round(self.loss.suspect_after, 4),
            },
            "losses": self.loss.status(),
            "replication": self.replication.stats(),
            "replicas": {f"{t:040x}": r.stats() for t, r in self.replicas.items()},
            "origins_expected": self.membership.origins(),
            "membership": self.membership_status(),
            "terms": self.fence.stats(time.time()),
            "active_replicas": self.active.status(),
        }


class _LossHost:
    """The :class:`~agent.runtime.recovery.loss.LossHost` recovery gives its
    :class:`OriginLoss`."""

    def __init__(self, recovery: Recovery) -> None:
        self._rec = recovery
        self.name = recovery.name

    @property
    def node_id(self) -> int:
        return self._rec.network.node_id

    def root_trees(self) -> list[int]:
        host = self._rec.host
        if host.stopped:
            return []
        return [t for t in host.tree_list if host.is_root(t)]

    def waiting_epoch(self, tid: int) -> tuple[int, frozenset[int]] | None:
        combiner = self._rec.host.barrier(tid)
        if combiner is None:
            return None
        epoch = combiner.next_epoch
        if epoch is None or not combiner.waiting_for(epoch):
            return None
        return epoch, combiner.lineage_of(epoch) or frozenset()

    def oldest_open_epoch(self, tid: int) -> int | None:
        combiner = self._rec.host.barrier(tid)
        return None if combiner is None else combiner.next_epoch

    def closed_at(self, epoch: int) -> float:
        spec = self._rec.host.spec
        return spec.schedule.end(epoch) + spec.allowed_lateness

    def expected(self, epoch: int) -> frozenset[int]:
        return self._rec.membership.expected(epoch) or frozenset()

    def is_member(self, origin: int) -> bool:
        return origin in self._rec.membership.members_set()

    def declare_absent(self, origin: int, why: str) -> bool:
        return self._rec.membership.declare_absent(origin, why, time.time())

    def is_absent(self, origin: int) -> bool:
        return origin in self._rec.membership.absent()

    async def fold_origin(
        self, tid: int, origin: int, parts: dict[int, bytes], records: dict[str, Any]
    ) -> int:
        decoded = await asyncio.to_thread(
            lambda: {e: Snapshot.from_bytes(b) for e, b in parts.items()}
        )
        return self._rec.fold_own(tid, origin, decoded, records)

    def after_absence(self, origin: int) -> None:
        rec = self._rec
        rec.network.peer_gone(origin)
        rec.members_changed()
        for tid in self.root_trees():
            rec.replicate(tid)
            rec.advance(tid)

    def count(self, what: str, n: int = 1) -> None:
        self._rec.host.count(what, n)

    def spawn(self, coro: Any, what: str) -> Any:
        return self._rec.tasks.spawn(coro, what)

    async def multicast(self, tid: int, message: dict[str, Any]) -> Any:
        return await self._rec.host.multicast(tid, message)


class _AbsenceHost:
    """The :class:`~agent.runtime.recovery.absence.AbsenceHost` recovery gives its Absence."""

    def __init__(self, recovery: Recovery) -> None:
        self._rec = recovery
        self.name = recovery.name

    def retire_after(self) -> float:
        return self._rec.host.spec.retire_after

    def first_epoch_after(self, t: float) -> int:
        return self._rec.host.spec.schedule.epoch_of(t) + 1

    def versions_changed(self, changed: list[tuple[int, int]]) -> None:
        self._rec.versions_changed(changed)

    def members_changed(self) -> None:
        self._rec.members_changed()

    def count(self, what: str, n: int = 1) -> None:
        self._rec.host.count(what, n)
