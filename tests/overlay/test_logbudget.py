"""LogBudget: a burst per key per interval reaches the log, the rest are counted and reported
with the next record let through; keys are bounded."""

from __future__ import annotations

import logging

import pytest
from hypothesis import given
from hypothesis import strategies as st

from overlay.logbudget import LogBudget


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_burst_then_suppressed_then_reported(caplog: pytest.LogCaptureFixture) -> None:
    log = logging.getLogger("test.logbudget")
    clock = Clock()
    budget = LogBudget(log, burst=3, interval=10.0, clock=clock)
    with caplog.at_level(logging.WARNING, logger="test.logbudget"):
        logged = [budget.warning("refused", "refused %d", i) for i in range(10)]
        assert logged == [True] * 3 + [False] * 7
        assert budget.warning("other", "another kind") is True  # keys are separate
        clock.now = 10.0
        assert budget.warning("refused", "refused %d", 10) is True
    messages = [r.getMessage() for r in caplog.records]
    assert messages == [
        "refused 0",
        "refused 1",
        "refused 2",
        "another kind",
        "refused 10 [7 similar suppressed]",
    ]
    assert budget.suppressed_total == 7


def test_keys_are_bounded() -> None:
    budget = LogBudget(logging.getLogger("test.logbudget"), burst=1, max_keys=4)
    for i in range(100):
        budget.warning(f"k{i}", "x")
    assert len(budget._windows) == 4


@given(st.lists(st.tuples(st.sampled_from("abc"), st.floats(0, 5)), max_size=200))
def test_every_event_is_logged_or_counted(events: list[tuple[str, float]]) -> None:
    """Nothing is lost: logged + suppressed = events, and no key logs more than its burst in
    any one window."""
    clock = Clock()
    budget = LogBudget(logging.getLogger("test.logbudget.prop"), burst=2, interval=3.0, clock=clock)
    logged = 0
    for key, step in events:
        clock.now += step
        logged += budget.warning(key, "event")
    assert logged + budget.suppressed_total == len(events)
