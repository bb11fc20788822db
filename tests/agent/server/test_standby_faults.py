"""Faults of a job's standby (the Flux process pair at the root,
``agent.runtime.recovery.standby``) on a
real cluster: the two scenarios of issue "Final means final" no other test covers.

* **kill -9 of the standby** (under both policies: with replicated masters it is the active
  replica too), restarted some six stored epochs later: the master keeps
  publishing (the standby is also an origin: its epochs stay tentative naming it until it is
  back), retargets its replication to the next-closest agent, and when the standby returns
  every epoch ends final and exact.
* **kill -9 of the master and its standby together**, both restarted later: the job's state
  held by both copies dies with them; the third-closest agent becomes the root from nothing.
  Epochs may stay tentative or partial where state is gone, but must say so.

Five agent processes tail files still being written (:class:`agent.server.chaos.LogWriter`),
WordCount on 1 s epochs; faults are timed by the cluster's own progress (stored epochs), never
a sleep. The every-version reader (:mod:`agent.server.version_watch`) polls the lake and the
results API every 0.5 s from before the first fault. Asserted, in this order: the end-of-run
:func:`agent.server.chaos.check` (exact or flagged; for the standby alone, exact everywhere),
no epoch never repaired, and last, no version seen during the run final and wrong, flagged
dishonestly, or a lake (term, version) with two row sets. The reader's headline is printed
(``-s``).
"""

from __future__ import annotations

import json
import math
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from test_chaos import assert_exact_or_flagged, report

from agent.server.chaos import EXACT, ChaosCluster, JobPlan, JobReport, LogWriter, check, wait_until
from agent.server.replica_scenarios import standby_of
from agent.server.version_check import headline
from agent.server.version_watch import (
    VersionWatch,
    chaos_figures,
    violation_message,
)

AGENTS = 5
#: stored epochs (1 s each) between a kill and the restart: the brief's "5-10 s later"
DOWN_EPOCHS = 6


def kill_standby(chaos: ChaosCluster, start: int) -> None:
    _, standby = standby_of(chaos, "wc")
    ev = chaos.kill(standby, "wc", "standby")
    back = (ev.stored_before or start) + DOWN_EPOCHS
    chaos.wait_stored("wc", back, timeout=60)
    ev = chaos.restart(standby, "wc")
    chaos.wait_stored("wc", max(back, ev.stored_before or 0) + 3, timeout=60)


def kill_master_and_standby(chaos: ChaosCluster, start: int) -> None:
    master, standby = standby_of(chaos, "wc")
    ev = chaos.kill(master, "wc", "master")
    chaos.kill(standby, "wc", "standby")
    # the third-closest agent takes the root without a replica; the scenario is only what it
    # says if one did (not a restarted pair resuming where it stopped)
    third = wait_until(
        lambda: [i for i, r in chaos.roles("wc").items() if r == "master"],
        60,
        "a third agent to take job wc's root",
    )
    assert not {master, standby} & set(third), third
    back = (ev.stored_before or start) + DOWN_EPOCHS
    chaos.wait_stored("wc", back, timeout=90)
    chaos.restart(master, "wc")
    ev = chaos.restart(standby, "wc")
    # a restart's stored epoch is None when no agent answered in time (the root moving back):
    # progress is then counted from the last one known
    chaos.wait_stored("wc", max(back, ev.stored_before or 0) + 3, timeout=60)


def shape(reports: list[JobReport], watch: VersionWatch) -> dict[str, Any]:
    """What the results looked like: at the end (API and lake verdict counts), and the
    distinct versions the reader saw during the run by source and state."""
    states = Counter(
        f"{v.source}:{'partial' if v.partial else 'tentative' if v.flagged else 'final'}"
        for v in watch.seen()
    )
    end = {r.job: {"api": r.counts(), "lake": r.counts(r.lake or [])} for r in reports}
    return {"end": end, "seen": dict(sorted(states.items()))}


def run(
    chaos: ChaosCluster,
    watch: VersionWatch,
    fault: Callable[[ChaosCluster, int], None],
    settings: tuple[tuple[str, Any], ...] = (),
) -> tuple[list[JobReport], dict[str, Any]]:
    """WordCount from an epoch 2 s ahead (more spec fields: ``settings``), ``fault``, the
    end-of-run check and the reader's figures; asserts the end-of-run promise (exact or
    flagged) and no epoch never repaired. The every-version assertion is the caller's, last."""
    writer = LogWriter(chaos.paths, rate=10).start()
    try:
        start = math.floor(time.time()) + 2
        plan = JobPlan("wc", "wordcount", start, settings=settings)
        assert chaos.submit(plan)["agents_reached"] == AGENTS
        watch.watch(plan.name, start)
        chaos.wait_stored("wc", start + 2)
        fault(chaos, start)
    finally:
        writer.stop()
    reports = check(chaos, [plan], settle_timeout=20)
    figs = chaos_figures(watch, chaos, [plan], reports)
    report(reports, chaos.events)
    print("results:", json.dumps(shape(reports, watch)))
    print("headline:", json.dumps(headline(figs), default=str))
    print("every-version reader:", json.dumps(figs, default=str)[:8000])
    assert_exact_or_flagged(chaos, reports)
    assert figs["never_repaired"]["count"] == 0, figs["never_repaired"]
    return reports, figs


@pytest.mark.parametrize(  # CI runs the replicated standby; the passive one is in the slow set
    "policy",
    [
        pytest.param("passive", id="passive", marks=pytest.mark.slow),
        pytest.param({"policy": "replicated", "replicas": 2}, id="replicated"),
    ],
)
def test_kill_9_of_the_standby_and_its_restart_end_final_and_exact(
    chaos: ChaosCluster, watch: VersionWatch, policy: Any
) -> None:
    """Passive: the standby; replicated masters: the master's active replica (the same agent,
    the next master), whose members' epochs then queue, bounded, until it is back."""
    reports, figs = run(chaos, watch, kill_standby, (("fault_tolerance", policy),))
    # the master never died: nothing was lost, so every epoch ends final and exact
    for r in reports:
        not_exact = [vars(e) for e in [*r.epochs, *(r.lake or [])] if e.verdict != EXACT]
        assert not not_exact, json.dumps(not_exact, default=str)[:4000]
    assert figs["violations"] == 0, violation_message(figs)


def test_kill_9_of_the_master_and_its_standby_together_stays_exact_or_flagged(
    chaos: ChaosCluster, watch: VersionWatch
) -> None:
    _, figs = run(chaos, watch, kill_master_and_standby)
    assert figs["violations"] == 0, violation_message(figs)
