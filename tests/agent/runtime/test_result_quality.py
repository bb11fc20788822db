"""The master's result store keeps each covered origin's record count (carried by lineage)
through the barrier's result, early and late folds, hand-over and the standby's replica, and
recomputes a tentative result's rate-weighted coverage whenever it changes."""

from __future__ import annotations

import pytest

from agent.runtime.results.store import ResultStore
from cbt import CompressedBufferTree, Snapshot
from srt.dataplane.lineage import Counted

T = 1
A, B, C = 0xA, 0xB, 0xC  # origins: A sends 10 records an epoch, B 30, C 60


def snap(words: str) -> Snapshot:
    tree = CompressedBufferTree("count")
    tree.insert_many(words.split())
    return tree.flush()


def fill(store: ResultStore, epochs: range) -> None:
    """Final epochs from all three origins, with their usual counts."""
    for e in epochs:
        store.put(T, e, snap("x"), 0.0, origins=Counted({A, B, C}, {A: 10, B: 30, C: 60}),
                  expected=frozenset({A, B, C}))  # fmt: skip


def test_coverage_is_rate_weighted_and_recomputed_by_a_late_fold() -> None:
    store = ResultStore()
    fill(store, range(0, 8))
    # epoch 8 lacks C (usual 60 of 100 records): 40 % of its records, not 2 of 3 origins
    store.put(T, 8, snap("y"), 0.0, origins=Counted({A, B}, {A: 11, B: 29}),
              expected=frozenset({A, B, C}))  # fmt: skip
    r = store.peek(T, 8)
    assert r is not None and r.tentative and r.records == {A: 11, B: 29}
    assert r.coverage == pytest.approx(40 / 100)
    assert store.peek(T, 7).coverage == 1.0  # final
    # B's and C's part arrives late... B's first (a duplicate: refused), then C's
    assert not store.add_late(T, 8, B, snap("z"), 0.0, origins=Counted({B}, {B: 29}))
    assert store.add_late(T, 8, C, snap("z"), 0.0, origins=Counted({C}, {C: 58}))
    r = store.peek(T, 8)
    assert not r.tentative and r.coverage == 1.0 and r.version == 2
    assert r.records == {A: 11, B: 29, C: 58}


def test_a_late_fold_of_a_third_origin_recomputes_a_still_tentative_result() -> None:
    store = ResultStore()
    fill(store, range(0, 8))
    store.put(T, 8, snap("y"), 0.0, origins=Counted({A}, {A: 10}),
              expected=frozenset({A, B, C}))  # fmt: skip
    assert store.peek(T, 8).coverage == pytest.approx(10 / 100)
    store.add_late(T, 8, B, snap("z"), 0.0, origins=Counted({B}, {B: 30}))
    r = store.peek(T, 8)
    assert r.tentative and r.version == 2 and r.coverage == pytest.approx(40 / 100)


def test_the_rate_is_the_median_robust_to_one_burst() -> None:
    store = ResultStore()
    for e in range(8):
        c = 600 if e == 3 else 60  # one burst of C
        store.put(T, e, snap("x"), 0.0, origins=Counted({A, C}, {A: 40, C: c}),
                  expected=frozenset({A, C}))  # fmt: skip
    store.put(T, 8, snap("y"), 0.0, origins=Counted({A}, {A: 40}), expected=frozenset({A, C}))
    assert store.peek(T, 8).coverage == pytest.approx(40 / 100)


def test_an_origin_never_measured_weighs_the_mean_and_no_counts_fall_back() -> None:
    store = ResultStore()
    store.put(T, 0, snap("x"), 0.0, origins=Counted({A, B}, {A: 10, B: 30}),
              expected=frozenset({A, B, C}))  # fmt: skip
    assert store.peek(T, 0).coverage == pytest.approx(40 / 60)  # C weighs (10 + 30) / 2
    # a peer without counts (lineage form 1): the share of origins, as before
    store.put(T, 1, snap("x"), 0.0, origins=frozenset({A}), expected=frozenset({A, B, C}))
    assert store.peek(T, 1).records == {}
    # ... rates from epoch 0 still weigh A (10) against B (30) and C (unmeasured: mean 20)
    assert store.peek(T, 1).coverage == pytest.approx(10 / 60)
    store.put(T, 0 + 100, snap("x"), 0.0, origins=frozenset({A}), expected=frozenset({A, B}))
    assert store.peek(T, 100).coverage == pytest.approx(10 / 40)


def test_counts_survive_early_contributions_hand_over_and_replica() -> None:
    store = ResultStore()
    fill(store, range(0, 4))
    # a late contribution that arrives before the barrier's result is held, then merged
    store.add_late(T, 4, C, snap("c"), 0.0, origins=Counted({C}, {C: 61}))
    store.put(T, 4, snap("a b"), 0.0, origins=Counted({A, B}, {A: 9, B: 31}),
              expected=frozenset({A, B, C}))  # fmt: skip
    assert store.peek(T, 4).records == {A: 9, B: 31, C: 61}
    store.add_late(T, 6, C, snap("c"), 0.0, origins=Counted({C}, {C: 62}))  # early, kept
    store.put(T, 5, snap("a"), 0.0, origins=Counted({A}, {A: 12}), expected=frozenset({A, B, C}))
    items = store.export(T)
    other = ResultStore()
    assert other.absorb(T, items) == len(items) - 1  # the early one is held, not taken
    for e in range(6):
        assert other.peek(T, e).records == store.peek(T, e).records
        assert other.peek(T, e).coverage == pytest.approx(store.peek(T, e).coverage)
    assert other.peek(T, 5).coverage == pytest.approx(12 / 102)
    # the held early contribution kept its count
    other.put(T, 6, snap("a b"), 0.0, origins=Counted({A, B}, {A: 10, B: 30}),
              expected=frozenset({A, B, C}))  # fmt: skip
    assert other.peek(T, 6).records == {A: 10, B: 30, C: 62}
    # a hand-over of disjoint parts of one epoch unions the counts
    part = ResultStore()
    part.put(T, 5, snap("b"), 0.0, origins=Counted({B, C}, {B: 30, C: 60}),
             expected=frozenset({A, B, C}))  # fmt: skip
    other.absorb(T, part.export(T))
    r = other.peek(T, 5)
    assert r.records == {A: 12, B: 30, C: 60} and not r.tentative and r.coverage == 1.0
    # malformed counts in an item are left out (unknown), never trusted
    bad = [dict(i, records={"zz": 5, format(A, "x"): -1, format(B, "x"): "7"}) for i in items]
    third = ResultStore()
    third.absorb(T, bad)
    assert third.peek(T, 0).records == {}
