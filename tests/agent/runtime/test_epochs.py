"""EpochClock: assignment, watermark, idle advance, lateness policy, closing order.

A hypothesis property test drives random record/clock sequences through the clock and through a
brute-force reference that recomputes everything from the full history.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.runtime.epochs.clock import EpochClock


class FakeClock:
    def __init__(self, t: float = 0.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def test_assign_floors_and_in_order_records_are_never_late() -> None:
    clock = EpochClock(10, allowed_lateness=0, clock=FakeClock(0))
    assert [clock.assign(t) for t in (0, 9.99, 10, 25, -0.5)] == [0, 0, 1, 2, None]
    assert clock.watermark == 25
    assert clock.closable() == [0, 1]
    assert clock.stats()["late_dropped"] == 1


def test_out_of_order_within_lateness_is_accepted_and_beyond_is_dropped() -> None:
    clock = EpochClock(10, allowed_lateness=15, clock=FakeClock(0))
    assert clock.assign(100) == 10
    assert clock.watermark == 85
    assert clock.assign(86) == 8  # epoch 8 ends at 90 > 85: still open
    assert clock.assign(79.9) is None  # epoch 7 ends at 80 <= 85: late
    # the first open epoch moved back to 8 because nothing was closed yet
    assert clock.next_epoch == 8
    assert clock.closable() == []  # epoch 8 ends at 90 > 85
    assert clock.assign(115) == 11
    assert clock.closable() == [8, 9]
    clock.close(8)
    assert clock.assign(89) is None  # epoch 8 closed
    assert clock.stats()["late_dropped"] == 2


def test_empty_epochs_close_too_and_close_is_in_order() -> None:
    clock = EpochClock(1, clock=FakeClock(0))
    clock.assign(3.5)
    clock.assign(9.2)
    assert clock.closable() == [3, 4, 5, 6, 7, 8]
    with pytest.raises(ValueError, match="in order"):
        clock.close(5)
    for e in clock.closable():
        clock.close(e)
    assert clock.closable() == []
    with pytest.raises(ValueError, match="after the watermark"):
        clock.close(9)
    assert clock.stats()["epochs_closed"] == 6


def test_idle_source_advances_with_wall_clock() -> None:
    wall = FakeClock(1000.0)
    clock = EpochClock(10, allowed_lateness=5, idle_timeout=3, clock=wall)
    assert clock.closable() == []
    assert clock.assign(1001) == 100
    assert clock.watermark == 996
    wall.t = 1002.9
    assert not clock.idle and clock.closable() == []
    wall.t = 1004.0  # 3 s without records: watermark follows the wall clock
    assert clock.idle
    assert clock.watermark == 999
    wall.t = 1031.0
    assert clock.closable() == [100, 101]  # wm 1026 closes the epochs ending at 1010, 1020
    # a record arriving now resets idleness but the watermark never goes back
    assert clock.assign(1021) == 102
    assert clock.watermark == 1026


def test_idle_source_without_any_record_starts_at_the_wall_clock_epoch() -> None:
    wall = FakeClock(500.0)
    clock = EpochClock(10, idle_timeout=1, clock=wall)
    wall.t = 501.0
    assert clock.closable() == []
    assert clock.next_epoch == 50
    wall.t = 531.0
    assert clock.closable() == [50, 51, 52]


def test_start_epoch_drops_earlier_records_and_closes_from_there() -> None:
    clock = EpochClock(10, start_epoch=5, clock=FakeClock(0))
    assert clock.assign(49) is None
    assert clock.assign(75) == 7
    assert clock.closable() == [5, 6]


def test_future_records_are_dropped_when_max_future_is_set() -> None:
    clock = EpochClock(1, clock=FakeClock(100.0), max_future=60)
    assert clock.assign(10_000) is None
    assert clock.assign(150) == 150
    stats = clock.stats()
    assert stats["future_dropped"] == 1 and stats["max_event_time"] == 150


def test_closable_limit_bounds_the_work_per_call() -> None:
    clock = EpochClock(1, clock=FakeClock(0))
    clock.assign(0.5)
    clock.assign(100_000.5)
    assert clock.closable(3) == [0, 1, 2]
    for e in clock.closable(3):
        clock.close(e)
    assert clock.closable(2) == [3, 4]
    assert len(clock.closable()) == 100_000 - 3


def test_advance_to_closes_everything_at_end_of_input() -> None:
    clock = EpochClock(2, allowed_lateness=100, clock=FakeClock(0))
    clock.assign(1)
    clock.assign(7)
    assert clock.closable() == []
    clock.advance_to(8)
    assert clock.closable() == [0, 1, 2, 3]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"epoch_seconds": 0},
        {"epoch_seconds": math.nan},
        {"epoch_seconds": 1, "allowed_lateness": -1},
        {"epoch_seconds": 1, "idle_timeout": 0},
        {"epoch_seconds": 1, "start_epoch": 1.5},
        {"epoch_seconds": True},
    ],
)
def test_bad_parameters_are_rejected(kwargs: dict) -> None:
    with pytest.raises(ValueError):
        EpochClock(**kwargs)


@pytest.mark.parametrize("ts", [math.nan, math.inf, "12", None, True])
def test_bad_timestamps_raise(ts: object) -> None:
    with pytest.raises(ValueError, match="finite number"):
        EpochClock(1, clock=FakeClock(0)).assign(ts)  # type: ignore[arg-type]


# ---- property test against a brute-force reference ----------------------------------------


class Reference:
    """Recomputes the watermark from the whole history at every step."""

    def __init__(self, e: float, lateness: float, idle: float | None, t0: float) -> None:
        self.e, self.lateness, self.idle = e, lateness, idle
        self.accepted: list[tuple[float, float]] = []  # (arrival wall time, ts)
        self.raised: list[float] = []  # ts of every record that raised the max event time
        self.ticks: list[float] = []  # wall-clock watermark candidates
        self.t0 = t0
        self.closed: list[int] = []
        self.first: int | None = None

    def wm(self) -> float:
        cands = [ts - self.lateness for ts in self.raised] + self.ticks
        return max(cands, default=-math.inf)

    def tick(self, now: float) -> None:
        last = self.accepted[-1][0] if self.accepted else self.t0
        if self.idle is not None and now - last >= self.idle:
            self.ticks.append(now - self.lateness)
            if self.first is None:
                self.first = math.floor(self.wm() / self.e)

    def assign(self, ts: float, now: float) -> int | None:
        # no idle advance while assigning: only when the watermark is read (closable)
        epoch = math.floor(ts / self.e)
        if self.closed and epoch <= self.closed[-1]:
            return None
        if ts > max(self.raised, default=-math.inf):
            self.raised.append(ts)
        if (epoch + 1) * self.e <= self.wm():
            return None
        self.accepted.append((now, ts))
        if self.first is None or (not self.closed and epoch < self.first):
            self.first = epoch
        return epoch

    def closable(self, now: float) -> list[int]:
        self.tick(now)
        if self.first is None:
            return []
        start = self.closed[-1] + 1 if self.closed else self.first
        out = []
        e = start
        while (e + 1) * self.e <= self.wm():
            out.append(e)
            e += 1
        return out


ops = st.lists(
    st.one_of(
        st.tuples(st.just("rec"), st.floats(0, 200, allow_nan=False), st.floats(0, 3)),
        st.tuples(st.just("poll"), st.just(0.0), st.floats(0, 10)),
        st.tuples(st.just("close"), st.just(0.0), st.floats(0, 3)),
    ),
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(
    ops=ops,
    e=st.sampled_from([1.0, 2.5, 10.0]),
    lateness=st.sampled_from([0.0, 3.0, 25.0]),
    idle=st.sampled_from([None, 2.0, 7.0]),
)
def test_matches_reference(ops, e, lateness, idle) -> None:
    wall = FakeClock(0.0)
    clock = EpochClock(e, allowed_lateness=lateness, idle_timeout=idle, clock=wall)
    ref = Reference(e, lateness, idle, 0.0)
    last_wm = -math.inf
    per_epoch: dict[int, int] = {}
    for kind, ts, dt in ops:
        wall.t += dt
        if kind == "rec":
            got = clock.assign(ts)
            assert got == ref.assign(ts, wall.t)
            if got is not None:
                assert got not in ref.closed
                per_epoch[got] = per_epoch.get(got, 0) + 1
        elif kind == "poll":
            assert clock.closable() == ref.closable(wall.t)
        else:
            todo = clock.closable()
            assert todo == ref.closable(wall.t)
            for epoch in todo[:2]:
                clock.close(epoch)
                ref.closed.append(epoch)
        wm = clock.watermark  # reading it runs the idle check: so does the reference
        ref.tick(wall.t)
        assert wm == ref.wm()
        assert wm >= last_wm
        last_wm = wm
    # closed epochs are consecutive, and no record was accepted into a closed epoch afterwards
    if ref.closed:
        assert ref.closed == list(range(ref.closed[0], ref.closed[0] + len(ref.closed)))
    stats = clock.stats()
    assert stats["assigned"] == sum(per_epoch.values())
    assert stats["assigned"] + stats["late_dropped"] == sum(1 for op in ops if op[0] == "rec")
