"""Active-redundancy benchmark (issue "Active redundancy"). Prints one JSON document on stdout.

    python bench/redundancy_bench.py                  # every section
    python bench/redundancy_bench.py --quick          # fewer seeds and runs (a few minutes)
    python bench/redundancy_bench.py --only planner   # one section
    python bench/redundancy_bench.py --only replicated --agents 8   # a real cluster of 8
    python bench/redundancy_bench.py --only inner --runs 2          # an inner node killed
    python bench/redundancy_bench.py --only mirror --quick          # an inner node paused
    python bench/redundancy_bench.py --only any --quick             # a random node killed
    python bench/redundancy_bench.py --only domain --quick          # a failure domain killed
    python bench/redundancy_bench.py --only domain --quick --fault partition   # cut off

Sections (``--only``, repeatable; each is one function in :data:`SECTIONS`, and its JSON is
``sections[name]``):

* **planner** — budgeted replicas (PPA): tentative quality vs budget R, the structure-aware
  plan (:func:`agent.runtime.recovery.replica_plan.plan_structure_aware`) against greedy
  baselines. The overlay simulator (``overlay/sim.py``: the unchanged overlay and tree code
  on virtual time) runs 1,280 agents; one job per seed joins on every agent and builds its
  real tree (:class:`srt.trees.manager.TreeManager`), which is read back from the agents'
  views once every agent's chain reaches the root. Per seed (one tree each, all on one
  overlay):

  - **failure domains**: 32 racks of 40 agents, by address (agents 0-39 on rack 0, ...), as a
    data centre would rack them; an agent's tree position comes from its id (a hash of its
    address), so racks and tree levels are independent.
  - **rates**: each agent's own input, lognormal (median 100 records/s, σ = 1.5: the top 1 %
    of agents read about 20 % of the input), seeded.
  - **top-k workload**: one 2-second epoch; each agent draws rate × 2 records, half from one
    global Zipf (s = 1.1, 20,000 keys) and half from its own 50 local keys (Zipf s = 1.1: its
    host's own hot keys); k = 20.
  - **budgets** R = 0.5 %, 1 %, 2 %, 5 % of the agents (6, 13, 26, 64).
  - **planners**: ``structure_aware`` (PPA's optimum on a tree), ``greedy`` (PPA's Greedy:
    highest flow first, flow = the subtree's total rate, leaves included), ``greedy_inner``
    (the same ranking over inner nodes only: a stronger baseline than PPA's), and for
    context ``own_rate`` (structure-blind: the agents that read the most themselves - the
    issue's "highest rate first" read with each origin's own rate, and what a rate ranking
    amounts to when a node's rate says nothing of its place in the topology; PPA's Greedy
    is ``greedy``). ``domain_aware``
    (:func:`agent.runtime.recovery.replica_plan.plan_domain_aware`) is the exact optimum of
    the worst single-rack coverage, the failure the issue names, for comparison: PPA's plan
    optimises a different failure (every unreplicated node), see ``docs/fault-tolerance.md``.
  - **scenarios**: ``domain`` - one rack fails (every domain in turn): the worst domain's
    coverage and top-k quality, and the mean coverage over domains; ``ppa_worst`` - PPA's
    worst correlated failure, the merging of every unreplicated node fails (the plan's output
    fidelity: the share of input whose strict ancestors are all replicated) and its top-k
    quality.

  Reported: per R and planner the medians over seeds; the ceiling (every agent replicated:
  a failed rack still loses its own agents' input); per R the ratio structure-aware / each
  baseline (``greedy``, ``greedy_inner``, ``domain_aware``, ``own_rate``: the median of the
  per-seed ratios, ``"unbounded"`` where the baseline covers nothing) for each figure; the
  tree shapes; checks (every
  plan connected where claimed, within budget, never below greedy on its objective).

* **replicated** — replicated masters (Hwang) on a real multi-process cluster
  (:class:`agent.server.chaos.ChaosCluster`, one agent process per agent, loopback), the
  policies ``passive`` and ``{"policy": "replicated", "replicas": 2}`` in interleaved runs,
  each on a fresh cluster (``--runs`` each: 3 full, 1 quick; ``--agents``: 16 full, 5 quick):

  - **transparency**: :func:`agent.server.replica_scenarios.kill_during_a_stall` - WordCount
    on 1 s epochs, a member of the master's barrier stalled (SIGSTOP) until the master holds
    two epochs waiting for it alone, kill -9 of the master, the member resumed, the master
    restarted six stored epochs later; the every-version reader reads the lake and the
    results API every 0.5 s. Per policy the medians of: the distinct epochs with a version
    (first seen between the kill and the restart) flagged lacking an origin other than the
    killed master and the stalled member (the goal for replicated: 0), those versions, the
    reader's violations (goal 0) and the end-of-run share of epochs final and exact. In the
    full run 16 agents are tried first; when that run fails (the cluster's timeouts on the
    machine's cores), the JSON says so (``tried``, with its error and wall time) and the
    runs use 8.
  - **steady-state cost** (goal: replicated / passive <= 1.5): the same WordCount workload
    (10 lines/s per agent) without faults; over a measured window (``--seconds``: 20 full,
    10 quick) the CPU of all agent processes (psutil user + system, in cores), the bytes on
    the wire - the sum over agents of the data plane's request bytes received
    (``status()["data_plane"]["bytes_in"]``: request bodies - snapshots to parents and to
    replicas, standby replication, announcements, pulls - not responses nor HTTP headers)
    and of the overlay's UDP bytes sent (``status()["overlay"]["sent_bytes"]``: the replicas'
    multicast travels there), and their sum (``wire_bytes_per_s``) - and the roll-up
    latency (the last member's send to the master's stored result, ``/timings``); medians
    and the ratios replicated / passive.

* **inner** - kill -9 of an inner node (a non-root agent with children in the job's tree),
  the policies ``passive``, ``{"policy": "replicated", "replicas": 2}`` and ``{"policy":
  "budget", "replica_budget": 2}`` (the master's plan: the root and the inner node) in
  interleaved runs (``--runs`` each: 3 full, 1 quick), each on a fresh cluster of the six agents of
  :func:`agent.server.inner_scenarios.inner_cluster`, whose fixed node ids give the job's
  first tree an inner node with two children (``--agents`` does not apply):
  :func:`agent.server.inner_scenarios.kill_an_inner_node` - WordCount on 1 s epochs, the
  inner node killed once three epochs are stored (replicated: once a replica of its position
  holds it) and restarted six stored epochs later. Per policy the medians of the same
  figures as ``replicated``'s transparency, over the whole run: the distinct epochs with a
  version flagged lacking an origin other than the killed inner node (goal for replicated
  and budget: 0), those versions, the reader's violations and the end-of-run share final
  and exact; each run's JSON splits the versions by phase (before the kill, while down,
  after the restart).
* **mirror** - adaptive redundancy (Tran; ELF's mirroring) on twelve agents with fixed ids
  (:data:`agent.server.tree_layouts.TWELVE`: three inner nodes, one of them inside
  another's subtree): SIGSTOP bursts on random inner nodes - four bursts of 3 s, 8 s apart,
  each on an inner node drawn from the run's seed (the same victims for every policy of a
  round) (:func:`agent.server.mirror_scenarios.pause_an_inner_node`), WordCount on 1 s
  epochs with a 2 s target, under ``passive`` (none), ``static`` (``adaptive`` with
  ``mirror_ratio: 1``: every epoch mirrored) and ``adaptive`` (the controller sets the
  ratio; members mirror the epochs their parent is slow to acknowledge), interleaved
  (``--runs`` rounds: 3 full, 1 quick). Per run: each epoch's completion latency at the
  master (stored minus closed), its p99, the epochs over the target, the versions lacking an
  origin other than the paused nodes, the member snapshots the mirrors received, and the
  agents' CPU (cores) and data-plane bytes over the fault window; per policy the medians,
  and the static and adaptive policies' extra CPU, bytes and mirrored snapshots over
  passive's (goal: adaptive's p99 within 10 % of static's at <= 30 % of its extra CPU).
* **any** - kill -9 of one agent per run, whatever its role (master, inner node or leaf),
  on a fresh cluster of ``--agents`` (8) with ids as they come, under ``passive`` and
  ``replicated`` (r = 2) for the same victim (``--runs`` victims: 8 full, 3 quick - the
  master, an inner node when the tree has one, then random agents drawn from ``--seed``):
  :func:`agent.server.any_node_scenarios.kill_one_node` - the victim
  restarted six stored epochs later. Per run the victim's role and the epochs with a
  version lacking an origin other than the victim while it was down (goal for replicated:
  0) and over the whole run, the restart included (goal for replicated: 0 too); per
  policy and role the runs and those counts. A role the fresh cluster's tree lacks (its ids
  are new each time) is tried on up to two more clusters.
* **domain** - the same with ``--agents`` (16) in failure domains of two (``--domain
  rack-<i // 2>``), the victim killed and restarted **with its domain mate**: the worst
  correlated failure. Counted: versions lacking an origin outside the domain. Inner
  positions' replicas are placed in another domain; the master's are the next masters,
  whatever their domain (``docs/fault-tolerance.md``, limits). ``--fault partition``: every
  agent in its own network namespace (root only; skipped, saying why, elsewhere), the
  domain's links taken down and brought up again instead: alive but cut off.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import math
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import psutil
from loss_faults import medians_and_ratio
from steady_window import measure_window, steady_cluster

from agent.runtime.recovery.replica_plan import (
    covered_origins,
    domain_coverages,
    fidelity,
    plan_domain_aware,
    plan_greedy,
    plan_structure_aware,
    planned_origins,
    topk_quality,
)
from agent.server.any_node_scenarios import kill_one_node
from agent.server.chaos import EXACT, ChaosCluster, JobPlan, check
from agent.server.inner_scenarios import (
    INNER,
    NODE_IDS,
    check_design,
    inner_cluster,
    kill_an_inner_node,
)
from agent.server.mirror_scenarios import pause_an_inner_node
from agent.server.netns import NetnsLab, netns_available
from agent.server.replica_scenarios import kill_during_a_stall
from agent.server.tree_layouts import TWELVE
from agent.server.version_watch import VersionWatch, chaos_watch
from overlay.sim import SimNetwork, run, start_cluster
from srt.ids import app_id
from srt.sim import SimTreeNode

SECRET = b"redundancy-bench-secret-0123456789"
AGENTS = 1280
DOMAINS = 32
BUDGET_SHARES = (0.005, 0.01, 0.02, 0.05)
EPOCH_S = 2.0
TOP_K = 20
GLOBAL_KEYS, LOCAL_KEYS, ZIPF_S = 20_000, 50, 1.1


# ---- planner: budgeted replicas (PPA) ---------------------------------------------------------


def read_tree(nodes: list[SimTreeNode], tid: int) -> dict[int, int | None] | None:
    """node id → parent id, from every agent's view; None until every chain reaches one root."""
    parents: dict[int, int | None] = {}
    for n in nodes:
        view = n.trees.view(tid)
        if view is None or (view.parent is None and not view.is_root):
            return None
        parents[n.id] = None if view.is_root else view.parent.id  # type: ignore[union-attr]
    if sum(p is None for p in parents.values()) != 1:
        return None
    for v in parents:  # every chain ends at the root, without a loop
        cur, steps = v, 0
        while parents[cur] is not None and steps <= len(parents):
            cur = parents[cur]  # type: ignore[assignment]
            if cur not in parents:
                return None
            steps += 1
        if steps > len(parents):
            return None
    return parents


def build_trees(n_agents: int, seeds: list[int], overlay_seed: int) -> dict[str, Any]:
    """One simulated overlay of ``n_agents``; per seed one job whose tree spans every agent.
    Returns the agents' ids in address order and each seed's parents (or an error)."""

    async def main() -> dict[str, Any]:
        t0 = time.monotonic()
        net = SimNetwork(seed=overlay_seed)
        nodes = await start_cluster(net, n_agents, SECRET, batch=100, node_factory=SimTreeNode)
        await asyncio.sleep(10.0)  # virtual seconds: the routing tables converge
        joined = time.monotonic() - t0
        trees: dict[int, Any] = {}
        for seed in seeds:
            tid = app_id(f"redundancy-bench-{seed}", "sim")
            for i in range(0, len(nodes), 256):
                await asyncio.gather(
                    *(n.trees.join(tid, job=f"job-{seed}") for n in nodes[i : i + 256])
                )
            parents = None
            for _ in range(60):  # virtual seconds: joins confirmed by heartbeats
                await asyncio.sleep(1.0)
                if (parents := read_tree(nodes, tid)) is not None:
                    break
            trees[seed] = parents or {"error": "the tree did not span every agent in 60 s"}
        ids = [n.id for n in nodes]
        for n in nodes:  # overlay first: no graceful hand-offs between dying nodes
            await n.stop()
            await n.trees.stop()
        return {"ids": ids, "trees": trees, "overlay_s": joined, "wall_s": time.monotonic() - t0}

    return run(main())


def shape(parents: dict[int, int | None]) -> dict[str, Any]:
    """Depth, inner nodes and the root's fan-out of one tree."""
    depth: dict[int, int] = {}

    def depth_of(v: int) -> int:
        chain = []
        while v not in depth and parents[v] is not None:
            chain.append(v)
            v = parents[v]  # type: ignore[assignment]
        d = depth.setdefault(v, 0)
        for u in reversed(chain):
            d += 1
            depth[u] = d
        return depth[chain[0]] if chain else d

    for v in parents:
        depth_of(v)
    inner = set(parents.values()) - {None}
    root = next(v for v, p in parents.items() if p is None)
    return {
        "nodes": len(parents),
        "depth": max(depth.values()),
        "inner_nodes": len(inner),
        "root_children": sum(p == root for p in parents.values()),
    }


def workload(ids: list[int], seed: int) -> tuple[dict[int, float], dict[int, dict[int, int]]]:
    """Each agent's own rate (lognormal) and its key counts in one epoch (module docstring)."""
    rng = np.random.default_rng(seed)
    rates = rng.lognormal(np.log(100.0), 1.5, size=len(ids))
    p_global = 1.0 / np.arange(1, GLOBAL_KEYS + 1) ** ZIPF_S
    p_global /= p_global.sum()
    p_local = 1.0 / np.arange(1, LOCAL_KEYS + 1) ** ZIPF_S
    p_local /= p_local.sum()
    counts: dict[int, dict[int, int]] = {}
    for i, (v, rate) in enumerate(zip(ids, rates.tolist(), strict=True)):
        n = round(rate * EPOCH_S)
        n_local = rng.binomial(n, 0.5)
        g = rng.choice(GLOBAL_KEYS, size=n - n_local, p=p_global)
        loc = GLOBAL_KEYS + i * LOCAL_KEYS + rng.choice(LOCAL_KEYS, size=n_local, p=p_local)
        keys, c = np.unique(np.concatenate([g, loc]), return_counts=True)
        counts[v] = dict(zip(keys.tolist(), c.tolist(), strict=True))
    return dict(zip(ids, rates.tolist(), strict=True)), counts


PLANNERS: dict[str, Callable[..., frozenset[int]]] = {
    "structure_aware": lambda parents, rates, domains, budget: plan_structure_aware(
        parents, rates, budget
    ),
    "domain_aware": plan_domain_aware,
    "greedy": lambda parents, rates, domains, budget: plan_greedy(parents, rates, budget),
    "greedy_inner": lambda parents, rates, domains, budget: plan_greedy(
        parents, rates, budget, inner_only=True
    ),
    # structure-blind: the agents that read the most themselves (ties by id); what a rate
    # ranking does when a node's rate says nothing of its position (PPA's DAG case)
    "own_rate": lambda parents, rates, domains, budget: frozenset(
        sorted(parents, key=lambda v: (-rates[v], v))[:budget]
    ),
}


def connected(parents: dict[int, int | None], plan: frozenset[int]) -> bool:
    return all(parents[v] is None or parents[v] in plan for v in plan)


def evaluate(
    parents: dict[int, int | None],
    rates: dict[int, float],
    domains: dict[int, int],
    counts: dict[int, dict[int, int]],
    budgets: list[int],
) -> dict[str, Any]:
    """Every planner's figures at every budget, for one tree and workload."""
    everything = domain_coverages(parents, rates, domains, parents)
    out: dict[str, Any] = {"ceiling": {"domain_worst_coverage": min(everything.values())}}
    for budget in budgets:
        row: dict[str, Any] = {}
        for name, planner in PLANNERS.items():
            t0 = time.perf_counter()
            plan = planner(parents, rates, domains, budget)
            took = time.perf_counter() - t0
            per = domain_coverages(parents, rates, domains, plan)
            worst = min(per, key=per.__getitem__)
            row[name] = {
                "replicas": len(plan),
                "connected": connected(parents, plan),
                "plan_ms": round(took * 1000, 2),
                "domain_worst_coverage": per[worst],
                "domain_mean_coverage": statistics.fmean(per.values()),
                "domain_worst_topk": topk_quality(
                    counts, covered_origins(parents, domains, plan, worst), TOP_K
                ),
                "ppa_worst_fidelity": fidelity(parents, rates, plan),
                "ppa_worst_topk": topk_quality(counts, planned_origins(parents, plan), TOP_K),
            }
        out[str(budget)] = row
    return out


FIGURES = (
    "domain_worst_coverage",
    "domain_mean_coverage",
    "domain_worst_topk",
    "ppa_worst_fidelity",
    "ppa_worst_topk",
)


def ratio(a: float, b: float) -> float | None:
    if b > 0:
        return a / b
    return None if a > 0 else 1.0  # x / 0: unbounded (None); 0 / 0: equal


def summarize(per_seed: dict[int, dict[str, Any]], budgets: list[int]) -> dict[str, Any]:
    """Medians over seeds per budget and planner, and the per-seed ratios' medians."""
    out: dict[str, Any] = {}
    for budget in budgets:
        rows = [r[str(budget)] for r in per_seed.values()]
        entry: dict[str, Any] = {"replicas_budget": budget}
        for name in PLANNERS:
            entry[name] = {
                f: round(statistics.median(r[name][f] for r in rows), 4) for f in FIGURES
            }
            entry[name]["replicas"] = statistics.median(r[name]["replicas"] for r in rows)
            entry[name]["plan_ms"] = round(statistics.median(r[name]["plan_ms"] for r in rows), 1)
        for base in ("greedy", "greedy_inner", "domain_aware", "own_rate"):
            ratios: dict[str, Any] = {}
            for f in FIGURES:
                vals = [ratio(r["structure_aware"][f], r[base][f]) for r in rows]
                # x / 0 (the baseline covers nothing) ranks above every finite ratio
                ranked = sorted(math.inf if v is None else v for v in vals)
                mid = statistics.median(ranked) if ranked else None
                if mid is not None:
                    mid = "unbounded" if math.isinf(mid) else round(mid, 3)
                ratios[f] = mid
                finite = [v for v in vals if v is not None]
                ratios[f + "_max"] = round(max(finite), 3) if finite else None
                ratios[f + "_unbounded_seeds"] = len(vals) - len(finite)
            entry[f"ratio_structure_over_{base}"] = ratios
        out[f"R={budget}"] = entry
    ceilings = [r["ceiling"]["domain_worst_coverage"] for r in per_seed.values()]
    out["ceiling"] = {"domain_worst_coverage": round(statistics.median(ceilings), 4)}
    return out


def planner_section(quick: bool, seeds: list[int], agents: int = AGENTS) -> dict[str, Any]:
    """The planner figure (module docstring)."""
    budgets = [max(1, round(share * agents)) for share in BUDGET_SHARES]
    built = build_trees(agents, seeds, overlay_seed=seeds[0])
    ids = built["ids"]
    per_rack = agents // DOMAINS
    domains = {v: min(i // per_rack, DOMAINS - 1) for i, v in enumerate(ids)}
    per_seed: dict[int, dict[str, Any]] = {}
    shapes: dict[str, Any] = {}
    checks = {
        "plans_within_budget": True,
        "structure_aware_connected": True,
        "structure_aware_fidelity_ge_greedy": True,
        "domain_aware_worst_rack_ge_others": True,
    }
    for seed in seeds:
        parents = built["trees"][seed]
        if "error" in parents:
            shapes[str(seed)] = parents
            continue
        shapes[str(seed)] = shape(parents)
        rates, counts = workload(ids, seed)
        res = evaluate(parents, rates, domains, counts, budgets)
        per_seed[seed] = res
        for budget in budgets:
            row = res[str(budget)]
            checks["plans_within_budget"] &= all(row[p]["replicas"] <= budget for p in PLANNERS)
            checks["structure_aware_connected"] &= row["structure_aware"]["connected"]
            checks["structure_aware_fidelity_ge_greedy"] &= all(
                row["structure_aware"]["ppa_worst_fidelity"] >= row[p]["ppa_worst_fidelity"]
                for p in PLANNERS
            )
            checks["domain_aware_worst_rack_ge_others"] &= all(
                row["domain_aware"]["domain_worst_coverage"]
                >= row[p]["domain_worst_coverage"] - 1e-12
                for p in PLANNERS
            )
    return {
        "agents": agents,
        "domains": f"{DOMAINS} racks of {per_rack} agents, by address",
        "rates": "lognormal, median 100 records/s, sigma 1.5",
        "topk": {
            "k": TOP_K,
            "global_keys": GLOBAL_KEYS,
            "local_keys_per_agent": LOCAL_KEYS,
            "zipf_s": ZIPF_S,
            "epoch_s": EPOCH_S,
            "local_share": 0.5,
        },
        "budgets": budgets,
        "budget_shares": list(BUDGET_SHARES),
        "seeds": seeds,
        "sim": {
            "overlay_build_wall_s": round(built["overlay_s"], 1),
            "wall_s": round(built["wall_s"], 1),
        },
        "trees": shapes,
        "checks": checks,
        "medians": summarize(per_seed, budgets),
    }


# ---- replicated: replicated masters on a real cluster (Hwang) ---------------------------------

POLICIES: dict[str, Any] = {
    "passive": "passive",
    "replicated": {"policy": "replicated", "replicas": 2},
    # the inner section only: the root and one planned position (the inner node, by plan)
    "budget": {"policy": "budget", "replica_budget": 2},
}
RATE = 10.0  # lines/s per agent file (the scenario's writer too)


def scenario_run(
    policy: str,
    cluster: Callable[[Path], ChaosCluster],
    scenario: Callable[[ChaosCluster, VersionWatch, Any], Any],
    policies: dict[str, Any] = POLICIES,
) -> dict[str, Any]:
    """One run of ``scenario`` (its result's ``figures()``, or a dict) under
    ``policies[policy]`` on a fresh cluster made by ``cluster`` in a temporary directory."""
    out: dict[str, Any] = {"policy": policy}
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="redundancy-bench-kill-") as tmp:
        chaos = cluster(Path(tmp))
        out["agents"] = chaos.n
        watch: VersionWatch | None = None
        try:
            chaos.start(timeout=180)
            watch = chaos_watch(chaos, [])
            result = scenario(chaos, watch, policies[policy])
            out.update(result if isinstance(result, dict) else result.figures())
        except Exception as exc:  # the run's figures say what broke
            out["error"] = f"{type(exc).__name__}: {exc}"
        finally:
            if watch is not None:
                watch.stop()
            chaos.stop()
    out["wall_s"] = round(time.monotonic() - t0, 1)
    return out


def transparency_run(n: int, policy: str) -> dict[str, Any]:
    """One kill-during-a-stall run on a fresh cluster of ``n`` agents."""
    return scenario_run(policy, lambda tmp: ChaosCluster(n, tmp), kill_during_a_stall)


def exact_share(r: dict[str, Any]) -> float | None:
    end = r.get("epochs_final_exact_at_end") or {}
    return round(end["exact"] / end["of"], 4) if end.get("of") else None


def transparency_medians(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per policy the medians over its runs without an error (module docstring)."""
    out: dict[str, Any] = {}
    for policy in dict.fromkeys(r["policy"] for r in runs):
        ok = [r for r in runs if r["policy"] == policy and "error" not in r]
        figs = {
            "lacking_others_epochs": [r["lacking_others_epochs"] for r in ok],
            "lacking_others_versions": [r["lacking_others_versions"] for r in ok],
            "violations": [r["violations"] for r in ok],
            "final_exact_share_at_end": [x for r in ok if (x := exact_share(r)) is not None],
        }
        out[policy] = {"runs": len(ok)} | {
            k: statistics.median(v) if v else None for k, v in figs.items()
        }
        out[policy]["lacking_others_epochs_per_run"] = figs["lacking_others_epochs"]
    return out


def data_plane_bytes(chaos: ChaosCluster) -> tuple[int, int]:
    """(data-plane request bytes received, overlay bytes sent), summed over the agents."""
    dp = ov = 0
    for i in chaos.live():
        st = chaos.client(i).status()
        dp += int(st["data_plane"]["bytes_in"])
        ov += sum(int(b) for b in (st["overlay"].get("sent_bytes") or {}).values())
    return dp, ov


def steady_run(n: int, policy: str, seconds: float, timeout: float) -> dict[str, Any]:
    """WordCount without faults under ``policy``: CPU, bytes and roll-up over a window."""
    out: dict[str, Any] = {"policy": policy, "agents": n}
    try:
        with steady_cluster(n, "redundancy-bench-steady-", RATE) as (chaos, writer):
            start = math.floor(time.time()) + 2
            plan = JobPlan(
                "wc", "wordcount", start, settings=(("fault_tolerance", POLICIES[policy]),)
            )
            chaos.submit(plan)
            chaos.wait_stored("wc", start + 3, timeout=timeout)
            window = measure_window(chaos, "wc", seconds, timeout, data_plane_bytes)
            dp, ov = window.pop("counter_rates")
            out.update(window, data_plane_bytes_in_per_s=dp, overlay_bytes_sent_per_s=ov)
            out["wire_bytes_per_s"] = dp + ov
            writer.stop()
            reports = check(chaos, [plan], settle_timeout=timeout)
            epochs = [e for r in reports for e in r.epochs]
            out["final_exact"] = {
                "exact": sum(e.verdict == EXACT for e in epochs),
                "of": len(epochs),
            }
    except Exception as exc:
        out["error"] = f"{type(exc).__name__}: {exc}"
    return out


def cost_medians(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians per policy and the ratios replicated / passive (goal <= 1.5)."""
    return medians_and_ratio(
        runs,
        "policy",
        ("replicated", "passive"),
        ("replicated", "passive", "replicated_over_passive"),
        (
            ("cpu_cores_all_agents", "cpu_cores_all_agents", None),
            ("data_plane_bytes_in_per_s", "data_plane_bytes_in_per_s", None),
            ("overlay_bytes_sent_per_s", "overlay_bytes_sent_per_s", None),
            ("wire_bytes_per_s", "wire_bytes_per_s", None),
            ("rollup_p50_ms", "rollup_ms", "p50_ms"),
            ("rollup_p99_ms", "rollup_ms", "p99_ms"),
        ),
    )


def replicated_section(args: argparse.Namespace) -> dict[str, Any]:
    """Transparency and steady-state cost of replicated masters (module docstring)."""
    runs = args.runs or (1 if args.quick else 3)
    seconds = args.seconds or (10.0 if args.quick else 20.0)
    candidates = [args.agents] if args.agents else ([5] if args.quick else [16, 8])
    tried: list[dict[str, Any]] = []
    kills: list[dict[str, Any]] = []
    n = candidates[-1]
    for n in candidates:  # the first count whose replicated run completes
        probe = transparency_run(n, "replicated")
        print(json.dumps(probe, default=str), file=sys.stderr)
        if "error" not in probe or n == candidates[-1]:
            kills.append(probe)
            break
        tried.append({k: probe[k] for k in ("agents", "error", "wall_s")})
    order = ["passive", "replicated"] * runs
    for policy in order[: 2 * runs - len(kills)]:  # interleaved, the probe counted
        kills.append(transparency_run(n, policy))
        print(json.dumps(kills[-1], default=str), file=sys.stderr)
    steady: list[dict[str, Any]] = []
    for policy in order:
        steady.append(steady_run(n, policy, seconds, timeout=90.0))
        print(json.dumps(steady[-1], default=str), file=sys.stderr)
    return {
        "agents": n,
        "tried": tried,
        "runs_per_policy": runs,
        "policies": POLICIES,
        "transparency": {
            "goal": "replicated and budget (its plan: the root and the inner node): 0 epochs "
            "with versions lacking others, 0 violations",
            "medians": transparency_medians(kills),
            "runs": kills,
        },
        "steady_state_cost": {
            "goal": "replicated / passive <= 1.5",
            "lines_per_second_per_agent": RATE,
            "measured_s": seconds,
            "medians": cost_medians(steady),
            "runs": steady,
        },
    }


# ---- inner: kill -9 of an inner node (replicated inner positions) ----------------------------


def inner_section(args: argparse.Namespace) -> dict[str, Any]:
    """Transparency for an inner position under each policy (module docstring)."""
    runs = args.runs or (1 if args.quick else 3)
    results: list[dict[str, Any]] = []
    for policy in ["passive", "replicated", "budget"] * runs:
        results.append(scenario_run(policy, inner_cluster, kill_an_inner_node))
        print(json.dumps(results[-1], default=str), file=sys.stderr)
    return {
        "agents": len(NODE_IDS),
        "node_ids": list(NODE_IDS),
        "tree_children": {str(k): v for k, v in check_design().items() if v},
        "inner": INNER,
        "runs_per_policy": runs,
        "policies": POLICIES,
        "goal": "replicated and budget (its plan: the root and the inner node): 0 epochs "
        "with versions lacking others, 0 violations",
        "medians": transparency_medians(results),
        "runs": results,
    }


# ---- mirror: an inner node paused (adaptive redundancy) --------------------------------------

MIRROR_TARGET_MS = 2000.0
MIRROR_POLICIES: dict[str, Any] = {
    "passive": "passive",
    "static": {"policy": "adaptive", "latency_target_ms": MIRROR_TARGET_MS, "mirror_ratio": 1},
    "adaptive": {"policy": "adaptive", "latency_target_ms": MIRROR_TARGET_MS},
}


MIRROR_PAUSE = {"seconds": 3.0, "bursts": 4, "gap_s": 8.0}


def mirror_run(policy: str, seed: int) -> dict[str, Any]:
    """One run under ``policy`` on a fresh :data:`TWELVE` cluster: pause bursts on inner nodes
    drawn from ``seed``, with the agents' CPU and data-plane bytes over the fault window."""

    def paused(chaos: ChaosCluster, watch: VersionWatch, spec: Any) -> dict[str, Any]:
        marks: dict[str, tuple[float, float, int]] = {}
        mirrored: dict[str, int] = {}

        def on_window(mark: str) -> None:
            procs = [psutil.Process(pid) for pid in chaos.pids()]
            cpu = sum(p.cpu_times().user + p.cpu_times().system for p in procs)
            marks[mark] = (time.monotonic(), cpu, data_plane_bytes(chaos)[0])
            mirrored[mark] = mirrored_snapshots(chaos)

        run = pause_an_inner_node(
            chaos,
            watch,
            spec,
            MIRROR_TARGET_MS,
            MIRROR_PAUSE["seconds"],
            bursts=int(MIRROR_PAUSE["bursts"]),
            gap_s=MIRROR_PAUSE["gap_s"],
            on_window=on_window,
            layout=TWELVE,
            rng=random.Random(seed),
        )
        (t0, c0, b0), (t1, c1, b1) = marks["start"], marks["end"]
        return run.figures() | {
            "cpu_cores_all_agents": round((c1 - c0) / (t1 - t0), 3),
            "data_plane_bytes_per_s": round((b1 - b0) / (t1 - t0)),
            # the mirroring work itself, counted (CPU at this load is within the noise)
            "mirrored_snapshots": mirrored["end"] - mirrored["start"],
        }

    return scenario_run(policy, TWELVE.cluster, paused, MIRROR_POLICIES) | {"seed": seed}


def mirrored_snapshots(chaos: ChaosCluster) -> int:
    """Member snapshots the mirrors received so far, summed over the live agents."""
    total = 0
    for i in chaos.live():
        job = chaos.client(i).status()["jobs"].get("wc") or {}
        mirrors = (job.get("active_replicas") or {}).get("mirrors") or {}
        total += sum(int(m.get("received", 0)) for m in mirrors.values())
    return total


def mirror_section(args: argparse.Namespace) -> dict[str, Any]:
    """Adaptive redundancy under pause bursts (module docstring)."""
    runs = args.runs or (1 if args.quick else 3)
    results = []
    for seed in range(args.seed, args.seed + runs):
        for policy in MIRROR_POLICIES:
            results.append(mirror_run(policy, seed))
            print(json.dumps(results[-1], default=str), file=sys.stderr)
    medians: dict[str, Any] = {}
    for policy in MIRROR_POLICIES:
        ok = [r for r in results if r["policy"] == policy and "error" not in r]
        medians[policy] = {
            k: statistics.median(r[k] for r in ok) if ok else None
            for k in (
                "p99_ms",
                "over_target",
                "lacking_others_versions",
                "cpu_cores_all_agents",
                "data_plane_bytes_per_s",
                "mirrored_snapshots",
            )
        } | {"runs": len(ok)}
    base = medians["passive"].get("cpu_cores_all_agents")
    for policy in ("static", "adaptive"):
        cpu = medians[policy].get("cpu_cores_all_agents")
        medians[policy]["extra_cpu_cores"] = (
            None if cpu is None or base is None else round(cpu - base, 3)
        )
    static, adaptive = medians["static"], medians["adaptive"]
    ratios: dict[str, Any] = {}
    if static.get("p99_ms") and adaptive.get("p99_ms"):
        ratios["adaptive_p99_over_static"] = round(adaptive["p99_ms"] / static["p99_ms"], 3)
    if static.get("extra_cpu_cores") and adaptive.get("extra_cpu_cores") is not None:
        ratios["adaptive_extra_cpu_over_static"] = round(
            adaptive["extra_cpu_cores"] / static["extra_cpu_cores"], 3
        )
    # the wire: extra data-plane bytes over passive (CPU differences of a few thousandths of
    # a core, at this load, are within the machine's noise)
    wire = medians["passive"].get("data_plane_bytes_per_s")
    extra = {
        p: None if wire is None or medians[p].get("data_plane_bytes_per_s") is None
        else medians[p]["data_plane_bytes_per_s"] - wire
        for p in ("static", "adaptive")
    }  # fmt: skip
    if static.get("mirrored_snapshots") and adaptive.get("mirrored_snapshots") is not None:
        ratios["adaptive_mirrored_over_static"] = round(
            adaptive["mirrored_snapshots"] / static["mirrored_snapshots"], 3
        )
    if extra["static"] and extra["adaptive"] is not None:
        ratios["adaptive_extra_bytes_over_static"] = round(extra["adaptive"] / extra["static"], 3)
    return {
        "target_ms": MIRROR_TARGET_MS,
        "layout": {"agents": TWELVE.agents, "inner": list(TWELVE.inner)},
        "pauses": MIRROR_PAUSE,
        "runs_per_policy": runs,
        "policies": MIRROR_POLICIES,
        "goal": "adaptive p99 within 10 % of static's, at <= 30 % of its extra CPU",
        "medians": medians,
        "ratios": ratios,
        "runs": results,
    }


# ---- any: kill -9 of a random node -----------------------------------------------------------


def any_section(args: argparse.Namespace) -> dict[str, Any]:
    """kill -9 of one agent (any role) per run, passive and replicated interleaved (module
    docstring)."""
    return kill_runs(args, args.agents or 8, whole_domain=False)


def domain_section(args: argparse.Namespace) -> dict[str, Any]:
    """kill -9 (or a partition) of a whole failure domain (two agents) per run (module
    docstring)."""
    if args.fault == "partition":
        available, why = netns_available()
        if not available:
            return {"skipped": f"partitions need network namespaces: {why}"}
    return kill_runs(args, args.agents or 16, whole_domain=True, fault=args.fault)


def kill_runs(
    args: argparse.Namespace, n: int, whole_domain: bool, fault: str = "kill"
) -> dict[str, Any]:
    """The runs of ``any`` and ``domain``: per victim, passive then replicated, each on a
    fresh cluster (a role the fresh cluster's tree lacks - its ids are new - is tried on
    up to two more clusters); ``fault="partition"``: each cluster in network namespaces."""
    runs = args.runs or (3 if args.quick else 8)
    rng = random.Random(args.seed)
    # the master and an inner node (when the tree has one) first: random victims are
    # mostly leaves, which no policy can replicate
    victims: list[int | str] = ["master", "inner"][:runs]
    victims += [rng.randrange(n) for _ in range(max(0, runs - 2))]
    domains = [f"rack-{i // 2}" for i in range(n)] if whole_domain else None
    results = []
    for victim in victims:
        scenario = functools.partial(
            kill_one_node, victim=victim, whole_domain=whole_domain, fault=fault
        )
        for policy in ("passive", "replicated"):
            for _attempt in range(3):
                with NetnsLab(n) if fault == "partition" else contextlib.nullcontext() as lab:
                    result = scenario_run(
                        policy,
                        lambda tmp, lab=lab: ChaosCluster(n, tmp, domains=domains, netns=lab),
                        scenario,
                    )
                if not str(result.get("error", "")).startswith("LookupError"):
                    break
            results.append(result)
            print(json.dumps(results[-1], default=str), file=sys.stderr)
    by_role: dict[str, dict[str, Any]] = {}
    for r in results:
        if "error" in r:
            continue
        row = by_role.setdefault(
            f"{r['policy']}/{r['role']}", {"runs": 0, "lacking_down": [], "lacking_all": []}
        )
        row["runs"] += 1
        row["lacking_down"].append(r["lacking_others_epochs_down"])
        row["lacking_all"].append(r["lacking_others_epochs"])
    killed = "the victim's domain" if whole_domain else "the victim"
    return {
        "agents": n,
        "fault": fault,
        "domains": domains,
        "victims": victims,
        "goal": f"replicated: 0 epochs with versions lacking an origin outside {killed} "
        "while it is down (lacking_down) and over the run, the restart's included "
        "(lacking_all)",
        "by_policy_and_role": by_role,
        "runs": results,
    }


SECTIONS: dict[str, Callable[[argparse.Namespace], dict[str, Any]]] = {
    "planner": lambda args: planner_section(
        args.quick, list(range(args.seed, args.seed + (args.seeds or (3 if args.quick else 7))))
    ),
    "replicated": replicated_section,
    "inner": inner_section,
    "mirror": mirror_section,
    "any": any_section,
    "domain": domain_section,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer seeds and runs")
    parser.add_argument(
        "--only", action="append", choices=sorted(SECTIONS), help="run only this section"
    )
    parser.add_argument("--seed", type=int, default=1, help="the first seed")
    parser.add_argument("--seeds", type=int, help="how many seeds (planner: 3 quick, 7 full)")
    parser.add_argument("--agents", type=int, help="replicated: agent processes (16, else 8; 5)")
    parser.add_argument(
        "--runs", type=int, help="replicated, inner: runs per policy (3 full, 1 quick)"
    )
    parser.add_argument("--seconds", type=float, help="replicated: measured window (20; 10)")
    parser.add_argument(
        "--fault",
        choices=("kill", "partition"),
        default="kill",
        help="domain: kill -9 and restart, or a partition in network namespaces (root)",
    )
    args = parser.parse_args()
    out: dict[str, Any] = {
        "benchmark": "redundancy",
        "quick": args.quick,
        "python": sys.version.split()[0],
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
        "goals": {
            "planner": "structure-aware / greedy >= PPA's ratio (up to 10x) at R <= 5 %",
            "replicated": "r = 2, kill -9 of the master: 0 tentative / 0 missed epochs, exact;"
            " steady-state cost <= 1.5x passive",
            "inner": "r = 2, kill -9 of an inner node: no version lacks a live origin",
        },
        "sections": {},
    }
    for name in args.only or list(SECTIONS):
        t0 = time.monotonic()
        try:
            out["sections"][name] = SECTIONS[name](args)
        except Exception as exc:  # report what broke, keep the other sections' figures
            out["sections"][name] = {"error": f"{type(exc).__name__}: {exc}"}
        out["sections"][name]["section_wall_s"] = round(time.monotonic() - t0, 1)
    json.dump(out, sys.stdout, indent=2)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
