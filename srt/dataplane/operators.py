"""Per-level operators of the combining tree: what each level does with what it merged.

Every level group-by-aggregates (``Snapshot.merge``: associative and commutative, so arrival
order never matters). A :class:`LevelOperator` then decides what a level passes upward
(:meth:`~LevelOperator.level`) and what the master reports (:meth:`~LevelOperator.result`):

* :class:`GroupByOperator` (the default): the whole merged snapshot goes up; the result is the
  snapshot. Always exact.
* :class:`TopKOperator`: the k keys with the largest (or smallest) values, ordered by value, ties by
  the snapshot's hash order (the same total order :meth:`cbt.Snapshot.top` uses, at every
  level). Each level truncates to k **only where that is exact**: a ``max`` aggregate ranked
  largest-first or a ``min`` aggregate ranked smallest-first (a key's final value is its value
  at one child, where the key ranks no lower than it does globally, so a key of the global
  top k always survives its child's cut, ties included). For sums and counts the top k of the
  parts is not the top k of the whole, so by default nothing is truncated below the root and
  the root takes the exact top k of the complete aggregate.
  ``approximate=c`` (opt-in, c ≥ 1) lets every level keep only its ``ceil(k*c)`` best keys.
  Error (for non-negative values): a reported value is never above the true one; a key loses
  at most, at each node that cut it, that node's cut-off value (the ``ceil(k*c)``-th value
  there), so a key whose true value exceeds the k-th value by more than the sum of the
  cut-offs on the paths is still reported - exact whenever no node cuts a key of the global
  top k (likely once c·k covers each subtree's heavy hitters).

The classes are named ``...Operator`` because ``cbt.TopK`` is something else: an aggregator
(per key, the k heaviest items), not a rule for what a tree level passes upward.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from cbt import Snapshot
from cbt.aggregators import get_aggregator
from cbt.hashing import xxh3_64


class LevelOperator:
    """Contract: ``merge`` combines two snapshots of one epoch (commutative, associative);
    ``level`` maps a level's merged snapshot to what it sends upward (the root applies it
    too); ``result`` maps the root's snapshot to what the master reports. The base class is
    the exact group-by-aggregate."""

    name = "group_by"

    def merge(self, acc: Snapshot | None, snap: Snapshot) -> Snapshot:
        return snap if acc is None else acc.merge(snap)

    def level(self, snap: Snapshot) -> Snapshot:
        return snap

    def result(self, snap: Snapshot) -> Any:
        return snap

    def describe(self) -> dict:
        return {"operator": self.name}


class GroupByOperator(LevelOperator):
    """Group-by-aggregate at every level; the master's result is the whole snapshot."""


def ranked(snap: Snapshot, *, largest: bool = True) -> np.ndarray:
    """Indices of ``snap``'s entries by finalized value (largest or smallest first), ties in
    hash order - a total order that every level and :meth:`Snapshot.top` agree on."""
    n = len(snap)
    vals = snap.values_column
    if vals.dtype != object:
        key = (~vals if vals.dtype.kind in "iu" else -vals) if largest else vals
        return np.argsort(key, kind="stable")
    fin = snap.values()
    return np.asarray(sorted(range(n), key=fin.__getitem__, reverse=largest), dtype=np.intp)


def select(snap: Snapshot, idx: np.ndarray) -> Snapshot:
    """The sub-snapshot of the entries at ``idx`` (kept in hash order)."""
    idx = np.sort(np.asarray(idx, dtype=np.intp))
    hash_fn = getattr(snap, "_hash_fn", xxh3_64)
    return Snapshot(
        snap.agg, snap.hashes[idx], snap.encoded_keys[idx], snap.values_column[idx], hash_fn
    )


class TopKOperator(LevelOperator):
    """The k best keys by aggregated value (see the module docstring for exactness).

    ``largest``: rank largest-first (False: smallest-first). ``approximate``: None (exact,
    default) or a factor c ≥ 1 letting levels keep ``ceil(k*c)`` keys where cutting is not
    exact."""

    name = "top_k"

    def __init__(self, k: int, *, largest: bool = True, approximate: float | None = None) -> None:
        if k < 1:
            raise ValueError("k must be >= 1")
        if approximate is not None and not approximate >= 1:
            raise ValueError("the approximate factor c must be >= 1")
        self.k = k
        self.largest = largest
        self.approximate = approximate

    def exact_cut(self, snap: Snapshot) -> bool:
        """True if truncating ``snap``'s aggregate to k at a level is exact."""
        agg = snap.agg.name
        return (agg == "max" and self.largest) or (agg == "min" and not self.largest)

    def level(self, snap: Snapshot) -> Snapshot:
        if self.exact_cut(snap):
            keep = self.k
        elif self.approximate is not None:
            keep = math.ceil(self.k * self.approximate)
        else:
            return snap
        if len(snap) <= keep:
            return snap
        return select(snap, ranked(snap, largest=self.largest)[:keep])

    def result(self, snap: Snapshot) -> list[tuple[Any, Any]]:
        """The top k as ``[(key, value), ...]``, best first."""
        idx = ranked(snap, largest=self.largest)[: self.k]
        keys = snap.encoded_keys[idx].decode().tolist()
        return list(zip(keys, snap.agg.finalize_column(snap.values_column[idx]), strict=True))

    def describe(self) -> dict:
        return {
            "operator": self.name,
            "k": self.k,
            "largest": self.largest,
            "approximate": self.approximate,
        }


def level_operator_for(
    aggregator: Any,
    *,
    top_k: int | None = None,
    largest: bool = True,
    approximate: float | None = None,
) -> LevelOperator:
    """The operator a job's trees use: :class:`TopKOperator` when ``top_k`` is given,
    otherwise the exact :class:`GroupByOperator`. ``aggregator`` (a ``cbt.Aggregator`` or its
    name) is checked to be registered; :class:`TopKOperator` itself decides per snapshot
    whether a level may cut (max/min)."""
    get_aggregator(aggregator)
    if top_k is None:
        return GroupByOperator()
    return TopKOperator(top_k, largest=largest, approximate=approximate)
