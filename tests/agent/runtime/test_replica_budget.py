"""BudgetPlans (agent/runtime/recovery/replica_budget.py): the master's tree from its holders'
reports, the rates from stored lineages, the plan - against the planner run directly on the
true tree, and (hypothesis) a valid tree rooted at the master whatever the reports say."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from agent.runtime.recovery.replica_budget import REPORT_SECONDS, BudgetPlans
from agent.runtime.recovery.replica_plan import Tree, plan_structure_aware
from srt.dataplane.lineage import counted

ROOT = 1


def test_the_plan_is_the_planners_on_the_reported_tree() -> None:
    # root 1: children 2, 3; 2: children 4, 5; 4: children 6, 7 (inner nodes report)
    plans = BudgetPlans(budget=3)
    plans.report(2, ROOT, "a", {4: "b", 5: "a"}, now=0.0)
    plans.report(4, 2, "b", {6: "a", 7: "b"}, now=0.0)
    rates = {n: 10 for n in range(1, 8)}
    for _ in range(3):
        plans.observe(counted(tuple(rates), rates).records)
    parents, domains = plans.tree(ROOT, "a", {2: "a", 3: "b"}, now=1.0)
    truth = {1: None, 2: 1, 3: 1, 4: 2, 5: 2, 6: 4, 7: 4}
    assert parents == truth
    assert domains[4] == "b" and domains[6] == "a"
    plan = plans.plan(ROOT, "a", {2: "a", 3: "b"}, budget=3, now=1.0)
    # two domains: the domain-aware plan; the root and the inner nodes on the big subtree
    assert ROOT in plan and len(plan) <= 3
    single = BudgetPlans(budget=3)
    single.report(2, ROOT, "d", {4: "d", 5: "d"}, now=0.0)
    single.report(4, 2, "d", {6: "d", 7: "d"}, now=0.0)
    single.observe({n: 10 for n in range(1, 8)})
    got = single.plan(ROOT, "d", {2: "d", 3: "d"}, budget=3, now=1.0)
    assert got == plan_structure_aware(truth, dict.fromkeys(truth, 10.0), 3) | {ROOT}
    assert got == {1, 2, 4}


def test_stale_and_cyclic_reports_are_left_out() -> None:
    plans = BudgetPlans(budget=2)
    plans.report(2, ROOT, "d", {4: "d"}, now=0.0)
    plans.report(8, 9, "d", {10: "d"}, now=0.0)  # its parent 9 is nowhere: not reachable
    plans.report(11, 12, "d", {12: "d"}, now=0.0)  # 11 <-> 12: a cycle
    parents, _ = plans.tree(ROOT, "d", {2: "d"}, now=1.0)
    assert parents == {1: None, 2: 1, 4: 2}
    parents, _ = plans.tree(ROOT, "d", {2: "d"}, now=REPORT_SECONDS + 1.0)  # all stale
    assert parents == {1: None, 2: 1}


def test_rates_follow_the_stored_epochs() -> None:
    plans = BudgetPlans(budget=1)
    plans.observe({5: 100})
    plans.observe({5: 0, 6: 50})
    assert plans.rates[5] == 80.0 and plans.rates[6] == 50.0
    plans.observe(None)  # counts unknown: nothing learnt
    assert plans.rates[5] == 80.0


ids = st.integers(min_value=2, max_value=12)


@settings(max_examples=200, deadline=None)
@given(
    reports=st.lists(
        st.tuples(ids, st.one_of(st.none(), st.integers(1, 12)), st.sets(ids, max_size=4)),
        max_size=10,
    ),
    own=st.sets(ids, max_size=4),
    budget=st.integers(1, 5),
)
def test_whatever_the_reports_the_tree_is_one_tree_at_the_master(reports, own, budget) -> None:
    plans = BudgetPlans(budget)
    for i, (holder, parent, kids) in enumerate(reports):
        plans.report(holder, parent, "d", dict.fromkeys(kids, "d"), now=i * 0.001)
    parents, domains = plans.tree(ROOT, "d", dict.fromkeys(own, "d"), now=0.5)
    tree = Tree.of(parents)  # raises unless one tree
    assert parents[ROOT] is None and set(domains) == set(parents) and tree is not None
    assert set(own) <= set(parents)
    plan = plans.plan(ROOT, "d", dict.fromkeys(own, "d"), budget, now=0.5)
    assert ROOT in plan and plan <= set(parents) and len(plan) <= max(budget, 1)
