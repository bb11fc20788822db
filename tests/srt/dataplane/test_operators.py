"""Per-level operators through an in-process 3-level combining tree (hypothesis): group-by is
exact; top-k truncation at every level is exact for max (largest) and min (smallest),
including ties; top-k of sums is exact (no truncation below the root); the approximate mode
only ever under-reports and is exact when c·k covers every key."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cbt import CompressedBufferTree, Snapshot
from srt.dataplane.barrier import EpochCombiner
from srt.dataplane.operators import GroupByOperator, LevelOperator, TopKOperator, ranked, select

# node -> parent; node 0 is the root
TREE = {0: None, 1: 0, 2: 0, 3: 1, 4: 1, 5: 2}
KEYS = st.sampled_from([f"k{i}" for i in range(12)])
PAIRS = st.lists(st.tuples(KEYS, st.integers(0, 20)), max_size=15)
INPUTS = st.fixed_dictionaries({n: PAIRS for n in TREE})


def build(agg: str, pairs) -> Snapshot:
    t = CompressedBufferTree(aggregator=agg)
    for k, v in pairs:
        t.insert(k, v)
    return t.flush()


class Spy(LevelOperator):
    """Wraps an operator and records the sizes each level sends up."""

    def __init__(self, inner: LevelOperator) -> None:
        self.inner = inner
        self.sizes: list[tuple[int, int]] = []

    def merge(self, acc, snap):
        return self.inner.merge(acc, snap)

    def level(self, snap):
        out = self.inner.level(snap)
        self.sizes.append((len(snap), len(out)))
        return out

    def result(self, snap):
        return self.inner.result(snap)


def roll_up(operator: LevelOperator, agg: str, inputs: dict[int, list]):
    """Every node offers its local snapshot of epoch 0; emits feed the parent; returns the
    root operator's result."""
    out = []
    combs: dict[int, EpochCombiner] = {}

    def emitter(node: int):
        def emit(epoch: int, snap: Snapshot) -> None:
            parent = TREE[node]
            if parent is None:
                out.append(operator.result(snap))
            else:
                assert combs[parent].offer_child(node, epoch, snap) == "merged"

        return emit

    for node in TREE:
        kids = [c for c, p in TREE.items() if p == node]
        combs[node] = EpochCombiner(
            job="j", tree=1, expect_local=True, children=kids, emit=emitter(node), operator=operator
        )
    for node in sorted(TREE, reverse=True):
        combs[node].offer_local(0, build(agg, inputs[node]))
    assert len(out) == 1
    return out[0]


@settings(max_examples=60, deadline=None)
@given(INPUTS, st.integers(1, 5))
def test_top_k_of_max_truncates_every_level_and_stays_exact(inputs, k) -> None:
    ref: dict[str, int] = {}
    for pairs in inputs.values():
        for key, v in pairs:
            ref[key] = max(ref.get(key, v), v)
    spy = Spy(TopKOperator(k))
    top = roll_up(spy, "max", inputs)
    full = roll_up(GroupByOperator(), "max", inputs)
    assert top == TopKOperator(k).result(full)  # same keys, same tie-breaks as without truncation
    assert [v for _, v in top] == sorted(ref.values(), reverse=True)[:k]
    assert all(ref[key] == v for key, v in top)
    assert all(after <= k for _, after in spy.sizes)


@settings(max_examples=60, deadline=None)
@given(INPUTS, st.integers(1, 5))
def test_bottom_k_of_min_truncates_every_level_and_stays_exact(inputs, k) -> None:
    ref: dict[str, int] = {}
    for pairs in inputs.values():
        for key, v in pairs:
            ref[key] = min(ref.get(key, v), v)
    op = TopKOperator(k, largest=False)
    bottom = roll_up(op, "min", inputs)
    assert bottom == op.result(roll_up(GroupByOperator(), "min", inputs))
    assert [v for _, v in bottom] == sorted(ref.values())[:k]
    assert all(ref[key] == v for key, v in bottom)


@settings(max_examples=60, deadline=None)
@given(INPUTS, st.integers(1, 5))
def test_top_k_of_sums_is_exact_and_never_truncated_below_the_root(inputs, k) -> None:
    ref: Counter = Counter()
    for pairs in inputs.values():
        for key, v in pairs:
            ref[key] += v
    spy = Spy(TopKOperator(k))
    top = roll_up(spy, "sum", inputs)
    assert [v for _, v in top] == sorted(ref.values(), reverse=True)[:k]
    assert all(ref[key] == v for key, v in top)
    assert all(before == after for before, after in spy.sizes)
    groups = roll_up(GroupByOperator(), "sum", inputs)
    assert groups.to_dict() == {key: v for key, v in ref.items()}


@settings(max_examples=60, deadline=None)
@given(INPUTS, st.integers(1, 3), st.sampled_from([1.0, 1.5, 2.0]))
def test_approximate_top_k_only_under_reports(inputs, k, c) -> None:
    ref: Counter = Counter()
    for pairs in inputs.values():
        for key, v in pairs:
            ref[key] += v
    top = roll_up(TopKOperator(k, approximate=c), "count", inputs)
    assert all(v <= ref[key] for key, v in top)
    assert len(top) == min(k, len(ref))
    exact = roll_up(TopKOperator(k, approximate=12.0), "count", inputs)  # c·k ≥ every key: exact
    assert [v for _, v in exact] == sorted(ref.values(), reverse=True)[:k]


def test_ranking_helpers_and_validation() -> None:
    snap = build("count", [("a", 3), ("b", 3), ("c", 5), ("d", 1)])
    order = ranked(snap)
    vals = snap.values()
    assert [vals[i] for i in order] == [5, 3, 3, 1]
    assert TopKOperator(3).result(snap) == snap.top(3)  # the same tie-break as Snapshot.top
    sub = select(snap, order[:2])
    assert sub.to_dict() == dict(snap.top(2)) and sub.keys() == sorted(
        sub.keys(), key=snap.keys().index
    )
    assert Snapshot.from_bytes(sub.to_bytes()) == sub
    assert TopKOperator(2).describe() == {
        "operator": "top_k",
        "k": 2,
        "largest": True,
        "approximate": None,
    }
    with pytest.raises(ValueError):
        TopKOperator(0)
    with pytest.raises(ValueError):
        TopKOperator(2, approximate=0.5)


def test_level_operator_for_a_job() -> None:
    from srt.dataplane.operators import level_operator_for

    assert isinstance(level_operator_for("count"), GroupByOperator)
    op = level_operator_for("max", top_k=3, approximate=2.0)
    assert isinstance(op, TopKOperator) and (op.k, op.approximate) == (3, 2.0)
    with pytest.raises(ValueError):
        level_operator_for("no-such-aggregator")
