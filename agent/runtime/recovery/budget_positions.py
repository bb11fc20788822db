"""Budgeted replicas on a running agent: holders report their place in the tree, the master
plans, members learn the plan (the plan itself is
:class:`~agent.runtime.recovery.replica_budget.BudgetPlans`, pure state).

Contract (``docs/fault-tolerance.md``, "Budgeted replicas: the running policy"), for a job
whose spec's ``fault_tolerance`` is ``{"policy": "budget", "replica_budget": R}``;
:mod:`agent.runtime.recovery.active_replicas` calls in here and replicates the planned
positions only.

* **As inner holder** (:meth:`BudgetPositions.report_place`): its parent, its failure domain
  and its children's ids and domains, to the master (``POST /agent/v1/position/report``)
  when they changed or every ``ANNOUNCE_SECONDS``; a failed report is sent again next round.
* **As master** (:meth:`report`, :meth:`observe`, :meth:`plan`): the reports and each stored
  epoch's records per origin (the rates) feed the tree's ``BudgetPlans``; the plan goes down
  with the root's ``replicas`` multicast.
* **As member** (:meth:`heard`, :meth:`planned`): the plan as the master multicast it.

Bounds: one ``BudgetPlans`` per tree this agent masters (its own bounds), one plan and one
last report per tree.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Protocol

from agent.runtime.recovery.replica_budget import BudgetPlans
from agent.runtime.services import NetworkService, Spawner
from srt.dataplane.lineage import Lineage, records_of
from srt.errors import Reject, RetryLater

log = logging.getLogger(__name__)

REPORT_PATH = "/agent/v1/position/report"


class BudgetHost(Protocol):
    """The job as budgeted replicas see it (a part of ``ReplicaHost``)."""

    name: str

    @property
    def spec(self) -> Any: ...

    def is_root(self, tid: int) -> bool: ...

    def child_domains(self, tid: int) -> dict[int, str]:
        """This agent's tree children in ``tid`` and their failure domains."""
        ...

    async def master_url(self, tid: int) -> str: ...

    def count(self, what: str, n: int = 1) -> None: ...


class BudgetPositions:
    """The budget policy's side of one job on one agent (module contract)."""

    def __init__(
        self, host: BudgetHost, network: NetworkService, tasks: Spawner, every: float
    ) -> None:
        self.host = host
        self.network = network
        self.tasks = tasks
        self.every = every  # seconds between unchanged reports
        #: the plan per tree (as master: made here; elsewhere: as the master said)
        self.plans: dict[int, frozenset[int]] = {}
        self.budgets: dict[int, BudgetPlans] = {}  # as master: per tree
        self._reported: dict[int, tuple[float, tuple[Any, ...]]] = {}

    def planned(self, tid: int) -> bool:
        """Whether this agent's position of ``tid`` is in the plan."""
        return self.network.node_id in self.plans.get(tid, ())

    def heard(self, tid: int, plan: list[Any]) -> None:
        """The plan of the root's ``replicas`` multicast (hex ids; the caller checked it)."""
        self.plans[tid] = frozenset(int(str(n), 16) for n in plan)

    # ---- as inner holder -----------------------------------------------------------------------

    def report_place(self, tid: int, parent: int) -> None:
        """An inner holder: its place in the tree, to the master, when due."""
        children = self.host.child_domains(tid)
        state = (parent, tuple(sorted(children.items())))
        last = self._reported.get(tid)
        now = time.monotonic()
        if last is not None and last[1] == state and now - last[0] < self.every:
            return
        self._reported[tid] = (now, state)
        body = {
            "job": self.host.name,
            "tree": tid,
            "holder": format(self.network.node_id, "x"),
            "parent": format(parent, "x"),
            "domain": self.network.domain,
            "children": [[format(c, "x"), d] for c, d in sorted(children.items())],
        }
        self.tasks.spawn(self._send_report(tid, body), f"{self.host.name} position report")

    async def _send_report(self, tid: int, body: dict[str, Any]) -> None:
        try:
            url = await self.host.master_url(tid)
            await self.network.client.post_json(url, REPORT_PATH, body)
        except Exception as exc:  # the next round reports again
            self._reported.pop(tid, None)
            self.host.count("position_report_failed")
            log.info("job %s: position report of tree %x failed: %r", self.host.name, tid, exc)

    # ---- as master -----------------------------------------------------------------------------

    def report(
        self, tid: int, holder: int, parent: int | None, domain: str, children: dict[int, str]
    ) -> None:
        """A holder's place in the tree (``POST /agent/v1/position/report``)."""
        policy = self.host.spec.fault_tolerance
        if not policy.planned:
            raise Reject(409, "not_budgeted", f"job {self.host.name!r} has no replica budget")
        if not self.host.is_root(tid):
            raise RetryLater("not_master", f"this agent is not tree {tid:x}'s master")
        plans = self.budgets.setdefault(tid, BudgetPlans(policy.budget))
        if not plans.report(holder, parent, domain, children, time.monotonic()):
            raise Reject(413, "too_many_positions", "past the master's bound on reports")

    def observe(self, tid: int, origins: Lineage | None) -> None:
        """A stored epoch's records per origin (the rates)."""
        policy = self.host.spec.fault_tolerance
        if policy.planned and self.host.is_root(tid):
            plans = self.budgets.setdefault(tid, BudgetPlans(policy.budget))
            plans.observe(records_of(origins))

    def plan(self, tid: int, budget: int) -> frozenset[int]:
        """The tree's plan now (the planner's hysteresis keeps it while rates are noisy)."""
        plans = self.budgets.setdefault(tid, BudgetPlans(budget))
        me = self.network.node_id
        plan = plans.plan(
            me, self.network.domain, self.host.child_domains(tid), budget, time.monotonic()
        )
        if plan != self.plans.get(tid):
            log.info("job %s tree %x: replica plan %s", self.host.name, tid, sorted(plan))
        self.plans[tid] = plan
        return plan

    def status(self) -> dict[str, Any]:
        return {
            "plans": {
                format(t, "x"): sorted(format(n, "x") for n in p) for t, p in self.plans.items()
            },
            "budgets": {format(t, "x"): b.status() for t, b in self.budgets.items()},
        }
