"""The contacts one node routes through: its prefix table and leaf set, kept together (sans-IO).

Contract: :class:`Neighbourhood` holds only live contacts (a suspected or failed node is
retired from both structures at once) and answers the questions the node, its router and its
upkeep ask of them: the next hop toward a key, all contacts, the neighbours of a key, whether a
node is worth admitting, which contacts to monitor, the network size estimate and the routing
table's empty slots. It performs no I/O and keeps no clock: admitting or retiring a node says
what changed and the caller (the failure detector) tells kademlia's k-buckets.

**Suspects are the last resort before this node calls itself the root** (Pastry's leaf-set
safety): a contact retired on *suspicion* (``retire(..., suspected=True)``: missed probes, not
yet declared failed) is kept aside until it is admitted again or retired for good. When no
live contact is closer to a key, :meth:`Neighbourhood.next_hop` returns the closest closer
suspect instead of ``None``: the message tries it (a dead one costs a timeout, and the router
then excludes it) rather than this node taking the key's root on a view that suspicion
thinned. On an overloaded host every peer's replies come late at once; without this, half the
sampled agents of a 1,280-agent run believed they were a job's root within a minute.
"""

from __future__ import annotations

import random
from collections.abc import Container, Iterable

from overlay import ids
from overlay.leafset import LeafSet
from overlay.nodeinfo import NodeInfo
from overlay.routing import PrefixTable, closest_closer


class Neighbourhood:
    """Prefix table plus leaf set of the node ``self_id``."""

    def __init__(self, self_id: int, slot_capacity: int, leaf_set_size: int) -> None:
        self.self_id = self_id
        self.table = PrefixTable(self_id, slot_capacity)
        self.leaves = LeafSet(self_id, leaf_set_size)
        #: grows with every admission and retirement: whether the neighbourhood changed
        #: since a caller last looked (the refresh periods of overlay/trickle.py)
        self.changes = 0
        #: contacts retired on suspicion, not (yet) failed: the last resort of next_hop
        self.suspects: dict[int, NodeInfo] = {}

    # ---- queries -------------------------------------------------------------------------------

    def contacts(self) -> list[NodeInfo]:
        """All live contacts: routing table plus leaf set."""
        out = self.table.by_id()
        for n in self.leaves.members():
            out.setdefault(n.id, n)
        return list(out.values())

    def get(self, node_id: int) -> NodeInfo | None:
        """The contact ``node_id`` if it is in the table or the leaf set."""
        known = self.table.get(node_id)
        if known is not None:
            return known
        for n in self.leaves.members():
            if n.id == node_id:
                return n
        return None

    def next_hop(self, key: int, exclude: Iterable[int] = ()) -> NodeInfo | None:
        """Where to send a message for ``key``; ``None`` means this node is the root: no
        live contact and no suspected one is closer (module contract)."""
        excluded = set(exclude)
        hop = self.table.next_hop(key, excluded, self.leaves.members())
        if hop is None and self.suspects:
            return closest_closer(self.self_id, key, self.suspects.values(), excluded)
        return hop

    def neighbours_of(self, key: int, exclude: int, k: int) -> list[NodeInfo]:
        """The ``k`` contacts XOR-closest to ``key``, leaving out ``exclude`` (the asker)."""
        pool = [n for n in self.contacts() if n.id != exclude]
        pool.sort(key=lambda n: n.id ^ key)
        return pool[:k]

    def watched(self) -> list[NodeInfo]:
        """The contacts worth monitoring: the leaf set and the designated table entries."""
        chosen = {n.id: n for n in self.leaves.members()}
        for n in self.table.designated():
            chosen.setdefault(n.id, n)
        return list(chosen.values())

    def size_estimate(self) -> int:
        """Network size estimated from the leaf set's spread: k nodes within XOR distance d
        means about k·2¹⁶⁰/d nodes in all."""
        members = self.leaves.members()
        if not members:
            return 1
        spread = max(members[-1].id ^ self.self_id, 1)
        return max(len(members) + 1, (len(members) << ids.ID_BITS) // spread)

    def depth(self) -> int:
        """Rows worth filling: those whose slots expect at least ¼ node (16^(row+1) ≤ 4N).
        Deeper slots are covered by the leaf set."""
        n4 = 4 * self.size_estimate()
        rows = 1
        while rows < ids.DIGITS and 16 ** (rows + 1) <= n4:
            rows += 1
        return rows

    def empty_slots(self) -> list[tuple[int, int]]:
        """Slots ``(row, col)`` of the rows worth filling that no contact occupies."""
        me = self.self_id
        filled = self.table.filled_slots()  # == slots of all contacts (table ∪ leaf set)
        filled.update(self.table.slot_of(n.id) for n in self.leaves.members())
        empty = []
        for row in range(self.depth()):
            mine = ids.digit(me, row)
            empty.extend(
                (row, col) for col in range(16) if col != mine and (row, col) not in filled
            )
        return empty

    def slot_target(self, row: int, col: int, rng: random.Random) -> int:
        """A random id in this node's routing-table slot ``(row, col)``."""
        shift = ids.ID_BITS - ids.DIGIT_BITS * (row + 1)
        prefix = (self.self_id >> (shift + ids.DIGIT_BITS)) << ids.DIGIT_BITS | col
        return (prefix << shift) | rng.getrandbits(shift)

    # ---- changes -------------------------------------------------------------------------------

    def wanted(self, info: NodeInfo, direct: bool, tombstones: Container[int]) -> bool:
        """Would ``info`` enter the leaf set or the table? Second-hand news of a tombstoned
        node never does."""
        me = self.self_id
        if info.id == me or (not direct and info.id in tombstones):
            return False
        members = self.leaves.members()
        if len(members) < self.leaves.size or (info.id ^ me) < (members[-1].id ^ me):
            return True
        return self.table.would_accept(info)

    def admit(self, info: NodeInfo) -> tuple[bool, NodeInfo | None]:
        """Offer ``info`` to the table and the leaf set. Returns ``(kept, dropped)``: whether
        ``info`` is now a contact, and a contact the table evicted for it that the leaf set
        does not hold either (no longer a contact at all)."""
        self.changes += 1
        self.suspects.pop(info.id, None)
        accepted, evicted = self.table.add(info)
        in_leaves = self.leaves.offer(info) or info.id in self.leaves
        dropped = evicted if evicted is not None and evicted.id not in self.leaves else None
        return (accepted or in_leaves, dropped)

    def retire(self, node_id: int, *, suspected: bool = False) -> None:
        """Take a suspected or failed node out of routing; refill the leaf set if it was in.
        A contact retired on suspicion stays a last-resort hop (module contract)."""
        self.changes += 1
        info = self.get(node_id) if suspected else None
        if info is not None:
            self.suspects[node_id] = info
        elif not suspected:
            self.suspects.pop(node_id, None)
        self.table.remove(node_id)
        if self.leaves.remove(node_id):
            pool = list(self.table)
            pool.extend(self.leaves.members())
            self.leaves.rebuild(pool)
