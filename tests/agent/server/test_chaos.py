"""Chaos on a real cluster (``agent.server.chaos``): five agent processes tailing files that
are still being written, WordCount on them, and faults timed by the cluster's own progress:
kill -9 of a leaf then its restart (same command, data directory and ports), a second job
submitted mid-run on the same input, kill -9 of the job's master and its restart; where root,
a partition (the link of an agent in its own network namespace taken down and up).

What the product promises today and must never break: **exact or flagged** — every epoch the
results API (and the lake) calls final (``tentative=false``) equals a Counter over the very
lines written; every tentative epoch names the origins it lacks; no agent process logs a
traceback. How many epochs were tentative or missing is printed (``-rA``), not asserted: the
crash-exact guarantee of issue 12 is measured by ``bench/fault_bench.py``. CI runs the faults
in one run (one cluster start) and the partition; the one-fault-per-run variants are ``slow``.

Every version a reader could see *during* the run is judged too (issue "Final means final",
:mod:`agent.server.version_watch`): a reader polling the lake and the results API every 0.5 s
from before the first fault; each version it saw must be exact against the per-agent count, or
flagged naming the origins it lacks with honest coverage, and no lake (term, version) may show
two row sets. That assertion (``assert_no_visible_violations``) comes last and names the
issue: the end-of-run promise above is asserted first.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agent.server.chaos import (
    UNNAMED,
    WRONG,
    ChaosCluster,
    JobPlan,
    JobReport,
    LogWriter,
    check,
    tracebacks,
)
from agent.server.netns import NetnsLab, netns_available
from agent.server.version_watch import VersionWatch, chaos_figures, chaos_watch, violation_message

AGENTS = 5


def report(reports: list[JobReport], events: list) -> None:  # type: ignore[type-arg]
    """What the run found beyond the asserted promise (pytest -s / -rA shows it)."""
    print(json.dumps([r.to_dict() for r in reports], indent=1)[:6000])
    print("faults:", [(e.action, e.index, e.role, e.stored_before) for e in events])


def assert_exact_or_flagged(chaos: ChaosCluster, reports: list[JobReport]) -> None:
    for r in reports:
        bad = r.violations() + [e for e in (r.lake or []) if e.verdict in (WRONG, UNNAMED)]
        assert not bad, (
            f"job {r.job}: final and wrong / unnamed tentative epochs: "
            + json.dumps([vars(e) for e in bad])[:4000]
        )
    assert not tracebacks(chaos), tracebacks(chaos)


def assert_no_visible_violations(figs: dict[str, Any]) -> None:
    """Issue "Final means final": no version visible during the run final and wrong, flagged
    dishonestly, or a lake (term, version) with two row sets."""
    print("every-version reader:", json.dumps(figs, default=str)[:6000])
    assert figs["violations"] == 0, violation_message(figs)


def submit_watched(chaos: ChaosCluster, watch: VersionWatch, plan: JobPlan, settle: int) -> None:
    """Submit ``plan`` (every agent must take it), watch every version of it from its start
    epoch, and wait until epoch ``start + settle`` is stored."""
    assert chaos.submit(plan)["agents_reached"] == chaos.n
    watch.watch(plan.name, plan.start_epoch)
    chaos.wait_stored(plan.name, plan.start_epoch + settle, timeout=60)


# ---- fault steps: each waits on the cluster's own progress (stored epochs), never a sleep --


def leaf_kill_and_restart(chaos: ChaosCluster, start: int) -> None:
    """kill -9 of a leaf; the same command again two stored epochs later."""
    leaf = chaos.pick("wc", "leaf")
    ev = chaos.kill(leaf, "wc", "leaf")
    chaos.wait_stored("wc", (ev.stored_before or start) + 2)
    ev = chaos.restart(leaf, "wc")
    chaos.wait_stored("wc", (ev.stored_before or start) + 2)


def master_kill(chaos: ChaosCluster, start: int, restart: bool) -> None:
    """kill -9 of wc's master (the next-closest agent takes over); optionally the same
    command again three stored epochs later (the same node id: the job's master again)."""
    master = chaos.pick("wc", "master")
    ev = chaos.kill(master, "wc", "master")
    chaos.wait_stored("wc", (ev.stored_before or start) + 3, timeout=60)
    if restart:
        ev = chaos.restart(master, "wc")
        chaos.wait_stored("wc", (ev.stored_before or start) + 3, timeout=60)


def submit_mid_run(chaos: ChaosCluster, watch: VersionWatch) -> JobPlan:
    """A second WordCount on the same input. Its start epoch is the previous one, which wc's
    workers have read whole already (the current one would be read partly, and not at all at
    an epoch boundary: flaky). Those records may stay missing for now - tentative, naming
    every origin - but never silently final."""
    mid = JobPlan("wc_mid", "wordcount", math.floor(time.time()) - 1)
    chaos.submit(mid)
    watch.watch(mid.name, mid.start_epoch)
    chaos.wait_stored("wc_mid", mid.start_epoch + 2)
    return mid


def run(chaos: ChaosCluster, watch: VersionWatch, *steps: Callable[[int], JobPlan | None]) -> None:
    """WordCount from an epoch 2 s ahead, ``steps`` in order, then the check (end of run,
    then every version seen during it)."""
    writer = LogWriter(chaos.paths, rate=10).start()
    plans = []
    try:
        start = math.floor(time.time()) + 2
        plans.append(JobPlan("wc", "wordcount", start))
        assert chaos.submit(plans[0])["agents_reached"] == AGENTS
        watch.watch("wc", start)
        chaos.wait_stored("wc", start + 1)
        for step in steps:
            if (plan := step(start)) is not None:
                plans.append(plan)
                watch.watch(plan.name, plan.start_epoch)
    finally:
        writer.stop()
    reports = check(chaos, plans, settle_timeout=15)
    figs = chaos_figures(watch, chaos, plans, reports)
    report(reports, chaos.events)
    assert_exact_or_flagged(chaos, reports)
    assert_no_visible_violations(figs)


def test_faults_in_one_run_stay_exact_or_flagged(chaos: ChaosCluster, watch: VersionWatch) -> None:
    """CI: a leaf killed and restarted, a job submitted mid-run, the master killed and
    restarted, in one run (one cluster start)."""
    run(
        chaos,
        watch,
        lambda start: leaf_kill_and_restart(chaos, start),
        lambda start: submit_mid_run(chaos, watch),
        lambda start: master_kill(chaos, start, restart=True),
    )


# One fault per run: slower in all (a cluster each), finer when one of them breaks.


@pytest.mark.slow
def test_leaf_kill_and_restart_stays_exact_or_flagged(
    chaos: ChaosCluster, watch: VersionWatch
) -> None:
    run(chaos, watch, lambda start: leaf_kill_and_restart(chaos, start))


@pytest.mark.slow
def test_master_kill_stays_exact_or_flagged(chaos: ChaosCluster, watch: VersionWatch) -> None:
    run(chaos, watch, lambda start: master_kill(chaos, start, restart=False))


@pytest.mark.slow
def test_master_kill_and_restart_stays_exact_or_flagged(
    chaos: ChaosCluster, watch: VersionWatch
) -> None:
    run(chaos, watch, lambda start: master_kill(chaos, start, restart=True))


@pytest.mark.slow
def test_job_submitted_mid_run_stays_exact_or_flagged(
    chaos: ChaosCluster, watch: VersionWatch
) -> None:
    run(chaos, watch, lambda start: submit_mid_run(chaos, watch))


def test_partition_of_an_agent_stays_exact_or_flagged(tmp_path: Path) -> None:
    ok, why = netns_available()
    if not ok:
        pytest.skip(f"no network namespaces here: {why}")
    with NetnsLab(AGENTS) as lab:
        chaos = ChaosCluster(AGENTS, tmp_path, netns=lab).start()
        writer = LogWriter(chaos.paths, rate=10).start()
        try:
            start = math.floor(time.time()) + 2
            wc = JobPlan("wc", "wordcount", start)
            chaos.submit(wc)
            watch = chaos_watch(chaos, [wc])
            chaos.wait_stored("wc", start + 1)
            victim = chaos.pick("wc", "leaf")
            ev = chaos.partition(victim, "wc", "leaf")
            # cut off for ten epochs (1 s each): past the overlay's failure detection and the
            # loss timeout, so it is declared absent before it comes back
            chaos.wait_stored("wc", (ev.stored_before or start) + 10, timeout=90)
            chaos.heal(victim, "wc")
            ev = chaos.events[-1]
            chaos.wait_stored("wc", (ev.stored_before or start) + 2)
            writer.stop()
            reports = check(chaos, [wc], settle_timeout=15)
            figs = chaos_figures(watch, chaos, [wc], reports)
        finally:
            writer.stop()
            chaos.stop()
        report(reports, chaos.events)
        assert_exact_or_flagged(chaos, reports)
        assert_no_visible_violations(figs)


def test_a_restarted_leaf_rebuilds_its_sliding_windows(
    chaos: ChaosCluster, watch: VersionWatch
) -> None:
    """A sliding-window job (3 epochs, slide 1): a leaf killed and restarted must rebuild the
    panes of the windows still open when it died, not emit windows short of them as whole."""

    def windows(start: int) -> JobPlan:
        plan = JobPlan("win", "wordcount", start, window=3)
        chaos.submit(plan)
        watch.watch(plan.name, plan.start_epoch)
        chaos.wait_stored("win", start + 3)
        leaf = chaos.pick("win", "leaf")
        ev = chaos.kill(leaf, "win", "leaf")
        chaos.wait_stored("win", (ev.stored_before or start) + 2)
        ev = chaos.restart(leaf, "win")
        chaos.wait_stored("win", (ev.stored_before or start) + 4)
        return plan

    run(chaos, watch, windows)
