"""The fixed-id layouts of the cluster scenarios (``agent/server/tree_layouts.py``) give the
tree shapes their scenarios name, computed from the ids alone (pure: no cluster)."""

from __future__ import annotations

import pytest

from agent.server.replica_scenarios import ScenarioError
from agent.server.tree_layouts import SIX, TWELVE, Layout


def test_six_has_one_inner_node_below_the_root() -> None:
    kids = SIX.check()
    assert SIX.agents == 6 and kids[2] == [3, 4] and SIX.planned_parents()[2] == SIX.root


def test_twelve_has_three_inner_nodes_one_inside_another() -> None:
    kids = TWELVE.check()
    parents = TWELVE.planned_parents()
    assert TWELVE.agents == 12
    assert {i: kids[i] for i in TWELVE.inner} == {7: [2, 3], 8: [4, 6], 9: [8, 10]}
    assert parents[7] == parents[9] == TWELVE.root and parents[8] == 9
    # nothing else has children: a pause of any other agent is a leaf's
    assert {i for i, c in kids.items() if c and i != TWELVE.root} == set(TWELVE.inner)


def test_a_layout_whose_ids_do_not_give_the_named_roles_is_refused() -> None:
    wrong = Layout("wrong", SIX.ids, root=0, standby=1, inner=(5,))  # 5 is a leaf
    with pytest.raises(ScenarioError, match="5 is not an inner node"):
        wrong.check()
    with pytest.raises(ScenarioError, match="not root 1"):
        Layout("swapped", SIX.ids, root=1, standby=0, inner=(2,)).check()
