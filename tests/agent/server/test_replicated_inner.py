"""Replicated inner positions on a real cluster (issue "Active redundancy"): kill -9 of an
inner node - a non-root agent with children in the job's tree - under ``fault_tolerance``
``passive``, ``{"policy": "replicated", "replicas": 2}`` and ``{"policy": "budget",
"replica_budget": 2}`` (the master's plan: the root and the inner node).

Six agent processes with fixed node ids (``agent/server/inner_scenarios.py``: the job's
first tree is root 0 with children 1 (the standby), 2 and 5, and agent 2 has children 3 and
4; the scenario checks that shape on the running cluster first) tail files still being
written; WordCount on 1 s epochs, only results as stored judged. Agent 2 is killed with kill
-9 (replicated: once some agent holds a replica of its position) and restarted six stored
epochs later; the every-version reader polls the lake and the results API every 0.5 s
throughout (:func:`agent.server.inner_scenarios.kill_an_inner_node`; the benchmark runs it
too). Asserted for both policies: the end-of-run check (exact or flagged), no epoch never
repaired, no version final and wrong. Replicated, also **transparency**: no version of the
whole run is flagged for any origin but the killed node's own (its share is absent while it
is down, as a dead leaf's is), because the replica of its position merged its children's
epochs. Passive: the epochs the dead node had acknowledged from its children are gone with
it, and versions lack them until repaired by pull; the count is printed, not asserted.
"""

from __future__ import annotations

import json
import time

import pytest
from test_chaos import assert_exact_or_flagged, report

from agent.server.chaos import ChaosCluster
from agent.server.inner_scenarios import (
    AGENTS,
    INNER,
    ROOT,
    STANDBY,
    check_design,
    inner_cluster,
    kill_an_inner_node,
)
from agent.server.version_check import headline
from agent.server.version_watch import VersionWatch, violation_message

REPLICATED = {"policy": "replicated", "replicas": 2}
#: a budget of two positions: the master's plan is the root and the inner node (its
#: children's input is what an unreplicated inner node's death cuts off)
BUDGET = {"policy": "budget", "replica_budget": 2}


#: the conftest's ``chaos`` fixture builds this cluster (the scenario's node ids)
CLUSTER = inner_cluster


def test_the_planned_tree_has_an_inner_node_that_is_not_the_standby() -> None:
    kids = check_design()
    assert len(kids) == AGENTS
    assert len(kids[INNER]) >= 2 and INNER in kids[ROOT] and INNER != STANDBY


@pytest.mark.parametrize(
    "policy",
    [
        # CI runs the replicated inner node; the same kill under the others is in the slow set
        pytest.param("passive", id="passive", marks=pytest.mark.slow),
        pytest.param(REPLICATED, id="replicated"),
        pytest.param(BUDGET, id="budget", marks=pytest.mark.slow),
    ],
)
def test_kill_9_of_an_inner_node(chaos: ChaosCluster, watch: VersionWatch, policy: object) -> None:
    t0 = time.monotonic()
    run = kill_an_inner_node(chaos, watch, policy)
    assert run.agents_reached == AGENTS
    assert run.children == sorted(check_design()[INNER])
    figs = run.figs
    report(run.reports, chaos.events)
    print("headline:", json.dumps(headline(figs), default=str))
    print(f"{policy}: {json.dumps(run.figures(), default=str)}")
    print(f"{policy}: scenario {time.monotonic() - t0:.1f}s")
    assert_exact_or_flagged(chaos, run.reports)
    assert figs["never_repaired"]["count"] == 0, figs["never_repaired"]
    assert figs["violations"] == 0, violation_message(figs)
    if policy != "passive":
        assert run.replica_holders, "no replica of the inner node's position"
        assert not run.others, json.dumps(run.others[:20])
