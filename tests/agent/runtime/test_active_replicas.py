"""ActiveReplicas (agent/runtime/recovery/active_replicas.py) over real loopback HTTP: who
sends to the replicas (the master's members only, the master for its own share, never a
grandchild), the replica's door (503 before the master's announcement, 409 for a passive
job), the take-over (kept epochs stored, the dead master's members pinned from the hand-over
epoch on, contributions routed to the replica while it owns their epoch) and a runtime
change to passive dropping the replica's state."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import pytest

from agent.jobs.fault_policy import FaultPolicy
from agent.jobs.schedule import EpochSchedule
from agent.runtime.recovery.active_replicas import ActiveReplicas
from cbt import CompressedBufferTree, Snapshot
from srt import DataPlaneClient, DataPlaneServer, EpochCombiner, SnapshotName
from srt.config import Tunables
from srt.dataplane.lineage import decode as lineage_of
from srt.dataplane.lineage import encode as with_lineage
from srt.dataplane.name import REPLICA_SNAPSHOT_PATH
from srt.errors import Reject, RetryLater

SECRET = b"active-replicas-test-secret-0123"
TREE = 0xABC
MASTER, ME, OTHER = 0x100, 0x200, 0x300


def snap_of(words: Iterable[str]) -> Snapshot:
    tree = CompressedBufferTree(aggregator="count")
    tree.insert_many(list(words))
    return tree.flush()


@dataclass
class Spec:
    fault_tolerance: FaultPolicy
    schedule: Any = field(default_factory=lambda: EpochSchedule(1.0))


@dataclass
class Host:
    """The job as ActiveReplicas sees it: its barrier, its store, its parent."""

    name: str = "wc"
    spec: Spec = field(default_factory=lambda: Spec(FaultPolicy("replicated", 2)))
    is_origin: bool = True
    stopped: bool = False
    root: bool = False
    parent: int | None = MASTER
    stored: dict[int, tuple[Counter, frozenset[int] | None]] = field(default_factory=dict)
    pins: list[tuple[int, frozenset[int], float]] = field(default_factory=list)
    counters: Counter = field(default_factory=Counter)
    own: EpochCombiner | None = None
    parent_url: str | None = None
    children: dict[int, str] = field(default_factory=dict)
    queued: list[tuple[int, bytes]] = field(default_factory=list)
    unpinned: list[tuple[int, int]] = field(default_factory=list)

    def is_root(self, tid: int) -> bool:
        return self.root

    def parent_of(self, tid: int) -> int | None:
        return None if self.root else self.parent

    def ensure_tree(self, tid: int) -> EpochCombiner:
        assert self.own is not None
        return self.own

    def new_barrier(self, tid: int, emit: Callable[[int, Snapshot], None]) -> EpochCombiner:
        return EpochCombiner(
            job=self.name, tree=tid, expect_local=False, children=(), emit=emit, first_epoch=None
        )

    def store_root(self, tid: int, epoch: int, snap: Snapshot, origins: Any) -> None:
        self.stored[epoch] = (Counter(snap.to_dict()), origins)

    def pin_children(self, tid: int, members: Iterable[int], seconds: float) -> None:
        self.pins.append((tid, frozenset(members), seconds))

    def unpin_child(self, tid: int, member: int) -> None:
        self.unpinned.append((tid, member))

    def parent_url_of(self, tid: int) -> str | None:
        return self.parent_url

    def child_urls(self, tid: int) -> dict[int, str]:
        return dict(self.children)

    async def acked_up(self, tid: int, epoch: int, timeout: float) -> bool:
        return True  # (the new parent's acknowledgement: not what these tests are about)

    def take_queued(self, tid: int, upto: int | None = None) -> list[tuple[int, bytes]]:
        taken = [(e, p) for e, p in self.queued if upto is None or e <= upto]
        self.queued = [(e, p) for e, p in self.queued if (e, p) not in taken]
        return taken

    def count(self, what: str, n: int = 1) -> None:
        self.counters[what] += n

    async def multicast(self, tid: int, message: dict[str, Any]) -> None:
        return None


@dataclass
class Network:
    node_id: int
    client: DataPlaneClient
    srt_tunables: Tunables = field(default_factory=lambda: Tunables(upstream_backoff=0.01))
    dead: set[int] = field(default_factory=set)
    domain: str = "default"
    snapshot_datagrams: Any = None  # every snapshot by HTTP

    def routable(self, node_id: int) -> bool:
        return node_id not in self.dead


class Tasks:
    def spawn(self, coro: Any, name: str) -> None:
        asyncio.get_running_loop().create_task(coro, name=name)


async def replica_door() -> tuple[DataPlaneServer, list[SnapshotName], str]:
    got: list[SnapshotName] = []

    async def handler(name: SnapshotName, body: bytes, position: int | None = None) -> str:
        lineage_of(body)
        assert position is not None  # a member names the position it sends for
        got.append(name)
        return "merged"

    server = DataPlaneServer(SECRET)
    server.on_snapshot(handler, path=REPLICA_SNAPSHOT_PATH)
    return server, got, await server.start()


async def test_only_the_masters_members_send_to_its_replicas() -> None:
    server, got, url = await replica_door()
    client = DataPlaneClient(SECRET)
    host = Host()
    active = ActiveReplicas(host, Network(ME, client), Tasks())  # type: ignore[arg-type]
    message = {"kind": "replicas", "master": f"{MASTER:x}", "replicas": [[f"{OTHER:x}", url]]}
    try:
        payload = with_lineage(frozenset({ME}), snap_of(["a"]).to_bytes())
        active.to_replicas(TREE, 1, payload)  # nothing heard yet: nowhere
        active.heard_from(TREE, message)
        active.to_replicas(TREE, 2, payload)  # a child of the master: to its replica
        sender = active.senders[(TREE, MASTER)][OTHER]
        assert await sender.flush(timeout=5)
        host.parent = OTHER  # moved under another node: a grandchild of the master
        active.to_replicas(TREE, 3, payload)
        assert (TREE, MASTER) not in active.senders  # its sender to the replica closed
        host.root, host.parent = True, None  # this agent is not the master named: nowhere
        active.to_replicas(TREE, 4, payload)
        await asyncio.sleep(0)  # let the closing task run (nothing is waited on by time)
        assert [(n.epoch, n.sender) for n in got] == [(2, ME)]
        active.heard_from(TREE, {"kind": "replicas", "master": "zz"})
        bad_url = {"kind": "replicas", "master": "1", "replicas": [["2", "file:///etc/passwd"]]}
        active.heard_from(TREE, bad_url)
        many = [[format(i, "x"), url] for i in range(1, 7)]
        active.heard_from(TREE, {"kind": "replicas", "master": "1", "replicas": many})
        assert host.counters["bad_replicas_message"] == 3
        assert 1 not in active.heard.get(TREE, {})  # nothing of the bad messages stands
    finally:
        await active.close()
        await client.close()
        await server.stop()


async def test_the_replica_door_and_the_take_over() -> None:
    client = DataPlaneClient(SECRET)
    host = Host()
    host.own = EpochCombiner(
        job="wc", tree=TREE, expect_local=True, children=(), emit=lambda e, s: None,
        first_epoch=10,
    )  # fmt: skip
    active = ActiveReplicas(host, Network(ME, client), Tasks())  # type: ignore[arg-type]
    name = lambda sender, epoch: SnapshotName("wc", TREE, epoch, sender)  # noqa: E731
    try:
        with pytest.raises(RetryLater):  # no announcement from the master yet: 503
            active.offer(name(OTHER, 10), snap_of(["x"]), frozenset({OTHER}))
        active.position(TREE, MASTER, [MASTER, OTHER, ME])
        assert active.offer(name(OTHER, 10), snap_of(["o"]), frozenset({OTHER})) == "merged"
        assert active.offer(name(ME, 10), snap_of(["m"]), frozenset({ME})) == "merged"
        assert active.offer(name(MASTER, 10), snap_of(["p"]), frozenset({MASTER})) == "merged"
        assert active.offer(name(OTHER, 11), snap_of(["o"]), frozenset({OTHER})) == "merged"
        # the master dies with epoch 11 in flight: this agent's own barrier emitted up to 10
        host.own.offer_local(10, snap_of([]))
        host.root = True
        active.became_root(TREE)
        assert host.stored[10][0] == Counter(o=1, m=1, p=1)  # kept: stored in order
        assert host.pins == [(TREE, frozenset({OTHER}), pytest.approx(10.0))]
        assert host.own.pending()["children"][OTHER] == {"from": 12, "confirmed": True}
        assert active.owns(TREE, 11) and not active.owns(TREE, 12)
        # epoch 11 still waits for this agent's own share, which its barrier sends as a member
        assert active.route(TREE, ME, 11, snap_of(["m"]), frozenset({ME})) == "merged"
        assert host.stored[11][0] == Counter(o=1, m=1)  # the dead master's share: absent
        assert host.stored[11][1] == frozenset({OTHER, ME})
        assert not active.owns(TREE, 11) and not active.positions  # done
        assert active.route(TREE, OTHER, 12, snap_of(["o"]), frozenset({OTHER})) is None
    finally:
        await active.close()
        await client.close()


async def test_a_change_to_passive_drops_the_replica_state() -> None:
    client = DataPlaneClient(SECRET)
    host = Host()
    active = ActiveReplicas(host, Network(ME, client), Tasks())  # type: ignore[arg-type]
    try:
        active.position(TREE, MASTER, [MASTER, ME])
        assert (TREE, MASTER) in active.positions
        host.spec = Spec(FaultPolicy())
        with pytest.raises(Reject) as info:
            active.offer(SnapshotName("wc", TREE, 1, MASTER), snap_of(["p"]), None)
        assert (info.value.status, info.value.reason) == (409, "not_replicated")
        assert active.positions == {}
        active.became_root(TREE)  # nothing to take over, nothing stored
        assert host.stored == {}
    finally:
        await active.close()
        await client.close()
