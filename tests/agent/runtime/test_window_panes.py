"""Which snapshots an agent contributes as its whole share (agent/runtime/epochs/window_panes.py):
a window job resumed or started mid-window never counts a window short of a pane as whole;
the rule is checked against a brute-force count of the panes each window needs and holds."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from agent.jobs.spec import JobSpec
from agent.runtime.epochs.window_panes import whole_share


def spec(start: int | None, *, size: int = 3, slide: int = 1) -> JobSpec:
    doc = {"name": "win", "creator": "t", "job_class": "wordcount", "start_epoch": start}
    if size > 1:
        doc |= {"mode": "window", "window_size": size, "window_slide": slide}
    return JobSpec.from_dict(doc)


def test_a_resumed_window_job_flags_its_first_windows() -> None:
    """Submitted at 100, resumed at 944 (committed 945, window 3): the windows ending 944 and
    945 hold only the panes from 944 on - flagged; 946 (944..946) is whole again."""
    resumed = spec(944)
    got = {e: whole_share(resumed, e, submitted_start=100) for e in range(944, 949)}
    assert got == {944: False, 945: False, 946: True, 947: True, 948: True}


def test_a_job_s_own_first_windows_are_whole() -> None:
    """Nothing before the submitted start exists anywhere: the first windows are complete."""
    fresh = spec(100)
    assert all(whole_share(fresh, e, submitted_start=100) for e in range(100, 106))


def test_incomplete_panes_spoil_every_window_holding_them() -> None:
    """A job started on an input other jobs had read, without a re-read: panes up to 102 are
    incomplete, so are the windows ending 103 and 104 that hold pane 102."""
    fresh = spec(100)
    got = [
        whole_share(fresh, e, submitted_start=100, incomplete_until=102) for e in range(100, 107)
    ]
    assert got == [False, False, False, False, False, True, True]
    plain = spec(100, size=1)  # outside window mode: only the incomplete epochs themselves
    got = [
        whole_share(plain, e, submitted_start=100, incomplete_until=102) for e in range(100, 105)
    ]
    assert got == [False, False, False, True, True]


@given(
    submitted=st.integers(0, 40),
    shift=st.integers(0, 10),
    incomplete=st.none() | st.integers(0, 60),
    size=st.integers(1, 6),
    data=st.data(),
)
def test_whole_share_matches_the_panes_each_window_needs(
    submitted: int, shift: int, incomplete: int | None, size: int, data: st.DataObject
) -> None:
    slide = data.draw(st.integers(1, size))
    running = spec(submitted + shift, size=size, slide=slide)
    held = {
        e for e in range(submitted + shift, submitted + 80) if incomplete is None or e > incomplete
    }
    for epoch in range(submitted + shift, submitted + 70):
        bounds = running.window_bounds(epoch) or (epoch, epoch)
        needed = set(range(max(bounds[0], submitted), bounds[1] + 1))
        assert whole_share(
            running, epoch, submitted_start=submitted, incomplete_until=incomplete
        ) == (needed <= held), epoch
