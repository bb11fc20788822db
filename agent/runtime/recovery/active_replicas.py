"""Replicated tree positions on a running agent: who the replicas are, what members send
them, the master's take-over and an inner position's release (the state itself is
:mod:`agent.runtime.recovery.position_replica`).

Contract (``docs/fault-tolerance.md``, "Replicated tree nodes"), for a job whose spec's
``fault_tolerance`` is ``{"policy": "replicated", "replicas": r}``; nothing happens for a
passive one. A **position** is a tree node that has members: the root (the master), or an
inner node (a non-root agent with children); its **holder** is the agent at it.

* **As holder**: its replicas are r - 1 live agents - the master's, the r - 1 agents
  closest to the tree id after itself (:func:`~agent.runtime.recovery.standby.standbys_for`:
  the next masters, the first of them the passive standby); an inner holder's, the r - 1
  live agents closest to its own id other than its parent (:func:`inner_replicas`, other
  failure domains first). After each epoch stored (the root) or sent up (an inner holder),
  when the replicas, the members or the parent changed or every :data:`ANNOUNCE_SECONDS`,
  :meth:`ActiveReplicas.announce` tells each replica the members it waits for
  (``POST /agent/v1/position``: its barrier's children, and itself when it is an origin;
  an inner holder adds its parent, the parent's URL and the parent's replicas) and tells
  its members where the replicas are (the root: a multicast of kind ``replicas`` down the
  tree; an inner holder: ``POST /agent/v1/position/replicas`` to each child).
* **As member** (a child of a holder, or the holder itself for its own share):
  :meth:`ActiveReplicas.to_replicas` sends each epoch it sends up also to every replica of
  its parent's position (``POST /srt/v1/replica-snapshot?position=<holder>``, bounded
  senders: :data:`REPLICA_QUEUE` epochs); to itself, when it is one of them, directly.
  When its parent changes (:meth:`ActiveReplicas.hand_off`), it waits until the old
  position's replicas acknowledged everything it sent them and tells them it left
  (``POST /agent/v1/position/event``, ``leave``); when the old parent is dead and the
  replicas hold every epoch it had queued for it, those epochs are the replicas' to send
  up: its main queue drops them instead of sending them to the new parent (else the
  subtree's epoch would reach the master twice, by two paths).
* **As replica**: :meth:`position` and :meth:`offer` keep a
  :class:`~agent.runtime.recovery.position_replica.PositionReplica` per (tree, holder) (a
  snapshot before the holder's first announcement: 503 ``no_position``, the member
  retries; either for a job that does not replicate its positions: 409 ``not_replicated``;
  more than :data:`MAX_MEMBERS` members: 413). For an inner position it registers with the
  holder's parent as the position's standby at each announcement (event ``standby``: the
  parent keeps waiting for the holder, should it die, for :data:`STANDBY_SECONDS`).
* **The master's take-over**: :mod:`agent.runtime.recovery.master_takeover` (sharing the
  replicas' table). The budget policy's reports and plan are
  :mod:`agent.runtime.recovery.budget_positions`; the adaptive policy's mirrors and
  controller :mod:`agent.runtime.recovery.adaptive_mirrors`.
* **An inner position's release**: when the overlay declares the holder failed
  (:meth:`node_failed`, or a member's epoch arriving after it is unroutable), its own share
  stops being waited for, the replica asks the parent which epoch it waits for (event
  ``release``) and sends every epoch from there up as the holder
  (:class:`~agent.runtime.recovery.position_forward.PositionForward`); once the members
  all left, it tells the parent it is done (event ``done``).

Bounds: one replica state per (tree, holder); each member's replica senders keep at most
:data:`REPLICA_QUEUE` epochs; an announcement names at most :data:`MAX_MEMBERS` members; an
inner position keeps at most :data:`INNER_KEPT` epochs; a member remembers the replicas of
at most its parent's and its own position per tree.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from typing import Any

from agent.jobs.fault_policy import MAX_BUDGET, MAX_REPLICAS
from agent.runtime.recovery.adaptive_mirrors import AdaptiveMirrors
from agent.runtime.recovery.budget_positions import BudgetPositions
from agent.runtime.recovery.host import ReplicaHost
from agent.runtime.recovery.master_takeover import MasterTakeover
from agent.runtime.recovery.position_forward import EVENT_PATH, PositionForward
from agent.runtime.recovery.position_replica import PositionReplica
from agent.runtime.recovery.standby import standbys_for
from agent.runtime.services import NetworkService, Spawner
from cbt import Snapshot
from overlay import NodeInfo
from srt import SnapshotName, UpstreamSender
from srt.dataplane.lineage import Lineage
from srt.dataplane.lineage import decode as lineage_of
from srt.dataplane.name import POSITION_SNAPSHOT_PATH, replica_path
from srt.dataplane.upstream import check_url
from srt.errors import Reject, RetryLater

log = logging.getLogger(__name__)

POSITION_PATH = "/agent/v1/position"
REPLICAS_PATH = "/agent/v1/position/replicas"
ANNOUNCE_SECONDS = 2.0  # a holder re-announces its replicas and members this often
REPLICA_QUEUE = 64  # epochs a member's sender to a replica keeps while it is unreachable
PIN_SECONDS = 10.0  # how long a new root waits for the dead master's members to re-join
STANDBY_SECONDS = 10.0  # how long a parent keeps waiting for a dead holder with a standby
INNER_KEPT = 64  # epochs an inner position's replica keeps for its release
LEAVE_FLUSH_SECONDS = 10.0  # a moving member waits this long for its replica senders
MAX_MEMBERS = 4096
EVENTS = ("leave", "standby", "release", "done")


def inner_replicas(
    me: int, parent: int | None, candidates: Iterable[NodeInfo], n: int, domain: str
) -> list[NodeInfo]:
    """An inner holder's ``n`` replicas: live agents other than itself and its parent,
    closest to its id, those of another failure domain first."""
    others = [c for c in candidates if c.id not in (me, parent)]
    others.sort(key=lambda c: (c.domain == domain, c.id ^ me))
    return others[:n]


Key = tuple[int, int]  # (tree, holder)


class ActiveReplicas:
    """The replicated-position side of one job on one agent (module contract)."""

    def __init__(self, host: ReplicaHost, network: NetworkService, tasks: Spawner) -> None:
        self.host = host
        self.network = network
        self.tasks = tasks
        self.positions: dict[Key, PositionReplica] = {}  # as replica
        self.takeover = MasterTakeover(
            host, self.positions, lambda: self.network.node_id, PIN_SECONDS
        )
        self.upstream: dict[Key, tuple[int, str, dict[int, str]]] = {}  # inner: parent
        self.forwards: dict[Key, PositionForward] = {}  # released inner positions
        #: as member: per tree, per holder, the holder's replicas as last heard {id: url}
        self.heard: dict[int, dict[int, dict[int, str]]] = {}
        self.senders: dict[Key, dict[int, UpstreamSender]] = {}
        self._parents: dict[int, int] = {}  # as member: the parent last sent to, per tree
        self._inner: dict[int, set[int]] = {}  # as member: holders heard as inner positions
        self._last_sent: dict[Key, int] = {}  # as member: the newest epoch sent to a position
        self._announced: dict[int, tuple[float, tuple[Any, ...]]] = {}
        #: budget: reports, rates and the plan (budget_positions.py)
        self.budget = BudgetPositions(host, network, tasks, ANNOUNCE_SECONDS)
        #: adaptive: what members mirror, the mirrors, the controller (adaptive_mirrors.py)
        self.adaptive = AdaptiveMirrors(host, tasks, self._forward, self.announce)
        self._urls: dict[int, str] = {}

    def wanted(self) -> int:
        """The job's replicas per replicated position (1: passive)."""
        policy = self.host.spec.fault_tolerance
        return policy.replicas if policy.replicated else 1

    def replicas_for(self, tid: int) -> int:
        """The replicas this agent's position of ``tid`` gets: every position's (replicated);
        under a budget, only the root's and the planned positions' (1: none)."""
        policy = self.host.spec.fault_tolerance
        if not policy.replicated:
            return 1
        if policy.mirrored:  # a mirror for each inner position; the root has none
            return 1 if self.host.is_root(tid) else 2
        planned = self.host.is_root(tid) or self.budget.planned(tid)
        return policy.replicas if planned or not policy.planned else 1

    # ---- as holder ---------------------------------------------------------------------------

    def replica_ids(self, tid: int) -> list[int]:
        """The agents that replicate this agent's position of ``tid`` now."""
        n = self.replicas_for(tid) - 1
        if n <= 0:
            return []
        me = self.network.node_id
        if self.host.is_root(tid):
            return [node.id for node in standbys_for(tid, me, self.network.neighbours(), n)]
        parent = self.host.parent_of(tid)
        candidates = self.network.near(me, n + 2 + len(self.network.neighbours()))
        return [c.id for c in inner_replicas(me, parent, candidates, n, self.network.domain)]

    def announce(self, tid: int) -> None:
        """After an epoch stored or sent up (module contract): tell replicas and members,
        when due; under a budget, report the position to the master, and plan as master."""
        policy = self.host.spec.fault_tolerance
        if not policy.replicated:
            return
        root = self.host.is_root(tid)
        upstream: tuple[Any, ...] = ()
        plan: tuple[int, ...] = ()
        if not root:
            parent, url = self.host.parent_of(tid), self.host.parent_url_of(tid)
            if parent is None or url is None or not self.host.ensure_tree(tid).children:
                return  # a leaf (or joining): no position to replicate
            if policy.planned:
                self.budget.report_place(tid, parent)
            parent_replicas = self.heard.get(tid, {}).get(parent, {})
            upstream = (parent, url, tuple(sorted(parent_replicas.items())))
        elif policy.planned:
            plan = tuple(sorted(self.budget.plan(tid, policy.budget)))
        rho = self.adaptive.announced_ratio(tid)
        replicas = tuple(self.replica_ids(tid))
        members = tuple(sorted(self._members(tid)))
        state = (replicas, members, upstream, plan, rho)
        last = self._announced.get(tid)
        now = time.monotonic()
        if last is not None and last[1] == state and now - last[0] < ANNOUNCE_SECONDS:
            return
        if not replicas and not plan and rho is None and (last is None or not last[1][0]):
            return  # an unplanned position that never had replicas: nothing to retract
        self._announced[tid] = (now, state)
        self.tasks.spawn(
            self._announce(tid, replicas, members, upstream, plan, rho),
            f"{self.host.name} replicas",
        )

    # ---- budgeted replicas (budget_positions.py) ----------------------------------------------

    def report(
        self, tid: int, holder: int, parent: int | None, domain: str, children: dict[int, str]
    ) -> None:
        """As master: a holder's place in the tree (``POST /agent/v1/position/report``)."""
        self.budget.report(tid, holder, parent, domain, children)

    def observe(self, tid: int, origins: Lineage | None) -> None:
        """As master under a budget: a stored epoch's records per origin (the rates)."""
        self.budget.observe(tid, origins)

    def _members(self, tid: int) -> set[int]:
        members = set(self.host.ensure_tree(tid).children)
        if self.host.is_origin:
            members.add(self.network.node_id)
        return members

    async def _url(self, node: int) -> str:
        url = self._urls.get(node) or await self.network.data_url_of(node)
        self._urls[node] = url
        return url

    async def _announce(
        self,
        tid: int,
        replicas: tuple[int, ...],
        members: tuple[int, ...],
        upstream: tuple[Any, ...],
        plan: tuple[int, ...] = (),
        rho: float | None = None,
    ) -> None:
        me = self.network.node_id
        body: dict[str, Any] = {
            "job": self.host.name,
            "tree": tid,
            "master": format(me, "x"),
            "members": [format(m, "x") for m in members],
        }
        if upstream:
            parent, url, parent_replicas = upstream
            body["parent"] = {
                "id": format(parent, "x"),
                "url": url,
                "replicas": [[format(r, "x"), u] for r, u in parent_replicas],
            }
        urls: dict[int, str] = {}
        for rid in replicas:
            try:
                url = await self._url(rid)
                if rid == me:
                    self.position(tid, me, list(members), body.get("parent"))
                else:
                    await self.network.client.post_json(url, POSITION_PATH, body)
                urls[rid] = url
            except Exception as exc:  # a replica down: the next announcement retries it
                self._urls.pop(rid, None)
                self.host.count("replica_announce_failed")
                log.info(
                    "job %s: replica %x of tree %x unreachable: %r", self.host.name, rid, tid, exc
                )
        message: dict[str, Any] = {
            "kind": "replicas",
            "master": format(me, "x"),
            "replicas": [[format(rid, "x"), url] for rid, url in urls.items()],
        }
        if plan:
            message["plan"] = [format(n, "x") for n in plan]
        if rho is not None:
            message["rho"] = rho
        self.heard_from(tid, message)  # the holder's own share goes to them too
        if not upstream:
            await self.host.multicast(tid, message)
            return
        message["inner"] = True  # its replicas release (send up) whatever they got
        for child, url in self.host.child_urls(tid).items():
            try:
                await self.network.client.post_json(
                    url, REPLICAS_PATH, {"job": self.host.name, "tree": tid, **message}
                )
            except Exception as exc:  # the next announcement tells it again
                self.host.count("replica_tell_failed")
                log.info(
                    "job %s: child %x of tree %x not told: %r", self.host.name, child, tid, exc
                )

    # ---- as member ---------------------------------------------------------------------------

    def heard_from(self, tid: int, message: dict[str, Any]) -> None:
        """A holder's ``replicas`` message: where its members send their epochs too."""
        try:
            holder = int(str(message.get("master")), 16)
            replicas = {int(str(r), 16): str(url) for r, url in message.get("replicas") or []}
            if len(replicas) >= MAX_REPLICAS:
                raise ValueError(f"{len(replicas)} replicas: a policy has fewer")
            for url in replicas.values():
                check_url(url)  # a bad one would raise in a member's send path
            rho = message.get("rho")
            if rho is not None:
                if type(rho) not in (int, float) or not 0.0 <= rho <= 1.0:
                    raise ValueError("rho is a number in [0, 1]")
                self.adaptive.rho[tid] = float(rho)
            plan = message.get("plan")
            if plan is not None:
                if not isinstance(plan, list) or len(plan) > MAX_BUDGET + 1:
                    raise ValueError("a plan is a short list of hex ids")
                self.budget.heard(tid, plan)
        except (TypeError, ValueError):
            self.host.count("bad_replicas_message")
            return
        heard = self.heard.setdefault(tid, {})
        heard[holder] = replicas
        inner = self._inner.setdefault(tid, set())
        if message.get("inner") is True:
            inner.add(holder)
        else:
            inner.discard(holder)
        keep = {self.network.node_id, self.host.parent_of(tid), holder}
        for other in [h for h in heard if h not in keep]:
            del heard[other]
            inner.discard(other)

    def to_replicas(self, tid: int, epoch: int, payload: bytes, *, own: bool = False) -> None:
        """An epoch this agent sends up (``own``: its own share, as a holder) to every
        replica of the position it is a member of."""
        me = self.network.node_id
        holder = me if own else self.host.parent_of(tid)
        if holder is None or not self.host.spec.fault_tolerance.replicated:
            return
        if not own and self._parents.get(tid) != holder:
            self.hand_off(tid, holder, drop=False)  # (the tree callback ran before us)
        replicas = self.heard.get(tid, {}).get(holder)
        if not replicas:
            return
        mirrored = self.host.spec.fault_tolerance.mirrored
        if mirrored and not self.adaptive.chosen(tid, epoch, holder):
            # not one of the epochs mirrored at the ratio the master set: mirrored all the
            # same if the parent is slow to acknowledge it (a member's own suspicion)
            if not own:
                self.adaptive.suspect(
                    tid, epoch, lambda: self._send(tid, holder, epoch, payload, own=own)
                )
            return
        self._send(tid, holder, epoch, payload, own=own, replicas=replicas)

    def _send(
        self,
        tid: int,
        holder: int,
        epoch: int,
        payload: bytes,
        *,
        own: bool,
        replicas: dict[int, str] | None = None,
    ) -> None:
        """``epoch`` to every replica (or the mirror) of ``holder``'s position."""
        me = self.network.node_id
        replicas = replicas or self.heard.get(tid, {}).get(holder)
        if not replicas:
            return
        name = SnapshotName(self.host.name, tid, epoch, me)
        if not own:
            self._last_sent[(tid, holder)] = epoch
        senders = self.senders.setdefault((tid, holder), {})
        for rid in [r for r in senders if r not in replicas]:
            self.tasks.spawn(senders.pop(rid).close(), f"{self.host.name} replica sender")
        for rid, url in replicas.items():
            if rid == holder:
                continue
            if rid == me:  # this agent replicates the position: no network hop
                self._offer_own((tid, holder), name, payload)
                continue
            sender = senders.get(rid)
            if sender is None:
                sender = senders[rid] = UpstreamSender(
                    self.network.client,
                    job=self.host.name,
                    tree=tid,
                    sender=me,
                    tunables=self.network.srt_tunables,
                    path=replica_path(holder),
                    max_queued=REPLICA_QUEUE,
                )
            sender.set_parent(url)
            sender.send(name, payload)

    def _offer_own(self, key: Key, name: SnapshotName, payload: bytes) -> None:
        position = self.positions.get(key)
        if position is None or position.handover is not None:
            self.host.count("replica_own_skipped")
            return
        origins, raw = lineage_of(payload)
        position.offer(name.sender, name.epoch, Snapshot.from_bytes(raw), origins)

    def hand_off(self, tid: int, parent: int | None, *, drop: bool = True) -> bool:
        """This agent's parent in ``tid`` is now ``parent`` (module contract): the old
        position's replicas are told it left, once they acknowledged what it sent them.
        True when the epochs queued for the old (dead) parent are theirs: the caller drops
        them from its main queue."""
        old = self._parents.get(tid)
        if parent is not None:
            self._parents[tid] = parent
        if old is None or old == parent or parent is None:
            return False
        senders = self.senders.pop((tid, old), {})
        replicas = self.heard.get(tid, {}).pop(old, None)
        # an inner position's replica sends up whatever it got; a master's replica owns
        # only the epochs up to its hand-over epoch (decided at the take-over, unknown
        # here): the member's own stream to the new root carries the rest
        inner = old in self._inner.get(tid, set())
        self._inner.get(tid, set()).discard(old)
        dead = not self.network.routable(old) and inner
        held = bool(replicas) and all(not s.counters["dropped"] for s in senders.values())
        last = self._last_sent.pop((tid, old), None)
        if replicas:
            self.tasks.spawn(
                self._leave(tid, old, replicas, senders, last), f"{self.host.name} position leave"
            )
        if drop and dead and held and last is not None:
            # only the epochs the replicas were sent: one emitted while this agent had no
            # parent (between leaving the dead one and attaching to the new one) went to no
            # replica and stays queued for the new parent (the replica's copy of the epoch
            # lacks this member, the new parent's has it: disjoint by lineage)
            dropped = self.host.take_queued(tid, last)
            self.host.count("handed_to_replicas", len(dropped))
            log.info(
                "job %s tree %x: parent %x dead; its replicas hold the %d epochs queued for it "
                "up to epoch %d",
                self.host.name,
                tid,
                old,
                len(dropped),
                last,
            )
            return True
        return False

    async def _leave(
        self,
        tid: int,
        holder: int,
        replicas: dict[int, str],
        senders: dict[int, UpstreamSender],
        last: int | None,
    ) -> None:
        me = self.network.node_id
        if last is not None and not await self.host.acked_up(tid, last, LEAVE_FLUSH_SECONDS):
            # The leave lets the replica emit the epochs after ``last`` without this member;
            # its epoch last + 1 must be at the new parent first, else the parent (whose
            # barrier took this member on tentatively, after the epochs in progress) may
            # emit that epoch before it arrives: a tentative version lacking this member.
            self.host.count("replica_leave_before_new_parent")
        body = {
            "job": self.host.name,
            "tree": tid,
            "position": format(holder, "x"),
            "event": "leave",
            "member": format(me, "x"),
        }
        for rid, url in replicas.items():
            sender = senders.get(rid)
            try:
                if sender is not None and not await sender.flush(LEAVE_FLUSH_SECONDS):
                    self.host.count("replica_leave_unflushed")
                    continue  # the replica stops waiting by its own bound
                if rid == me:
                    self.event(tid, holder, "leave", me)
                elif rid != holder:
                    await self.network.client.post_json(url, EVENT_PATH, body)
            except Exception as exc:
                self.host.count("replica_leave_failed")
                log.info(
                    "job %s: leave of %x at replica %x failed: %r", self.host.name, holder, rid, exc
                )
            finally:
                if sender is not None:
                    await sender.close()

    # ---- as replica --------------------------------------------------------------------------

    def position(
        self, tid: int, holder: int, members: list[int], parent: dict[str, Any] | None = None
    ) -> None:
        """The holder's announcement (``POST /agent/v1/position``); ``parent``: an inner
        holder's parent ``{"id", "url", "replicas"}`` (checked by the caller)."""
        self._replicated()
        if len(members) > MAX_MEMBERS:
            raise Reject(413, "too_many_members", f"{len(members)} > {MAX_MEMBERS} members")
        key = (tid, holder)
        if self.host.spec.fault_tolerance.mirrored:
            if parent is not None:
                up = (int(str(parent["id"]), 16), str(parent["url"]))
                self.adaptive.position(key, members, up)
            return
        replica = self.positions.get(key)
        if replica is None:
            replica = self.positions[key] = PositionReplica(
                holder,
                lambda emit: self.host.new_barrier(tid, emit),
                max_epochs=INNER_KEPT if parent is not None else 256,
                inner=parent is not None,
            )
        if replica.holder_dead:
            return
        replica.set_members(holder, members)
        if parent is None:
            return
        pid = int(str(parent["id"]), 16)
        preps = {int(str(r), 16): str(u) for r, u in parent.get("replicas") or []}
        self.upstream[key] = (pid, str(parent["url"]), preps)
        self.tasks.spawn(self._standby(key, "standby"), f"{self.host.name} standby")

    def observe_latency(self, tid: int, epoch: int) -> None:
        """As master: a new epoch stored (the adaptive controller's input)."""
        self.adaptive.observe_latency(tid, epoch)

    async def _standby(self, key: Key, event: str) -> int | None:
        """Register as the inner position's standby at its parent (``standby``) or take the
        position over (``release``): the parent's answer, the first epoch it waits for."""
        tid, holder = key
        up = self.upstream.get(key)
        if up is None:
            return None
        body = {"job": self.host.name, "tree": tid, "position": format(holder, "x"), "event": event}
        try:
            reply = await self.network.client.post_json(up[1], EVENT_PATH, body)
        except Exception as exc:
            self.host.count(f"replica_{event}_failed")
            log.info(
                "job %s: %s of position %x at its parent failed: %r",
                self.host.name,
                event,
                holder,
                exc,
            )
            return None
        nxt = reply.get("next")
        return nxt if type(nxt) is int else None

    def _replicated(self) -> None:
        """409 ``not_replicated`` unless the job's policy replicates positions (a replica's
        state is kept only for such jobs: a change to passive drops it here)."""
        if not self.host.spec.fault_tolerance.replicated:
            self.positions.clear()
            raise Reject(
                409, "not_replicated", f"job {self.host.name!r} does not replicate its positions"
            )

    def _key_of(self, name: SnapshotName, position: int | None) -> Key | None:
        if position is not None:
            return (name.tree, position)
        # an older member names no position: the one of the tree it is a member of
        for key, replica in self.positions.items():
            if key[0] == name.tree and (name.sender in replica.members or key[1] == name.sender):
                return key
        return self.adaptive.key_of(name)

    def offer(
        self,
        name: SnapshotName,
        snap: Snapshot,
        origins: Lineage | None,
        position: int | None = None,
    ) -> str:
        """A member's epoch sent to this agent as a replica of ``position``'s holder."""
        self._replicated()
        key = self._key_of(name, position)
        if key is not None and key in self.adaptive.mirrors:
            return self.adaptive.offer(key, name, snap, origins)
        replica = None if key is None else self.positions.get(key)
        if replica is None or key is None:
            raise RetryLater(
                "no_position", f"tree {name.tree:x}: no announcement from the position's holder yet"
            )
        if replica.handover is not None and not replica.owns(name.epoch):
            # taken over: the member's own stream to this (now root) agent carries it
            self.host.count("replica_after_handover")
            return "duplicate"
        result = replica.offer(name.sender, name.epoch, snap, origins)
        if replica.inner and not replica.holder_dead and not self.network.routable(key[1]):
            self._holder_died(key)
        self._check_finished(key)
        return result

    def event(self, tid: int, holder: int, event: str, member: int | None) -> dict[str, Any]:
        """``POST /agent/v1/position/event``: a member left a position replicated here
        (``leave``); a replica of this agent's child's position registers (``standby``),
        takes over (``release``: the answer names the first epoch still waited for) or is
        done (``done``)."""
        if event == "leave":
            replica = self.positions.get((tid, holder))
            if (
                replica is not None
                and replica.inner
                and member is not None
                and replica.member_left(member)
            ):
                self.host.count("replica_members_left")
                self._check_finished((tid, holder))
            return {"ok": True}
        if event == "done":
            self.host.unpin_child(tid, holder)
            self.host.count("positions_done")
            return {"ok": True}
        seconds = STANDBY_SECONDS if event == "standby" else PIN_SECONDS
        self.host.pin_children(tid, [holder], seconds)
        if event == "release":
            self.host.count("positions_released")
        return {"ok": True, "next": self.host.ensure_tree(tid).next_epoch}

    def node_failed(self, node: int) -> None:
        """The overlay declared ``node`` failed: inner positions it held are released, and
        inner positions it was a member of stop waiting for it (a holder and its child dying
        together - one failure domain - else left the replica waiting for the dead child,
        its epochs never sent up: seen as epochs the master gave up on)."""
        for key, replica in list(self.positions.items()):
            if not replica.inner:
                continue
            if key[1] == node and not replica.holder_dead:
                self._holder_died(key)
            elif replica.member_failed(node):
                self.host.count("replica_members_failed")
                self._check_finished(key)

    def _holder_died(self, key: Key) -> None:
        replica = self.positions[key]
        replica.holder_gone()
        log.warning(
            "job %s tree %x: holder %x of a replicated position died; its replica sends "
            "the position's epochs up",
            self.host.name,
            key[0],
            key[1],
        )
        self.tasks.spawn(self._release(key), f"{self.host.name} position release")

    async def _release(self, key: Key) -> None:
        replica = self.positions.get(key)
        up = self.upstream.get(key)
        if replica is None or up is None:
            return
        first = await self._standby(key, "release")
        if first is None:
            first = replica.barrier.next_epoch - len(replica.kept)  # every kept epoch
        tid, holder = key
        forward = self.forwards[key] = self._forward(key, POSITION_SNAPSHOT_PATH)
        forward.retarget(*up)
        sent = replica.release(first, forward.send)
        self.host.count("replica_releases")
        log.warning(
            "job %s tree %x: released position %x to parent %x from epoch %d (%d kept epochs sent)",
            self.host.name,
            tid,
            holder,
            up[0],
            first,
            sent,
        )
        self._check_finished(key)

    def _forward(self, key: Key, parent_path: str) -> PositionForward:
        """The upward senders of a released position or a mirror (position_forward.py)."""
        tid, holder = key
        return PositionForward(
            self.network.client,
            self.network.srt_tunables,
            job=self.host.name,
            tree=tid,
            holder=holder,
            self_id=self.network.node_id,
            offer_local=lambda parent, name, payload: self._offer_own((tid, parent), name, payload),
            max_queued=REPLICA_QUEUE,
            parent_path=parent_path,
        )

    def _check_finished(self, key: Key) -> None:
        replica = self.positions.get(key)
        if replica is None or not replica.finished:
            return
        del self.positions[key]
        self.upstream.pop(key, None)
        forward = self.forwards.pop(key, None)
        if forward is not None:
            self.tasks.spawn(forward.finish(), f"{self.host.name} position done")

    # ---- the master's take-over (master_takeover.py) --------------------------------------------

    def became_root(self, tid: int) -> None:
        """This agent became ``tid``'s root: its replica of the dead master's position keeps
        the epochs in flight whole."""
        self.takeover.became_root(tid)

    def route(
        self, tid: int, sender: int, epoch: int, snap: Snapshot, origins: Lineage | None
    ) -> str | None:
        """After a take-over: a contribution of an epoch the replica still owns goes to it
        (its answer); None otherwise (the root's own barrier takes it)."""
        return self.takeover.route(tid, sender, epoch, snap, origins)

    def owns(self, tid: int, epoch: int) -> bool:
        """After a take-over: whether the replica still owns ``epoch`` of ``tid``."""
        return self.takeover.owns(tid, epoch)

    def lost_root(self, tid: int) -> None:
        self._announced.pop(tid, None)

    def held(self) -> dict[int, list[int]]:
        """Tree → the holders whose positions this agent replicates."""
        out: dict[int, list[int]] = {}
        for tid, holder in self.positions:
            out.setdefault(tid, []).append(holder)
        return out

    def status(self) -> dict[str, Any]:
        return {
            "replicas": self.wanted(),
            **self.budget.status(),
            **self.adaptive.status(),
            "positions": {
                f"{t:x}/{h:x}": {
                    **p.status(),
                    **(
                        {"forward": self.forwards[(t, h)].status()}
                        if (t, h) in self.forwards
                        else {}
                    ),
                }
                for (t, h), p in self.positions.items()
            },
            "heard": {
                format(t, "x"): {
                    format(h, "x"): [format(r, "x") for r in rs] for h, rs in hs.items()
                }
                for t, hs in self.heard.items()
            },
            "senders": {
                f"{t:x}/{h:x}": {format(r, "x"): s.pending()["queued"] for r, s in ss.items()}
                for (t, h), ss in self.senders.items()
            },
        }

    async def close(self) -> None:
        for key in list(self.senders):
            for sender in self.senders.pop(key).values():
                await sender.close()
        for forward in self.forwards.values():
            await forward.close()
        self.forwards.clear()
        await self.adaptive.close()
        self.positions.clear()
