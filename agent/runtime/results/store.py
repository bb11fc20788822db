"""Epoch results held by a job master (the root of one or more of the job's trees).

Contract: :meth:`ResultStore.put` records the barrier's result for (tree, epoch) — each epoch
once. A snapshot that reaches the root after its epoch was already emitted (a child that joined
or moved mid-epoch) is merged into that epoch with :meth:`add_late`, at most once per origin
name, so the stored result stays exact and the epoch is marked ``updated``; a late
contribution that arrives before the epoch's barrier result is held and merged into it.
:meth:`export`/:meth:`absorb` move a tree's results to a new master on hand-over (absorbing
merges by epoch, never double-counts an epoch it already has from the same origin).

**Bounds** (issue 13, finding 5: a unique-key flood grew a master without bound):

* at most ``max_epochs`` epochs per tree (the oldest are dropped);
* at most ``budget_bytes`` of *resident* snapshots (``Snapshot.memory_bytes()``, summed over
  the job's trees, late contributions waiting for their epoch included). Past it,
  :meth:`spill_candidates` names the oldest resident epochs; the caller encodes each
  (``Snapshot.to_bytes()``) and writes it with :meth:`spill_write` off the event loop, then
  commits with :meth:`spilled`, which releases the resident copy. A spilled epoch stays
  answerable: :meth:`get` reports it as spilled and :meth:`load` reads it back (a thread);
* at most ``spill_budget_bytes`` on disk (:class:`~agent.runtime.results.spill.ResultSpill`);
  past it the oldest spilled epochs are dropped. Without a spill (nor a ``spill_factory``
  opening one when first needed), epochs past the memory budget are dropped instead.

**Lineage and completeness** (``docs/fault-tolerance.md``). A result records the origins it
covers (``origins``; None when some contributor had no lineage) and the origins the master
expected for it (``expected``, from :class:`agent.runtime.recovery.membership.Membership`). It is
**tentative** while an expected origin is missing (``lacking`` names them, ``coverage`` is the
share covered) and **final** otherwise. A late contribution with lineage is folded only if it
adds origins the epoch does not hold and none it does (:func:`srt.dataplane.lineage.classify`):
a duplicate or an overlap is counted (``lineage`` in :meth:`stats`) and never merged, so a
re-send after any tree change or restart cannot count a record twice. Every fold bumps the
epoch's ``version``: the lake writes each version as a new file, a Spark stream sees it.
**Quality** (:mod:`agent.runtime.results.quality`). A result also keeps how many input records each
covered origin folded into it (``records``, carried by the lineage; merged contributions add
theirs), and a tentative result's ``coverage`` is the *rate-weighted* share of the epoch's
records it includes: the store recomputes it whenever the result changes (stored, folded,
absorbed), from the exact counts and the lacking origins' recent rates - the medians of their
counts in the tree's earlier stored epochs. So the rates move with the stored results (hand-
over, standby replica), nothing else to carry. A final result's coverage is 1.0.
When a master's barrier will never emit an epoch here (it passed it as a child before it
became the master), :meth:`add_late` with ``materialize=True`` makes the held contributions
the epoch's result at once instead of holding them for ever.

**Tentative previews** (PPA; ``docs/fault-tolerance.md``): :meth:`put_preview` stores what a
master's barrier holds for an epoch it has not emitted by the job's tentative deadline (plus
the late contributions held for it, without consuming them), flagged ``preview`` and always
tentative. The barrier's result replaces it whole in :meth:`put` (a new version: it covers
every origin the preview did, and more or the same); late contributions meanwhile are held
as for an epoch not stored yet; :meth:`absorb` drops a preview before taking a hand-over's
result. A preview is display only: never exported (no replica, no hand-over), never in
:meth:`versions` (so never committed).

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
from dataclasses import replace
from typing import Any

from agent.runtime.results import quality
from agent.runtime.results.epoch_result import (
    EPOCH_LIMIT,
    MEMORY_BUDGET,
    SPILL_BUDGET,
    SPILL_FAILED,
    EpochResult,
    HeldContributions,
    given_up_of,
    held_item,
    parse_item,
    result_item,
)
from agent.runtime.results.spill import ResultSpill
from cbt import Snapshot
from srt.dataplane.lineage import (
    NEW,
    Lineage,
    classify,
    counted,
    covered,
    describe,
    merge_records,
    plain,
    records_of,
)

log = logging.getLogger(__name__)


class ResultStore:
    """Per job on one agent: tree id → epoch → :class:`EpochResult` (module contract)."""

    def __init__(
        self,
        max_epochs: int = 256,
        *,
        budget_bytes: int | None = None,
        spill: ResultSpill | None = None,
        spill_budget_bytes: int | None = None,
        spill_factory: Callable[[], ResultSpill] | None = None,
        job: str = "",
    ) -> None:
        self.max_epochs = max_epochs
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
        self._early: dict[tuple[int, int], HeldContributions] = {}
        self.lineage: Counter[str] = Counter()  # late folds refused by lineage, by kind
        self._gone: dict[int, tuple[int, str]] = {}  # tree → (newest epoch dropped, reason)
        #: the master's fencing term for a tree: stamped on every version it produces
        self.term_of: Callable[[int], int] = lambda tree: 0
        #: the job's fault-tolerance policy now (its label), stamped on each version
        self.policy_of: Callable[[], str] = lambda: "passive"
        #: the origins given up on for an epoch (retired before it): stamped likewise
        self.given_up_for: Callable[[int], Lineage] = lambda epoch: frozenset()

    # ---- recording ---------------------------------------------------------------------------

    def put(
        self,
        tree: int,
        epoch: int,
        snap: Snapshot,
        now: float,
        *,
        origins: Lineage | None = None,
        expected: Lineage | None = None,
        doubtful: bool = False,
    ) -> bool:
        """Record the barrier's result for (tree, epoch) covering ``origins``, of which the
        master expected ``expected`` (``doubtful``: it may not know every origin); False if it
        was recorded before. Contributions held
        for it are merged in when their lineage allows (module docstring)."""
        epochs = self._trees.setdefault(tree, OrderedDict())
        previewed = epochs.get(epoch)
        if previewed is not None and not previewed.preview:
            return False
        if previewed is not None:  # the barrier's result replaces the preview whole
            self._discard(tree, epoch)
        late_names: set[tuple[int, int]] = set()
        early = self._early.pop((tree, epoch), None)
        held = None if origins is None else set(origins)
        records = dict(records_of(origins) or {})
        if early is not None:
            self.resident_bytes -= early.snapshot.memory_bytes()
            late_names = early.names
            if early.origins is None or held is None:
                snap, held = snap.merge(early.snapshot), None
            elif (kind := classify(held, frozenset(early.origins))) == NEW:
                snap = snap.merge(early.snapshot)
                held |= early.origins
                records = merge_records(records, early.records)
            else:  # a duplicate (repair pulled what the barrier got too) is no overlap
                self._refused(kind, tree, epoch, frozenset(early.origins))
        snap = snap.lean()
        in_order = not epochs or next(reversed(epochs)) < epoch
        size = snap.memory_bytes()
        lineage = None if held is None else frozenset(held)
        if lineage is not None:  # whoever contributed (or said it is missing) was expected
            expected = (expected or frozenset()) | plain(lineage)
        epochs[epoch] = EpochResult(snap, now, late_names, size, origins=lineage,
                                    expected=expected, doubtful=doubtful,
                                    records=None if lineage is None else records)  # fmt: skip
        if previewed is not None:
            epochs[epoch].version = previewed.version + 1
        self.resident_bytes += size
        if not in_order:
            epochs = self._trees[tree] = OrderedDict(sorted(epochs.items()))
        self.assess(tree, epoch)
        while len(epochs) > self.max_epochs:
            old, _ = next(iter(epochs.items()))
            self._drop(tree, old, EPOCH_LIMIT)
        if not self._can_spill:
            self._drop_over_budget()
        return True

    def put_preview(
        self,
        tree: int,
        epoch: int,
        snap: Snapshot,
        now: float,
        *,
        origins: Lineage | None = None,
        expected: Lineage | None = None,
        doubtful: bool = False,
    ) -> EpochResult | None:
        """Store (or refresh, a new version) a tentative preview of an epoch the barrier has
        not emitted: ``snap`` covering ``origins`` plus the late contributions held for it
        (merged in a copy when their lineage allows; they stay held for :meth:`put`). None
        if the epoch already has the barrier's result, or the preview would show nothing
        new (same origins as the current preview)."""
        epochs = self._trees.setdefault(tree, OrderedDict())
        current = epochs.get(epoch)
        if current is not None and not current.preview:
            return None
        held = None if origins is None else set(origins)
        records = dict(records_of(origins) or {})
        early = self._early.get((tree, epoch))
        if early is not None:
            if early.origins is None or held is None:
                snap, held = snap.merge(early.snapshot), None
            elif classify(held, frozenset(early.origins)) == NEW:
                snap, held = snap.merge(early.snapshot), held | early.origins
                records = merge_records(records, early.records)
        lineage = None if held is None else frozenset(held)
        if current is not None and current.origins is not None and current.origins == lineage:
            return None
        version = 1
        if current is not None:
            version = current.version + 1
            self._discard(tree, epoch)
        snap = snap.lean()
        if lineage is not None:
            expected = (expected or frozenset()) | plain(lineage)
        result = EpochResult(snap, now, set(), snap.memory_bytes(), origins=lineage,
                             expected=expected, doubtful=doubtful, version=version,
                             preview=True,
                             records=None if lineage is None else records)  # fmt: skip
        epochs[epoch] = result
        self.resident_bytes += result.nbytes
        if next(reversed(epochs)) != epoch:
            self._trees[tree] = OrderedDict(sorted(epochs.items()))
        self.assess(tree, epoch)  # the rate-weighted coverage, as for any stored result
        return result

    def forget(self, tree: int, epoch: int) -> None:
        """Forget a stored result that is not this master's to answer (a duplicate of a
        version the lake holds, ``recovery/committed_epochs.py``): the lake answers it."""
        self._discard(tree, epoch)

    def _discard(self, tree: int, epoch: int) -> None:
        """Forget a stored result without marking it gone (a preview being replaced)."""
        result = self._trees.get(tree, {}).pop(epoch, None)
        if result is None:
            return
        self.resident_bytes -= result.nbytes
        if result.spilled is not None and self.spill is not None:
            self.spill.delete(tree, epoch)

    def add_late(
        self,
        tree: int,
        epoch: int,
        origin: int,
        snap: Snapshot,
        now: float,
        *,
        origins: Lineage | None = None,
        materialize: bool = False,
        expected: Lineage | None = None,
        doubtful: bool = False,
    ) -> bool:
        """Fold a late contribution sent by ``origin`` covering ``origins`` (None: unknown
        lineage, deduplicated by the name (origin, epoch)) into the epoch; False if it adds
        nothing or would double-count (module docstring). If the barrier has not emitted the
        epoch here yet, the contribution waits for it (:meth:`put` merges it in) - unless
        ``materialize``: it never will, so the held contributions become the epoch's result
        (with ``expected``). A late contribution to a spilled epoch reads the epoch back (a
        rare, bounded cost: one snapshot decode) and makes it resident again."""
        epochs = self._trees.setdefault(tree, OrderedDict())
        result = epochs.get(epoch)
        if result is not None and result.preview:
            result = None  # held for the barrier's result, like an epoch not stored yet
        name = (origin, epoch)
        if result is None:
            held = self._early.get((tree, epoch))
            if held is None:
                snap = snap.lean()
                held = HeldContributions(snap, {name}, None if origins is None else set(origins),
                             dict(records_of(origins) or {}))  # fmt: skip
                self._early[(tree, epoch)] = held
                self.resident_bytes += snap.memory_bytes()
                while len(self._early) > self.max_epochs * 4:
                    dropped = self._early.pop(next(iter(self._early)))
                    self.resident_bytes -= dropped.snapshot.memory_bytes()
            elif not self._admits(tree, epoch, held.names, held.origins, name, origins):
                return False
            else:
                merged = held.snapshot.merge(snap).lean()
                self.resident_bytes += merged.memory_bytes() - held.snapshot.memory_bytes()
                held.snapshot = merged
                held.names.add(name)
                if held.origins is not None and origins is not None:
                    held.origins |= origins
                    held.records = merge_records(held.records, records_of(origins))
                else:
                    held.origins = None
            if materialize and (tree, epoch) in self._early:
                first = self._early.pop((tree, epoch))
                self.resident_bytes -= first.snapshot.memory_bytes()
                lineage = None if first.origins is None else counted(first.origins, first.records)
                self.put(
                    tree,
                    epoch,
                    first.snapshot,
                    now,
                    origins=lineage,
                    expected=expected,
                    doubtful=doubtful,
                )
                stored = epochs.get(epoch)
                if stored is not None:
                    stored.late_names |= first.names
            return True
        current_origins = None if result.origins is None else set(result.origins)
        if not self._admits(tree, epoch, result.late_names, current_origins, name, origins):
            return False
        current = self._resident(tree, epoch, result)
        if current is None:
            return False  # the spilled copy was unreadable: the epoch is gone (and said so)
        self._replace(result, current.merge(snap))
        result.late_names.add(name)
        result.version += 1
        if result.origins is not None and origins is not None:
            result.origins = result.origins | origins
            result.expected = (result.expected or frozenset()) | plain(origins)
            result.records = merge_records(result.records, records_of(origins))
        else:
            result.origins = result.records = None
        self.assess(tree, epoch)
        return True

    def assess(self, tree: int, epoch: int) -> None:
        """(Re)compute a stored result's rate-weighted coverage (module docstring) from its
        counts and the lacking origins' rates in the tree's earlier stored epochs: bounded,
        at most :data:`agent.runtime.results.quality.SCAN` epochs read."""
        epochs = self._trees.get(tree, {})
        result = epochs.get(epoch)
        if result is None:
            return
        # every change is a version this master produced: its term, and who is given up on
        result.term = max(result.term, self.term_of(tree))
        result.policy = self.policy_of()
        missing = result.missing
        result.given_up = (result.given_up | self.given_up_for(epoch)) & missing
        if not missing or result.origins is None:
            result.weighted = None
            return
        have = covered(result.origins)
        records = result.records or {}
        wanted = missing | {o for o in have if o not in records}
        history = (
            r.records or {}
            for e, r in reversed(epochs.items())
            if e < epoch and r.origins is not None
        )
        rates = quality.origin_rates(history, wanted)
        result.weighted = quality.weighted_coverage(have, records, missing, rates)

    def give_up(self, tree: int, epoch: int, origins: Lineage) -> bool:
        """Never wait for ``origins``' share of (tree, epoch) any more (retired, or past
        repair): the result turns *partial* if they were all it lacked - a new version, so
        the lake and a stream see the new state. False when nothing changed."""
        result = self._trees.get(tree, {}).get(epoch)
        if result is None or result.preview:
            return False
        new = (frozenset(origins) & result.missing) - result.given_up
        if not new:
            return False
        result.given_up = result.given_up | new
        result.version += 1
        self.assess(tree, epoch)
        return True

    def resolve_doubt(self, tree: int, expected_for: Callable[[int], Lineage | None]) -> list[int]:
        """The master now knows the job's members: every doubtful result of ``tree`` expects
        them (``expected_for(epoch)``) instead of "?" - a new version, tentative naming whom it
        lacks, or final. Returns the epochs changed."""
        changed = []
        for epoch, result in self._trees.get(tree, {}).items():
            if not result.doubtful:
                continue
            result.doubtful = False
            result.expected = (result.expected or frozenset()) | (
                expected_for(epoch) or frozenset()
            )
            if not result.preview:
                result.version += 1
            self.assess(tree, epoch)
            changed.append(epoch)
        return changed

    def retire(self, origin: int, before: int) -> list[tuple[int, int]]:
        """``origin`` was retired from epoch ``before`` on: every stored epoch before that
        lacking it gives it up (:meth:`give_up`); returns the (tree, epoch) changed."""
        changed = []
        for tree, epochs in self._trees.items():
            for epoch in [e for e in epochs if e < before]:
                if self.give_up(tree, epoch, frozenset({origin})):
                    changed.append((tree, epoch))
        return changed

    def _admits(
        self,
        tree: int,
        epoch: int,
        names: set[tuple[int, int]],
        held: set[int] | None,
        name: tuple[int, int],
        origins: Lineage | None,
    ) -> bool:
        """Whether a late contribution may be merged into what an epoch holds: by lineage
        when both sides have it (new origins only), else by name."""
        if origins is None or held is None:
            return name not in names
        kind = classify(held, origins)
        if kind == NEW:
            return True
        self._refused(kind, tree, epoch, origins)
        return False

    def _refused(self, kind: str, tree: int, epoch: int, origins: Lineage) -> None:
        self.lineage[kind] += 1
        if kind != "duplicate":
            log.warning(
                "job %s tree %x epoch %d: late contribution covering %s overlaps what the "
                "result holds; not merged (it would double-count), its new origins stay "
                "missing",
                self.job,
                tree,
                epoch,
                describe(origins)[:8],
            )

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

    def peek(self, tree: int, epoch: int) -> EpochResult | None:
        """The stored result itself, no copy (callers read its flags and lineage - tentative,
        version, origins - and must not change it); :meth:`get` copies the snapshot."""
        return self._trees.get(tree, {}).get(epoch)

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

    def missing(self, tree: int, after: int) -> dict[int, Lineage]:
        """Epochs above ``after`` that lack expected origins not given up on: epoch → those
        origins (no copy of any snapshot: the master's repair loop calls this every round)."""
        return {
            epoch: r.missing - r.given_up
            for epoch, r in self._trees.get(tree, {}).items()
            if epoch > after and r.missing - r.given_up and not r.preview
        }

    def versions(self, tree: int) -> dict[int, int]:
        """Epoch → version of every stored epoch of ``tree`` (what a standby must hold;
        previews are not replicated)."""
        return {epoch: r.version for epoch, r in self._trees.get(tree, {}).items() if not r.preview}

    def epochs(self, tree: int) -> list[int]:
        return list(self._trees.get(tree, {}))

    def trees(self) -> list[int]:
        return list(self._trees)

    def latest(self, tree: int) -> int | None:
        epochs = self._trees.get(tree)
        return next(reversed(epochs)) if epochs else None

    # ---- the byte budget ---------------------------------------------------------------------

    def set_budget(self, budget_bytes: int) -> None:
        """A new bound on the resident snapshots (the agent's memory budget moved it): past
        it the caller's spill task (:meth:`spill_candidates`) spills the oldest; without a
        spill directory they are dropped now."""
        self.budget_bytes = budget_bytes
        if not self._can_spill:
            self._drop_over_budget()

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
        if reason != EPOCH_LIMIT:
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
            "lineage_refused": dict(self.lineage),
        }

    # ---- hand-over and release ---------------------------------------------------------------

    def drop_tree(self, tree: int) -> None:
        for epoch, result in self._trees.pop(tree, {}).items():
            self.resident_bytes -= result.nbytes
            if result.spilled is not None and self.spill is not None:
                self.spill.delete(tree, epoch)
        for key in [k for k in self._early if k[0] == tree]:
            self.resident_bytes -= self._early.pop(key).snapshot.memory_bytes()

    def close(self) -> None:
        """Free everything (a stopped job): results, held contributions, spill files."""
        self._trees.clear()
        self._early.clear()
        self.resident_bytes = 0
        if self.spill is not None:
            self.spill.close()

    def export_plan(
        self, tree: int, epochs: set[int] | None = None
    ) -> list[tuple[dict[str, Any], Callable[[], bytes]]]:
        """The tree's results as (wire item without snapshot, its bytes' producer); the
        producers encode or read files, so :meth:`encode_plan` runs them in a thread. With
        ``epochs``: only those stored results (no early contributions: a standby's update)."""
        plan: list[tuple[dict[str, Any], Callable[[], bytes]]] = []
        held = self._trees.get(tree, {})
        chosen = (
            held.items() if epochs is None else [(e, held[e]) for e in sorted(epochs) if e in held]
        )
        for epoch, r in chosen:
            if r.preview:  # display only: the data it shows travels on its own path
                continue
            item = result_item(epoch, r)
            if r.snapshot is not None:
                plan.append((item, r.snapshot.to_bytes))
            else:
                spill = self.spill
                assert spill is not None
                plan.append((item, lambda e=epoch, s=spill: s.read(tree, e)))
        for (t, epoch), early in self._early.items() if epochs is None else ():
            if t == tree:
                plan.append((held_item(epoch, early), early.snapshot.to_bytes))
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
        parsed = [parse_item(item, check) for item in items]  # all checked before any change
        taken = 0
        for p in parsed:
            epoch, snap, when, late, item = p.epoch, p.snapshot, p.completed_at, p.late, p.item
            origins, expected = p.origins, p.expected
            if item.get("early") and self._trees.get(tree, {}).get(epoch) is None:
                # still waiting for its barrier result: keep waiting here
                held = self._early.get((tree, epoch))
                if held is None:
                    self._early[(tree, epoch)] = HeldContributions(
                        snap, late, None if origins is None else set(origins),
                        dict(records_of(origins) or {}),
                    )  # fmt: skip
                    self.resident_bytes += snap.memory_bytes()
                elif self._absorbable(late, held.names, origins, held.origins):
                    merged = held.snapshot.merge(snap).lean()
                    self.resident_bytes += merged.memory_bytes() - held.snapshot.memory_bytes()
                    held.snapshot, held.names = merged, held.names | late
                    held.origins = (
                        None if held.origins is None or origins is None else held.origins | origins
                    )
                    held.records = merge_records(held.records, records_of(origins))
                continue
            mine = self._trees.get(tree, {}).get(epoch)
            if mine is not None and mine.preview:  # a real result replaces a preview
                self._discard(tree, epoch)
                mine = None
            if mine is None:
                doubtful = bool(item.get("doubtful"))
                if self.put(
                    tree, epoch, snap, when, origins=origins, expected=expected, doubtful=doubtful
                ):
                    stored = self._trees[tree].get(epoch)  # None if the epoch limit dropped it
                    if stored is not None:
                        stored.late_names |= late
                        stored.version = max(stored.version, int(item.get("version", 1)))
                        stored.given_up = (stored.given_up | given_up_of(item)) & stored.missing
                taken += 1
            else:  # both masters saw parts of this epoch during the switch
                mine_origins = None if mine.origins is None else set(mine.origins)
                if origins is not None and mine.origins is not None:
                    mine.expected = (mine.expected or frozenset()) | plain(origins)
                    if expected is not None:
                        mine.expected |= expected
                    if self._better(origins, mine.origins) and self._resident(tree, epoch, mine):
                        # theirs covers more (e.g. a restarted master's first results held
                        # only its own records): take it whole; what only ours had stays
                        # expected, so it shows as lacking until repaired - never doubled
                        self._replace(mine, snap)
                        mine.origins, mine.version = origins, mine.version + 1
                        mine.records = dict(records_of(origins) or {})
                        self.assess(tree, epoch)
                        mine.doubtful = bool(item.get("doubtful"))
                        mine.late_names |= late
                        taken += 1
                        continue
                if not self._absorbable(late, mine.late_names, origins, mine_origins):
                    continue
                current = self._resident(tree, epoch, mine)
                if current is not None:
                    self._replace(mine, current.merge(snap))
                    mine.late_names |= late
                    mine.version += 1
                    mine.origins = (
                        None if mine.origins is None or origins is None else mine.origins | origins
                    )
                    mine.records = (
                        None
                        if mine.origins is None
                        else merge_records(mine.records, records_of(origins))
                    )
                self.assess(tree, epoch)
                taken += 1
        return taken

    @staticmethod
    def _better(theirs: Lineage, mine: Lineage) -> bool:
        """Their result should replace ours: it covers more origins and they overlap (were
        they disjoint, merging both would be exact and better still)."""
        ours, other = covered(mine), covered(theirs)
        return len(other) > len(ours) and bool(other & ours)

    @staticmethod
    def _absorbable(
        late: set[tuple[int, int]],
        names: set[tuple[int, int]],
        origins: Lineage | None,
        held: set[int] | None,
    ) -> bool:
        """A handed-over part may join what is held: disjoint lineage, else disjoint names."""
        if origins is not None and held is not None:
            return classify(held, origins) == NEW
        return not late & names
