"""``EpochClock.close_due``: when the next epoch closes if no record arrives. The agent ticks
a job whose inputs are all pushed at that time instead of every ``tick_seconds`` (issue "A
lightweight agent"), so the time must be exact: never later than the moment
``closable()`` lists an epoch (an epoch would close late), and not earlier than needed
(ticks for nothing). Checked by a hypothesis property over random record and wall-clock
sequences: at ``due`` (plus the tick loop's slack) an epoch is closable, or, before the first
open epoch is fixed, the next due time is; at any moment before ``due`` none is."""

from __future__ import annotations

import copy
import math

from hypothesis import given, settings
from hypothesis import strategies as st

from agent.runtime.epochs.clock import EpochClock
from agent.runtime.host.ticks import DUE_SLACK


class FakeClock:
    def __init__(self, t: float = 0.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def closable_at(clock: EpochClock, wall: FakeClock, t: float) -> list[int]:
    """What ``closable()`` lists at wall time ``t`` with no record meanwhile (on a copy:
    the real clock stays where it is)."""
    twin, wall2 = copy.deepcopy((clock, wall))  # one copy: the twin reads the twin wall
    wall2.t = t
    return twin.closable()


STEPS = st.lists(
    st.one_of(
        st.tuples(st.just("wait"), st.floats(0, 5)),
        st.tuples(st.just("record"), st.floats(-3, 3)),  # event time relative to the wall
        st.tuples(st.just("close"), st.just(0.0)),
    ),
    max_size=25,
)


@settings(max_examples=300, deadline=None)
@given(
    steps=STEPS,
    epoch=st.sampled_from([0.5, 1.0, 2.0, 10.0]),
    lateness=st.sampled_from([0.0, 0.5, 2.0]),
    idle=st.sampled_from([None, 0.5, 1.0, 3.0]),
    start=st.floats(1e3, 1e9),
)
def test_close_due_is_when_an_epoch_becomes_closable(
    steps: list[tuple[str, float]],
    epoch: float,
    lateness: float,
    idle: float | None,
    start: float,
) -> None:
    wall = FakeClock(start)
    clock = EpochClock(epoch, allowed_lateness=lateness, idle_timeout=idle, clock=wall)
    for kind, x in steps:
        if kind == "wait":
            wall.t += x
        elif kind == "record":
            clock.assign(wall.t + x)
        else:
            for e in clock.closable(limit=2):
                clock.close(e)
        now = wall.t
        due = clock.close_due(now)
        if clock.closable():
            assert due <= now
            continue
        if due == math.inf:
            assert idle is None
            assert not closable_at(clock, wall, now + 1e6)
            continue
        assert due > now
        for frac in (0.0, 0.5, 0.999):  # nothing closes before it is due
            # strictly before due as a float: near 1e8 s a float's step (~1.5e-8) is coarser
            # than the 1e-9 margin, and now + margin alone could round up to due itself
            before = min(now + (due - now) * frac - 1e-9, math.nextafter(due, -math.inf))
            assert not closable_at(clock, wall, before)
        if closable_at(clock, wall, due + DUE_SLACK):
            continue
        # before the first open epoch is fixed: due is when the source turns idle; the tick
        # then fixes it, and the next due time has an epoch closable
        assert clock.next_epoch is None
        twin, twin_wall = copy.deepcopy((clock, wall))
        twin_wall.t = due + DUE_SLACK
        again = twin.close_due()
        assert again > twin_wall.t and twin.next_epoch is not None
        twin_wall.t = again + DUE_SLACK
        assert twin.closable()


def test_a_record_only_delays_the_idle_close() -> None:
    wall = FakeClock(100.0)
    clock = EpochClock(1.0, allowed_lateness=0.5, idle_timeout=1.0, clock=wall)
    clock.assign(100.2)
    assert clock.close_due() == max(100.0 + 1.0, 101.0 + 0.5)
    wall.t = 100.9
    clock.assign(100.9)
    assert clock.close_due() == 101.9  # idle from 100.9 + 1.0; epoch 100 ends at 101
    clock.assign(101.7)  # the watermark passes 101: epoch 100 closable now
    assert clock.close_due() == wall.t
