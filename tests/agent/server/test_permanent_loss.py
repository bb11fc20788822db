"""Permanent loss on a real cluster (``agent.server.chaos``; docs/fault-tolerance.md,
"The guarantee" and "Permanent loss"): five agent processes tailing files that are still
being written, WordCount on them, and agents killed -9 **for good** (never restarted; their
files stop growing, as a dead host's web server stops logging).

Promised: a dead agent is *absent*, not gone: every epoch it misses is flagged (tentative,
naming it) until the job's ``retire_after`` retires it; then those epochs are *partial* for
good (naming it, exact over the origins they cover) and later epochs are final and exact over
the live agents' lines. Every epoch it had closed stays exact, re-issued from its hot replicas
when it never reached the master; none is final and wrong; the master records the absence (why,
when, how many epochs it re-issued) and the retirement.

Every version a reader could see during the run is judged too (issue "Final means final",
:mod:`agent.server.version_watch`, started before the first fault): exact, or flagged naming
the origins it lacks with honest coverage; a version final and short of a lost agent's lines
is a violation (``killed_for_good_unflagged_undercounted`` says how many). That assertion comes
last and names the issue.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import pytest

from agent.server.chaos import (
    EXACT,
    MISDECLARED,
    PARTIAL,
    UNNAMED,
    WRONG,
    ChaosCluster,
    JobPlan,
    JobReport,
    LogWriter,
    check,
    tracebacks,
    wait_until,
)
from agent.server.version_watch import VersionWatch, chaos_figures, chaos_watch, violation_message

AGENTS = 5


def assert_exact_except_the_lost_open_epochs(
    chaos: ChaosCluster, reports: list[JobReport], most_partial: int
) -> None:
    print(json.dumps([r.to_dict() for r in reports], indent=1)[:6000])
    for r in reports:
        bad = r.violations() + [
            e for e in (r.lake or []) if e.verdict in (WRONG, UNNAMED, MISDECLARED)
        ]
        assert not bad, json.dumps([vars(e) for e in bad])[:4000]
        verdicts = [e.verdict for e in r.epochs]
        assert set(verdicts) <= {EXACT, PARTIAL}, r.to_dict()["not_exact"]
        assert verdicts.count(PARTIAL) <= most_partial, r.to_dict()["not_exact"]
    assert not tracebacks(chaos), tracebacks(chaos)


def assert_no_visible_violations(
    watch: VersionWatch, chaos: ChaosCluster, plans: list[JobPlan], reports: list[JobReport]
) -> None:
    """Issue "Final means final" (module docstring); call last."""
    figs = chaos_figures(watch, chaos, plans, reports)
    print("every-version reader:", json.dumps(figs, default=str)[:6000])
    assert figs["violations"] == 0, violation_message(figs)


def losses(chaos: ChaosCluster, job: str) -> list[dict]:  # type: ignore[type-arg]
    out = []
    for i in chaos.live():
        out += chaos.client(i).status()["jobs"][job].get("losses") or []
    return out


RETIRE_AFTER = 4.0  # seconds: an absent agent is retired this long after it was last heard of


def retired(chaos: ChaosCluster, job: str) -> dict[str, dict]:  # type: ignore[type-arg]
    """Origin → its retirement, as the job's masters report it."""
    out = {}
    for i in chaos.live():
        for r in (chaos.client(i).status()["jobs"][job].get("membership") or {}).get("retired", []):
            out[r["origin"]] = r
    return out


def direct_leaf(chaos: ChaosCluster, master: int) -> int:
    """A leaf whose parent is the master itself (its epochs then have no other way up), and
    not the master's standby (killing both would leave the next master without the job's
    state: it could not know the leaf was an origin)."""
    ids = chaos.node_ids()
    st = chaos.client(master).status()["jobs"]["wc"]
    children = {format(int(c["id"], 16), "x") for t in st["trees"] for c in t.get("children") or ()}
    standbys = {
        format(int(s, 16), "x")
        for s in ((st.get("replication") or {}).get("standbys") or {}).values()
    }
    roles = chaos.roles("wc")
    return next(
        i
        for i, r in sorted(roles.items())
        if r == "leaf" and ids.get(i) in children and ids.get(i) not in standbys
    )


def test_a_leaf_lost_for_good_is_absent_then_retired(tmp_path: Path) -> None:
    chaos = ChaosCluster(AGENTS, tmp_path).start()
    writer = LogWriter(chaos.paths, rate=10).start()
    try:
        start = math.floor(time.time()) + 2
        wc = JobPlan("wc", "wordcount", start, settings=(("retire_after", RETIRE_AFTER),))
        assert chaos.submit(wc)["agents_reached"] == AGENTS
        watch = chaos_watch(chaos, [wc])
        chaos.wait_stored("wc", start + 2)
        leaf = chaos.pick("wc", "leaf")
        ev = chaos.lose(leaf, writer, "wc", "leaf")
        lost_id = chaos.node_ids()[leaf]
        found = wait_until(lambda: losses(chaos, "wc"), 20, "the master to declare it absent")
        assert [e["origin"] for e in found] == [lost_id]
        assert found[0]["declared_at"] - ev.at < 5.0  # proven by a refused probe, not timeouts
        gone = wait_until(lambda: retired(chaos, "wc"), 30, "retire_after to retire it")
        assert list(gone) == [lost_id] and "retire_after" in gone[lost_id]["why"]
        chaos.wait_stored("wc", gone[lost_id]["from_epoch"] + 2)
    finally:
        writer.stop()
    try:
        reports = check(chaos, [wc], settle_timeout=15)
    finally:
        watch.stop()
        chaos.stop()
    # the epochs it had open and those it missed until retire_after retired it (4 s of
    # silence, from its last contribution): partial, naming it; later ones final and exact
    assert_exact_except_the_lost_open_epochs(chaos, reports, most_partial=9)
    assert_no_visible_violations(watch, chaos, [wc], reports)


# slow (not in CI): whether the leaf's held-up epochs reach the new master only through its
# replicas depends on the kill beating the tree's parent timeout, which a loaded 2-core CI
# machine does not always allow (it failed 1 run in 4 there: 0 epochs needed re-issuing)
@pytest.mark.slow
def test_a_lost_leafs_epochs_that_never_reached_the_master_are_re_issued_from_its_replicas(
    tmp_path: Path,
) -> None:
    """The master stalls (SIGSTOP): the leaves' closed epochs cannot go up, stay uncommitted
    and are checkpointed to their neighbours; then a leaf and the stalled master are killed
    for good. The agent taking over finds the leaf dead and re-issues its closed epochs from
    its replicas: they end exact, covering it."""
    chaos = ChaosCluster(AGENTS, tmp_path).start()
    writer = LogWriter(chaos.paths, rate=10).start()
    try:
        start = math.floor(time.time()) + 2
        wc = JobPlan("wc", "wordcount", start, settings=(("retire_after", RETIRE_AFTER),))
        assert chaos.submit(wc)["agents_reached"] == AGENTS
        watch = chaos_watch(chaos, [wc])
        chaos.wait_stored("wc", start + 2)
        master = chaos.pick("wc", "master")
        leaf = direct_leaf(chaos, master)
        leaf_client = chaos.client(leaf)

        def newest_sent() -> int:
            return int(leaf_client.status()["jobs"]["wc"]["checkpoints"]["newest_sent"] or 0)

        stalled = chaos.stall(master, "wc", "master")
        # an epoch still open when the master stopped: it never reached the master. Killed at
        # once (before the tree's parent timeout re-parents the leaf), it exists only in the
        # leaf's replicas
        open_then = wc.epoch_of(stalled.at)
        wait_until(lambda: newest_sent() >= open_then, 20, "the leaf to checkpoint it")
        lost = chaos.lose(leaf, writer, "wc", "leaf")
        chaos.stalled.discard(master)
        chaos.lose(master, writer, "wc", "master")
        ids = chaos.node_ids()
        found = wait_until(
            lambda: (
                {e["origin"]: e for e in losses(chaos, "wc")}.keys() >= {ids[leaf], ids[master]}
                and {e["origin"]: e for e in losses(chaos, "wc")}
            ),
            60,
            "the new master to declare both lost",
        )
        assert found[ids[leaf]]["reissued"] >= 1, found
        gone = wait_until(
            lambda: (
                retired(chaos, "wc").keys() >= {ids[leaf], ids[master]} and retired(chaos, "wc")
            ),
            60,
            "retire_after to retire both",
        )
        chaos.wait_stored("wc", max(r["from_epoch"] for r in gone.values()) + 2, timeout=60)
    finally:
        writer.stop()
    try:
        reports = check(chaos, [wc], settle_timeout=20)
    finally:
        watch.stop()
        chaos.stop()
    # the epochs the leaf closed before its death cover it (re-issued); those that lack
    # anyone lack the stalled master only
    closed = wc.epoch_of(lost.at) - 2
    lacking = {e.epoch: e.lacking for e in reports[0].epochs if e.epoch <= closed}
    assert all(ids[leaf] not in names for names in lacking.values()), lacking
    # the stalled master read nothing while stopped: those epochs lack it, named, partial
    assert_exact_except_the_lost_open_epochs(chaos, reports, most_partial=16)
    assert_no_visible_violations(watch, chaos, [wc], reports)


def test_both_agents_of_one_failure_domain_lost_together(tmp_path: Path) -> None:
    """Agents in failure domains two by two (``--domain``): both agents of one domain (a rack
    losing power) are killed for good at once. Their checkpoints were held on other domains;
    every epoch ends exact, but for the ones they had open (named, exact over the rest)."""
    domains = [f"rack-{i // 2}" for i in range(AGENTS)]
    chaos = ChaosCluster(AGENTS, tmp_path, domains=domains).start()
    writer = LogWriter(chaos.paths, rate=10).start()
    try:
        start = math.floor(time.time()) + 2
        wc = JobPlan("wc", "wordcount", start, settings=(("retire_after", RETIRE_AFTER),))
        assert chaos.submit(wc)["agents_reached"] == AGENTS
        watch = chaos_watch(chaos, [wc])
        chaos.wait_stored("wc", start + 2)
        roles = chaos.roles("wc")
        pair = next(
            [i for i in roles if domains[i] == d]
            for d in sorted(set(domains))
            if sum(domains[i] == d and roles.get(i) not in (None, "master") for i in roles) == 2
        )
        ids = chaos.node_ids()
        by_id = {v: k for k, v in ids.items()}
        # their hot replicas are on the other domains (three domains: two holders, two others)
        for i in pair:
            holders = chaos.client(i).status()["jobs"]["wc"]["checkpoints"]["holders"]
            assert len(holders) == 2, holders
            assert all(domains[by_id[h]] != domains[i] for h in holders), (i, holders)
            assert domains[by_id[holders[0]]] != domains[by_id[holders[1]]], holders
        for i in pair:
            chaos.lose(i, writer, "wc", roles[i])
        found = wait_until(
            lambda: (
                (ls := {e["origin"]: e for e in losses(chaos, "wc")}).keys()
                >= {ids[i] for i in pair}
                and ls
            ),
            20,
            "the master to declare both lost",
        )
        print("losses", found, "killed at", [e.at for e in chaos.events if e.action == "lose"])
        gone = wait_until(
            lambda: (rs := retired(chaos, "wc")).keys() >= {ids[i] for i in pair} and rs,
            30,
            "retire_after to retire both",
        )
        chaos.wait_stored("wc", max(r["from_epoch"] for r in gone.values()) + 2)
    finally:
        writer.stop()
    try:
        reports = check(chaos, [wc], settle_timeout=15)
    finally:
        watch.stop()
        chaos.stop()
    # two agents: the epochs they had open and missed until retired: partial, naming them
    assert_exact_except_the_lost_open_epochs(chaos, reports, most_partial=9)
    assert_no_visible_violations(watch, chaos, [wc], reports)


@pytest.mark.slow
def test_a_slow_agent_for_a_minute_never_makes_an_epoch_wrong(tmp_path: Path) -> None:
    """A leaf capped to 20 % of one CPU (SIGSTOP/SIGCONT duty cycle) for a minute: its epochs
    arrive late - previewed tentative, leapt over - and every epoch ends final and exact."""
    chaos = ChaosCluster(AGENTS, tmp_path).start()
    writer = LogWriter(chaos.paths, rate=10).start()
    try:
        start = math.floor(time.time()) + 2
        wc = JobPlan("wc", "wordcount", start, settings=(("straggler_epochs", 1),))
        assert chaos.submit(wc)["agents_reached"] == AGENTS
        watch = chaos_watch(chaos, [wc])
        chaos.wait_stored("wc", start + 2)
        chaos.throttle(chaos.pick("wc", "leaf"), 0.2, 60.0, "wc", "leaf").join()
        chaos.wait_stored("wc", wc.epoch_of(time.time()) - 1, timeout=60)
    finally:
        writer.stop()
    try:
        reports = check(chaos, [wc], settle_timeout=30)
    finally:
        watch.stop()
        chaos.stop()
    assert_exact_except_the_lost_open_epochs(chaos, reports, most_partial=0)
    assert_no_visible_violations(watch, chaos, [wc], reports)
