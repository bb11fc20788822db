"""Warnings about hostile or broken input, logged loudly but within a budget.

Contract: :class:`LogBudget` lets at most ``burst`` records per *key* (a kind of event, e.g.
"refused snapshot, job wc") through to its logger in any window of ``interval`` seconds;
the others are counted, never lost: the next record let through for that key says how many
were suppressed since the last one ("… [37 similar suppressed]"). Every event is still
counted by its caller in the component's ``stats()``; the budget only protects the log (and
the disk under it) from a flood — one WARNING per refused request let a peer with the secret,
or any client of an open port, write the log as fast as it could send. At most ``max_keys``
keys are remembered (least recently used forgotten), so the budget itself is bounded.

It lives in ``overlay``, the lowest layer that logs network input; ``srt`` and ``agent`` use
the same budget rather than a copy.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass
class _Window:
    start: float
    logged: int = 0
    suppressed: int = 0


class LogBudget:
    """Per-key rate limit of one logger's warnings (see the module contract)."""

    def __init__(
        self,
        logger: logging.Logger,
        *,
        burst: int = 10,
        interval: float = 60.0,
        max_keys: int = 1024,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if burst < 1 or interval <= 0 or max_keys < 1:
            raise ValueError("need burst >= 1, interval > 0, max_keys >= 1")
        self.logger = logger
        self.burst, self.interval, self.max_keys = burst, interval, max_keys
        self._clock = clock
        self._windows: OrderedDict[str, _Window] = OrderedDict()
        self.suppressed_total = 0

    def warning(self, key: str, msg: str, *args: Any) -> bool:
        """Log ``msg % args`` at WARNING unless ``key`` spent its budget; True if logged."""
        return self.log(logging.WARNING, key, msg, *args)

    def info(self, key: str, msg: str, *args: Any) -> bool:
        """As :meth:`warning`, at INFO (expected events worth a bounded trace: recovery under
        way, say)."""
        return self.log(logging.INFO, key, msg, *args)

    def log(self, level: int, key: str, msg: str, *args: Any) -> bool:
        """Log ``msg % args`` at ``level`` unless ``key`` spent its budget; True if logged."""
        now = self._clock()
        window = self._windows.get(key)
        if window is None:
            window = self._windows[key] = _Window(now)
            while len(self._windows) > self.max_keys:
                self._windows.popitem(last=False)
        else:
            self._windows.move_to_end(key)
            if now - window.start >= self.interval:
                window.start, window.logged = now, 0
        if window.logged >= self.burst:
            window.suppressed += 1
            self.suppressed_total += 1
            return False
        window.logged += 1
        if window.suppressed:
            msg = f"{msg} [%d similar suppressed]"
            args = (*args, window.suppressed)
            window.suppressed = 0
        self.logger.log(level, msg, *args)
        return True
