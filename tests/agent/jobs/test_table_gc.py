"""Stopped jobs leave the job table after a TTL and never come back (issue 13, finding 7).

Unit tests of ``JobTable`` with a fake clock, and a hypothesis model of several agents'
tables exchanging multicasts and anti-entropy snapshots in any order: once a stopped job is
collected, no exchange resurrects it, a resubmission of its name wins everywhere, and after a
final exchange all tables agree.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.jobs.table import RUNNING, STOPPED, JobEntry, JobTable, Tombstone

TTL = 10.0
KEEP = 100.0


class Clock:
    def __init__(self, t: float = 1000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def table(clock: Clock, **kw: Any) -> JobTable:
    return JobTable(stopped_ttl=TTL, tombstone_seconds=KEEP, clock=clock, **kw)


def running(name: str, version: int) -> JobEntry:
    return JobEntry(name, {"name": name, "v": version}, RUNNING, version)


def stopped(name: str, version: int, at: float) -> JobEntry:
    return JobEntry(name, {"name": name}, STOPPED, version, at)


def test_a_stopped_job_is_collected_after_its_ttl_and_leaves_a_tombstone() -> None:
    clock = Clock()
    t = table(clock)
    t.apply(running("a", 1))
    t.apply(stopped("a", 2, clock.t))
    assert t.collect() == [] and "a" in t
    clock.t += TTL
    assert [e.name for e in t.collect()] == ["a"]
    assert "a" not in t and t.entries() == []
    assert t.tombstone("a") == Tombstone("a", 2, 1000.0)
    assert t.stats() == {"entries": 0, "stopped": 0, "tombstones": 1, "collected": 1}
    assert t.removed() == [{"name": "a", "version": 2, "stopped_at": 1000.0}]
    clock.t += KEEP
    t.collect()
    assert t.tombstone("a") is None  # forgotten after tombstone_seconds more


def test_running_jobs_are_never_collected() -> None:
    clock = Clock()
    t = table(clock)
    t.apply(running("a", 1))
    clock.t += 10 * KEEP
    assert t.collect() == [] and t.get("a") == running("a", 1)


def test_stale_entries_cannot_resurrect_a_collected_job() -> None:
    clock = Clock()
    t = table(clock)
    t.apply(running("a", 1))
    t.apply(stopped("a", 2, clock.t))
    clock.t += TTL
    t.collect()
    # an agent that missed the stop, and one that has not collected yet, resync with us
    assert t.merge([running("a", 1).to_wire()]) == []
    assert t.merge([stopped("a", 2, clock.t - TTL).to_wire()]) == []
    assert not t.apply(running("a", 1))
    assert "a" not in t


def test_a_new_job_of_the_same_name_continues_after_the_tombstone() -> None:
    clock = Clock()
    t = table(clock)
    t.apply(running("a", 1))
    t.apply(stopped("a", 2, clock.t))
    clock.t += TTL
    t.collect()
    assert t.next_version("a") == 3
    assert t.apply(running("a", 3))
    assert t.get("a") == running("a", 3) and t.tombstone("a") is None
    assert not t.apply(running("a", 1))  # the old job's entries are still older


def test_an_unstamped_stop_is_stamped_on_arrival() -> None:
    clock = Clock(50.0)
    t = table(clock)
    t.apply(JobEntry("a", {}, STOPPED, 2))
    assert t.get("a").stopped_at == 50.0  # type: ignore[union-attr]


def test_a_stop_already_past_its_ttl_becomes_a_tombstone_at_once() -> None:
    clock = Clock()
    t = table(clock)
    t.apply(running("a", 1))
    assert t.apply(stopped("a", 2, clock.t - 2 * TTL))  # changed: the job must stop here
    assert "a" not in t and t.tombstone("a") == Tombstone("a", 2, clock.t - 2 * TTL)


def test_tombstones_from_a_peer_remove_what_they_cover() -> None:
    clock = Clock()
    t = table(clock)
    t.apply(running("a", 1))  # this agent missed a's stop and its collection
    t.apply(running("b", 5))  # b was resubmitted after the tombstone peers still hold
    gone = t.merge_removed(
        [
            {"name": "a", "version": 2, "stopped_at": clock.t - TTL},
            {"name": "b", "version": 4, "stopped_at": clock.t - TTL},
            {"name": "c", "version": 7, "stopped_at": clock.t - TTL - KEEP - 1},  # expired
        ]
    )
    assert [(e.name, e.state, e.version) for e in gone] == [("a", STOPPED, 2)]
    assert "a" not in t and t.get("b") == running("b", 5)
    assert t.tombstone("a") is not None and t.tombstone("c") is None
    assert not t.apply(running("a", 2))


@pytest.mark.parametrize(
    "bad",
    [
        {"name": "a", "version": 0, "stopped_at": 1.0},
        {"name": "a", "version": 1, "stopped_at": "x"},
        {"name": "a", "version": 1, "stopped_at": float("nan")},
        {"name": 3, "version": 1, "stopped_at": 1.0},
        "a",
    ],
)
def test_malformed_tombstones_are_refused_before_anything_applies(bad: Any) -> None:
    clock = Clock()
    t = table(clock)
    t.apply(running("a", 1))
    with pytest.raises(ValueError):
        t.merge_removed([{"name": "a", "version": 3, "stopped_at": clock.t}, bad])
    assert t.get("a") == running("a", 1)
    with pytest.raises(ValueError):
        JobEntry.from_wire({**stopped("a", 2, 1.0).to_wire(), "stopped_at": -1})


def test_tombstones_are_bounded_oldest_first() -> None:
    clock = Clock()
    t = table(clock, max_tombstones=3)
    for i in range(5):
        t.apply(stopped(f"j{i}", 1, clock.t - TTL - 5 + i))
    assert [x["name"] for x in t.removed()] == ["j2", "j3", "j4"]


def test_wire_round_trip_keeps_the_stamp() -> None:
    entry = stopped("a", 2, 123.5)
    assert JobEntry.from_wire(entry.to_wire()) == entry
    assert "stopped_at" not in running("a", 1).to_wire()


# ---- a model of several agents exchanging table changes in any order ----------------------
AGENTS = 3
op = st.one_of(
    st.tuples(st.just("submit"), st.sampled_from("xy")),
    st.tuples(st.just("stop"), st.sampled_from("xy")),
    st.tuples(st.just("deliver"), st.integers(0, 50), st.integers(1, AGENTS - 1)),
    st.tuples(st.just("resync"), st.integers(0, AGENTS - 1), st.integers(0, AGENTS - 1)),
    st.tuples(st.just("tick"), st.floats(0, 2 * TTL)),
    st.tuples(st.just("collect"), st.integers(0, AGENTS - 1)),
)


def _resync(dst: JobTable, src: JobTable) -> None:
    dst.merge_removed(src.removed())
    dst.merge(src.snapshot())


@settings(max_examples=300, deadline=None)
@given(st.lists(op, max_size=40))
def test_no_exchange_order_resurrects_a_collected_job(ops: list[tuple[Any, ...]]) -> None:
    clock = Clock()
    tables = [table(clock) for _ in range(AGENTS)]
    root = tables[0]  # the jobs-tree root: versions every change, as the agent does
    sent: list[JobEntry] = []  # multicasts in flight, delivered in any order or never
    collected: dict[str, int] = {}  # name -> version a table collected (its stop)
    for o in ops:
        if o[0] in ("submit", "stop"):
            name = o[1]
            current = root.get(name)
            if o[0] == "submit" and (current is None or current.state == STOPPED):
                entry = running(name, root.next_version(name))
            elif o[0] == "stop" and current is not None and current.state == RUNNING:
                entry = stopped(name, current.version + 1, clock.t)
            else:
                continue
            root.apply(entry)
            sent.append(entry)
        elif o[0] == "deliver" and sent:
            tables[o[2]].apply(sent[o[1] % len(sent)])
        elif o[0] == "resync":
            _resync(tables[o[1]], tables[o[2]])
        elif o[0] == "tick":
            clock.t += o[1]
        elif o[0] == "collect":
            for e in tables[o[1]].collect():
                collected[e.name] = max(collected.get(e.name, 0), e.version)
        for t in tables:  # never: an entry at or below a version some table collected
            for e in t.entries():
                assert e.version > collected.get(e.name, 0) or t.tombstone(e.name) is None
                tomb = t.tombstone(e.name)
                assert tomb is None or e.version > tomb.version
    # a final anti-entropy round (everyone with the root, both ways) converges
    for t in tables[1:]:
        _resync(root, t)
    for t in tables[1:]:
        _resync(t, root)
    clock.t += TTL
    for t in tables:
        t.collect()
    want = [(e.name, e.state, e.version) for e in root.entries()]
    for t in tables:
        assert [(e.name, e.state, e.version) for e in t.entries()] == want
        assert all(e.state == RUNNING for e in t.entries())  # every stop was collected
    for name, version in collected.items():
        for t in tables:
            e = t.get(name)
            assert e is None or e.version > version  # only a newer submission of the name
