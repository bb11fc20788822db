"""A replica of a tree's master position: it merges every member's epochs as the master does.

Contract (``docs/fault-tolerance.md``, "Replicated masters"; Hwang et al.'s replication
transparency). Pure state over an :class:`~srt.dataplane.barrier.EpochCombiner`: no I/O.

* **Members.** The master announces its members (its tree children, and itself when it is an
  origin: its own share is sent here like a child's); :meth:`PositionReplica.set_members`
  makes them the barrier's children. Every member sends each epoch to the master *and* to
  each replica (``POST /srt/v1/replica-snapshot``); :meth:`PositionReplica.offer` merges the
  first arrival of a name and classifies copies by lineage, exactly like the master's barrier.
  So the replica's epoch e is the master's epoch e: same members, same contributions.
* **Before a take-over** the barrier's emitted epochs are kept, at most ``max_epochs`` (the
  oldest dropped, counted): the result this agent would store were it the master.
* **Take-over** (:meth:`PositionReplica.take_over`): this agent became the root. It gets the
  kept epochs (to store in epoch order: already-stored ones are duplicates by lineage) and a
  **hand-over epoch** H: every epoch the dead master may have acknowledged contributions of
  is at or below H - the epochs this agent's own barrier already emitted upward (below
  ``own_next``) and every epoch this replica has received anything of - so only this replica
  holds them whole. Epochs up to H stay this replica's: :meth:`PositionReplica.owns` says
  where a contribution of epoch e goes (the agent's own barrier's emits of such epochs come
  here too, as member ``self_id``, from ``own_next``), the dead master stops being waited for
  (its own share is absent from then on, named by lineage, as a dead leaf's is), and each
  epoch it emits goes to the ``deliver`` given. From H + 1 on the agent's own barrier is the
  root's, waiting for the dead master's members (returned, with H + 1 as their start, to be
  pinned there until they re-join). The replica is done once it emitted H
  (:attr:`PositionReplica.done`).

**An inner position** (a non-root tree node with children; ``inner=True``) is an active
standby (Hwang et al.): the replica merges every epoch as the holder does and keeps it
(empty ones too: the holder's parent waits for the position every epoch) while the holder
sends the position's epochs up itself. When the holder dies
(:meth:`PositionReplica.holder_gone`) its own share stops being waited for, and
:meth:`PositionReplica.release` hands every kept epoch from the one the parent still waits
for to ``deliver`` (the agent sends them to the holder's parent as the holder), then every
epoch emitted later. When a member moves to another parent it says so
(:meth:`PositionReplica.member_left`, after every epoch it sent here was acknowledged). The
replica has served its last epoch (:attr:`PositionReplica.finished`) once the holder is
gone, no member is left and no epoch is open.

Bounds: ``max_epochs`` kept results, and at most ``max_open`` open epochs before a take-over:
a member whose epochs stopped reaching the replica (its bounded sender dropped some while the
replica was unreachable) would otherwise hold every later epoch open; past the bound the
members the oldest epoch waits for stop being waited for (counted ``unblocked``) until the
master's next announcement names them again. Those epochs then lack them here - the master
has them, and should it die the lineage says what its replica lacks.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable

from cbt import Snapshot
from srt import EpochCombiner
from srt.dataplane.lineage import Lineage

#: emitted epochs kept for a take-over (the master's result store holds as many)
DEFAULT_KEPT_EPOCHS = 256
#: open epochs a replica holds before it stops waiting for the members holding them back
DEFAULT_MAX_OPEN = 16

Deliver = Callable[[int, Snapshot, Lineage | None], None]


class PositionReplica:
    """One tree's master position, replicated here (module contract). ``new_barrier(emit)``
    builds the barrier (the job's operator, expectations and bounds, no local input)."""

    def __init__(
        self,
        master: int,
        new_barrier: Callable[[Callable[[int, Snapshot], None]], EpochCombiner],
        max_epochs: int = DEFAULT_KEPT_EPOCHS,
        max_open: int = DEFAULT_MAX_OPEN,
        inner: bool = False,
    ) -> None:
        self.master = master
        self.holder_dead = False
        self.max_epochs = max_epochs
        self.max_open = max_open
        self.unblocked = 0
        self.barrier = new_barrier(self._emitted)
        self.kept: OrderedDict[int, tuple[Snapshot, Lineage | None]] = OrderedDict()
        self.dropped = 0
        self.handover: int | None = None  # H, once taken over
        self._deliver: Deliver | None = None
        self.inner = inner

    # ---- as a replica ---------------------------------------------------------------------

    def set_members(self, master: int, members: Iterable[int]) -> None:
        """The master's announcement: who it waits for (its id too when it is an origin)."""
        if self.handover is not None or self.holder_dead:
            return  # taken over, or an orphaned inner position: no holder to listen to
        self.master = master
        self.barrier.set_children(members)

    def member_left(self, member: int) -> bool:
        """An inner position's member moved to another parent, every epoch it sent here
        acknowledged: it stops being waited for (what it delivered stays). True if it was
        a member."""
        if member not in self.barrier.children:
            return False
        self.barrier.set_children(self.barrier.children - {member})
        return True

    def member_failed(self, member: int) -> bool:
        """The overlay declared a member failed (a holder and a child of it in one failure
        domain die together): it stops being waited for, as the holder's own barrier stops
        waiting for a dead child - its share is absent, named by lineage, and the master's
        repair pulls it when it is back. True if it was a member."""
        return self.member_left(member)

    def holder_gone(self) -> None:
        """The holder died: its own share stops being waited for (absent from now on, named
        by lineage, as a dead leaf's is); its members go on sending until they moved."""
        self.holder_dead = True
        self.barrier.set_children(self.barrier.children - {self.master})

    def release(self, first: int, deliver: Deliver) -> int:
        """An inner position whose holder died: every kept epoch from ``first`` (the first
        one the holder's parent still waits for) goes to ``deliver``, in epoch order, and so
        does every epoch emitted from now on. Returns how many kept epochs went."""
        sent = 0
        for epoch, (snap, lineage) in list(self.kept.items()):
            if epoch >= first:
                deliver(epoch, snap, lineage)
                sent += 1
        self.kept.clear()
        self._deliver = deliver
        return sent

    @property
    def released(self) -> bool:
        return self.inner and self._deliver is not None

    @property
    def finished(self) -> bool:
        """An inner position whose holder died, with no member left and no epoch open."""
        return (
            self.inner
            and self.released
            and not self.barrier.children
            and not self.barrier.first_arrivals()
        )

    @property
    def members(self) -> frozenset[int]:
        return self.barrier.children

    def offer(self, sender: int, epoch: int, snap: Snapshot, origins: Lineage | None) -> str:
        """A member's epoch (checked against the barrier's bounds and expectation first:
        raises as :meth:`EpochCombiner.check` does)."""
        snap = self.barrier.check(epoch, snap, sender)
        result = self.barrier.offer_child(sender, epoch, snap, origins)
        while (
            self.handover is None
            and not self.holder_dead
            and len(self.barrier.first_arrivals()) > self.max_open
        ):
            waiting = set(self.barrier.waiting_for(self.barrier.next_epoch))
            self.barrier.set_children(self.barrier.children - waiting)
            self.unblocked += len(waiting)
        return result

    def _emitted(self, epoch: int, snap: Snapshot) -> None:
        lineage = self.barrier.lineage_of(epoch)
        if self._deliver is not None:
            self._deliver(epoch, snap, lineage)
            return
        if lineage is not None and not lineage and not self.inner:
            return  # nothing of any member (an idle epoch): the master's own result stands
        self.kept[epoch] = (snap, lineage)
        while len(self.kept) > self.max_epochs:
            self.kept.popitem(last=False)
            self.dropped += 1

    # ---- the take-over -----------------------------------------------------------------------

    def take_over(
        self, self_id: int, own_next: int, deliver: Deliver
    ) -> tuple[list[tuple[int, Snapshot, Lineage | None]], int, frozenset[int]]:
        """This agent became the root (module contract): returns (the kept epochs in epoch
        order, the hand-over epoch H, the dead master's other members to wait for from H + 1
        in the agent's own barrier). ``own_next``: the first epoch the agent's own barrier
        has not emitted; ``deliver`` takes every epoch this replica emits from now on."""
        kept = [(e, snap, lineage) for e, (snap, lineage) in self.kept.items()]
        self.kept.clear()
        touched = max(self.barrier.first_arrivals(), default=-1)  # the newest open epoch
        self.handover = max(own_next - 1, self.barrier.next_epoch - 1, touched)
        self._deliver = deliver
        dead = self.master
        members = self.barrier.children - {dead, self_id}
        # the agent's own barrier delivers its epochs from own_next here, as a member
        self.barrier.set_children(members | {self_id}, start=own_next)
        return kept, self.handover, frozenset(members)

    def owns(self, epoch: int) -> bool:
        """After the take-over: whether a contribution of ``epoch`` goes to this replica."""
        return self.handover is not None and self.barrier.next_epoch <= epoch <= self.handover

    @property
    def done(self) -> bool:
        """Taken over and every epoch up to the hand-over emitted."""
        return self.handover is not None and self.barrier.next_epoch > self.handover

    def status(self) -> dict[str, object]:
        return {
            "master": format(self.master, "x"),
            "members": sorted(format(m, "x") for m in self.members),
            "next_epoch": self.barrier.next_epoch,
            "kept_epochs": len(self.kept),
            "dropped_epochs": self.dropped,
            "unblocked": self.unblocked,
            "handover": self.handover,
            "inner": self.inner,
            "holder_dead": self.holder_dead,
        }
