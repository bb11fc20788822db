"""Overlay benchmark: routing hops, tree shape, failure repair and maintenance traffic in the
simulator; route latency over real UDP on loopback. Prints one JSON document on stdout.

    python bench/overlay_bench.py            # simulated N = 100, 1,280, 10,000 + 64 real nodes
    python bench/overlay_bench.py --quick    # simulated N = 100, 300 + 32 real nodes

Baseline (measured in the same run, on the same routing tables): greedy Kademlia-style
forwarding to the XOR-closest known contact, which the Pastry-style digit-at-a-time choice
replaces — it reaches the same roots but makes trees shallow stars with huge fan-in.

Goals (from the issue): hop p99 ≤ ⌈log₁₆ N⌉ + 1; maintenance ≤ 10 messages per node per second.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import platform
import random
import resource
import statistics
import sys
import time
from collections import Counter
from typing import Any

from overlay import OverlayNode, RoutingApplication, Tunables
from overlay.routing import closest_closer
from overlay.sim import SimNetwork, agreement, route_chain, run, start_cluster

SECRET = b"overlay-bench-secret-0123456789ab"


class Sink(RoutingApplication):
    """Counts deliveries; for real-socket runs records one-way latency."""

    def __init__(self) -> None:
        self.latencies: list[float] = []

    def deliver(self, key: int, message: dict[str, Any]) -> None:
        if "t0" in message:
            self.latencies.append(time.perf_counter() - message["t0"])


def peak_rss_mb() -> float:
    """Peak resident memory of this process so far (Linux reports ru_maxrss in KiB)."""
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def tree_shape(nodes: list[Any], key: int, greedy: bool) -> dict[str, int]:
    """Depth and maximum fan-in of the union of all live nodes' paths toward ``key``."""
    live = [n for n in nodes if n.running]
    by_id = {n.id: n for n in live}
    parent: dict[int, int] = {}
    for node in live:
        nh = closest_closer(node.id, key, node.contacts()) if greedy else node.next_hop(key)
        if nh is not None:
            parent[node.id] = nh.id
    fan_in = Counter(parent.values())
    depth = 0
    for node in live:
        d, cur = 0, node.id
        while cur in parent and d <= 64:
            cur = parent[cur]
            d += 1
        depth = max(depth, d)
    roots = {cur for cur in by_id if cur not in parent}
    return {"depth": depth, "max_fan_in": max(fan_in.values(), default=0), "roots": len(roots)}


async def simulate(
    n: int,
    seed: int,
    n_routes: int,
    n_keys: int,
    window: float,
    partial: dict[str, Any] | None = None,
    checkpoint: Any = None,
) -> dict[str, Any]:
    """``partial`` is filled phase by phase and ``checkpoint()`` called after each phase, so
    a long run that is stopped still leaves its finished phases behind (see ``--out``)."""
    res: dict[str, Any] = partial if partial is not None else {}

    def phase(name: str, **figures: Any) -> None:
        res.update(figures)
        res["phases_done"] = [*res.get("phases_done", []), name]
        res["wall_s"] = round(time.perf_counter() - wall0, 1)
        res["cpu_s"] = round(time.process_time() - cpu0, 1)
        print(f"n={n}: {name} {json.dumps(figures)}", file=sys.stderr, flush=True)
        if checkpoint is not None:
            checkpoint()

    wall0 = time.perf_counter()
    cpu0 = time.process_time()
    res["n"] = n
    loop = asyncio.get_running_loop()
    net = SimNetwork(seed=seed)
    nodes = await start_cluster(net, n, SECRET, batch=100)
    join_wall = time.perf_counter() - wall0
    join_virtual = loop.time()
    phase(
        "join",
        log16_n_ceil=math.ceil(math.log(n, 16)),
        join_virtual_s=round(join_virtual, 1),
        join_wall_s=round(join_wall, 1),
        join_cpu_ms_per_node=round((time.process_time() - cpu0) * 1000 / n, 1),
        peak_rss_mb=peak_rss_mb(),
    )
    for node in nodes:
        node.register("bench", Sink())
    await asyncio.sleep(10)  # let probes, leaf-set and slot refreshes settle

    rng = random.Random(seed)
    bound = math.ceil(math.log(n, 16))

    # maintenance traffic in a steady state (no application traffic)
    before = sum(x.stats()["maintenance_msgs_sent"] for x in nodes)
    t0 = loop.time()
    w0 = time.perf_counter()
    c0 = time.process_time()
    await asyncio.sleep(window)
    maint = (
        (sum(x.stats()["maintenance_msgs_sent"] for x in nodes) - before) / n / (loop.time() - t0)
    )
    wall_per_virtual_s = (time.perf_counter() - w0) / (loop.time() - t0)
    cpu_per_virtual_s = (time.process_time() - c0) / (loop.time() - t0)
    phase(
        "maintenance",
        maintenance_msgs_per_node_per_s=round(maint, 3),
        maintenance_goal_met=maint <= 10,
        wall_s_per_virtual_s=round(wall_per_virtual_s, 2),
        cpu_s_per_virtual_s=round(cpu_per_virtual_s, 2),
    )

    # real routed messages
    keys = [rng.getrandbits(160) for _ in range(n_keys)]
    hops: list[int] = []
    correct = 0
    for i in range(0, n_routes, 50):
        batch = []
        for _ in range(min(50, n_routes - i)):
            key = rng.choice(keys) if rng.random() < 0.5 else rng.getrandbits(160)
            batch.append((rng.choice(nodes), key))
        results = await asyncio.gather(*(o.route("bench", k, {}) for o, k in batch))
        for (_, key), r in zip(batch, results, strict=True):
            hops.append(r.hops)
            correct += r.node.id == min(nodes, key=lambda x: x.id ^ key).id

    trees = [tree_shape(nodes, k, greedy=False) for k in keys]
    greedy = [tree_shape(nodes, k, greedy=True) for k in keys]
    chain_hops = []
    by_id = {x.id: x for x in nodes}
    for key in keys[:2]:
        for node in nodes:
            path = route_chain(by_id, node, key)
            chain_hops.append(len(path) - 1 if path else 99)

    agreement_before = agreement(nodes, keys)
    phase(
        "routes_and_trees",
        route_hops_mean=round(statistics.mean(hops), 3),
        route_hops_p99=pct(hops, 0.99),
        route_hops_max=max(hops),
        hops_goal_met=pct(hops, 0.99) <= bound + 1,
        routes=len(hops),
        routes_to_true_root=correct / len(hops),
        all_nodes_chain_hops_p99=pct(chain_hops, 0.99),
        tree_depth_max=max(t["depth"] for t in trees),
        tree_max_fan_in=max(t["max_fan_in"] for t in trees),
        tree_max_fan_in_mean_over_keys=statistics.mean(t["max_fan_in"] for t in trees),
        baseline_greedy_tree_depth_max=max(t["depth"] for t in greedy),
        baseline_greedy_tree_max_fan_in=max(t["max_fan_in"] for t in greedy),
        tree_keys=len(keys),
        agreement_stable=agreement_before,
    )
    # 10 % crash at once; time until every live node's tables route every key to its root
    victims = rng.sample(nodes, n // 10)
    for v in victims:
        await v.stop()
    t_fail = loop.time()
    w_fail = time.perf_counter()
    step = 2.0 if n > 2000 else 1.0
    agreed_after = None
    while loop.time() - t_fail < 300:
        await asyncio.sleep(step)
        if agreement(nodes, keys[:4]) == 1.0:
            agreed_after = round(loop.time() - t_fail, 1)
            break
    phase(
        "crash_agreement",
        agree_after_10pct_fail_s=agreed_after,
        crash_phase_wall_s=round(time.perf_counter() - w_fail, 1),
    )
    survivors = [x for x in nodes if x.running]
    post = []
    for _ in range(min(100, n_routes)):
        key = rng.getrandbits(160)
        post.append((rng.choice(survivors), key))
    results = await asyncio.gather(*(o.route("bench", k, {}) for o, k in post))
    post_ok = sum(
        r.node.id == min(survivors, key=lambda x: x.id ^ k).id
        for (_, k), r in zip(post, results, strict=True)
    )
    contacts = statistics.mean(len(x.contacts()) for x in survivors)
    for node in survivors:
        await node.stop()
    phase(
        "after_crash",
        routes_to_true_root_after_fail=post_ok / len(post),
        contacts_per_node_mean=round(contacts, 1),
        peak_rss_mb=peak_rss_mb(),
    )
    return res


async def real_sockets(n: int, n_routes: int) -> dict[str, Any]:
    wall0 = time.perf_counter()
    tunables = Tunables()
    seed = OverlayNode(SECRET, tunables=tunables)
    await seed.start()
    nodes = [seed]
    for _ in range(n - 1):
        node = OverlayNode(SECRET, tunables=tunables)
        await node.start([seed.info.address])
        nodes.append(node)
    sinks = []
    for node in nodes:
        sink = Sink()
        sinks.append(sink)
        node.register("bench", sink)
    await asyncio.sleep(1.0)
    rng = random.Random(1)
    round_trip = []
    hops = []
    for _ in range(n_routes):
        origin = rng.choice(nodes)
        key = rng.getrandbits(160)
        t0 = time.perf_counter()
        r = await origin.route("bench", key, {"t0": t0})
        round_trip.append(time.perf_counter() - t0)
        hops.append(r.hops)
    one_way = [x for s in sinks for x in s.latencies]
    for node in nodes:
        await node.stop()
    ms = 1000.0
    return {
        "n": n,
        "routes": n_routes,
        "route_hops_mean": round(statistics.mean(hops), 3),
        "deliver_latency_ms_p50": round(pct(one_way, 0.5) * ms, 3),
        "deliver_latency_ms_p99": round(pct(one_way, 0.99) * ms, 3),
        "route_with_report_ms_p50": round(pct(round_trip, 0.5) * ms, 3),
        "route_with_report_ms_p99": round(pct(round_trip, 0.99) * ms, 3),
        "wall_s": round(time.perf_counter() - wall0, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, well under a minute")
    parser.add_argument("--sizes", type=int, nargs="*", help="override simulated sizes")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--out", help="also write the JSON document so far to this file after every phase"
    )
    args = parser.parse_args()
    sizes = args.sizes or ([100, 300] if args.quick else [100, 1280, 10000])
    out: dict[str, Any] = {
        "benchmark": "overlay",
        "quick": args.quick,
        "python": platform.python_version(),
        "seed": args.seed,
        "simulated": [],
    }

    def checkpoint() -> None:
        if args.out:
            with open(args.out + ".tmp", "w") as f:
                json.dump(out, f, indent=2)
            os.replace(args.out + ".tmp", args.out)

    for n in sizes:
        n_routes = 300 if n <= 2000 else 200
        n_keys = 8 if n <= 2000 else 4
        window = 10.0 if args.quick or n > 2000 else 20.0
        partial: dict[str, Any] = {}
        out["simulated"].append(partial)
        run(simulate(n, args.seed, n_routes, n_keys, window, partial, checkpoint))
        print(f"simulated n={n} done", file=sys.stderr, flush=True)
    real_n = 32 if args.quick else 64
    out["real_udp_loopback"] = asyncio.run(real_sockets(real_n, 200 if args.quick else 500))
    checkpoint()
    json.dump(out, sys.stdout, indent=2)
    print()


if __name__ == "__main__":
    main()
