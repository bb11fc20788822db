"""Epoch results held by a job master (the root of one or more of the job's trees).

Contract: :meth:`ResultStore.put` records the barrier's result for (tree, epoch) — each epoch
once. A snapshot that reaches the root after its epoch was already emitted (a child that joined
or moved mid-epoch) is merged into that epoch with :meth:`add_late`, at most once per origin
name, so the stored result stays exact and the epoch is marked ``updated``; a late
contribution that arrives before the epoch's barrier result is held and merged into it.
:meth:`export`/:meth:`absorb` move a tree's results to a new master on hand-over (absorbing
merges by epoch, never double-counts an epoch it already has from the same origin).

**Bounds** (issue 13, finding 5: a unique-key flood grew a master without bound):

* at most ``retention`` epochs per tree (the oldest are dropped);
* at most ``budget_bytes`` of *resident* snapshots (``Snapshot.memory_bytes()``, summed over
  the job's trees, late contributions waiting for their epoch included). Past it,
  :meth:`spill_candidates` names the oldest resident epochs; the caller encodes each
  (``Snapshot.to_bytes()``) and writes it with :meth:`spill_write` off the event loop, then
  commits with :meth:`spilled`, which releases the resident copy. A spilled epoch stays
  answerable: :meth:`get` reports it as spilled and :meth:`load` reads it back (a thread);
* at most ``spill_budget_bytes`` on disk (:class:`~agent.runtime.result_spill.ResultSpill`);
  past it the oldest spilled epochs are dropped. Without a spill (nor a ``spill_factory``
  opening one when first needed), epochs past the memory budget are dropped instead.

An epoch dropped by any bound is remembered as *gone* with its reason (:meth:`gone`), so the
results API answers 410 naming the bound (the lake still has it), never a silent 404.
Snapshots handed out by :meth:`get` are ``lean()`` copies: iterating them (the results API,
the lake writer) never grows what the store holds. :meth:`close` frees everything (a stopped
job), spill files included.
"""

from __future__ import annotations

import logging
from collections import Counter, OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from agent.runtime.result_spill import ResultSpill
from cbt import Snapshot

log = logging.getLogger(__name__)

RETENTION = "retention"
MEMORY_BUDGET = "memory budget"
SPILL_BUDGET = "spill budget"
SPILL_FAILED = "spill file unreadable"


@dataclass
class EpochResult:
    """One tree's result for one epoch at its master. ``snapshot`` is None while the epoch
    is spilled to disk (``spilled`` holds its size there; :meth:`ResultStore.load`)."""

    snapshot: Snapshot | None
    completed_at: float
    late_names: set[tuple[int, int]] = field(default_factory=set)  # (origin node, epoch)
    nbytes: int = 0  # resident bytes accounted for this epoch
    spilled: int | None = None
    spilling: bool = False

    @property
    def updated(self) -> bool:
        return bool(self.late_names)


class ResultStore:
    """Per job on one agent: tree id → epoch → :class:`EpochResult` (module contract)."""

    def __init__(
        self,
        retention: int = 256,
        *,
        budget_bytes: int | None = None,
        spill: ResultSpill | None = None,
        spill_budget_bytes: int | None = None,
        spill_factory: Callable[[], ResultSpill] | None = None,
        job: str = "",
    ) -> None:
        self.retention = retention
        self.budget_bytes = budget_bytes
        self.spill = spill
        # opens the spill directory when first needed (most agents never master a job)
        self._spill_factory = spill_factory
        self._can_spill = spill is not None or spill_factory is not None
        self.spill_budget_bytes = spill_budget_bytes
        self.job = job
        self.resident_bytes = 0
        self.dropped: Counter[str] = Counter()  # epochs dropped, by reason
        self._trees: dict[int, OrderedDict[int, EpochResult]] = {}
        # Late contributions that reached this master before its own barrier emitted their
        # epoch (an inner node emitted early): held here and merged into the barrier's result.
        self._early: dict[tuple[int, int], tuple[Snapshot, set[tuple[int, int]]]] = {}
        self._gone: dict[int, tuple[int, str]] = {}  # tree → (newest epoch dropped, reason)

    # ---- recording ---------------------------------------------------------------------------

    def put(self, tree: int, epoch: int, snap: Snapshot, now: float) -> bool:
        """Record the barrier's result for (tree, epoch); False if it was recorded before."""
        epochs = self._trees.setdefault(tree, OrderedDict())
        if epoch in epochs:
            return False
        late_names: set[tuple[int, int]] = set()
        early = self._early.pop((tree, epoch), None)
        if early is not None:
            self.resident_bytes -= early[0].memory_bytes()
            snap = snap.merge(early[0])
            late_names = early[1]
        snap = snap.lean()
        in_order = not epochs or next(reversed(epochs)) < epoch
        size = snap.memory_bytes()
        epochs[epoch] = EpochResult(snap, now, late_names, size)
        self.resident_bytes += size
        if not in_order:
            epochs = self._trees[tree] = OrderedDict(sorted(epochs.items()))
        while len(epochs) > self.retention:
            old, _ = next(iter(epochs.items()))
            self._drop(tree, old, RETENTION)
        if not self._can_spill:
            self._drop_over_budget()
        return True

    def add_late(self, tree: int, epoch: int, origin: int, snap: Snapshot, now: float) -> bool:
        """Fold a late contribution named (origin, epoch) into the epoch; False if already
        folded. If the barrier has not emitted the epoch here yet, the contribution waits for
        it (:meth:`put` merges it in). A late contribution to a spilled epoch reads the epoch
        back (a rare, bounded cost: one snapshot decode) and makes it resident again."""
        epochs = self._trees.setdefault(tree, OrderedDict())
        result = epochs.get(epoch)
        if result is None:
            held = self._early.get((tree, epoch))
            if held is None:
                snap = snap.lean()
                self._early[(tree, epoch)] = (snap, {(origin, epoch)})
                self.resident_bytes += snap.memory_bytes()
                while len(self._early) > self.retention * 4:
                    dropped = self._early.pop(next(iter(self._early)))
                    self.resident_bytes -= dropped[0].memory_bytes()
                return True
            if (origin, epoch) in held[1]:
                return False
            merged = held[0].merge(snap).lean()
            self.resident_bytes += merged.memory_bytes() - held[0].memory_bytes()
            self._early[(tree, epoch)] = (merged, held[1] | {(origin, epoch)})
            return True
        if (origin, epoch) in result.late_names:
            return False
        current = self._resident(tree, epoch, result)
        if current is None:
            return False  # the spilled copy was unreadable: the epoch is gone (and said so)
        self._replace(result, current.merge(snap))
        result.late_names.add((origin, epoch))
        return True

    def _resident(self, tree: int, epoch: int, result: EpochResult) -> Snapshot | None:
        """The epoch's snapshot, read back into memory if it was spilled."""
        if result.snapshot is not None:
            return result.snapshot
        try:
            snap = self.load(tree, epoch)
        except Exception as exc:
            log.warning("job %s: spilled epoch %d unreadable (%r): dropped", self.job, epoch, exc)
            self._drop(tree, epoch, SPILL_FAILED)
            return None
        self._unspill(tree, epoch, result)
        return snap

    def _replace(self, result: EpochResult, snap: Snapshot) -> None:
        snap = snap.lean()
        size = snap.memory_bytes()
        self.resident_bytes += size - result.nbytes
        result.snapshot, result.nbytes, result.spilling = snap, size, False
        if not self._can_spill:
            self._drop_over_budget()

    # ---- reading -----------------------------------------------------------------------------

    def get(self, tree: int, epoch: int) -> EpochResult | None:
        """The epoch's result (a copy; its snapshot a ``lean()`` one, None while spilled)."""
        result = self._trees.get(tree, {}).get(epoch)
        if result is None:
            return None
        snap = result.snapshot.lean() if result.snapshot is not None else None
        return replace(result, snapshot=snap, late_names=set(result.late_names))

    def load(self, tree: int, epoch: int) -> Snapshot:
        """A spilled epoch's snapshot read back (file I/O and decoding: call it in a thread).
        Raises ``OSError`` / ``SnapshotError`` if the file is gone or damaged."""
        if self.spill is None:
            raise FileNotFoundError(f"epoch {epoch} is not spilled")
        return Snapshot.from_bytes(self.spill.read(tree, epoch))

    def gone(self, tree: int, epoch: int) -> str | None:
        """Why ``epoch`` is no longer held (it was, and a bound dropped it), or None."""
        if epoch in self._trees.get(tree, {}):
            return None
        newest, reason = self._gone.get(tree, (-1, ""))
        return reason if epoch <= newest else None

    def epochs(self, tree: int) -> list[int]:
        return list(self._trees.get(tree, {}))

    def trees(self) -> list[int]:
        return list(self._trees)

    def latest(self, tree: int) -> int | None:
        epochs = self._trees.get(tree)
        return next(reversed(epochs)) if epochs else None

    # ---- the byte budget ---------------------------------------------------------------------

    def over_budget(self) -> bool:
        return self.budget_bytes is not None and self.resident_bytes > self.budget_bytes

    def spill_candidates(self) -> list[tuple[int, int, Snapshot]]:
        """The oldest resident epochs whose release brings the store within its budget
        (marked ``spilling``); the caller spills each and commits it with :meth:`spilled`."""
        if self.budget_bytes is None or not self._can_spill:
            return []
        if self.spill is None:
            assert self._spill_factory is not None
            self.spill = self._spill_factory()
        excess = self.resident_bytes - self.budget_bytes - self._spilling_bytes()
        out = []
        for tree, epoch, result in self._oldest_first():
            if excess <= 0:
                break
            if result.snapshot is None or result.spilling:
                continue
            result.spilling = True
            out.append((tree, epoch, result.snapshot))
            excess -= result.nbytes
        return out

    def spill_write(self, tree: int, epoch: int, snap: Snapshot) -> int:
        """Encode and write one epoch (thread-safe; call it off the event loop)."""
        assert self.spill is not None
        return self.spill.write(tree, epoch, snap.to_bytes())

    def spilled(self, tree: int, epoch: int, snap: Snapshot, size: int | None) -> None:
        """Commit a spill written by :meth:`spill_write` (``size`` its bytes; None: the write
        failed): the resident copy is released unless the epoch changed (a late merge) or
        left meanwhile, in which case the file is deleted again."""
        result = self._trees.get(tree, {}).get(epoch)
        if result is not None:
            result.spilling = False
        if size is None:
            return
        assert self.spill is not None
        if result is None or result.snapshot is not snap:
            self.spill.delete(tree, epoch)
            return
        self.resident_bytes -= result.nbytes
        result.snapshot, result.nbytes, result.spilled = None, 0, size
        if self.spill_budget_bytes is not None:
            for old_tree, old_epoch, old in self._oldest_first():
                if self.spill.bytes_on_disk <= self.spill_budget_bytes:
                    break
                if old.snapshot is None:
                    self._drop(old_tree, old_epoch, SPILL_BUDGET)

    def _spilling_bytes(self) -> int:
        return sum(r.nbytes for _, _, r in self._oldest_first() if r.spilling)

    def _oldest_first(self) -> list[tuple[int, int, EpochResult]]:
        entries = [(t, e, r) for t, epochs in self._trees.items() for e, r in epochs.items()]
        entries.sort(key=lambda x: (x[2].completed_at, x[1]))
        return entries

    def _drop_over_budget(self) -> None:
        """No spill directory: drop the oldest epochs past the memory budget (said so)."""
        if self.budget_bytes is None:
            return
        for tree, epoch, _ in self._oldest_first():
            if self.resident_bytes <= self.budget_bytes:
                break
            self._drop(tree, epoch, MEMORY_BUDGET)

    def _unspill(self, tree: int, epoch: int, result: EpochResult) -> None:
        result.spilled = None
        if self.spill is not None:
            self.spill.delete(tree, epoch)

    def _drop(self, tree: int, epoch: int, reason: str) -> None:
        result = self._trees.get(tree, {}).pop(epoch, None)
        if result is None:
            return
        self.resident_bytes -= result.nbytes
        if result.spilled is not None and self.spill is not None:
            self.spill.delete(tree, epoch)
        newest = self._gone.get(tree, (-1, ""))[0]
        if epoch >= newest:
            self._gone[tree] = (epoch, reason)
        self.dropped[reason] += 1
        if reason != RETENTION:
            log.warning(
                "job %s: epoch %d of tree %x dropped from the master (%s); the lake has it",
                self.job,
                epoch,
                tree,
                reason,
            )

    def stats(self) -> dict[str, Any]:
        """Bytes and epochs held, against their bounds (the job's status shows these)."""
        entries = [r for epochs in self._trees.values() for r in epochs.values()]
        return {
            "epochs": len(entries),
            "resident_bytes": self.resident_bytes,
            "budget_bytes": self.budget_bytes,
            "spilled_epochs": sum(1 for r in entries if r.snapshot is None),
            "spill_bytes": self.spill.bytes_on_disk if self.spill is not None else 0,
            "spill_budget_bytes": self.spill_budget_bytes,
            "early": len(self._early),
            "dropped": dict(self.dropped),
        }

    # ---- hand-over and release ---------------------------------------------------------------

    def drop_tree(self, tree: int) -> None:
        for epoch, result in self._trees.pop(tree, {}).items():
            self.resident_bytes -= result.nbytes
            if result.spilled is not None and self.spill is not None:
                self.spill.delete(tree, epoch)
        for key in [k for k in self._early if k[0] == tree]:
            self.resident_bytes -= self._early.pop(key)[0].memory_bytes()

    def close(self) -> None:
        """Free everything (a stopped job): results, held contributions, spill files."""
        self._trees.clear()
        self._early.clear()
        self.resident_bytes = 0
        if self.spill is not None:
            self.spill.close()

    def export_plan(self, tree: int) -> list[tuple[dict[str, Any], Callable[[], bytes]]]:
        """The tree's results as (wire item without snapshot, its bytes' producer); the
        producers encode or read files, so :meth:`encode_plan` runs them in a thread."""
        plan: list[tuple[dict[str, Any], Callable[[], bytes]]] = []
        for epoch, r in self._trees.get(tree, {}).items():
            item = {"epoch": epoch, "completed_at": r.completed_at,
                    "late": [list(n) for n in sorted(r.late_names)]}  # fmt: skip
            if r.snapshot is not None:
                plan.append((item, r.snapshot.to_bytes))
            else:
                spill = self.spill
                assert spill is not None
                plan.append((item, lambda e=epoch, s=spill: s.read(tree, e)))
        for (t, epoch), (snap, names) in self._early.items():
            if t == tree:
                item = {"epoch": epoch, "late": [list(n) for n in sorted(names)], "early": True}
                plan.append((item, snap.to_bytes))
        return plan

    @staticmethod
    def encode_plan(plan: list[tuple[dict[str, Any], Callable[[], bytes]]]) -> list[dict[str, Any]]:
        """Run an :meth:`export_plan` (items whose spill file vanished are skipped)."""
        out = []
        for item, produce in plan:
            try:
                out.append(dict(item, snapshot=produce()))
            except OSError as exc:
                log.warning("hand-over: epoch %s unreadable (%r); not sent", item["epoch"], exc)
        return out

    def export(self, tree: int) -> list[dict[str, Any]]:
        """The tree's results as wire items (snapshot bytes are checksummed)."""
        return self.encode_plan(self.export_plan(tree))

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
            if item.get("early") and self._trees.get(tree, {}).get(epoch) is None:
                # still waiting for its barrier result: keep waiting here
                held = self._early.get((tree, epoch))
                if held is None:
                    self._early[(tree, epoch)] = (snap, late)
                    self.resident_bytes += snap.memory_bytes()
                elif not late & held[1]:
                    merged = held[0].merge(snap).lean()
                    self.resident_bytes += merged.memory_bytes() - held[0].memory_bytes()
                    self._early[(tree, epoch)] = (merged, held[1] | late)
                continue
            mine = self._trees.get(tree, {}).get(epoch)
            if mine is None:
                if self.put(tree, epoch, snap, when):
                    stored = self._trees[tree].get(epoch)  # None if retention dropped it
                    if stored is not None:
                        stored.late_names |= late
                taken += 1
            else:  # both masters saw parts of this epoch during the switch
                current = self._resident(tree, epoch, mine)
                if current is not None:
                    self._replace(mine, current.merge(snap))
                    mine.late_names |= late
                taken += 1
        return taken
