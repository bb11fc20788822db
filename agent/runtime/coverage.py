"""ExpectedOrigins: which origins a job's master expects in each epoch's result.

Contract. An **origin** is an agent that reads the job's input; the lineage of each stored
result (:mod:`srt.dataplane.lineage`) says which origins it covers. The master feeds every
result's lineage to :meth:`ExpectedOrigins.observe`; :meth:`ExpectedOrigins.expected` then
answers, for epoch e, the origins that

* contributed to some epoch in ``[e - grace_epochs, e + horizon]`` (an agent that crashed
  stays expected for ``grace_epochs`` after its last contribution, so the epochs it misses
  while it is down - or for good - are *tentative*, lacking it, never silently final), and
* had joined by e (its first contribution is at or before e: an agent that joins later is
  not missing from earlier epochs), and
* has not left gracefully before e (:meth:`left`), nor been declared dead before e
  (:meth:`lose`: an agent lost for good is not expected from the first epoch that began after
  its death was declared; the epochs between its last contribution and then that still lack
  it are *past repair* - :meth:`past_repair` - so the commit watermark passes them, still
  tentative and naming it).

It is pure state (no clock, no I/O); :meth:`export` / :meth:`restore` carry it to a new
master, and :meth:`members` / :meth:`restore_members` let a master persist who the origins
are (a restarted master then still expects them: each stays expected for ``grace_epochs``
after the first epoch it stores again, instead of calling one-origin epochs complete).
Bounded by the number of origins the job has had within the grace (older ones are forgotten
on :meth:`observe`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from srt.dataplane.lineage import Lineage, plain


class ExpectedOrigins:
    """Per job at its master: origin → (first, last) epoch seen, and graceful leaves."""

    def __init__(self, grace_epochs: int = 60) -> None:
        if grace_epochs < 1:
            raise ValueError("grace_epochs must be >= 1")
        self.grace_epochs = grace_epochs
        self._first: dict[int, int] = {}
        self._last: dict[int, int] = {}
        self._left: dict[int, int] = {}  # origin -> the first epoch it no longer feeds
        self._lost: dict[int, int] = {}  # origin declared dead -> the first epoch not expected
        self._restored: set[int] = set()  # members restored, not yet given a last epoch
        #: None, or this master's own id while it doubts it knows every origin (it became
        #: the root after being a member, with nothing handed over): cleared by news of any
        #: other origin (a contribution, an announcement, a replica or hand-over)
        self.doubt: int | None = None

    def observe(self, epoch: int, origins: Lineage | None) -> bool:
        """The result of ``epoch`` covers ``origins`` (None: unknown, ignored); True when an
        origin was seen for the first time (the members changed)."""
        if origins is None:
            return False
        for o in self._restored:  # restored members count as seen now: their grace starts
            self._last[o] = max(self._last.get(o, epoch), epoch)
        self._restored = set()
        new = False
        self._learned(plain(origins))
        for o in plain(origins):  # an origin marked absent is still one of the job's
            new = new or o not in self._first
            self._first[o] = min(self._first.get(o, epoch), epoch)
            self._last[o] = max(self._last.get(o, epoch), epoch)
            if self._left.get(o, epoch + 1) <= epoch:
                del self._left[o]  # it came back
                self._lost.pop(o, None)
        newest = max(self._last.values(), default=epoch)
        for o in [o for o, last in self._last.items() if last < newest - 2 * self.grace_epochs]:
            self._forget(o)
            new = True
        return new

    def doubt_until_told(self, self_id: int) -> None:
        """This master may not know every origin: doubt until another origin is heard of."""
        if not any(o != self_id for o in self._first):
            self.doubt = self_id

    def _learned(self, origins: Iterable[int]) -> None:
        if self.doubt is not None and any(o != self.doubt for o in origins):
            self.doubt = None

    def members(self) -> dict[str, int]:
        """Origin (hex) → the first epoch it contributed to: what a master persists."""
        return {format(o, "x"): first for o, first in self._first.items()}

    def restore_members(self, members: Any) -> None:
        """Members persisted by an earlier run of this master (malformed entries skipped):
        expected again from the first epoch observed after this call."""
        if not isinstance(members, dict):
            return
        for key, first in members.items():
            try:
                origin, first = int(key, 16), int(first)
            except (TypeError, ValueError):
                continue
            if origin not in self._first:
                self._first[origin] = first
                self._restored.add(origin)
                self._learned((origin,))

    def join(self, origin: int, from_epoch: int) -> bool:
        """``origin`` announced it reads the job's input from ``from_epoch`` on: expected
        from then (its grace counted from there); True if it was not a member yet."""
        new = origin not in self._first
        self._learned((origin,))
        self._first[origin] = min(self._first.get(origin, from_epoch), from_epoch)
        self._last[origin] = max(self._last.get(origin, from_epoch), from_epoch)
        self._restored.discard(origin)
        if self._left.get(origin, from_epoch + 1) <= from_epoch:
            del self._left[origin]
            self._lost.pop(origin, None)
        return new

    def left(self, origin: int, from_epoch: int) -> None:
        """``origin`` stopped feeding the job gracefully: not expected from ``from_epoch``."""
        self._left[origin] = from_epoch

    def lose(self, origin: int, from_epoch: int) -> bool:
        """``origin`` was declared dead: not expected from ``from_epoch`` (the first epoch that
        began after the declaration; it cannot have read anything of it). True if it was a
        member not already lost."""
        if origin not in self._first or origin in self._lost:
            return False
        self._lost[origin] = from_epoch
        self._left[origin] = min(self._left.get(origin, from_epoch), from_epoch)
        return True

    def lost(self) -> dict[int, int]:
        """Origins declared dead → the first epoch they are not expected in."""
        return dict(self._lost)

    def past_repair(self, epoch: int) -> Lineage:
        """Origins whose absence from ``epoch`` nobody can repair any more: declared dead
        before its end (their replicas were re-issued already; what is still missing died
        with them)."""
        return frozenset(o for o, f in self._lost.items() if epoch < f)

    def expected(self, epoch: int) -> Lineage | None:
        """The origins epoch ``epoch`` should cover (None: nothing observed yet)."""
        if not self._last and not self._restored:
            return None
        return frozenset(
            o
            for o, first in self._first.items()
            if first <= epoch
            and (o in self._restored or self._last.get(o, epoch) >= epoch - self.grace_epochs)
            and self._left.get(o, epoch + 1) > epoch
        )

    def members_set(self) -> frozenset[int]:
        """Every origin known (expected now or within the grace)."""
        return frozenset(self._first)

    def origins(self) -> int:
        return len(self._last)

    def _forget(self, origin: int) -> None:
        self._restored.discard(origin)
        self._first.pop(origin, None)
        self._last.pop(origin, None)
        self._left.pop(origin, None)
        self._lost.pop(origin, None)

    def export(self) -> dict[str, Any]:
        """JSON-able state for a new master."""
        return {
            "grace_epochs": self.grace_epochs,
            "origins": {
                format(o, "x"): [self._first[o], self._last[o], self._left.get(o)]
                for o in self._last
            },
            "lost": {format(o, "x"): f for o, f in self._lost.items()},
        }

    def restore(self, state: Any) -> None:
        """Merge an exported state (malformed entries are skipped)."""
        if not isinstance(state, dict) or not isinstance(state.get("origins"), dict):
            return
        for key, value in state["origins"].items():
            try:
                origin = int(key, 16)
                first, last, left = value
                first, last = int(first), int(last)
            except (TypeError, ValueError):
                continue
            self._first[origin] = min(self._first.get(origin, first), first)
            self._last[origin] = max(self._last.get(origin, last), last)
            self._learned((origin,))
            if left is not None and origin not in self._left:
                self._left[origin] = int(left)
        lost = state.get("lost")
        for key, first in lost.items() if isinstance(lost, dict) else ():
            try:
                origin, first = int(key, 16), int(first)
            except (TypeError, ValueError):
                continue
            if origin in self._first and origin not in self._lost:
                self._lost[origin] = first
                self._left[origin] = min(self._left.get(origin, first), first)
