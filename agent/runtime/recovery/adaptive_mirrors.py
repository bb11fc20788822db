"""Adaptive redundancy on a running agent: which epochs members mirror, the mirrors of inner
positions, and the master's controller (the state of one mirror is
:mod:`agent.runtime.recovery.mirror_position`; the control law is
:mod:`agent.runtime.recovery.redundancy_control`).

Contract (``docs/fault-tolerance.md``, "Adaptive redundancy: the running policy"), for a job
whose spec's ``fault_tolerance`` is ``{"policy": "adaptive", "latency_target_ms": T}``
(``mirror_ratio`` fixes the ratio: static redundancy). Every inner position has one mirror
(chosen and announced as an inner replica by :mod:`agent.runtime.recovery.active_replicas`,
which owns the member's senders and calls in here).

* **As member** - two reasons to mirror an epoch: :meth:`AdaptiveMirrors.chosen`, the epochs
  ``mirrored_siblings`` picks at the ratio ρ the master multicast (every member of a position
  picks the same ones); and :meth:`AdaptiveMirrors.suspect`, an epoch its parent has not
  acknowledged :data:`SUSPECT_SHARE` of T after it was sent up (a paused or overloaded
  holder: ELF's "mirroring straggler", decided where the delay is seen, in one epoch, with
  no controller round trip - siblings of a paused holder all see it). A suspicion costs one
  extra send, and nothing while the parent acknowledges in time.
* **As mirror** (:meth:`position`, :meth:`offer`): one :class:`MirrorPosition` per (tree,
  holder); an epoch still open :data:`HEDGE_SHARE` of T after the members sent it goes up
  without the members missing (hedged): counted from its first arrival at the mirror, less
  :data:`SUSPECT_SHARE` of T for an epoch not chosen at ρ (a suspected one, sent that late
  by design; the mirror heard ρ too), so a suspected epoch goes up when a chosen one would.
  A suspected epoch goes up at once when every member but the holder sent it: they all found
  the holder slow, and waiting for its own share would only delay the epoch (it lacks the
  holder, named, until the master's repair folds its share in).
* **As master** (:meth:`observe_latency`, :meth:`control_period`): the controller's window of
  completion latencies and its misses (epochs stored past T, and epochs still open past T),
  every :data:`CONTROL_SECONDS`; a changed ρ is announced (the ``replicas`` multicast).

Bounds: one mirror per (tree, holder) this agent mirrors (each at most 16 open epochs); one
suspicion watch per epoch a member sends up, each ending within SUSPECT_SHARE · T; one
controller per tree this agent masters.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any, Protocol

from agent.runtime.recovery.mirror_position import MirrorPosition
from agent.runtime.recovery.position_forward import PositionForward
from agent.runtime.recovery.redundancy_control import (
    LatencyWindow,
    RedundancyController,
    mirrored_siblings,
)
from agent.runtime.services import Spawner
from cbt import Snapshot
from srt import EpochCombiner, SnapshotName
from srt.dataplane.lineage import Lineage
from srt.dataplane.name import POSITION_SNAPSHOT_PATH

HEDGE_SHARE = 0.5  # a mirror's epoch goes up without missing members T times this after close
SUSPECT_SHARE = 0.15  # a member mirrors an epoch its parent has not acked T times this after
CONTROL_SECONDS = 1.0  # the adaptive controller's period at a master

Key = tuple[int, int]  # (tree, holder)


class MirrorHost(Protocol):
    """The job as adaptive mirroring sees it (a part of ``ReplicaHost``)."""

    name: str

    @property
    def spec(self) -> Any: ...

    @property
    def stopped(self) -> bool: ...

    def is_root(self, tid: int) -> bool: ...

    def ensure_tree(self, tid: int) -> EpochCombiner: ...

    async def acked_up(self, tid: int, epoch: int, timeout: float) -> bool:
        """Wait until this agent's parent acknowledged an epoch after ``epoch``."""
        ...

    def new_barrier(
        self, tid: int, emit: Callable[[int, Snapshot], None], first_epoch: int | None = None
    ) -> EpochCombiner: ...

    def count(self, what: str, n: int = 1) -> None: ...


class AdaptiveMirrors:
    """The adaptive policy's side of one job on one agent (module contract)."""

    def __init__(
        self,
        host: MirrorHost,
        tasks: Spawner,
        forward_for: Callable[[Key, str], PositionForward],
        announce: Callable[[int], None],
    ) -> None:
        self.host = host
        self.tasks = tasks
        self.forward_for = forward_for  # the upward senders of a mirror (as the holder)
        self.announce = announce  # a changed ratio goes out with the next announcement
        #: the mirrored ratio per tree (as master: the controller's; else as heard)
        self.rho: dict[int, float] = {}
        self.mirrors: dict[Key, tuple[MirrorPosition, PositionForward]] = {}  # as mirror
        self.controllers: dict[int, tuple[LatencyWindow, RedundancyController]] = {}
        self._fresh: dict[int, int] = {}  # misses since the last control period, per tree
        self._missed: dict[int, int] = {}  # the newest epoch counted as a miss, per tree
        self._loops: set[int] = set()  # trees whose control loop runs
        self.suspected = 0  # epochs mirrored because the parent was slow to acknowledge

    def _target_s(self) -> float:
        return float(self.host.spec.fault_tolerance.target_ms) / 1000.0

    # ---- as member -----------------------------------------------------------------------------

    def chosen(self, tid: int, epoch: int, holder: int) -> bool:
        """Whether the members of ``holder``'s position mirror ``epoch`` at the ratio ρ."""
        return mirrored_siblings(
            self.host.name, tid, epoch, format(holder, "x"), self.rho.get(tid, 0.0)
        )

    def suspect(self, tid: int, epoch: int, send: Callable[[], None]) -> None:
        """An epoch sent up and not chosen: ``send`` it to the mirror too if the parent has
        not acknowledged it :data:`SUSPECT_SHARE` of T from now."""
        self.tasks.spawn(self._watch(tid, epoch, send), f"{self.host.name} mirror suspicion")

    async def _watch(self, tid: int, epoch: int, send: Callable[[], None]) -> None:
        if await self.host.acked_up(tid, epoch - 1, SUSPECT_SHARE * self._target_s()):
            return
        if self.host.stopped:
            return
        self.suspected += 1
        self.host.count("mirror_suspect_sends")
        send()

    # ---- as mirror -----------------------------------------------------------------------------

    def position(self, key: Key, members: list[int], parent: tuple[int, str]) -> None:
        """An inner holder's announcement to its mirror: its members and its parent."""
        tid, holder = key
        found = self.mirrors.get(key)
        if found is None:
            # the holder's name at its parent's position door: the parent keeps waiting for
            # the holder a hedge window after each copy, should the overlay declare it failed
            # meanwhile (else it would emit an epoch whose copy is on its way without it)
            forward = self.forward_for(key, POSITION_SNAPSHOT_PATH)
            mirror = MirrorPosition(
                holder,
                lambda epoch, emit: self.host.new_barrier(tid, emit, first_epoch=epoch),
                forward.send,
            )
            found = self.mirrors[key] = (mirror, forward)
        found[0].set_members(members)
        found[1].retarget(parent[0], parent[1], {})

    def key_of(self, name: SnapshotName) -> Key | None:
        """The mirrored position a member's snapshot is for (an older member names none)."""
        for key, (mirror, _) in self.mirrors.items():
            if key[0] == name.tree and name.sender in mirror.members:
                return key
        return None

    def offer(self, key: Key, name: SnapshotName, snap: Snapshot, origins: Lineage | None) -> str:
        mirror = self.mirrors[key][0]
        tid, holder = key
        opened = name.epoch not in mirror.open and name.epoch not in mirror.sent
        result = mirror.offer(name.sender, name.epoch, snap, origins)
        if opened and name.epoch in mirror.open:
            self.tasks.spawn(self._hedge_later(key, name.epoch), f"{self.host.name} hedge")
        # a suspected epoch that every member but the holder sent: they all found the holder
        # slow - waiting longer for its own share only delays the epoch
        suspected = not self.chosen(tid, name.epoch, holder)
        if suspected and mirror.missing(name.epoch) == {holder} and mirror.hedge(name.epoch):
            self.host.count("mirror_hedged")
            self.host.count("mirror_hedged_suspected")
        return result

    def hedge_delay(self, tid: int, epoch: int, holder: int) -> float:
        """Seconds from an epoch's first arrival here to its hedge: :data:`HEDGE_SHARE` of
        the target after the members sent it - for an epoch not chosen at ρ (a suspected
        one, sent :data:`SUSPECT_SHARE` of the target late by design), that much less."""
        share = HEDGE_SHARE if self.chosen(tid, epoch, holder) else HEDGE_SHARE - SUSPECT_SHARE
        return share * self._target_s()

    async def _hedge_later(self, key: Key, epoch: int) -> None:
        """After :meth:`hedge_delay`, an epoch still open at the mirror goes up without the
        members missing (mirror_position.py)."""
        await asyncio.sleep(self.hedge_delay(key[0], epoch, key[1]))
        found = self.mirrors.get(key)
        if found is not None and found[0].hedge(epoch):
            self.host.count("mirror_hedged")

    # ---- as master: the controller (redundancy_control.py) -------------------------------------

    def announced_ratio(self, tid: int) -> float | None:
        """The ρ the root multicasts (None: not the adaptive policy's root)."""
        if not self.host.spec.fault_tolerance.mirrored or not self.host.is_root(tid):
            return None
        return round(self.rho.get(tid, 0.0), 3)

    def observe_latency(self, tid: int, epoch: int) -> None:
        """As master under the adaptive policy: a new epoch stored - its completion latency
        feeds the window (a miss, unless already counted while it was open); the control
        loop (:meth:`control_period`) starts with the first one."""
        policy = self.host.spec.fault_tolerance
        if not policy.mirrored or not self.host.is_root(tid):
            return
        if policy.mirror_ratio is not None:  # static redundancy: the ratio is the spec's
            self.rho[tid] = policy.mirror_ratio
            return
        window, _ = self._controller(tid)
        latency_ms = max(0.0, (time.time() - self.host.spec.schedule.end(epoch)) * 1000.0)
        window.record(latency_ms, time.monotonic())
        if latency_ms > policy.target_ms and epoch > self._missed.get(tid, -1):
            self._fresh[tid] = self._fresh.get(tid, 0) + 1
            self._missed[tid] = epoch
        if tid not in self._loops:
            self._loops.add(tid)
            self.tasks.spawn(self._control_loop(tid), f"{self.host.name} redundancy control")

    def _controller(self, tid: int) -> tuple[LatencyWindow, RedundancyController]:
        return self.controllers.setdefault(tid, (LatencyWindow(), RedundancyController()))

    async def _control_loop(self, tid: int) -> None:
        """Every :data:`CONTROL_SECONDS` while this agent masters the tree under the adaptive
        policy: one control period (:meth:`control_period`)."""
        try:
            while not self.host.stopped:
                await asyncio.sleep(CONTROL_SECONDS)
                policy = self.host.spec.fault_tolerance
                if not policy.mirrored or policy.mirror_ratio is not None:
                    return
                if not self.host.is_root(tid):
                    return
                self.control_period(tid, policy.target_ms)
        finally:
            self._loops.discard(tid)

    def control_period(self, tid: int, target_ms: float) -> None:
        """One control period: the misses since the last one - epochs stored past the target
        and epochs **still open** past it (a paused node holds them: nothing is stored, yet
        the tail is missing now) - and the window's p99 to the controller; its ratio goes
        out with the next announcement (now, when it changed)."""
        schedule = self.host.spec.schedule
        overdue = schedule.epoch_of(time.time() - target_ms / 1000.0) - 1  # closed past T
        first = max(self.host.ensure_tree(tid).next_epoch, self._missed.get(tid, -1) + 1)
        if overdue >= first:
            self._fresh[tid] = self._fresh.get(tid, 0) + overdue - first + 1
            self._missed[tid] = overdue
        window, controller = self._controller(tid)
        now = time.monotonic()
        before = self.rho.get(tid, 0.0)
        controller.update(window.p99(now), target_ms, self._fresh.pop(tid, 0))
        self.rho[tid] = controller.rho
        if controller.rho != before:
            self.announce(tid)

    # ---- status and stop -----------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        return {
            "rho": {format(t, "x"): r for t, r in self.rho.items()},
            "suspected": self.suspected,
            "mirrors": {
                f"{t:x}/{h:x}": {**m.status(), "forward": f.status()}
                for (t, h), (m, f) in self.mirrors.items()
            },
            "controllers": {format(t, "x"): c.status() for t, (_, c) in self.controllers.items()},
        }

    async def close(self) -> None:
        for _, forward in self.mirrors.values():
            await forward.close()
        self.mirrors.clear()
