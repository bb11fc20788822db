"""The agent's memory budget (``agent/runtime/memory_budget.py``): the fair split against a
reference (an exhaustive max-min check), and the rebalance against recording consumers."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.runtime.memory_budget import (
    MIN_WANT,
    MemoryBudget,
    fair_limits,
    want_of,
    water_fill,
)

amounts = st.integers(min_value=0, max_value=10**9)
wants_ = st.lists(st.integers(min_value=0, max_value=10**9), max_size=12)


@given(amounts, wants_)
def test_water_fill_is_max_min_fair(amount: int, wants: list[int]) -> None:
    shares = water_fill(amount, wants)
    assert all(0 <= s <= w for s, w in zip(shares, wants, strict=True))
    assert sum(shares) == min(amount, sum(wants))
    # max-min fair: a share short of its want is at least every other share (minus rounding)
    for s, w in zip(shares, wants, strict=True):
        if s < w:
            assert all(s >= other - 1 for other in shares)


@given(amounts, wants_)
def test_water_fill_equals_a_level_search(amount: int, wants: list[int]) -> None:
    """Reference: the largest level L with sum(min(w, L)) <= amount, by bisection; the
    shares are min(w, L) plus the remainder, one byte each."""
    lo, hi = 0, max(wants, default=0)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if sum(min(w, mid) for w in wants) <= amount:
            lo = mid
        else:
            hi = mid - 1
    base = [min(w, lo) for w in wants]
    shares = water_fill(amount, wants)
    assert all(b <= s <= b + 1 for b, s in zip(base, shares, strict=True))
    assert sum(shares) - sum(base) == min(amount, sum(wants)) - sum(base)


caps_ = st.lists(st.one_of(st.none(), st.integers(min_value=0, max_value=10**9)), max_size=12)


@settings(max_examples=300)
@given(amounts, st.data())
def test_fair_limits_keep_the_budget_the_caps_and_each_consumers_floor(
    budget: int, data: st.DataObject
) -> None:
    caps = data.draw(caps_)
    resident = data.draw(
        st.lists(st.integers(min_value=0, max_value=10**9), min_size=len(caps), max_size=len(caps))
    )
    limits = fair_limits(budget, resident, caps)
    assert sum(limits) <= budget
    room = [budget if c is None else c for c in caps]
    assert all(0 <= lim <= r for lim, r in zip(limits, room, strict=True))
    # every budget byte is handed out unless every cap is reached
    assert sum(limits) == min(budget, sum(room))
    n = len(caps)
    for lim, r, c in zip(limits, resident, caps, strict=True):
        # each keeps at least its want or an equal share of the budget
        assert lim >= min(want_of(r, c, budget), budget // n) - 1


@settings(max_examples=300)
@given(amounts, st.data())
def test_consumers_that_shed_keep_what_spilling_can_free(budget: int, data: st.DataObject) -> None:
    caps = data.draw(caps_)
    n = len(caps)
    resident = data.draw(
        st.lists(st.integers(min_value=0, max_value=10**9), min_size=n, max_size=n)
    )
    sheds = data.draw(st.lists(st.booleans(), min_size=n, max_size=n))
    limits = fair_limits(budget, resident, caps, sheds)
    shed_held = sum(r for r, s in zip(resident, sheds, strict=True) if s)
    spilling = [lim for lim, s in zip(limits, sheds, strict=True) if not s]
    # what the spilling ones may hold plus what the shedding ones hold: within the budget
    assert sum(spilling) <= max(0, budget - shed_held)
    assert all(c is None or lim <= c for lim, c in zip(limits, caps, strict=True))
    floors = sum(
        min(MIN_WANT, budget if c is None else c) for c, s in zip(caps, sheds, strict=True) if not s
    )
    for lim, r, c, s in zip(limits, resident, caps, sheds, strict=True):
        if s:  # up to its cap, or what the others' bytes and the spill floors leave
            room = max(0, budget - floors - (shed_held - r))
            assert lim == (room if c is None else min(c, room))
            if shed_held + floors <= budget and (c is None or r <= c):
                assert lim >= r  # nothing to shed while spilling can make the room


def test_a_flood_takes_the_room_the_others_leave() -> None:
    mib = 2**20
    # a flooding results store, an idle worker, small retained epochs, no checkpoints
    limits = fair_limits(
        256 * mib, [300 * mib, 0, 2 * mib, 0], [256 * mib, 256 * mib, 64 * mib, 64 * mib]
    )
    assert sum(limits) == 256 * mib
    assert limits[1] >= MIN_WANT and limits[2] >= 3 * mib and limits[3] >= MIN_WANT
    assert limits[0] >= 256 * mib - 3 * MIN_WANT - 3 * mib - 3 * mib  # the rest is the flood's
    # two floods share equally
    two = fair_limits(100 * mib, [200 * mib, 200 * mib], [None, None])
    assert two == [50 * mib, 50 * mib]


def test_hundreds_of_idle_jobs_leave_a_busy_master_its_room() -> None:
    """500 jobs on one agent (the paper's 500 trees), three consumers each, all idle but one
    master's results: the idle ones' floors take a fraction of the budget, the master gets
    what it wants, and every idle consumer still has room for a first epoch."""
    mib = 2**20
    resident = [20 * mib] + [0] * 1499
    caps: list[int | None] = [256 * mib] * 1500
    limits = fair_limits(256 * mib, resident, caps)
    assert limits[0] >= 30 * mib  # its want: room to grow by half
    assert min(limits[1:]) >= MIN_WANT
    assert sum(limits) <= 256 * mib


@dataclass
class Recording:
    name: str
    held: int
    cap: int | None = None
    action: str = "spill"
    limits: list[int] = field(default_factory=list)

    def resident_bytes(self) -> int:
        return self.held

    def set_limit(self, limit: int) -> None:
        self.limits.append(limit)
        self.held = min(self.held, limit)  # it spills down to its limit


def test_rebalance_gives_each_consumer_its_limit_and_reports_them() -> None:
    budget = MemoryBudget(10 * MIN_WANT, every=1.0)
    flood = Recording("results of job a", 40 * MIN_WANT)
    idle = Recording("worker of job a", 0, cap=8 * MIN_WANT)
    held = Recording("checkpoints held for other agents", MIN_WANT, action="shed")
    assert budget.due(0.0)
    budget.rebalance([flood, idle, held], now=0.0)
    assert not budget.due(0.5) and budget.due(1.0)
    # the spilling ones share what the shedding one holds; it may grow to what the budget
    # leaves once their floors are taken: it sheds only what spilling cannot free
    assert flood.limits[-1] + idle.limits[-1] == 9 * MIN_WANT
    assert idle.limits[-1] >= MIN_WANT and held.limits[-1] == 8 * MIN_WANT
    stats = budget.stats()
    assert stats["budget_bytes"] == 10 * MIN_WANT and stats["rebalances"] == 1
    assert stats["held_bytes"] == 41 * MIN_WANT  # as read before the limits applied
    names = {c["name"]: c for c in stats["consumers"]}
    assert names["checkpoints held for other agents"]["beyond_limit"] == "shed"
    assert names["worker of job a"]["cap_bytes"] == 8 * MIN_WANT
    budget.rebalance([flood, idle, held], now=1.0)
    assert budget.stats()["held_bytes"] <= 10 * MIN_WANT
    with pytest.raises(ValueError):
        MemoryBudget(-1)
