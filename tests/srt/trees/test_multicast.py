"""Multicast down a tree over real UDP: every member gets it once, confirmations aggregate back
to the master (reached == members), inner nodes copy to their children (the root sends only to
its own children), a dead member shows up in ``missing``, oversized messages fail clearly."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest
from srt_helpers import Cluster, check_tree, deep_tree_id, start_cluster, wait_clean

from overlay import MessageTooLarge
from srt.ids import app_id
from srt.trees.types import NotRoot

N = 16


@pytest.fixture
async def cluster():
    c = await start_cluster(N)
    yield c
    await c.close()


async def form(c: Cluster, tid: int) -> set[int]:
    await c.converge([tid])
    await asyncio.gather(*(m.join(tid, job="mc") for m in c.live()))
    members = {m.overlay.id for m in c.live()}
    await wait_clean(lambda: check_tree(c, tid, members), 10)
    return members


def record(c: Cluster) -> Counter:
    got: Counter = Counter()
    for m in c.mgrs:

        async def handler(tree_id: int, message: dict, me: int = m.overlay.id) -> None:
            await asyncio.sleep(0)
            got[(me, tree_id, message["seq"])] += 1

        m.on_multicast(handler)
    return got


async def test_multicast_reaches_every_member_once(cluster: Cluster) -> None:
    await cluster.converge([app_id("warm", "mc")])
    tid = deep_tree_id(cluster, "mc")
    members = await form(cluster, tid)
    got = record(cluster)
    root = cluster.true_root(tid)
    sent_before = {m.overlay.id: m.events["mc_received"] for m in cluster.live()}
    result = await root.multicast(tid, {"seq": 1, "op": "empty"}, timeout=3.0)
    assert result.reached == len(members)
    assert result.missing == []
    assert 0 < result.elapsed_s < 3.0
    assert got == Counter({(i, tid, 1): 1 for i in members})
    # the root sent one copy per child; every non-root member received exactly one copy
    assert sum(m.events["mc_received"] - sent_before[m.overlay.id] for m in cluster.live()) == (
        len(members) - 1
    )
    assert len(root.view(tid).children) < len(members) - 1  # inner nodes did copy


async def test_dead_member_is_reported_missing(cluster: Cluster) -> None:
    tid = app_id("mc-dead", "ivy")
    members = await form(cluster, tid)
    root = cluster.true_root(tid)
    leaf = next(m for m in cluster.live() if not m.view(tid).children and not m.view(tid).is_root)
    await leaf.overlay.stop()  # crash, not yet noticed by its parent
    result = await root.multicast(tid, {"seq": 2}, timeout=1.0)
    assert leaf.overlay.id in result.missing
    assert result.reached == len(members) - 1
    await leaf.stop()


async def test_multicast_errors_are_clear(cluster: Cluster) -> None:
    tid = app_id("mc-errors", "jo")
    await form(cluster, tid)
    root = cluster.true_root(tid)
    other = next(m for m in cluster.live() if m is not root)
    with pytest.raises(NotRoot, match="not the root"):
        await other.multicast(tid, {"seq": 3})
    with pytest.raises(MessageTooLarge, match="data plane"):
        await root.multicast(tid, {"blob": b"x" * 9000})
    with pytest.raises(TypeError):
        await root.multicast(tid, {"bad": object()})


async def test_a_second_copy_is_neither_delivered_nor_counted(cluster: Cluster) -> None:
    tid = app_id("mc-dup", "pat")
    await form(cluster, tid)
    got = record(cluster)
    root = cluster.true_root(tid)
    child = cluster.by_id(next(iter(root.view(tid).children)))
    payload = {"t": tid.to_bytes(20, "big"), "mid": b"dupdupdu", "msg": {"seq": 9}, "budget": 1.0}
    first = await root.overlay.request(child.overlay.info, "srt.mc", payload)
    second = await root.overlay.request(child.overlay.info, "srt.mc", payload)
    assert first["reached"] == 1 + sum(
        1 for m in cluster.live() if is_below(cluster, m.overlay.id, child.overlay.id, tid)
    )
    assert second == {"reached": 0, "missing": []}
    assert got[(child.overlay.id, tid, 9)] == 1


def is_below(c: Cluster, node_id: int, ancestor: int, tid: int) -> bool:
    cur = c.by_id(node_id).view(tid)
    while cur is not None and cur.parent is not None:
        if cur.parent.id == ancestor:
            return True
        cur = c.by_id(cur.parent.id).view(tid)
    return False
