"""How late the event loop wakes up: the evidence that nothing blocks it.

Contract: :class:`LoopLag` ``run()`` is a task that runs until cancelled and records how much
later than asked a sleep of ``interval`` seconds woke (the time other callbacks held the
loop). The logical agents of one process share its event loop, so they share one sampling
task: each agent's ``run()`` registers its :class:`LoopLag`, the first starts the loop's
sampler, which notes every sample in every registered one, and the last to stop ends it
(one sampler per loop, not one per agent: issue "A lightweight agent"). ``stats()``: the last
lag, the largest over the recent samples (``window`` of them, about a minute at the default
interval) and since start, in milliseconds, and the number of samples. Cheap: four wake-ups a
second per process.
"""

from __future__ import annotations

import asyncio
import time
import weakref
from collections import deque
from typing import Any

#: the loop's sampler, per running event loop
_SAMPLERS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Sampler] = (
    weakref.WeakKeyDictionary()
)


class LoopLag:
    """Samples the event loop's wake-up lag (see module contract)."""

    def __init__(self, interval: float = 0.25, window: int = 240) -> None:
        self.interval = interval
        self._recent: deque[float] = deque(maxlen=window)
        self.max_s = 0.0
        self.samples = 0

    def note(self, lag_s: float) -> None:
        lag_s = max(0.0, lag_s)
        self._recent.append(lag_s)
        self.max_s = max(self.max_s, lag_s)
        self.samples += 1

    async def run(self) -> None:
        """Sample (through the loop's shared sampler) until cancelled."""
        loop = asyncio.get_running_loop()
        sampler = _SAMPLERS.get(loop)
        if sampler is None:
            sampler = _SAMPLERS[loop] = _Sampler(self.interval)
        sampler.add(self)
        try:
            await loop.create_future()  # until cancelled: the sampler does the work
        finally:
            sampler.discard(self)
            if not sampler.lags:
                _SAMPLERS.pop(loop, None)

    def stats(self) -> dict[str, Any]:
        return {
            "last_ms": round(self._recent[-1] * 1000, 3) if self._recent else None,
            "recent_max_ms": round(max(self._recent) * 1000, 3) if self._recent else None,
            "max_ms": round(self.max_s * 1000, 3),
            "samples": self.samples,
        }


class _Sampler:
    """One event loop's sampling task, noting each sample in every registered LoopLag."""

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self.lags: set[LoopLag] = set()
        self.task: asyncio.Task[None] | None = None

    def add(self, lag: LoopLag) -> None:
        self.lags.add(lag)
        if self.task is None or self.task.done():
            self.task = asyncio.get_running_loop().create_task(self._run(), name="elf-loop-lag")

    def discard(self, lag: LoopLag) -> None:
        self.lags.discard(lag)
        if not self.lags and self.task is not None:
            self.task.cancel()
            self.task = None

    async def _run(self) -> None:
        while True:
            asked = time.monotonic()
            await asyncio.sleep(self.interval)
            lag = time.monotonic() - asked - self.interval
            for each in list(self.lags):
                each.note(lag)
