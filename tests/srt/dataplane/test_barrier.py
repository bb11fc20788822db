"""EpochCombiner (the combining-tree barrier) as a pure data structure: hypothesis over random
arrival orders, duplicates and child removal against a Counter reference, plus the documented
membership rules (removed children stop blocking, new children start tentatively and from
their first delivery), stale counting, empty epochs and async emit ordering."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest
from dataplane_helpers import name, snap_of
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cbt import Snapshot
from srt.dataplane.barrier import EpochCombiner, EpochTooFarAhead, snapshot_handler
from srt.errors import Reject, RetryLater

WORDS = st.lists(st.sampled_from("abcdefgh"), min_size=0, max_size=6).map(Counter)


class Sink:
    """Records emissions; checks they are consecutive epochs."""

    def __init__(self) -> None:
        self.out: list[tuple[int, dict]] = []

    def __call__(self, epoch: int, snap: Snapshot) -> None:
        if self.out:
            assert epoch == self.out[-1][0] + 1, "epochs must be emitted in order"
        self.out.append((epoch, snap.to_dict()))

    @property
    def epochs(self) -> list[int]:
        return [e for e, _ in self.out]

    def result(self, epoch: int) -> Counter:
        return Counter(dict(self.out)[epoch])


@st.composite
def scenarios(draw):
    n_children = draw(st.integers(0, 3))
    expect_local = draw(st.booleans()) or n_children == 0
    epochs = draw(st.integers(1, 4))
    contributors = (["local"] if expect_local else []) + list(range(1, n_children + 1))
    inputs = {(c, e): draw(WORDS) for c in contributors for e in range(epochs)}
    events = list(inputs)
    events += draw(st.lists(st.sampled_from(events), max_size=5))  # duplicates
    events = draw(st.permutations(events))
    removable = [c for c in contributors if c != "local"]
    remove = None
    if removable and len(contributors) > 1 and draw(st.booleans()):
        remove = (draw(st.sampled_from(removable)), draw(st.integers(0, len(events))))
    return n_children, expect_local, epochs, inputs, events, remove


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_random_arrivals_duplicates_and_removal_match_a_counter(scenario) -> None:
    n_children, expect_local, epochs, inputs, events, remove = scenario
    sink = Sink()
    comb = EpochCombiner(
        job="j", tree=1, expect_local=expect_local, children=range(1, n_children + 1), emit=sink
    )
    merged: dict[int, Counter] = {e: Counter() for e in range(epochs)}
    seen = set()
    for i, (who, epoch) in enumerate(events):
        if remove is not None and i == remove[1]:
            comb.set_children(set(range(1, n_children + 1)) - {remove[0]})
        if remove is not None and who == remove[0] and i >= remove[1]:
            continue  # the removed child failed: its later snapshots never arrive
        emitted_before = epoch in sink.epochs
        snap = snap_of(inputs[(who, epoch)])
        if who == "local":
            res = comb.offer_local(epoch, snap)
        else:
            res = comb.offer_child(who, epoch, snap)
        if emitted_before:
            assert res == "stale"
        elif (who, epoch) in seen:
            assert res == "duplicate"
        else:
            assert res == "merged"
            merged[epoch] += inputs[(who, epoch)]
        seen.add((who, epoch))
    if remove is not None and remove[1] == len(events):
        comb.set_children(set(range(1, n_children + 1)) - {remove[0]})
    # every epoch came out, once, in order, holding exactly what was merged for it
    assert sink.epochs == list(range(epochs))
    assert comb.next_epoch == epochs
    for e in range(epochs):
        assert sink.result(e) == merged[e]
        complete = sum(
            (
                v
                for (who, ep), v in inputs.items()
                if ep == e and (remove is None or who != remove[0])
            ),
            Counter(),
        )
        assert complete <= merged[e]  # nobody but the removed child can be missing
        if remove is None:
            assert sink.result(e) == complete
    assert comb.pending()["open"] == {
        epochs: {"local": False, "received": [], "waiting_for": comb.waiting_for(epochs)}
    }


def test_out_of_order_children_emit_in_order_and_late_ones_are_stale() -> None:
    sink = Sink()
    comb = EpochCombiner(job="j", tree=1, expect_local=True, children=[1, 2], emit=sink)
    for e in (3, 2, 1):
        assert comb.offer_child(1, e, snap_of(["x"])) == "merged"
        assert comb.offer_child(2, e, snap_of(["y"])) == "merged"
        comb.offer_local(e, snap_of(["z"]))
    assert sink.out == []
    p = comb.pending()
    assert p["open"][0]["waiting_for"] == ["local", 1, 2]
    assert p["open"][3] == {"local": True, "received": [1, 2], "waiting_for": []}
    comb.offer_local(0, snap_of(["z"]))
    comb.offer_child(2, 0, snap_of(["y"]))
    assert sink.out == []
    assert comb.offer_child(1, 0, snap_of(["x", "x"])) == "merged"
    assert sink.epochs == [0, 1, 2, 3]
    assert sink.result(0) == Counter(x=2, y=1, z=1)
    assert comb.offer_child(1, 2, snap_of(["x"])) == "stale"
    assert comb.offer_local(1, snap_of(["x"])) == "stale"
    assert comb.counters["stale"] == 1 and comb.counters["stale_local"] == 1
    assert comb.state_of(1, 2) == "stale" and comb.state_of(1, 4) is None


def test_removed_child_stops_blocking_and_new_child_starts_tentatively() -> None:
    sink = Sink()
    comb = EpochCombiner(job="j", tree=1, expect_local=True, children=[1, 2], emit=sink)
    comb.offer_local(0, snap_of(["a"]))
    comb.offer_child(1, 0, snap_of(["b"]))
    comb.offer_local(1, snap_of(["a"]))
    assert sink.out == []
    comb.set_children([1, 3])  # 2 failed; 3 adopted while epochs 0 and 1 are in progress
    assert sink.epochs == [0]  # epoch 0 no longer waits for 2; 3 starts after epoch 1
    assert comb.pending()["children"][3] == {"from": 2, "confirmed": False}
    assert comb.waiting_for(1) == [1]
    assert comb.waiting_for(2) == ["local", 1, 3]
    comb.offer_child(1, 1, snap_of(["b"]))
    assert sink.epochs == [0, 1]
    # 3's first delivery is epoch 4: it fixes its start, so epochs 2 and 3 stop waiting for it
    comb.offer_local(2, snap_of(["a"]))
    comb.offer_child(1, 2, snap_of(["b"]))
    assert sink.epochs == [0, 1]
    assert comb.offer_child(3, 4, snap_of(["c"])) == "merged"
    assert sink.epochs == [0, 1, 2]
    assert comb.pending()["children"][3] == {"from": 4, "confirmed": True}
    comb.offer_local(3, snap_of(["a"]))
    comb.offer_child(1, 3, snap_of(["b"]))
    comb.offer_local(4, snap_of(["a"]))
    comb.offer_child(1, 4, snap_of(["b"]))
    assert sink.epochs == [0, 1, 2, 3, 4]
    assert sink.result(4) == Counter(a=1, b=1, c=1)
    # a sender that is not a child is merged but never waited for
    assert comb.offer_child(99, 5, snap_of(["q"])) == "merged"
    assert comb.counters["merged_unexpected"] == 1
    assert comb.waiting_for(5) == ["local", 1, 3]


def test_children_added_with_a_start_block_every_epoch_from_it() -> None:
    """A new root taking over its dead predecessor's members for the epochs in flight: they
    block from the given start at once (confirmed), even epochs already in progress, and a
    later delivery does not move that start; without a start they would join after them."""
    sink = Sink()
    comb = EpochCombiner(job="j", tree=1, expect_local=True, children=[1], emit=sink)
    comb.offer_local(0, snap_of(["a"]))
    comb.offer_local(1, snap_of(["a"]))  # epochs 0 and 1 in progress, waiting for 1
    comb.set_children([1, 4, 5], start=0)
    assert comb.pending()["children"][4] == {"from": 0, "confirmed": True}
    assert comb.waiting_for(0) == [1, 4, 5]
    comb.offer_child(1, 0, snap_of(["b"]))
    comb.offer_child(4, 0, snap_of(["c"]))
    assert sink.out == []
    comb.offer_child(5, 1, snap_of(["d"]))  # confirmed: epoch 0 still waits for 5
    assert comb.pending()["children"][5] == {"from": 0, "confirmed": True}
    comb.offer_child(5, 0, snap_of(["d"]))
    assert sink.epochs == [0] and sink.result(0) == Counter(a=1, b=1, c=1, d=1)
    comb.set_children([1, 4, 5, 6], start=0)  # never before the next epoch to emit
    assert comb.pending()["children"][6] == {"from": 1, "confirmed": True}
    assert comb.pending()["children"][4] == {"from": 0, "confirmed": True}  # kept as it was


def test_new_child_delivering_an_epoch_in_progress_joins_it() -> None:
    sink = Sink()
    comb = EpochCombiner(job="j", tree=1, expect_local=True, children=[], emit=sink)
    comb.offer_local(1, snap_of(["a"]))  # epoch 1 in progress, epoch 0 waits for local
    comb.set_children([5])
    assert comb.pending()["children"][5]["from"] == 2
    comb.offer_child(5, 0, snap_of(["c"]))  # earlier than its tentative start: joins from 0
    assert comb.waiting_for(1) == [5]
    comb.offer_local(0, snap_of(["a"]))
    assert sink.epochs == [0]
    comb.offer_child(5, 1, snap_of(["c"]))
    assert sink.epochs == [0, 1] and sink.result(1) == Counter(a=1, c=1)


def test_epochs_without_contributors_are_emitted_empty_once_later_data_exists() -> None:
    sink = Sink()
    comb = EpochCombiner(
        job="j", tree=1, expect_local=False, children=[], emit=sink, first_epoch=10
    )
    comb.set_children([7])
    assert comb.waiting_for(10) == [7]
    comb.offer_child(7, 13, snap_of(["w"]))  # 7's data starts at 13: 10-12 are empty here
    assert sink.out == [(10, {}), (11, {}), (12, {}), (13, {"w": 1})]
    comb.set_expect_local(True)
    assert comb.waiting_for(14) == ["local", 7]
    comb.set_expect_local(False)
    assert comb.waiting_for(14) == [7]


def test_incompatible_and_far_ahead_offers_are_refused_without_effect() -> None:
    sink = Sink()
    comb = EpochCombiner(
        job="j", tree=1, expect_local=False, children=[1, 2], emit=sink, max_ahead=5
    )
    comb.offer_child(1, 0, snap_of(["a"]))
    with pytest.raises(ValueError):
        comb.offer_child(2, 0, snap_of(["a"], aggregator="max"))
    assert comb.waiting_for(0) == [2]
    with pytest.raises(EpochTooFarAhead):
        comb.offer_child(2, 6, snap_of(["a"]))
    with pytest.raises(ValueError):
        comb.offer_child(2, -1, snap_of(["a"]))
    comb.offer_child(2, 0, snap_of(["a"]))
    assert sink.out == [(0, {"a": 2})]


async def test_async_emits_run_in_epoch_order_and_failures_do_not_break_it() -> None:
    done: list[int] = []

    async def emit(epoch: int, snap: Snapshot) -> None:
        await asyncio.sleep(0.01 * (3 - epoch % 3))  # later epochs would finish first
        if epoch == 1:
            raise RuntimeError("sink down")
        done.append(epoch)

    comb = EpochCombiner(job="j", tree=1, expect_local=True, children=[], emit=emit)
    for e in (4, 3, 2, 1, 0):
        comb.offer_local(e, snap_of(["a"]))
    await comb.drain()
    assert done == [0, 2, 3, 4]
    assert comb.counters["emit_errors"] == 1


async def test_snapshot_handler_maps_outcomes() -> None:
    sink = Sink()
    comb = EpochCombiner(
        job="wordcount", tree=0xABC, expect_local=False, children=[7], emit=sink, max_ahead=3
    )
    handle = snapshot_handler(lambda n: comb if (n.job, n.tree) == ("wordcount", 0xABC) else None)
    body = snap_of(["a"]).to_bytes()
    assert await handle(name(0), body) == "merged"
    assert await handle(name(0), b"garbage") == "stale"  # refused before decoding
    assert await handle(name(1), body) == "merged"
    with pytest.raises(RetryLater) as ei:
        await handle(name(0, job="other"), body)
    assert ei.value.reason == "unknown_tree"
    with pytest.raises(RetryLater) as ei:
        await handle(name(9), body)
    assert ei.value.reason == "epoch_ahead"
    assert await handle(name(2, sender=8), body) == "merged"  # epoch 2 holds count data
    with pytest.raises(Reject) as ei:
        await handle(name(2), snap_of(["a"], aggregator="max").to_bytes())
    assert (ei.value.status, ei.value.reason) == (409, "incompatible")
    assert sink.epochs == [0, 1]


@st.composite
def join_scenarios(draw):
    n_children = draw(st.integers(0, 2))
    epochs = draw(st.integers(2, 5))
    contributors = ["local", *range(1, n_children + 1)]
    inputs = {(c, e): draw(WORDS) for c in contributors for e in range(epochs)}
    events = draw(
        st.permutations(list(inputs) + draw(st.lists(st.sampled_from(list(inputs)), max_size=3)))
    )
    join_at = draw(st.integers(0, len(events)))
    first = draw(st.integers(0, epochs - 1))
    new_inputs = {(9, e): draw(WORDS) for e in range(first, epochs)}
    # the new child delivers in epoch order, interleaved with the rest after it joined
    slots = sorted(
        draw(
            st.lists(
                st.integers(join_at, len(events)),
                min_size=len(new_inputs),
                max_size=len(new_inputs),
            )
        )
    )
    timeline: list = [("join",)] if join_at == 0 else []
    new_events = list(new_inputs)
    for i, ev in enumerate(events):
        while new_events and slots[len(new_inputs) - len(new_events)] == i:
            timeline.append(new_events.pop(0))
        timeline.append(ev)
        if i + 1 == join_at:
            timeline.append(("join",))
    timeline += new_events
    return n_children, epochs, {**inputs, **new_inputs}, timeline, first


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(join_scenarios())
def test_a_child_added_mid_stream_is_waited_for_from_its_start(scenario) -> None:
    n_children, epochs, inputs, timeline, first = scenario
    sink = Sink()
    comb = EpochCombiner(
        job="j", tree=1, expect_local=True, children=range(1, n_children + 1), emit=sink
    )
    merged: dict[int, Counter] = {e: Counter() for e in range(epochs)}
    tentative = None
    for ev in timeline:
        if ev == ("join",):
            comb.set_children([*range(1, n_children + 1), 9])
            tentative = comb.pending()["children"][9]["from"]
            continue
        who, epoch = ev
        snap = snap_of(inputs[ev])
        res = (
            comb.offer_local(epoch, snap) if who == "local" else comb.offer_child(who, epoch, snap)
        )
        if res == "merged":
            merged[epoch] += inputs[ev]
        else:
            assert res in ("duplicate", "stale")
            assert res == "duplicate" or epoch < comb.next_epoch
    assert sink.epochs == list(range(epochs))
    for e in range(epochs):
        assert sink.result(e) == merged[e]
        old = sum((v for (who, ep), v in inputs.items() if ep == e and who != 9), Counter())
        assert old <= merged[e]  # the children it had and the local input: always complete
        if e >= max(tentative, first):
            assert inputs[(9, e)] <= merged[e]  # waited for from its (tentative) start


def test_floating_start_begins_at_the_lowest_epoch_offered_before_the_first_emit() -> None:
    base = 1_763_700_000  # absolute event-time epoch indices are large
    sink = Sink()
    comb = EpochCombiner(
        job="j", tree=1, expect_local=True, children=[7, 8], emit=sink, first_epoch=None
    )
    assert comb.offer_child(7, base + 2, snap_of(["a"])) == "merged"
    assert comb.state_of(8, base + 1) is None  # nothing emitted yet: lower epochs are welcome
    assert comb.offer_child(8, base + 1, snap_of(["b"])) == "merged"
    assert comb.next_epoch == base + 1
    comb.offer_local(base + 1, snap_of(["c"]))
    assert sink.out == [(base + 1, {"b": 1, "c": 1})]  # child 7 starts at base + 2
    comb.offer_local(base + 2, snap_of(["c"]))
    assert comb.offer_child(8, base + 2, snap_of(["b"])) == "merged"
    assert sink.epochs == [base + 1, base + 2]
    assert sink.result(base + 2) == Counter(a=1, b=1, c=1)
    assert comb.offer_child(7, base, snap_of(["a"])) == "stale"  # floating ended at the emit
