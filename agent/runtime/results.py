"""Epoch results held by a job master (the root of one or more of the job's trees).

Contract: :meth:`ResultStore.put` records the barrier's result for (tree, epoch) — each epoch
once. A snapshot that reaches the root after its epoch was already emitted (a child that joined
or moved mid-epoch) is merged into that epoch with :meth:`add_late`, at most once per origin
name, so the stored result stays exact and the epoch is marked ``updated``; a late
contribution that arrives before the epoch's barrier result is held and merged into it. The newest
``retention`` epochs per tree are kept. :meth:`export`/:meth:`absorb` move a tree's results to
a new master on hand-over (absorbing merges by epoch, never double-counts an epoch it already
has from the same origin).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from cbt import Snapshot


@dataclass
class EpochResult:
    """One tree's result for one epoch at its master."""

    snapshot: Snapshot
    completed_at: float
    late_names: set[tuple[int, int]] = field(default_factory=set)  # (origin node, epoch)

    @property
    def updated(self) -> bool:
        return bool(self.late_names)


class ResultStore:
    """Per job on one agent: tree id → epoch → :class:`EpochResult` (module contract)."""

    def __init__(self, retention: int = 256) -> None:
        self.retention = retention
        self._trees: dict[int, OrderedDict[int, EpochResult]] = {}
        # Late contributions that reached this master before its own barrier emitted their
        # epoch (an inner node emitted early): held here and merged into the barrier's result.
        self._early: dict[tuple[int, int], tuple[Snapshot, set[tuple[int, int]]]] = {}

    def put(self, tree: int, epoch: int, snap: Snapshot, now: float) -> bool:
        """Record the barrier's result for (tree, epoch); False if it was recorded before."""
        epochs = self._trees.setdefault(tree, OrderedDict())
        if epoch in epochs:
            return False
        late_names: set[tuple[int, int]] = set()
        early = self._early.pop((tree, epoch), None)
        if early is not None:
            snap = snap.merge(early[0])
            late_names = early[1]
        in_order = not epochs or next(reversed(epochs)) < epoch
        epochs[epoch] = EpochResult(snap, now, late_names)
        if not in_order:
            epochs = self._trees[tree] = OrderedDict(sorted(epochs.items()))
        while len(epochs) > self.retention:
            epochs.popitem(last=False)
        return True

    def add_late(self, tree: int, epoch: int, origin: int, snap: Snapshot, now: float) -> bool:
        """Fold a late contribution named (origin, epoch) into the epoch; False if already
        folded. If the barrier has not emitted the epoch here yet, the contribution waits for
        it (:meth:`put` merges it in)."""
        epochs = self._trees.setdefault(tree, OrderedDict())
        result = epochs.get(epoch)
        if result is None:
            held = self._early.get((tree, epoch))
            if held is None:
                self._early[(tree, epoch)] = (snap, {(origin, epoch)})
                while len(self._early) > self.retention * 4:
                    self._early.pop(next(iter(self._early)))
                return True
            if (origin, epoch) in held[1]:
                return False
            self._early[(tree, epoch)] = (held[0].merge(snap), held[1] | {(origin, epoch)})
            return True
        if (origin, epoch) in result.late_names:
            return False
        result.snapshot = result.snapshot.merge(snap)
        result.late_names.add((origin, epoch))
        return True

    def get(self, tree: int, epoch: int) -> EpochResult | None:
        return self._trees.get(tree, {}).get(epoch)

    def epochs(self, tree: int) -> list[int]:
        return list(self._trees.get(tree, {}))

    def trees(self) -> list[int]:
        return list(self._trees)

    def latest(self, tree: int) -> int | None:
        epochs = self._trees.get(tree)
        return next(reversed(epochs)) if epochs else None

    def drop_tree(self, tree: int) -> None:
        self._trees.pop(tree, None)
        for key in [k for k in self._early if k[0] == tree]:
            del self._early[key]

    def export(self, tree: int) -> list[dict[str, Any]]:
        """The tree's results as wire items (snapshot bytes are checksummed)."""
        return [
            {
                "epoch": epoch,
                "snapshot": r.snapshot.to_bytes(),
                "completed_at": r.completed_at,
                "late": [list(n) for n in sorted(r.late_names)],
            }
            for epoch, r in self._trees.get(tree, {}).items()
        ] + [
            {
                "epoch": epoch,
                "snapshot": snap.to_bytes(),
                "late": [list(n) for n in sorted(names)],
                "early": True,
            }
            for (t, epoch), (snap, names) in self._early.items()
            if t == tree
        ]

    def absorb(
        self,
        tree: int,
        items: list[dict[str, Any]],
        check: Callable[[int, Snapshot], Snapshot] | None = None,
    ) -> int:
        """Merge exported results (from a previous master); returns epochs taken over. Raises
        ``ValueError``/``SnapshotError`` on a malformed item, or whatever ``check(epoch,
        snap)`` (which returns the snapshot to keep) raises, before changing anything."""
        parsed = []
        for item in items:
            epoch = item.get("epoch") if isinstance(item, dict) else None
            if type(epoch) is not int:
                raise ValueError("hand-over item without an integer epoch")
            snap = Snapshot.from_bytes(item["snapshot"])
            if check is not None:
                snap = check(epoch, snap)
            late = {(int(a), int(b)) for a, b in item.get("late", [])}
            parsed.append((epoch, snap, float(item.get("completed_at", 0.0)), late, item))
        taken = 0
        for epoch, snap, when, late, item in parsed:
            if item.get("early") and self.get(tree, epoch) is None:
                # still waiting for its barrier result: keep waiting here
                held = self._early.get((tree, epoch))
                if held is None:
                    self._early[(tree, epoch)] = (snap, late)
                elif not late & held[1]:
                    self._early[(tree, epoch)] = (held[0].merge(snap), held[1] | late)
                continue
            mine = self.get(tree, epoch)
            if mine is None:
                self.put(tree, epoch, snap, when)
                self._trees[tree][epoch].late_names |= late
                taken += 1
            else:  # both masters saw parts of this epoch during the switch
                mine.snapshot = mine.snapshot.merge(snap)
                mine.late_names |= late
                taken += 1
        return taken
