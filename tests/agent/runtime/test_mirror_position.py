"""MirrorPosition (agent/runtime/recovery/mirror_position.py) and the adaptive policy's wiring
(active_replicas.py): a mirrored epoch goes up as the holder once every member delivered it,
or - hedged - without the members still missing; each epoch once; members send only the
epochs ``mirrored_siblings`` chooses at the master's rho; the master's controller raises rho
when epochs complete past the target."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from typing import Any

import pytest
from test_active_replicas import SECRET, TREE, Host, Network, Spec, Tasks, snap_of

from agent.jobs.fault_policy import FaultPolicy
from agent.runtime.recovery.active_replicas import ActiveReplicas
from agent.runtime.recovery.adaptive_mirrors import HEDGE_SHARE, SUSPECT_SHARE
from agent.runtime.recovery.mirror_position import MirrorPosition
from agent.runtime.recovery.redundancy_control import mirrored_siblings
from cbt import Snapshot
from srt import DataPlaneClient, EpochCombiner, SnapshotName

HOLDER, C1, C2, PARENT = 0x400, 0x500, 0x600, 0x100


def barrier(epoch: int, emit: Any) -> EpochCombiner:
    return EpochCombiner(
        job="wc", tree=TREE, expect_local=False, children=(), emit=emit, first_epoch=epoch
    )


def test_a_whole_epoch_goes_up_at_once_and_a_hedged_one_without_the_missing() -> None:
    sent: list[tuple[int, Counter, Any]] = []

    def deliver(epoch: int, snap: Snapshot, lineage: Any) -> None:
        sent.append((epoch, Counter(snap.to_dict()), lineage))

    mirror = MirrorPosition(HOLDER, barrier, deliver, max_open=2)
    mirror.set_members([HOLDER, C1, C2])
    for sender, word in ((C1, "a"), (C2, "b"), (HOLDER, "h")):
        mirror.offer(sender, 10, snap_of([word]), frozenset({sender}))
    assert sent == [(10, Counter(a=1, b=1, h=1), frozenset({HOLDER, C1, C2}))]
    assert mirror.offer(C1, 10, snap_of(["a"]), frozenset({C1})) == "stale"  # sent once
    # the holder is slow in epoch 12: the hedge sends its children's part alone
    mirror.offer(C1, 12, snap_of(["a"]), frozenset({C1}))
    mirror.offer(C2, 12, snap_of(["b"]), frozenset({C2}))
    assert len(sent) == 1 and mirror.hedge(12)
    assert sent[1] == (12, Counter(a=1, b=1), frozenset({C1, C2}))
    assert not mirror.hedge(12) and mirror.offer(HOLDER, 12, snap_of(["h"]), None) == "stale"
    # past max_open the oldest open epoch is hedged to make room
    for epoch in (13, 14, 15):
        mirror.offer(C1, epoch, snap_of(["a"]), frozenset({C1}))
    assert [e for e, _, _ in sent] == [10, 12, 13]
    assert (mirror.whole, mirror.hedged) == (1, 2)


async def test_members_send_the_mirrored_epochs_only_and_the_master_sets_rho() -> None:
    client = DataPlaneClient(SECRET)
    policy = FaultPolicy("adaptive", 2, 0, 500.0)
    host = Host(parent=HOLDER, spec=Spec(policy))
    active = ActiveReplicas(host, Network(C1, client), Tasks())  # type: ignore[arg-type]
    try:
        assert active.replicas_for(TREE) == 2  # an inner position has a mirror
        message = {"kind": "replicas", "master": f"{HOLDER:x}", "replicas": [[f"{C1:x}", "x"]]}
        active.heard_from(TREE, {**message, "replicas": [[f"{C2:x}", "http://127.0.0.1:1"]]})
        active.heard_from(TREE, {"kind": "replicas", "master": f"{PARENT:x}", "replicas": [],
                                 "rho": 0.5})  # fmt: skip
        assert active.adaptive.rho[TREE] == 0.5
        chosen = [e for e in range(100) if mirrored_siblings("wc", TREE, e, f"{HOLDER:x}", 0.5)]
        for epoch in range(100):
            active.to_replicas(TREE, epoch, b"")
        queued = active.senders[(TREE, HOLDER)][C2].pending()["queued"]
        assert queued == chosen and 30 < len(chosen) < 70
        # the master: epochs completing past the target raise rho
        host.root = True
        assert active.replicas_for(TREE) == 1  # the root has no mirror
        host.spec = Spec(FaultPolicy("adaptive", 2, 0, 500.0))
        active.adaptive.rho.clear()
        for epoch in range(5):  # epoch 0 of the schedule ended decades ago: all late
            active.observe_latency(TREE, epoch)
        host.own = EpochCombiner(
            job="wc", tree=TREE, expect_local=True, children=(), emit=lambda e, s: None,
            first_epoch=5,
        )  # fmt: skip
        active.adaptive.control_period(TREE, 500.0)  # five misses stored, and epochs 5.. still open
        assert active.adaptive.rho[TREE] > 0
        host.stopped = True  # (the control loop ends)
        host.spec = Spec(FaultPolicy("adaptive", 2, 0, 500.0, 1.0))
        active.observe_latency(TREE, 6)
        assert active.adaptive.rho[TREE] == 1.0  # a static ratio is the spec's
    finally:
        await active.close()
        await client.close()


async def test_a_member_mirrors_the_epochs_its_parent_is_slow_to_acknowledge() -> None:
    """Not chosen at rho 0, yet mirrored: the epochs the parent (the holder) has not
    acknowledged SUSPECT_SHARE of T after they went up - its siblings see the same paused
    holder and mirror the same epochs; nothing while the parent acknowledges in time."""
    client = DataPlaneClient(SECRET)
    host = Host(parent=HOLDER, spec=Spec(FaultPolicy("adaptive", 2, 0, 500.0)))
    acked_through = 4  # the holder stops acknowledging after epoch 4 (SIGSTOP)

    async def acked_up(tid: int, epoch: int, timeout: float) -> bool:
        assert timeout == SUSPECT_SHARE * 0.5
        return epoch < acked_through

    host.acked_up = acked_up  # type: ignore[method-assign]
    active = ActiveReplicas(host, Network(C1, client), Tasks())  # type: ignore[arg-type]
    try:
        active.heard_from(
            TREE,
            {"kind": "replicas", "master": f"{HOLDER:x}",
             "replicas": [[f"{C2:x}", "http://127.0.0.1:1"]]},
        )  # fmt: skip
        assert not any(active.adaptive.chosen(TREE, e, HOLDER) for e in range(10))  # rho 0
        for epoch in range(10):
            active.to_replicas(TREE, epoch, b"")

        def queued() -> list[int]:
            senders = active.senders.get((TREE, HOLDER)) or {}
            return senders[C2].pending()["queued"] if C2 in senders else []

        async def until_five() -> None:
            while len(queued()) < 5:
                await asyncio.sleep(0.01)

        await asyncio.wait_for(until_five(), 5.0)
        assert queued() == [5, 6, 7, 8, 9]
        assert host.counters["mirror_suspect_sends"] == 5
        assert active.status()["suspected"] == 5
    finally:
        await active.close()
        await client.close()


async def test_a_suspected_epoch_is_hedged_when_a_chosen_one_would_be() -> None:
    """A mirror hedges a chosen epoch HEDGE_SHARE of T after its first arrival, and one not
    chosen at rho (a suspected one: its members sent it SUSPECT_SHARE of T late by design)
    that much sooner, so both go up HEDGE_SHARE of T after the members sent them; a suspected
    epoch every member but the holder sent goes up at once."""
    host = Host(parent=PARENT, spec=Spec(FaultPolicy("adaptive", 2, 0, 400.0)))
    host.new_barrier = lambda tid, emit, first_epoch=None: barrier(first_epoch, emit)  # type: ignore[method-assign,assignment,misc]
    sent: list[tuple[int, float]] = []
    client = DataPlaneClient(SECRET)
    active = ActiveReplicas(host, Network(C2, client), Tasks())  # type: ignore[arg-type]
    adaptive = active.adaptive
    key = (TREE, HOLDER)
    try:
        adaptive.rho[TREE] = 0.5
        chosen = next(e for e in range(100) if adaptive.chosen(TREE, e, HOLDER))
        suspected = [e for e in range(100) if not adaptive.chosen(TREE, e, HOLDER)][:2]
        assert adaptive.hedge_delay(TREE, chosen, HOLDER) == pytest.approx(HEDGE_SHARE * 0.4)
        assert adaptive.hedge_delay(TREE, suspected[0], HOLDER) == pytest.approx(
            (HEDGE_SHARE - SUSPECT_SHARE) * 0.4
        )
        adaptive.position(key, [HOLDER, C1, C2], (PARENT, "http://127.0.0.1:1"))
        mirror, _ = adaptive.mirrors[key]
        mirror.deliver = lambda epoch, snap, lineage: sent.append((epoch, time.monotonic()))

        def offer(epoch: int, member: int) -> None:
            adaptive.offer(key, SnapshotName("wc", TREE, epoch, member), snap_of(["a"]), None)

        start = time.monotonic()
        for epoch in (chosen, suspected[0]):  # C2 and the holder's own share never come
            offer(epoch, C1)
        assert mirror.missing(chosen) == {HOLDER, C2}
        offer(suspected[1], C1)
        offer(suspected[1], C2)  # every member but the holder: at once
        assert [e for e, _ in sent] == [suspected[1]] and mirror.missing(suspected[1]) is None

        async def three() -> None:
            while len(sent) < 3:
                await asyncio.sleep(0.01)

        await asyncio.wait_for(three(), 3.0)
        assert [e for e, _ in sent] == [suspected[1], suspected[0], chosen]
        at = dict(sent)
        assert at[suspected[0]] - start >= (HEDGE_SHARE - SUSPECT_SHARE) * 0.4 - 0.01
        assert at[chosen] - start >= HEDGE_SHARE * 0.4 - 0.01
        assert host.counters["mirror_hedged"] == 3
        assert host.counters["mirror_hedged_suspected"] == 1
    finally:
        await active.close()
        await client.close()
