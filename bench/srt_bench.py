"""Shared-reducer-tree benchmark: epoch roll-up latency, multicast latency, root balance and
the idle cost of an agent. Prints one JSON document on stdout.

    python bench/srt_bench.py            # 64 and 256 logical agents, 1,280 simulated ids
    python bench/srt_bench.py --quick    # 64 logical agents, fewer epochs
    python bench/srt_bench.py --only idle   # one idle agent: RSS, CPU, heavy libraries mapped
    python bench/srt_bench.py --only idle --baseline REF   # and the agents of commit REF
    python bench/srt_bench.py --only per-agent --agents 64 [--baseline REF]   # CPU per agent
    python bench/srt_bench.py --only cluster --agents 256 --epoch-seconds 5   # processes only

* **Roll-up** (goal p99 < 100 ms, the paper's "under 100 ms"): N logical agents in this
  process, each a real agent (overlay over UDP, data plane over HTTP, real trees), run
  WordCount in batch mode; every agent ingests lines every 250 ms. Per epoch: the time from the
  *last* leaf's snapshot send to the epoch's result at the master. Baseline in the same run, on
  the same agents: a star (every agent posts its snapshot straight to the master over the same
  data plane; the master decodes and merges each, as a parent does), last send → all merged.
* **Multicast** (goal < 10 ms for 256 agents): the master's per-epoch "empty" multicast down
  the tree: send → the last agent's delivery, and send → the aggregated confirmation back at
  the master. Baseline: the master sends the same message directly to every agent
  (N requests from the root).
* **Balance** (paper: with 500 trees 99.5 % of agents root < 3 trees; 1,000: 99.5 % < 5;
  2,000: 95 % < 5): 1,280 agent ids (SHA-1 of simulated addresses) and 500 / 1,000 / 2,000 job
  ids; the root of a tree is the XOR-closest agent. What agents do: each job takes the less
  loaded of two candidate masters (``srt.trees.balance.two_choice_tree_ids``). Baselines: plain
  rendezvous on the appId (one choice) and uniformly random root placement.
* **Idle agent**: RSS and CPU of one ``elf agent`` process with no input (and one job: this
  agent is its master), and the heavy libraries it maps (``heavy_mapped``); **idle member**:
  two agents with one job and no input, the member that is not the master (it never writes
  the lake) and the master. ``--baseline REF`` runs the same two sections again with the
  agents of git commit ``REF`` (its tree extracted to a temporary directory), side by side.
* **Per-agent CPU** (``--only per-agent``; goals 0.02 % with no job, 0.05 % with one): N
  logical agents in this process, production timings, the process's CPU per agent with no
  job, then with one job and no input (10 s samples).
* **Cluster** (``--only cluster``, also part of the full run with ``--processes``): N logical
  agents in P real ``elf agent`` processes, WordCount with ``--epoch-seconds`` epochs (1 s by
  default; the paper's applications use 30 s) on a trickle of lines; besides the latencies,
  every measured epoch's result at the master against a Counter of the lines written
  (``exactness``: exact, flagged - tentative or partial, as the result says - or wrong, which
  must be 0).
* **Marginal agent** (goal ≤ 2 MB): one process hosting 1, then 9 logical agents, one job and
  no input; the RSS difference per extra agent.

The CPU of one multicast hop and one snapshot hop alone (pure compute and end to end, against
the issue's 40 µs / 150 µs goals) is measured by ``bench/hop_bench.py``.

All agents share this machine's 2 cores, so N in-process agents measure CPU contention as well
as protocol latency; the paper ran 1,280 agents on 60 twelve-core servers.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import platform
import random
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import psutil
from checkout import checkout
from latency import summary

from agent.config import InputConfig, load_config
from agent.jobs.schedule import EpochSchedule
from agent.runtime.host.agent import JOBS_TREE, Agent, spans_one_tree
from agent.server.cluster import LocalCluster
from agent.server.daemon import freeze_heap, start_agents, stop_agents
from cbt import CompressedBufferTree, Snapshot
from overlay import Tunables, node_id_for
from srt import SnapshotName, app_id, roots_per_agent, two_choice_tree_ids

SECRET = "srt-bench-secret-0123456789abcdef"


# ---- balance ----------------------------------------------------------------------------------


def balance(n_agents: int, tree_counts: list[int], seed: int) -> dict[str, Any]:
    rng = random.Random(seed)
    addresses = {
        (f"10.{rng.randrange(256)}.{rng.randrange(256)}.{i % 250 + 1}", 7400 + i)
        for i in range(n_agents)
    }
    node_ids = [node_id_for(h, p) for h, p in sorted(addresses)][:n_agents]
    out: dict[str, Any] = {"agents": len(node_ids)}
    for trees in tree_counts:
        tree_ids = [app_id(f"job-{i}", "bench") for i in range(trees)]
        closest = roots_per_agent(node_ids, tree_ids)
        two = roots_per_agent(node_ids, two_choice_tree_ids(node_ids, tree_ids, 2))
        counts = [0] * len(node_ids)
        for _ in tree_ids:
            counts[rng.randrange(len(node_ids))] += 1
        random_place = {
            f"pct_below_{k}": round(100 * sum(c < k for c in counts) / len(counts), 2)
            for k in (3, 5)
        }
        random_place["max"] = max(counts)
        out[str(trees)] = {
            "two_choice_placement": {"max": two["max"], **two["paper"]},
            "appid_rendezvous": {"max": closest["max"], **closest["paper"]},
            "random_placement_baseline": random_place,
        }
    return out


# ---- roll-up and multicast --------------------------------------------------------------------


async def settle(agents: list[Agent], timeout: float) -> float:
    """Wait until the jobs tree spans every agent with one root; returns seconds taken."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if spans_one_tree([a.jobs_tree() for a in agents]):
            return time.monotonic() - t0
        await asyncio.sleep(0.1)
    raise RuntimeError(f"the jobs tree did not settle in {timeout}s")


async def feed(agents: list[Agent], stop: asyncio.Event, rng: random.Random) -> None:
    """Every agent ingests a few lines every 250 ms with current timestamps."""
    while not stop.is_set():
        now = time.time()
        for agent in agents:
            lines = [
                json.dumps({"ts": now, "line": f"w{rng.randrange(500)} w{rng.randrange(500)}"})
                for _ in range(3)
            ]
            await agent.ingest("ingest", lines)
        await asyncio.sleep(0.25)


async def tree_vs_star(n: int, epochs: int, seed: int) -> dict[str, Any]:
    cfg = load_config(env={"ELF_SECRET": SECRET}, overrides={"logical_agents": n})
    # Production timings (overlay.Tunables defaults, 1 s tree heartbeats): the measured
    # latencies include the background maintenance traffic a real agent carries.
    cfg = dataclasses.replace(cfg, tunables=Tunables(), heartbeat_interval=1.0)
    t0 = time.monotonic()
    agents = await start_agents(cfg)
    started_s = time.monotonic() - t0
    try:
        settle_s = await settle(agents, 120)
        freeze_heap()  # as the daemon does once its agents are up
        cost = await multicast_cost(agents, 30)
        rng = random.Random(seed)
        info = await agents[0].submit(
            {"name": "bench", "creator": "bench", "job_class": "wordcount", "epoch_seconds": 1.0}
        )
        stop = asyncio.Event()
        feeder = asyncio.create_task(feed(agents, stop, rng))
        tid = app_id("bench", "bench")
        master = next(a for a in agents if (v := a.trees.view(tid)) and v.is_root)  # type: ignore[union-attr]
        runtime = master.runtimes["bench"]
        # Let the trees form and a few epochs pass, then measure `epochs` consecutive epochs.
        await wait_epochs(runtime, tid, 3, 60)
        first = runtime.store.latest(tid) + 1  # type: ignore[operator]
        await wait_epochs(runtime, tid, epochs, 30 + 3 * epochs, since=first)
        stop.set()
        await feeder
        rollup, multicast_delivery, multicast_confirm = [], [], []
        members = [a for a in agents if "bench" in a.runtimes]
        for epoch in range(first, first + epochs):
            sends = [
                a.runtimes["bench"].pipeline.sent_at.get((tid, epoch))
                for a in members
                if a is not master and not a.trees.view(tid).children  # type: ignore[union-attr]
            ]
            sends = [s for s in sends if s is not None]
            result = runtime.store.get(tid, epoch)
            if sends and result is not None:
                rollup.append(1000 * (result.completed_at - max(sends)))
        for stat in runtime.control.multicast_stats:
            if stat.get("epoch") is None or stat["epoch"] < first:
                continue
            received = [
                m["received_at"]
                for a in members
                for m in a.runtimes["bench"].control.multicasts
                if same_multicast(m, stat)
            ]
            if len(received) == len(members):
                multicast_delivery.append(1000 * (max(received) - stat["sent_at"]))
            multicast_confirm.append(stat["ms"])
        star = await star_baseline(agents, master, epochs)
        shape = tree_shape(agents, tid)
        joins = sum(a.trees.events["join_attempts"] for a in agents if a.trees)  # type: ignore[union-attr]
        return {
            "agents": n,
            "join_attempts_per_agent": round(joins / n, 2),
            "start_s": round(started_s, 2),
            "settle_s": round(settle_s, 2),
            "agents_reached_by_submit": info["agents_reached"],
            "tree": shape,
            "rollup_last_leaf_to_master": summary(rollup),
            "rollup_star_baseline": star["rollup"],
            "multicast_send_to_last_delivery": summary(multicast_delivery),
            "multicast_send_to_confirmation": summary(multicast_confirm),
            "multicast_star_baseline": star["multicast"],
            "multicast_cpu": cost,
        }
    finally:
        await stop_agents(agents, timeout=60)


async def multicast_cost(agents: list[Agent], count: int) -> dict[str, Any]:
    """CPU one multicast costs per agent (sender and receivers are all in this process):
    ``count`` no-op multicasts down the jobs tree, minus the idle CPU of the same wall time.
    ``floor_ms`` is what N agents need at least on this machine's cores even if the work
    spread perfectly over them: N x the cost / cores."""
    root = next(a for a in agents if (v := a.jobs_tree()) and v["is_root"])
    trees = root.trees
    assert trees is not None

    def cpu() -> float:
        t = os.times()
        return t.user + t.system

    c0, w0 = cpu(), time.monotonic()
    for _ in range(count):
        await trees.multicast(JOBS_TREE, {"op": "noop"}, timeout=5.0)
    busy_cpu, wall = cpu() - c0, time.monotonic() - w0
    c1 = cpu()
    await asyncio.sleep(wall)
    idle_cpu = cpu() - c1
    per_agent_us = 1e6 * max(0.0, busy_cpu - idle_cpu) / count / len(agents)
    cores = os.cpu_count() or 1
    return {
        "cpu_per_agent_us": round(per_agent_us, 1),
        "floor_ms": {
            str(n): round(n * per_agent_us / 1000 / cores, 1) for n in (64, 256, len(agents))
        },
        "cores": cores,
    }


async def wait_epochs(runtime: Any, tid: int, count: int, timeout: float, since: int = 0) -> None:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        epochs = [e for e in runtime.store.epochs(tid) if e >= since]
        if len(epochs) >= count:
            return
        await asyncio.sleep(0.1)
    raise RuntimeError(f"fewer than {count} epochs completed in {timeout}s")


def same_multicast(received: dict[str, Any], sent: dict[str, Any]) -> bool:
    """A message received is this one the master sent: the same send (a bundle carries
    several messages in one), kind and epoch."""
    return all(received.get(k) == sent.get(k) for k in ("sent_at", "kind", "epoch"))


def tree_shape(agents: list[Agent], tid: int) -> dict[str, int]:
    views = {a.overlay.id: a.trees.view(tid) for a in agents if a.trees and a.trees.view(tid)}
    depth, detached = 0, 0
    for node in views:
        hops, cur = 0, node
        while cur in views and not views[cur].is_root and hops <= len(views):
            parent = views[cur].parent
            if parent is None:  # re-joining at the moment of the snapshot
                detached += 1
                break
            cur = parent.id
            hops += 1
        depth = max(depth, hops)
    fan_in = max((len(v.children) for v in views.values()), default=0)
    return {"members": len(views), "depth": depth, "max_fan_in": fan_in, "rejoining": detached}


async def star_baseline(agents: list[Agent], master: Agent, epochs: int) -> dict[str, Any]:
    """Every agent posts an equivalent snapshot straight to the master (no tree); the master
    also sends a control message straight to every agent. Same agents, same data plane."""
    received: dict[int, float] = {}
    pending: dict[int, set[int]] = {}

    merged: dict[int, Snapshot] = {}

    async def on_star(request: Any) -> dict[str, Any]:
        name = SnapshotName.from_headers(request.headers)
        snap = Snapshot.from_bytes(await request.read())  # the same work a parent does
        merged[name.epoch] = merged[name.epoch].merge(snap) if name.epoch in merged else snap
        pending[name.epoch].discard(name.sender)
        if not pending[name.epoch]:
            received[name.epoch] = time.time()
        return {"result": "merged"}

    master.server.route("POST", "/bench/v1/star", on_star)
    tree = CompressedBufferTree("count")
    tree.insert_many([f"w{i}" for i in range(20)])
    payload = tree.flush().to_bytes()
    others = [a for a in agents if a is not master]
    rollup, multicast = [], []
    missed = 0
    for epoch in range(epochs):
        pending[epoch] = {a.overlay.id for a in others}
        sends: list[float] = []

        async def send(agent: Agent, epoch: int = epoch, sends: list[float] = sends) -> None:
            name = SnapshotName("star", 1, epoch, agent.overlay.id)
            sends.append(time.time())
            await agent.client.request(
                "POST", master.data_url, "/bench/v1/star", payload, name=name
            )

        await asyncio.gather(*(send(a) for a in others))
        rollup.append(1000 * (received[epoch] - max(sends)))
        t0 = time.time()
        replies = await asyncio.gather(
            *(master.overlay.request(a.overlay.info, "agent.where", {}) for a in others),
            return_exceptions=True,
        )
        multicast.append(1000 * (time.time() - t0))
        missed += sum(isinstance(r, Exception) for r in replies)
        await asyncio.sleep(0.2)
    return {"rollup": summary(rollup), "multicast": {**summary(multicast), "missed": missed}}


# ---- the same measurement across agent processes ---------------------------------------------


def cluster_run(
    n: int,
    processes: int,
    epochs: int,
    epoch_seconds: float = 1.0,
    settle_s: float = 180.0,
    trees: int = 1,
) -> dict[str, Any]:
    """N logical agents in ``processes`` real ``elf agent`` processes (both cores, as agents on
    separate hosts would have their own): each process tails one JSON-lines file that all its
    logical agents read; this process appends to the files and reads timings over the API.
    Every measured epoch's result at the master is checked against a Counter of the lines
    written (each counted once per logical agent of the process whose file holds it): it must
    be exact, or flagged (tentative or partial). With ``trees`` > 1, that many WordCount jobs
    (``bench``, ``bench-1``, ...) read the same files, each its own tree over every agent; the
    timings are the first job's and every job's epochs are checked. The agent processes' CPU
    (cores busy) and RSS are measured over the measured epochs."""
    from agent.client import ApiClient

    per = n // processes
    schedule = EpochSchedule(epoch_seconds)
    expected: dict[int, Counter[str]] = defaultdict(Counter)
    with tempfile.TemporaryDirectory(prefix="elf-srt-bench-") as tmp:
        files = [Path(tmp) / f"input-{i}.jsonl" for i in range(processes)]
        for f in files:
            f.touch()
        inputs = {i: {"lines": str(f)} for i, f in enumerate(files)}
        t0 = time.monotonic()
        local = LocalCluster(processes, Path(tmp) / "cluster", inputs=inputs, logical_agents=per)
        # a process starts its logical agents one after another, each joining the overlay
        local.start(timeout=max(settle_s, 0.75 * per))
        started_s = time.monotonic() - t0
        stop = threading.Event()
        try:
            # a slow answer is an overloaded process, which the figures say: wait for it
            clients = {
                a["node_id"]: ApiClient(a["api_url"], local.token, timeout=120.0)
                for a in local.agents()
            }
            first_client = next(iter(clients.values()))
            settled = poll(
                lambda: spans_one_tree([c.status().get("jobs_tree") for c in clients.values()]),
                settle_s,
            )
            spec = {"name": "bench", "creator": "bench", "job_class": "wordcount",
                    "epoch_seconds": epoch_seconds}  # fmt: skip
            info = submit_patiently(first_client, spec, 180.0)
            names = ["bench"] + [f"bench-{i}" for i in range(1, trees)]
            for name in names[1:]:
                submit_patiently(first_client, {**spec, "name": name}, 180.0)
            feeder = threading.Thread(
                target=feed_files, args=(files, stop, schedule, per, expected), daemon=True
            )
            feeder.start()
            tid = f"{app_id('bench', 'bench'):040x}"
            poll(lambda: master_of(first_client, clients, tid) is not None, 120)
            master = master_of(first_client, clients, tid)
            assert master is not None
            done = lambda k: len(completed(master, tid)) >= k  # noqa: E731
            poll(lambda: done(3), 60 + 3 * epoch_seconds * 3)
            first = max(completed(master, tid)) + 1
            cpu0 = process_cpu(local)
            poll(
                lambda: len([e for e in completed(master, tid) if e >= first]) >= epochs,
                60 + 3 * epochs * epoch_seconds,
            )
            cpu1 = process_cpu(local)
            stop.set()
            feeder.join()
            measured = range(first, first + epochs)
            exactness = check_exact(master, measured, expected, 60.0)
            others = []
            for name in names[1:]:
                found = master_patiently(first_client, clients, name, 120.0)
                others.append(check_exact(found, measured, expected, 60.0, name))
            timings = [c.timings("bench") for c in clients.values()]
            statuses = [c.status()["jobs"]["bench"] for c in clients.values()]
            views = [st["trees"] for st in statuses]
            upstream: Counter[str] = Counter()  # how the snapshots went up: datagram or HTTP
            for st in statuses:
                for sender in st.get("upstream", {}).values():
                    upstream.update(sender.get("counters", {}))
        finally:
            stop.set()
            local.stop(timeout=60)
    by_node = {t["node_id"]: t for t in timings}
    view_of = {t["node_id"]: v[0] for t, v in zip(timings, views, strict=True) if v}
    master_id = next(nid for nid, v in view_of.items() if v["is_root"] and v["tree_id"] == tid)
    done_at = {e: at for t_, e, at in by_node[master_id]["completed_at"] if t_ == tid}
    leaves = [nid for nid, v in view_of.items() if not v["children"] and nid != master_id]
    rollup = []
    for epoch in range(first, first + epochs):
        sends = [
            at
            for nid in leaves
            for t_, e, at in by_node[nid]["sent_at"]
            if t_ == tid and e == epoch
        ]
        if sends and epoch in done_at:
            rollup.append(1000 * (done_at[epoch] - max(sends)))
    delivery, confirm, partial = [], [], 0
    for stat in by_node[master_id]["multicasts_sent"]:
        if stat.get("epoch") is None or stat["epoch"] < first:
            continue
        received = [
            m["received_at"]
            for nid in view_of
            for m in by_node[nid]["multicasts_received"]
            if same_multicast(m, stat)
        ]
        if len(received) == len(view_of):
            delivery.append(1000 * (max(received) - stat["sent_at"]))
        else:
            partial += 1
        confirm.append(stat["ms"])
    busy = (cpu1["cpu_s"] - cpu0["cpu_s"]) / max(cpu1["at"] - cpu0["at"], 1e-9)
    return {
        "agents": n,
        "processes": processes,
        "trees": trees,
        "epoch_seconds": epoch_seconds,
        "agent_processes": {
            "cores_busy": round(busy, 2),
            "cpu_pct_per_agent": round(100 * busy / n, 3),
            "rss_mb": cpu1["rss_mb"],
            "rss_mb_per_agent": round(cpu1["rss_mb"] / n, 2),
        },
        "start_s": round(started_s, 2),
        "settle_s": round(settled, 2),
        "agents_reached_by_submit": info["agents_reached"],
        "tree": shape_of(view_of),
        "exactness": exactness,
        "exactness_other_trees": {
            k: sum(o[k] for o in others) for k in ("exact", "flagged", "unanswered", "wrong")
        },
        "rollup_last_leaf_to_master": summary(rollup),
        "multicast_send_to_last_delivery": summary(delivery),
        "multicast_send_to_confirmation": summary(confirm),
        # Why a summary can be empty: epochs the final master did not complete itself (the
        # role moved mid-run) or multicasts some agent never recorded (overload).
        "epochs_without_timing": epochs - len(rollup),
        "multicasts_not_seen_by_all": partial,
        # every agent's upstream senders summed: snapshots acknowledged, by datagram, and
        # datagrams unanswered (then posted), failed attempts (the whole run)
        "upstream": dict(upstream),
    }


def submit_patiently(client: Any, spec: dict[str, Any], timeout: float) -> dict[str, Any]:
    """Submit as an operator would: again while the jobs-tree root is too busy to answer in
    time (503: just after hundreds of agents joined); a 409 after such a retry means the
    earlier attempt went through (its answer was what timed out)."""
    from agent.client import ApiError

    deadline = time.monotonic() + timeout
    retried = False
    while True:
        try:
            return client.submit(spec)
        except ApiError as exc:
            if exc.status == 409 and retried:
                return {"agents_reached": None, "retried": True}
            if exc.status != 503 or time.monotonic() > deadline:
                raise
            retried = True
            time.sleep(5.0)  # the poll interval of another process's load


def process_cpu(local: Any) -> dict[str, float]:
    """CPU seconds (user + system) and RSS (MB) of the cluster's agent processes, now."""
    cpu, rss = 0.0, 0.0
    for proc in local.procs:
        p = psutil.Process(proc.process.pid)
        times = p.cpu_times()
        cpu += times.user + times.system
        rss += p.memory_info().rss / 2**20
    return {"cpu_s": cpu, "rss_mb": round(rss, 1), "at": time.monotonic()}


def master_patiently(asked: Any, clients: dict[str, Any], job: str, timeout: float) -> Any:
    """The client of ``job``'s master, once ``asked`` names one (polled up to ``timeout``)."""
    tid = f"{app_id(job, 'bench'):040x}"
    poll(lambda: master_of(asked, clients, tid, job) is not None, timeout)
    return master_of(asked, clients, tid, job)


def check_exact(
    master: Any,
    epochs: range,
    expected: dict[int, Counter[str]],
    timeout: float,
    job: str = "bench",
) -> dict[str, Any]:
    """Each epoch's result at the master against the reference, once final (or at
    ``timeout``): ``exact`` (final and equal), ``flagged`` (tentative or partial, as it
    says), ``unanswered`` (the master did not answer), ``wrong`` (final, unflagged and not
    equal: must be 0)."""
    from agent.client import ApiError

    deadline = time.monotonic() + timeout
    out: dict[str, Any] = {"exact": 0, "flagged": 0, "unanswered": 0, "wrong": 0}
    out["wrong_epochs"] = []
    for epoch in epochs:
        while True:
            try:
                res = master.results(job, epoch)
            except ApiError as exc:  # the role moved, or the master is too busy: not judged
                res = {"state": f"unavailable ({exc.status})"}
            if res.get("state") == "final" or time.monotonic() > deadline:
                break
            time.sleep(0.5)  # the poll interval of another process's state
        got = Counter({k: v for k, v in res.get("rows", [])})
        if str(res.get("state")).startswith("unavailable"):
            out["unanswered"] += 1
        elif res.get("state") != "final":
            out["flagged"] += 1
        elif got == expected[epoch]:
            out["exact"] += 1
        else:
            out["wrong"] += 1
            out["wrong_epochs"].append(epoch)
    return out


def poll(predicate: Any, timeout: float) -> float:
    """Wait (polling other processes) until ``predicate()``; returns the seconds it took."""
    t0 = time.monotonic()
    while not predicate():
        if time.monotonic() - t0 > timeout:
            raise RuntimeError(f"condition not met in {timeout}s")
        time.sleep(0.2)
    return time.monotonic() - t0


def master_of(asked: Any, clients: dict[str, Any], tid: str, job: str = "bench") -> Any:
    """The client of the agent that ``asked`` (one status call) names as the tree's root, if
    that agent says it is the root itself."""
    trees = asked.status()["jobs"].get(job, {}).get("trees", [])
    view = next((t for t in trees if t["tree_id"] == tid), None)
    if view is None:
        return None
    root = (view.get("root") or {}).get("id") if not view["is_root"] else None
    client = asked if view["is_root"] else clients.get(root or "")
    if client is None:
        return None
    trees = client.status()["jobs"].get(job, {}).get("trees", [])
    return client if any(t["tree_id"] == tid and t["is_root"] for t in trees) else None


def completed(master: Any, tid: str) -> list[int]:
    return [e for t_, e, _ in master.timings("bench")["completed_at"] if t_ == tid]


def feed_files(
    files: list[Path],
    stop: threading.Event,
    schedule: EpochSchedule,
    readers: int,
    expected: dict[int, Counter[str]],
) -> None:
    """Append a few lines to every process's input every 250 ms, with current timestamps;
    ``expected[epoch]`` counts their words ``readers`` times (every logical agent of a process
    reads its file)."""
    rng = random.Random(1)
    while not stop.wait(0.25):
        now = time.time()
        epoch = schedule.epoch_of(now)
        for f in files:
            with f.open("a") as out:
                for _ in range(3):
                    words = [f"w{rng.randrange(500)}", f"w{rng.randrange(500)}"]
                    out.write(json.dumps({"ts": now, "line": " ".join(words)}) + "\n")
                    for w in words:
                        expected[epoch][w] += readers


def shape_of(views: dict[str, dict[str, Any]]) -> dict[str, int]:
    depth = 0
    for node in views:
        hops, cur = 0, node
        while cur in views and not views[cur]["is_root"] and hops <= len(views):
            parent = views[cur]["parent"]
            if parent is None:
                break
            cur = parent["id"]
            hops += 1
        depth = max(depth, hops)
    fan_in = max((len(v["children"]) for v in views.values()), default=0)
    return {"members": len(views), "depth": depth, "max_fan_in": fan_in}


# ---- idle agent ---------------------------------------------------------------------------------


def idle_agent(seconds: float, code: Path | None = None) -> dict[str, Any]:
    """One agent process (its code from ``code``, a checkout; default this one): idle, then
    with one job and no input."""
    with tempfile.TemporaryDirectory(prefix="elf-idle-") as tmp:
        cluster = LocalCluster(1, Path(tmp), cwd=code).start()
        try:
            proc = psutil.Process(cluster.procs[0].process.pid)
            time.sleep(2.0)  # let start-up work finish before sampling
            idle = sample(proc, seconds)
            cluster.client(0).submit({"name": "idle", "creator": "bench", "job_class": "wordcount"})
            time.sleep(2.0)
            with_job = sample(proc, seconds)
        finally:
            cluster.stop()
    return {"no_jobs": idle, "one_job_no_input": with_job}


def idle_member(seconds: float, code: Path | None = None) -> dict[str, Any]:
    """Two agents, one job with no input: the member that is not the job's master (it never
    writes the lake) and the master, sampled one after the other."""
    with tempfile.TemporaryDirectory(prefix="elf-idle-member-") as tmp:
        cluster = LocalCluster(2, Path(tmp), cwd=code).start()
        try:
            cluster.client(0).submit({"name": "idle", "creator": "bench", "job_class": "wordcount"})

            def roles() -> list[list[str]]:
                out = []
                for i in range(2):
                    job = cluster.client(i).status().get("jobs", {}).get("idle") or {}
                    out.append(list(job.get("roles") or []))
                return out

            deadline = time.monotonic() + 30
            seen = roles()
            while sum("master" in r for r in seen) != 1 and time.monotonic() < deadline:
                time.sleep(0.2)  # polling the agents' status until one is the master
                seen = roles()
            if sum("master" in r for r in seen) != 1:
                return {"error": f"no single master after 30 s: roles {seen}"}
            master = next(i for i, r in enumerate(seen) if "master" in r)
            time.sleep(2.0)  # let the job's start-up work finish before sampling
            procs = [psutil.Process(p.process.pid) for p in cluster.procs]
            member = sample(procs[1 - master], seconds)
            return {"member": member, "master": sample(procs[master], seconds)}
        finally:
            cluster.stop()


def marginal_agent(seconds: float, code: Path | None = None, more: int = 8) -> dict[str, Any]:
    """RSS of one agent process hosting 1, then ``1 + more`` logical agents, each process
    running one job with no input (one of its agents is the job's master): what an extra
    logical agent costs (issue goal: at most 2 MB)."""
    rss = {}
    for n in (1, 1 + more):
        with tempfile.TemporaryDirectory(prefix="elf-marginal-") as tmp:
            cluster = LocalCluster(1, Path(tmp), logical_agents=n, cwd=code).start()
            try:
                client = cluster.client(0)
                client.submit({"name": "idle", "creator": "bench", "job_class": "wordcount"})
                poll(lambda c=client: "idle" in c.status().get("jobs", {}), 30)
                time.sleep(2.0)  # the job's start-up work and first epochs
                rss[n] = sample(psutil.Process(cluster.procs[0].process.pid), seconds)["rss_mb"]
            finally:
                cluster.stop()
    return {
        "rss_mb_by_logical_agents": rss,
        "marginal_mb_per_agent": round((rss[1 + more] - rss[1]) / more, 2),
        "goal_mb": 2.0,
    }


async def per_agent_idle(
    n: int, seconds: float, warm: float = 0.0, epoch_seconds: float = 1.0
) -> dict[str, Any]:
    """``n`` logical agents in this process (production timings): the process's CPU per agent
    with no job, then with one job (of ``epoch_seconds`` epochs) and no input, each over
    ``seconds`` once settled and ``warm`` seconds more (the overlay's upkeep slows down while
    nothing changes). Each agent tails a log file (one, empty: a webserver's quiet log) that
    the job reads."""
    quiet_log = Path(tempfile.mkdtemp(prefix="elf-per-agent-")) / "access.jsonl"
    quiet_log.touch()
    cfg = load_config(env={"ELF_SECRET": SECRET}, overrides={"logical_agents": n})
    cfg = dataclasses.replace(
        cfg,
        tunables=Tunables(),
        heartbeat_interval=1.0,
        inputs=(InputConfig(name="lines", path=str(quiet_log)),),
    )
    agents = await start_agents(cfg)

    sent: dict[str, dict[str, float]] = {}

    def datagrams() -> Counter[str]:
        total: Counter[str] = Counter()
        for a in agents:
            total.update(a.overlay.stats()["sent_msgs"])
        return total

    async def cpu_percent(phase: str) -> float:
        t0, w0, d0 = os.times(), time.monotonic(), datagrams()
        await asyncio.sleep(seconds)
        t1, d1 = os.times(), datagrams()
        wall = time.monotonic() - w0
        # overlay datagrams sent per agent per second, by kind (a reply is its request's
        # kind with ".reply"): the upkeep counted, not timed
        sent[phase] = {k: round(v / n / wall, 3) for k, v in sorted((d1 - d0).items()) if v}
        sent[phase]["all"] = round(sum((d1 - d0).values()) / n / wall, 3)
        return 100 * (t1.user + t1.system - t0.user - t0.system) / wall

    try:
        await settle(agents, 120)
        freeze_heap()
        await asyncio.sleep(warm)
        no_job = await cpu_percent("no_job")
        job = {"name": "idle", "creator": "bench", "job_class": "wordcount"}
        await agents[0].submit({**job, "epoch_seconds": epoch_seconds})
        await asyncio.sleep(max(5.0, 2 * epoch_seconds))  # the trees form, first epochs pass
        one_job = await cpu_percent("one_job")
    finally:
        await stop_agents(agents, timeout=60)
    return {
        "agents": n,
        "warm_s": warm,
        "epoch_seconds": epoch_seconds,
        "cpu_percent_per_agent": {"no_job": round(no_job / n, 3), "one_job": round(one_job / n, 3)},
        "goal_percent": {"no_job": 0.02, "one_job": 0.05},
        "datagrams_sent_per_agent_per_s": sent,
    }


def per_agent_idle_of(
    code: Path, n: int, seconds: float, warm: float = 0.0, epoch_seconds: float = 1.0
) -> dict[str, Any]:
    """:func:`per_agent_idle` with the agents of checkout ``code`` (this script, run with it
    first on the import path)."""
    env = {**os.environ, "PYTHONPATH": str(code)}
    args = [sys.executable, __file__, "--only", "per-agent", "--agents", str(n)]
    args += ["--seconds", str(seconds), "--warm", str(warm), "--epoch-seconds", str(epoch_seconds)]
    done = subprocess.run(args, env=env, capture_output=True, text=True, check=True)
    return json.loads(done.stdout)["per_agent_idle"]


def sample(proc: psutil.Process, seconds: float) -> dict[str, float]:
    cpu0 = proc.cpu_times()
    t0 = time.monotonic()
    time.sleep(seconds)
    cpu1 = proc.cpu_times()
    used = (cpu1.user - cpu0.user) + (cpu1.system - cpu0.system)
    maps = [m.path for m in proc.memory_maps(grouped=True)]
    return {
        "rss_mb": round(proc.memory_info().rss / 2**20, 1),
        "cpu_percent_of_one_core": round(100 * used / (time.monotonic() - t0), 2),
        # heavy libraries the process has loaded (they should load where used)
        "heavy_mapped": sorted(
            h for h in ("pyarrow", "pandas", "pyspark") if any(f"/{h}/" in p for p in maps)
        ),
    }


# ---- main -----------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="64 agents, fewer epochs")
    parser.add_argument("--agents", type=int, nargs="*", help="logical agent counts")
    parser.add_argument("--epochs", type=int, help="measured epochs per run")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--processes",
        type=int,
        default=0,
        help="also run each size across this many agent processes (0: cpu count)",
    )
    parser.add_argument(
        "--only",
        choices=["idle", "per-agent", "cluster"],
        help="idle: only the idle agent's RSS, CPU and heavy maps; per-agent: only the CPU per "
        "agent of N logical agents in this process (--agents, default 64), no job and one job; "
        "cluster: only the multi-process run of each --agents size (exactness checked)",
    )
    parser.add_argument(
        "--epoch-seconds",
        type=float,
        default=1.0,
        help="the job's epoch length in the cluster and per-agent runs (the paper's "
        "applications use 30 s)",
    )
    parser.add_argument(
        "--trees",
        type=int,
        default=1,
        help="cluster: jobs (each its own tree over every agent) running at once",
    )
    parser.add_argument("--seconds", type=float, default=10.0, help="per-agent: sample length")
    parser.add_argument(
        "--warm", type=float, default=0.0, help="per-agent: seconds to wait once settled"
    )
    parser.add_argument(
        "--baseline",
        metavar="REF",
        help="with --only idle or per-agent: also run the agents of this git commit "
        "(e.g. a release), side by side",
    )
    args = parser.parse_args()
    sizes = args.agents or ([64] if args.quick else [64, 256])
    epochs = args.epochs or (5 if args.quick else 20)
    out: dict[str, Any] = {
        "benchmark": "srt",
        "quick": args.quick,
        "python": sys.version.split()[0],
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
        "goals": {"rollup_p99_ms": 100, "multicast_ms_256_agents": 10},
    }
    if args.only == "per-agent":
        n = (args.agents or [64])[0]
        timing = (args.seconds, args.warm, args.epoch_seconds)
        out["per_agent_idle"] = asyncio.run(per_agent_idle(n, *timing))
        if args.baseline:
            with checkout(args.baseline) as code:
                out["baseline"] = {
                    "ref": args.baseline,
                    "per_agent_idle": per_agent_idle_of(code, n, *timing),
                }
        json.dump(out, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return
    if args.only == "idle":
        seconds = 3.0 if args.quick else 10.0
        out["idle_agent"] = idle_agent(seconds)
        out["idle_member"] = idle_member(seconds)
        out["marginal_agent"] = marginal_agent(seconds)
        if args.baseline:
            with checkout(args.baseline) as code:
                out["baseline"] = {
                    "ref": args.baseline,
                    "idle_agent": idle_agent(seconds, code),
                    "idle_member": idle_member(seconds, code),
                    "marginal_agent": marginal_agent(seconds, code),
                }
        json.dump(out, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return
    processes = args.processes or os.cpu_count() or 2
    if args.only == "cluster":
        out["runs"] = []
        for n in sizes:
            try:
                out["runs"].append(
                    cluster_run(n, processes, epochs, args.epoch_seconds, trees=args.trees)
                )
            except Exception as exc:  # report what broke, keep the other sizes' figures
                out["runs"].append(
                    {"agents": n, "processes": processes, "error": f"{type(exc).__name__}: {exc}"}
                )
        json.dump(out, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return
    out["balance"] = balance(1280, [500, 1000, 2000], args.seed)
    out["idle_agent"] = idle_agent(3.0 if args.quick else 10.0)
    out["idle_member"] = idle_member(3.0 if args.quick else 10.0)
    out["marginal_agent"] = marginal_agent(3.0 if args.quick else 10.0)
    out["runs"] = []
    for n in sizes:
        try:
            out["runs"].append(asyncio.run(tree_vs_star(n, epochs, args.seed)))
        except Exception as exc:  # report what broke, keep the other sizes' figures
            out["runs"].append({"agents": n, "error": f"{type(exc).__name__}: {exc}"})
        if processes > 1:
            try:
                out["runs"].append(cluster_run(n, processes, epochs, args.epoch_seconds))
            except Exception as exc:
                out["runs"].append(
                    {"agents": n, "processes": processes, "error": f"{type(exc).__name__}: {exc}"}
                )
    json.dump(out, sys.stdout, indent=2)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
