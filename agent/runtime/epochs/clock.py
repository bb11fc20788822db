"""Event-time epochs, the watermark and the lateness policy of one worker.

Contract (:class:`EpochClock`):

* An epoch is a half-open event-time interval ``[i * E, (i + 1) * E)`` of ``E =
  epoch_seconds``; ``assign(ts)`` returns its index ``i = floor(ts / E)``. Epoch indices are
  absolute (aligned to the Unix epoch), so every agent of a job numbers epochs alike. A
  ``schedule`` (:class:`~agent.jobs.schedule.EpochSchedule`) changes the length from a given
  epoch on, keeping indices contiguous; :meth:`EpochClock.reconfigure` applies a runtime
  change (new schedule, lateness, idle timeout, future limit) between two records.
* **Watermark** (bounded out-of-orderness, as in Flink/Spark Structured Streaming):
  ``max event time seen - allowed_lateness``. When no record has arrived for ``idle_timeout``
  seconds of wall clock, the watermark also advances with the wall clock, to
  ``clock() - allowed_lateness``, so an idle source never blocks its parent's barrier. That
  check runs when the watermark is read (``watermark``, ``closable``: the end of a batch),
  never while records are assigned, so records an agent reads late (a busy loop, a slow
  start) are not dropped for an idleness that was the reader's. The watermark never moves
  backwards.
* ``closable()`` lists, in increasing order, the epochs not yet closed whose end is
  ``<= watermark`` (from the first open epoch on, including epochs that received no record:
  they close as empty epochs; ``closable(limit)`` returns at most ``limit``).
  ``close(epoch)`` closes the lowest open epoch; epochs close in order, each exactly once.
* **Lateness policy: drop and count.** A record whose epoch is already closed or closable (its
  epoch's end ``<= watermark``), or that precedes ``start_epoch``, is *late*: ``assign``
  returns ``None`` and ``stats()["late_dropped"]`` counts it; :meth:`EpochClock.take_late`
  hands the late ones (not those before ``start_epoch``) to the caller per epoch they would
  have belonged to, with the first one's event time (agent/runtime/epochs/late.py makes them
  visible). Records at most
  ``allowed_lateness`` behind the newest one are accepted even if they arrive out of order
  (unless an idle stretch advanced the watermark past them). Optionally (``max_future``) a record
  more than that many seconds ahead of the wall clock is dropped as ``future_dropped`` so one
  bad clock cannot push the watermark past every other record.
* Idleness: a source is idle when no record was *accepted* for ``idle_timeout`` seconds
  (dropped late or future records do not keep it active).
* ``idle_timeout=None`` disables wall-clock advancement (replaying old logs, where event time
  is far behind the wall clock); ``advance_to(t)`` moves the watermark explicitly (end of
  input, a master's "close now").

Not thread-safe; one worker owns it.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping

import numpy as np

from agent.jobs.schedule import EpochSchedule

#: epochs whose late records :meth:`EpochClock.take_late` holds between two calls
LATE_EPOCHS = 4096


class EpochClock:
    """Assigns records to event-time epochs and decides which epochs can close (see module)."""

    def __init__(
        self,
        epoch_seconds: float,
        allowed_lateness: float = 0.0,
        idle_timeout: float | None = None,
        clock: Callable[[], float] = time.time,
        *,
        start_epoch: int | None = None,
        max_future: float | None = None,
        schedule: EpochSchedule | None = None,
    ) -> None:
        if not _finite(epoch_seconds) or epoch_seconds <= 0:
            raise ValueError(f"epoch_seconds must be a positive number, got {epoch_seconds!r}")
        if not _finite(allowed_lateness) or allowed_lateness < 0:
            raise ValueError(f"allowed_lateness must be a number >= 0, got {allowed_lateness!r}")
        if idle_timeout is not None and (not _finite(idle_timeout) or idle_timeout <= 0):
            raise ValueError(
                f"idle_timeout must be a positive number or None, got {idle_timeout!r}"
            )
        if max_future is not None and (not _finite(max_future) or max_future < 0):
            raise ValueError(f"max_future must be a number >= 0 or None, got {max_future!r}")
        if start_epoch is not None and (
            isinstance(start_epoch, bool) or not isinstance(start_epoch, int)
        ):
            raise ValueError(f"start_epoch must be an int or None, got {start_epoch!r}")
        self.epoch_seconds = float(epoch_seconds)
        self._set_schedule(schedule or EpochSchedule(self.epoch_seconds))
        self.allowed_lateness = float(allowed_lateness)
        self.idle_timeout = None if idle_timeout is None else float(idle_timeout)
        self.max_future = None if max_future is None else float(max_future)
        self.start_epoch = start_epoch
        self._clock = clock
        self._max_ts = -math.inf
        # the newest event time of any record offered, accepted or not (not one from the
        # future): how far a shared input was read, for a job that joins it later
        self._seen = -math.inf
        self._watermark = -math.inf
        self._last_arrival = clock()
        #: lowest epoch not closed yet; None until the first record (or idle advance) fixes it
        self._next: int | None = start_epoch
        self._closed_any = False
        self._assigned = 0
        #: records assigned per open epoch (popped by :meth:`take_records` when it closes):
        #: the per-origin counts lineage carries (docs/fault-tolerance.md, "quality")
        self._records: dict[int, int] = {}
        self._late = 0
        self._before_start = 0  # of _late: records before start_epoch (not late for a result)
        #: epoch → [late records, first late event time] since the last :meth:`take_late`
        self._late_new: dict[int, list[float]] = {}
        self._future = 0
        self._closed = 0

    def _set_schedule(self, schedule: EpochSchedule) -> None:
        if schedule.base != self.epoch_seconds:
            raise ValueError(
                f"the schedule starts with {schedule.base} s epochs, the clock with "
                f"{self.epoch_seconds} s"
            )
        self.schedule = schedule
        self._uniform = not schedule.changes  # the per-record fast path

    def reconfigure(
        self,
        *,
        schedule: EpochSchedule,
        allowed_lateness: float,
        idle_timeout: float | None,
        max_future: float | None,
    ) -> None:
        """A runtime job change, between two records. The watermark never moves back; epochs
        already closed stay closed (a schedule must change lengths only from an open epoch
        on: the caller checks :attr:`next_epoch`)."""
        if not _finite(allowed_lateness) or allowed_lateness < 0:
            raise ValueError(f"allowed_lateness must be a number >= 0, got {allowed_lateness!r}")
        self._set_schedule(schedule)
        self.allowed_lateness = float(allowed_lateness)
        self.idle_timeout = None if idle_timeout is None else float(idle_timeout)
        self.max_future = None if max_future is None else float(max_future)

    # ---- records --------------------------------------------------------------------------
    def epoch_of(self, ts: float) -> int:
        """The epoch index of event time ``ts`` (no bookkeeping)."""
        if self._uniform:
            return math.floor(ts / self.epoch_seconds)
        return self.schedule.epoch_of(ts)

    def epoch_end(self, epoch: int) -> float:
        """The (exclusive) end of ``epoch`` in event-time seconds."""
        if self._uniform:
            return (epoch + 1) * self.epoch_seconds
        return self.schedule.end(epoch)

    def assign(self, ts: float) -> int | None:
        """The epoch of a record with event time ``ts``, or None if it is dropped.

        Raises ``ValueError`` for a non-finite or non-numeric timestamp (inputs validate
        timestamps before this point).
        """
        cls = ts.__class__
        if (
            cls is not float and cls is not int and (cls is bool or not isinstance(ts, int | float))
        ) or not math.isfinite(ts):
            raise ValueError(f"timestamp must be a finite number, got {ts!r}")
        now = self._clock()
        # No idle advance here: it belongs to the end of a batch (``watermark``/``closable``).
        # Advancing before the batch would call a source idle because *we* read it late (a
        # busy agent, a slow start) and drop its records as late.
        if self.max_future is not None and ts > now + self.max_future:
            self._future += 1
            return None
        if ts > self._seen:
            self._seen = ts
        epoch = math.floor(ts / self.epoch_seconds) if self._uniform else self.schedule.epoch_of(ts)
        if self.start_epoch is not None and epoch < self.start_epoch:
            self._late += 1
            self._before_start += 1
            return None
        if self._closed_any and epoch < self._next:  # type: ignore[operator]
            self._note_late(epoch, ts)
            return None
        if ts > self._max_ts:
            self._max_ts = ts
            self._raise_watermark(ts - self.allowed_lateness)
        if self.epoch_end(epoch) <= self._watermark:
            self._note_late(epoch, ts)
            return None
        self._last_arrival = now  # only records that count keep the source "active"
        if self._next is None or (not self._closed_any and epoch < self._next):
            self._next = epoch
        self._assigned += 1
        self._records[epoch] = self._records.get(epoch, 0) + 1
        return epoch

    def assign_many(self, ts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``assign`` over a column of finite float64 timestamps, vectorized: ``(epochs,
        accepted)`` (int64 epochs, meaningful where ``accepted``), with exactly the state
        changes and counts of ``assign`` called on each in order (the running maximum makes
        the watermark row by row). One wall-clock reading serves the whole column for the
        ``max_future`` test. A non-uniform schedule takes the per-record loop."""
        count = len(ts)
        if not self._uniform:
            epochs = np.zeros(count, np.int64)
            ok = np.zeros(count, bool)
            for i, t in enumerate(ts.tolist()):
                e = self.assign(t)
                if e is not None:
                    epochs[i], ok[i] = e, True
            return epochs, ok
        now = self._clock()
        ok = np.ones(count, bool)
        if self.max_future is not None:
            future = ts > now + self.max_future
            self._future += int(future.sum())
            ok &= ~future
        if ok.any():
            self._seen = max(self._seen, float(ts[ok].max()))
        epochs = np.floor(ts / self.epoch_seconds).astype(np.int64)
        before = 0
        if self.start_epoch is not None:
            early = ok & (epochs < self.start_epoch)
            ok &= ~early
            before = int(early.sum())
        late = None
        if self._closed_any:
            late = ok & (epochs < self._next)  # type: ignore[operator]
            ok &= ~late
        # the watermark each record sees: max(previous, newest event time so far - lateness)
        newest = np.maximum.accumulate(np.where(ok, ts, -math.inf))
        newest = np.maximum(newest, self._max_ts)
        marks = np.maximum(newest - self.allowed_lateness, self._watermark)
        ends = (epochs + 1).astype(np.float64) * self.epoch_seconds
        late2 = ok & (ends <= marks)
        if count:
            self._max_ts = float(newest[-1])
            self._raise_watermark(float(marks[-1]))
        ok &= ~late2
        self._late += before
        self._before_start += before
        if late is not None:
            late2 |= late
        idx = np.flatnonzero(late2)  # the late rows, in order (usually none)
        if len(idx):
            self._note_late_many(epochs[idx], ts[idx])
        accepted = int(ok.sum())
        if accepted:
            self._last_arrival = now
            self._assigned += accepted
            for e, n in zip(*np.unique(epochs[ok], return_counts=True), strict=True):
                self._records[int(e)] = self._records.get(int(e), 0) + int(n)
            if not self._closed_any:
                low = int(epochs[ok].min())
                if self._next is None or low < self._next:
                    self._next = low
        return epochs, ok

    def accept_whole(
        self, low: float, high: float, rows: Mapping[int, int], in_order: bool = False
    ) -> bool:
        """:meth:`assign_many`'s effects on a column of finite timestamps whose every row it
        would accept, known from the column's least (``low``) and greatest (``high``)
        timestamps and its row count per epoch (``rows``) alone: a chunk a parse helper
        aggregated needs no pass over its rows when none can be refused. False, with nothing
        changed, unless that is proven (the caller then calls :meth:`assign_many`): the
        schedule is uniform, no row is beyond ``max_future`` or before ``start_epoch``, and
        the oldest row's epoch is open and ends after the watermark the newest row raises -
        or, with ``in_order`` (each row's epoch ends after the column's own running maximum
        up to it less ``allowed_lateness``: what ``none_late_within`` of
        ``agent/ingest/columnar/aggregate.py`` computes where the rows are), after the
        watermark the column starts from."""
        if not self._uniform or not rows:
            return False
        now = self._clock()
        if self.max_future is not None and high > now + self.max_future:
            return False
        first = math.floor(low / self.epoch_seconds)
        if first != min(rows) or math.floor(high / self.epoch_seconds) != max(rows):
            return False  # not the epochs this clock cuts
        if self.start_epoch is not None and first < self.start_epoch:
            return False
        if self._closed_any and first < self._next:  # type: ignore[operator]
            return False
        newest = max(high, self._max_ts)
        mark = max(newest - self.allowed_lateness, self._watermark)
        # a row is late when its epoch ends at or before the watermark it sees: the one before
        # the column, or its running maximum less the lateness (``in_order``: never)
        before = max(self._max_ts - self.allowed_lateness, self._watermark)
        if float(first + 1) * self.epoch_seconds <= (before if in_order else mark):
            return False  # a row of the oldest epoch may be late: row by row
        self._seen = max(self._seen, high)
        self._max_ts = newest
        self._raise_watermark(mark)
        self._last_arrival = now
        self._assigned += sum(rows.values())
        for e, n in rows.items():
            self._records[e] = self._records.get(e, 0) + n
        if not self._closed_any and (self._next is None or first < self._next):
            self._next = first
        return True

    def accept_one_epoch(self, ts: np.ndarray) -> int | None:
        """The epoch of every row of ``ts`` (finite timestamps) when they all fall in one and
        :meth:`accept_whole` takes them all (two passes over the column, not assign_many's
        dozen); else None, nothing changed."""
        if not len(ts):
            return None
        low, high = float(ts.min()), float(ts.max())
        first = math.floor(low / self.epoch_seconds)
        if first != math.floor(high / self.epoch_seconds):
            return None
        return first if self.accept_whole(low, high, {first: len(ts)}) else None

    def _note_late(self, epoch: int, ts: float) -> None:
        self._late += 1
        got = self._late_new.get(epoch)
        if got is not None:
            got[0] += 1
        elif len(self._late_new) < LATE_EPOCHS:
            self._late_new[epoch] = [1, ts]

    def _note_late_many(self, epochs: np.ndarray, ts: np.ndarray) -> None:
        """:meth:`_note_late` for a column of late records (vectorized per epoch)."""
        self._late += len(epochs)
        uniq, first, counts = np.unique(epochs, return_index=True, return_counts=True)
        for e, i, n in zip(uniq.tolist(), first.tolist(), counts.tolist(), strict=True):
            got = self._late_new.get(e)
            if got is not None:
                got[0] += n
            elif len(self._late_new) < LATE_EPOCHS:
                self._late_new[e] = [n, float(ts[i])]

    def take_late(self) -> dict[int, tuple[int, float]]:
        """The records refused as late since the last call, per epoch they would have
        belonged to: ``epoch → (count, event time of the first one)``. Records before
        ``start_epoch`` are not among them (they belong to no result of this job: counted in
        ``stats()["before_start"]``). At most one entry per late record offered since the
        last call, and at most :data:`LATE_EPOCHS` epochs (a caller that never takes them
        costs no memory; records of further epochs count in ``late_dropped`` only): the
        caller takes them after every batch."""
        if not self._late_new:
            return {}
        out, self._late_new = self._late_new, {}
        return {e: (int(v[0]), v[1]) for e, v in out.items()}

    @property
    def max_seen_time(self) -> float:
        """The newest event time of any record offered so far, accepted or not (late,
        before ``start_epoch``), except those dropped as from the future; -inf if none."""
        return self._seen

    def touch(self) -> None:
        """Input arrived that holds no record for this clock (lines a prefilter skipped): the
        source is active for the idle clock; the watermark does not move."""
        self._last_arrival = self._clock()

    # ---- watermark ------------------------------------------------------------------------
    def _raise_watermark(self, value: float) -> None:
        if value > self._watermark:
            self._watermark = value

    def _tick(self, now: float | None = None) -> None:
        if self.idle_timeout is None:
            return
        if now is None:
            now = self._clock()
        if now - self._last_arrival >= self.idle_timeout:
            self._raise_watermark(now - self.allowed_lateness)
            if self._next is None and self._watermark > -math.inf:
                # never saw a record: start at the epoch the watermark is in
                self._next = self.epoch_of(self._watermark)

    @property
    def watermark(self) -> float:
        """The current watermark in event-time seconds (``-inf`` before any progress)."""
        self._tick()
        return self._watermark

    @property
    def current_watermark(self) -> float:
        """The watermark as it stands, without the idle check :attr:`watermark` makes (for
        reports between two records)."""
        return self._watermark

    @property
    def max_event_time(self) -> float:
        """The newest accepted event time (``-inf`` before any record); no idle check."""
        return self._max_ts

    @property
    def idle(self) -> bool:
        """Whether no record arrived for ``idle_timeout`` seconds (False if disabled)."""
        return self.idle_timeout is not None and (
            self._clock() - self._last_arrival >= self.idle_timeout
        )

    def advance_to(self, t: float) -> None:
        """Raise the watermark to event time ``t`` (end of input, a forced close)."""
        if not _finite(t):
            raise ValueError(f"watermark must be a finite number, got {t!r}")
        self._raise_watermark(float(t))
        if self._next is None:
            self._next = self.epoch_of(self._watermark)

    def close_due(self, now: float | None = None) -> float:
        """When, in this clock's time, :meth:`closable` next lists an epoch if no record
        arrives: ``now`` when it already does, ``inf`` when only records (or
        :meth:`advance_to`) can close one (``idle_timeout`` None). Before any record or idle
        advance it is the moment the source turns idle, when the first open epoch is fixed.
        The agent ticks a job with no input to read at this time rather than polling
        (``agent/runtime/host/ticks.py``); a record moves it only later (it delays idleness),
        except by making an epoch closable at once."""
        now = self._clock() if now is None else now
        self._tick(now)
        if self._next is not None and self.epoch_end(self._next) <= self._watermark:
            return now
        if self.idle_timeout is None:
            return math.inf
        idle_at = self._last_arrival + self.idle_timeout
        if self._next is None:
            return idle_at
        return max(idle_at, self.epoch_end(self._next) + self.allowed_lateness)

    # ---- closing --------------------------------------------------------------------------
    @property
    def next_epoch(self) -> int | None:
        """The lowest epoch not closed yet (None before the first record or idle advance)."""
        return self._next

    def closable(self, limit: int | None = None) -> list[int]:
        """Epochs not closed yet whose end is ``<= watermark``, in increasing order (at most
        ``limit`` of them: bounded work per call after a long idle stretch)."""
        wm = self.watermark
        if self._next is None or wm == -math.inf:
            return []
        last = self._last_closable(wm)
        if limit is not None:
            last = min(last, self._next + limit - 1)
        return list(range(self._next, last + 1))

    def _last_closable(self, wm: float) -> int:
        """The highest epoch whose end is ``<= wm`` (exactly as ``epoch_end`` computes it)."""
        e = self.epoch_of(wm)
        while self.epoch_end(e) <= wm:
            e += 1
        while self.epoch_end(e - 1) > wm:
            e -= 1
        return e - 1

    def close(self, epoch: int) -> None:
        """Close ``epoch``: it must be the lowest open epoch, and closable."""
        if self._next is None or epoch != self._next:
            raise ValueError(f"epochs close in order: next is {self._next}, got {epoch}")
        if self.epoch_end(epoch) > self.watermark:
            raise ValueError(
                f"epoch {epoch} ends at {self.epoch_end(epoch)} after the watermark "
                f"{self._watermark}"
            )
        self._next = epoch + 1
        self._closed_any = True
        self._closed += 1

    def take_records(self, epoch: int) -> int:
        """How many records were assigned to ``epoch`` (forgotten: call it once, when the
        epoch closes). Bounded by the open epochs: an epoch closes once."""
        return self._records.pop(epoch, 0)

    def stats(self) -> dict[str, float | int | None]:
        """Counters: ``assigned``, ``late_dropped`` (``before_start`` of them preceded
        ``start_epoch``), ``future_dropped``, ``epochs_closed``, plus ``watermark``,
        ``max_event_time`` and ``next_epoch``."""
        return {
            "assigned": self._assigned,
            "late_dropped": self._late,
            "before_start": self._before_start,
            "future_dropped": self._future,
            "epochs_closed": self._closed,
            "watermark": self.watermark,
            "max_event_time": self._max_ts,
            "next_epoch": self._next,
        }


def _finite(x: object) -> bool:
    return not isinstance(x, bool) and isinstance(x, int | float) and math.isfinite(x)
