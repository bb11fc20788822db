"""Windows over per-epoch snapshots against a per-epoch dict reference."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cbt import CompressedBufferTree, SlidingWindow, Snapshot, TumblingWindow

EPOCHS = st.lists(
    st.lists(st.tuples(st.sampled_from("abcde"), st.integers(1, 9)), max_size=12),
    min_size=1,
    max_size=14,
)
FOLD = {"count": sum, "sum": sum, "max": max, "collect_set": frozenset}


def _pane(name: str, pairs: list) -> Snapshot:
    t = CompressedBufferTree(name, root_capacity=3)
    for k, v in pairs:
        t.insert(k, v)
    return t.flush()


def _expected(name: str, epochs: list[list]) -> dict[Any, Any]:
    vals: dict[Any, list] = {}
    for pairs in epochs:
        for k, v in pairs:
            vals.setdefault(k, []).append(v)
    return {k: FOLD[name](vs) for k, vs in vals.items()}


@pytest.mark.parametrize("name", sorted(FOLD))
@settings(max_examples=30, deadline=None)
@given(epochs=EPOCHS, size=st.integers(1, 4))
def test_tumbling(name: str, epochs: list, size: int) -> None:
    w = TumblingWindow(size)
    for i, pairs in enumerate(epochs):
        out = w.push(_pane(name, pairs))
        if (i + 1) % size:
            assert out is None
        else:
            assert out is not None
            assert out.to_dict() == _expected(name, epochs[i + 1 - size : i + 1])


@pytest.mark.parametrize("name", sorted(FOLD))
@settings(max_examples=30, deadline=None)
@given(epochs=EPOCHS, size=st.integers(1, 5), slide_frac=st.integers(1, 5))
def test_sliding(name: str, epochs: list, size: int, slide_frac: int) -> None:
    slide = min(size, slide_frac)
    w = SlidingWindow(size, slide)
    assert w.invertible is None
    for i, pairs in enumerate(epochs):
        out = w.push(_pane(name, pairs))
        n = i + 1
        if n >= size and (n - size) % slide == 0:
            assert out is not None
            assert out.to_dict() == _expected(name, epochs[n - size : n])
        else:
            assert out is None
    assert w.invertible == (name in ("count", "sum"))


def test_invertible_reduce_over_cumulative_flushes() -> None:
    """The paper's example: flush every 5 s without emptying; [5, 15) = PAO15 ⊖ PAO5."""
    t = CompressedBufferTree("count", root_capacity=2)
    t.insert_many(["x", "y", "x"])
    snap5 = t.flush()
    t.insert_many(["x", "z"])
    t.flush()
    t.insert_many(["z", "w"])
    snap15 = t.flush()
    assert snap15.subtract(snap5).to_dict() == {"x": 1, "z": 2, "w": 1}


def test_window_argument_checks() -> None:
    with pytest.raises(ValueError):
        TumblingWindow(0)
    with pytest.raises(ValueError):
        SlidingWindow(2, 3)


def test_idle_epochs_use_empty_snapshots() -> None:
    w = SlidingWindow(2, 1)
    assert w.push(_pane("count", [("a", 1)])) is None
    assert w.push(Snapshot.empty("count")).to_dict() == {"a": 1}
    assert w.push(Snapshot.empty("count")).to_dict() == {}
    forced = SlidingWindow(2, 1, invertible=False)
    forced.push(_pane("sum", [("a", 2)]))
    assert forced.push(_pane("sum", [("a", 3)])).to_dict() == {"a": 5}
    assert forced.invertible is False
