"""A mirror of an inner position (adaptive redundancy): it merges the epochs its members
mirror to it and sends each up as the holder - at once when whole, or without the members
still missing once a hedge delay has passed.

Contract (``docs/fault-tolerance.md``, "Adaptive redundancy"; Tran's mirroring, ELF's
"mirroring straggler"). Pure state: the caller owns the clock and the I/O.

* The holder announces its members (its children and itself); each member sends the mirror
  the epochs :func:`~agent.runtime.recovery.redundancy_control.mirrored_siblings` chooses at
  the ratio rho (every member of one position the same epochs). Each such epoch gets its
  own barrier (the job's operator and checks, ``new_barrier(epoch, emit)``) waiting for every
  member; :meth:`MirrorPosition.offer` merges a member's snapshot of it.
* The epoch goes up (``deliver``) as soon as every member delivered it: the holder's own
  share included, so a mirror of a healthy holder sends what the holder sends (the parent
  takes the first arrival of the holder's name; the copy is a duplicate by lineage).
* :meth:`MirrorPosition.hedge` (the caller calls it once the hedge delay passed since the
  epoch's first arrival) sends the epoch up without the members still missing - typically
  the slow holder's own share: the parent then completes on time, and the result names the
  holder as lacking (tentative) until its own share is folded in by the master's repair.
* An epoch is sent at most once; a member's snapshot of an epoch already sent is ``stale``.

Bounds: at most ``max_open`` epochs open (the oldest is hedged - sent as it is - to make
room) and ``max_sent`` sent epochs remembered.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable

from cbt import Snapshot
from srt import EpochCombiner
from srt.dataplane.lineage import Lineage

DEFAULT_MAX_OPEN = 16
DEFAULT_MAX_SENT = 256

Deliver = Callable[[int, Snapshot, Lineage | None], None]
NewBarrier = Callable[[int, Callable[[int, Snapshot], None]], EpochCombiner]


class MirrorPosition:
    """One inner position's mirror (module contract)."""

    def __init__(
        self,
        holder: int,
        new_barrier: NewBarrier,
        deliver: Deliver,
        max_open: int = DEFAULT_MAX_OPEN,
        max_sent: int = DEFAULT_MAX_SENT,
    ) -> None:
        self.holder = holder
        self.new_barrier = new_barrier
        self.deliver = deliver
        self.max_open = max_open
        self.max_sent = max_sent
        self.members: frozenset[int] = frozenset()
        self.open: OrderedDict[int, EpochCombiner] = OrderedDict()
        self.sent: OrderedDict[int, bool] = OrderedDict()  # epoch -> whole when sent
        self.whole = 0
        self.hedged = 0
        self.received = 0  # member snapshots offered (stale ones included): the work
        self._hedging: int | None = None

    def set_members(self, members: Iterable[int]) -> None:
        """The holder's announcement; epochs already open keep their members."""
        self.members = frozenset(members)

    def offer(self, sender: int, epoch: int, snap: Snapshot, origins: Lineage | None) -> str:
        """A member's mirrored epoch (checked against the barrier's bounds first: raises as
        :meth:`EpochCombiner.check` does)."""
        self.received += 1
        if epoch in self.sent:
            return "stale"
        barrier = self.open.get(epoch)
        if barrier is None:
            while len(self.open) >= self.max_open:
                self.hedge(next(iter(self.open)))
            barrier = self.open[epoch] = self.new_barrier(epoch, self._emitted_for(epoch))
            barrier.set_children(self.members, start=epoch)
        snap = barrier.check(epoch, snap, sender)
        return barrier.offer_child(sender, epoch, snap, origins)

    def _emitted_for(self, epoch: int) -> Callable[[int, Snapshot], None]:
        def emitted(e: int, snap: Snapshot) -> None:
            if e != epoch or epoch in self.sent:
                return
            barrier = self.open.pop(epoch, None)
            lineage = None if barrier is None else barrier.lineage_of(epoch)
            self._mark_sent(epoch, self._hedging != epoch)
            self.deliver(epoch, snap, lineage)

        return emitted

    def missing(self, epoch: int) -> frozenset[int] | None:
        """The members ``epoch`` still waits for (None: not open)."""
        barrier = self.open.get(epoch)
        if barrier is None:
            return None
        return frozenset(m for m in barrier.waiting_for(epoch) if isinstance(m, int))

    def hedge(self, epoch: int) -> bool:
        """The hedge delay passed: send ``epoch`` up as it is, without the members still
        missing. False when it was sent already (or never opened)."""
        barrier = self.open.get(epoch)
        if barrier is None:
            return False
        self.hedged += 1
        self._hedging = epoch
        try:
            barrier.set_children(frozenset())  # nobody blocks it now: it is emitted
        finally:
            self._hedging = None
        if epoch in self.open:  # (an epoch with nothing merged is not emitted: drop it)
            self.open.pop(epoch)
            self._mark_sent(epoch, False)
        return True

    def _mark_sent(self, epoch: int, whole: bool) -> None:
        self.whole += whole
        self.sent[epoch] = whole
        while len(self.sent) > self.max_sent:
            self.sent.popitem(last=False)

    def status(self) -> dict[str, object]:
        return {
            "holder": format(self.holder, "x"),
            "members": sorted(format(m, "x") for m in self.members),
            "open": list(self.open),
            "sent": len(self.sent),
            "whole": self.whole,
            "hedged": self.hedged,
            "received": self.received,
        }
