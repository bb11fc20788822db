"""EpochSchedule (runtime epoch-length changes) and the clock/worker using it."""

from __future__ import annotations

import math
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import apps.wordcount  # noqa: F401  (registers the wordcount job class)
from agent.jobs.job import create_job
from agent.jobs.schedule import EpochSchedule
from agent.jobs.spec import JobSpec, JobSpecError
from agent.runtime.epochs.clock import EpochClock

lengths = st.sampled_from([0.25, 0.5, 1.0, 2.0, 3.0, 5.0, 10.0, 60.0])


@st.composite
def schedules(draw: st.DrawFn) -> EpochSchedule:
    schedule = EpochSchedule(draw(lengths))
    t = draw(st.floats(0, 1e6))
    for _ in range(draw(st.integers(0, 4))):
        t += draw(st.floats(0, 1e4))
        schedule = schedule.switched(draw(lengths), t)
    return schedule


@settings(max_examples=200, deadline=None)
@given(schedules(), st.lists(st.floats(0, 2e6), min_size=1, max_size=50))
def test_every_time_falls_in_its_epoch_and_indices_are_monotone(
    schedule: EpochSchedule, times: list[float]
) -> None:
    times.sort()
    epochs = [schedule.epoch_of(t) for t in times]
    assert epochs == sorted(epochs)
    for t, e in zip(times, epochs, strict=True):
        assert schedule.start(e) - 1e-6 <= t < schedule.end(e) + 1e-6
        assert math.isclose(schedule.end(e), schedule.start(e + 1), abs_tol=1e-6)
        assert math.isclose(schedule.end(e) - schedule.start(e), schedule.seconds_of(e))


@settings(max_examples=200, deadline=None)
@given(schedules(), lengths, st.floats(0, 2e6), st.lists(st.floats(0, 2e6), max_size=30))
def test_a_switch_leaves_earlier_epochs_alone_and_starts_on_a_boundary(
    schedule: EpochSchedule, seconds: float, not_before: float, times: list[float]
) -> None:
    new = schedule.switched(seconds, not_before)
    first, length = new.changes[-1]
    assert length == seconds
    floor = schedule.changes[-1][0] if schedule.changes else 0
    assert new.start(first) >= not_before - 1e-6 or first == floor + 1
    # the switch is an epoch boundary of the old schedule
    assert math.isclose(new.start(first), schedule.start(first), abs_tol=1e-6)
    for t in times:
        if t < new.start(first):
            assert new.epoch_of(t) == schedule.epoch_of(t)
    assert EpochSchedule.parse(new.base, new.to_wire()) == new


def test_wire_form_is_validated_with_a_message() -> None:
    with pytest.raises(ValueError, match="increasing"):
        EpochSchedule.parse(1.0, [[10, 2.0], [5, 1.0]])
    with pytest.raises(ValueError, match="pairs"):
        EpochSchedule.parse(1.0, "soon")
    with pytest.raises(ValueError, match=r"\[first_epoch"):
        EpochSchedule.parse(1.0, [[10, 0]])
    with pytest.raises(JobSpecError, match="window job"):
        JobSpec.from_dict(
            {
                "name": "w",
                "creator": "c",
                "job_class": "wordcount",
                "mode": "window",
                "window_size": 2,
                "epoch_schedule": [[10, 2.0]],
            }
        )


def test_clock_cuts_new_lengths_and_reconfigures_lateness() -> None:
    now = [1000.0]
    clock = EpochClock(1.0, 0.0, None, lambda: now[0])
    assert clock.assign(1000.5) == 1000
    schedule = clock.schedule.switched(4.0, 1002.0)  # epochs 1002.. last 4 s
    clock.reconfigure(schedule=schedule, allowed_lateness=2.0, idle_timeout=None, max_future=None)
    assert clock.assign(1001.2) == 1001
    assert clock.assign(1005.9) == 1002  # [1002, 1006)
    assert clock.assign(1006.0) == 1003
    assert clock.closable() == [1000, 1001]  # watermark 1006 - 2 s of lateness
    clock.close(1000)
    clock.close(1001)
    assert clock.assign(1007.0) == 1003
    clock.advance_to(1010.0)
    assert clock.closable() == [1002, 1003]


def wordcount(epoch_seconds: float, changes: list[list[float]] | None = None) -> JobSpec:
    return JobSpec.from_dict(
        {
            "name": "wc",
            "creator": "t",
            "job_class": "wordcount",
            "epoch_seconds": epoch_seconds,
            "allowed_lateness": 100.0,
            "epoch_schedule": changes or [],
        }
    )


def test_worker_moves_open_epochs_the_new_lengths_cut_differently() -> None:
    from agent.runtime.epochs.worker import Worker

    old = wordcount(1.0)
    worker = Worker(create_job(old), wall_clock=lambda: 2000.0)
    lines = [(2000.2, "a b"), (2003.5, "b"), (2004.5, "c c"), (2005.5, "d")]
    worker.process([{"ts": ts, "line": text} for ts, text in lines])  # epochs 2000..2005
    new = wordcount(1.0, old.schedule.switched(2.0, 2002.0).to_wire())  # 2002.. last 2 s
    worker.replace_job(create_job(new))
    worker.process([{"ts": 2006.5, "line": "e"}])
    got = {e: Counter(s.to_dict()) for e, s in worker.finish() if s.to_dict()}
    assert worker.stats()["epochs_rebucketed"] >= 2
    expected: dict[int, Counter[str]] = {}
    for ts, text in [*lines, (2006.5, "e")]:  # reference: cut by the new schedule
        expected.setdefault(new.schedule.epoch_of(ts), Counter()).update(text.split())
    assert got == expected
    assert new.schedule.epoch_of(2005.5) == 2003 and new.schedule.start(2003) == 2004.0
