"""Many trees over the simulated overlay (overlay/sim.py, virtual time): every tree is rooted
at the XOR-closest live node and loop-free, and the roots spread over the agents as in the
paper (roots per agent). The 1,280-agent / 500-tree run is marked slow; a smaller one is not."""

from __future__ import annotations

import asyncio
import random
import sys
import time
from collections import Counter

import pytest

from overlay.sim import SimNetwork, run, start_cluster
from srt.ids import app_id
from srt.sim import SimTreeNode as TreeNode
from srt.trees.balance import roots_per_agent

SECRET = b"sim-cluster-secret-0123456789abcd"


def check_all(nodes: list[TreeNode], tids: list[int], members: dict[int, set[int]]) -> dict:
    """Per tree: the roots, chains, parent/child agreement. Returns counts of problems."""
    live = [n for n in nodes if n.running]
    ids = sorted(n.id for n in live)
    bad_root = loops = broken = inconsistent = 0
    samples: list[str] = []
    depth_max = 0
    for t in tids:
        views = {n.id: v for n in live if (v := n.trees.view(t)) is not None}
        true = min(ids, key=lambda i: i ^ t)
        roots = [i for i, v in views.items() if v.is_root]
        bad_root += roots != [true]
        for origin in members[t] | set(views):
            cur, seen, depth = origin, {origin}, 0
            while cur in views and not views[cur].is_root:
                parent = views[cur].parent
                if parent is None:
                    break
                cur = parent.id
                depth += 1
                if cur in seen:
                    loops += 1
                    break
                seen.add(cur)
            if cur not in views or not views[cur].is_root:
                broken += 1
            depth_max = max(depth_max, depth)
        for i, v in views.items():
            for c in v.children:
                cv = views.get(c)
                if cv is None or cv.parent is None or cv.parent.id != i:
                    inconsistent += 1
                    samples.append(
                        f"tree {t:x}: {i:x} lists {c:x}, whose view is "
                        f"{None if cv is None else (cv.state, cv.parent)}"
                    )
    return {
        "bad_root": bad_root,
        "loops": loops,
        "broken": broken,
        "inconsistent": inconsistent,
        "depth_max": depth_max,
        "samples": samples[:5],
    }


def build_and_check(
    n_agents: int, n_trees: int, sample: tuple[int, int], seed: int, settle: float = 5.0
) -> dict:
    t0 = time.monotonic()

    def progress(what: str) -> None:  # shown with -s: where the wall time goes
        virtual = asyncio.get_running_loop().time()
        print(
            f"[{time.monotonic() - t0:7.1f}s wall, {virtual:6.1f}s virtual] {what}",
            file=sys.stderr,
            flush=True,
        )

    async def main() -> dict:
        net = SimNetwork(seed=seed)
        nodes = await start_cluster(net, n_agents, SECRET, batch=100, node_factory=TreeNode)
        progress(f"{n_agents} agents joined the overlay")
        await asyncio.sleep(settle)
        progress("settled")  # virtual seconds: let the routing tables converge
        rnd = random.Random(seed)
        tids = [app_id(f"job-{i}", "sim") for i in range(n_trees)]
        members = {t: {n.id for n in rnd.sample(nodes, rnd.randint(*sample))} for t in tids}
        by_id = {n.id: n for n in nodes}
        for i in range(0, n_trees, 50):
            batch = tids[i : i + 50]
            await asyncio.gather(
                *(by_id[m].trees.join(t, job=f"job-{t}") for t in batch for m in members[t])
            )
            progress(f"{i + len(batch)} trees joined")
        hb0 = sum(n.trees.events["hb_sent"] for n in nodes)
        await asyncio.sleep(3.0)  # a few heartbeats: everything confirmed
        hb_rate = (sum(n.trees.events["hb_sent"] for n in nodes) - hb0) / (3.0 * len(nodes))
        progress(f"heartbeats: {hb_rate:.2f} srt.hb requests per agent per second")
        result = check_all(nodes, tids, members)
        progress(f"checked: {result}")
        if result["inconsistent"]:  # stale child entries expire after child_timeout
            await asyncio.sleep(4.0)
            result = check_all(nodes, tids, members)
            progress(f"checked again: {result}")
        result["roots"] = [min(nodes, key=lambda n: n.id ^ t).id for t in tids]
        result["node_ids"] = [n.id for n in nodes]
        result["tids"] = tids
        events: Counter[str] = Counter()
        for n in nodes:
            events.update(n.trees.events)
        result["events"] = dict(events)
        progress(f"events: {dict(events)}")
        result["members"] = sum(len(m) for m in members.values())
        for n in nodes:  # overlay first: no graceful hand-offs between 1,280 dying nodes
            await n.stop()
            await n.trees.stop()
        return result

    return run(main())


def assert_healthy(r: dict) -> None:
    assert r["bad_root"] == 0
    assert r["loops"] == 0
    assert r["broken"] == 0
    assert r["inconsistent"] == 0


def test_sim_many_trees_small() -> None:
    r = build_and_check(n_agents=100, n_trees=40, sample=(8, 16), seed=3)
    assert_healthy(r)
    assert r["depth_max"] <= 3  # ⌈log16 100⌉ + 1


@pytest.mark.slow
def test_sim_1280_agents_500_trees() -> None:
    r = build_and_check(n_agents=1280, n_trees=500, sample=(16, 32), seed=1, settle=10.0)
    assert_healthy(r)
    assert r["depth_max"] <= 4  # ⌈log16 1280⌉ + 1
    # the roots the trees actually chose give the paper's load balance
    balance = roots_per_agent(r["node_ids"], r["tids"])
    per: dict[int, int] = {}
    for root in r["roots"]:
        per[root] = per.get(root, 0) + 1
    assert balance["max"] == max(per.values())
    print("roots per agent, 500 trees:", balance)
    for n_trees in (1000, 2000):
        more = [app_id(f"job-{i}", "sim") for i in range(n_trees)]
        print(f"roots per agent, {n_trees} trees:", roots_per_agent(r["node_ids"], more))
