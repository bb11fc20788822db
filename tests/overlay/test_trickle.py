"""Refresh periods that stretch while the neighbourhood is quiet (overlay/trickle.py): the
period's law as a property, and the lookups a quiet simulated overlay sends with it, side
by side with fixed periods, and how a failure brings the short period back."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from overlay_helpers import SECRET

from overlay import Tunables
from overlay.sim import SimNetwork, run, start_cluster
from overlay.trickle import Trickle

pytestmark = pytest.mark.timeout(300)


@given(
    low=st.floats(0.01, 10.0),
    factor=st.floats(1.0, 100.0),
    changes=st.lists(st.booleans(), max_size=60),
)
def test_the_period_doubles_while_quiet_and_resets_on_a_change(
    low: float, factor: float, changes: list[bool]
) -> None:
    high = low * factor
    trickle = Trickle(low, high)
    quiet = 0  # quiet refreshes since the last change (reference)
    for changed in changes:
        quiet = 0 if changed else quiet + 1
        assert trickle.after(changed) == pytest.approx(min(high, low * 2**quiet))
        assert low <= trickle.period <= high


@given(
    low=st.floats(0.01, 10.0),
    factor=st.floats(1.0, 100.0),
    steps=st.lists(st.tuples(st.floats(0.0, 50.0), st.integers(0, 3)), max_size=60),
)
def test_a_refresh_is_due_once_per_period_and_a_counted_change_resets_it(
    low: float, factor: float, steps: list[tuple[float, int]]
) -> None:
    high = low * factor
    trickle = Trickle(low, high, first=1.0, changes=0)
    now, changes, seen, period, next_at = 0.0, 0, 0, low, 1.0  # the reference schedule
    for advance, new_changes in steps:
        now += advance
        changes += new_changes
        due = now >= next_at
        assert trickle.due(now, changes) == due
        if due:
            period = low if changes != seen else min(high, period * 2)
            seen, next_at = changes, now + period
        assert trickle.next_at == pytest.approx(next_at)


def test_a_period_needs_0_lt_low_le_high() -> None:
    with pytest.raises(ValueError):
        Trickle(0.0, 1.0)
    with pytest.raises(ValueError):
        Trickle(2.0, 1.0)
    with pytest.raises(ValueError):
        Tunables(slot_refresh_interval=2.0, slot_refresh_max_interval=1.0)


def _lookups(stretch: bool, crash: bool = False) -> dict[str, Any]:
    """find_node requests 40 nodes send in a quiet window of 200 virtual seconds (after 100 s
    to settle), then, with ``crash``, in the 20 s after a node crashes."""
    base = Tunables()
    tunables = (
        base
        if stretch
        else dataclasses.replace(
            base,
            slot_refresh_max_interval=base.slot_refresh_interval,
            leaf_refresh_max_interval=base.leaf_refresh_interval,
        )
    )

    def sent(nodes: list[Any]) -> int:
        return sum(n.stats()["sent_msgs"].get("find_node", 0) for n in nodes if n.running)

    async def main() -> dict[str, Any]:
        net = SimNetwork(seed=7)
        nodes = await start_cluster(net, 40, SECRET, tunables=tunables)
        await asyncio.sleep(100)
        before = sent(nodes)
        await asyncio.sleep(200)
        out: dict[str, Any] = {"quiet_per_node_s": (sent(nodes) - before) / 40 / 200}
        if crash:
            victim = nodes[7]
            await victim.stop()
            live = [n for n in nodes if n is not victim]
            before = sent(live)
            await asyncio.sleep(20)
            out["after_crash_per_node_s"] = (sent(live) - before) / 39 / 20
        return out

    return run(main())


def test_a_quiet_overlay_looks_up_far_less_and_a_failure_brings_the_short_period_back() -> None:
    fixed = _lookups(stretch=False)
    stretched = _lookups(stretch=True, crash=True)
    # fixed: one slot lookup per 2 s and one leaf refresh per 5 s (0.7/s per node); stretched:
    # at most one of each per 32 s and 40 s once quiet
    assert fixed["quiet_per_node_s"] > 0.6
    assert stretched["quiet_per_node_s"] < 0.1
    # the crash retires the victim at its neighbours: their lookups are frequent again
    assert stretched["after_crash_per_node_s"] > 2 * stretched["quiet_per_node_s"]
