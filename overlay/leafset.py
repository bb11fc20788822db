"""The leaf set: the ``size`` live contacts XOR-closest to this node's id (sans-IO).

Contract: :meth:`LeafSet.members` is sorted by distance to ``self_id`` and never holds more
than ``size`` entries nor this node itself. The node refills it from all its live contacts
after a removal (``rebuild``) and keeps it fresh by probing its members and periodically asking
one of them for its own closest nodes (a Kademlia ``find_node`` on this node's id), which is
how a node learns of joins next to it. The leaf set is what makes the last hop of a route
correct and where replicas are later placed.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable

from overlay.nodeinfo import NodeInfo


class LeafSet:
    """The ``size`` nearest contacts by XOR distance."""

    def __init__(self, self_id: int, size: int) -> None:
        if size < 1:
            raise ValueError("leaf set size must be positive")
        self.self_id = self_id
        self.size = size
        self._members: list[NodeInfo] = []

    def offer(self, info: NodeInfo) -> bool:
        """Consider a newly live contact; True if it entered the leaf set."""
        if info.id == self.self_id or any(m.id == info.id for m in self._members):
            return False
        me = self.self_id
        if len(self._members) >= self.size and (info.id ^ me) >= (self._members[-1].id ^ me):
            return False
        self._members.append(info)
        self._members.sort(key=lambda n: n.id ^ me)
        del self._members[self.size :]
        return True

    def remove(self, node_id: int) -> bool:
        before = len(self._members)
        self._members = [m for m in self._members if m.id != node_id]
        return len(self._members) != before

    def rebuild(self, candidates: Iterable[NodeInfo]) -> None:
        me = self.self_id
        pool = {c.id: c for c in candidates if c.id != me}
        self._members = heapq.nsmallest(self.size, pool.values(), key=lambda n: n.id ^ me)

    def members(self) -> list[NodeInfo]:
        return list(self._members)

    def __contains__(self, node_id: int) -> bool:
        return any(m.id == node_id for m in self._members)

    def __len__(self) -> int:
        return len(self._members)
