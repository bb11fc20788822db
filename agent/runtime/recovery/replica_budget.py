"""Budgeted replicas on a running master: the tree it plans on, the rates, the plan.

Contract (``docs/fault-tolerance.md``, "Budgeted replicas"; pure state, no I/O: the caller
gives the clock). For a job whose ``fault_tolerance`` is ``{"policy": "budget",
"replica_budget": R}``, the master of each tree keeps one :class:`BudgetPlans`:

* **The tree.** Every position holder (an inner node: an agent with children) reports its
  parent, its failure domain and its children's ids and domains to the master about every
  two seconds (:meth:`BudgetPlans.report`); the master adds its own children. Reports older
  than :data:`REPORT_SECONDS` are dropped (a holder gone, or no longer a holder). A node named
  by two reports is taken from the newer. Only nodes whose chain of parents reaches the
  master are planned on (a stale report may name a parent that moved: its node waits for the
  next round).
* **The rates.** Each stored epoch's lineage counts each origin's records
  (:meth:`BudgetPlans.observe`); the rate is an exponentially weighted mean per epoch
  (weight :data:`RATE_WEIGHT`) - the input each origin feeds the tree.
* **The plan** (:meth:`BudgetPlans.plan`): :class:`~agent.runtime.recovery.replica_plan.
  ReplicaPlanner` over that tree - the domain-aware plan (worst single-domain coverage) when
  the agents span more than one ``--domain``, PPA's structure-aware plan otherwise (with one
  domain the worst correlated failure is every agent: PPA's worst case, every unreplicated
  node failing) - with the planner's hysteresis, so noisy rates never flap it. The root is
  always in it (budget >= 1). A tree the reports do not make into one tree (a cycle in stale
  reports) keeps the previous plan (counted ``bad_trees``).

Bounds: at most :data:`MAX_REPORTS` holders' reports per tree, each naming at most
:data:`MAX_CHILDREN` children; rates of at most as many origins as the tree has nodes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agent.runtime.recovery.replica_plan import ReplicaPlanner

REPORT_SECONDS = 10.0  # a holder's report older than this is dropped
RATE_WEIGHT = 0.2  # weight of the newest epoch in an origin's rate
MAX_REPORTS = 4096
MAX_CHILDREN = 4096


class BudgetPlans:
    """One tree's budgeted-replica plan at its master (module contract)."""

    def __init__(self, budget: int) -> None:
        self.planner = ReplicaPlanner(budget)
        self.reports: dict[int, tuple[int | None, str, dict[int, str], float]] = {}
        self.rates: dict[int, float] = {}
        self.bad_trees = 0
        self.refused = 0

    def report(
        self,
        holder: int,
        parent: int | None,
        domain: str,
        children: Mapping[int, str],
        now: float,
    ) -> bool:
        """A holder's report (False: refused, past the bounds)."""
        if len(children) > MAX_CHILDREN or (
            holder not in self.reports and len(self.reports) >= MAX_REPORTS
        ):
            self.refused += 1
            return False
        self.reports[holder] = (parent, domain, dict(children), now)
        return True

    def observe(self, records: Mapping[int, int] | None) -> None:
        """One stored epoch's records per origin (None: counts unknown, nothing learnt)."""
        if records is None:
            return
        for origin in set(self.rates) | set(records):
            seen = float(records.get(origin, 0))
            before = self.rates.get(origin)
            self.rates[origin] = seen if before is None else before + RATE_WEIGHT * (seen - before)

    def tree(
        self, me: int, domain: str, children: Mapping[int, str], now: float
    ) -> tuple[dict[int, int | None], dict[int, str]]:
        """The tree as the fresh reports and the master's own children draw it: (parents,
        domains) of the nodes whose parent chain reaches the master."""
        self.reports = {
            h: r for h, r in self.reports.items() if now - r[3] <= REPORT_SECONDS and h != me
        }
        parents: dict[int, int | None] = {}
        domains: dict[int, str] = {me: domain}
        placed_at: dict[int, float] = {}
        for holder, (parent, dom, kids, at) in sorted(self.reports.items(), key=lambda x: x[1][3]):
            if parent is None:
                continue  # a holder with no parent is not below this master
            domains[holder] = dom
            parents[holder] = parent
            for kid, kid_domain in kids.items():
                if placed_at.get(kid, -1.0) <= at:  # the newer report wins
                    placed_at[kid] = at
                    domains.setdefault(kid, kid_domain)
                    if kid not in self.reports:
                        parents[kid] = holder
        for kid, kid_domain in children.items():
            parents[kid] = me
            domains[kid] = kid_domain
        parents[me] = None
        reached: dict[int, int | None] = {}
        for node in parents:
            chain, at = [], node
            while at is not None and at not in reached and at not in chain and at in parents:
                chain.append(at)
                at = parents[at]
            if (at is None and chain[-1] == me) or (at is not None and at in reached):
                for n in chain:
                    reached[n] = parents[n]
        return reached, {n: domains.get(n, "default") for n in reached}

    def plan(
        self, me: int, domain: str, children: Mapping[int, str], budget: int, now: float
    ) -> frozenset[int]:
        """The current plan (the root always in it); re-planned when worth it."""
        parents, domains = self.tree(me, domain, children, now)
        self.planner.budget = budget
        rates = {n: self.rates.get(n, 0.0) for n in parents}
        several = len(set(domains.values())) > 1
        try:
            self.planner.update(parents, rates, domains if several else None)
        except ValueError:
            self.bad_trees += 1
        return frozenset(self.planner.plan) | {me}

    def status(self) -> dict[str, Any]:
        return {
            "budget": self.planner.budget,
            "plan": sorted(format(n, "x") for n in self.planner.plan),
            "reports": len(self.reports),
            "replans": self.planner.replans,
            "changes": self.planner.changes,
            "bad_trees": self.bad_trees,
            "refused": self.refused,
        }
