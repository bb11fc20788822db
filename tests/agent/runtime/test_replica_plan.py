"""The budgeted-replica planner (agent/runtime/recovery/replica_plan.py) against independent
references: the structure-aware plan against a brute force over every connected, root-holding
set on random small trees (hypothesis); the greedy baseline, coverage, fidelity and top-k
quality against straightforward re-computations; the planner's hysteresis as a state machine."""

from __future__ import annotations

import itertools
import random
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.runtime.recovery.replica_plan import (
    ReplicaPlanner,
    coverage,
    domain_coverages,
    fidelity,
    flows,
    plan_domain_aware,
    plan_greedy,
    plan_structure_aware,
    planned_origins,
    topk_quality,
    worst_domain_coverage,
)
from agent.runtime.results.quality import observed_topk_accuracy


@st.composite
def trees(draw, max_nodes: int = 9):
    """(parents, rates, domains): a random tree on distinct shuffled int ids (the root is not
    always the smallest), integer rates (exact float sums) with many zeros and ties."""
    n = draw(st.integers(1, max_nodes))
    ids = draw(st.lists(st.integers(0, 999), min_size=n, max_size=n, unique=True))
    parents = {ids[0]: None}
    for i in range(1, n):
        parents[ids[i]] = ids[draw(st.integers(0, i - 1))]
    order = draw(st.permutations(ids))  # the mapping's iteration order must not matter
    parents = {v: parents[v] for v in order}
    rates = {v: draw(st.sampled_from([0, 0, 1, 2, 3, 7, 50, 1000])) for v in ids}
    domains = {v: draw(st.integers(0, 3)) for v in ids}
    return parents, rates, domains


def ancestors(parents, v):
    out = []
    while parents[v] is not None:
        v = parents[v]
        out.append(v)
    return out


def root_of(parents):
    return next(v for v, p in parents.items() if p is None)


def value(parents, rates, plan):
    """Covered rate, straight from the definition: every strict ancestor in the plan."""
    return sum(rates[o] for o in parents if all(a in plan for a in ancestors(parents, o)))


def brute_force(parents, rates, budget):
    """(best value, smallest size reaching it) over every connected root-holding set."""
    root = root_of(parents)
    best, size = value(parents, rates, set()), 0
    if budget == 0:
        return best, 0
    best = -1
    for k in range(1, min(budget, len(parents)) + 1):
        for chosen in itertools.combinations(parents, k):
            s = set(chosen)
            if root in s and all(v == root or parents[v] in s for v in s):
                got = value(parents, rates, s)
                if got > best:
                    best, size = got, k
    return best, size


def connected_with_root(parents, plan):
    return root_of(parents) in plan and all(
        v == root_of(parents) or parents[v] in plan for v in plan
    )


@settings(max_examples=300, deadline=None)
@given(trees(), st.integers(0, 10))
def test_structure_aware_plan_is_optimal_and_smallest(tree, budget) -> None:
    parents, rates, _ = tree
    plan = plan_structure_aware(parents, rates, budget)
    best, size = brute_force(parents, rates, budget)
    assert len(plan) <= budget
    if budget == 0:
        assert plan == frozenset()
    else:
        assert connected_with_root(parents, plan)
    assert value(parents, rates, plan) == best
    assert len(plan) == size  # no smaller set covers as much
    total = sum(rates.values())
    assert fidelity(parents, rates, plan) == pytest.approx(best / total if total else 1.0)


@settings(max_examples=100, deadline=None)
@given(trees(), st.integers(0, 10), st.randoms(use_true_random=False))
def test_plans_do_not_depend_on_mapping_order(tree, budget, rnd) -> None:
    parents, rates, domains = tree
    items = list(parents.items())
    rnd.shuffle(items)
    shuffled = dict(items)
    rates2 = dict(reversed(list(rates.items())))
    assert plan_structure_aware(parents, rates, budget) == plan_structure_aware(
        shuffled, rates2, budget
    )
    assert plan_greedy(parents, rates, budget) == plan_greedy(shuffled, rates2, budget)
    domains2 = dict(reversed(list(domains.items())))
    assert plan_domain_aware(parents, rates, domains, budget) == plan_domain_aware(
        shuffled, rates2, domains2, budget
    )


@settings(max_examples=200, deadline=None)
@given(trees(), st.integers(0, 10), st.booleans())
def test_greedy_takes_the_highest_flows(tree, budget, inner_only) -> None:
    parents, rates, _ = tree
    flow = {v: sum(rates[o] for o in parents if o == v or v in ancestors(parents, o))
            for v in parents}  # fmt: skip
    assert flows(parents, rates) == pytest.approx(flow)
    pool = [v for v in parents if not inner_only or v in parents.values()]
    ranked = sorted(pool, key=lambda v: (-flow[v], len(ancestors(parents, v)), v))
    assert plan_greedy(parents, rates, budget, inner_only=inner_only) == set(ranked[:budget])


@settings(max_examples=200, deadline=None)
@given(trees(), st.sets(st.integers(0, 999)), st.integers(0, 4))
def test_coverage_against_a_direct_computation(tree, replicated, failed) -> None:
    parents, rates, domains = tree
    replicated = {v for v in replicated if v in parents} | set(list(parents)[:1])

    def alive(v):
        return domains[v] != failed

    covered = [
        o
        for o in parents
        if alive(o) and all(alive(a) or a in replicated for a in ancestors(parents, o))
    ]
    total = sum(rates.values())
    want = sum(rates[o] for o in covered) / total if total else 1.0
    assert coverage(parents, rates, domains, replicated, failed) == pytest.approx(want)
    worst, where = worst_domain_coverage(parents, rates, domains, replicated)
    per = {d: coverage(parents, rates, domains, replicated, d) for d in set(domains.values())}
    assert worst == min(per.values()) and per[where] == worst
    assert where == min(d for d in per if per[d] == worst)


def test_examples_and_edge_cases() -> None:
    # a root 0 with an inner node 1 (children 3, 4) and a leaf 2; 3 and 4 carry the input
    parents = {0: None, 1: 0, 2: 0, 3: 1, 4: 1}
    rates = {0: 1, 1: 1, 2: 5, 3: 10, 4: 10}
    assert plan_structure_aware(parents, rates, 0) == frozenset()
    assert plan_structure_aware(parents, rates, 1) == {0}
    assert plan_structure_aware(parents, rates, 2) == {0, 1}
    assert plan_structure_aware(parents, rates, 5) == {0, 1}  # leaves add nothing
    assert fidelity(parents, rates, {0, 1}) == 1.0
    assert fidelity(parents, rates, {0}) == pytest.approx(7 / 27)
    # greedy by flow: 0 (27), 1 (21), then the leaves 3 and 4 (10 each; 3 first), not 2 (5)
    assert plan_greedy(parents, rates, 3) == {0, 1, 3}
    assert plan_greedy(parents, rates, 3, inner_only=True) == {0, 1}
    domains = {0: "a", 1: "b", 2: "a", 3: "c", 4: "c"}
    assert coverage(parents, rates, domains, set(), "b") == pytest.approx(6 / 27)
    assert coverage(parents, rates, domains, {1}, "b") == pytest.approx(26 / 27)
    assert worst_domain_coverage(parents, rates, domains, {0}) == (pytest.approx(6 / 27), "b")
    assert worst_domain_coverage(parents, rates, {}, {0}) == (1.0, None)
    assert coverage(parents, {}, domains, set(), "a") == 1.0  # no input: nothing lost
    for bad in ({0: None, 1: None}, {0: 1, 1: 0}, {0: None, 1: 7}, {}):
        with pytest.raises(ValueError):
            plan_structure_aware(bad, {}, 1)
    with pytest.raises(ValueError):
        plan_structure_aware(parents, {3: -1.0}, 1)
    with pytest.raises(ValueError):
        plan_greedy(parents, rates, -1)


def test_a_deep_chain_needs_no_recursion() -> None:
    parents = {i: (i - 1 if i else None) for i in range(5000)}
    rates = dict.fromkeys(parents, 1.0)
    assert plan_structure_aware(parents, rates, 3) == {0, 1, 2}


@settings(max_examples=100, deadline=None)
@given(
    st.dictionaries(st.integers(0, 9), st.dictionaries(st.integers(0, 20), st.integers(0, 50)),
                    max_size=6),
    st.sets(st.integers(0, 9)),
    st.integers(1, 6),
)  # fmt: skip
def test_topk_quality_against_counters(counts, covered, k) -> None:
    final = sum((Counter(c) for c in counts.values()), Counter())
    tentative = sum((Counter(c) for o, c in counts.items() if o in covered), Counter())
    final = {key: n for key, n in final.items() if n}  # Counter sums drop zero counts

    def top(c):
        return {key for key, _ in sorted(c.items(), key=lambda kv: (-kv[1], kv[0]))[:k]}

    got = topk_quality(counts, covered, k)
    want = len(top(tentative) & top(final)) / min(k, len(final)) if final else 1.0
    assert got == pytest.approx(want)


def test_observed_topk_accuracy_examples() -> None:
    final = {"a": 10, "b": 9, "c": 8, "d": 1}
    assert observed_topk_accuracy(final, final, 2) == 1.0
    assert observed_topk_accuracy({"a": 3, "c": 5}, final, 2) == 0.5
    assert observed_topk_accuracy({}, final, 3) == 0.0
    assert observed_topk_accuracy({}, {}, 3) == 1.0
    assert observed_topk_accuracy({"a": 1}, {"a": 1}, 5) == 1.0  # fewer keys than k
    with pytest.raises(ValueError):
        observed_topk_accuracy(final, final, 0)


def star_of_stars(fan: int) -> dict[int, int | None]:
    """Root 0; inner nodes 1..fan under it; fan leaves under each inner node."""
    parents: dict[int, int | None] = {0: None}
    for i in range(1, fan + 1):
        parents[i] = 0
        for j in range(fan):
            parents[fan + 1 + (i - 1) * fan + j] = i
    return parents


def test_planner_hysteresis() -> None:
    parents = star_of_stars(4)
    rnd = random.Random(7)
    base = {v: (100.0 if parents[v] == 1 else 10.0) for v in parents}
    planner = ReplicaPlanner(2)
    assert planner.update(parents, base) and planner.plan == {0, 1}
    # noise: each rate within ±10 %: less than 25 % of the total moves, no re-plan at all
    for _ in range(50):
        noisy = {v: r * rnd.uniform(0.9, 1.1) for v, r in base.items()}
        assert not planner.update(parents, noisy)
    assert planner.replans == 1 and planner.plan == {0, 1}
    # a large move that barely changes the best choice: re-planned, not adopted (gain < 5 %)
    shifted = {v: (100.0 if parents[v] in (1, 2) else 10.0) for v in parents}
    shifted[parents_of(parents, 2)[0]] += 1.0  # node 2's subtree now a hair better
    assert not planner.update(parents, shifted)
    assert planner.replans == 2 and planner.plan == {0, 1}
    # a large move with a clear gain: adopted
    moved = {v: (100.0 if parents[v] == 3 else 1.0) for v in parents}
    assert planner.update(parents, moved) and planner.plan == {0, 3}
    # a new tree always re-plans (4's children moved under 2)
    reshaped = {v: (2 if p == 4 else p) for v, p in parents.items()}
    planner.update(reshaped, moved)
    assert planner.replans == 4 and planner.plan == plan_structure_aware(reshaped, moved, 2)
    # a new budget too
    planner.budget = 3
    assert planner.update(reshaped, moved) and len(planner.plan) == 3


def parents_of(parents, v):
    return [c for c, p in parents.items() if p == v]


@settings(max_examples=60, deadline=None)
@given(trees(max_nodes=12), st.integers(1, 5), st.lists(st.floats(0.95, 1.05), min_size=12,
       max_size=12), st.integers(1, 20))  # fmt: skip
def test_small_noise_never_flaps_the_plan(tree, budget, factors, rounds) -> None:
    """Rates jittered by at most ±5 % move at most 5 % of the total: below the 25 % drift
    threshold, the plan chosen first stays, round after round."""
    parents, rates, _ = tree
    planner = ReplicaPlanner(budget)
    planner.update(parents, rates)
    first = planner.plan
    for r in range(rounds):
        noisy = {v: x * factors[(i + r) % len(factors)] for i, (v, x) in enumerate(rates.items())}
        assert not planner.update(parents, noisy)
    assert planner.plan == first and planner.replans == 1


@settings(max_examples=150, deadline=None)
@given(trees(), st.integers(0, 10), st.lists(st.booleans(), min_size=9, max_size=9))
def test_the_plan_guarantee_holds_for_any_failure_that_spares_the_replicas(
    tree, budget, mask
) -> None:
    """Whatever agents fail (replicas live elsewhere), every live origin the plan covers still
    reaches the root: coverage ≥ the planned origins' live share."""
    parents, rates, _ = tree
    failed = {v for v, down in zip(parents, mask, strict=False) if down}
    plan = plan_structure_aware(parents, rates, budget)
    domains = {v: ("down" if v in failed else "up") for v in parents}
    kept = planned_origins(parents, plan) - failed
    total = sum(rates.values())
    floor = sum(rates[o] for o in kept) / total if total else 1.0
    assert coverage(parents, rates, domains, plan, "down") >= floor - 1e-12


@settings(max_examples=200, deadline=None)
@given(trees(max_nodes=8), st.integers(0, 8))
def test_domain_aware_plan_is_the_best_worst_domain_then_mean(tree, budget) -> None:
    """Against every subset of at most ``budget`` nodes: the best worst-domain coverage, and
    among the sets reaching it the best sum over the domains."""
    parents, rates, domains = tree
    plan = plan_domain_aware(parents, rates, domains, budget)
    assert len(plan) <= budget

    def score(chosen):
        per = domain_coverages(parents, rates, domains, chosen)
        return min(per.values()), sum(per.values())

    best = max(
        score(set(chosen))
        for k in range(min(budget, len(parents)) + 1)
        for chosen in itertools.combinations(parents, k)
    )
    got = score(plan)
    assert got[0] == pytest.approx(best[0])
    assert got[1] == pytest.approx(best[1])


def test_planner_with_domains_plans_for_the_worst_domain() -> None:
    parents = star_of_stars(3)  # root 0, inner 1-3, leaves 4-12
    rates = {v: (50.0 if parents[v] == 2 else 5.0) for v in parents}
    domains = {v: ("r0" if v in (0, 2) else "r1") for v in parents}
    planner = ReplicaPlanner(2)
    assert planner.update(parents, rates, domains)
    assert planner.plan == plan_domain_aware(parents, rates, domains, 2) == {0, 2}
    assert not planner.update(parents, rates, domains)  # nothing moved
    moved = {v: (50.0 if parents[v] == 3 else 5.0) for v in parents}
    planner.update(parents, moved, {**domains, 3: "r0"})  # new domains: re-planned
    assert planner.replans == 2
    assert planner.plan == plan_domain_aware(parents, moved, {**domains, 3: "r0"}, 2)
