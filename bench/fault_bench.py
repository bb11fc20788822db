"""Fault benchmark (issue 12): crash-exact results under kill -9, restarts and partitions, and
what fault tolerance costs when nothing fails. Prints one JSON document on stdout.

    python bench/fault_bench.py            # 16 agent processes
    python bench/fault_bench.py --quick    # 6 agent processes, a shorter run

Both runs use the chaos harness (``agent/server/chaos.py``): one ``elf agent`` process per
agent, each tailing its own JSON-lines file that a writer keeps appending to (timestamps =
now); WordCount (``wc``) and an ELF QL job (``SELECT page, count(*) ... GROUP BY page``,
``ql``) from the start, a second WordCount (``wc_mid``) submitted mid-run with the current
epoch as its start epoch; one shared lake.

* **Chaos run**: kill -9 of a leaf, then its restart (same command, data directory and ports);
  kill -9 of an inner node (when the tree has one) and its restart; kill -9 of ``wc``'s
  master and, later, its restart; a leaf and another agent killed together and restarted
  together; where root and ``ip netns`` work, a partition (a leaf's link down for three
  epochs, then up; the whole cluster then runs in network namespaces). Fault timing follows
  the cluster's own progress (stored epochs). Afterwards (writer stopped, results settled)
  every epoch of every job is classified against a Counter over the lines written: final &
  exact, final & WRONG (silently wrong), tentative (flagged), missing — from the results API
  and from the lake.
  Figures: % of epochs final & exact; master kill → the next epoch the new master stores
  (seconds, ``next_stored_s`` by the new master's clock; ``api_shows_next_s`` when the
  results API first shows it) and the epochs lost (missing between the last epoch stored
  before the kill and that one; ``history_lost``: earlier epochs no longer answered); agent
  kill → its missed epochs final and exact again (seconds after its restart; null: not
  within the timeout).
* **Steady state**: the same workload without faults on a fresh cluster. CPU of all agent
  processes (psutil) and the roll-up latency p50/p99 (per epoch: the last leaf's send → the
  master's stored result, from ``/timings``), with standby replication (and the commits it
  gates) off and on, interleaved: ``commit_standby_on_vs_off`` gives medians and ratios
  (``on_over_off``; the goal is at most 1.10).

* **Every version a reader saw** (issue "Final means final"): in the chaos run and the loss
  run, :class:`agent.server.version_watch.VersionWatch` reads the lake and polls the results
  API every 0.5 s from the submits on; every version it saw is judged against the per-agent
  reference (:mod:`agent.server.version_check`). ``final_means_final`` gives
  ``visible_unflagged_wrong`` (count, longest seconds visible), ``visible_flag_dishonest``,
  ``two_row_sets``, ``epochs_final_exact_at_end``, ``never_repaired``,
  ``killed_for_good_unflagged_undercounted``, ``crash_to_first_flagged_s`` (per fault) and
  ``restart_to_final_exact_s`` (per restart); ``every_version`` the details and examples.

Figures are printed whether or not the guarantee holds; nothing is hidden: every final and
wrong epoch is listed with what it lacked. The machine's cores are shared by all agents.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import platform
import random
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from loss_faults import (
    checkpoint_cost_run,
    cost_ratios,
    loss_run,
    medians_and_ratio,
)
from steady_window import measure_window, steady_cluster

from agent.server.chaos import (
    EXACT,
    MISSING,
    VERDICTS,
    WRONG,
    ChaosCluster,
    JobPlan,
    JobReport,
    LogWriter,
    check,
    classify,
    fetch_result,
    read_records,
    reference,
    tracebacks,
    wait_until,
)
from agent.server.netns import NetnsLab, netns_available
from agent.server.version_check import headline
from agent.server.version_watch import VersionWatch, chaos_figures, chaos_watch

LEAD = "wc"  # the job whose progress times the faults


def now_epoch() -> int:
    return math.floor(time.time())


def final_again_seconds(
    chaos: ChaosCluster, plan: JobPlan, epochs: range, restarted_at: float, timeout: float
) -> float | None:
    """Seconds from a restart until every epoch in ``epochs`` is final and exact (None: not
    within ``timeout``)."""

    def exact() -> bool:
        want = reference(plan, read_records(chaos.paths))
        return all(
            classify(plan, e, want.get(e, Counter()), fetch_result(chaos, plan.name, e)).verdict
            == EXACT
            for e in epochs
        )

    try:
        wait_until(exact, timeout, f"{plan.name} epochs {epochs} final again", step=0.1)
    except TimeoutError:
        return None
    return round(time.time() - restarted_at, 3)


def kill_and_restart(
    chaos: ChaosCluster, plan: JobPlan, indices: list[int], roles: list[str], timeout: float
) -> dict[str, Any]:
    """Kill ``indices`` together, restart them two stored epochs later, and time how long
    their missed epochs take to be final and exact again."""
    kill_epoch = now_epoch()
    events = [chaos.kill(i, LEAD, r) for i, r in zip(indices, roles, strict=True)]
    before = events[0].stored_before or plan.start_epoch
    chaos.wait_stored(LEAD, before + 2, timeout=timeout)
    restarted_epoch = now_epoch()
    for i in indices:
        chaos.restart(i, LEAD)
    restarted_at = chaos.events[-1].at
    missed = range(kill_epoch, restarted_epoch)
    return {
        "agents": indices,
        "roles": roles,
        "down_s": round(restarted_at - events[0].at, 3),
        "missed_epochs": [missed.start, missed.stop - 1],
        "final_again_s_after_restart": final_again_seconds(
            chaos, plan, missed, restarted_at, timeout
        ),
    }


def master_kill(chaos: ChaosCluster, plan: JobPlan, timeout: float) -> dict[str, Any]:
    """Kill ``plan``'s master; time the next epoch the new master stores: by the new
    master's own clock (``completed_at`` in its ``/timings``: when the epoch was stored and
    handed to replication and the lake) and as the results API shows it (polled)."""
    master = chaos.pick(plan.name, "master")
    ev = chaos.kill(master, plan.name, "master")
    before = ev.stored_before if ev.stored_before is not None else plan.start_epoch
    out: dict[str, Any] = {"agent": master, "stored_before": before}
    try:
        chaos.wait_stored(plan.name, before + 1, timeout=timeout)
        out["api_shows_next_s"] = round(time.time() - ev.at, 3)
        out["next_stored"] = chaos.stored(plan.name)
    except TimeoutError:
        out["api_shows_next_s"] = None
        out["next_stored"] = None
    out["next_stored_s"] = next_stored_at_master(chaos, plan.name, before, ev.at)
    return out


def next_stored_at_master(
    chaos: ChaosCluster, job: str, before: int, killed_at: float
) -> float | None:
    """Seconds from the kill to the first epoch after ``before`` that a live master of the
    job's first tree stored after the kill (None: none found)."""
    tid = chaos.any_client().status()["jobs"][job]["tree_ids"][0]
    stored = [
        at
        for t in chaos.timings(job)
        for t_, e, at in t["completed_at"]
        if t_ == tid and e > before and at > killed_at
    ]
    return round(min(stored) - killed_at, 3) if stored else None


def chaos_run(
    n: int,
    rate: float,
    timeout: float,
    use_netns: bool,
    seed: int,
    keep: bool = False,
    log_level: str = "WARNING",
) -> dict[str, Any]:
    rng = random.Random(seed)
    out: dict[str, Any] = {"agents": n, "lines_per_second_per_agent": rate, "faults": []}
    available, why = netns_available() if use_netns else (False, "disabled by --no-netns")
    out["netns"] = {"used": available, "why_not": why or None}
    where = (
        contextlib.nullcontext(tempfile.mkdtemp(prefix="fault-bench-"))
        if keep
        else tempfile.TemporaryDirectory(prefix="fault-bench-")
    )
    with where as tmp:
        if keep:
            out["workdir"] = tmp  # agent logs (stderr.log), files, lake: kept for a post-mortem
        lab = NetnsLab(n).open() if available else None
        chaos = ChaosCluster(n, Path(tmp), netns=lab, log_level=log_level)
        writer: LogWriter | None = None
        watch: VersionWatch | None = None
        try:
            t0 = time.time()
            chaos.start(timeout=180)
            out["start_s"] = round(time.time() - t0, 1)
            writer = LogWriter(chaos.paths, rate=rate, seed=seed).start()
            start = now_epoch() + 2
            plans = [JobPlan("wc", "wordcount", start), JobPlan("ql", "ql", start)]
            for plan in plans:
                chaos.submit(plan)
            watch = chaos_watch(chaos, plans)  # every version a reader sees, from here on
            chaos.wait_stored(LEAD, start + 2, timeout=timeout)
            mid = JobPlan("wc_mid", "wordcount", now_epoch())
            chaos.submit(mid)
            watch.watch(mid.name, mid.start_epoch)
            plans.append(mid)
            faults = out["faults"]
            leaf = chaos.pick(LEAD, "leaf", rng)
            result = kill_and_restart(chaos, plans[0], [leaf], ["leaf"], timeout)
            faults.append({"fault": "leaf kill -9 + restart", **result})
            chaos.wait_stored(LEAD, (chaos.stored(LEAD) or start) + 2, timeout=timeout)
            try:
                inner = chaos.pick(LEAD, "inner", rng)
            except LookupError:
                faults.append({"fault": "inner kill -9 + restart", "skipped": "no inner node"})
            else:
                result = kill_and_restart(chaos, plans[0], [inner], ["inner"], timeout)
                faults.append({"fault": "inner kill -9 + restart", **result})
            chaos.wait_stored(LEAD, (chaos.stored(LEAD) or start) + 2, timeout=timeout)
            mk = master_kill(chaos, plans[0], timeout)
            faults.append({"fault": "master kill -9", **mk})
            chaos.wait_stored(LEAD, (chaos.stored(LEAD) or start) + 2, timeout=timeout)
            chaos.restart(mk["agent"], LEAD)
            faults.append({"fault": "old master restarted", "agent": mk["agent"]})
            chaos.wait_stored(LEAD, (chaos.stored(LEAD) or start) + 2, timeout=timeout)
            roles = chaos.roles(LEAD)
            pair = rng.sample(sorted(i for i, r in roles.items() if r != "master"), 2)
            result = kill_and_restart(chaos, plans[0], pair, [roles[i] for i in pair], timeout)
            faults.append({"fault": "two agents kill -9 together + restart", **result})
            if lab is not None:
                chaos.wait_stored(LEAD, (chaos.stored(LEAD) or start) + 2, timeout=timeout)
                victim = chaos.pick(LEAD, "leaf", rng)
                ev = chaos.partition(victim, LEAD, "leaf")
                chaos.wait_stored(LEAD, (ev.stored_before or start) + 3, timeout=timeout)
                chaos.heal(victim, LEAD)
                down_s = round(chaos.events[-1].at - ev.at, 3)
                faults.append(
                    {"fault": "partition (link down, up)", "agent": victim, "down_s": down_s}
                )
            chaos.wait_stored(LEAD, (chaos.stored(LEAD) or start) + 3, timeout=timeout)
            writer.stop()
            reports = check(chaos, plans, settle_timeout=timeout)
            figs = chaos_figures(watch, chaos, plans, reports)
            out["final_means_final"] = headline(figs)
            out["every_version"] = figs
            out["jobs"] = [r.to_dict() for r in reports]
            out.update(totals(reports))
            before, nxt = mk["stored_before"], mk["next_stored"] or mk["stored_before"]
            wc = {e.epoch: e.verdict for e in reports[0].epochs}
            mk["epochs_lost"] = sum(wc.get(e) == MISSING for e in range(before + 1, nxt + 1))
            mk["history_lost"] = sum(v == MISSING for e, v in wc.items() if e <= before)
            out["master_kill"] = mk
            out["tracebacks"] = {str(i): t[:2000] for i, t in tracebacks(chaos).items()}
        except Exception as exc:  # report what broke with the figures gathered so far
            out["error"] = f"{type(exc).__name__}: {exc}"
        finally:
            if writer is not None:
                writer.stop()
            if watch is not None:
                watch.stop()
            chaos.stop()
            if lab is not None:
                lab.close()
    return out


def totals(reports: list[JobReport]) -> dict[str, Any]:
    api: Counter[str] = Counter()
    lake: Counter[str] = Counter()
    for r in reports:
        api.update(r.counts())
        if r.lake is not None:
            lake.update(r.counts(r.lake))
    n = sum(api.values())
    return {
        "epochs_checked": n,
        "pct_final_exact": round(100 * api[EXACT] / n, 2) if n else None,
        "api_verdicts": {v: api.get(v, 0) for v in VERDICTS},
        "lake_verdicts": {v: lake.get(v, 0) for v in VERDICTS},
        "final_and_wrong": api[WRONG],
        "lake_final_and_wrong": lake[WRONG],
    }


def steady_run(
    n: int, rate: float, seconds: float, timeout: float, standby: bool = True
) -> dict[str, Any]:
    out: dict[str, Any] = {"agents": n, "lines_per_second_per_agent": rate, "standby": standby}
    config = f"[runtime]\nstandby_replication = {'true' if standby else 'false'}\n"
    try:
        with steady_cluster(n, "fault-bench-steady-", rate, config) as (chaos, writer):
            start = now_epoch() + 2
            plans = [JobPlan("wc", "wordcount", start), JobPlan("ql", "ql", start)]
            for plan in plans:
                chaos.submit(plan)
            chaos.wait_stored(LEAD, start + 2, timeout=timeout)
            window = measure_window(chaos, LEAD, seconds, timeout)
            out.update({k: v for k, v in window.items() if k != "counter_rates"})
            writer.stop()
            reports = check(chaos, plans, settle_timeout=timeout)
            out.update(totals(reports))
    except Exception as exc:
        out["error"] = f"{type(exc).__name__}: {exc}"
    return out


def on_vs_off(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Standby replication (and the commits it gates) on vs off, from interleaved runs:
    medians of CPU and roll-up latency, and their ratios (on / off)."""
    return medians_and_ratio(
        runs,
        "standby",
        (True, False),
        ("on", "off", "on_over_off"),
        (
            ("cpu_cores", "cpu_cores_all_agents", None),
            ("rollup_p50_ms", "rollup_ms", "p50_ms"),
            ("rollup_p99_ms", "rollup_ms", "p99_ms"),
        ),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="6 agents, a shorter run")
    parser.add_argument("--agents", type=int, help="agent processes (default 16; quick 6)")
    parser.add_argument("--rate", type=float, default=10.0, help="lines/s per agent file")
    parser.add_argument("--seconds", type=float, help="steady-state measured seconds")
    parser.add_argument("--timeout", type=float, default=60.0, help="per wait, seconds")
    parser.add_argument("--no-netns", action="store_true", help="never use network namespaces")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--keep", action="store_true", help="keep the chaos run's directory (logs, lake)"
    )
    parser.add_argument("--agent-log-level", default="WARNING", help="the agents' --log-level")
    parser.add_argument(
        "--slow-seconds", type=float, help="how long the slow agent is capped (60; quick 15)"
    )
    parser.add_argument(
        "--stall-epochs", type=int, default=3, help="how long the straggler is stopped (epochs)"
    )
    parser.add_argument(
        "--parts",
        default="crash,loss,standby,checkpoints",
        help="comma-separated: crash (issue 12's chaos run), loss (permanent loss, straggler, "
        "slow agent), standby (standby on/off cost), checkpoints (checkpoint replicas cost)",
    )
    args = parser.parse_args()
    parts = set(args.parts.split(","))
    n = args.agents or (6 if args.quick else 16)
    seconds = args.seconds or (10.0 if args.quick else 30.0)
    out: dict[str, Any] = {
        "benchmark": "fault",
        "quick": args.quick,
        "python": sys.version.split()[0],
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
        "goals": {
            "pct_final_exact": 100,
            "final_and_wrong": 0,
            "master_kill_next_stored_s": 1.5,
            "master_kill_epochs_lost": 0,
            "agent_final_again_s_after_restart": 2.0,
            "steady_state_cost_pct": 10,
            "permanent_loss_recovered_s": 2.0,
            "final_over_tentative": 10,
            "straggler_leap_ms": 50,
            "coverage_and_accuracy_error_pts": 5,
            "visible_unflagged_wrong": 0,
            "visible_flag_dishonest": 0,
            "two_row_sets": 0,
            "never_repaired": 0,
            "killed_for_good_unflagged_undercounted": 0,
        },
    }
    if "loss" in parts:
        out["permanent_loss_and_stragglers"] = loss_run(
            n,
            args.rate,
            args.timeout,
            args.slow_seconds or (15.0 if args.quick else 60.0),
            args.seed,
            args.agent_log_level,
            args.stall_epochs,
        )
    if "checkpoints" in parts:
        ckpt = [
            checkpoint_cost_run(n, args.rate, seconds, args.timeout, k)
            for _ in range(1 if args.quick else 2)
            for k in (0, 2)
        ]
        out["checkpoint_runs"] = ckpt
        out["checkpoints_k2_vs_k0"] = cost_ratios(ckpt)
    if "crash" in parts:
        out["chaos"] = chaos_run(
            n,
            args.rate,
            args.timeout,
            not args.no_netns,
            args.seed,
            keep=args.keep,
            log_level=args.agent_log_level,
        )
    if "standby" not in parts:
        json.dump(out, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return
    # interleaved, so drift of a shared machine falls on both sides
    runs = [
        steady_run(n, args.rate, seconds, args.timeout, standby=on)
        for _ in range(1 if args.quick else 2)
        for on in (False, True)
    ]
    out["steady_state"] = runs
    out["commit_standby_on_vs_off"] = on_vs_off(runs)
    json.dump(out, sys.stdout, indent=2)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
