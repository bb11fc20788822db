"""Runtime job-change benchmark: from the change request to the moment every agent applied it.
Prints one JSON document on stdout.

    python bench/change_bench.py            # 64 logical agents, 20 changes of each kind
    python bench/change_bench.py --quick    # 32 logical agents, 5 of each

N real agents (overlay over UDP, data plane and API over HTTP) run in this process; an ELF QL
job runs on every one of them. Each change goes to a non-master agent's API layer
(``Agent.change_job``), which routes it to the job's master; the master records it in the job
table and multicasts it down the tree; every agent applies it between records. Measured per
change: request → the last agent's apply (each agent stamps the time it applied it; one
process, one clock), and request → the reply (the master's confirmation that all applied).
Kinds (paper: notify < 10 ms, filter < 210 ms, functions < 600 ms; goal: all < 50 ms with 64
agents):

* ``notify`` — "empty windows now" (control only);
* ``filter`` — a new WHERE clause;
* ``functions`` — new SELECT/GROUP BY expressions (new map functions, same aggregate);
* ``aggregate`` — a new aggregate (``count(*)`` ↔ ``min(ts)``: new map and reduce functions),
  scheduled from an epoch ahead; one at a time (each waits until the previous one took
  effect), so ``repeats // 5`` of them (at least 2). Measured like the others: request → the
  last agent applied the new spec (the new aggregate then starts at the chosen epoch).

``--epoch-seconds`` sets the job's epoch length (default 1 s, the worst case: every epoch
boundary is a burst of snapshot work on the same cores that carry the change).

With ``--processes P`` (default: the number of cores) the same changes run again with the N
agents spread over P real agent processes (as agents on separate hosts would be), timed
through each agent's ``/api/v1/jobs/{name}/timings``.

The first change of each run (a notify) warms code paths and connections: it is reported as
``first_change_ms`` and left out of the percentiles.

Baseline in the same run, on the same agents: what a system without runtime changes does —
stop the job and submit the changed one, timed until every agent runs the new job.

All agents share this machine's 2 cores (the paper ran on 60 twelve-core servers).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import platform
import random
import sys
import time
from typing import Any

from latency import pct, summary

from agent.config import load_config
from agent.jobs.ql_job import spec_from_query
from agent.jobs.spec import JobSpec
from agent.runtime.host.agent import Agent, spans_one_tree
from agent.server.daemon import freeze_heap, start_agents, stop_agents
from overlay import Tunables

SECRET = "change-bench-secret-0123456789abcdef"
QUERY = "SELECT line, count(*) AS n FROM ingest WHERE line LIKE '{p}%' GROUP BY line"
WARM_UP = {"empty": True}
_PHASE = random.Random(7)
AGGREGATES = (
    "SELECT line, min(ts) AS n FROM ingest GROUP BY line",
    "SELECT line, count(*) AS n FROM ingest GROUP BY line",
)
FUNCTIONS = (
    "SELECT lower(line) AS line, count(*) AS n FROM ingest GROUP BY lower(line)",
    "SELECT substr(line, 1, 2) AS line, count(*) AS n FROM ingest GROUP BY substr(line, 1, 2)",
)


async def wait(predicate: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        await asyncio.sleep(0.005)
    raise RuntimeError(f"timed out waiting for {what}")


def last_apply(agents: list[Agent], job: str, version: int | None, since: float) -> float:
    """The latest time any agent applied ``version`` (None: the latest change message)."""
    stamps = []
    for agent in agents:
        runtime = agent.runtimes[job]
        if version is not None:
            stamps.append(runtime.changes.changes_applied[version])
        else:
            got = [
                m["received_at"]
                for m in runtime.control.multicasts
                if m.get("kind") == "change" and m["received_at"] >= since
            ]
            stamps.append(max(got))
    return max(stamps)


async def one_change(agents: list[Agent], asker: Agent, body: dict[str, Any]) -> dict[str, float]:
    t0 = time.time()
    reply = await asker.change_job("q", body)
    t1 = time.time()
    if reply["agents_reached"] != len(agents):
        raise RuntimeError(f"change reached {reply['agents_reached']} of {len(agents)} agents")
    version = reply["version"] if "query" in body else None
    applied = last_apply(agents, "q", version, t0)
    return {"applied_ms": 1000 * (applied - t0), "reply_ms": 1000 * (t1 - t0)}


async def resubmit(agents: list[Agent], asker: Agent, query: str) -> float:
    """Baseline: stop the job and submit the changed one; until every agent runs it."""
    t0 = time.time()
    await asker.stop_job("q")
    await wait(lambda: all("q" not in a.runtimes for a in agents), 30, "the job to stop")
    await asker.submit(spec_from_query("q", "bench", query))
    await wait(
        lambda: all("q" in a.runtimes and a.runtimes["q"].worker is not None for a in agents),
        30,
        "every agent to run the new job",
    )
    view_ok = lambda: all(  # noqa: E731
        (v := a.trees.view(a.runtimes["q"].tree_list[0])) is not None and v.state != "joining"
        for a in agents
        if a.trees is not None
    )
    await wait(view_ok, 30, "every agent to join the new job's tree")
    return 1000 * (time.time() - t0)


async def run(
    n: int, repeats: int, baseline_repeats: int, epoch_seconds: float = 1.0
) -> dict[str, Any]:
    cfg = load_config(env={"ELF_SECRET": SECRET}, overrides={"logical_agents": n})
    cfg = dataclasses.replace(cfg, tunables=Tunables(), heartbeat_interval=1.0)
    agents = await start_agents(cfg)
    try:
        await wait(lambda: spans_one_tree([a.jobs_tree() for a in agents]), 120, "settling")
        await agents[0].submit(
            spec_from_query("q", "bench", QUERY.format(p="a"), epoch_seconds=epoch_seconds)
        )
        tid_of = lambda a: a.runtimes["q"].tree_list[0]  # noqa: E731
        await wait(
            lambda: (
                all("q" in a.runtimes for a in agents)
                and all(a.trees.view(tid_of(a)).state != "joining" for a in agents)
            ),  # type: ignore[union-attr]
            60,
            "the job's tree",
        )
        freeze_heap()  # as the daemon does once its agents are up
        master = next(a for a in agents if a.runtimes["q"].is_master)
        asker = next(a for a in agents if a is not master)
        out: dict[str, Any] = {"agents": n}
        # The first change warms code paths and connections: reported, not in the percentiles.
        out["first_change_ms"] = round((await one_change(agents, asker, WARM_UP))["applied_ms"], 2)
        kinds = change_kinds(repeats)
        for kind, bodies in kinds.items():
            applied, replies = [], []
            for body in bodies:
                master = next(a for a in agents if a.runtimes["q"].is_master)
                await asyncio.sleep(settle_seconds(master.runtimes["q"].spec.to_dict()) + 0.05)
                got = await one_change(agents, asker, body)
                applied.append(got["applied_ms"])
                replies.append(got["reply_ms"])
            out[kind] = {
                "request_to_last_apply": summary(applied),
                "request_to_reply": summary(replies),
            }
        base = [
            await resubmit(agents, asker, QUERY.format(p="ab"[i % 2]))
            for i in range(baseline_repeats)
        ]
        out["baseline_stop_and_resubmit"] = summary(base)
        best = max(out[k]["request_to_last_apply"]["p99_ms"] for k in kinds)
        out["slowest_kind_p99_vs_baseline_p50"] = round(best / pct(base, 0.5), 4)
        return out
    finally:
        await stop_agents(agents, timeout=60)


def cluster_run(n: int, processes: int, repeats: int, epoch_seconds: float = 1.0) -> dict[str, Any]:
    """The same changes with the N agents spread over ``processes`` real ``elf agent``
    processes (both cores, as agents on separate hosts would have); timings over the API."""
    import tempfile
    from pathlib import Path

    from agent.client import ApiClient
    from agent.server.cluster import LocalCluster

    with tempfile.TemporaryDirectory(prefix="elf-change-bench-") as tmp:
        local = LocalCluster(processes, Path(tmp), logical_agents=n // processes)
        local.start(timeout=180)
        try:
            clients = [ApiClient(a["api_url"], local.token) for a in local.agents()]
            sync_wait(lambda: spans_one_tree([c.status().get("jobs_tree") for c in clients]), 180)
            clients[0].submit(
                spec_from_query("q", "bench", QUERY.format(p="a"), epoch_seconds=epoch_seconds)
            )

            def on_tree() -> bool:
                for c in clients:
                    trees = c.status()["jobs"].get("q", {}).get("trees", [])
                    if not trees or trees[0]["state"] == "joining":
                        return False
                return True

            sync_wait(on_tree, 120)
            roles = [c.status()["jobs"]["q"]["roles"] for c in clients]
            asker = next(c for c, r in zip(clients, roles, strict=True) if "master" not in r)
            out: dict[str, Any] = {"agents": n, "processes": processes}
            first = cluster_change(clients, asker, WARM_UP, n)
            out["first_change_ms"] = round(first["applied_ms"], 2)
            for kind, bodies in change_kinds(repeats).items():
                got = []
                for body in bodies:
                    spec = next(j for j in asker.jobs() if j["name"] == "q")["spec"]
                    time.sleep(settle_seconds(spec) + 0.05)
                    got.append(cluster_change(clients, asker, body, n))
                out[kind] = {
                    "request_to_last_apply": summary([g["applied_ms"] for g in got]),
                    "request_to_reply": summary([g["reply_ms"] for g in got]),
                }
            return out
        finally:
            local.stop(timeout=60)


def cluster_change(
    clients: list[Any], asker: Any, body: dict[str, Any], n: int
) -> dict[str, float]:
    """One change through ``asker``'s HTTP API; the last apply read from every agent's timings."""
    t0 = time.time()
    reply = asker.change("q", body)
    reply_ms = 1000 * (time.time() - t0)
    if reply["agents_reached"] != n:
        raise RuntimeError(f"change reached {reply['agents_reached']} of {n}")
    stamps = []
    for c in clients:
        t = c.timings("q")
        if "query" in body:
            got = [at for v, at in t["changes_applied"] if v == reply["version"]]
        else:
            got = [
                m["received_at"]
                for m in t["multicasts_received"]
                if m["kind"] == "change" and m["received_at"] >= t0
            ]
        stamps.append(min(got))
    return {"applied_ms": 1000 * (max(stamps) - t0), "reply_ms": reply_ms}


def change_kinds(repeats: int) -> dict[str, list[dict[str, Any]]]:
    return {
        "notify": [{"empty": True}] * repeats,
        "filter": [{"query": QUERY.format(p="ab"[i % 2])} for i in range(1, repeats + 1)],
        "functions": [{"query": FUNCTIONS[i % 2]} for i in range(repeats)],
        # new reduce functions: scheduled, and one at a time (see settle_seconds)
        "aggregate": [{"query": AGGREGATES[i % 2]} for i in range(max(2, repeats // 5))],
    }


def settle_seconds(spec_dict: dict[str, Any]) -> float:
    """Seconds until a change of aggregate in ``spec_dict`` has taken effect everywhere (the
    master refuses the next one before: agents hold one previous aggregate)."""
    spec = JobSpec.from_dict(spec_dict)
    if spec.aggregator_since is None:
        return 0.0
    start = spec.schedule.start(spec.aggregator_since)
    wait = start + spec.allowed_lateness + spec.schedule.current_seconds - time.time()
    # ...plus a random phase: waking at the settle time itself would put every such change
    # right on an epoch boundary, in the burst of snapshot work (the other kinds land at
    # arbitrary phases)
    return max(0.0, wait) + _PHASE.uniform(0.0, spec.schedule.current_seconds)


def sync_wait(predicate: Any, timeout: float) -> None:
    """Poll other processes' state until ``predicate()``."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise RuntimeError(f"condition not met in {timeout}s")
        time.sleep(0.2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="32 agents, 5 changes per kind")
    parser.add_argument("--agents", type=int, help="logical agents (default 64; quick 32)")
    parser.add_argument("--repeats", type=int, help="changes per kind")
    parser.add_argument(
        "--epoch-seconds", type=float, default=1.0, help="the job's epoch length (default 1)"
    )
    parser.add_argument(
        "--processes",
        type=int,
        default=0,
        help="also spread the agents over P processes (0: cores)",
    )
    args = parser.parse_args()
    processes = args.processes or os.cpu_count() or 2
    n = args.agents or (32 if args.quick else 64)
    repeats = args.repeats or (5 if args.quick else 20)
    out = {
        "benchmark": "runtime job changes",
        "quick": args.quick,
        "python": sys.version.split()[0],
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
        "goal_ms": 50,
        "paper_ms": {"notify": 10, "filter": 210, "functions": 600},
        "epoch_seconds": args.epoch_seconds,
        "run": asyncio.run(run(n, repeats, 2 if args.quick else 3, args.epoch_seconds)),
    }
    if processes > 1:
        out["run_across_processes"] = cluster_run(n, processes, repeats, args.epoch_seconds)
    json.dump(out, sys.stdout, indent=2)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
