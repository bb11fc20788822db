"""Live samples of the records a job sees on one agent (``elf tap``, docs/http-api.md).

Contract: :class:`JobTaps` is one job's tap point, owned by its
:class:`~agent.runtime.job.pipeline.EpochPipeline`. :meth:`JobTaps.open` (event loop) registers
a :class:`Tap` for up to ``limit`` records (1 ≤ limit ≤ :data:`MAX_LIMIT`); at most
:data:`MAX_TAPS` taps of one job are open at once, another raises
:class:`~agent.errors.TooManyRequests` (429). :meth:`JobTaps.offer` (record thread) gives every
open tap a copy of the records the job's worker is about to process, with the input they came
from and the event-time epoch their timestamp falls in; :meth:`Tap.wait` (event loop) returns
when the tap is full or its timeout passed; :meth:`JobTaps.close` unregisters it.

No effect on results, no cost when nobody taps:

* the record path checks one attribute per *batch* (:attr:`JobTaps.active`, a tuple that is
  empty while nobody taps), never per record;
* a tap only reads records: it keeps shallow copies (a job that mutates its records cannot
  reach the sample, and the sample cannot reach the job), and nothing it does raises into the
  record path (a record it cannot take is skipped and counted in ``dropped``; a failure is
  logged and the batch goes on to the worker untouched);
* the record thread never blocks on a tap: a tap holds at most ``limit`` records; what is
  offered once it is full is counted (``seen``, ``dropped``) and not kept. The only
  cross-thread call is one ``call_soon_threadsafe`` when a tap becomes full;
* the set of taps is an immutable tuple replaced on open and close (copy-on-write), so the
  record thread iterates it without a lock.

The epoch is the clock's pure ``epoch_of`` of the record's timestamp: a record the clock then
drops as late or too far in the future is still sampled (with the epoch it would have had);
``epoch`` is None when the record has no usable timestamp (the worker counts it in
``bad_records``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable
from typing import Any

from agent.errors import TooManyRequests

log = logging.getLogger(__name__)

#: the most records one tap returns
MAX_LIMIT = 1000
#: the most taps of one job open at once on an agent
MAX_TAPS = 4


class Tap:
    """One open tap: up to ``limit`` sampled records, filled by the record thread."""

    def __init__(self, limit: int, loop: asyncio.AbstractEventLoop) -> None:
        self.limit = limit
        #: ``(input, epoch, record)`` in the order the job saw them (never more than ``limit``)
        self.records: list[tuple[str, int | None, dict[str, Any]]] = []
        #: records offered while open (kept or not)
        self.seen = 0
        self._loop = loop
        self._full = asyncio.Event()

    @property
    def dropped(self) -> int:
        """Records offered while open that the tap did not keep (it was full)."""
        return self.seen - len(self.records)

    def take(
        self, name: str, rows: Iterable[Any], count: int, epoch_of: Callable[[Any], int | None]
    ) -> None:
        """Record thread: keep copies of ``rows`` (``count`` records offered) up to the limit."""
        self.seen += count
        room = self.limit - len(self.records)
        if room <= 0:
            return
        kept = self.records
        for rec in rows:
            if room <= 0:
                break
            if isinstance(rec, dict):
                kept.append((name, epoch_of(rec), dict(rec)))
                room -= 1
        if room <= 0:
            # the one cross-thread call: wake the waiting request (never blocks)
            # (a RuntimeError: the loop closed, the agent stopped; nobody waits any more)
            with contextlib.suppress(RuntimeError):
                self._loop.call_soon_threadsafe(self._full.set)

    async def wait(self, timeout: float) -> bool:
        """Until the tap holds ``limit`` records (True) or ``timeout`` seconds passed."""
        try:
            await asyncio.wait_for(self._full.wait(), timeout)
        except TimeoutError:
            return len(self.records) >= self.limit
        return True


class JobTaps:
    """One job's tap point on this agent (see the module contract)."""

    def __init__(self, max_taps: int = MAX_TAPS) -> None:
        self.max_taps = max_taps
        #: the open taps; empty while nobody taps (the record path's one check)
        self.active: tuple[Tap, ...] = ()

    def open(self, limit: int) -> Tap:
        """Event loop: a new tap for up to ``limit`` records (the API validated it: 400 there,
        ValueError here); 429 when ``max_taps`` are open."""
        if not 1 <= limit <= MAX_LIMIT:
            raise ValueError(f"a tap's limit is 1 to {MAX_LIMIT}, got {limit}")
        if len(self.active) >= self.max_taps:
            raise TooManyRequests(
                f"{self.max_taps} taps of this job are open on this agent (the most at once); "
                "retry when one ends"
            )
        tap = Tap(limit, asyncio.get_running_loop())
        self.active = (*self.active, tap)
        return tap

    def close(self, tap: Tap) -> None:
        """Event loop: unregister ``tap`` (the record thread stops offering to it)."""
        self.active = tuple(t for t in self.active if t is not tap)

    def offer(
        self, name: str, records: Any, ts_field: str, epoch_of: Callable[[float], int]
    ) -> None:
        """Record thread: the batch of input ``name`` the worker is about to process (a list
        of dicts, or a columnar batch whose ``parts`` are Arrow tables or lists of dicts)."""
        taps = self.active
        if not taps:
            return

        def epoch(rec: dict[str, Any]) -> int | None:
            ts = rec.get(ts_field)
            # the clock's own rule: a finite int or float, never a bool or a string
            if isinstance(ts, bool) or not isinstance(ts, int | float):
                return None
            try:
                return epoch_of(ts)
            except (ValueError, OverflowError):  # NaN, infinity
                return None

        try:
            count = len(records)
            want = max(t.limit - len(t.records) for t in taps)
            rows = _first_rows(records, want) if want > 0 else []
            for tap in taps:
                tap.take(name, rows, count, epoch)
        except Exception:  # a sample is never worth a record: the batch goes on untouched
            log.exception("tap of input %s failed; the batch is processed as usual", name)


def _first_rows(records: Any, n: int) -> list[Any]:
    """The first ``n`` records of a batch as dicts: Arrow parts of a columnar batch are
    converted for those rows only (bounded by the tap's limit, not the batch)."""
    parts = getattr(records, "parts", None)
    if parts is None:
        return list(records[:n]) if isinstance(records, list) else _head(records, n)
    out: list[Any] = []
    for part in parts:
        if len(out) >= n:
            break
        if hasattr(part, "to_pylist"):
            out.extend(part.slice(0, n - len(out)).to_pylist())
        else:
            out.extend(part[: n - len(out)])
    return out


def _head(records: Iterable[Any], n: int) -> list[Any]:
    out = []
    for rec in records:
        if len(out) >= n:
            break
        out.append(rec)
    return out
