"""A job's epoch lengths over time: the first length, then the runtime changes to it.

Contract (:class:`EpochSchedule`, immutable):

* Epochs are numbered by one increasing integer index for the job's whole life. Segment 0
  starts at event time 0 with index 0 and length ``base`` seconds, so without changes
  ``epoch_of(ts) = floor(ts / base)`` (the absolute numbering every agent shares).
* Each change is a segment ``(first, seconds)``: from epoch ``first`` on, epochs last
  ``seconds``. Segment k starts at the start time epoch ``first`` had under segment k-1, so
  indices stay contiguous and increasing across a change (barriers, results, offsets and the
  lake keep ordering by index) and every agent that holds the same schedule cuts the same
  epochs.
* :meth:`switched` appends a change at the first epoch starting at or after a given event
  time (the master picks a time no agent's records have reached yet: see
  ``agent/jobs/changes.py``).
* :meth:`parse` validates the wire form (a list of ``[first, seconds]`` pairs, ``first``
  strictly increasing, after the last change's first epoch) and raises ``ValueError`` naming
  what is wrong.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from typing import Any

MAX_CHANGES = 64  # bounded: the schedule travels in every job-table entry


class EpochSchedule:
    """Epoch index ↔ event time for one job (see module docstring)."""

    __slots__ = ("_firsts", "_lengths", "_starts", "base", "changes")

    def __init__(self, base: float, changes: tuple[tuple[int, float], ...] = ()) -> None:
        if not _positive(base):
            raise ValueError(f"epoch_seconds must be a positive number, got {base!r}")
        self.base = float(base)
        self.changes = tuple((int(first), float(seconds)) for first, seconds in changes)
        firsts, starts, lengths = [0], [0.0], [self.base]
        for first, seconds in self.changes:
            if not _positive(seconds):
                raise ValueError(f"epoch length must be a positive number, got {seconds!r}")
            if first <= firsts[-1]:
                raise ValueError(
                    f"epoch changes need increasing first epochs (> {firsts[-1]}), got {first}"
                )
            starts.append(starts[-1] + (first - firsts[-1]) * lengths[-1])
            firsts.append(first)
            lengths.append(seconds)
        self._firsts, self._starts, self._lengths = firsts, starts, lengths

    # ---- lookups ----------------------------------------------------------------------------
    def epoch_of(self, ts: float) -> int:
        """The epoch index of event time ``ts``."""
        if len(self._firsts) == 1:
            return math.floor(ts / self.base)
        k = max(0, bisect_right(self._starts, ts) - 1)
        return self._firsts[k] + math.floor((ts - self._starts[k]) / self._lengths[k])

    def start(self, epoch: int) -> float:
        """The event time ``epoch`` starts at."""
        k = self._segment(epoch)
        return self._starts[k] + (epoch - self._firsts[k]) * self._lengths[k]

    def end(self, epoch: int) -> float:
        """The (exclusive) event time ``epoch`` ends at."""
        k = self._segment(epoch)
        return self._starts[k] + (epoch + 1 - self._firsts[k]) * self._lengths[k]

    def seconds_of(self, epoch: int) -> float:
        """The length of ``epoch``."""
        return self._lengths[self._segment(epoch)]

    def first_epoch_from(self, t: float) -> int:
        """The first epoch that starts at or after event time ``t``."""
        first = self.epoch_of(t)
        return first if self.start(first) >= t else first + 1

    @property
    def current_seconds(self) -> float:
        """The length of the newest segment's epochs."""
        return self._lengths[-1]

    def _segment(self, epoch: int) -> int:
        if len(self._firsts) == 1 or epoch < self._firsts[1]:
            return 0
        return bisect_right(self._firsts, epoch) - 1

    # ---- changes ----------------------------------------------------------------------------
    def switched(self, seconds: float, not_before: float) -> EpochSchedule:
        """This schedule with epochs of ``seconds`` from the first epoch that starts at or
        after event time ``not_before``."""
        if not _positive(seconds):
            raise ValueError(f"epoch length must be a positive number, got {seconds!r}")
        if len(self.changes) >= MAX_CHANGES:
            raise ValueError(f"a job's epoch length can change at most {MAX_CHANGES} times")
        first = self.first_epoch_from(not_before)
        floor = self.changes[-1][0] if self.changes else 0
        if first <= floor:  # segments start at increasing epochs (segment 0 at epoch 0)
            first = floor + 1
        return EpochSchedule(self.base, (*self.changes, (first, float(seconds))))

    def first_difference(self, other: EpochSchedule) -> int | None:
        """The first epoch whose length differs between this schedule and ``other`` of the
        same job (None: the same schedule)."""
        if self == other:
            return None
        for a, b in zip(self.changes, other.changes, strict=False):
            if a != b:
                return min(a[0], b[0])
        longer = self.changes if len(self.changes) > len(other.changes) else other.changes
        return longer[min(len(self.changes), len(other.changes))][0]

    # ---- wire -------------------------------------------------------------------------------
    def to_wire(self) -> list[list[Any]]:
        return [[first, seconds] for first, seconds in self.changes]

    @classmethod
    def parse(cls, base: float, data: Any) -> EpochSchedule:
        """Validate the wire form (see module docstring)."""
        if not isinstance(data, list | tuple):
            raise ValueError(f"must be a list of [first_epoch, seconds] pairs, got {data!r}")
        if len(data) > MAX_CHANGES:
            raise ValueError(f"at most {MAX_CHANGES} changes, got {len(data)}")
        changes = []
        for item in data:
            if (
                not isinstance(item, list | tuple)
                or len(item) != 2
                or not _int(item[0])
                or not _positive(item[1])
            ):
                raise ValueError(f"each change is [first_epoch (int), seconds (> 0)], got {item!r}")
            changes.append((item[0], float(item[1])))
        return cls(base, tuple(changes))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, EpochSchedule) and (self.base, self.changes) == (
            other.base,
            other.changes,
        )

    def __hash__(self) -> int:
        return hash((self.base, self.changes))

    def __repr__(self) -> str:
        return f"EpochSchedule({self.base!r}, {self.changes!r})"


def _int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _positive(v: Any) -> bool:
    return not isinstance(v, bool) and isinstance(v, int | float) and math.isfinite(v) and v > 0
