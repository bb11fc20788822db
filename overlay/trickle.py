"""Refresh periods that stretch while nothing changes (Trickle, RFC 6206, without the
suppression counter).

Contract: :class:`Trickle` is pure state. After each refresh the caller says whether the
thing refreshed changed since the previous one (:meth:`Trickle.after`): a change sets the
period back to ``low``; a quiet refresh doubles it, up to ``high``. The node's table and
leaf-set lookups use it (``overlay/node.py``): in a quiet overlay each node sends a lookup
every 32-40 s instead of every 2-5 s, and any node admitted or retired - a join, a failure,
a revival - brings the short period back at once.
"""

from __future__ import annotations


class Trickle:
    """A period between ``low`` and ``high`` seconds (see the module contract)."""

    def __init__(self, low: float, high: float) -> None:
        if not 0 < low <= high:
            raise ValueError("need 0 < low <= high")
        self.low = low
        self.high = high
        self.period = low

    def after(self, changed: bool) -> float:
        """The period until the next refresh, given whether anything changed since the
        last one."""
        self.period = self.low if changed else min(self.high, self.period * 2)
        return self.period
