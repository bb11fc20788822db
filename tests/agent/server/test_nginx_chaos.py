"""Issue "Final means final" with a real nginx: kill -9 of a leaf, restarted later, while nginx
keeps logging the traffic the killed agent will read when it is back.

Four agent processes, each tailing the access log (``combined`` format, the agents' ``nginx``
input format) of its own ``server`` of one real nginx (:mod:`agent.server.nginx_lab`), under
~30 requests/s per server from a traffic thread (three bodies, some 404s) for the whole run.
The job: ``SELECT status, sum(bytes) AS bytes, count(*) AS n ... GROUP BY status``, 2 s epochs,
1 s allowed lateness (``$time_local`` has 1 s resolution). The reference is an independent
reading of the access logs themselves after the run (their ``$time_local`` decides the epoch,
as it does for the agents). The fault is timed by stored epochs, never a sleep; the
every-version reader (:mod:`agent.server.version_watch`) watches the lake and the results API
throughout. Asserted: exact or flagged at the end, no traceback, every epoch final and exact
at the end, none never repaired, and no version seen during the run final and wrong, flagged
dishonestly, or a lake (term, version) with two row sets.

Skips, saying why, without nginx or root (CI installs Debian's nginx as root: ``.ci/run``).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_chaos import assert_exact_or_flagged, report, submit_watched

from agent.server.chaos import ChaosCluster, JobPlan, check
from agent.server.nginx_lab import NginxLab, Traffic, nginx_available
from agent.server.version_check import headline
from agent.server.version_watch import (
    VersionWatch,
    chaos_figures,
    violation_message,
)

AGENTS = 4
EPOCH_S = 2.0
#: stored epochs (2 s each) between the kill and the restart: ~8 s down
DOWN_EPOCHS = 4

_OK, _WHY = nginx_available()
pytestmark = pytest.mark.skipif(not _OK, reason=_WHY)


@pytest.fixture
def chaos(tmp_path: Path) -> Iterator[ChaosCluster]:
    cluster = ChaosCluster(AGENTS, tmp_path, input_format="nginx").start()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def nginx(chaos: ChaosCluster, tmp_path: Path) -> Iterator[NginxLab]:
    lab = NginxLab(tmp_path / "nginx", chaos.paths).start()
    try:
        yield lab
    finally:
        lab.stop()


def test_kill_9_of_a_leaf_under_real_nginx_ends_final_and_exact_and_never_lies(
    chaos: ChaosCluster,
    nginx: NginxLab,
    watch: VersionWatch,  # conftest's: the every-version reader on this module's cluster
) -> None:
    traffic = Traffic(nginx.urls, rate=30).start()
    try:
        start = math.floor(time.time() / EPOCH_S) + 2
        plan = JobPlan("status", "status", start, epoch_seconds=EPOCH_S, allowed_lateness=1.0)
        submit_watched(chaos, watch, plan, settle=2)
        leaf = chaos.pick(plan.name, "leaf")
        ev = chaos.kill(leaf, plan.name, "leaf")
        back = (ev.stored_before or start) + DOWN_EPOCHS
        chaos.wait_stored(plan.name, back, timeout=60)
        ev = chaos.restart(leaf, plan.name)
        chaos.wait_stored(plan.name, max(back, ev.stored_before or 0) + 4, timeout=60)
    finally:
        traffic.stop()
        nginx.stop()  # graceful: every answered request is in the logs before they are read
    reports = check(chaos, [plan], settle_timeout=30)
    figs = chaos_figures(watch, chaos, [plan], reports)
    report(reports, chaos.events)
    print("traffic:", dict(traffic.answers), "errors:", traffic.errors)
    print("down_s:", round(chaos.events[-1].at - chaos.events[0].at, 2))
    print("headline:", json.dumps(headline(figs), default=str))
    print("every-version reader:", json.dumps(figs, default=str)[:8000])
    assert traffic.answers[404] > 0 and traffic.answers[200] > 0, traffic.answers
    assert_exact_or_flagged(chaos, reports)
    end = figs["epochs_final_exact_at_end"]
    assert figs["never_repaired"]["count"] == 0, figs["never_repaired"]
    assert end["exact"] == end["of"] > 0, json.dumps(reports[0].to_dict(), default=str)[:4000]
    assert figs["violations"] == 0, violation_message(figs)
