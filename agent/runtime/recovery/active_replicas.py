"""Replicated masters on a running agent: who the replicas are, what members send them, and
the take-over (the state itself is :mod:`agent.runtime.recovery.position_replica`).

Contract (``docs/fault-tolerance.md``, "Replicated masters"), for a job whose spec's
``fault_tolerance`` is ``{"policy": "replicated", "replicas": r}``; nothing happens for a
passive one:

* **As master** of a tree: its replicas are the r - 1 live agents closest to the tree id
  after itself (:func:`~agent.runtime.recovery.standby.standbys_for`: the next masters, the
  first of them the passive standby). After each stored epoch, when the replicas or the
  members changed or every :data:`ANNOUNCE_SECONDS`, :meth:`ActiveReplicas.announce` tells
  each replica the members it waits for (``POST /agent/v1/position``: its barrier's
  children, and itself when it is an origin) and multicasts the replicas' ids and URLs down
  the tree (kind ``replicas``).
* **As member** (a child of the master, or the master itself for its own share):
  :meth:`ActiveReplicas.to_replicas` sends each epoch it sends up also to every replica
  (``POST /srt/v1/replica-snapshot``, bounded senders: :data:`REPLICA_QUEUE` epochs); to
  itself, when it is one of them, directly.
* **As replica**: :meth:`position` and :meth:`offer` keep a
  :class:`~agent.runtime.recovery.position_replica.PositionReplica` per tree (a snapshot
  before the master's first announcement: 503 ``no_position``, the member retries; either
  for a job that does not replicate its masters: 409 ``not_replicated``; more than
  :data:`MAX_MEMBERS` members: 413).
* **Take-over**: when this agent becomes the root, :meth:`became_root` hands its replica's
  epochs to the root's store and pins the dead master's members in its own barrier from
  the hand-over epoch on (for :data:`PIN_SECONDS`, time to re-join here);
  :meth:`route` sends contributions of the epochs the replica still owns to it - a peer's
  and this agent's own barrier's alike.

Bounds: one replica state per tree of the job; each member's replica senders keep at most
:data:`REPLICA_QUEUE` epochs; an announcement names at most :data:`MAX_MEMBERS` members.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from agent.jobs.fault_policy import MAX_REPLICAS
from agent.runtime.recovery.position_replica import PositionReplica
from agent.runtime.recovery.standby import standbys_for
from agent.runtime.services import NetworkService, Spawner
from cbt import Snapshot
from srt import EpochCombiner, SnapshotName, UpstreamSender
from srt.dataplane.lineage import Lineage
from srt.dataplane.lineage import decode as lineage_of
from srt.dataplane.name import REPLICA_SNAPSHOT_PATH
from srt.dataplane.upstream import check_url
from srt.errors import Reject, RetryLater

log = logging.getLogger(__name__)

POSITION_PATH = "/agent/v1/position"
ANNOUNCE_SECONDS = 2.0  # a master re-announces its replicas and members this often
REPLICA_QUEUE = 64  # epochs a member's sender to a replica keeps while it is unreachable
PIN_SECONDS = 10.0  # how long a new root waits for the dead master's members to re-join
MAX_MEMBERS = 4096


class ReplicaHost(Protocol):
    """The job as replicated masters see it (the recovery host gives it)."""

    name: str

    @property
    def spec(self) -> Any: ...

    @property
    def is_origin(self) -> bool: ...

    def is_root(self, tid: int) -> bool: ...

    def parent_of(self, tid: int) -> int | None:
        """This agent's parent's id in ``tid`` (None: the root, or not on the tree)."""
        ...

    def ensure_tree(self, tid: int) -> EpochCombiner: ...

    def new_barrier(self, tid: int, emit: Callable[[int, Snapshot], None]) -> EpochCombiner:
        """A barrier of the job's tree with no local input (the job's operator and checks)."""
        ...

    def store_root(self, tid: int, epoch: int, snap: Snapshot, origins: Lineage | None) -> None:
        """Store an epoch as the root's result (as the root's own barrier would)."""
        ...

    def pin_children(self, tid: int, members: Iterable[int], seconds: float) -> None:
        """Keep ``members`` among the barrier's children for ``seconds`` although the tree
        layer does not list them (yet)."""
        ...

    def count(self, what: str, n: int = 1) -> None: ...

    async def multicast(self, tid: int, message: dict[str, Any]) -> Any: ...


class ActiveReplicas:
    """The replicated-master side of one job on one agent (module contract)."""

    def __init__(self, host: ReplicaHost, network: NetworkService, tasks: Spawner) -> None:
        self.host = host
        self.network = network
        self.tasks = tasks
        self.positions: dict[int, PositionReplica] = {}  # as replica: per tree
        #: as member: per tree, the master's replicas as last heard (master, {id: url})
        self.heard: dict[int, tuple[int, dict[int, str]]] = {}
        self.senders: dict[int, dict[int, UpstreamSender]] = {}
        self._announced: dict[int, tuple[float, tuple[int, ...], tuple[int, ...]]] = {}
        self._urls: dict[int, str] = {}

    def wanted(self) -> int:
        """The job's replicas per master position (1: passive)."""
        policy = self.host.spec.fault_tolerance
        return policy.replicas if policy.replicated else 1

    # ---- as master -----------------------------------------------------------------------

    def replica_ids(self, tid: int) -> list[int]:
        """The agents that replicate this master's position of ``tid`` now."""
        n = self.wanted() - 1
        if n <= 0:
            return []
        me = self.network.node_id
        return [node.id for node in standbys_for(tid, me, self.network.neighbours(), n)]

    def announce(self, tid: int) -> None:
        """After a stored epoch (module contract): tell replicas and members, when due."""
        if self.wanted() <= 1 or not self.host.is_root(tid):
            return
        replicas = tuple(self.replica_ids(tid))
        members = tuple(sorted(self._members(tid)))
        last = self._announced.get(tid)
        now = time.monotonic()
        if (
            last is not None
            and last[1:] == (replicas, members)
            and now - last[0] < ANNOUNCE_SECONDS
        ):
            return
        self._announced[tid] = (now, replicas, members)
        self.tasks.spawn(self._announce(tid, replicas, members), f"{self.host.name} replicas")

    def _members(self, tid: int) -> set[int]:
        members = set(self.host.ensure_tree(tid).children)
        if self.host.is_origin:
            members.add(self.network.node_id)
        return members

    async def _announce(
        self, tid: int, replicas: tuple[int, ...], members: tuple[int, ...]
    ) -> None:
        me = self.network.node_id
        body = {
            "job": self.host.name,
            "tree": tid,
            "master": format(me, "x"),
            "members": [format(m, "x") for m in members],
        }
        urls: dict[int, str] = {}
        for rid in replicas:
            try:
                url = self._urls.get(rid) or await self.network.data_url_of(rid)
                self._urls[rid] = url
                await self.network.client.post_json(url, POSITION_PATH, body)
                urls[rid] = url
            except Exception as exc:  # a replica down: the next announcement retries it
                self._urls.pop(rid, None)
                self.host.count("replica_announce_failed")
                log.info(
                    "job %s: replica %x of tree %x unreachable: %r", self.host.name, rid, tid, exc
                )
        message = {
            "kind": "replicas",
            "master": format(me, "x"),
            "replicas": [[format(rid, "x"), url] for rid, url in urls.items()],
        }
        self.heard_from(tid, message)  # the master's own share goes to them too
        await self.host.multicast(tid, message)

    # ---- as member -------------------------------------------------------------------------

    def heard_from(self, tid: int, message: dict[str, Any]) -> None:
        """The master's ``replicas`` multicast: where members send their epochs too."""
        try:
            master = int(str(message.get("master")), 16)
            replicas = {int(str(r), 16): str(url) for r, url in message.get("replicas") or []}
            if len(replicas) >= MAX_REPLICAS:
                raise ValueError(f"{len(replicas)} replicas: a policy has fewer")
            for url in replicas.values():
                check_url(url)  # a bad one would raise in a member's send path
        except (TypeError, ValueError):
            self.host.count("bad_replicas_message")
            return
        self.heard[tid] = (master, replicas)

    def to_replicas(self, tid: int, epoch: int, payload: bytes) -> None:
        """An epoch this agent sends up (or, as master, its own share): to every replica of
        the master's position too, when this agent is one of the master's members."""
        heard = self.heard.get(tid)
        me = self.network.node_id
        if heard is None or self.wanted() <= 1:
            self._close(tid, set())
            return
        master, replicas = heard
        member = master == me if self.host.is_root(tid) else self.host.parent_of(tid) == master
        targets = {r: url for r, url in replicas.items() if member and r != master}
        self._close(tid, set(targets) - {me})
        name = SnapshotName(self.host.name, tid, epoch, me)
        senders = self.senders.setdefault(tid, {})
        for rid, url in targets.items():
            if rid == me:  # this agent replicates the position: no network hop
                self._offer_own(name, payload)
                continue
            sender = senders.get(rid)
            if sender is None:
                sender = senders[rid] = UpstreamSender(
                    self.network.client,
                    job=self.host.name,
                    tree=tid,
                    sender=me,
                    tunables=self.network.srt_tunables,
                    path=REPLICA_SNAPSHOT_PATH,
                    max_queued=REPLICA_QUEUE,
                )
            sender.set_parent(url)
            sender.send(name, payload)

    def _offer_own(self, name: SnapshotName, payload: bytes) -> None:
        position = self.positions.get(name.tree)
        if position is None or position.handover is not None:
            self.host.count("replica_own_skipped")
            return
        origins, raw = lineage_of(payload)
        position.offer(name.sender, name.epoch, Snapshot.from_bytes(raw), origins)

    def _close(self, tid: int, keep: set[int]) -> None:
        senders = self.senders.get(tid, {})
        for rid in [r for r in senders if r not in keep]:
            sender = senders.pop(rid)
            self.tasks.spawn(sender.close(), f"{self.host.name} replica sender")

    # ---- as replica ------------------------------------------------------------------------

    def position(self, tid: int, master: int, members: list[int]) -> None:
        """The master's announcement (``POST /agent/v1/position``)."""
        self._replicated()
        if len(members) > MAX_MEMBERS:
            raise Reject(413, "too_many_members", f"{len(members)} > {MAX_MEMBERS} members")
        replica = self.positions.get(tid)
        if replica is None:
            replica = self.positions[tid] = PositionReplica(
                master, lambda emit: self.host.new_barrier(tid, emit)
            )
        replica.set_members(master, members)

    def _replicated(self) -> None:
        """409 ``not_replicated`` unless the job's policy replicates master positions (a
        replica's state is kept only for such jobs: a change to passive drops it here)."""
        if self.wanted() <= 1:
            self.positions.clear()
            raise Reject(
                409, "not_replicated", f"job {self.host.name!r} does not replicate its masters"
            )

    def offer(self, name: SnapshotName, snap: Snapshot, origins: Lineage | None) -> str:
        """A member's epoch sent to this agent as a replica of its master's position."""
        self._replicated()
        replica = self.positions.get(name.tree)
        if replica is None:
            raise RetryLater(
                "no_position", f"tree {name.tree:x}: no announcement from its master yet"
            )
        if replica.handover is not None and not replica.owns(name.epoch):
            # taken over: the member's own stream to this (now root) agent carries it
            self.host.count("replica_after_handover")
            return "duplicate"
        return replica.offer(name.sender, name.epoch, snap, origins)

    # ---- the take-over ---------------------------------------------------------------------

    def became_root(self, tid: int) -> None:
        """This agent became ``tid``'s root: its replica of the dead master's position keeps
        the epochs in flight whole (module contract)."""
        if self.wanted() <= 1:  # changed to passive since: the standby's path alone
            self.positions.clear()
            return
        replica = self.positions.get(tid)
        me = self.network.node_id
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
        self._retire(tid)

    def route(
        self, tid: int, sender: int, epoch: int, snap: Snapshot, origins: Lineage | None
    ) -> str | None:
        """After a take-over: a contribution of an epoch the replica still owns goes to it
        (its answer); None otherwise (the root's own barrier takes it)."""
        replica = self.positions.get(tid)
        if replica is None or not replica.owns(epoch):
            return None
        result = replica.offer(sender, epoch, snap, origins)
        self._retire(tid)
        return result

    def owns(self, tid: int, epoch: int) -> bool:
        """After a take-over: whether the replica still owns ``epoch`` of ``tid``."""
        replica = self.positions.get(tid)
        return replica is not None and replica.owns(epoch)

    def _retire(self, tid: int) -> None:
        replica = self.positions.get(tid)
        if replica is not None and replica.done:
            del self.positions[tid]

    def lost_root(self, tid: int) -> None:
        self._announced.pop(tid, None)

    def status(self) -> dict[str, Any]:
        return {
            "replicas": self.wanted(),
            "positions": {format(t, "x"): p.status() for t, p in self.positions.items()},
            "heard": {
                format(t, "x"): {"master": format(m, "x"), "replicas": [format(r, "x") for r in rs]}
                for t, (m, rs) in self.heard.items()
            },
            "senders": {
                format(t, "x"): {format(r, "x"): s.pending()["queued"] for r, s in ss.items()}
                for t, ss in self.senders.items()
            },
        }

    async def close(self) -> None:
        for tid in list(self.senders):
            for sender in self.senders.pop(tid).values():
                await sender.close()
        self.positions.clear()
