"""MemoryBudget: one agent's ``memory_budget_bytes``, shared by everything it holds.

Contract (``docs/agent-runtime.md``, "The agent's memory budget"). An agent holds data in a
few kinds of places, each with its own bound (``[runtime]``): a master's resident epoch
results per job (``result_memory_bytes``; past its limit it **spills** the oldest to disk),
a worker's resident compressed CBT buffers per job (``worker_memory_bytes``; **spills** runs
to disk), an origin's own snapshots of uncommitted epochs per job (``retained_bytes``;
**sheds** the oldest: such an epoch is then repaired only by a restart's re-read) and other
agents' checkpoints held as their hot replica (``checkpoint_store_bytes``; **sheds** the
oldest: such an epoch can no longer be re-issued should its origin die for good). Each of
those is a :class:`MemoryConsumer`. The per-kind bounds stay as caps; the agent-wide
``memory_budget_bytes`` (default 256 MiB) bounds their sum.

* :func:`fair_limits` (pure) splits the budget, **spilling before shedding**: spilling loses
  nothing (the bytes are on disk, still answered), shedding loses the ability to repair or
  re-issue an epoch. So the consumers that spill share what the shedding ones leave of the
  budget: every one *wants* room to grow by half of what it holds (at least
  :data:`MIN_WANT`, at most its cap); that is shared max-min fairly over the wants (a
  consumer that wants less than an equal share gets its want, the rest is split among the
  others), and what is left after every want is met is shared the same way over the room up
  to the caps. A consumer that sheds may hold up to its cap, or what the budget leaves once
  the other shedding consumers' bytes and every spilling consumer's floor are taken, if that
  is less: it sheds only what spilling cannot free. So what the consumers hold stays within
  the budget once the spilling ones have spilled (the shedding ones' limits overlap: two
  that grow at once may pass it until the next rebalance), none exceeds its cap, and a flood
  in one job takes the room the others leave without starving them.
* :meth:`MemoryBudget.rebalance` (the event loop, after a tick, at most every
  :data:`REBALANCE_SECONDS`) reads every consumer's resident bytes, computes the limits and
  gives each its own (``set_limit``: it spills or sheds down to it now or at its next
  write). Bytes a consumer adds between two rebalances may pass its limit until it enforces
  it; a result spill runs in a thread after each stored epoch.
* :meth:`MemoryBudget.stats` (the agent's status ``memory``): the budget, the bytes held,
  and per consumer its bytes, limit, cap and what it does beyond the limit.

What the budget does not count: the interpreter and its libraries (an idle agent's RSS), the
open epochs of barriers (bounded by epochs, ``max_ahead``), request bodies in flight and
allocator slack. The status shows the process RSS beside the budget.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

#: the least room a consumer wants (bytes), so an empty one can start. Small, because an
#: agent may run hundreds of jobs (the paper's 500 trees), three consumers each: a 1 MiB
#: floor would then want more than the whole budget while the agent held nothing
MIN_WANT = 64 << 10
#: the least time between two rebalances (seconds)
REBALANCE_SECONDS = 1.0


class MemoryConsumer(Protocol):
    """One place an agent holds data (module contract)."""

    #: what it is, e.g. ``"results of job wc"``
    name: str
    #: what it does beyond its limit: ``"spill"`` (to disk, still answerable) or ``"shed"``
    action: str
    #: its own configured bound (bytes; None: none)
    cap: int | None

    def resident_bytes(self) -> int: ...

    def set_limit(self, limit: int) -> None: ...


@dataclass
class Held:
    """A :class:`MemoryConsumer` made of two callables (what it holds; its new limit)."""

    name: str
    action: str
    cap: int | None
    held: Callable[[], int]
    limit: Callable[[int], None]

    def resident_bytes(self) -> int:
        return self.held()

    def set_limit(self, limit: int) -> None:
        self.limit(limit)


def water_fill(amount: int, wants: Sequence[int]) -> list[int]:
    """Max-min fair integer shares of ``amount`` over ``wants`` (each >= 0): every share is
    at most its want; if the wants sum to more than ``amount`` the shares sum to ``amount``
    and every share short of its want is at least every other share, minus 1 (rounding)."""
    shares = [0] * len(wants)
    left = max(0, amount)
    open_ = sorted((w, i) for i, w in enumerate(wants) if w > 0)
    while open_ and left > 0:
        level = left // len(open_)
        smallest, _ = open_[0]
        if smallest <= level:
            # every want at or below the level is met in full; the rest share what is left
            met = [(w, i) for w, i in open_ if w <= level]
            for w, i in met:
                shares[i] = w
                left -= w
            open_ = open_[len(met) :]
            continue
        # no want is met: an equal share each, the remainder one byte each to the first
        extra = left - level * len(open_)
        for n, (_, i) in enumerate(open_):
            shares[i] = level + (1 if n < extra else 0)
        left = 0
    return shares


def want_of(resident: int, cap: int | None, budget: int) -> int:
    """The room a consumer holding ``resident`` bytes wants (module contract)."""
    want = max(resident + resident // 2, MIN_WANT)
    return min(want, budget if cap is None else cap)


def shared_limits(budget: int, resident: Sequence[int], caps: Sequence[int | None]) -> list[int]:
    """Max-min fair limits over the wants, then over the room left up to the caps; they sum
    to at most ``budget`` (the spilling consumers' part of the module contract)."""
    budget = max(0, budget)
    wants = [want_of(r, c, budget) for r, c in zip(resident, caps, strict=True)]
    first = water_fill(budget, wants)
    left = budget - sum(first)
    room = [(budget if c is None else c) - f for c, f in zip(caps, first, strict=True)]
    more = water_fill(left, [max(0, r) for r in room])
    return [f + m for f, m in zip(first, more, strict=True)]


def fair_limits(
    budget: int,
    resident: Sequence[int],
    caps: Sequence[int | None],
    sheds: Sequence[bool] | None = None,
) -> list[int]:
    """Each consumer's limit (module contract): ``sheds[i]`` tells a consumer that sheds
    beyond its limit from one that spills (None: all spill)."""
    budget = max(0, budget)
    sheds = [False] * len(resident) if sheds is None else list(sheds)
    spill = [i for i, s in enumerate(sheds) if not s]
    shed = [i for i, s in enumerate(sheds) if s]
    shed_held = sum(resident[i] for i in shed)
    limits = [0] * len(resident)
    spill_limits = shared_limits(
        budget - shed_held, [resident[i] for i in spill], [caps[i] for i in spill]
    )
    for i, limit in zip(spill, spill_limits, strict=True):
        limits[i] = limit
    floors = sum(min(MIN_WANT, budget if caps[i] is None else caps[i]) for i in spill)
    for i in shed:
        room = max(0, budget - floors - (shed_held - resident[i]))
        limits[i] = room if caps[i] is None else min(caps[i], room)
    return limits


class MemoryBudget:
    """One agent's memory budget (module contract)."""

    def __init__(self, budget_bytes: int, every: float = REBALANCE_SECONDS) -> None:
        if budget_bytes < 0:
            raise ValueError(f"memory_budget_bytes must be >= 0, got {budget_bytes}")
        self.budget_bytes = budget_bytes
        self.every = every
        self.rebalances = 0
        self._next = 0.0
        self._last: list[dict[str, Any]] = []

    def due(self, now: float | None = None) -> bool:
        """Whether a rebalance is due (``now``: monotonic seconds)."""
        return (time.monotonic() if now is None else now) >= self._next

    def rebalance(self, consumers: Sequence[MemoryConsumer], now: float | None = None) -> None:
        """Give every consumer its limit now (module contract)."""
        now = time.monotonic() if now is None else now
        self._next = now + self.every
        resident = [max(0, c.resident_bytes()) for c in consumers]
        caps = [c.cap for c in consumers]
        sheds = [c.action == "shed" for c in consumers]
        limits = fair_limits(self.budget_bytes, resident, caps, sheds)
        last = []
        for consumer, held, limit in zip(consumers, resident, limits, strict=True):
            consumer.set_limit(limit)
            last.append(
                {
                    "name": consumer.name,
                    "bytes": held,
                    "limit_bytes": limit,
                    "cap_bytes": consumer.cap,
                    "beyond_limit": consumer.action,
                }
            )
        self._last = last
        self.rebalances += 1

    def stats(self) -> dict[str, Any]:
        """The budget, the bytes held at the last rebalance, and each consumer's share."""
        return {
            "budget_bytes": self.budget_bytes,
            "held_bytes": sum(c["bytes"] for c in self._last),
            "rebalances": self.rebalances,
            "consumers": list(self._last),
        }
