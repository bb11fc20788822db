"""Adaptive redundancy on a real cluster (issue "Active redundancy", Tran's mirroring): an
inner node paused with SIGSTOP for five seconds - longer than the overlay's failure
detection - under ``passive``, under static redundancy (``{"policy": "adaptive",
"latency_target_ms": 2000, "mirror_ratio": 1}``: every epoch mirrored) and under the
adaptive policy (the controller's ratio, and the members' suspicion of a parent slow to
acknowledge).

Six agent processes with fixed node ids (``agent/server/inner_scenarios.py``: agent 2 is an
inner node with children 3 and 4) tail files still being written; WordCount on 1 s epochs,
previews and leaping off, so without a mirror the master waits for the paused node. The
every-version reader polls the lake and the results API throughout
(:func:`agent.server.mirror_scenarios.pause_an_inner_node`; the benchmark runs it too).
Asserted for all: the end-of-run check (exact or flagged), no violation, no epoch never
repaired. Mirrored (static or adaptive), the paused node's children's epochs reach the
master through the mirror, so the epochs held up by the pause complete within the target
and no version lacks an origin other than the paused node (tentative, lacking it alone,
until its own share is folded in) - adaptive: but for the epoch in flight when each child
re-joins the master, which may lack that child (flagged; children re-joining a moment apart
may straddle two epochs, each lacking the one that re-joined in it) - also after its
children re-joined elsewhere (they tell it they moved, so once resumed it does not wait for
them). Passive, the master waits for the paused node until the overlay declares it failed
(only exactness is asserted for it).
"""

from __future__ import annotations

import json

import pytest
from test_chaos import assert_exact_or_flagged, report

from agent.server.chaos import ChaosCluster
from agent.server.inner_scenarios import AGENTS, INNER, NODE_IDS, inner_cluster
from agent.server.mirror_scenarios import pause_an_inner_node
from agent.server.tree_layouts import SIX
from agent.server.version_check import origin_name
from agent.server.version_watch import VersionWatch, violation_message

TARGET_MS = 2000.0
MIRRORED = {"policy": "adaptive", "latency_target_ms": TARGET_MS, "mirror_ratio": 1}
ADAPTIVE = {"policy": "adaptive", "latency_target_ms": TARGET_MS}  # the controller's ratio
assert AGENTS == 6


#: the conftest's ``chaos`` fixture builds this cluster (the scenario's node ids)
CLUSTER = inner_cluster


# CI runs the default policy (adaptive); the same fault under the others is in the slow set
@pytest.mark.parametrize("policy", [pytest.param("passive", id="passive", marks=pytest.mark.slow),
                                    pytest.param(MIRRORED, id="mirrored", marks=pytest.mark.slow),
                                    pytest.param(ADAPTIVE, id="adaptive")])  # fmt: skip
def test_a_paused_inner_node(chaos: ChaosCluster, watch: VersionWatch, policy: object) -> None:
    run = pause_an_inner_node(chaos, watch, policy, TARGET_MS)
    figs = run.figures()
    report(run.reports, chaos.events)
    print(f"{policy}: {json.dumps(figs, default=str)}")
    assert_exact_or_flagged(chaos, run.reports)
    assert run.figs["never_repaired"]["count"] == 0, run.figs["never_repaired"]
    assert run.figs["violations"] == 0, violation_message(run.figs)
    if policy == "passive":
        # the baseline is judged for exactness only: its master waits for the paused node
        # until the overlay declares it failed (3.5 s into the pause), so its p99 (2.0-2.6 s
        # in the runs so far) sits at the target's edge; the benchmark compares latencies
        return
    assert figs["over_target"] <= 1, figs  # (the epoch in flight when it was paused)
    others = json.dumps(run.others[:20], default=str)
    # adaptive, and mirrored too (a CI run of 2026-12-07 had the resume epoch lacking two
    # children under mirror_ratio 1, flagged and named, every epoch exact at the end): a
    # child that re-joins the master while its suspicion of the paused node is
    # pending sends that epoch to the master, not the mirror, so the mirror's hedged copy
    # lacks it (flagged, named) until the master folds it in - for each child at most the
    # epoch in flight at its re-join (two children re-joining a moment apart may straddle an
    # epoch boundary: a CI run had epoch e lacking two children, e + 1 the third), and never
    # an origin outside the paused node's subtree
    subtree = {origin_name(NODE_IDS[i]) for i in (INNER, *SIX.check()[INNER])}
    assert all({origin_name(x) for x in o["lacking"]} <= subtree for o in run.others), others
    epochs_lacking: dict[str, set[int]] = {}
    for o in run.others:
        for origin in o["lacking"]:
            epochs_lacking.setdefault(origin_name(origin), set()).add(o["epoch"])
    assert all(len(e) <= 1 for e in epochs_lacking.values()), others
