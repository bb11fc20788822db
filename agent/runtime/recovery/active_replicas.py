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
* **The master's take-over**: when this agent becomes the root, :meth:`became_root` hands
  its replica's epochs to the root's store and pins the dead master's members in its own
  barrier from the hand-over epoch on (for :data:`PIN_SECONDS`, time to re-join here);
  :meth:`route` sends contributions of the epochs the replica still owns to it - a peer's
  and this agent's own barrier's alike.
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

import asyncio
import logging
import time
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from agent.jobs.fault_policy import MAX_BUDGET, MAX_REPLICAS
from agent.runtime.recovery.mirror_position import MirrorPosition
from agent.runtime.recovery.position_forward import EVENT_PATH, PositionForward
from agent.runtime.recovery.position_replica import PositionReplica
from agent.runtime.recovery.redundancy_control import (
    LatencyWindow,
    RedundancyController,
    mirrored_siblings,
)
from agent.runtime.recovery.replica_budget import BudgetPlans
from agent.runtime.recovery.standby import standbys_for
from agent.runtime.services import NetworkService, Spawner
from cbt import Snapshot
from overlay import NodeInfo
from srt import EpochCombiner, SnapshotName, UpstreamSender
from srt.dataplane.lineage import Lineage, records_of
from srt.dataplane.lineage import decode as lineage_of
from srt.dataplane.name import POSITION_SNAPSHOT_PATH, replica_path
from srt.dataplane.upstream import check_url
from srt.errors import Reject, RetryLater

log = logging.getLogger(__name__)

POSITION_PATH = "/agent/v1/position"
REPLICAS_PATH = "/agent/v1/position/replicas"
REPORT_PATH = "/agent/v1/position/report"
ANNOUNCE_SECONDS = 2.0  # a holder re-announces its replicas and members this often
REPLICA_QUEUE = 64  # epochs a member's sender to a replica keeps while it is unreachable
PIN_SECONDS = 10.0  # how long a new root waits for the dead master's members to re-join
STANDBY_SECONDS = 10.0  # how long a parent keeps waiting for a dead holder with a standby
INNER_KEPT = 64  # epochs an inner position's replica keeps for its release
LEAVE_FLUSH_SECONDS = 10.0  # a moving member waits this long for its replica senders
MAX_MEMBERS = 4096
HEDGE_SHARE = 0.5  # a mirror's epoch goes up without missing members after T times this
CONTROL_SECONDS = 1.0  # the adaptive controller's period at a master
EVENTS = ("leave", "standby", "release", "done")


def inner_replicas(
    me: int, parent: int | None, candidates: Iterable[NodeInfo], n: int, domain: str
) -> list[NodeInfo]:
    """An inner holder's ``n`` replicas: live agents other than itself and its parent,
    closest to its id, those of another failure domain first."""
    others = [c for c in candidates if c.id not in (me, parent)]
    others.sort(key=lambda c: (c.domain == domain, c.id ^ me))
    return others[:n]


class ReplicaHost(Protocol):
    """The job as replicated positions see it (the recovery host gives it)."""

    name: str

    @property
    def spec(self) -> Any: ...

    @property
    def stopped(self) -> bool: ...

    @property
    def is_origin(self) -> bool: ...

    def is_root(self, tid: int) -> bool: ...

    def parent_of(self, tid: int) -> int | None:
        """This agent's parent's id in ``tid`` (None: the root, or not on the tree)."""
        ...

    def parent_url_of(self, tid: int) -> str | None:
        """This agent's parent's data-plane URL in ``tid`` (None: none known)."""
        ...

    def child_urls(self, tid: int) -> dict[int, str]:
        """This agent's tree children in ``tid`` and their data-plane URLs."""
        ...

    def child_domains(self, tid: int) -> dict[int, str]:
        """This agent's tree children in ``tid`` and their failure domains."""
        ...

    async def master_url(self, tid: int) -> str:
        """The data-plane URL of ``tid``'s master."""
        ...

    def ensure_tree(self, tid: int) -> EpochCombiner: ...

    def take_queued(self, tid: int) -> list[tuple[int, bytes]]:
        """Remove every unacknowledged epoch of this agent's sender to its parent."""
        ...

    async def acked_up(self, tid: int, epoch: int, timeout: float) -> bool:
        """Wait until this agent's parent acknowledged an epoch after ``epoch``."""
        ...

    def new_barrier(
        self, tid: int, emit: Callable[[int, Snapshot], None], first_epoch: int | None = None
    ) -> EpochCombiner:
        """A barrier of the job's tree with no local input (the job's operator and checks),
        from the first epoch offered, or from ``first_epoch``."""
        ...

    def store_root(self, tid: int, epoch: int, snap: Snapshot, origins: Lineage | None) -> None:
        """Store an epoch as the root's result (as the root's own barrier would)."""
        ...

    def pin_children(self, tid: int, members: Iterable[int], seconds: float) -> None:
        """Keep ``members`` among the barrier's children for ``seconds`` although the tree
        layer does not list them (yet)."""
        ...

    def unpin_child(self, tid: int, member: int) -> None:
        """Stop keeping ``member`` among the barrier's children (it is done, or moved)."""
        ...

    def count(self, what: str, n: int = 1) -> None: ...

    async def multicast(self, tid: int, message: dict[str, Any]) -> Any: ...


Key = tuple[int, int]  # (tree, holder)


class ActiveReplicas:
    """The replicated-position side of one job on one agent (module contract)."""

    def __init__(self, host: ReplicaHost, network: NetworkService, tasks: Spawner) -> None:
        self.host = host
        self.network = network
        self.tasks = tasks
        self.positions: dict[Key, PositionReplica] = {}  # as replica
        self.upstream: dict[Key, tuple[int, str, dict[int, str]]] = {}  # inner: parent
        self.forwards: dict[Key, PositionForward] = {}  # released inner positions
        #: as member: per tree, per holder, the holder's replicas as last heard {id: url}
        self.heard: dict[int, dict[int, dict[int, str]]] = {}
        self.senders: dict[Key, dict[int, UpstreamSender]] = {}
        self._parents: dict[int, int] = {}  # as member: the parent last sent to, per tree
        self._inner: dict[int, set[int]] = {}  # as member: holders heard as inner positions
        self._last_sent: dict[Key, int] = {}  # as member: the newest epoch sent to a position
        self._announced: dict[int, tuple[float, tuple[Any, ...]]] = {}
        self._reported: dict[int, tuple[float, tuple[Any, ...]]] = {}
        #: budget: the plan per tree (as master: made here; elsewhere: as the master said)
        self.plans: dict[int, frozenset[int]] = {}
        self.budgets: dict[int, BudgetPlans] = {}  # as master: per tree
        #: adaptive: the mirrored ratio per tree (as master: the controller's; else heard)
        self.rho: dict[int, float] = {}
        self.mirrors: dict[Key, tuple[MirrorPosition, PositionForward]] = {}  # as mirror
        self.controllers: dict[int, tuple[LatencyWindow, RedundancyController]] = {}
        self._fresh: dict[int, int] = {}  # misses since the last control period, per tree
        self._missed: dict[int, int] = {}  # the newest epoch counted as a miss, per tree
        self._loops: set[int] = set()  # trees whose control loop runs
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
        planned = self.host.is_root(tid) or self.network.node_id in self.plans.get(tid, ())
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
                self._report(tid, parent)
            parent_replicas = self.heard.get(tid, {}).get(parent, {})
            upstream = (parent, url, tuple(sorted(parent_replicas.items())))
        elif policy.planned:
            plan = tuple(sorted(self._plan(tid, policy.budget)))
        rho = round(self.rho.get(tid, 0.0), 3) if root and policy.mirrored else None
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

    # ---- budgeted replicas (replica_budget.py) -------------------------------------------------

    def _report(self, tid: int, parent: int) -> None:
        """An inner holder under a budget: its place in the tree, to the master, when due."""
        children = self.host.child_domains(tid)
        state = (parent, tuple(sorted(children.items())))
        last = self._reported.get(tid)
        now = time.monotonic()
        if last is not None and last[1] == state and now - last[0] < ANNOUNCE_SECONDS:
            return
        self._reported[tid] = (now, state)
        body = {
            "job": self.host.name,
            "tree": tid,
            "holder": format(self.network.node_id, "x"),
            "parent": format(parent, "x"),
            "domain": self.network.domain,
            "children": [[format(c, "x"), d] for c, d in sorted(children.items())],
        }
        self.tasks.spawn(self._send_report(tid, body), f"{self.host.name} position report")

    async def _send_report(self, tid: int, body: dict[str, Any]) -> None:
        try:
            url = await self.host.master_url(tid)
            await self.network.client.post_json(url, REPORT_PATH, body)
        except Exception as exc:  # the next round reports again
            self._reported.pop(tid, None)
            self.host.count("position_report_failed")
            log.info("job %s: position report of tree %x failed: %r", self.host.name, tid, exc)

    def report(
        self, tid: int, holder: int, parent: int | None, domain: str, children: dict[int, str]
    ) -> None:
        """As master: a holder's place in the tree (``POST /agent/v1/position/report``)."""
        policy = self.host.spec.fault_tolerance
        if not policy.planned:
            raise Reject(409, "not_budgeted", f"job {self.host.name!r} has no replica budget")
        if not self.host.is_root(tid):
            raise RetryLater("not_master", f"this agent is not tree {tid:x}'s master")
        plans = self.budgets.setdefault(tid, BudgetPlans(policy.budget))
        if not plans.report(holder, parent, domain, children, time.monotonic()):
            raise Reject(413, "too_many_positions", "past the master's bound on reports")

    def observe(self, tid: int, origins: Lineage | None) -> None:
        """As master under a budget: a stored epoch's records per origin (the rates)."""
        policy = self.host.spec.fault_tolerance
        if policy.planned and self.host.is_root(tid):
            plans = self.budgets.setdefault(tid, BudgetPlans(policy.budget))
            plans.observe(records_of(origins))

    def _plan(self, tid: int, budget: int) -> frozenset[int]:
        plans = self.budgets.setdefault(tid, BudgetPlans(budget))
        me = self.network.node_id
        plan = plans.plan(
            me, self.network.domain, self.host.child_domains(tid), budget, time.monotonic()
        )
        if plan != self.plans.get(tid):
            log.info("job %s tree %x: replica plan %s", self.host.name, tid, sorted(plan))
        self.plans[tid] = plan
        return plan

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
                self.rho[tid] = float(rho)
            plan = message.get("plan")
            if plan is not None:
                if not isinstance(plan, list) or len(plan) > MAX_BUDGET + 1:
                    raise ValueError("a plan is a short list of hex ids")
                self.plans[tid] = frozenset(int(str(n), 16) for n in plan)
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
        policy = self.host.spec.fault_tolerance
        if policy.mirrored and not mirrored_siblings(
            self.host.name, tid, epoch, format(holder, "x"), self.rho.get(tid, 0.0)
        ):
            return  # not one of the epochs mirrored at the ratio the master set
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
        if drop and dead and held:
            dropped = self.host.take_queued(tid)
            self.host.count("handed_to_replicas", len(dropped))
            log.info(
                "job %s tree %x: parent %x dead; its replicas hold the %d epochs queued for it",
                self.host.name,
                tid,
                old,
                len(dropped),
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
                self._mirror(key, members, parent)
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

    # ---- as a mirror (adaptive; mirror_position.py) -------------------------------------------

    def _mirror(self, key: Key, members: list[int], parent: dict[str, Any]) -> None:
        """An inner holder's announcement to its mirror: its members and its parent."""
        tid, holder = key
        found = self.mirrors.get(key)
        if found is None:
            # the holder's name at its parent's position door: the parent keeps waiting for
            # the holder a hedge window after each copy, should the overlay declare it failed
            # meanwhile (else it would emit an epoch whose copy is on its way without it)
            forward = self._forward(key, POSITION_SNAPSHOT_PATH)
            mirror = MirrorPosition(
                holder,
                lambda epoch, emit: self.host.new_barrier(tid, emit, first_epoch=epoch),
                forward.send,
            )
            found = self.mirrors[key] = (mirror, forward)
        found[0].set_members(members)
        found[1].retarget(int(str(parent["id"]), 16), str(parent["url"]), {})

    def _offer_mirror(
        self, key: Key, name: SnapshotName, snap: Snapshot, origins: Lineage | None
    ) -> str:
        mirror = self.mirrors[key][0]
        opened = name.epoch not in mirror.open and name.epoch not in mirror.sent
        result = mirror.offer(name.sender, name.epoch, snap, origins)
        if opened and name.epoch in mirror.open:
            self.tasks.spawn(self._hedge_later(key, name.epoch), f"{self.host.name} hedge")
        return result

    async def _hedge_later(self, key: Key, epoch: int) -> None:
        """After the hedge delay (:data:`HEDGE_SHARE` of the latency target) an epoch still
        open at the mirror goes up without the members missing (mirror_position.py)."""
        await asyncio.sleep(HEDGE_SHARE * self.host.spec.fault_tolerance.target_ms / 1000.0)
        found = self.mirrors.get(key)
        if found is not None and found[0].hedge(epoch):
            self.host.count("mirror_hedged")

    # ---- the controller (adaptive, redundancy_control.py) --------------------------------------

    def observe_latency(self, tid: int, epoch: int) -> None:
        """As master under the adaptive policy: a new epoch stored - its completion latency
        feeds the window (a miss, unless already counted while it was open); the control
        loop (:meth:`control_period`) starts with the first one."""
        policy = self.host.spec.fault_tolerance
        if not policy.mirrored or not self.host.is_root(tid):
            return
        if policy.mirror_ratio is not None:  # static redundancy: the ratio is the spec's
            self.rho[tid] = policy.mirror_ratio
            return
        window, _ = self._controller(tid)
        latency_ms = max(0.0, (time.time() - self.host.spec.schedule.end(epoch)) * 1000.0)
        window.record(latency_ms, time.monotonic())
        if latency_ms > policy.target_ms and epoch > self._missed.get(tid, -1):
            self._fresh[tid] = self._fresh.get(tid, 0) + 1
            self._missed[tid] = epoch
        if tid not in self._loops:
            self._loops.add(tid)
            self.tasks.spawn(self._control_loop(tid), f"{self.host.name} redundancy control")

    def _controller(self, tid: int) -> tuple[LatencyWindow, RedundancyController]:
        return self.controllers.setdefault(tid, (LatencyWindow(), RedundancyController()))

    async def _control_loop(self, tid: int) -> None:
        """Every :data:`CONTROL_SECONDS` while this agent masters the tree under the adaptive
        policy: one control period (:meth:`control_period`)."""
        try:
            while not self.host.stopped:
                await asyncio.sleep(CONTROL_SECONDS)
                policy = self.host.spec.fault_tolerance
                if not policy.mirrored or policy.mirror_ratio is not None:
                    return
                if not self.host.is_root(tid):
                    return
                self.control_period(tid, policy.target_ms)
        finally:
            self._loops.discard(tid)

    def control_period(self, tid: int, target_ms: float) -> None:
        """One control period: the misses since the last one - epochs stored past the target
        and epochs **still open** past it (a paused node holds them: nothing is stored, yet
        the tail is missing now) - and the window's p99 to the controller; its ratio goes
        out with the next announcement (now, when it changed)."""
        schedule = self.host.spec.schedule
        overdue = schedule.epoch_of(time.time() - target_ms / 1000.0) - 1  # closed past T
        first = max(self.host.ensure_tree(tid).next_epoch, self._missed.get(tid, -1) + 1)
        if overdue >= first:
            self._fresh[tid] = self._fresh.get(tid, 0) + overdue - first + 1
            self._missed[tid] = overdue
        window, controller = self._controller(tid)
        now = time.monotonic()
        before = self.rho.get(tid, 0.0)
        controller.update(window.p99(now), target_ms, self._fresh.pop(tid, 0))
        self.rho[tid] = controller.rho
        if controller.rho != before:
            self.announce(tid)

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
        for key, (mirror, _) in self.mirrors.items():
            if key[0] == name.tree and name.sender in mirror.members:
                return key
        return None

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
        if key is not None and key in self.mirrors:
            return self._offer_mirror(key, name, snap, origins)
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

    # ---- the master's take-over ----------------------------------------------------------------

    def became_root(self, tid: int) -> None:
        """This agent became ``tid``'s root: its replica of the dead master's position keeps
        the epochs in flight whole (module contract)."""
        if not self.host.spec.fault_tolerance.replicated:  # passive since: the standby's path
            self.positions.clear()
            return
        me = self.network.node_id
        masters = [k for k, p in self.positions.items() if k[0] == tid and not p.inner]
        replica = self.positions.get(masters[0]) if masters else None
        if replica is None or replica.handover is not None or replica.master == me:
            return
        own = self.host.ensure_tree(tid)

        def deliver(epoch: int, snap: Snapshot, origins: Lineage | None) -> None:
            self.host.store_root(tid, epoch, snap, origins)

        kept, handover, members = replica.take_over(me, own.next_epoch, deliver)
        for epoch, snap, origins in kept:
            self.host.store_root(tid, epoch, snap, origins)
        own.set_children(own.children | members, start=handover + 1)
        self.host.pin_children(tid, members, PIN_SECONDS)
        self.host.count("replica_takeovers")
        log.warning(
            "job %s tree %x: took over from master %x with its replicated position: %d "
            "epochs kept, the replica owns epochs up to %d, %d members pinned",
            self.host.name,
            tid,
            replica.master,
            len(kept),
            handover,
            len(members),
        )
        self._retire(masters[0])

    def _master_position(self, tid: int) -> tuple[Key, PositionReplica] | None:
        for key, replica in self.positions.items():
            if key[0] == tid and replica.handover is not None:
                return key, replica
        return None

    def route(
        self, tid: int, sender: int, epoch: int, snap: Snapshot, origins: Lineage | None
    ) -> str | None:
        """After a take-over: a contribution of an epoch the replica still owns goes to it
        (its answer); None otherwise (the root's own barrier takes it)."""
        found = self._master_position(tid)
        if found is None or not found[1].owns(epoch):
            return None
        result = found[1].offer(sender, epoch, snap, origins)
        self._retire(found[0])
        return result

    def owns(self, tid: int, epoch: int) -> bool:
        """After a take-over: whether the replica still owns ``epoch`` of ``tid``."""
        found = self._master_position(tid)
        return found is not None and found[1].owns(epoch)

    def _retire(self, key: Key) -> None:
        replica = self.positions.get(key)
        if replica is not None and replica.done:
            del self.positions[key]

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
            "plans": {
                format(t, "x"): sorted(format(n, "x") for n in p) for t, p in self.plans.items()
            },
            "budgets": {format(t, "x"): b.status() for t, b in self.budgets.items()},
            "rho": {format(t, "x"): r for t, r in self.rho.items()},
            "mirrors": {
                f"{t:x}/{h:x}": {**m.status(), "forward": f.status()}
                for (t, h), (m, f) in self.mirrors.items()
            },
            "controllers": {format(t, "x"): c.status() for t, (_, c) in self.controllers.items()},
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
        for _, forward in self.mirrors.values():
            await forward.close()
        self.mirrors.clear()
        self.positions.clear()
