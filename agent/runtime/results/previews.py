"""Tentative previews at a tree's root, and the timeline of held-up epochs (PPA: emit results
on time while recovery runs; ``docs/fault-tolerance.md``, "Stragglers and the tentative
deadline").

Contract (:class:`Previews`, one per job runtime, on the event loop):

* **Deadline.** At a tree's root, epoch e is due a preview ``deadline_for(e)`` seconds (the
  job's ``tentative_deadline``; None: never) after the barrier first learnt e had closed
  somewhere - the first contribution for e or a later epoch (:meth:`EpochCombiner.opened_at`,
  which is the epoch clock's close, end + allowed lateness, on the fastest member). Counting
  from that arrival rather than from the wall clock keeps a replay of old logs (event time
  far behind the wall clock) from previewing every epoch. Only *live* epochs are previewed:
  one whose close (end + lateness) is more than the deadline plus :data:`LIVE_EPOCHS` epoch
  lengths in the wall clock's past belongs to a replay or a catch-up, where "on time" means
  nothing and previews would only double the lake's files.
* **Preview.** If the barrier still holds e at its deadline, what has arrived
  (:meth:`EpochCombiner.preview`: the merge without consuming it) is stored with
  :meth:`ResultStore.put_preview` - tentative, naming the origins it lacks, with its
  coverage - and handed to ``on_stored`` (the lake writes it as any tentative version).
  Counted (``previews``), logged at INFO within a log budget (recovery is under way: no
  WARNING). The job's hooks do not see previews; only the barrier's result runs them.
* **Replacement.** The barrier's result replaces the preview as a new version when the epoch
  leaves (complete, or leapt over a straggler); a late contribution folded meanwhile
  :meth:`refresh`-es it. A preview never commits.
* **Timeline** (:meth:`timeline`): per recent (tree, epoch) at this root - when it closed by
  the epoch clock (end + allowed lateness), when its first contribution arrived, when its
  preview, the barrier's result and its final (non-tentative) version were stored. The
  benchmark reads time-to-tentative vs time-to-final from it.

Bounds: one timer per open epoch at the root (the barrier's open epochs are bounded by its
``max_ahead``); the timeline keeps :data:`TIMELINE` epochs.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from agent.runtime.results.epoch_result import EpochResult
from agent.runtime.results.store import ResultStore
from overlay.logbudget import LogBudget
from srt import EpochCombiner
from srt.dataplane.lineage import Lineage

log = logging.getLogger(__name__)

TIMELINE = 256  # recent epochs whose timings are kept
SLACK = 0.001  # a timer may fire this early (clock granularity)
LIVE_EPOCHS = 2  # epochs past its close (plus the deadline) an epoch counts as live


class Previews:
    """A job's tentative deadline at the roots of its trees (module contract).

    ``combiner(tid)`` is the tree's barrier (None: none yet), ``is_root(tid)`` whether this
    agent is the tree's root, ``deadline_for(epoch)`` the job's tentative deadline (None:
    off), ``closes_at(epoch)`` the epoch's close by the epoch clock (end + lateness),
    ``seconds_of(epoch)`` its length,
    ``expected(epoch)`` the origins the master expects and whether it is doubtful,
    ``on_stored(tid, epoch, result)`` is told of every preview stored."""

    def __init__(
        self,
        job: str,
        store: ResultStore,
        *,
        combiner: Callable[[int], EpochCombiner | None],
        is_root: Callable[[int], bool],
        deadline_for: Callable[[int], float | None],
        closes_at: Callable[[int], float],
        seconds_of: Callable[[int], float],
        expected: Callable[[int], tuple[Lineage | None, bool]],
        on_stored: Callable[[int, int, EpochResult], None],
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.job = job
        self.store = store
        self._combiner = combiner
        self._is_root = is_root
        self._deadline_for = deadline_for
        self._closes_at = closes_at
        self._seconds_of = seconds_of
        self._expected = expected
        self._on_stored = on_stored
        self._clock = clock
        self._timers: dict[tuple[int, int], asyncio.TimerHandle] = {}
        self._armed: set[tuple[int, int]] = set()  # open epochs whose deadline was armed
        self._timeline: OrderedDict[tuple[int, int], dict[str, Any]] = OrderedDict()
        self._log = LogBudget(log)
        self.previews = 0  # previews stored (refreshes included)
        self.refreshed = 0
        self._closed = False

    # ---- deadline -------------------------------------------------------------------------
    def watch(self, tid: int) -> None:
        """After an offer to the tree's barrier: arm the deadline of every epoch that opened
        since (root only)."""
        if self._closed or not self._is_root(tid):
            return
        comb = self._combiner(tid)
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # driven without an event loop (a unit test): no deadlines
            return
        if comb is None:
            return
        first = comb.next_epoch
        self._armed = {k for k in self._armed if k[0] != tid or k[1] >= first}
        now = self._clock()
        for epoch, at in comb.first_arrivals().items():
            key = (tid, epoch)
            if key in self._armed:
                continue
            self._armed.add(key)
            self._note(tid, epoch, "opened_at", at)
            deadline = self._deadline_for(epoch)
            if deadline is None or not self._live(epoch, deadline, now):
                continue
            delay = max(0.0, at + deadline - now)
            self._timers[key] = loop.call_later(delay, self._fire, tid, epoch)

    def _fire(self, tid: int, epoch: int) -> None:
        self._timers.pop((tid, epoch), None)
        if self._closed or not self._is_root(tid):
            return
        comb = self._combiner(tid)
        if comb is None or comb.next_epoch > epoch:
            return  # emitted in time: the steady state
        now = self._clock()
        for e in sorted(x for x in comb.first_arrivals() if x <= epoch):
            opened, deadline = comb.opened_at(e), self._deadline_for(e)
            if opened is None or deadline is None or opened + deadline > now + SLACK:
                continue
            if not self._live(e, deadline, now):
                continue
            current = self.store.peek(tid, e)
            if current is None:
                self._preview(tid, e, comb, now)

    def _live(self, epoch: int, deadline: float, now: float) -> bool:
        """Whether ``epoch`` is live (module contract), not a replay's or a catch-up's."""
        late = now - self._closes_at(epoch)
        return late <= deadline + LIVE_EPOCHS * self._seconds_of(epoch)

    def refresh(self, tid: int, epoch: int) -> None:
        """A late contribution was folded into a previewed epoch: show it (a new version)."""
        current = self.store.peek(tid, epoch)
        comb = self._combiner(tid)
        if current is None or not current.preview or comb is None:
            return
        if self._preview(tid, epoch, comb, self._clock()):
            self.refreshed += 1

    def _preview(self, tid: int, epoch: int, comb: EpochCombiner, now: float) -> bool:
        held = comb.preview(epoch)
        if held is None:
            return False
        snap, lineage, waiting = held
        expected, doubtful = self._expected(epoch)
        result = self.store.put_preview(
            tid, epoch, snap, now, origins=lineage, expected=expected, doubtful=doubtful
        )
        if result is None:
            return False
        self.previews += 1
        self._note(tid, epoch, "preview_at", now)
        self._log.info(
            f"preview {tid:x}",
            "job %s tree %x epoch %d: tentative preview %.3f s after it closed (version %d, "
            "coverage %.3f, lacking %s); the barrier still waits for %s",
            self.job,
            tid,
            epoch,
            now - self._closes_at(epoch),
            result.version,
            result.coverage,
            ", ".join(result.lacking[:8]) or "-",
            ", ".join(w if isinstance(w, str) else f"{w:x}" for w in waiting[:8]) or "-",
        )
        self._on_stored(tid, epoch, result)
        return True

    # ---- timeline -------------------------------------------------------------------------
    def stored(self, tid: int, epoch: int) -> None:
        """The epoch's stored result changed at this root (the barrier's result, a fold)."""
        result = self.store.peek(tid, epoch)
        if result is None or result.preview:
            return
        now = self._clock()
        self._note(tid, epoch, "stored_at", now)
        if not result.tentative:
            self._note(tid, epoch, "final_at", now)

    def _note(self, tid: int, epoch: int, what: str, at: float) -> None:
        key = (tid, epoch)
        entry = self._timeline.get(key)
        if entry is None:
            entry = self._timeline[key] = {}
            while len(self._timeline) > TIMELINE:
                self._timeline.popitem(last=False)
        entry.setdefault(what, at)

    def timeline(self, recent: int = 64) -> list[dict[str, Any]]:
        """The recent epochs' timings at this root (module contract), oldest first."""
        out = []
        for (tid, epoch), entry in list(self._timeline.items())[-recent:]:
            out.append(
                {
                    "tree": f"{tid:040x}",
                    "epoch": epoch,
                    "closes_at": self._closes_at(epoch),
                    **entry,
                }
            )
        return out

    def stats(self) -> dict[str, Any]:
        return {"previews": self.previews, "refreshed": self.refreshed, "armed": len(self._timers)}

    def close(self) -> None:
        """Stop: cancel every armed deadline."""
        self._closed = True
        for handle in self._timers.values():
            handle.cancel()
        self._timers.clear()
        self._armed.clear()
