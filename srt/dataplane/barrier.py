"""EpochCombiner: the combining-tree barrier of one (job, tree) on one node.

Per epoch the combiner merges the node's own local snapshot (if it has input) with every
expected child's snapshot and emits the merged result (after the operator's ``level`` step)
only once all of them have arrived and every earlier epoch has been emitted: epochs leave a
node - and so reach the master - strictly in order, each exactly once.

Precise semantics (``docs/srt-dataplane.md`` has the long form):

* **Names.** A snapshot is identified by (sender, epoch) within the combiner (job and tree are
  the combiner's). The first offer of a name for an open epoch (``epoch >= next_epoch``) is
  merged (``"merged"``); any later offer of that name is ``"duplicate"``; an offer for an
  epoch already emitted is ``"stale"`` (counted, not merged). Senders that are not (or no
  longer) children are merged too - their data is never dropped - but never block an epoch.
* **Who blocks epoch e.** Every child c with ``start[c] <= e``, and the local input if
  ``expect_local`` and ``local_start <= e``. Children given to the constructor start at
  ``first_epoch``. A child added by :meth:`EpochCombiner.set_children` (or the local input
  switched on by :meth:`set_expect_local`) gets a *tentative* start: the first epoch after
  every epoch that has already received something (``max(next_epoch, last touched + 1)``),
  so epochs in progress keep their membership. Its first delivery for an open epoch f then
  fixes ``start = f``: epochs before f stop waiting for it (it sent them elsewhere or has no
  data there), epochs from f on wait for it. Senders deliver in epoch order
  (:class:`srt.dataplane.upstream.UpstreamSender` does), so nothing it sends later is missed.
* **Floating start.** With ``first_epoch=None`` (what agents use: event-time epoch indices are
  absolute, e.g. ~1.7e9 for 1 s epochs) the combiner starts at the lowest epoch offered before
  its first emit, and the constructor's members are tentative like new ones.
* **Removal.** A removed child stops blocking at once; what it already delivered stays.
* **Nobody expected.** An open epoch with no expected contributor and nothing received is
  emitted as an empty snapshot as soon as a later epoch has received something, so a parent
  never waits forever for an epoch this node has no data for.
* **Straggler leaping** (ELF; off unless ``straggler_epochs`` is given, k >= 1). When the
  oldest open epoch e is blocked only by members that have not delivered e while some other
  member (a child, or the local input) has delivered an epoch >= e + k, e is emitted at once
  without them: they are *leapt* for e (:attr:`EpochCombiner.leaps` records job, tree,
  epoch, member, when the condition became true and when e left; counted as ``leapt`` per
  member and ``leapt_epochs``; a WARNING within the log budget). The emitted lineage lacks
  their origins, so the master reports e tentative, naming them. A leapt member's later
  snapshot of e is ``"stale"`` (counted ``stale_leapt`` too) and goes to the master, which
  folds it in by lineage - never merged twice. Only arrivals decide it (pure state: no
  timers), and - with ``straggler_wait(e)`` - the time e has been open by the injected clock
  (since its first arrival, or a later epoch's): behind by epochs *and* by time, so a catch-up
  (a replay, a restart) where members reach epochs seconds apart leaps over nobody. The check
  runs at each offer; epochs still leave in order, each once.

* **Lineage** (:mod:`srt.dataplane.lineage`). An offer may carry the set of origins it
  covers (``origins``); the local snapshot covers this node's own ``origin``. With lineage,
  an offer for an open epoch is classified against the origins already merged there: a
  subset is ``"duplicate"``, a disjoint set is merged (``"merged"``), a partial overlap is
  ``"overlap"`` - counted, logged at WARNING and not merged, because a merged snapshot
  cannot be split; the origins it alone held stay missing until they arrive on their own.
  In all three cases the sender counts as arrived for that epoch. Without lineage
  (``origins=None``, an older peer) deduplication is by name as above, and the epoch's
  lineage becomes unknown. :meth:`EpochCombiner.lineage_of` gives an open or recently
  emitted epoch's origins (None: unknown). **Record counts**: the local snapshot may say how
  many input records it folded (``offer_local(records=n)``) and a child's lineage may carry
  its origins' counts (a :class:`~srt.dataplane.lineage.Counted`); merged contributions are
  disjoint, so their counts are unioned, and ``lineage_of`` returns a ``Counted`` lineage
  whenever some count is known (what goes up the tree with the epoch).
* **Admission** (before anything is recorded): :meth:`EpochCombiner.check` refuses an offer
  more than ``max_ahead`` epochs past ``next_epoch`` or past ``horizon()``
  (:class:`EpochTooFarAhead`, 503 ``epoch_ahead``) and a child's snapshot that does not match
  ``expect(epoch)`` (:class:`srt.errors.Incompatible`, 409 ``incompatible``; see
  :mod:`srt.dataplane.compat`). Refusals are counted (``refused_ahead``,
  ``refused_incompatible``) and logged at WARNING with job, tree, epoch and origin. The local
  snapshot is the node's own and is bounded but not type-checked.

The emit callback may be sync or async; calls happen in epoch order and async ones are
awaited one after another (:meth:`EpochCombiner.drain` waits for them). A failing emit is
logged and counted; it never breaks the barrier.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections import Counter, deque
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from cbt import Snapshot
from overlay.logbudget import LogBudget
from srt.dataplane.compat import Expectation, admit
from srt.dataplane.lineage import (
    DUPLICATE,
    NEW,
    Counted,
    Lineage,
    absent,
    classify,
    decode,
    describe,
    merge_records,
    records_of,
)
from srt.dataplane.name import SnapshotName
from srt.dataplane.operators import LevelOperator, select
from srt.errors import Incompatible, Reject, RetryLater

log = logging.getLogger(__name__)

LOCAL = "local"
EMITTED_LINEAGE = 1024  # emitted epochs whose lineage stays answerable (late folds consult it)
LEAP_RECORDS = 256  # recent leaps kept for status and benchmarks (all are counted)


class EpochTooFarAhead(RetryLater, ValueError):
    """An offer for an epoch more than ``max_ahead`` past the next epoch to emit (or past the
    combiner's horizon): a 503 ``epoch_ahead`` rejection the sender retries later (the
    receiver may be behind, e.g. waiting for a dead child)."""

    def __init__(self, detail: str) -> None:
        super().__init__("epoch_ahead", detail)


@dataclass
class _Open:
    acc: Snapshot | None = None
    local: bool = False
    senders: set[int] = field(default_factory=set)
    origins: set[int] = field(default_factory=set)
    unknown: bool = False  # something without lineage was merged: the origins are a floor
    records: dict[int, int] = field(default_factory=dict)  # origin → records, where known


@dataclass
class _Member:
    start: int
    confirmed: bool


@dataclass(frozen=True)
class Leap:
    """One member leapt over for one epoch: ``member`` (a child id, or "local") had not
    delivered ``epoch`` when ``ahead`` (another member's newest delivered epoch) reached
    ``epoch + straggler_epochs``; ``detected_at`` is when that became true, ``emitted_at``
    when the epoch left without it (the emit call returned), both by the combiner's clock."""

    job: str
    tree: int
    epoch: int
    member: int | str
    ahead: int
    detected_at: float
    emitted_at: float

    def to_dict(self) -> dict[str, Any]:
        member = self.member if isinstance(self.member, str) else f"{self.member:x}"
        return {
            "job": self.job,
            "tree": f"{self.tree:x}",
            "epoch": self.epoch,
            "member": member,
            "ahead": self.ahead,
            "detected_at": self.detected_at,
            "emitted_at": self.emitted_at,
            "leap_ms": (self.emitted_at - self.detected_at) * 1000,
        }


class EpochCombiner:
    """The per-(job, tree) barrier on one node (contract in the module docstring).

    ``max_ahead`` bounds how far past ``next_epoch`` an offer may be (memory bound against a
    runaway sender): further offers raise :class:`EpochTooFarAhead`. ``horizon()`` (optional)
    is an absolute upper bound on accepted epochs (None: none) - it also covers a floating
    combiner's very first offer, which ``max_ahead`` cannot. ``expect(epoch)`` (optional) is
    what children's snapshots of ``epoch`` must be (:class:`~srt.dataplane.compat.Expectation`,
    None: anything mergeable). ``straggler_epochs`` (None or 0: never) turns straggler leaping
    on, ``straggler_wait(epoch)`` (seconds) adds the time condition; ``clock`` stamps leaps and
    first arrivals (:meth:`opened_at`)."""

    def __init__(
        self,
        *,
        job: str,
        tree: int,
        expect_local: bool,
        children: Iterable[int],
        emit: Callable[[int, Snapshot], Awaitable[None] | None],
        operator: LevelOperator | None = None,
        first_epoch: int | None = 0,
        max_ahead: int = 10_000,
        expect: Callable[[int], Expectation | None] | None = None,
        horizon: Callable[[], int | None] | None = None,
        origin: int | None = None,
        straggler_epochs: int | None = None,
        straggler_wait: Callable[[int], float] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if first_epoch is not None and first_epoch < 0:
            raise ValueError("first_epoch must be >= 0")
        self.straggler_epochs = straggler_epochs  # validated by the setter below
        #: seconds an epoch must have been open before it may be leapt (None: no minimum)
        self.straggler_wait = straggler_wait
        # Floating start (first_epoch None): event-time epoch numbers are absolute (~1.7e9
        # for 1 s epochs), so a combiner created mid-stream starts at the lowest epoch offered
        # before its first emit; its initial members count as new (tentative) ones.
        self._floating = first_epoch is None
        confirmed = not self._floating
        first_epoch = first_epoch or 0
        self.job = job
        self.tree = tree
        self.operator = operator or LevelOperator()
        self.max_ahead = max_ahead
        self._expect = expect
        self._horizon = horizon
        self._emit_cb = emit
        self._next = first_epoch
        self._children = {c: _Member(first_epoch, confirmed) for c in children}
        self._local: _Member | None = _Member(first_epoch, confirmed) if expect_local else None
        self._open: dict[int, _Open] = {}
        self.origin = origin  # the origin the local snapshot covers (None: no lineage)
        self._emitted_lineage: dict[int, Lineage | None] = {}
        self._proto: Snapshot | None = None  # an empty snapshot: filler for empty epochs
        self._emit_task: asyncio.Future | None = None
        self.counters: Counter[str] = Counter()
        self._log = LogBudget(log)  # refusals are counted; the log gets a bounded share
        self._clock = clock
        #: each member's (child id or LOCAL) newest epoch offered: the leaping evidence
        self._delivered: dict[int | str, int] = {}
        self._opened: dict[int, float] = {}  # open epoch -> when its first offer arrived
        #: emitted epochs -> the members leapt over (bounded like the emitted lineage)
        self._leapt: dict[int, frozenset[int | str]] = {}
        self.leaps: deque[Leap] = deque(maxlen=LEAP_RECORDS)

    @property
    def straggler_epochs(self) -> int | None:
        """Leap over members this many epochs behind another member (None: never)."""
        return self._straggler_epochs

    @straggler_epochs.setter
    def straggler_epochs(self, value: int | None) -> None:
        if value is not None and (type(value) is not int or value < 0):
            raise ValueError(f"straggler_epochs must be an int >= 0 or None, got {value!r}")
        self._straggler_epochs = value or None

    # ---- inspection ---------------------------------------------------------------------
    @property
    def next_epoch(self) -> int:
        """The lowest epoch not emitted yet."""
        return self._next

    @property
    def children(self) -> frozenset[int]:
        return frozenset(self._children)

    @property
    def expect_local(self) -> bool:
        return self._local is not None

    def state_of(self, sender: int, epoch: int, origins: Lineage | None = None) -> str | None:
        """ "stale" / "duplicate" if an offer of this name (with this lineage) would be
        refused, else None (an overlap is only known once the offer is admitted)."""
        if self._emitted(epoch):
            return "stale"
        st = self._open.get(epoch)
        if st is None:
            return None
        if origins is not None:
            return "duplicate" if origins and origins <= st.origins else None
        return "duplicate" if sender in st.senders else None

    def lineage_of(self, epoch: int) -> Lineage | None:
        """The origins merged into ``epoch`` so far (open) or when it was emitted (the last
        :data:`EMITTED_LINEAGE` epochs); None when unknown (something without lineage was
        merged, or the epoch is older)."""
        st = self._open.get(epoch)
        if st is not None:
            return None if st.unknown else _lineage(st)
        return self._emitted_lineage.get(epoch)

    def waiting_for(self, epoch: int) -> list[int | str]:
        """Who epoch ``epoch`` still waits for (child ids, and "local")."""
        st = self._open.get(epoch) or _Open()
        out: list[int | str] = []
        if self._local is not None and self._local.start <= epoch and not st.local:
            out.append(LOCAL)
        out.extend(c for c, m in self._children.items() if m.start <= epoch and c not in st.senders)
        return out

    def pending(self) -> dict:
        """Status: next epoch, membership (start epochs), open epochs and whom they wait for."""
        epochs = sorted(set(self._open) | {self._next})
        return {
            "job": self.job,
            "tree": self.tree,
            "next_epoch": self._next,
            "expect_local": self._local is not None,
            "local_from": None if self._local is None else self._local.start,
            "children": {
                c: {"from": m.start, "confirmed": m.confirmed} for c, m in self._children.items()
            },
            "open": {
                e: {
                    "local": e in self._open and self._open[e].local,
                    "received": sorted(self._open[e].senders) if e in self._open else [],
                    "waiting_for": self.waiting_for(e),
                }
                for e in epochs
            },
            "straggler_epochs": self._straggler_epochs,
            "leaps": [leap.to_dict() for leap in list(self.leaps)[-8:]],
            "counters": dict(self.counters),
        }

    def first_arrivals(self) -> dict[int, float]:
        """Open epoch -> when its first offer arrived (by the combiner's clock)."""
        return dict(self._opened)

    def opened_at(self, epoch: int) -> float | None:
        """When the combiner first learnt ``epoch`` had closed somewhere: the first offer for
        it or any later open epoch (epochs close in order), by its clock; None if nothing
        open at or after it has arrived (or it was emitted)."""
        if self._emitted(epoch):
            return None
        times = [at for e, at in self._opened.items() if e >= epoch]
        return min(times) if times else None

    def preview(self, epoch: int) -> tuple[Snapshot, Lineage | None, list[int | str]] | None:
        """What has arrived for the open ``epoch`` so far, without consuming it: (the merge
        after the operator's ``level`` step, its lineage - None when unknown -, whom it
        still waits for); None if it was emitted or nothing arrived for it. A master shows
        this as a tentative result while the epoch is held up."""
        st = self._open.get(epoch)
        if self._emitted(epoch) or st is None or st.acc is None:
            return None
        try:
            snap = self.operator.level(st.acc)
        except Exception:  # the emit path logs operator failures; a preview just shows more
            snap = st.acc
        lineage = None if st.unknown else frozenset(st.origins)
        return snap, lineage, self.waiting_for(epoch)

    def leapt_for(self, epoch: int) -> frozenset[int | str]:
        """The members leapt over when ``epoch`` was emitted (recent epochs; empty if none)."""
        return self._leapt.get(epoch, frozenset())

    # ---- admission ----------------------------------------------------------------------
    def _limit(self, epoch: int) -> str | None:
        """Why ``epoch`` is too far ahead to accept, or None."""
        floating_start = self._floating and (self._proto is None or epoch < self._next)
        if not floating_start and epoch > self._next + self.max_ahead:
            return f"epoch {epoch} is more than {self.max_ahead} past the next epoch {self._next}"
        horizon = self._horizon() if self._horizon is not None else None
        if horizon is not None and epoch > horizon:
            return f"epoch {epoch} is past this job's horizon {horizon}"
        return None

    def _refuse(self, counter: str, epoch: int, origin: int | str, detail: str) -> None:
        self.counters[counter] += 1
        who = origin if isinstance(origin, str) else f"{origin:x}"
        self._log.warning(
            counter,
            "job %s tree %x: refused snapshot of epoch %d from %s: %s",
            self.job,
            self.tree,
            epoch,
            who,
            detail,
        )

    def check(self, epoch: int, snap: Snapshot, origin: int | str = LOCAL) -> Snapshot:
        """Admit a snapshot of ``epoch`` from ``origin`` (a child id, or a label such as
        "local"/"handover") without recording anything: returns the snapshot to merge (an
        empty one re-typed to the expected aggregator) or raises :class:`EpochTooFarAhead`
        (503) / :class:`~srt.errors.Incompatible` (409), counted and logged."""
        if type(epoch) is not int or epoch < 0:
            raise ValueError(f"epoch must be a non-negative int, got {epoch!r}")
        why = self._limit(epoch)
        if why is not None:
            self._refuse("refused_ahead", epoch, origin, why)
            raise EpochTooFarAhead(why)
        try:
            return admit(self._expect(epoch) if self._expect is not None else None, snap)
        except Incompatible as e:
            self._refuse("refused_incompatible", epoch, origin, e.detail)
            raise

    # ---- offers -------------------------------------------------------------------------
    def _check_epoch(self, epoch: int) -> None:
        if type(epoch) is not int or epoch < 0:
            raise ValueError(f"epoch must be a non-negative int, got {epoch!r}")
        why = self._limit(epoch)
        if why is not None:
            raise EpochTooFarAhead(why)

    def _emitted(self, epoch: int) -> bool:
        # a floating combiner has emitted nothing: a lower epoch moves its start instead
        return epoch < self._next and not self._floating

    def _merge(self, epoch: int, snap: Snapshot) -> _Open:
        # Snapshots of one epoch must share an aggregator (ValueError otherwise); epochs may
        # differ after a runtime change of the job's aggregate, and an empty snapshot (e.g.
        # the filler below) merges with any.
        st = self._open.get(epoch) or _Open()
        acc = self.operator.merge(st.acc, snap)  # may raise: nothing is recorded before it
        if self._floating and (self._proto is None or epoch < self._next):
            self._next = epoch  # nothing emitted yet: start at the lowest epoch offered
        st.acc = acc
        if self._proto is None:
            self._proto = select(snap, np.empty(0, np.intp))
        self._open[epoch] = st
        self._opened.setdefault(epoch, self._clock())
        return st

    def _saw(self, member: int | str, epoch: int) -> None:
        """``member`` offered ``epoch``: evidence of how far it got (for leaping)."""
        if epoch > self._delivered.get(member, -1):
            self._delivered[member] = epoch

    def offer_local(
        self, epoch: int, snap: Snapshot, *, complete: bool = True, records: int | None = None
    ) -> str:
        """This node's own snapshot of ``epoch``: "merged" | "duplicate" | "stale".

        ``complete=False``: this node knows its records of ``epoch`` are incomplete (its
        job started on an input other jobs had already read): the epoch stops waiting for
        it but gets none of its records, only its absence marker
        (:func:`srt.dataplane.lineage.absent`) - the master then reports the epoch as lacking
        this origin, and a later complete copy (after a restart's re-read) is still new
        there, never double-counted. ``records``: how many input records the snapshot folded
        (None: not known), carried with the lineage."""
        self._check_epoch(epoch)
        if not complete:
            snap = select(snap, np.empty(0, np.intp))
            self.counters["incomplete_local"] += 1
        self._saw(LOCAL, epoch)
        if self._emitted(epoch):
            self.counters["stale_local"] += 1
            if LOCAL in self._leapt.get(epoch, ()):
                self.counters["stale_leapt"] += 1
            self._advance()  # the evidence may let an older epoch leap
            return "stale"
        st = self._open.get(epoch)
        if st is not None and st.local:
            self.counters["duplicate"] += 1
            return "duplicate"
        own = None if self.origin is None else frozenset((self.origin,))
        if own is not None and complete and records is not None:
            own = Counted(own, {self.origin: records})  # type: ignore[dict-item]
        if own is not None and not complete:
            own = frozenset((absent(self.origin),))  # type: ignore[arg-type]
        if own is not None and st is not None and classify(st.origins, own) != NEW:
            # our own records already arrived through another path (a child's re-send after
            # we restarted, say): counting them again would double them
            st.local = True
            self.counters["duplicate_local"] += 1
            self._advance()
            return "duplicate"
        st = self._merge(epoch, snap)
        st.local = True
        self._add_lineage(st, own)
        if self._local is not None and not self._local.confirmed:
            self._local = _Member(epoch, True)
        self.counters["merged_local"] += 1
        self._advance()
        return "merged"

    def offer_child(
        self, child: int, epoch: int, snap: Snapshot, origins: Lineage | None = None
    ) -> str:
        """A child's snapshot of ``epoch`` covering ``origins`` (None: unknown lineage):
        "merged" | "duplicate" | "overlap" | "stale" (see module doc).

        Admitted first (:meth:`check`, for stale and duplicate names too): raises
        :class:`~srt.errors.Incompatible` (409) for a snapshot that does not fit ``expect``
        and :class:`EpochTooFarAhead` (503) beyond ``max_ahead``/``horizon``, with nothing
        recorded. A ValueError from the merge itself (no ``expect`` given) records nothing
        either."""
        snap = self.check(epoch, snap, child)
        self._check_epoch(epoch)
        self._saw(child, epoch)
        refused = self.state_of(child, epoch, origins)
        if refused is not None:
            self.counters[refused] += 1
            if refused == DUPLICATE:
                self._arrived(child, epoch)
            else:
                if child in self._leapt.get(epoch, ()):
                    self.counters["stale_leapt"] += 1
                self._advance()
            return refused
        st = self._open.get(epoch)
        if origins and st is not None and classify(st.origins, origins) != NEW:
            self._refuse_overlap(child, epoch, origins, st)
            self._arrived(child, epoch)
            self._advance()
            return "overlap"
        st = self._merge(epoch, snap)
        st.senders.add(child)
        self._add_lineage(st, origins)
        member = self._children.get(child)
        if member is None:
            self.counters["merged_unexpected"] += 1
        else:
            if not member.confirmed:
                self._children[child] = _Member(epoch, True)
            self.counters["merged"] += 1
        self._advance()
        return "merged"

    def _add_lineage(self, st: _Open, origins: Lineage | None) -> None:
        if origins is None:
            st.unknown = True
        else:
            st.origins |= origins
            counts = records_of(origins)
            if counts:  # disjoint contributions: disjoint counts
                st.records = merge_records(st.records, counts)

    def _arrived(self, child: int, epoch: int) -> None:
        """``child`` delivered what it had for ``epoch`` (all of it already held here)."""
        st = self._open.get(epoch)
        if st is not None and child not in st.senders:
            st.senders.add(child)
            member = self._children.get(child)
            if member is not None and not member.confirmed:
                self._children[child] = _Member(epoch, True)
            self._advance()

    def _refuse_overlap(self, child: int, epoch: int, origins: Lineage, st: _Open) -> None:
        self.counters["overlap"] += 1
        both = origins & st.origins
        self._log.warning(
            "overlap",
            "job %s tree %x epoch %d: contribution from %x covers origins %s already merged "
            "here and %s not; not merged (it would double-count the first), the others stay "
            "missing until they arrive alone",
            self.job,
            self.tree,
            epoch,
            child,
            describe(both)[:8],
            describe(origins - both)[:8],
        )

    # ---- membership ---------------------------------------------------------------------
    def _tentative_start(self) -> int:
        return max(self._next, max(self._open, default=-1) + 1)

    def set_children(self, children: Iterable[int], start: int | None = None) -> None:
        """Replace the child set: removed children stop blocking; new ones start tentatively
        after every epoch already touched, then from their first delivery (module doc).
        ``start``: new children block every epoch from ``start`` on (confirmed, not
        tentative; never before the next epoch to emit) - a new root taking over its dead
        predecessor's members for the epochs still in flight (``docs/fault-tolerance.md``,
        "Replicated masters")."""
        new = set(children)
        if start is None:
            member = _Member(self._tentative_start(), False)
        else:
            member = _Member(max(start, self._next), True)
        self._children = {
            c: self._children.get(c) or _Member(member.start, member.confirmed) for c in new
        }
        # leaping evidence only of members (bounded by the child set)
        self._delivered = {m: e for m, e in self._delivered.items() if m in new or m == LOCAL}
        self._advance()

    def set_expect_local(self, flag: bool) -> None:
        """Switch waiting for the local snapshot on (tentative start, as for a new child) or
        off (stops blocking at once)."""
        if flag and self._local is None:
            self._local = _Member(self._tentative_start(), False)
        elif not flag:
            self._local = None
        self._advance()

    # ---- emission -----------------------------------------------------------------------
    def _complete(self, epoch: int) -> bool:
        if self.waiting_for(epoch):
            return False
        if epoch in self._open:
            return True
        # nothing expected and nothing received: empty, once a later epoch has data
        return self._proto is not None and any(e > epoch for e in self._open)

    def _leapable(self, epoch: int) -> tuple[list[int | str], int] | None:
        """(the members to leap over for ``epoch``, the epoch another member reached) when
        straggler leaping applies to it (module doc), else None."""
        k = self._straggler_epochs
        if k is None:
            return None
        waiting = self.waiting_for(epoch)
        if not waiting:
            return None
        members: list[int | str] = list(self._children)
        if self._local is not None:
            members.append(LOCAL)
        ahead = max((self._delivered.get(m, -1) for m in members if m not in waiting), default=-1)
        if ahead < epoch + k or (epoch not in self._open and self._proto is None):
            return None
        if self.straggler_wait is not None:
            opened = self.opened_at(epoch)
            if opened is None or self._clock() - opened < self.straggler_wait(epoch):
                return None  # behind in epochs, not in time: a catch-up, not a straggler
        return waiting, ahead

    def _advance(self) -> None:
        while True:
            epoch = self._next
            leap = None
            if not self._complete(epoch):
                leap = self._leapable(epoch)
                if leap is None:
                    return
            detected_at = self._clock() if leap is not None else 0.0
            st = self._open.pop(epoch, None)
            self._opened.pop(epoch, None)
            snap = st.acc if st is not None and st.acc is not None else self._proto
            assert snap is not None
            self._next = epoch + 1
            if st is None:
                self._emitted_lineage[epoch] = frozenset()
            else:
                self._emitted_lineage[epoch] = None if st.unknown else _lineage(st)
            while len(self._emitted_lineage) > EMITTED_LINEAGE:
                del self._emitted_lineage[next(iter(self._emitted_lineage))]
            if leap is not None:
                self._leapt[epoch] = frozenset(leap[0])
                while len(self._leapt) > EMITTED_LINEAGE:
                    del self._leapt[next(iter(self._leapt))]
            self._floating = False
            try:
                out = self.operator.level(snap)
            except Exception:
                log.exception(
                    "operator failed on %s epoch %d; passing the merge up", self.job, epoch
                )
                self.counters["operator_errors"] += 1
                out = snap
            self.counters["emitted"] += 1
            self._emit(epoch, out)
            if leap is not None:
                self._record_leap(epoch, leap[0], leap[1], detected_at)

    def _record_leap(
        self, epoch: int, members: list[int | str], ahead: int, detected_at: float
    ) -> None:
        emitted_at = self._clock()
        self.counters["leapt_epochs"] += 1
        for member in members:
            self.counters["leapt"] += 1
            self.leaps.append(
                Leap(self.job, self.tree, epoch, member, ahead, detected_at, emitted_at)
            )
        self._log.warning(
            "leap",
            "job %s tree %x epoch %d left without %s: %d+ epochs behind (another member "
            "delivered epoch %d); their late snapshots are folded in at the master "
            "(%.2f ms from detection to emit)",
            self.job,
            self.tree,
            epoch,
            ", ".join(m if isinstance(m, str) else f"{m:x}" for m in members[:8]),
            ahead - epoch,
            ahead,
            (emitted_at - detected_at) * 1000,
        )

    def _emit(self, epoch: int, snap: Snapshot) -> None:
        try:
            res = self._emit_cb(epoch, snap)
        except Exception:
            log.exception("emit failed for %s tree %x epoch %d", self.job, self.tree, epoch)
            self.counters["emit_errors"] += 1
            return
        if inspect.isawaitable(res):
            self._emit_task = asyncio.ensure_future(self._chain(self._emit_task, res, epoch))

    async def _chain(self, prev: asyncio.Future | None, res: Awaitable[Any], epoch: int) -> None:
        if prev is not None:
            await asyncio.shield(prev)
        try:
            await res
        except Exception:
            log.exception("emit failed for %s tree %x epoch %d", self.job, self.tree, epoch)
            self.counters["emit_errors"] += 1

    async def drain(self) -> None:
        """Wait until every async emit started so far has finished."""
        while self._emit_task is not None and not self._emit_task.done():
            await asyncio.shield(self._emit_task)


def _lineage(st: _Open) -> Lineage:
    """An open epoch's lineage, with its record counts when some are known."""
    return Counted(st.origins, st.records) if st.records else frozenset(st.origins)


def snapshot_handler(
    resolve: Callable[[SnapshotName], EpochCombiner | None],
) -> Callable[[SnapshotName, bytes], Awaitable[str]]:
    """A :meth:`DataPlaneServer.on_snapshot` handler feeding the combiner ``resolve(name)``
    returns. Unknown (job, tree) → 503 ``unknown_tree`` (the sender retries: the receiver may
    not have set the tree up yet); duplicates and stale names are answered without decoding;
    a corrupt body → 422; an incompatible snapshot → 409 ``incompatible``; an epoch too far
    ahead → 503 ``epoch_ahead`` (both refused before the combiner records anything)."""

    async def handle(name: SnapshotName, body: bytes) -> str:
        comb = resolve(name)
        if comb is None:
            raise RetryLater("unknown_tree", f"no combiner for job {name.job!r} tree {name.tree:x}")
        origins, body = decode(body)  # LineageError (a SnapshotError) -> 422
        refused = comb.state_of(name.sender, name.epoch, origins)
        if refused is not None:
            comb.counters[refused] += 1
            return refused
        snap = Snapshot.from_bytes(body)  # SnapshotError -> 422, the sender resends
        try:
            return comb.offer_child(name.sender, name.epoch, snap, origins)
        except Reject:  # EpochTooFarAhead (503), Incompatible (409): the documented answers
            raise
        except ValueError as e:  # a merge refused without an expectation: still incompatible
            comb.counters["refused_incompatible"] += 1
            raise Incompatible(str(e)) from None

    return handle
