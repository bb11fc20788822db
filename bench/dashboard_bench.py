"""Dashboard benchmark: what one cluster picture costs the agent that serves it.
Prints one JSON document on stdout.

    python bench/dashboard_bench.py            # 64 logical agents, 30 refreshes
    python bench/dashboard_bench.py --quick    # 16 logical agents, 10 refreshes

N real agents (overlay over UDP, data plane and API over HTTP) run in this process with an
ELF QL job on every one of them, fed a few lines per agent and epoch. The serving agent
builds pictures back to back (``ClusterPicture.snapshot(max_age=0)``: every refresh asks
every agent for its summary over the data plane). Measured: the refresh time, the encoded
size of a picture, of the feed's ``cluster`` event and of one ``job`` event (what a browser
receives at most once per epoch), a summary's size, and the serving agent's event-loop lag
during the refreshes (``LoopLag``: how late the loop woke up — what other work on the agent
felt). The same again with ``max_agents`` capped at a quarter of N shows the bound at work.

All agents share this machine's cores; the figures are noisy on a shared machine.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import platform
import sys
import time
from typing import Any

import orjson
from latency import summary

from agent.config import load_config
from agent.jobs.ql_job import spec_from_query
from agent.runtime.host.agent import Agent, spans_one_tree
from agent.runtime.ops.dashboard.cluster import ClusterPicture
from agent.runtime.ops.dashboard.routes import DashboardRoutes
from agent.server.daemon import start_agents, stop_agents
from overlay import Tunables

SECRET = "dashboard-bench-secret-0123456789abcdef"
QUERY = "SELECT line, count(*) AS n FROM ingest GROUP BY line"


async def wait(predicate: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        await asyncio.sleep(0.05)
    raise RuntimeError(f"timed out waiting for {what}")


async def feed(agents: list[Agent], stop: asyncio.Event) -> None:
    while not stop.is_set():
        now = time.time()
        for a in agents:
            lines = [json.dumps({"ts": now, "line": w}).encode() for w in ("a", "b", "a")]
            await a.ingest("ingest", lines)
        await asyncio.sleep(0.5)


async def measure(picture: ClusterPicture, serving: Agent, refreshes: int) -> dict[str, Any]:
    times = []
    lag_before = serving.loop_lag.stats()["max_ms"]
    snap: dict[str, Any] = {}
    for _ in range(refreshes):
        t0 = time.perf_counter()
        snap = await picture.snapshot(max_age=0)
        times.append((time.perf_counter() - t0) * 1000)
    frames = DashboardRoutes._frames(snap, {})
    cluster_event = frames.split(b"\n\n")[0]
    jobs = snap["jobs"]
    job_event = orjson.dumps(next(iter(jobs.values()))) if jobs else b""
    return {
        "asked": snap["asked"],
        "alive": sum(1 for a in snap["agents"] if a["status"] == "alive"),
        "known": snap["known"],
        "refresh": summary(times),
        "picture_bytes": len(orjson.dumps(snap, default=str)),
        "cluster_event_bytes": len(cluster_event),
        "job_event_bytes": len(job_event),
        "tree_nodes": sum(len(j["nodes"]) for j in jobs.values()),
        "loop_lag_max_ms_during": serving.loop_lag.stats()["recent_max_ms"],
        "loop_lag_max_ms_before": lag_before,
    }


async def run(n: int, refreshes: int) -> dict[str, Any]:
    cfg = load_config(env={"ELF_SECRET": SECRET}, overrides={"logical_agents": n})
    cfg = dataclasses.replace(cfg, tunables=Tunables(), heartbeat_interval=1.0)
    agents = await start_agents(cfg)
    stop = asyncio.Event()
    feeder: asyncio.Task[None] | None = None
    try:
        await wait(lambda: spans_one_tree([a.jobs_tree() for a in agents]), 120, "settling")
        await agents[0].submit(spec_from_query("q", "bench", QUERY, epoch_seconds=1.0))
        await wait(lambda: all("q" in a.runtimes for a in agents), 60, "the job everywhere")
        feeder = asyncio.create_task(feed(agents, stop))
        serving = agents[-1]
        await wait(
            lambda: any(r for a in agents for r in a.runtimes["q"].store.trees()), 60, "epochs"
        )
        await asyncio.sleep(3)  # a few epochs in every master's store
        summary_bytes = len(orjson.dumps(serving.dashboard.summary(), default=str))
        full = await measure(serving.dashboard, serving, refreshes)
        capped = await measure(
            ClusterPicture(serving.views, max_agents=max(2, n // 4)), serving, refreshes
        )
        return {"agents": n, "summary_bytes": summary_bytes, "all": full, "capped": capped}
    finally:
        stop.set()
        if feeder is not None:
            await feeder
        await stop_agents(agents, timeout=60)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="16 agents, 10 refreshes")
    parser.add_argument("--agents", type=int, help="logical agents (default 64; quick 16)")
    parser.add_argument("--refreshes", type=int, help="pictures built (default 30; quick 10)")
    args = parser.parse_args()
    n = args.agents or (16 if args.quick else 64)
    refreshes = args.refreshes or (10 if args.quick else 30)
    out = {
        "benchmark": "dashboard cluster picture",
        "quick": args.quick,
        "python": sys.version.split()[0],
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
        "run": asyncio.run(run(n, refreshes)),
    }
    json.dump(out, sys.stdout, indent=2)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
