"""Shared helpers for the tree tests: short timings, clusters of OverlayNode + TreeManager on
loopback (port 0), condition waits (never sleeps as synchronisation), a recording listener and
an independent checker of tree invariants."""

from __future__ import annotations

import asyncio
import itertools
import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from overlay import NodeInfo, OverlayNode, Tunables
from overlay.sim import agreement
from srt.config import Tunables as SrtTunables
from srt.trees.manager import TreeManager

SECRET = b"test-cluster-secret-0123456789ab"

FAST = Tunables(
    request_timeout=0.25,
    request_retries=2,
    probe_interval=0.05,
    probe_timeout=0.15,
    misses_before_suspect=3,
    fail_timeout=0.4,
    leaf_refresh_interval=0.5,
    slot_refresh_interval=0.5,
    # fixed refresh periods: these tests are about trees, not upkeep (tests/overlay/
    # test_trickle.py covers the stretching; cluster tests run the production timings)
    leaf_refresh_max_interval=0.5,
    slot_refresh_max_interval=0.5,
    rejoin_interval=0.2,
    rejoin_batch=4,
    tombstone_ttl=2.0,
    route_timeout=3.0,
)
HB = 0.2
PARENT_TIMEOUT = 0.9


async def wait_for(
    predicate: Callable[[], Any], timeout: float, step: float = 0.02, what: str = ""
) -> None:
    """Poll ``predicate`` until truthy; fail after ``timeout`` seconds (shows the last value
    if it is a non-empty list of problems)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"condition {what!r} not met within {timeout}s")
        await asyncio.sleep(step)


async def wait_clean(check: Callable[[], list[str]], timeout: float, step: float = 0.05) -> None:
    """Poll ``check`` (returns a list of problems) until it returns none."""
    deadline = time.monotonic() + timeout
    while True:
        problems = check()
        if not problems:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"not clean after {timeout}s: {problems[:8]}")
        await asyncio.sleep(step)


@dataclass
class Recorder:
    """A TreeListener that records every callback."""

    events: list[tuple[Any, ...]] = field(default_factory=list)

    def tree_parent_changed(self, tree_id: int, parent: NodeInfo | None) -> None:
        self.events.append(("parent", tree_id, parent.id if parent else None))

    def tree_child_added(self, tree_id: int, child: NodeInfo) -> None:
        self.events.append(("child+", tree_id, child.id))

    def tree_child_removed(self, tree_id: int, child_id: int, reason: str) -> None:
        self.events.append(("child-", tree_id, child_id, reason))

    def tree_root_changed(self, tree_id: int, is_root: bool, new_root: NodeInfo | None) -> None:
        self.events.append(("root", tree_id, is_root, new_root.id if new_root else None))

    def of(self, kind: str) -> list[tuple[Any, ...]]:
        return [e for e in self.events if e[0] == kind]


class Cluster:
    """Overlay nodes with one TreeManager each, all in this process on loopback."""

    def __init__(self) -> None:
        self.nodes: list[OverlayNode] = []
        self.mgrs: list[TreeManager] = []
        self.recorders: list[Recorder] = []

    async def add(self, node_id: int | None = None) -> TreeManager:
        node = OverlayNode(SECRET, tunables=FAST, node_id=node_id)
        boot = [self.nodes[0].info.address] if self.nodes else []
        mgr = TreeManager(
            node,
            data_url="",  # set below, once the port is bound
            tunables=SrtTunables(
                heartbeat_interval=HB, parent_timeout=PARENT_TIMEOUT, join_timeout=8.0
            ),
        )
        rec = Recorder()
        mgr.add_listener(rec)
        await mgr.start()  # before the overlay: no routed tree message finds it missing
        await node.start(boot)
        mgr.data_url = f"http://127.0.0.1:{node.info.port}"
        self.nodes.append(node)
        self.mgrs.append(mgr)
        self.recorders.append(rec)
        return mgr

    def live(self) -> list[TreeManager]:
        return [m for m in self.mgrs if m.running and m.overlay.running]

    def by_id(self, node_id: int) -> TreeManager:
        return next(m for m in self.mgrs if m.overlay.id == node_id)

    def recorder(self, mgr: TreeManager) -> Recorder:
        return self.recorders[self.mgrs.index(mgr)]

    def true_root(self, tree_id: int) -> TreeManager:
        return min(self.live(), key=lambda m: m.overlay.id ^ tree_id)

    async def converge(self, keys: Iterable[int], timeout: float = 20.0) -> None:
        """Wait until every live node's tables route ``keys`` to the true roots."""
        keys = list(keys)
        live = [m.overlay for m in self.live()]
        await wait_for(lambda: agreement(live, keys) == 1.0, timeout, 0.05, "routing agreement")

    async def crash(self, mgr: TreeManager) -> None:
        """Abrupt stop, as a crash looks to the others (no hand-off, no goodbye)."""
        await mgr.overlay.stop()
        await mgr.stop()

    async def close(self) -> None:
        for m in self.mgrs:
            if m.overlay.running:
                await m.overlay.stop()
            await m.stop()


async def start_cluster(n: int) -> Cluster:
    cluster = Cluster()
    for _ in range(n):
        await cluster.add()
    return cluster


def check_tree(
    cluster: Cluster, tree_id: int, members: Iterable[int] = (), *, max_depth: int | None = None
) -> list[str]:
    """Problems with the tree right now (empty list = whole and consistent):

    exactly one root, the live node XOR-closest to ``tree_id``; every node on the tree (and
    every id in ``members``) has a parent chain that reaches it without a loop or a dead node;
    parent and children sets agree both ways; every parent is strictly closer to the id than
    its children; optional depth bound."""
    live = cluster.live()
    views = {m.overlay.id: v for m in live if (v := m.view(tree_id)) is not None}
    problems: list[str] = []
    true = cluster.true_root(tree_id).overlay.id
    roots = [i for i, v in views.items() if v.is_root]
    if roots != [true]:
        problems.append(f"roots {[hex(r)[:10] for r in roots]} != true root {hex(true)[:10]}")
    for node_id in set(members) | set(views):
        seen = {node_id}
        cur = node_id
        depth = 0
        while True:
            v = views.get(cur)
            if v is None:
                problems.append(f"{hex(node_id)[:10]}: chain hits {hex(cur)[:10]} not on tree")
                break
            if v.is_root:
                break
            if v.parent is None:
                problems.append(f"{hex(cur)[:10]} has no parent ({v.state})")
                break
            if (v.parent.id ^ tree_id) >= (cur ^ tree_id):
                problems.append(f"{hex(cur)[:10]}: parent not closer")
            cur = v.parent.id
            depth += 1
            if cur in seen:
                problems.append(f"loop through {hex(cur)[:10]}")
                break
            seen.add(cur)
        if max_depth is not None and depth > max_depth:
            problems.append(f"{hex(node_id)[:10]} at depth {depth} > {max_depth}")
    for node_id, v in views.items():
        if v.parent is not None:
            pv = views.get(v.parent.id)
            if pv is None or node_id not in pv.children:
                problems.append(f"{hex(v.parent.id)[:10]} does not list child {hex(node_id)[:10]}")
        for cid in v.children:
            cv = views.get(cid)
            if cv is None or cv.parent is None or cv.parent.id != node_id:
                problems.append(f"child {hex(cid)[:10]} of {hex(node_id)[:10]} has other parent")
    return problems


def depth_bound(n: int) -> int:
    return math.ceil(math.log(n, 16)) + 1


def depths(cluster: Cluster, tree_id: int) -> dict[int, int]:
    views = {m.overlay.id: v for m in cluster.live() if (v := m.view(tree_id)) is not None}
    out: dict[int, int] = {}
    for node_id in views:
        d, cur = 0, node_id
        while not views[cur].is_root and d <= len(views):
            parent = views[cur].parent
            assert parent is not None
            cur = parent.id
            d += 1
        out[node_id] = d
    return out


def deep_tree_id(cluster: Cluster, name: str, tries: int = 200) -> int:
    """An app id (of ``name-i``) whose tree over the current routing tables has an inner node
    below the root (small clusters often route everyone straight to the root)."""
    from overlay.sim import route_chain
    from srt.ids import app_id

    by_id = {m.overlay.id: m.overlay for m in cluster.live()}
    best, best_score = None, -1
    for i in range(tries):
        tid = app_id(f"{name}-{i}", "tests")
        parents: dict[int, int] = {}
        for node in by_id.values():
            path = route_chain(by_id, node, tid)
            if path is None:
                continue
            for a, b in itertools.pairwise(path):
                parents[a.id] = b.id
        root = min(by_id, key=lambda n: n ^ tid)
        fan: dict[int, int] = {}
        for p in parents.values():
            if p != root:
                fan[p] = fan.get(p, 0) + 1
        score = max(fan.values(), default=0)
        if score > best_score:
            best, best_score = tid, score
        if score >= 2:
            break
    assert best is not None and best_score >= 1, "no tree with an inner node"
    return best
