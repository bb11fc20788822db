"""Refresh periods that stretch while nothing changes (Trickle, RFC 6206, without the
suppression counter).

Contract: :class:`Trickle` is pure state: a period, the time the next refresh is due and the
change count seen at the last one. :meth:`Trickle.due` says whether a refresh is due now;
when it is, it moves the schedule on. A change counted since the previous refresh sets the
period back to ``low``; a quiet refresh doubles it, up to ``high``. The node's table and
leaf-set lookups use it (``overlay/node.py``): in a quiet overlay each node sends a lookup
every 32-40 s instead of every 2-5 s, and any node admitted or retired - a join, a failure,
a revival - brings the short period back at once.
"""

from __future__ import annotations


class Trickle:
    """A period between ``low`` and ``high`` seconds (see the module contract). The first
    refresh is due at ``first``; ``changes`` is the change count at that time."""

    def __init__(self, low: float, high: float, first: float = 0.0, changes: int = 0) -> None:
        if not 0 < low <= high:
            raise ValueError("need 0 < low <= high")
        self.low = low
        self.high = high
        self.period = low
        self.next_at = first
        self._seen = changes

    def after(self, changed: bool) -> float:
        """The period until the next refresh, given whether anything changed since the
        last one."""
        self.period = self.low if changed else min(self.high, self.period * 2)
        return self.period

    def due(self, now: float, changes: int) -> bool:
        """Whether a refresh is due at ``now``; if so, schedule the next one from the
        change count ``changes`` (a counter that only grows)."""
        if now < self.next_at:
            return False
        self.next_at = now + self.after(changes != self._seen)
        self._seen = changes
        return True
