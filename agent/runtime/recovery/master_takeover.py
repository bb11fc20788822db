"""The master's take-over from its replicated position (replicated tree nodes, the root).

Contract (``docs/fault-tolerance.md``, "Replicated masters"). When this agent becomes a
tree's root and it replicates the dead master's position (a
:class:`~agent.runtime.recovery.position_replica.PositionReplica` that is not an inner one),
:meth:`MasterTakeover.became_root` hands the replica's kept epochs to the root's store, pins
the dead master's members in its own barrier from the hand-over epoch on (for
``pin_seconds``: time to re-join here) and keeps the epochs in flight with the replica:
:meth:`route` sends contributions of the epochs it still owns to it - a peer's and this
agent's own barrier's alike - and :meth:`owns` says which. The replica is dropped once done.
A job that is passive since (a runtime change) clears the replicas: the standby's path takes
over.

Shares the replicas' table with :mod:`agent.runtime.recovery.active_replicas` (which keeps
it); bounded by it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from agent.runtime.recovery.position_replica import PositionReplica
from cbt import Snapshot
from srt import EpochCombiner
from srt.dataplane.lineage import Lineage

log = logging.getLogger(__name__)

Key = tuple[int, int]  # (tree, holder)


class TakeoverHost(Protocol):
    """The job as the take-over sees it (a part of ``ReplicaHost``)."""

    name: str

    @property
    def spec(self) -> Any: ...

    def ensure_tree(self, tid: int) -> EpochCombiner: ...

    def store_root(self, tid: int, epoch: int, snap: Snapshot, origins: Lineage | None) -> None: ...

    def pin_children(self, tid: int, members: Iterable[int], seconds: float) -> None: ...

    def count(self, what: str, n: int = 1) -> None: ...


class MasterTakeover:
    """The take-over of one job's master position on one agent (module contract)."""

    def __init__(
        self,
        host: TakeoverHost,
        positions: dict[Key, PositionReplica],
        node_id: Callable[[], int],
        pin_seconds: float,
    ) -> None:
        self.host = host
        self.positions = positions  # the replicas this agent keeps (active_replicas.py)
        self.node_id = node_id  # read when needed: known once the overlay runs
        self.pin_seconds = pin_seconds

    def became_root(self, tid: int) -> None:
        """This agent became ``tid``'s root: its replica of the dead master's position keeps
        the epochs in flight whole (module contract)."""
        if not self.host.spec.fault_tolerance.replicated:  # passive since: the standby's path
            self.positions.clear()
            return
        me = self.node_id()
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
        self.host.pin_children(tid, members, self.pin_seconds)
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
