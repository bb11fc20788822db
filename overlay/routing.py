"""Pastry-style next-hop choice over the contacts a node knows (sans-IO).

Contract: :meth:`PrefixTable.next_hop` returns a contact strictly XOR-closer to ``key`` than
this node, or ``None`` when this node knows no closer live contact (it is the root). Because
every hop strictly decreases the XOR distance, a route can never loop, even while tables
disagree during churn.

Routing table. Contacts are grouped into slots ``(row, column)``: a contact sharing exactly
``row`` leading hex digits with this node, whose digit ``row`` is ``column`` (Pastry's table,
b = 4). Toward a key sharing ``p`` digits with this node the next hop is the *designated* entry
of slot ``(p, key[p])`` — it corrects one digit, so paths take about ⌈log₁₆ N⌉ hops. The
designated entry is the member with the lowest rendezvous score ``xxh64(self_id XOR member)``:
deterministic for this node (all keys with that prefix use the same entry, so the union of
paths toward a key is a tree), yet effectively a uniform random pick that differs from node to
node, so a slot's members share the children evenly and fan-in stays bounded (≈ 15 per level)
instead of forming a star. (Choosing the XOR-closest member instead is skewed: members alone
in a large subtree would collect most children.) A full slot keeps its ``slot_capacity`` lowest
scores. When the slot is empty the fallback is the known contact XOR-closest to the key among
those closer than this node (the leaf-set step at the end of a route).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import xxhash

from overlay.ids import DIGITS, ID_BYTES, digit, shared_prefix_digits
from overlay.nodeinfo import NodeInfo


def rendezvous(a: int, b: int) -> int:
    """Pseudo-random, symmetric, deterministic score of the pair ``(a, b)``."""
    return xxhash.xxh64_intdigest((a ^ b).to_bytes(ID_BYTES, "big"))


class PrefixTable:
    """Live contacts by prefix slot, each slot with a cached designated entry."""

    def __init__(self, self_id: int, slot_capacity: int = 3) -> None:
        if slot_capacity < 1:
            raise ValueError("slot capacity must be positive")
        self.self_id = self_id
        self.slot_capacity = slot_capacity
        self._slots: dict[tuple[int, int], dict[int, NodeInfo]] = {}
        self._designated: dict[tuple[int, int], NodeInfo] = {}
        self._all: dict[int, NodeInfo] = {}
        self._score: dict[int, int] = {}

    def score(self, node_id: int) -> int:
        cached = self._score.get(node_id)
        return cached if cached is not None else rendezvous(self.self_id, node_id)

    def slot_of(self, node_id: int) -> tuple[int, int]:
        row = shared_prefix_digits(self.self_id, node_id)
        return (row, digit(node_id, row))

    def add(self, info: NodeInfo) -> tuple[bool, NodeInfo | None]:
        """Insert a live contact. Returns ``(accepted, evicted)``: a full slot keeps its
        ``slot_capacity`` members with the lowest rendezvous scores (the designated entry and
        its backups), which bounds the table to about 15 × capacity × ⌈log₁₆ N⌉ entries."""
        me = self.self_id
        if info.id == me:
            return (False, None)
        slot = self.slot_of(info.id)
        members = self._slots.setdefault(slot, {})
        if info.id in members:
            members[info.id] = info
            self._all[info.id] = info
            if self._designated[slot].id == info.id:
                self._designated[slot] = info
            return (True, None)
        score = self.score(info.id)
        evicted: NodeInfo | None = None
        if len(members) >= self.slot_capacity:
            worst = max(members.values(), key=lambda n: self._score[n.id])
            if self._score[worst.id] < score:
                return (False, None)
            del members[worst.id]
            del self._all[worst.id]
            del self._score[worst.id]
            evicted = worst
        members[info.id] = info
        self._all[info.id] = info
        self._score[info.id] = score
        best = self._designated.get(slot)
        if best is None or evicted is not None or score < self._score[best.id]:
            self._designated[slot] = min(members.values(), key=lambda n: self._score[n.id])
        return (True, evicted)

    def would_accept(self, info: NodeInfo) -> bool:
        """Whether :meth:`add` would keep ``info`` (so second-hand news is worth tracking)."""
        me = self.self_id
        if info.id == me:
            return False
        members = self._slots.get(self.slot_of(info.id))
        if not members or info.id in members or len(members) < self.slot_capacity:
            return True
        score = self.score(info.id)
        return any(score < self._score[n.id] for n in members.values())

    def remove(self, node_id: int) -> None:
        if self._all.pop(node_id, None) is None:
            return
        del self._score[node_id]
        slot = self.slot_of(node_id)
        members = self._slots[slot]
        del members[node_id]
        if not members:
            del self._slots[slot]
            del self._designated[slot]
        elif self._designated[slot].id == node_id:
            self._designated[slot] = min(members.values(), key=lambda n: self._score[n.id])

    def __contains__(self, node_id: int) -> bool:
        return node_id in self._all

    def __len__(self) -> int:
        return len(self._all)

    def __iter__(self) -> Iterator[NodeInfo]:
        return iter(self._all.values())

    def get(self, node_id: int) -> NodeInfo | None:
        return self._all.get(node_id)

    def by_id(self) -> dict[int, NodeInfo]:
        """A copy of ``{id: contact}`` in insertion order (what ``iter`` yields)."""
        return self._all.copy()

    def filled_slots(self) -> set[tuple[int, int]]:
        """The non-empty slots (the slots of all contacts in the table)."""
        return set(self._slots)

    def designated_slots(self) -> list[tuple[int, int]]:
        """The non-empty slots in the order of :meth:`designated`."""
        return list(self._designated)

    def designated(self) -> list[NodeInfo]:
        """One entry per non-empty slot: the contacts worth keeping fresh by probing."""
        return list(self._designated.values())

    def rows(self) -> int:
        """Number of non-empty rows (≈ ⌈log₁₆ N⌉ in a complete table)."""
        return len({row for row, _ in self._slots})

    def next_hop(
        self, key: int, exclude: Iterable[int] = (), extra: Iterable[NodeInfo] = ()
    ) -> NodeInfo | None:
        """Next hop toward ``key`` skipping ids in ``exclude``; ``extra`` (the leaf set) joins
        the fallback candidates."""
        me = self.self_id
        p = shared_prefix_digits(me, key)
        if p == DIGITS:
            return None
        excluded = set(exclude)
        slot = (p, digit(key, p))
        best = self._designated.get(slot)
        if best is not None and best.id not in excluded:
            return best
        if best is not None:  # designated entry excluded: another member of the same slot
            others = [n for n in self._slots[slot].values() if n.id not in excluded]
            if others:
                return min(others, key=lambda n: self._score[n.id])
        best = closest_closer(me, key, self._all.values(), excluded)
        leaf = closest_closer(me, key, extra, excluded)
        if leaf is not None and (best is None or (leaf.id ^ key) < (best.id ^ key)):
            return leaf
        return best


def closest_closer(
    self_id: int, key: int, candidates: Iterable[NodeInfo], exclude: set[int] | None = None
) -> NodeInfo | None:
    """The candidate XOR-closest to ``key`` among those strictly closer than ``self_id``."""
    best: NodeInfo | None = None
    best_d = self_id ^ key
    for c in candidates:
        d = c.id ^ key
        if d < best_d and (not exclude or c.id not in exclude):
            best, best_d = c, d
    return best
