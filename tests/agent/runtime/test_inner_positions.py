"""Replicated inner positions (agent/runtime/recovery/active_replicas.py, position_forward.py)
over real loopback HTTP: the replica registers with the holder's parent, keeps the position's
epochs while the holder lives, and on the holder's death asks the parent which epoch it
waits for, sends every epoch from there up as the holder, and says it is done once the
members left; a member whose parent died hands the epochs queued for it to the position's
replicas (its main queue drops them) and tells the replicas it left."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

from agent_helpers import wait_for as async_wait_until
from test_active_replicas import SECRET, TREE, Host, Network, Tasks, snap_of

from agent.runtime.recovery.active_replicas import ActiveReplicas
from agent.runtime.recovery.position_forward import EVENT_PATH
from cbt import Snapshot
from srt import DataPlaneClient, DataPlaneServer, SnapshotName
from srt.dataplane.lineage import decode as lineage_of
from srt.dataplane.lineage import encode as with_lineage
from srt.dataplane.name import POSITION_SNAPSHOT_PATH, REPLICA_SNAPSHOT_PATH

PARENT, HOLDER, C1, C2, ME, NEW_PARENT = 0x100, 0x400, 0x500, 0x600, 0x200, 0x700


class Peer:
    """A peer's data plane recording position snapshots, replica snapshots and events."""

    def __init__(self, next_epoch: int = 0) -> None:
        self.next_epoch = next_epoch
        self.snapshots: list[tuple[str, SnapshotName, Any, Counter]] = []
        self.events: list[dict[str, Any]] = []
        self.server = DataPlaneServer(SECRET)
        self.url = ""

    async def start(self) -> Peer:
        def record(kind: str) -> Any:
            async def handler(name: SnapshotName, body: bytes, position: Any = None) -> str:
                origins, raw = lineage_of(body)
                snap = Snapshot.from_bytes(raw)
                self.snapshots.append((kind, name, origins, Counter(snap.to_dict())))
                return "merged"

            return handler

        async def event(request: Any) -> dict[str, Any]:
            body = await request.json()
            self.events.append(body)
            return {"ok": True, "next": self.next_epoch}

        self.server.on_snapshot(record("position"), path=POSITION_SNAPSHOT_PATH)
        self.server.on_snapshot(record("replica"), path=REPLICA_SNAPSHOT_PATH)
        self.server.route("POST", EVENT_PATH, event)
        self.url = await self.server.start()
        return self

    def kinds(self) -> list[str]:
        return [e["event"] for e in self.events]


async def test_a_replica_releases_the_dead_holders_position_to_its_parent() -> None:
    parent = await Peer(next_epoch=11).start()
    client = DataPlaneClient(SECRET)
    network = Network(ME, client)
    host = Host()
    active = ActiveReplicas(host, network, Tasks())  # type: ignore[arg-type]
    name = lambda sender, epoch: SnapshotName("wc", TREE, epoch, sender)  # noqa: E731
    try:
        up = {"id": f"{PARENT:x}", "url": parent.url, "replicas": []}
        active.position(TREE, HOLDER, [HOLDER, C1, C2], up)
        await async_wait_until(lambda: parent.kinds() == ["standby"], 5, "the standby")
        for sender, word in ((HOLDER, "h"), (C1, "a"), (C2, "b")):
            active.offer(name(sender, 10), snap_of([word]), frozenset({sender}), HOLDER)
        for sender, word in ((C1, "a"), (C2, "b")):  # the holder dies before its share of 11
            active.offer(name(sender, 11), snap_of([word]), frozenset({sender}), HOLDER)
        assert parent.snapshots == []  # a standby sends nothing while the holder lives
        network.dead.add(HOLDER)
        active.node_failed(HOLDER)
        # the parent waits from epoch 11 (it has 10 from the holder): 11 goes up, not 10
        await async_wait_until(lambda: len(parent.snapshots) == 1, 5, "epoch 11 sent up")
        kind, got, origins, counts = parent.snapshots[0]
        assert (kind, got.epoch, got.sender) == ("position", 11, HOLDER)
        assert origins == frozenset({C1, C2}) and counts == Counter(a=1, b=1)
        assert parent.kinds() == ["standby", "release"]
        for sender in (C1, C2):  # later epochs go up as they are emitted
            active.offer(name(sender, 12), snap_of(["c"]), frozenset({sender}), HOLDER)
        await async_wait_until(lambda: len(parent.snapshots) == 2, 5, "epoch 12 sent up")
        assert parent.snapshots[1][3] == Counter(c=2)
        active.event(TREE, HOLDER, "leave", C1)
        assert parent.kinds() == ["standby", "release"]  # C2 is still a member
        active.event(TREE, HOLDER, "leave", C2)
        await async_wait_until(lambda: "done" in parent.kinds(), 5, "the position done")
        assert not active.positions and not active.forwards
        assert host.counters["replica_releases"] == 1
    finally:
        await active.close()
        await client.close()
        await parent.server.stop()


async def test_a_parent_answers_standby_release_and_done() -> None:
    client = DataPlaneClient(SECRET)
    host = Host()
    from srt import EpochCombiner

    host.own = EpochCombiner(
        job="wc", tree=TREE, expect_local=False, children=(HOLDER,), emit=lambda e, s: None,
        first_epoch=7,
    )  # fmt: skip
    active = ActiveReplicas(host, Network(PARENT, client), Tasks())  # type: ignore[arg-type]
    try:
        assert active.event(TREE, HOLDER, "standby", None) == {"ok": True, "next": 7}
        assert active.event(TREE, HOLDER, "release", None)["next"] == 7
        assert [p[1] for p in host.pins] == [frozenset({HOLDER})] * 2
        assert active.event(TREE, HOLDER, "done", None) == {"ok": True}
        assert host.unpinned == [(TREE, HOLDER)]
    finally:
        await active.close()
        await client.close()


async def member_of_an_inner_holder() -> tuple[
    Peer, DataPlaneClient, Network, Host, ActiveReplicas, dict[str, Any]
]:
    """Agent C1, a member of inner holder HOLDER's position, whose replica (agent ME) is a
    recording peer; and the holder's ``replicas`` message naming it."""
    replica = await Peer().start()
    client = DataPlaneClient(SECRET)
    network = Network(C1, client)
    host = Host(parent=HOLDER)
    active = ActiveReplicas(host, network, Tasks())  # type: ignore[arg-type]
    message = {
        "kind": "replicas",
        "master": f"{HOLDER:x}",
        "replicas": [[f"{ME:x}", replica.url]],
        "inner": True,  # an inner holder's message (a master's replica owns less)
    }
    return replica, client, network, host, active, message


async def test_a_member_of_a_dead_holder_hands_its_queue_to_the_replicas() -> None:
    replica, client, network, host, active, message = await member_of_an_inner_holder()
    try:
        active.heard_from(TREE, message)
        payload = with_lineage(frozenset({C1}), snap_of(["a"]).to_bytes())
        active.to_replicas(TREE, 5, payload)
        host.queued = [(5, payload)]  # unacknowledged by the (now dead) holder
        network.dead.add(HOLDER)
        host.parent = NEW_PARENT
        assert active.hand_off(TREE, NEW_PARENT) is True
        assert host.queued == [] and host.counters["handed_to_replicas"] == 1
        await async_wait_until(lambda: replica.kinds() == ["leave"], 5, "the leave")
        assert [(k, n.epoch, n.sender) for k, n, _, _ in replica.snapshots] == [("replica", 5, C1)]
        assert replica.events[0]["member"] == f"{C1:x}"
        assert replica.events[0]["position"] == f"{HOLDER:x}"
        # a move away from a live parent keeps the queue (the new parent gets it)
        active.heard_from(TREE, {**message, "master": f"{NEW_PARENT:x}"})
        active.to_replicas(TREE, 6, payload)
        host.queued = [(6, payload)]
        assert active.hand_off(TREE, HOLDER) is False
        assert host.queued == [(6, payload)]
        await async_wait_until(lambda: replica.kinds() == ["leave"] * 2, 5, "the second leave")
        # a dead *master*: its replica owns only the epochs up to its hand-over epoch, so the
        # queue stays for the new root (which routes what the replica owns to it)
        host.parent = HOLDER
        active.hand_off(TREE, HOLDER)
        active.heard_from(TREE, {**message, "inner": False})
        network.dead.add(HOLDER)
        host.queued = [(7, payload)]
        assert active.hand_off(TREE, NEW_PARENT) is False and host.queued == [(7, payload)]
    finally:
        await active.close()
        await client.close()
        await replica.server.stop()


async def test_an_epoch_emitted_while_parentless_stays_queued_for_the_new_parent() -> None:
    """A member re-joining drops its dead parent before it attaches to the new one; an epoch
    its barrier emits in between is queued (no parent yet) but goes to no replica (it is a
    member of no position). The hand-off drops only what the replicas were sent: that epoch
    goes to the new parent (a cluster run lost it for a second: a version lacking the
    member until the master folded it in)."""
    replica, client, network, host, active, message = await member_of_an_inner_holder()
    try:
        active.heard_from(TREE, message)
        sent = with_lineage(frozenset({C1}), snap_of(["a"]).to_bytes())
        active.to_replicas(TREE, 5, sent)
        network.dead.add(HOLDER)
        host.parent = None  # re-joining: epoch 6 is emitted with no parent
        parentless = with_lineage(frozenset({C1}), snap_of(["b"]).to_bytes())
        active.to_replicas(TREE, 6, parentless)
        host.queued = [(5, sent), (6, parentless)]
        host.parent = NEW_PARENT
        assert active.hand_off(TREE, NEW_PARENT) is True
        assert host.queued == [(6, parentless)]
        assert host.counters["handed_to_replicas"] == 1
        await async_wait_until(lambda: replica.kinds() == ["leave"], 5, "the leave")
        assert [(k, n.epoch) for k, n, _, _ in replica.snapshots] == [("replica", 5)]
    finally:
        await active.close()
        await client.close()
        await replica.server.stop()


async def test_an_inner_holder_announces_its_parent_and_tells_its_children() -> None:
    replica = await Peer().start()
    child = DataPlaneServer(SECRET)
    told: list[dict[str, Any]] = []

    async def replicas(request: Any) -> dict[str, Any]:
        told.append(await request.json())
        return {"ok": True}

    async def position(request: Any) -> dict[str, Any]:
        replica.events.append({"event": "position", **(await request.json())})
        return {"ok": True}

    child.route("POST", "/agent/v1/position/replicas", replicas)
    replica.server.route("POST", "/agent/v1/position", position)
    child_url = await child.start()
    client = DataPlaneClient(SECRET)
    from srt import EpochCombiner

    host = Host(parent=PARENT, parent_url="http://127.0.0.1:1", children={C1: child_url})
    host.own = EpochCombiner(
        job="wc", tree=TREE, expect_local=True, children=(C1,), emit=lambda e, s: None,
        first_epoch=1,
    )  # fmt: skip
    network = Network(HOLDER, client)
    active = ActiveReplicas(host, network, Tasks())  # type: ignore[arg-type]
    active.replica_ids = lambda tid: [ME]  # type: ignore[method-assign]

    async def url_of(node: Any) -> str:
        return replica.url

    network.data_url_of = url_of  # type: ignore[attr-defined]
    try:
        active.announce(TREE)
        await async_wait_until(lambda: told, 5, "the child told")
        body = replica.events[0]
        assert body["master"] == f"{HOLDER:x}"
        assert sorted(body["members"]) == sorted([f"{HOLDER:x}", f"{C1:x}"])
        assert body["parent"] == {"id": f"{PARENT:x}", "url": "http://127.0.0.1:1", "replicas": []}
        assert told[0]["master"] == f"{HOLDER:x}" and told[0]["replicas"] == [
            [f"{ME:x}", replica.url]
        ]
        assert active.heard[TREE][HOLDER] == {ME: replica.url}  # its own share goes there too
        await asyncio.sleep(0)
    finally:
        await active.close()
        await client.close()
        await replica.server.stop()
        await child.stop()


async def test_a_budget_replicates_the_planned_positions_only() -> None:
    from test_active_replicas import Spec

    from agent.jobs.fault_policy import FaultPolicy

    client = DataPlaneClient(SECRET)
    host = Host(parent=PARENT, spec=Spec(FaultPolicy("budget", 2, 2)))
    network = Network(HOLDER, client)
    active = ActiveReplicas(host, network, Tasks())  # type: ignore[arg-type]
    try:
        assert active.replicas_for(TREE) == 1  # no plan heard: passive here
        plan = {"kind": "replicas", "master": f"{PARENT:x}", "replicas": [],
                "plan": [f"{PARENT:x}", f"{HOLDER:x}"]}  # fmt: skip
        active.heard_from(TREE, plan)
        assert active.budget.plans[TREE] == {PARENT, HOLDER} and active.replicas_for(TREE) == 2
        active.heard_from(TREE, {**plan, "plan": [f"{PARENT:x}"]})  # re-planned without it
        assert active.replicas_for(TREE) == 1
        host.root = True  # the root is always replicated under a budget
        assert active.replicas_for(TREE) == 2
        active.heard_from(TREE, {**plan, "plan": ["zz"]})
        assert host.counters["bad_replicas_message"] == 1
    finally:
        await active.close()
        await client.close()
