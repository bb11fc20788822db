"""Scale projection: roll-up and multicast latency of one job tree for 10^3 to 10^5 agents on
separate hosts, from the tree the overlay builds and the per-hop CPU of the real code. Prints
one JSON document on stdout.

    python bench/scale_projection.py            # N = 1,280, 10^4, 10^5; 5 trees each
    python bench/scale_projection.py --quick    # N = 1,280, 10^4; 3 trees; fewer hop rounds

The paper's claim: reduce time grows linearly while the number of agents grows exponentially
(the tree's depth is log16 N). Nothing here runs 10^5 agents; it projects them:

* **The tree.** Pastry-style routing (``overlay/routing.py``): toward key k a node sharing p
  hex digits with k forwards to the *designated* member of its slot (p, k[p]) - the member
  with the lowest rendezvous score, which is a uniform pick among the nodes sharing at least
  p + 1 digits with k, different for each node - or, if there is none, to the XOR-closest node
  (the root: the leaf-set step). The model draws exactly that pick for every node of N random
  ids (full routing knowledge). It is checked against the real overlay and tree code on the
  overlay simulator at N = 1,280 (``srt/sim.py``, as ``bench/redundancy_bench.py`` builds
  them): depth, inner nodes and the root's fan-in, side by side (``validation``).
* **The per-hop costs** are measured in this run from the real code paths
  (``bench/hop_bench.py``'s pure-compute loops): a snapshot hop of ``--keys`` keys, split into
  the child's part (encode, sign) and the parent's (verify, decode, merge, acknowledgement);
  a multicast hop, split into the parent's send (encode, sign) and the child's receive (verify,
  decode, route).
* **Roll-up** of one epoch: every leaf closes at t = 0; a node sends its merged epoch once its
  last child's arrived and was merged; it receives its children's snapshots one at a time, in
  arrival order, on one core (``t = max(t, arrival) + parent part``); a snapshot arrives
  ``--latency-ms`` (one way) after its sender's part. The root's finish time is the roll-up
  latency. Every snapshot has ``--keys`` keys (a workload whose keys overlap across agents,
  as WordCount over one vocabulary; disjoint keys would grow them toward the root).
* **Multicast**: the root sends one datagram per child, one after another; each child pays
  its receive part on arrival and forwards to its own children the same way. The last
  delivery is the multicast-to-all latency. Baseline: the root sending to every agent itself
  (a star) with the same costs.

Not modelled: CPU the agents spend on other work (their jobs' input, other trees), queueing
in the network, losses and retries, and the event loop's own overhead per request (the
end-to-end hop figures of ``bench/hop_bench.py`` are 2-3x the compute ones).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import sys
import time
from typing import Any, NamedTuple

from hop_bench import multicast_compute, snapshot_compute
from redundancy_bench import build_trees, shape

from overlay.ids import shared_prefix_digits
from srt.ids import app_id
from srt.trees.shape import children_of

PARENT_PARTS = ("parent_verify", "parent_decode", "parent_merge", "ack_sign_verify")
CHILD_PARTS = ("child_encode", "child_sign")


def model_tree(ids: list[int], key: int, rng: random.Random) -> dict[int, int | None]:
    """node id → parent id toward ``key`` (module contract: the designated slot member as a
    uniform pick; the root when no node shares one more digit)."""
    root = min(ids, key=lambda v: v ^ key)
    shared = {v: shared_prefix_digits(v, key) for v in ids}
    deepest = max(shared.values())
    at_least: list[list[int]] = [[] for _ in range(deepest + 2)]
    for v, p in shared.items():
        for level in range(p + 1):
            at_least[level].append(v)
    parents: dict[int, int | None] = {}
    for v, p in shared.items():
        if v == root:
            parents[v] = None
        elif at_least[p + 1]:
            parents[v] = rng.choice(at_least[p + 1])
        else:
            parents[v] = root
    return parents


class Tree(NamedTuple):
    """One tree as the latency models walk it, built once: its root, each node's children
    (sorted, as ``srt.trees.shape.children_of`` gives them) and every node with each child
    before its parent."""

    root: int
    kids: dict[int, list[int]]
    bottom_up: list[int]


def tree_of(parents: dict[int, int | None]) -> Tree:
    kids = children_of(parents)
    root = next(v for v, p in parents.items() if p is None)
    order, stack = [], [root]
    while stack:
        v = stack.pop()
        order.append(v)
        stack.extend(kids[v])
    return Tree(root, kids, order[::-1])


def rollup_ms(tree: Tree, child_us: float, parent_us: float, lat: float) -> float:
    """The root's finish time of one epoch (module contract), in ms."""
    done: dict[int, float] = {}
    for v in tree.bottom_up:
        arrivals = sorted(done[c] + child_us / 1000 + lat for c in tree.kids[v])
        t = 0.0
        for a in arrivals:
            t = max(t, a) + parent_us / 1000
        done[v] = t
    return done[tree.root]


def multicast_ms(tree: Tree, send_us: float, recv_us: float, lat: float) -> float:
    """The last delivery of one multicast from the root (module contract), in ms."""
    delivered = {tree.root: 0.0}
    last = 0.0
    for v in reversed(tree.bottom_up):  # every parent before its children
        t = delivered[v]
        for i, c in enumerate(tree.kids[v]):
            delivered[c] = t + (i + 1) * send_us / 1000 + lat + recv_us / 1000
            last = max(last, delivered[c])
    return last


def costs(rounds: int, keys: int) -> dict[str, Any]:
    """The per-hop CPU parts, measured now from the real code (µs)."""
    # two sizes: hop_bench fits a per-key and a fixed cost over them (reported, not used)
    sizes = {10: 400, keys: 200 if keys <= 1000 else 40} if keys != 10 else {10: 400, 1000: 200}
    snap = snapshot_compute(rounds, sizes)[str(keys)]
    mc = multicast_compute(rounds, 2000)
    parts = snap["parts_us"]
    return {
        "keys": keys,
        "snapshot_child_us": round(sum(parts[p] for p in CHILD_PARTS), 1),
        "snapshot_parent_us": round(sum(parts[p] for p in PARENT_PARTS), 1),
        "multicast_send_us": mc["parts_us"]["request_encode_sign"],
        "multicast_receive_us": mc["parts_us"]["request_verify_decode_route"],
    }


def project(n: int, trees: int, c: dict[str, Any], lat: float, seed: int) -> dict[str, Any]:
    rng = random.Random(seed * 1_000_003 + n)
    ids = [rng.getrandbits(160) for _ in range(n)]
    send, recv = c["multicast_send_us"], c["multicast_receive_us"]
    star: dict[int, int | None] = dict.fromkeys(ids, ids[0])
    star[ids[0]] = None
    runs = []
    for _ in range(trees):
        parents = model_tree(ids, rng.getrandbits(160), rng)
        tree = tree_of(parents)
        runs.append(
            {
                **shape(parents),
                "max_fan_in": max(len(k) for k in tree.kids.values()),
                "rollup_ms": rollup_ms(tree, c["snapshot_child_us"], c["snapshot_parent_us"], lat),
                "multicast_ms": multicast_ms(tree, send, recv, lat),
            }
        )
    star_ms = multicast_ms(tree_of(star), send, recv, lat)

    def med(key: str) -> float:
        return round(statistics.median(r[key] for r in runs), 2)

    return {
        "agents": n,
        "trees": trees,
        "depth": med("depth"),
        "root_children": med("root_children"),
        "max_fan_in": med("max_fan_in"),
        "rollup_ms_median": med("rollup_ms"),
        "rollup_ms_max": round(max(r["rollup_ms"] for r in runs), 2),
        "multicast_ms_median": med("multicast_ms"),
        "multicast_ms_max": round(max(r["multicast_ms"] for r in runs), 2),
        "multicast_star_ms": round(star_ms, 2),
    }


def validation(n: int, seeds: list[int]) -> dict[str, Any]:
    """The model's trees against the real overlay and tree code on the simulator."""
    real = build_trees(n, seeds, overlay_seed=7)
    ids = real["ids"]
    out: dict[str, Any] = {
        "agents": n,
        "real": [],
        "model": [],
        "sim_wall_s": round(real["wall_s"], 1),
    }
    rng = random.Random(11)
    for seed in seeds:
        parents = real["trees"][seed]
        if "error" in parents:
            out["real"].append(parents)
            continue
        key = app_id(f"redundancy-bench-{seed}", "sim")  # the tree id build_trees joined
        model = model_tree(ids, key, rng)
        for name, tree in (("real", parents), ("model", model)):
            kids = children_of(tree)
            out[name].append({**shape(tree), "max_fan_in": max(len(k) for k in kids.values())})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="N up to 10^4, 3 trees")
    parser.add_argument("--keys", type=int, default=1000, help="keys per snapshot")
    parser.add_argument("--latency-ms", type=float, default=0.25, help="one-way network latency")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    sizes = [1280, 10_000] if args.quick else [1280, 10_000, 100_000]
    trees = 3 if args.quick else 5
    t0 = time.monotonic()
    c = costs(3 if args.quick else 5, args.keys)
    out: dict[str, Any] = {
        "benchmark": "scale_projection",
        "quick": args.quick,
        "python": sys.version.split()[0],
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
        "latency_ms_one_way": args.latency_ms,
        "per_hop_costs_us": c,
        "projection": [project(n, trees, c, args.latency_ms, args.seed) for n in sizes],
        "validation": validation(1280, [1, 2] if args.quick else [1, 2, 3]),
    }
    out["wall_s"] = round(time.monotonic() - t0, 1)
    json.dump(out, sys.stdout, indent=2)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
