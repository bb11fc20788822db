"""A job's CPU budget on one agent: processing CPU time over a sliding window.

Contract: :class:`CpuBudget` is charged the thread CPU time (``time.thread_time``) each unit
of a job's record work took, with the (monotonic) time it ended. ``over(now)`` is true while
the CPU charged within the last ``window`` seconds exceeds ``share * window`` (``share`` in
cores: 0.5 is half of one core). The runtime then throttles that job — it processes no new
records while over budget; they wait, in order, in the job's backlog (nothing is dropped) —
and reports it; other jobs and the agent are unaffected. ``stats()`` gives the share used
over the window and the throttle counters. Pure state; the clock is injectable for tests.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from typing import Any


class CpuBudget:
    """CPU seconds charged over a sliding window against ``share`` of one core."""

    def __init__(
        self, share: float, window: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        if not share > 0 or not window > 0:
            raise ValueError("a CPU budget needs a positive share and window")
        self.share = share
        self.window = window
        self._clock = clock
        self._charges: deque[tuple[float, float]] = deque()  # (ended at, cpu seconds)
        self._used = 0.0
        self.throttled_ticks = 0  # ticks this job's records waited for its budget
        self.episodes = 0  # times it went over budget

    def charge(self, cpu_seconds: float, now: float | None = None) -> None:
        if cpu_seconds <= 0:
            return
        self._charges.append((self._clock() if now is None else now, cpu_seconds))
        self._used += cpu_seconds

    def used(self, now: float | None = None) -> float:
        """CPU seconds charged within the window ending at ``now``."""
        now = self._clock() if now is None else now
        while self._charges and self._charges[0][0] <= now - self.window:
            self._used -= self._charges.popleft()[1]
        if not self._charges:
            self._used = 0.0  # no float drift once the window is empty
        return self._used

    def over(self, now: float | None = None) -> bool:
        return self.used(now) > self.share * self.window

    def stats(self, now: float | None = None) -> dict[str, Any]:
        return {
            "share_used": round(self.used(now) / self.window, 4),
            "share_budget": self.share,
            "window_s": self.window,
            "throttled_ticks": self.throttled_ticks,
            "throttle_episodes": self.episodes,
        }
