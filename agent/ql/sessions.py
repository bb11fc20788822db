"""Session windows (``WINDOW SESSION(gap)``): per-key sessions closed from per-epoch results.

Contract: a :class:`SessionTracker` is fed one epoch's reduced result at a time (``feed``:
the epoch, its ``(key, state)`` pairs - the aggregator's *states*, not finalized values - and
the epoch's quality flags) and returns the rows of the sessions that closed. Pure: no
runtime, network or clock; the master (``agent.jobs.ql_job``) and ``elf run``
(``agent.runtime.local.oneshot``) drive it with the same epochs, so both give the same rows.

Semantics, at epoch granularity (the epoch is the gap, so ``gap_epochs`` is 1 for queries;
the tracker takes any ``gap_epochs >= 1``). A key is *active* in an epoch when the epoch's
result has a pair for it (a record of the key passed WHERE there). Two active epochs
``a < b`` of a key are in one session when ``b - a <= gap_epochs`` (fewer than
``gap_epochs`` epochs without the key between them); a session closes once ``gap_epochs``
epochs after its last active one have been fed without the key (or at :meth:`flush`, the
end of a finite input). A session's aggregate state is the merge of its epochs' states
(``Aggregator.merge``: count, sum, min, max, avg, the sketches all merge), so its row is what
the query gives over the session's records. Its row: ``window_start`` (the start of its first
active epoch, seconds), ``window_end`` (the end of its last active epoch), the SELECT columns
(HAVING applied per session: a session that fails it gives no row) and ``flags`` (a sorted
list of texts, empty when the row is exact).

Flags (exact or flagged): an epoch fed with quality flags (tentative / partial, naming what it
lacks) flags the sessions it touched *and* the sessions it closed (a key's absence from a result
that lacks an origin proves no inactivity). An epoch fed at or before the newest fed epoch (out
of order: its neighbours were already judged) is counted, logged at WARNING and flags the
sessions it lands in: merged into the key's open session when within gap of it, else a session
of its own, closed at once. Late records of an epoch (:meth:`SessionTracker.mark_late`: their
keys unknown) flag every session within gap of it, open now or opened or extended later;
:func:`flag_rows` flags the closed rows a caller keeps the same way. An epoch fed again (a
replay; the newest :data:`MAX_FED_EPOCHS` are remembered) is skipped and counted
(``refed_epochs``). A hole in the epochs fed (epochs close in
order, empty ones too, so a hole is results never received) is counted (``skipped_epochs``),
logged, and flags the sessions closed across it. Sessions starting within gap of the first epoch
fed may have begun before it when that epoch is not the input's first (``first_epoch`` given and
earlier: a master that took over with the results it holds): flagged. Bound: at most
``max_open`` open sessions (:data:`MAX_OPEN_SESSIONS`); opening one more closes the one idle the
longest *early*, flagged, counted in ``early_closed`` and logged at WARNING. Rows of one
``feed`` are ordered by window_start, window_end, then key.
"""

from __future__ import annotations

import logging
from bisect import bisect_left
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from cbt import Aggregator

log = logging.getLogger(__name__)

#: the bound on open sessions per tracker (one per job master); each holds one merged state
MAX_OPEN_SESSIONS = 100_000
#: a session row's leading columns (seconds, from the epochs' bounds) and its flags column
SESSION_COLUMNS = ("window_start", "window_end")
SESSION_FLAGS = "flags"
#: the epochs a tracker remembers having fed, so a replay of one is skipped, not merged twice
MAX_FED_EPOCHS = 4096

RowFn = Callable[[Any, Any], dict[str, Any] | None]


@dataclass
class _Session:
    start: int
    last: int
    state: Any
    flags: set[str] = field(default_factory=set)


class SessionTracker:
    """Open sessions per key and the rows of those that close (see module docstring).

    ``row(key, value)`` names one group's finalized value (``agent.ql.rows.build_row``: None
    when HAVING drops it);
    ``bounds(epoch)`` is the epoch's ``(start, end)`` in seconds; ``name`` labels log lines."""

    def __init__(
        self,
        agg: Aggregator,
        row: RowFn,
        bounds: Callable[[int], tuple[float, float]],
        *,
        gap_epochs: int = 1,
        max_open: int = MAX_OPEN_SESSIONS,
        first_epoch: int | None = None,
        name: str = "",
    ) -> None:
        if gap_epochs < 1 or max_open < 1:
            raise ValueError("gap_epochs and max_open must be at least 1")
        self.agg = agg
        self.row = row
        self.bounds = bounds
        self.gap = gap_epochs
        self.max_open = max_open
        self.first_epoch = first_epoch
        self.name = name
        # key -> session, least recently active first (closing scans from the front)
        self.open: OrderedDict[Any, _Session] = OrderedDict()
        self.frontier: int | None = None  # the newest epoch fed
        self.began: int | None = None  # the first epoch fed
        self.closed = 0
        self.early_closed = 0
        self.out_of_order_epochs = 0
        self.flagged_epochs = 0
        self.refed_epochs = 0
        self.skipped_epochs = 0
        self.fed: set[int] = set()  # the newest MAX_FED_EPOCHS epochs fed (replays skipped)
        #: epoch -> flags :meth:`mark_late` left for it (none more than gap behind the
        #: frontier: see feed; at most MAX_FED_EPOCHS epochs)
        self.late_marks: dict[int, set[str]] = {}
        self.late_marked = 0  # mark_late calls that flagged something or left a mark

    # ---- feeding -----------------------------------------------------------------------
    def feed(
        self, epoch: int, items: Iterable[tuple[Any, Any]], flags: Iterable[str] = ()
    ) -> list[dict[str, Any]]:
        """One epoch's ``(key, state)`` pairs and its quality flags; the closed sessions'
        rows."""
        if epoch in self.fed:
            # a replay of an epoch already fed (a master rebuilding its state): merging it
            # again would count it twice; a fuller version than the one fed changes nothing
            # here, but the first one was flagged then if it lacked an origin
            self.refed_epochs += 1
            return []
        self.fed.add(epoch)
        while len(self.fed) > MAX_FED_EPOCHS:
            self.fed.discard(min(self.fed))
        marks = set(flags) | self.late_marks.get(epoch, set())
        if marks:
            self.flagged_epochs += 1
        out: list[tuple[Any, _Session]] = []
        late = self.frontier is not None and epoch <= self.frontier
        if late:
            self.out_of_order_epochs += 1
            log.warning(
                "session query %s: epoch %d arrived after epoch %d; its sessions are flagged",
                self.name, epoch, self.frontier,
            )  # fmt: skip
            marks.add(f"epoch {epoch} arrived after epoch {self.frontier} (out of order)")
        if self.began is None:
            self.began = epoch
        skipped = ()
        if not late and self.frontier is not None and epoch > self.frontier + 1:
            # epochs close in order, empty ones too: a hole means results this tracker never
            # got, so a silence inferred across it proves nothing
            self.skipped_epochs += epoch - self.frontier - 1
            skipped = (f"epochs {self.frontier + 1}-{epoch - 1} had no result here",)
            log.warning(
                "session query %s: no result for epochs %d-%d; sessions closed across them "
                "are flagged", self.name, self.frontier + 1, epoch - 1,
            )  # fmt: skip
        # a session starting within gap of this tracker's first epoch may continue activity
        # before it, when that epoch is not the input's first (a master that took over)
        inherited = (
            self.first_epoch is not None
            and self.began > self.first_epoch
            and epoch - self.began < self.gap
        )
        for key, state in items:
            s = self.open.get(key)
            if s is not None and near(s.start, s.last, epoch, self.gap):
                s.state = self.agg.merge(s.state, state)
                s.flags |= marks
                if epoch > s.last:
                    s.last = epoch
                    self.open.move_to_end(key)
                s.start = min(s.start, epoch)
                if self.late_marks:
                    s.flags |= self._late_near(s.start, s.last)
                continue
            fresh = _Session(epoch, epoch, self.agg.copy(state), set(marks))
            if self.late_marks:
                fresh.flags |= self._late_near(epoch, epoch)
            if inherited:
                fresh.flags.add(
                    f"may have begun before epoch {self.began}, the first this master holds"
                )
            if late:  # its neighbours were judged already: a session of its own, closed now
                out.append((key, fresh))
                continue
            if s is not None:  # the key's previous session ended more than gap ago
                ended = self.open.pop(key)
                if skipped:
                    ended.flags.update(skipped)
                out.append((key, ended))
            if len(self.open) >= self.max_open:
                out.append(self._close_early())
            self.open[key] = fresh
        if not late:
            self.frontier = epoch
            # a mark further back than gap can only concern sessions open when it was made
            # (flagged then): new sessions start at or after the frontier
            for old in [e for e in self.late_marks if e < epoch - self.gap]:
                del self.late_marks[old]
            # the keys idle for gap epochs now: their absence from a flagged epoch is no proof
            while self.open:
                key, s = next(iter(self.open.items()))
                if epoch - s.last < self.gap:
                    break
                del self.open[key]
                s.flags |= marks
                s.flags.update(skipped)
                out.append((key, s))
        return self._rows(out)

    def mark_late(self, epoch: int, why: str) -> int:
        """Records of ``epoch`` that its result does not include (late ones: their keys are not
        known here). Every session they could belong to, or join, is flagged ``why``: one open
        now within gap of ``epoch`` (``start - gap <= epoch <= last + gap``), and, from now on,
        one that comes within gap of it (opened or extended by a later feed) and those the
        feed of ``epoch`` touches and closes (as a tentative epoch's flags). Returns the open
        sessions flagged now; closed rows are the caller's (:func:`could_hold`)."""
        self.late_marks.setdefault(epoch, set()).add(why)
        while len(self.late_marks) > MAX_FED_EPOCHS:
            del self.late_marks[min(self.late_marks)]
        self.late_marked += 1
        flagged = 0
        for s in self.open.values():
            if near(s.start, s.last, epoch, self.gap) and why not in s.flags:
                s.flags.add(why)
                flagged += 1
        return flagged

    def _late_near(self, first: int, last: int) -> set[str]:
        """The late marks of the epochs a session of ``first``..``last`` could be joined by."""
        out: set[str] = set()
        for epoch, marks in self.late_marks.items():
            if near(first, last, epoch, self.gap):
                out |= marks
        return out

    def flush(self, why: str | None = None) -> list[dict[str, Any]]:
        """The end of a finite input: every open session closes; their rows (each flagged
        ``why`` when given: closed for another reason than the input's end)."""
        out = list(self.open.items())
        self.open.clear()
        if why is not None:
            for _, s in out:
                s.flags.add(why)
        return self._rows(out)

    def open_rows(self) -> list[dict[str, Any]]:
        """The sessions still open, as rows flagged ``open`` (not counted as closed)."""
        closed = self.closed
        rows = self._rows([(k, _copy_open(s)) for k, s in self.open.items()])
        self.closed = closed
        return rows

    def stats(self) -> dict[str, int | None]:
        """Counters: open, closed, early_closed, out_of_order_epochs, flagged_epochs,
        refed_epochs, skipped_epochs; ``since_epoch``: the first epoch fed (a master that took
        over after the job's first epoch holds no session state from before it)."""
        return {
            "since_epoch": self.began,
            "open": len(self.open),
            "closed": self.closed,
            "early_closed": self.early_closed,
            "out_of_order_epochs": self.out_of_order_epochs,
            "flagged_epochs": self.flagged_epochs,
            "refed_epochs": self.refed_epochs,
            "skipped_epochs": self.skipped_epochs,
            "late_marked": self.late_marked,
        }

    # ---- internals -----------------------------------------------------------------------
    def _close_early(self) -> tuple[Any, _Session]:
        key, s = self.open.popitem(last=False)
        self.early_closed += 1
        s.flags.add(f"closed early: more than {self.max_open} open sessions")
        if self.early_closed == 1 or self.early_closed % 1000 == 0:
            log.warning(
                "session query %s: over %d open sessions; %d closed early so far (flagged)",
                self.name, self.max_open, self.early_closed,
            )  # fmt: skip
        return key, s

    def _rows(self, closed: list[tuple[Any, _Session]]) -> list[dict[str, Any]]:
        closed.sort(key=lambda ks: (ks[1].start, ks[1].last, repr(ks[0])))
        out = []
        for key, s in closed:
            self.closed += 1
            named = self.row(key, self.agg.finalize(s.state))
            if named is None:  # HAVING dropped it
                continue
            start, end = self.bounds(s.start)[0], self.bounds(s.last)[1]
            row = {SESSION_COLUMNS[0]: start, SESSION_COLUMNS[1]: end, **named}
            row[SESSION_FLAGS] = sorted(s.flags)
            out.append(row)
        return out


def state_items(snapshot: Any) -> list[tuple[Any, Any]]:
    """A snapshot's ``(key, state)`` pairs (its raw states: what :meth:`SessionTracker.feed`
    merges), from its public key and value columns."""
    # tolist: numpy scalars (count's int64 column) become Python numbers, as finalize gives
    return list(zip(snapshot.keys_column.tolist(), snapshot.values_column.tolist(), strict=True))


def near(first: int, last: int, epoch: int, gap: int) -> bool:
    """Whether a record of ``epoch`` could belong to, or join, a session of epochs
    ``first``..``last`` with a gap of ``gap`` epochs."""
    return first - gap <= epoch <= last + gap


def _epochs_of(row: dict[str, Any], epoch_of: Callable[[float], int]) -> tuple[int, int]:
    """A closed session row's first and last epochs."""
    return epoch_of(row[SESSION_COLUMNS[0]]), epoch_of(row[SESSION_COLUMNS[1]]) - 1


def could_hold(
    row: dict[str, Any], epoch_of: Callable[[float], int], epoch: int, gap_epochs: int
) -> bool:
    """Whether a closed session's ``row`` could hold, or have been joined by, a record of
    ``epoch`` (:func:`near`): what :meth:`SessionTracker.mark_late` flags among open
    sessions."""
    return near(*_epochs_of(row, epoch_of), epoch, gap_epochs)


def late_flag(epoch: int) -> str:
    """The flag of a session that late records of ``epoch`` could change."""
    return f"late records of epoch {epoch} not included (its result's late field)"


def flag_rows(
    rows: Iterable[dict[str, Any]],
    epochs: Iterable[int],
    epoch_of: Callable[[float], int],
    gap: int,
) -> int:
    """Flag (:func:`late_flag`) every closed session row that late records of ``epochs``
    could change (:func:`could_hold`), in one pass over the rows (the epochs searched, not
    scanned); returns how many rows it flagged."""
    late = sorted(set(epochs))
    flagged = 0
    for row in rows:
        first, last = _epochs_of(row, epoch_of)
        at = bisect_left(late, first - gap)
        hits = []
        while at < len(late) and late[at] <= last + gap:
            hits.append(late_flag(late[at]))
            at += 1
        flags = row[SESSION_FLAGS]
        if new := [h for h in hits if h not in flags]:
            row[SESSION_FLAGS] = sorted([*flags, *new])
            flagged += 1
    return flagged


def _copy_open(s: _Session) -> _Session:
    return _Session(s.start, s.last, s.state, {*s.flags, "open (not closed yet)"})
