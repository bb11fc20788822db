"""Chaos on a real cluster (``agent.server.chaos``): agent processes tailing files that are
still being written, WordCount on them, kill -9 of a leaf then its restart (same command,
data directory and ports), kill -9 of the job's master; where root, a partition (the link of an
agent in its own network namespace taken down and up).

What the product promises today and must never break: **exact or flagged** — every epoch the
results API (and the lake) calls final (``tentative=false``) equals a Counter over the very
lines written; every tentative epoch names the origins it lacks; no agent process logs a
traceback. How many epochs were tentative or missing is printed, not asserted (the crash-exact
guarantee of issue 12 is not complete yet; ``bench/fault_bench.py`` measures it).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterator
from pathlib import Path

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


@pytest.fixture
def chaos(tmp_path: Path) -> Iterator[ChaosCluster]:
    cluster = ChaosCluster(AGENTS, tmp_path).start()
    try:
        yield cluster
    finally:
        cluster.stop()


def test_leaf_kill_and_restart_stays_exact_or_flagged(chaos: ChaosCluster) -> None:
    writer = LogWriter(chaos.paths, rate=10).start()
    try:
        start = math.floor(time.time()) + 2
        wc = JobPlan("wc", "wordcount", start)
        assert chaos.submit(wc)["agents_reached"] == AGENTS
        chaos.wait_stored("wc", start + 1)
        # kill -9 of a leaf; it comes back two stored epochs later with the same command
        leaf = chaos.pick("wc", "leaf")
        ev = chaos.kill(leaf, "wc", "leaf")
        chaos.wait_stored("wc", (ev.stored_before or start) + 2)
        ev = chaos.restart(leaf, "wc")
        chaos.wait_stored("wc", (ev.stored_before or start) + 2)
    finally:
        writer.stop()
    reports = check(chaos, [wc], settle_timeout=15)
    report(reports, chaos.events)
    assert_exact_or_flagged(chaos, reports)


# Known product bugs this harness found (reported to issue 12's lead); strict, so the day they
# are fixed the test says so and the marker goes. A timeout is not hidden: only an
# AssertionError counts as the expected failure.
MASTER_KILL_BUG = (
    "issue 12: after kill -9 of a job's master the new master stores the epochs that lack "
    "the dead master's own origin as final (tentative=false, coverage=1.0, lacking=[]), in "
    "the results API and the lake; and every earlier epoch answers 404"
)
MID_RUN_BUG = (
    "issue 12: a job submitted mid-run on an input another job reads misses the records of "
    "its start epoch read before it started, and calls that epoch final"
)


@pytest.mark.xfail(strict=True, raises=AssertionError, reason=MASTER_KILL_BUG)
def test_master_kill_stays_exact_or_flagged(chaos: ChaosCluster) -> None:
    writer = LogWriter(chaos.paths, rate=10).start()
    try:
        start = math.floor(time.time()) + 2
        wc = JobPlan("wc", "wordcount", start)
        chaos.submit(wc)
        chaos.wait_stored("wc", start + 2)
        # kill -9 of the master: the next-closest agent takes the job over
        master = chaos.pick("wc", "master")
        ev = chaos.kill(master, "wc", "master")
        chaos.wait_stored("wc", (ev.stored_before or start) + 3, timeout=60)
    finally:
        writer.stop()
    reports = check(chaos, [wc], settle_timeout=15)
    report(reports, chaos.events)
    assert_exact_or_flagged(chaos, reports)


@pytest.mark.xfail(strict=True, raises=AssertionError, reason=MID_RUN_BUG)
def test_job_submitted_mid_run_stays_exact_or_flagged(chaos: ChaosCluster) -> None:
    writer = LogWriter(chaos.paths, rate=10).start()
    try:
        start = math.floor(time.time()) + 1
        wc = JobPlan("wc", "wordcount", start)
        chaos.submit(wc)
        chaos.wait_stored("wc", start + 1)
        # its start epoch is the previous one, which wc's workers have already read whole (the
        # current one would be read partly, and not at all at an epoch boundary: flaky)
        mid = JobPlan("wc_mid", "wordcount", math.floor(time.time()) - 1)
        chaos.submit(mid)
        chaos.wait_stored("wc_mid", mid.start_epoch + 2)
    finally:
        writer.stop()
    reports = check(chaos, [wc, mid], settle_timeout=15)
    report(reports, chaos.events)
    assert_exact_or_flagged(chaos, reports)


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
            chaos.wait_stored("wc", start + 1)
            victim = chaos.pick("wc", "leaf")
            ev = chaos.partition(victim, "wc", "leaf")
            chaos.wait_stored("wc", (ev.stored_before or start) + 3)
            chaos.heal(victim, "wc")
            ev = chaos.events[-1]
            chaos.wait_stored("wc", (ev.stored_before or start) + 2)
            writer.stop()
            reports = check(chaos, [wc], settle_timeout=15)
        finally:
            writer.stop()
            chaos.stop()
        report(reports, chaos.events)
        assert_exact_or_flagged(chaos, reports)
