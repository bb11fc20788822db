"""How late the event loop wakes up: the evidence that nothing blocks it.

Contract: :class:`LoopLag` ``run()`` is a task that sleeps ``interval`` seconds at a time and
records, each time, how much later than asked it woke (the time other callbacks held the
loop). ``stats()``: the last lag, the largest over the recent samples (``window`` of them,
about a minute at the default interval) and since start, in milliseconds, and the number of
samples. Cheap: ten wake-ups a second.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from typing import Any


class LoopLag:
    """Samples the event loop's wake-up lag (see module contract)."""

    def __init__(self, interval: float = 0.1, window: int = 600) -> None:
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
        while True:
            asked = time.monotonic()
            await asyncio.sleep(self.interval)
            self.note(time.monotonic() - asked - self.interval)

    def stats(self) -> dict[str, Any]:
        return {
            "last_ms": round(self._recent[-1] * 1000, 3) if self._recent else None,
            "recent_max_ms": round(max(self._recent) * 1000, 3) if self._recent else None,
            "max_ms": round(self.max_s * 1000, 3),
            "samples": self.samples,
        }
