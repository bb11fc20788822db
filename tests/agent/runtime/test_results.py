"""The master's result store: each epoch once, late contributions folded in exactly once (also
when they arrive before the barrier's own result), hand-over without double counting."""

from __future__ import annotations

from collections import Counter

from agent.runtime.results.store import ResultStore
from cbt import CompressedBufferTree, Snapshot


def snap(words: str) -> Snapshot:
    tree = CompressedBufferTree("count")
    tree.insert_many(words.split())
    return tree.flush()


def as_counter(store: ResultStore, tree: int, epoch: int) -> Counter:
    result = store.get(tree, epoch)
    assert result is not None
    return Counter(result.snapshot.to_dict())


def test_each_epoch_once_in_order_and_bounded() -> None:
    store = ResultStore(max_epochs=3)
    assert store.put(1, 5, snap("a b"), 0.0)
    assert not store.put(1, 5, snap("zzz"), 0.0)
    store.put(1, 7, snap("c"), 0.0)
    store.put(1, 6, snap("d"), 0.0)
    store.put(1, 8, snap("e"), 0.0)
    assert store.epochs(1) == [6, 7, 8] and store.latest(1) == 8
    assert as_counter(store, 1, 6) == Counter(["d"])


def test_late_contributions_fold_once_before_or_after_the_barrier_result() -> None:
    store = ResultStore()
    # before: held, then merged into the barrier's result
    assert store.add_late(1, 10, origin=7, snap=snap("x y"), now=0.0)
    assert not store.add_late(1, 10, origin=7, snap=snap("x y"), now=0.0)
    assert store.get(1, 10) is None and store.epochs(1) == []
    assert store.put(1, 10, snap("a"), 1.0)
    assert as_counter(store, 1, 10) == Counter(["a", "x", "y"])
    assert store.get(1, 10).updated  # type: ignore[union-attr]
    # after: merged into the stored result, once per origin
    assert store.add_late(1, 10, origin=8, snap=snap("x"), now=2.0)
    assert not store.add_late(1, 10, origin=8, snap=snap("x"), now=2.0)
    assert as_counter(store, 1, 10) == Counter(["a", "x", "x", "y"])


def test_hand_over_moves_results_and_held_contributions() -> None:
    old, new = ResultStore(), ResultStore()
    old.put(1, 3, snap("a b"), 0.0)
    old.add_late(1, 3, origin=9, snap=snap("c"), now=0.0)
    old.add_late(1, 4, origin=9, snap=snap("d"), now=0.0)  # epoch 4 not emitted at old yet
    new.put(1, 3, snap("e"), 0.0)  # both masters saw part of epoch 3 during the switch
    items = old.export(1)
    assert new.absorb(1, items) == 1
    assert as_counter(new, 1, 3) == Counter(["a", "b", "c", "e"])
    new.put(1, 4, snap("f"), 0.0)
    assert as_counter(new, 1, 4) == Counter(["d", "f"])
    old.drop_tree(1)
    assert old.epochs(1) == [] and old.export(1) == []
