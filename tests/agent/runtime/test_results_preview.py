"""Tentative previews in the master's ResultStore (issue 14, PPA): a preview is tentative,
lists what it lacks, merges the late contributions held for its epoch without consuming them;
the barrier's result replaces it whole as a new version (so nothing it showed is counted
twice); late contributions meanwhile wait for the barrier's result; a hand-over's result
replaces it; it is never exported, replicated, committed or repaired."""

from __future__ import annotations

import logging
from collections import Counter

import pytest

from agent.runtime.results.store import ResultStore
from cbt import CompressedBufferTree, Snapshot

T = 1
E = 100
A, B, C = 0xA, 0xB, 0xC
EXPECTED = frozenset({A, B, C})


def snap(words: str) -> Snapshot:
    tree = CompressedBufferTree("count")
    for w in words.split():
        tree.insert(w, 1)
    return tree.flush()


def counts(store: ResultStore, epoch: int = E) -> Counter:
    result = store.peek(T, epoch)
    assert result is not None and result.snapshot is not None
    return Counter(dict(result.snapshot.to_dict()))


def test_a_preview_is_tentative_and_the_barrier_result_replaces_it() -> None:
    store = ResultStore()
    # a late contribution from C is held for the epoch (the barrier has not emitted it)
    assert store.add_late(T, E, C, snap("c"), 1.0, origins=frozenset({C}))
    preview = store.put_preview(T, E, snap("a a"), 2.0, origins=frozenset({A}),
                                expected=EXPECTED)  # fmt: skip
    assert preview is not None and preview.preview and preview.tentative
    assert preview.version == 1 and preview.lacking == (f"{B:x}",)
    assert counts(store) == Counter(a=2, c=1)  # held contribution shown, not consumed
    assert store.versions(T) == {} and store.export_plan(T, epochs={E}) == []  # no replica
    assert [item.get("early") for item, _ in store.export_plan(T)] == [True]  # only C's
    assert store.missing(T, 0) == {}  # never repaired: the barrier still waits
    # nothing new: no new version
    assert store.put_preview(T, E, snap("a a"), 2.5, origins=frozenset({A})) is None
    # another late contribution while previewed: held for the barrier's result
    assert store.add_late(T, E, B, snap("b"), 3.0, origins=frozenset({B}))
    refreshed = store.put_preview(T, E, snap("a a"), 3.1, origins=frozenset({A}),
                                  expected=EXPECTED)  # fmt: skip
    assert refreshed is not None and refreshed.version == 2 and not refreshed.lacking
    assert refreshed.tentative  # still a preview
    # the barrier's result (covers A) replaces it; the held ones merge in, once
    assert store.put(T, E, snap("a a"), 4.0, origins=frozenset({A}), expected=EXPECTED)
    final = store.peek(T, E)
    assert final is not None and not final.preview and not final.tentative
    assert final.version == 3
    assert counts(store) == Counter(a=2, b=1, c=1)
    assert store.versions(T) == {E: 3}
    assert not store.put(T, E, snap("a"), 5.0, origins=frozenset({A}))  # once


def test_a_leapt_result_replaces_the_preview_and_late_data_folds_in() -> None:
    store = ResultStore()
    store.put_preview(T, E, snap("a"), 1.0, origins=frozenset({A}), expected=EXPECTED)
    # the barrier leapt over C: its result covers A and B
    assert store.put(T, E, snap("a b"), 2.0, origins=frozenset({A, B}), expected=EXPECTED)
    assert store.peek(T, E).lacking == (f"{C:x}",)
    assert store.peek(T, E).version == 2
    assert store.add_late(T, E, C, snap("c"), 3.0, origins=frozenset({C}))  # C's stale one
    assert not store.add_late(T, E, C, snap("c"), 3.5, origins=frozenset({C}))  # not twice
    final = store.peek(T, E)
    assert not final.tentative and final.version == 3
    assert counts(store) == Counter(a=1, b=1, c=1)


def test_a_hand_over_result_replaces_a_preview() -> None:
    old, new = ResultStore(), ResultStore()
    old.put(T, E, snap("a b"), 1.0, origins=frozenset({A, B}), expected=EXPECTED)
    new.put_preview(T, E, snap("a"), 1.5, origins=frozenset({A}), expected=EXPECTED)
    assert new.absorb(T, old.export(T)) == 1
    taken = new.peek(T, E)
    assert taken is not None and not taken.preview
    assert counts(new) == Counter(a=1, b=1)
    assert not new.put(T, E, snap("a"), 2.0, origins=frozenset({A}))  # folded later instead


def test_a_held_duplicate_of_the_barrier_result_is_a_duplicate_not_an_overlap(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # repair pulled B's own snapshot while the epoch was previewed; B's data then reached
    # the barrier too: counted once, refused as the duplicate it is, no WARNING
    store = ResultStore()
    store.put_preview(T, E, snap("a"), 1.0, origins=frozenset({A}), expected=EXPECTED)
    store.add_late(T, E, B, snap("b"), 2.0, origins=frozenset({B}))
    with caplog.at_level(logging.WARNING):
        store.put(T, E, snap("a b"), 3.0, origins=frozenset({A, B}), expected=EXPECTED)
    assert counts(store) == Counter(a=1, b=1)
    assert store.lineage == Counter(duplicate=1)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
