"""EpochCombiner admission (issue 13, finding 4): a peer's snapshot is checked against what its
epoch expects - aggregator and parameters, hash, keys - and against the epoch bounds *before*
it touches any state. The finding's exact probe: a ``sum`` snapshot for a future epoch of a
``count`` barrier used to be merged, after which the node's own data failed on every offer."""

from __future__ import annotations

import logging
from collections import Counter

import pytest
from dataplane_helpers import snap_of

from cbt import Snapshot, get_aggregator
from srt.dataplane.barrier import EpochCombiner, EpochTooFarAhead
from srt.dataplane.compat import Expectation, admit
from srt.errors import Incompatible, Reject, RetryLater

COUNT = Expectation(get_aggregator("count"))
SUM = Expectation(get_aggregator("sum"))


def combiner(out: list, **kw) -> EpochCombiner:
    kw.setdefault("expect", lambda epoch: COUNT)
    return EpochCombiner(
        job="wc",
        tree=0xABC,
        expect_local=True,
        children=[7],
        emit=lambda e, s: out.append((e, s.to_dict())),
        **kw,
    )


def test_incompatible_future_snapshot_is_refused_and_the_job_keeps_running(caplog) -> None:
    out: list = []
    comb = combiner(out)
    before = comb.pending()
    sum_snap = snap_of(Counter({"a": 5}), aggregator="sum")
    with caplog.at_level(logging.WARNING), pytest.raises(Incompatible) as err:
        comb.offer_child(99, 3, sum_snap)
    assert (err.value.status, err.value.reason) == (409, "incompatible")
    assert isinstance(err.value, Reject) and isinstance(err.value, ValueError)
    assert "Sum" in err.value.detail and "Count" in err.value.detail
    # nothing recorded: same open epochs, same next epoch; counted and logged with job/epoch/origin
    after = comb.pending()
    assert after["open"] == before["open"] and after["next_epoch"] == before["next_epoch"]
    assert comb.counters["refused_incompatible"] == 1
    assert any(
        "wc" in r.getMessage() and "epoch 3" in r.getMessage() and "from 63" in r.getMessage()
        for r in caplog.records
        if r.levelno == logging.WARNING
    )
    # the node's own data and its child's still flow, exactly
    for epoch in range(4):
        assert comb.offer_local(epoch, snap_of(["x", "y"])) == "merged"
        assert comb.offer_child(7, epoch, snap_of(["x"])) == "merged"
    assert [e for e, _ in out] == [0, 1, 2, 3]
    assert all(Counter(r) == Counter({"x": 2, "y": 1}) for _, r in out)


def test_refused_offer_does_not_move_a_floating_start() -> None:
    out: list = []
    comb = combiner(out, first_epoch=None)
    comb.offer_local(100, snap_of(["a"]))
    with pytest.raises(Incompatible):
        comb.offer_child(7, 50, snap_of(Counter({"a": 1}), aggregator="sum"))
    assert comb.next_epoch == 100  # the refused epoch 50 did not become the start
    # without an expectation the merge itself refuses, and still records nothing
    bare = combiner([], first_epoch=None, expect=None)
    bare.offer_local(100, snap_of(["a"]))
    with pytest.raises(ValueError):
        bare.offer_child(7, 100, snap_of(Counter({"a": 1}), aggregator="sum"))
    assert bare.next_epoch == 100 and bare.pending()["open"][100]["received"] == []


def test_parameters_hash_and_keys_are_checked() -> None:
    topk3 = Expectation(get_aggregator("topk", {"k": 3}))
    assert admit(topk3, Snapshot.empty("topk")) == Snapshot.empty(get_aggregator("topk", {"k": 3}))
    from cbt import CompressedBufferTree

    t = CompressedBufferTree(aggregator=get_aggregator("topk", {"k": 5}))
    t.insert("a", ("item", 1))
    with pytest.raises(Incompatible, match="k=5"):
        admit(topk3, t.flush())
    strs = Expectation(
        get_aggregator("count"),
        key_check=lambda s: None if all(type(k) is str for k in s.keys_column) else "keys are str",
    )
    assert admit(strs, snap_of(["a"])).to_dict() == {"a": 1}
    with pytest.raises(Incompatible, match="keys are str"):
        admit(strs, snap_of([1, 2]))
    assert admit(None, snap_of([1])).to_dict() == {1: 1}


def test_empty_snapshots_merge_with_any_aggregator_as_the_expected_one() -> None:
    aggs: list = []
    comb = EpochCombiner(
        job="wc",
        tree=0xABC,
        expect_local=False,
        children=[7],
        emit=lambda e, s: aggs.append((e, s.agg.name, s.to_dict())),
        expect=lambda epoch: COUNT,
    )
    comb.offer_child(7, 0, Snapshot.empty("sum"))  # an idle child, other aggregate: fine
    comb.offer_child(8, 1, snap_of(["a"]))  # an unexpected sender's data for epoch 1
    comb.offer_child(7, 1, Snapshot.empty("max"))
    assert aggs == [(0, "count", {}), (1, "count", {"a": 1})]
    assert comb.counters["refused_incompatible"] == 0


def test_expectation_is_per_epoch_across_a_change_of_aggregate() -> None:
    out: list = []
    comb = combiner(out, expect=lambda epoch: COUNT if epoch < 5 else SUM)
    comb.offer_child(7, 5, snap_of(Counter({"a": 2}), aggregator="sum"))
    with pytest.raises(Incompatible):
        comb.offer_child(8, 5, snap_of(["a"]))
    with pytest.raises(Incompatible):
        comb.offer_child(8, 4, snap_of(Counter({"a": 2}), aggregator="sum"))
    for epoch in range(5):
        comb.offer_local(epoch, snap_of(["a"]))
        comb.offer_child(7, epoch, snap_of(["b"]))
    comb.offer_local(5, snap_of(Counter({"a": 3}), aggregator="sum"))
    assert out[-1] == (5, {"a": 5})
    assert [e for e, _ in out] == list(range(6))


def test_epoch_bounds_are_a_503_never_recorded() -> None:
    comb = combiner([], first_epoch=0, max_ahead=10)
    with pytest.raises(EpochTooFarAhead) as err:
        comb.offer_child(7, 11, snap_of(["a"]))
    assert isinstance(err.value, RetryLater) and err.value.reason == "epoch_ahead"
    assert err.value.status == 503 and comb.counters["refused_ahead"] == 1
    assert comb.offer_child(7, 10, snap_of(["a"])) == "merged"
    # a floating combiner's first offer is bounded by the horizon only
    floating = combiner([], first_epoch=None, horizon=lambda: 1_000)
    with pytest.raises(EpochTooFarAhead, match="horizon"):
        floating.offer_child(7, 2**62, snap_of(["a"]))
    assert 2**62 not in floating.pending()["open"] and floating.next_epoch == 0
    assert floating.offer_child(7, 999, snap_of(["a"])) == "merged"
    # the local input is bounded too (a runaway local clock cannot grow the open epochs)
    with pytest.raises(EpochTooFarAhead):
        floating.offer_local(5_000, snap_of(["a"]))
