"""The ``composite`` aggregator: per key, several parts side by side. Snapshots built from any
split of the inserts, merged in any order or grouping, equal an independent per-key reference
(count, sum, min, max, distinct over the non-None entries); they round-trip through bytes
(``Snapshot.from_bytes`` rebuilds the aggregator from its params); subtracting a pane of an
all-invertible composite gives the reference over what remains."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cbt import CompressedBufferTree, Snapshot, get_aggregator

PARTS = [["count", {}], ["sum", {}], ["min", {}], ["max", {}], ["distinct", {}]]
INVERTIBLE = [["count", {}], ["sum", {}], ["avg", {}]]

keys = st.sampled_from(["a", "b", "c", 1, 2, ("x", 3)])
ints_or_none = st.one_of(st.none(), st.integers(-1000, 1000))
values = st.tuples(st.just(1), ints_or_none, ints_or_none, ints_or_none, ints_or_none)
pairs = st.lists(st.tuples(keys, values), max_size=60)


def reference(items: list[tuple[Any, tuple]]) -> dict[Any, tuple]:
    cols: dict[Any, list[list[int]]] = {}
    for k, v in items:
        parts = cols.setdefault(k, [[] for _ in PARTS])
        for i, x in enumerate(v):
            if x is not None:
                parts[i].append(x)
    out = {}
    for k, (c, s, lo, hi, d) in cols.items():
        out[k] = (
            sum(c) if c else None,
            sum(s) if s else None,
            min(lo) if lo else None,
            max(hi) if hi else None,
            len(set(d)) if d else None,
        )
    return out


def snapshot(items: list[tuple[Any, tuple]], parts: list = PARTS) -> Snapshot:
    tree = CompressedBufferTree("composite", aggregator_params={"parts": parts}, root_capacity=8)
    for k, v in items:
        tree.insert(k, v)
    return tree.flush()


@settings(max_examples=60, deadline=None)
@given(pairs, st.integers(0, 60), st.integers(0, 60))
def test_merge_any_grouping_equals_reference(items: list, cut1: int, cut2: int) -> None:
    lo, hi = sorted((cut1, cut2))
    a, b, c = snapshot(items[:lo]), snapshot(items[lo:hi]), snapshot(items[hi:])
    want = reference(items)
    left = a.merge(b).merge(c)
    right = c.merge(a.merge(b))
    other = b.merge(c).merge(a)
    for snap in (left, right, other):
        assert dict(snap) == want


@settings(max_examples=40, deadline=None)
@given(pairs)
def test_round_trip_through_bytes(items: list) -> None:
    snap = snapshot(items)
    back = Snapshot.from_bytes(snap.to_bytes())
    assert back.agg == snap.agg
    assert dict(back) == dict(snap) == reference(items)


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.tuples(keys, st.tuples(st.just(1), ints_or_none, ints_or_none)), max_size=40),
    st.lists(st.tuples(keys, st.tuples(st.just(1), ints_or_none, ints_or_none)), max_size=40),
)
def test_subtract_invertible_parts(old: list, new: list) -> None:
    agg = get_aggregator("composite", {"parts": INVERTIBLE})
    assert agg.invertible
    both = snapshot(old, INVERTIBLE).merge(snapshot(new, INVERTIBLE))
    rest = both.subtract(snapshot(old, INVERTIBLE))
    want: dict[Any, list] = {}
    for k, v in new:
        acc = want.setdefault(k, [0, [], []])
        acc[0] += 1
        for i in (1, 2):
            if v[i] is not None:
                acc[i].append(v[i])
    expected = {
        k: (c, sum(s) if s else None, sum(a) / len(a) if a else None)
        for k, (c, s, a) in want.items()
    }
    assert dict(rest) == expected


def test_params_validation_and_invertibility() -> None:
    assert not get_aggregator("composite", {"parts": PARTS}).invertible
    with pytest.raises(ValueError):
        get_aggregator("composite", {"parts": []})
    with pytest.raises(ValueError):
        get_aggregator("composite", {"parts": [["composite", {"parts": PARTS}]]})
    with pytest.raises(ValueError):
        get_aggregator("composite", {"parts": [["nope", {}]]})
    agg = get_aggregator("composite", {"parts": [["topk", {"k": 2}], ["count", {}]]})
    assert agg == get_aggregator("composite", {"parts": (("topk", {"k": 2}), ("count", {}))})
    assert hash(agg) == hash(get_aggregator("composite", {"parts": agg.params()["parts"]}))
    with pytest.raises(TypeError):
        agg.lift((1,))  # wrong arity
    with pytest.raises(TypeError):
        get_aggregator("composite", {"parts": PARTS}).lift((1, "x", None, None, None))
