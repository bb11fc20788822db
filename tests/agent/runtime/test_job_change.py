"""What a job change does to open epochs (agent/runtime/epochs/job_change.py), against an
independent reference: each open epoch's counts re-cut by hand with the schedule's own
arithmetic, and a Counter of what was discarded."""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from agent.jobs.schedule import EpochSchedule
from agent.runtime.epochs.job_change import discard_from, rebucket
from cbt import CompressedBufferTree, Snapshot

open_epochs = st.dictionaries(
    st.integers(100, 130),
    st.lists(st.sampled_from("abcdef"), min_size=1, max_size=20),
    max_size=6,
)


def trees_of(data: dict[int, list[str]]) -> dict[int, CompressedBufferTree]:
    trees = {}
    for epoch, keys in data.items():
        tree = CompressedBufferTree("count")
        for key in keys:
            tree.insert(key)
        trees[epoch] = tree
    return trees


@settings(max_examples=60, deadline=None)
@given(open_epochs, st.integers(95, 135), st.sampled_from([0.5, 2.0, 3.0]))
def test_rebucket_moves_each_epoch_to_where_its_start_falls(
    data: dict[int, list[str]], changed_from: int, seconds: float
) -> None:
    old = EpochSchedule(1.0)
    new = EpochSchedule(1.0, ((changed_from, seconds),))
    trees = trees_of(data)
    carried: dict[int, Snapshot] = {}
    moved = rebucket(trees, carried, old, new, changed_from)

    want: dict[int, Counter] = {}
    for epoch, keys in data.items():
        target = new.epoch_of(old.start(epoch)) if epoch >= changed_from else epoch
        want.setdefault(target, Counter()).update(keys)
    got: dict[int, Counter] = {}
    for epoch, tree in trees.items():
        got.setdefault(epoch, Counter()).update(tree.flush().to_dict())
    for epoch, snap in carried.items():
        got.setdefault(epoch, Counter()).update(snap.to_dict())
    assert got == want
    assert moved == sum(1 for e in data if e >= changed_from and new.epoch_of(old.start(e)) != e)


@settings(max_examples=60, deadline=None)
@given(open_epochs, st.integers(95, 135))
def test_discard_from_drops_the_epochs_from_the_first_and_counts_their_keys(
    data: dict[int, list[str]], first: int
) -> None:
    trees = trees_of(data)
    carried = {131: Snapshot.empty("count")}
    dropped = discard_from(trees, carried, first)
    assert sorted(trees) == sorted(e for e in data if e < first)
    assert dropped == sum(len(set(keys)) for e, keys in data.items() if e >= first)
    assert (131 in carried) == (first > 131)
