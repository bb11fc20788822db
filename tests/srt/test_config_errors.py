"""srt.Tunables (defaults, derived timeouts, validation) and the SRTError hierarchy."""

from __future__ import annotations

import dataclasses

import pytest

import srt
from srt.dataplane.auth import AuthError
from srt.dataplane.barrier import EpochTooFarAhead


def test_tree_timeouts_default_to_the_agents_rule() -> None:
    t = srt.Tunables()
    assert (t.heartbeat_interval, t.tree_parent_timeout, t.tree_child_timeout) == (1.0, 3.5, 3.5)
    fast = srt.Tunables(heartbeat_interval=0.3)
    assert fast.tree_parent_timeout == 3.5 * 0.3 == fast.tree_child_timeout
    assert srt.Tunables(parent_timeout=5.0, child_timeout=2.0).tree_child_timeout == 2.0
    # the derived default follows a replaced heartbeat interval
    assert dataclasses.replace(t, heartbeat_interval=2.0).tree_parent_timeout == 7.0


@pytest.mark.parametrize(
    "bad",
    [
        {"heartbeat_interval": 0},
        {"heartbeat_interval": 1.0, "parent_timeout": 1.0},
        {"child_timeout": 0},
        {"join_timeout": -1},
        {"multicast_shrink": 1.0},
        {"send_attempts": 0},
        {"max_body": 0},
        {"lag_slack": -0.1},
    ],
)
def test_tunables_reject_non_positive_values(bad: dict) -> None:
    with pytest.raises(ValueError):
        srt.Tunables(**bad)


def test_every_srt_exception_is_an_srt_error_and_keeps_its_other_bases() -> None:
    for exc in (
        srt.DataPlaneError,
        srt.Reject,
        srt.RetryLater,
        srt.SnapshotNameError,
        srt.TreeError,
        srt.BadTreeMessage,
        srt.LoopRefused,
        srt.NotRoot,
        srt.JoinTimeout,
        srt.QueryError,
        srt.QueryTimeout,
        AuthError,
        EpochTooFarAhead,
    ):
        assert issubclass(exc, srt.SRTError), exc
    assert issubclass(srt.SnapshotNameError, ValueError)
    assert issubclass(srt.BadTreeMessage, ValueError)
    assert issubclass(srt.QueryTimeout, TimeoutError)
    assert issubclass(EpochTooFarAhead, ValueError)
