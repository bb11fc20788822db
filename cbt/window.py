"""Windowed state over epochs, built from per-epoch snapshots.

Contract: feed one :class:`~cbt.snapshot.Snapshot` per epoch, in epoch order, with
``push(snapshot)``; it returns the window result (a Snapshot) whenever a window closes, else
``None``.

* :class:`TumblingWindow(size)` - consecutive, non-overlapping windows of ``size`` epochs.
* :class:`SlidingWindow(size, slide)` - the last ``size`` epochs, emitted every ``slide``
  epochs (the first emission once ``size`` epochs have arrived). For invertible aggregators
  (count, sum, avg) it keeps a running aggregate and applies the paper's invertible reduce:
  add the newest pane, subtract the pane that fell out, O(pane) per epoch whatever the window
  size. Otherwise it merges the panes inside the window at each emission.

An epoch with no data is pushed as an empty snapshot (``Snapshot.empty(agg)``), so epoch
numbering never drifts. ``window[0, n)`` of cumulative flushes is ``snap_n.subtract(snap_0)``
and needs no helper.
"""

from __future__ import annotations

from collections import deque
from functools import reduce

from cbt.snapshot import Snapshot


class TumblingWindow:
    """Non-overlapping windows of ``size`` epochs."""

    def __init__(self, size: int) -> None:
        if not isinstance(size, int) or size < 1:
            raise ValueError(f"window size must be a positive int, got {size!r}")
        self.size = size
        self._acc: Snapshot | None = None
        self._count = 0
        self.epoch = 0  # epochs pushed so far

    def push(self, pane: Snapshot) -> Snapshot | None:
        self._acc = pane if self._acc is None else self._acc.merge(pane)
        self._count += 1
        self.epoch += 1
        if self._count < self.size:
            return None
        out, self._acc, self._count = self._acc, None, 0
        return out


class SlidingWindow:
    """The last ``size`` epochs, emitted every ``slide`` epochs."""

    def __init__(self, size: int, slide: int = 1, invertible: bool | None = None) -> None:
        if not isinstance(size, int) or size < 1:
            raise ValueError(f"window size must be a positive int, got {size!r}")
        if not isinstance(slide, int) or not 1 <= slide <= size:
            raise ValueError(f"slide must be an int in [1, size], got {slide!r}")
        self.size = size
        self.slide = slide
        #: None: decide from the first pane's aggregator; False forces pane merging
        self.invertible = invertible
        self._panes: deque[Snapshot] = deque()
        self._running: Snapshot | None = None
        self.epoch = 0

    def push(self, pane: Snapshot) -> Snapshot | None:
        if self.invertible is None:
            self.invertible = pane.agg.invertible
        self._panes.append(pane)
        self.epoch += 1
        expired = self._panes.popleft() if len(self._panes) > self.size else None
        if self.invertible:
            running = pane if self._running is None else self._running.merge(pane)
            if expired is not None:
                running = running.subtract(expired)
            self._running = running
        if self.epoch < self.size or (self.epoch - self.size) % self.slide:
            return None
        if self.invertible:
            return self._running
        return reduce(Snapshot.merge, self._panes)
