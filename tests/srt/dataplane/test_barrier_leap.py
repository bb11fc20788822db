"""Straggler leaping in the EpochCombiner (ELF: a child ``straggler_epochs`` behind its
siblings is leapt over): a hypothesis state machine of one barrier whose members (three
children and the local input) deliver their epochs in order at random relative speeds, plus
the documented cases. Invariants after every step: epochs leave in order, each once; an
emitted epoch holds exactly what was merged into it and its lineage says whose; a member
either merged an epoch or was leapt for it and its later snapshot is "stale" (never merged
twice); the barrier never holds an epoch the rule says must leap; every leap is recorded
with a sane detected -> emitted time."""

from __future__ import annotations

import itertools
from collections import Counter

from dataplane_helpers import snap_of
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from cbt import Snapshot
from srt.dataplane.barrier import LOCAL, EpochCombiner

EPOCHS = 6
CHILDREN = (1, 2, 3)
MEMBERS: tuple[int | str, ...] = (*CHILDREN, LOCAL)
ORIGIN = {1: 0xA1, 2: 0xA2, 3: 0xA3, LOCAL: 0xA0}


def data(member: int | str, epoch: int) -> Counter:
    return Counter({f"m{ORIGIN[member]:x}": epoch + 1, f"e{epoch}": 1})


class LeapingBarrier(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.ticks = itertools.count()
        self.emitted: list[tuple[int, Counter]] = []
        self.next = dict.fromkeys(MEMBERS, 0)  # next epoch each member delivers
        self.merged: dict[int, set[int | str]] = {e: set() for e in range(EPOCHS)}
        self.stale: set[tuple[int | str, int]] = set()
        self.k = 2
        self.comb: EpochCombiner | None = None

    def _emit(self, epoch: int, snap: Snapshot) -> None:
        assert not self.emitted or epoch == self.emitted[-1][0] + 1, "out of order"
        self.emitted.append((epoch, Counter({k: v for k, v in snap.to_dict().items() if v})))

    @initialize(k=st.integers(1, 3))
    def start(self, k: int) -> None:
        self.k = k
        self.comb = EpochCombiner(
            job="j",
            tree=1,
            expect_local=True,
            children=CHILDREN,
            emit=self._emit,
            origin=ORIGIN[LOCAL],
            straggler_epochs=k,
            clock=lambda: float(next(self.ticks)),
        )

    @rule(member=st.sampled_from(MEMBERS))
    def deliver(self, member: int | str) -> None:
        comb = self.comb
        assert comb is not None
        e = self.next[member]
        if e >= EPOCHS:
            return
        self.next[member] = e + 1
        snap = snap_of(data(member, e), "sum")
        if member == LOCAL:
            res = comb.offer_local(e, snap)
        else:
            res = comb.offer_child(member, e, snap, frozenset((ORIGIN[member],)))
        if res == "merged":
            assert (member, e) not in self.stale
            self.merged[e].add(member)
        else:
            assert res == "stale", res
            assert member in comb.leapt_for(e), "stale only after a leap over this member"
            self.stale.add((member, e))

    # ---- invariants ---------------------------------------------------------------------
    @invariant()
    def emitted_epochs_hold_exactly_what_was_merged(self) -> None:
        comb = self.comb
        if comb is None:
            return
        assert [e for e, _ in self.emitted] == list(range(len(self.emitted)))
        for epoch, got in self.emitted:
            want = sum((data(m, epoch) for m in self.merged[epoch]), Counter())
            assert got == want
            assert comb.lineage_of(epoch) == frozenset(ORIGIN[m] for m in self.merged[epoch])
            leapt = comb.leapt_for(epoch)
            assert leapt == frozenset(MEMBERS) - self.merged[epoch] or not leapt
            if not leapt:
                assert self.merged[epoch] == set(MEMBERS)  # complete, no leap

    @invariant()
    def nothing_is_lost_or_doubled(self) -> None:
        for m in MEMBERS:
            for e in range(self.next[m]):
                assert (m in self.merged[e]) != ((m, e) in self.stale)

    @invariant()
    def the_barrier_never_holds_an_epoch_that_must_leap(self) -> None:
        comb = self.comb
        if comb is None:
            return
        e = comb.next_epoch
        if e >= EPOCHS:
            return
        waiting = set(comb.waiting_for(e))
        assert waiting, "a complete epoch was held"
        others = [self.next[m] - 1 for m in MEMBERS if m not in waiting]
        assert max(others, default=-1) < e + self.k

    @invariant()
    def leaps_are_recorded_sanely(self) -> None:
        comb = self.comb
        if comb is None:
            return
        assert comb.counters["leapt"] == len(comb.leaps)
        for leap in comb.leaps:
            assert leap.emitted_at >= leap.detected_at
            assert leap.ahead >= leap.epoch + self.k
            assert leap.member in comb.leapt_for(leap.epoch)
            assert ORIGIN[leap.member] not in (comb.lineage_of(leap.epoch) or ())

    def teardown(self) -> None:
        if self.comb is None:
            return
        for m in MEMBERS:
            while self.next[m] < EPOCHS:
                self.deliver(m)
        assert [e for e, _ in self.emitted] == list(range(EPOCHS))
        self.nothing_is_lost_or_doubled()


TestLeapingBarrier = LeapingBarrier.TestCase
TestLeapingBarrier.settings = settings(
    max_examples=200,
    stateful_step_count=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


def test_a_child_two_epochs_behind_is_leapt_and_its_late_snapshot_is_stale() -> None:
    out: list[tuple[int, dict]] = []
    comb = EpochCombiner(
        job="j",
        tree=1,
        expect_local=True,
        children=[7, 8],
        emit=lambda e, s: out.append((e, s.to_dict())),
        origin=1,
        straggler_epochs=2,
    )
    for e in range(3):
        comb.offer_local(e, snap_of(["a"]))
        comb.offer_child(7, e, snap_of(["b"]), frozenset({7}))
        if e == 1:
            assert out == []  # one epoch behind: still waited for
    # child 8 delivered nothing; local and child 7 reached epoch 2 = 0 + 2: epoch 0 leaves
    assert [e for e, _ in out] == [0]
    assert out[0][1] == {"a": 1, "b": 1}
    assert comb.lineage_of(0) == frozenset({1, 7})
    assert comb.leapt_for(0) == frozenset({8})
    (leap,) = comb.leaps
    assert (leap.epoch, leap.member, leap.ahead) == (0, 8, 2)
    assert 0 <= leap.emitted_at - leap.detected_at < 1.0
    assert comb.pending()["leaps"][0]["member"] == "8"
    # the straggler wakes up: epoch 0 is stale (its master folds it in), 1 and 2 merge
    assert comb.offer_child(8, 0, snap_of(["c"]), frozenset({8})) == "stale"
    assert comb.counters["stale_leapt"] == 1
    assert comb.offer_child(8, 1, snap_of(["c"]), frozenset({8})) == "merged"
    assert comb.offer_child(8, 2, snap_of(["c"]), frozenset({8})) == "merged"
    assert [e for e, _ in out] == [0, 1, 2]
    assert out[1][1] == {"a": 1, "b": 1, "c": 1}
    assert comb.counters["leapt"] == 1 and comb.counters["leapt_epochs"] == 1


def test_without_straggler_epochs_a_slow_child_holds_the_epoch() -> None:
    out: list[int] = []
    for k in (None, 0):
        comb = EpochCombiner(
            job="j",
            tree=1,
            expect_local=True,
            children=[7],
            emit=lambda e, s: out.append(e),
            straggler_epochs=k,
        )
        for e in range(10):
            comb.offer_local(e, snap_of(["a"]))
        assert out == [] and comb.counters["leapt"] == 0


def test_straggler_epochs_can_change_and_the_next_offer_applies_it() -> None:
    out: list[int] = []
    comb = EpochCombiner(
        job="j", tree=1, expect_local=True, children=[7], emit=lambda e, s: out.append(e)
    )
    for e in range(3):
        comb.offer_local(e, snap_of(["a"]))
    assert out == []
    comb.straggler_epochs = 1
    comb.offer_local(3, snap_of(["a"]))
    assert out == [0, 1, 2]  # local at 3: epochs 0..2 are each >= 1 behind
    assert comb.leapt_for(2) == frozenset({7})


def test_preview_shows_what_arrived_without_consuming_it() -> None:
    out: list[tuple[int, dict]] = []
    comb = EpochCombiner(
        job="j",
        tree=1,
        expect_local=True,
        children=[7],
        emit=lambda e, s: out.append((e, s.to_dict())),
        origin=1,
        clock=lambda: 5.0,
    )
    assert comb.preview(0) is None and comb.opened_at(0) is None
    comb.offer_local(0, snap_of(["a", "a"]))
    snap, lineage, waiting = comb.preview(0)
    assert snap.to_dict() == {"a": 2} and lineage == frozenset({1}) and waiting == [7]
    assert comb.opened_at(0) == 5.0
    comb.offer_child(7, 0, snap_of(["b"]), frozenset({7}))
    assert out == [(0, {"a": 2, "b": 1})]  # the preview consumed nothing
    assert comb.preview(0) is None and comb.opened_at(0) is None


def test_behind_in_epochs_but_not_in_time_is_a_catch_up_not_a_straggler() -> None:
    now = [100.0]
    out: list[int] = []
    comb = EpochCombiner(
        job="j",
        tree=1,
        expect_local=True,
        children=[7],
        emit=lambda e, s: out.append(e),
        straggler_epochs=2,
        straggler_wait=lambda epoch: 1.5,
        clock=lambda: now[0],
    )
    for e in range(5):  # a replay: the local input reads five epochs at once
        comb.offer_local(e, snap_of(["a"]))
    assert out == []  # epoch 0 has been open 0 s: the child is catching up, not straggling
    now[0] = 101.0
    comb.offer_local(5, snap_of(["a"]))
    assert out == []
    now[0] = 101.6  # the child is still at nothing, 1.6 s after epoch 0 opened: leap
    comb.offer_local(6, snap_of(["a"]))
    assert out == [0, 1, 2, 3, 4] and comb.leapt_for(4) == frozenset({7})
    assert comb.counters["leapt_epochs"] == 5
