"""``agent/runtime/recovery/commit_lag.py``: the smoothed commit lag that times checkpoint
rounds and laggard probes. Checked against a reference written from RFC 6298's equations,
and for its bounds."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from agent.runtime.recovery.commit_lag import IGNORED_ABOVE, INITIAL_WAIT, CommitLag

lags = st.lists(st.floats(min_value=-5.0, max_value=2 * IGNORED_ABOVE), max_size=60)


def reference(observed: list[float], floor: float, cap: float) -> float:
    srtt = rttvar = None
    for r in observed:
        if not 0.0 <= r <= IGNORED_ABOVE:
            continue
        if srtt is None:
            srtt, rttvar = r, r / 2
        else:
            rttvar = (1 - 1 / 4) * rttvar + 1 / 4 * abs(srtt - r)
            srtt = (1 - 1 / 8) * srtt + 1 / 8 * r
    if srtt is None:
        return max(floor, min(cap, INITIAL_WAIT))
    return max(floor, min(cap, srtt + 4 * rttvar))


@given(lags, st.floats(0.0, 1.0), st.floats(1.0, 10.0))
def test_the_wait_is_rfc_6298s_timer_clamped(observed: list[float], floor: float, cap: float):
    lag = CommitLag()
    for r in observed:
        lag.observe(r)
    wait = lag.wait(floor, cap)
    assert abs(wait - reference(observed, floor, cap)) < 1e-9
    assert floor <= wait <= max(floor, cap)


def test_steady_commits_bring_the_wait_down_to_their_lag_and_late_ones_push_it_up() -> None:
    lag = CommitLag()
    assert lag.wait(0.25, 5.0) == INITIAL_WAIT  # nothing heard yet: RFC 6298's 1 s
    for _ in range(40):
        lag.observe(0.6)
    assert 0.6 <= lag.wait(0.25, 5.0) < 0.65  # steady: just above the lag itself
    for _ in range(3):
        lag.observe(2.0)
    assert lag.wait(0.25, 5.0) > 2.0  # late commits: the timers wait longer
    lag.observe(IGNORED_ABOVE + 1)  # a catch-up's old epoch says nothing of the pace
    assert lag.status()["observed"] == 43
