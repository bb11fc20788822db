"""Tree formation and maintenance over real UDP on loopback (several overlay nodes in one
process): one root at the XOR-closest node, loop-free parent chains, bounded depth, consistent
children; m trees per job; repair after crashes; master hand-over; graceful leave and stop."""

from __future__ import annotations

import asyncio

import pytest
from srt_helpers import (
    Cluster,
    check_tree,
    deep_tree_id,
    depth_bound,
    depths,
    start_cluster,
    wait_clean,
    wait_for,
)

from srt.ids import app_id, tree_ids

N = 20


@pytest.fixture
async def cluster():
    c = await start_cluster(N)
    yield c
    await c.close()


async def join_all(c: Cluster, tree_id: int, job: str = "job") -> None:
    await asyncio.gather(*(m.join(tree_id, job=job) for m in c.live()))


async def test_formation_single_root_loop_free_bounded_depth(cluster: Cluster) -> None:
    tid = app_id("wordcount", "alice")
    await cluster.converge([tid])
    await join_all(cluster, tid)
    members = {m.overlay.id for m in cluster.live()}
    bound = depth_bound(N)
    await wait_clean(lambda: check_tree(cluster, tid, members, max_depth=bound), 10)
    root = cluster.true_root(tid)
    assert root.view(tid).is_root
    assert max(depths(cluster, tid).values()) <= bound
    # every member that is not the root has exactly one parent; the children sets add up
    views = [m.view(tid) for m in cluster.live()]
    assert sum(len(v.children) for v in views) == len(members) - 1
    # the root fired tree_root_changed(True); heartbeats taught children their parent's URL
    assert ("root", tid, True, None) in cluster.recorder(root).events

    # (and, one level per heartbeat, who the root is)
    def informed() -> bool:
        return all(
            (v := m.view(tid)).root is not None
            and v.root.id == root.overlay.id
            and (v.is_root or v.parent_url == f"http://127.0.0.1:{v.parent.port}")
            for m in cluster.live()
        )

    await wait_for(informed, 5, what="parent urls and root known")
    status = root.view(tid).to_dict()
    assert status["is_root"] and status["tree_id"] == f"{tid:040x}"


async def test_m_trees_have_their_own_roots(cluster: Cluster) -> None:
    tids = tree_ids(app_id("big-job", "bob"), 4)
    await cluster.converge(tids)
    await asyncio.gather(*(m.join(t, job="big-job") for m in cluster.live() for t in tids))
    members = {m.overlay.id for m in cluster.live()}
    for t in tids:
        await wait_clean(lambda t=t: check_tree(cluster, t, members), 10)
    roots = {t: cluster.true_root(t).overlay.id for t in tids}
    for t, r in roots.items():
        assert cluster.by_id(r).view(t).is_root
    # heartbeats are batched per parent node, not per tree
    hb = sum(m.events["hb_sent"] for m in cluster.live())
    assert hb > 0


def inner_nodes(c: Cluster, tid: int) -> list:
    return [m for m in c.live() if (v := m.view(tid)) and v.children and not v.is_root]


async def formed(c: Cluster, tid: int, job: str = "job") -> set[int]:
    await c.converge([tid])
    await join_all(c, tid, job)
    members = {m.overlay.id for m in c.live()}
    await wait_clean(lambda: check_tree(c, tid, members), 10)
    return members


async def test_killed_inner_node_children_rejoin(cluster: Cluster) -> None:
    await cluster.converge([app_id("warm-up", "carol")])
    tid = deep_tree_id(cluster, "inner")
    members = await formed(cluster, tid)
    inner = inner_nodes(cluster, tid)
    assert inner, "a 20-node tree has inner nodes below the root"
    victim = max(inner, key=lambda m: len(m.view(tid).children))
    orphans = set(victim.view(tid).children)
    parent = cluster.by_id(victim.view(tid).parent.id)
    await cluster.crash(victim)
    members.discard(victim.overlay.id)
    await wait_clean(lambda: check_tree(cluster, tid, members), 10)
    for o in orphans:
        assert cluster.by_id(o).view(tid).parent.id != victim.overlay.id
    # the dead node's parent dropped it (failed), and listeners heard of it
    assert victim.overlay.id not in parent.view(tid).children
    removed = cluster.recorder(parent).of("child-")
    assert any(e[2] == victim.overlay.id and e[3] == "failed" for e in removed)


async def test_killed_root_next_closest_becomes_root(cluster: Cluster) -> None:
    tid = app_id("rootless", "dave")
    members = await formed(cluster, tid)
    old = cluster.true_root(tid)
    await cluster.crash(old)
    members.discard(old.overlay.id)
    new = cluster.true_root(tid)
    assert new is not old
    await wait_clean(lambda: check_tree(cluster, tid, members), 15)
    assert new.view(tid).is_root
    assert ("root", tid, True, None) in cluster.recorder(new).events


async def test_closer_new_node_takes_over_master(cluster: Cluster) -> None:
    tid = app_id("handover", "erin")
    members = await formed(cluster, tid)
    old = cluster.true_root(tid)
    # a node whose id is as close to the tree id as possible joins the overlay
    newcomer = await cluster.add(node_id=tid ^ 1)
    await cluster.converge([tid])
    await wait_clean(lambda: check_tree(cluster, tid, members), 15)
    assert newcomer.view(tid).is_root and not newcomer.view(tid).subscriber
    assert not old.view(tid).is_root
    assert old.view(tid).parent is not None
    new_events = cluster.recorder(newcomer).of("root")
    assert new_events == [("root", tid, True, None)]
    await wait_for(lambda: cluster.recorder(old).of("root")[-1][2] is False, 5, what="old root")
    assert cluster.recorder(old).of("root")[-1] == ("root", tid, False, newcomer.overlay.id)
    assert old.events["handovers"] == 1


async def test_graceful_stop_hands_children_over(cluster: Cluster) -> None:
    await cluster.converge([app_id("warm-up", "frank")])
    tid = deep_tree_id(cluster, "graceful")
    members = await formed(cluster, tid)
    inner = max(inner_nodes(cluster, tid), key=lambda m: len(m.view(tid).children))
    children = set(inner.view(tid).children)
    grand = cluster.by_id(inner.view(tid).parent.id)
    await inner.stop()  # tree layer leaves gracefully first, then the overlay
    await inner.overlay.leave()
    members.discard(inner.overlay.id)
    # no re-join needed: the children were moved straight to their grandparent
    for c in children:
        assert cluster.by_id(c).view(tid).parent.id == grand.overlay.id
    reasons = {e[2]: e[3] for e in cluster.recorder(grand).of("child-")}
    assert reasons[inner.overlay.id] == "left"
    await wait_clean(lambda: check_tree(cluster, tid, members), 10)


async def test_graceful_stop_of_root_names_a_successor(cluster: Cluster) -> None:
    tid = app_id("graceful-root", "gina")
    members = await formed(cluster, tid)
    old = cluster.true_root(tid)
    await old.stop()
    await old.overlay.leave()
    members.discard(old.overlay.id)
    new = cluster.true_root(tid)
    assert new.view(tid).is_root  # told to take over before the old root left
    assert cluster.recorder(old).of("root")[-1] == ("root", tid, False, new.overlay.id)
    await wait_clean(lambda: check_tree(cluster, tid, members), 10)


async def test_leave_unsubscribes_and_prunes(cluster: Cluster) -> None:
    tid = app_id("leave", "hank")
    await formed(cluster, tid)
    leaves = [m for m in cluster.live() if not m.view(tid).children]
    for m in cluster.live():
        await m.leave(tid)
    # everyone unsubscribed: leaves leave at once, forwarders prune bottom-up, root last
    await wait_for(lambda: all(m.view(tid) is None for m in cluster.live()), 10, what="pruned")
    assert all(m.events["children_left"] == 0 for m in leaves)


async def test_silent_child_is_dropped_and_comes_back(cluster: Cluster) -> None:
    tid = app_id("silent", "olga")
    members = await formed(cluster, tid)
    child = next(m for m in cluster.live() if not m.view(tid).is_root)
    parent = cluster.by_id(child.view(tid).parent.id)
    child._loop_task.cancel()  # its heartbeats stop; the overlay still sees it alive
    await wait_for(lambda: child.overlay.id not in parent.view(tid).children, 5, what="dropped")
    removed = cluster.recorder(parent).of("child-")
    assert (removed[-1][2], removed[-1][3]) == (child.overlay.id, "failed")
    child._loop_task = asyncio.ensure_future(child._maint.run())  # re-joins or re-adopted
    await wait_clean(lambda: check_tree(cluster, tid, members), 10)
    assert child.overlay.id in cluster.by_id(child.view(tid).parent.id).view(tid).children
