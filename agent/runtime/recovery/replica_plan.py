"""Budgeted replicas (PPA): which R tree nodes a job replicates actively, and what that buys.

Contract (pure functions and one small state holder; no I/O, no asyncio, no clock;
``docs/fault-tolerance.md``, "Budgeted replicas: the plan (PPA)"). A job's tree is given as
``parents``: node → its parent (the root's parent is None; nodes are hashable ids). Every node
is an agent and an origin: ``rates`` gives each node's **own** input rate (records/s it reads
itself, a missing node reads 0; rates must be finite and ≥ 0), ``domains`` each node's failure
domain (``--domain``). A tree that is not one tree (no root, several roots, a parent that is
not a node, a cycle) raises ValueError, as do a negative budget and a bad rate.

* :func:`plan_structure_aware` — PPA's plan on a tree: a **connected** set of at most
  ``budget`` nodes **containing the root** that maximises the covered input rate, where an
  origin is covered iff every strict ancestor of it is in the set: its input still reaches the
  root when the merging of every unreplicated node fails (PPA's worst correlated failure: a
  failed task in every path). An origin's own input is its own: no replica reads a leaf's
  logs, so a dead leaf is absent whatever the plan. Exact: a tree-knapsack dynamic programme,
  O(n·R) time for n nodes and budget R (each child merge multiplies two tables capped at
  the subtrees' sizes and at R: the classic tree-knapsack bound), about 10 ms for n = 1,280
  and R = 64. Budget 0 → the empty set; budget ≥ 1 always includes the root. Among optimal
  sets it returns one of the smallest (budget is never spent
  on a node that adds nothing and leads nowhere, such as a leaf: the plan may be smaller than
  the budget), ties resolved in a fixed order (children in ascending id order), so the plan
  depends on the tree and the rates only, never on the mappings' iteration order.
* :func:`plan_greedy` — the baseline, PPA's "Greedy" (its Algorithm 2) on a tree: rank every
  node by the covered rate lost if it alone failed - its **flow**, its subtree's total rate,
  its own input included - and take the first ``budget``; ties go to the shallower node,
  then the smaller id (the kindest tie rule for greedy: a parent comes before a child of equal
  flow). It does not ask what a replica adds, nor see that a leaf's replica cannot help; its
  picks are connected anyway (a parent's flow is never below its child's). :func:`flows`
  gives the flows. ``inner_only=True`` ranks only the nodes with children: a stronger
  baseline, reported next to PPA's.
* :func:`plan_domain_aware` — the plan for the failure the issue names: at most ``budget``
  nodes that maximise the **worst single-domain** :func:`coverage` (every agent of one
  domain fails, replicas survive), then the sum of the domains' coverages. Not PPA's
  objective: PPA's worst case fails every unreplicated node, while one rack's failure leaves
  the other racks' inner nodes alive, so a plan need not be connected here. Exact: a node
  fails only with its own domain, so each domain gets its own tree knapsack over the forest
  of its nodes (best coverage per replica count), then the highest floor all domains reach
  within the budget (binary search), then the best sum above that floor (a knapsack over
  the domains): O(n·(D + R) + D·R²) for D domains.
* :func:`fidelity` — PPA's output fidelity of a plan: the share of the total rate its plan
  covers (the planner's objective over the total); :func:`planned_origins` — those origins.
* :func:`coverage` — the share of the total rate still reaching the root when every agent of
  ``failed_domain`` fails: an origin counts iff it is alive (not in that domain) and each
  strict ancestor is alive or replicated (a replica is assumed placed in another domain, so it
  survives). No input at all: 1.0 (nothing is lost). :func:`covered_origins` — those
  origins; :func:`domain_coverages` — the coverage per domain named in ``domains``;
  :func:`worst_domain_coverage` — their minimum, with the domain that attains it (ties: the
  smallest domain in sorted order).
* :func:`topk_quality` — PPA's top-k accuracy of the tentative output: the top k of the
  covered origins' key counts against the top k of all origins'
  (:func:`agent.runtime.results.quality.observed_topk_accuracy`).
* :class:`ReplicaPlanner` — keeps a job's current plan (domain-aware when given domains,
  else PPA's) and re-plans when the tree, the domains or the budget change, or when the rates
  drift (hysteresis: see the class). :class:`Tree` — the checked tree all of these read.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from agent.runtime.results.quality import observed_topk_accuracy

Node = Hashable

DRIFT = 0.25  # share of the total rate that must move before a re-plan is considered
GAIN = 0.05  # relative objective gain a new plan needs to replace a valid current one


def _ordered(items: Iterable[Any]) -> list[Any]:
    """``items`` in a fixed order: their natural order, or by repr where they do not compare."""
    items = list(items)
    try:
        return sorted(items)
    except TypeError:
        return sorted(items, key=repr)


@dataclass(frozen=True)
class Tree:
    """A checked tree: its root, each node's children (in id order) and a top-down order."""

    root: Node
    parent: Mapping[Node, Node | None]
    children: Mapping[Node, tuple[Node, ...]]
    top_down: tuple[Node, ...]

    @classmethod
    def of(cls, parents: Mapping[Node, Node | None]) -> Tree:
        """The tree of ``parents`` (ValueError if it is not one tree)."""
        roots = [v for v, p in parents.items() if p is None]
        if len(roots) != 1:
            raise ValueError(f"a tree has exactly one root, not {len(roots)}")
        kids: dict[Node, list[Node]] = {v: [] for v in parents}
        for v, p in parents.items():
            if p is not None:
                if p not in kids:
                    raise ValueError(f"the parent {p!r} of {v!r} is not a node of the tree")
                kids[p].append(v)
        children = {v: tuple(_ordered(c)) for v, c in kids.items()}
        order = [roots[0]]
        for v in order:  # breadth first: grows while it is read
            order.extend(children[v])
        if len(order) != len(parents):
            raise ValueError("the parents do not form one tree (a cycle off the root)")
        return cls(roots[0], dict(parents), children, tuple(order))


def _rates(tree: Tree, rates: Mapping[Node, float]) -> dict[Node, float]:
    out = {v: float(rates.get(v, 0.0)) for v in tree.top_down}
    for v, r in out.items():
        if not math.isfinite(r) or r < 0:
            raise ValueError(f"the rate of {v!r} must be finite and >= 0, not {r!r}")
    return out


def _check_budget(budget: int) -> None:
    if budget < 0:
        raise ValueError("the budget must be >= 0")


def _flows(tree: Tree, own: Mapping[Node, float]) -> dict[Node, float]:
    flow = dict(own)
    for v in reversed(tree.top_down):
        for c in tree.children[v]:
            flow[v] += flow[c]
    return flow


def flows(parents: Mapping[Node, Node | None], rates: Mapping[Node, float]) -> dict[Node, float]:
    """Each node's flow: its subtree's total input rate (its own included)."""
    tree = Tree.of(parents)
    return _flows(tree, _rates(tree, rates))


class _Knapsack:
    """The tree-knapsack table of ``tree`` with per-node ``gain`` ≥ 0 and sets of at most
    ``budget`` nodes: ``best[j]`` is the best total gain of a connected set of exactly j
    nodes containing the root (j ≥ 1; ``best[0]`` = 0); :meth:`rebuild` gives that set."""

    def __init__(self, tree: Tree, gain: Mapping[Node, float], budget: int) -> None:
        self.tree = tree
        # table[v][j]: the best gain of a connected set of exactly j nodes topped by v inside
        # v's subtree (j = 0: nothing). share[v]: per child merge, the share given to that
        # child for each total, to rebuild the set.
        table: dict[Node, list[float]] = {}
        self.share: dict[Node, list[list[int]]] = {}
        for v in reversed(tree.top_down):
            acc = [gain[v]]  # acc[i]: v plus i nodes below it
            steps: list[list[int]] = []
            for c in tree.children[v]:
                sub = table.pop(c)
                size = min(budget - 1, len(acc) - 1 + len(sub) - 1)
                merged = [-1.0] * (size + 1)
                pick = [0] * (size + 1)
                for i, a in enumerate(acc):
                    for b in range(min(len(sub), size - i + 1)):
                        value = a + sub[b]
                        if value > merged[i + b]:  # strict: the earlier child keeps less on ties
                            merged[i + b] = value
                            pick[i + b] = b
                acc = merged
                steps.append(pick)
            table[v] = [0.0, *acc]
            self.share[v] = steps
        self.best = table[tree.root]

    def rebuild(self, size: int) -> set[Node]:
        """The set behind ``best[size]``."""
        plan: set[Node] = set()
        stack = [(self.tree.root, size)]
        while stack:
            v, j = stack.pop()
            if j == 0:
                continue
            plan.add(v)
            rest = j - 1
            for c, pick in reversed(list(zip(self.tree.children[v], self.share[v], strict=True))):
                b = pick[rest]
                stack.append((c, b))
                rest -= b
        return plan


def plan_structure_aware(
    parents: Mapping[Node, Node | None], rates: Mapping[Node, float], budget: int
) -> frozenset[Node]:
    """PPA's optimal plan on a tree (module contract)."""
    _check_budget(budget)
    tree = Tree.of(parents)
    own = _rates(tree, rates)
    if budget == 0:
        return frozenset()
    # Replicating v covers exactly its children's own inputs (the root's own input is covered
    # by any plan): a connected root-containing set's value is the sum of these gains.
    gain = {v: sum(own[c] for c in tree.children[v]) for v in tree.top_down}
    table = _Knapsack(tree, gain, budget)
    top = table.best
    size = max(range(1, len(top)), key=lambda j: (top[j], -j))  # the root, then fewest nodes
    return frozenset(table.rebuild(size))


def plan_greedy(
    parents: Mapping[Node, Node | None],
    rates: Mapping[Node, float],
    budget: int,
    *,
    inner_only: bool = False,
) -> frozenset[Node]:
    """The greedy baseline (module contract): the ``budget`` nodes of highest flow."""
    _check_budget(budget)
    tree = Tree.of(parents)
    flow = _flows(tree, _rates(tree, rates))
    depth = {tree.root: 0}
    for v in tree.top_down:
        for c in tree.children[v]:
            depth[c] = depth[v] + 1
    rank = {v: i for i, v in enumerate(_ordered(tree.top_down))}
    pool = [v for v in tree.top_down if tree.children[v] or not inner_only]
    pool.sort(key=lambda v: (-flow[v], depth[v], rank[v]))
    return frozenset(pool[:budget])


class _Top:
    """The virtual root above the failed nodes' forest (never a caller's node id)."""

    def __repr__(self) -> str:
        return "<top>"


def _domain_table(
    tree: Tree, own: Mapping[Node, float], failed: set[Node], budget: int
) -> tuple[list[float], _Knapsack]:
    """Per replica count b (0 ≤ b ≤ min(budget, |failed|)): the best covered rate when the
    ``failed`` nodes fail and b of them are replicated (made non-decreasing in b), and the
    table to rebuild the sets from. An alive origin is covered iff every failed strict
    ancestor is replicated: those ancestors are its chain in the forest the failed nodes form
    (each under its nearest failed strict ancestor), so the replicated set must be closed
    upward in that forest and the problem is the tree knapsack over it, under a virtual root
    that holds the origins without a failed ancestor."""
    top = _Top()
    above: dict[Node, Node] = {tree.root: top}  # nearest failed strict ancestor (or top)
    for v in tree.top_down:
        for c in tree.children[v]:
            above[c] = v if v in failed else above[v]
    forest: dict[Node, Node | None] = {top: None} | {v: above[v] for v in tree.top_down
                                                     if v in failed}  # fmt: skip
    gain: dict[Node, float] = dict.fromkeys(forest, 0.0)
    for o in tree.top_down:
        if o not in failed:
            gain[above[o]] += own[o]
    table = _Knapsack(Tree.of(forest), gain, min(budget, len(failed)) + 1)
    curve = list(itertools.accumulate(table.best[1:], max))
    return curve, table


def plan_domain_aware(
    parents: Mapping[Node, Node | None],
    rates: Mapping[Node, float],
    domains: Mapping[Node, Hashable],
    budget: int,
) -> frozenset[Node]:
    """The plan of at most ``budget`` nodes that maximises the worst single-domain
    :func:`coverage` over the domains named in ``domains`` (module contract), then the sum
    (mean) of the domains' coverages."""
    _check_budget(budget)
    tree = Tree.of(parents)
    own = _rates(tree, rates)
    names = _ordered(set(domains.values()))
    if budget == 0 or not names:
        return frozenset()
    # A node only fails with its own domain, so replicas in domain d only change d's coverage:
    # each domain has its own curve (best coverage per replica count), and the budget is
    # split between the domains.
    curves: list[list[float]] = []
    tables: list[_Knapsack] = []
    for d in names:
        failed = {v for v in tree.top_down if domains.get(v) == d}
        curve, table = _domain_table(tree, own, failed, budget)
        curves.append(curve)
        tables.append(table)

    def need(curve: list[float], floor: float) -> int | None:
        return next((b for b, value in enumerate(curve) if value >= floor), None)

    def cost(floor: float) -> int | None:
        needs = [need(c, floor) for c in curves]
        return None if any(n is None for n in needs) else sum(needs)  # type: ignore[arg-type]

    # the highest floor every domain can reach within the budget (feasibility is monotone)
    floors = sorted({v for c in curves for v in c})
    lo, hi = 0, len(floors) - 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        spent = cost(floors[mid])
        lo, hi = (mid, hi) if spent is not None and spent <= budget else (lo, mid - 1)
    floor = floors[lo]
    # then the best sum over the domains, each at or above the floor: a knapsack over domains
    # (ties: the smaller count); plan[r] = (sum, counts) using r replicas
    plans: dict[int, tuple[float, list[int]]] = {0: (0.0, [])}
    for curve in curves:
        first = need(curve, floor) or 0
        step: dict[int, tuple[float, list[int]]] = {}
        for used, (total, counts) in plans.items():
            for b in range(first, min(len(curve) - 1, budget - used) + 1):
                entry = (total + curve[b], [*counts, b])
                if used + b not in step or entry[0] > step[used + b][0]:
                    step[used + b] = entry
        plans = step
    counts = max(sorted(plans.items()), key=lambda kv: kv[1][0])[1][1]
    chosen: set[Node] = set()
    for curve, table, b in zip(curves, tables, counts, strict=True):
        size = curve.index(curve[b])  # the fewest replicas reaching that coverage
        chosen |= table.rebuild(size + 1) - {table.tree.root}
    return frozenset(chosen)


def _share(own: Mapping[Node, float], counted: Iterable[Node]) -> float:
    total = sum(own.values())
    if total <= 0:
        return 1.0
    return sum(own[o] for o in counted) / total


def _reaching(tree: Tree, forwards: Callable[[Node], bool]) -> dict[Node, bool]:
    """Per node: whether every strict ancestor of it ``forwards`` (its input reaches the root
    if it is itself alive)."""
    reach = {tree.root: True}
    for v in tree.top_down:
        for c in tree.children[v]:
            reach[c] = reach[v] and forwards(v)
    return reach


def planned_origins(
    parents: Mapping[Node, Node | None], replicated: Iterable[Node]
) -> frozenset[Node]:
    """The origins a plan covers under PPA's worst case: those whose strict ancestors are all
    replicated (the set whose rate share :func:`fidelity` is)."""
    tree = Tree.of(parents)
    chosen = set(replicated)
    return frozenset(v for v, ok in _reaching(tree, chosen.__contains__).items() if ok)


def fidelity(
    parents: Mapping[Node, Node | None], rates: Mapping[Node, float], replicated: Iterable[Node]
) -> float:
    """PPA's output fidelity (module contract): the share of the rate whose strict ancestors
    are all replicated."""
    own = _rates(Tree.of(parents), rates)
    return _share(own, planned_origins(parents, replicated))


def _covered(
    tree: Tree, domains: Mapping[Node, Hashable], chosen: frozenset[Node], failed: Hashable
) -> frozenset[Node]:
    def alive(v: Node) -> bool:
        return domains.get(v) != failed

    reach = _reaching(tree, lambda v: alive(v) or v in chosen)
    return frozenset(v for v in tree.top_down if reach[v] and alive(v))


def covered_origins(
    parents: Mapping[Node, Node | None],
    domains: Mapping[Node, Hashable],
    replicated: Iterable[Node],
    failed_domain: Hashable,
) -> frozenset[Node]:
    """The origins whose input reaches the root when ``failed_domain`` fails: alive, and each
    strict ancestor alive or replicated (the set whose rate share :func:`coverage` is)."""
    return _covered(Tree.of(parents), domains, frozenset(replicated), failed_domain)


def coverage(
    parents: Mapping[Node, Node | None],
    rates: Mapping[Node, float],
    domains: Mapping[Node, Hashable],
    replicated: Iterable[Node],
    failed_domain: Hashable,
) -> float:
    """The covered share of the rate when ``failed_domain`` fails (module contract)."""
    tree = Tree.of(parents)
    covered = _covered(tree, domains, frozenset(replicated), failed_domain)
    return _share(_rates(tree, rates), covered)


def domain_coverages(
    parents: Mapping[Node, Node | None],
    rates: Mapping[Node, float],
    domains: Mapping[Node, Hashable],
    replicated: Iterable[Node],
) -> dict[Hashable, float]:
    """:func:`coverage` for each domain named in ``domains``, in sorted domain order."""
    tree = Tree.of(parents)
    own = _rates(tree, rates)
    chosen = frozenset(replicated)
    names = _ordered(set(domains.values()))
    return {d: _share(own, _covered(tree, domains, chosen, d)) for d in names}


def worst_domain_coverage(
    parents: Mapping[Node, Node | None],
    rates: Mapping[Node, float],
    domains: Mapping[Node, Hashable],
    replicated: Iterable[Node],
) -> tuple[float, Hashable | None]:
    """The lowest :func:`coverage` over the domains, and that domain ((1.0, None): none)."""
    per = domain_coverages(parents, rates, domains, replicated)
    if not per:
        return 1.0, None
    worst = min(per, key=per.__getitem__)  # first minimum in sorted domain order
    return per[worst], worst


def topk_quality(
    counts: Mapping[Node, Mapping[Hashable, int]], covered: Iterable[Node], k: int
) -> float:
    """|tentative top-k ∩ final top-k| / k for a top-k over ``counts`` (origin → key → count):
    the tentative result sums the ``covered`` origins, the final one all of them (counts must
    be ≥ 0; a zero count is no row)."""
    final: dict[Hashable, int] = {}
    tentative: dict[Hashable, int] = {}
    chosen = set(covered)
    for origin, keys in counts.items():
        for key, n in keys.items():
            if n <= 0:
                continue  # a key counted zero times is not in either result
            final[key] = final.get(key, 0) + n
            if origin in chosen:
                tentative[key] = tentative.get(key, 0) + n
    return observed_topk_accuracy(tentative, final, k)


def _drift(before: Mapping[Node, float], after: Mapping[Node, float]) -> float:
    """The share of the rate that moved: Σ|after − before| / Σ before (∞ from nothing)."""
    nodes = set(before) | set(after)
    moved = sum(abs(after.get(v, 0.0) - before.get(v, 0.0)) for v in nodes)
    base = sum(before.values())
    if base <= 0:
        return 0.0 if moved == 0 else math.inf
    return moved / base


class ReplicaPlanner:
    """A job's current plan, re-planned only when it is worth it.

    :meth:`update` with the current tree and rates, and the agents' domains or None:

    * with domains, the plan is :func:`plan_domain_aware` and its value the worst domain's
      coverage; without, :func:`plan_structure_aware` and its :func:`fidelity`;
    * a new or changed tree (any edge), new domains or a new budget always re-plan: the plan
      adopted is optimal for the new input (the current one may not even be valid on it);
    * otherwise the rates are compared with those of the last re-plan: while less than
      ``drift`` (default :data:`DRIFT`, 25 %) of the total rate has moved (Σ|r − r₀| / Σ r₀)
      the plan stays, whatever the noise;
    * past that, a new optimal plan replaces the current one only if its value beats the
      current plan's under the new rates by more than ``gain`` (default :data:`GAIN`, 5 %)
      of the current value; either way the new rates become the reference.

    So noisy rates never flap the plan: a change needs a large move of the rates *and* a
    clear gain. Each re-plan is one planner call."""

    def __init__(self, budget: int, *, drift: float = DRIFT, gain: float = GAIN) -> None:
        _check_budget(budget)
        self.budget = budget
        self.drift = drift
        self.gain = gain
        self.plan: frozenset[Node] = frozenset()
        self.replans = 0  # plans computed
        self.changes = 0  # plans adopted that differ from the one before
        self._seen: tuple[Any, ...] | None = None  # (parents, domains, budget) last planned for
        self._rates: dict[Node, float] = {}

    def update(
        self,
        parents: Mapping[Node, Node | None],
        rates: Mapping[Node, float],
        domains: Mapping[Node, Hashable] | None = None,
    ) -> bool:
        """Take the current tree, rates and domains; True when the plan changed."""
        _check_budget(self.budget)
        now = _rates(Tree.of(parents), rates)
        old = self.plan
        seen = (dict(parents), None if domains is None else dict(domains), self.budget)
        reshaped = self._seen != seen
        if not reshaped and _drift(self._rates, now) <= self.drift:
            return False
        if domains is None:
            fresh = plan_structure_aware(parents, now, self.budget)
        else:
            fresh = plan_domain_aware(parents, now, domains, self.budget)
        self.replans += 1
        if reshaped:  # the current plan may not even be connected on the new tree
            self.plan = fresh
        else:

            def value(plan: frozenset[Node]) -> float:
                if domains is None:
                    return fidelity(parents, now, plan)
                return worst_domain_coverage(parents, now, domains, plan)[0]

            if value(fresh) > value(old) * (1 + self.gain):
                self.plan = fresh
        self._seen, self._rates = seen, now
        changed = self.plan != old
        self.changes += changed
        return changed
