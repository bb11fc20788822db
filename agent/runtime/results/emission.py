"""What a reader is shown of an epoch's versions under ``EMIT FINAL`` / ``EMIT CHANGES``.

Contract (pure: no I/O, no clock). A reader observes epochs' results as :class:`Seen` -
``(epoch, revision, state)``, ``revision`` growing with every new version of any tree's part
(the results API's ``revision``), ``state`` ``final`` / ``tentative`` / ``partial``.

* :func:`shown` - whether a version in ``state`` is visible under ``emit``: ``changes`` shows
  every state; ``final`` shows ``final`` and ``partial`` (a partial epoch lacks only origins
  given up on: it is the last version it will get, flagged), never ``tentative``.
* :class:`EmissionFilter` decides, poll after poll (:meth:`EmissionFilter.offer`, or
  :meth:`~EmissionFilter.select` then :meth:`~EmissionFilter.emitted` for what was sent, with
  the observations of one poll), which observations a stream emits:

  - an observation is emitted when :func:`shown` allows it, it lies past the cursor, and its
    ``(revision, state)`` differs from the last one emitted for its epoch (a poll that sees
    nothing new emits nothing; a later non-tentative version of an epoch already emitted
    final - a late contribution folded in - is emitted again, a correction);
  - the cursor ``after = (E, R)`` (:func:`parse_cursor`, ``"E:R"``: what a reader saw last)
    hides every epoch below E and E's revisions up to R;
  - without a cursor, the first poll decides where the stream starts: at the newest epoch
    :func:`shown` allows (emitted at once); older epochs are taken as seen as they are (their
    next versions under ``changes``, their first non-tentative one under ``final``, are
    emitted later); after a first poll with nothing shown (``final``: every epoch still
    tentative) each of its epochs is emitted once final, and every newer one;
  - :meth:`EmissionFilter.resume` is the cursor a reader reconnects with: since epochs settle
    out of order (an older epoch stays tentative while newer ones are final), it is the
    oldest epoch still tentative, not the newest event's position. At least once: what came
    after it is sent again. A correction of an epoch already settled before that point (a
    late fold, a retired origin back) made while the reader was away is not re-sent: the
    results API (``?epoch=E``) and the lake have it.

  Memory: at most :data:`MAX_TRACKED` epochs are remembered (the least recently emitted are
  forgotten: far more epochs than a master holds per tree, 256 by default).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass

from agent.jobs.spec import EMITS

__all__ = ["EMITS", "MAX_TRACKED", "Cursor", "EmissionFilter", "Seen", "parse_cursor", "shown"]
#: epochs whose last emitted version a filter remembers (masters hold 256 per tree by default)
MAX_TRACKED = 4096


@dataclass(frozen=True, order=True)
class Seen:
    """One observed version of an epoch's result."""

    epoch: int
    revision: int
    state: str


@dataclass(frozen=True)
class Cursor:
    """A reader's position: it has seen ``epoch`` up to ``revision`` (and every older epoch)."""

    epoch: int
    revision: int

    def __str__(self) -> str:
        return f"{self.epoch}:{self.revision}"


def shown(emit: str, state: str) -> bool:
    """Whether a version in ``state`` is visible under ``emit`` (module contract)."""
    return emit == "changes" or state != "tentative"


def parse_cursor(text: str) -> Cursor:
    """``"E:R"`` (or ``"E"``: every revision of E seen) → :class:`Cursor`; ``ValueError``."""
    epoch, sep, revision = text.partition(":")
    try:
        e, r = int(epoch), int(revision) if sep else 2**62
    except ValueError:
        raise ValueError(f"expected EPOCH:REVISION (two integers), got {text[:40]!r}") from None
    if e < 0 or r < 0:
        raise ValueError(f"expected a non-negative EPOCH:REVISION, got {text[:40]!r}")
    return Cursor(e, r)


class EmissionFilter:
    """The emission decisions of one stream (module contract)."""

    def __init__(self, emit: str, after: Cursor | None = None) -> None:
        if emit not in EMITS:
            raise ValueError(f"emit must be one of {', '.join(EMITS)}, got {emit!r}")
        self.emit = emit
        self.after = after
        self._last: OrderedDict[int, tuple[int, str]] = OrderedDict()
        self._started = after is not None
        self._newest: Cursor | None = None  # the highest (epoch, revision) emitted

    def wants(self, seen: Seen) -> bool:
        """Whether ``seen`` would be emitted now (nothing is recorded)."""
        if not shown(self.emit, seen.state):
            return False
        after = self.after
        if after is not None and (
            seen.epoch < after.epoch
            or (seen.epoch == after.epoch and seen.revision <= after.revision)
        ):
            return False
        return self._last.get(seen.epoch) != (seen.revision, seen.state)

    def emitted(self, seen: Seen) -> None:
        """Record ``seen`` as emitted (the stream sent it)."""
        self._remember(seen)
        newest = self._newest
        if newest is None or (seen.epoch, seen.revision) > (newest.epoch, newest.revision):
            self._newest = Cursor(seen.epoch, seen.revision)

    def resume(self, poll: Iterable[Seen]) -> Cursor | None:
        """Where a reader that got everything emitted so far reconnects (``after``) without
        missing a version of an epoch still tentative in ``poll`` (the last poll): the oldest
        such epoch from the last revision it was shown (or taken as seen) at, else the
        newest position emitted; None while nothing was emitted (and no cursor given).
        Versions before it come again (at least once: a reader drops the ``(epoch,
        revision)`` it has); a correction of an older, settled epoch made while the reader
        was away is not among them (module doc)."""
        after = self.after
        pending = [
            s.epoch
            for s in poll
            if s.state == "tentative" and (after is None or s.epoch >= after.epoch)
        ]
        newest = self._newest or after
        if newest is None:
            return None
        if pending and min(pending) <= newest.epoch:
            epoch = min(pending)
            revision = self._last.get(epoch, (0, ""))[0]
            if after is not None and after.epoch == epoch:
                revision = max(revision, after.revision)
            return Cursor(epoch, revision)
        return newest

    def select(self, poll: Iterable[Seen]) -> list[Seen]:
        """The observations of one poll to emit, oldest epoch first (one per epoch: a repeated
        epoch keeps its last), nothing recorded: the caller records what it sent with
        :meth:`emitted`. The first poll without a cursor decides the start (module doc)."""
        latest = {s.epoch: s for s in poll}
        batch = [latest[e] for e in sorted(latest)]
        if not self._started:
            self._start(batch)
        return [s for s in batch if self.wants(s)]

    def offer(self, poll: Iterable[Seen]) -> list[Seen]:
        """:meth:`select`, every observation selected recorded as emitted."""
        out = self.select(poll)
        for s in out:
            self.emitted(s)
        return out

    def _start(self, batch: list[Seen]) -> None:
        """The first poll without a cursor: start at its newest shown epoch (module doc)."""
        self._started = True
        newest = max((s.epoch for s in batch if shown(self.emit, s.state)), default=None)
        if newest is None:  # nothing shown yet (final: every epoch still tentative)
            return
        for s in batch:
            if s.epoch < newest and shown(self.emit, s.state):
                self._remember(s)

    def _remember(self, seen: Seen) -> None:
        self._last[seen.epoch] = (seen.revision, seen.state)
        self._last.move_to_end(seen.epoch)
        while len(self._last) > MAX_TRACKED:
            self._last.popitem(last=False)
