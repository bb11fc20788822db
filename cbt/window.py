"""Windowed state over epochs, built from per-epoch snapshots: one implementation.

Contract: :class:`EpochWindows` is the windowing every caller uses (the agent runtime's
workers in ``window`` mode, a master that windows merged epochs, these front-ends). Feed it
one :class:`~cbt.snapshot.Snapshot` (a *pane*) per epoch, for consecutive epoch numbers, with
``push(epoch, pane)``; it returns the window ending at ``epoch`` when ``epoch`` ends a window,
else ``None``. Windows are aligned to epoch 0: epoch ``e`` ends a window when
``(e + 1) % slide == 0``, and that window covers epochs ``[e - size + 1, e]`` (fewer at the
start: only the epochs pushed so far). Aligning to an absolute epoch, not to the first push,
is what makes agents that start at different epochs cut the same windows.

The reduce: when ``invertible`` (by default only for ``count``, whose integer arithmetic is
exact) it keeps a running aggregate and applies the paper's invertible reduce — merge the
newest pane, subtract the pane that fell out — O(pane) per epoch whatever the window size.
Otherwise it merges the panes inside the window at each emission (exact for float sums and
for non-invertible aggregators). A gap in the epoch numbers raises ``ValueError`` (an epoch
with no data is pushed as ``Snapshot.empty(agg)``, so numbering never drifts).

Front-ends that number epochs from their first push (``push(pane)``):

* :class:`TumblingWindow(size)` - consecutive, non-overlapping windows of ``size`` epochs.
* :class:`SlidingWindow(size, slide)` - the last ``size`` epochs, emitted every ``slide``
  epochs (the first emission once ``size`` epochs have arrived); ``invertible`` None decides
  from the first pane's aggregator (count, sum, avg: running aggregate).

``window[0, n)`` of cumulative flushes is ``snap_n.subtract(snap_0)`` and needs no helper.
"""

from __future__ import annotations

from collections import deque

from cbt.aggregators import Aggregator
from cbt.snapshot import Snapshot


class EpochWindows:
    """Per-epoch panes in, epoch-0-aligned sliding/tumbling windows out (module contract).

    Invariants: at most ``size`` panes are kept (the ones of the current window); with
    ``invertible`` the running snapshot equals the merge of those panes. Raises
    ``ValueError`` at construction for ``slide`` outside ``[1, size]`` or an ``invertible``
    request on an aggregator that cannot subtract, and on ``push`` for non-consecutive epochs.
    """

    def __init__(
        self, size: int, slide: int, agg: Aggregator, *, invertible: bool | None = None
    ) -> None:
        if size < 1 or not 1 <= slide <= size:
            raise ValueError(f"need 1 <= slide <= size, got size={size}, slide={slide}")
        self.size, self.slide, self.agg = size, slide, agg
        self.invertible = agg.name == "count" if invertible is None else invertible
        if self.invertible and not agg.invertible:
            raise ValueError(f"aggregator {agg.name!r} is not invertible")
        self._panes: deque[tuple[int, Snapshot]] = deque()
        self._running: Snapshot | None = None
        self._last: int | None = None

    def ends_window(self, epoch: int) -> bool:
        return (epoch + 1) % self.slide == 0

    def bounds(self, epoch: int) -> tuple[int, int]:
        """First and last epoch of the window ending at ``epoch``."""
        return epoch - self.size + 1, epoch

    def push(self, epoch: int, pane: Snapshot) -> Snapshot | None:
        if self._last is not None and epoch != self._last + 1:
            raise ValueError(f"panes must be consecutive: got {epoch} after {self._last}")
        self._last = epoch
        self._panes.append((epoch, pane))
        # consecutive pushes: at most one pane leaves the window per push
        expired = self._panes.popleft()[1] if self._panes[0][0] <= epoch - self.size else None
        if self.invertible:
            running = pane if self._running is None else self._running.merge(pane)
            if expired is not None and len(expired):
                running = running.subtract(expired)
            self._running = running
        if not self.ends_window(epoch):
            return None
        if self.invertible:
            assert self._running is not None
            return self._running
        out = self._panes[0][1]
        for _, p in list(self._panes)[1:]:
            out = out.merge(p)
        return out

    def reset(self) -> None:
        """Forget every pane (the master's "empty windows now")."""
        self._panes.clear()
        self._running = None


class SlidingWindow:
    """The last ``size`` epochs, emitted every ``slide`` epochs, counted from the first push
    (an :class:`EpochWindows` built at the first push, from that pane's aggregator)."""

    def __init__(self, size: int, slide: int = 1, invertible: bool | None = None) -> None:
        if not isinstance(size, int) or size < 1:
            raise ValueError(f"window size must be a positive int, got {size!r}")
        if not isinstance(slide, int) or not 1 <= slide <= size:
            raise ValueError(f"slide must be an int in [1, size], got {slide!r}")
        self.size = size
        self.slide = slide
        #: None: decide from the first pane's aggregator; False forces pane merging
        self.invertible = invertible
        self._windows: EpochWindows | None = None
        # push n (1-based) is epoch n - 1 + offset: EpochWindows' alignment then ends a
        # window exactly when (n - size) % slide == 0
        self._offset = -size % slide
        self.epoch = 0  # epochs pushed so far

    def push(self, pane: Snapshot) -> Snapshot | None:
        if self._windows is None:
            if self.invertible is None:
                self.invertible = pane.agg.invertible
            self._windows = EpochWindows(
                self.size, self.slide, pane.agg, invertible=self.invertible
            )
        self.epoch += 1
        out = self._windows.push(self.epoch - 1 + self._offset, pane)
        # before ``size`` epochs arrived a window is partial: the first emission waits
        return out if self.epoch >= self.size else None


class TumblingWindow(SlidingWindow):
    """Non-overlapping windows of ``size`` epochs (a sliding window with ``slide == size``;
    panes are merged, nothing is subtracted: no pane is in two windows)."""

    def __init__(self, size: int) -> None:
        super().__init__(size, size if isinstance(size, int) and size >= 1 else 1, False)
