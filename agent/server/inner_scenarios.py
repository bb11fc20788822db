"""Inner-position scenario on a chaos cluster: kill -9 of an inner node of the job's tree,
shared by the cluster test and the benchmark.

Contract (``docs/fault-tolerance.md``, "Replicated inner positions"; issue "Active
redundancy"). An *inner* node is a non-root agent with children in the job's tree. The
layout :data:`agent.server.tree_layouts.SIX` fixes the ids of :data:`AGENTS` agents
(:data:`NODE_IDS`; :func:`inner_cluster`) so that tree 0 of job ``wc`` (creator ``chaos``,
placement salt 0) is, by agent index::

    0 (root, the id XOR-closest to the tree id)
    |- 1 (the master's standby: the next closest, its first replica)
    |- 2 (INNER) - 3, 4
    `- 5

:func:`check_design` verifies that plan from the ids alone (root 0, agent 2 with two
children, not the standby); :func:`kill_an_inner_node` verifies it again on the running
cluster before it injects anything (every agent's tree view names its planned parent, and
the inner node's barrier lists its planned children), else :class:`ScenarioError` naming what
it saw. Then, for one ``fault_tolerance`` policy (``"passive"`` or ``{"policy":
"replicated", "replicas": r}``) and an every-version reader started before the job
(:class:`~agent.server.version_watch.VersionWatch`):

* a :class:`~agent.server.chaos.LogWriter` (10 lines/s per agent) and WordCount ``wc`` on 1 s
  epochs, ``tentative_deadline: 0`` and ``straggler_epochs: 0`` (only results as stored are
  judged), placement salt 0 (the planned tree), submitted to every agent;
* once three epochs are stored and - replicated - some agent holds a replica of the inner
  node's position (its status ``jobs[wc].active_replicas.positions`` has an entry whose
  ``master`` is the inner node's id and that has merged an epoch), the inner node is killed
  (kill -9); :data:`DOWN_EPOCHS` stored epochs later it is **restarted** (same id, data
  directory and file: it reads what its file got meanwhile and repairs its own share, so the
  end-of-run check can expect every epoch exact; not restarting it would leave its share
  lacking for good), three more stored epochs; the writer stops, the end-of-run check settles
  (:func:`agent.server.chaos.check`).

It returns an :class:`InnerKill`: the end-of-run reports, the every-version figures
(:func:`~agent.server.version_watch.chaos_figures`, which stops the watch), and every version
the reader saw (the whole run) flagged **lacking an origin other than the killed inner node**,
or flagged naming none (``others``, each with its phase: before the kill, while down, after
the restart). The inner node's own share is absent while it is down, as a dead leaf's is;
under replication of inner positions nothing else is: its replica merged its children's
epochs. :meth:`InnerKill.figures` is its JSON summary. Nothing here asserts: the caller judges.

Bounds: every wait has a timeout (30 s for the shape and for the inner replica, 90 s for the
down epochs, 60 s after the restart, 20 s to settle) and raises ``TimeoutError`` (or
:class:`ScenarioError`) naming what it waited for.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent.server.chaos import ChaosCluster, JobPlan, JobReport, LogWriter, check, wait_until
from agent.server.replica_scenarios import (
    JOB,
    ScenarioError,
    kill_and_restart,
    lacking_others,
    standby_of,
    start_wordcount,
)
from agent.server.tree_layouts import SIX, job_status, wait_for_the_planned_tree
from agent.server.version_check import Seen, headline
from agent.server.version_watch import VersionWatch, chaos_figures

NODE_IDS = SIX.ids  # agent index -> node id (hex)
AGENTS = SIX.agents
ROOT, STANDBY, INNER = SIX.root, SIX.standby, SIX.inner[0]


def inner_cluster(workdir: Path, **kw: Any) -> ChaosCluster:
    """A (not started) chaos cluster of :data:`AGENTS` agents with the ids of :data:`NODE_IDS`."""
    return SIX.cluster(workdir, **kw)


def check_design(job: str = JOB) -> dict[int, list[int]]:
    """The plan's children per agent index; :class:`ScenarioError` unless agent
    :data:`ROOT` is the root, :data:`STANDBY` the next closest to the tree id (the master's
    standby) and :data:`INNER` a child of the root with two or more children."""
    kids = SIX.check(job)
    parents = SIX.planned_parents(job)
    if parents[INNER] != ROOT:
        raise ScenarioError(f"job {job}: agent {INNER} is not the root's child: {parents}")
    return kids


def inner_replica_holders(chaos: ChaosCluster, inner: int, job: str = JOB) -> list[int]:
    """Agents holding a replica of agent ``inner``'s position in ``job`` that has merged an
    epoch: a ``jobs[job].active_replicas.positions`` entry whose ``master`` is its id."""
    want = int(NODE_IDS[inner], 16)
    holders = []
    for i in chaos.live():
        positions = (job_status(chaos, i, job).get("active_replicas") or {}).get("positions")
        for p in (positions or {}).values():
            if int(str(p.get("master") or "0"), 16) == want and (p.get("next_epoch") or 0) > 0:
                holders.append(i)
                break
    return holders


@dataclass
class InnerKill:
    """One run of :func:`kill_an_inner_node` (module contract)."""

    policy: Any
    plan: JobPlan
    agents_reached: int
    inner: int
    children: list[int]
    #: agents that held a replica of the inner node's position before the kill
    replica_holders: list[int]
    killed_at: float
    restarted_at: float
    reports: list[JobReport]
    figs: dict[str, Any]
    #: flagged versions of the whole run
    flagged: list[Seen] = field(default_factory=list)
    #: of those, the ones lacking an origin but the inner node's, or naming none; ``phase``:
    #: ``before_kill``, ``down`` (kill to restart) or ``after_restart``
    others: list[dict[str, Any]] = field(default_factory=list)

    def figures(self) -> dict[str, Any]:
        """JSON: the counts of the contract, the reader's violations and headline, the
        end-of-run exact/of."""
        phases = ("before_kill", "down", "after_restart")
        return {
            "inner": self.inner,
            "children": self.children,
            "replica_holders": self.replica_holders,
            "flagged_versions": len(self.flagged),
            "lacking_others_versions": len(self.others),
            "lacking_others_epochs": len({o["epoch"] for o in self.others}),
            "lacking_others_by_phase": {
                p: sum(o["phase"] == p for o in self.others) for p in phases
            },
            "violations": self.figs["violations"],
            "never_repaired": self.figs["never_repaired"]["count"],
            "epochs_final_exact_at_end": self.figs["epochs_final_exact_at_end"],
            "headline": headline(self.figs),
            "examples": self.others[:3],
        }


def kill_an_inner_node(chaos: ChaosCluster, watch: VersionWatch, policy: Any) -> InnerKill:
    """The scenario (module contract) under ``policy`` on an :func:`inner_cluster`; stops
    ``watch``."""
    writer = LogWriter(chaos.paths, rate=10).start()
    try:
        plan, reached = start_wordcount(chaos, watch, policy, ("placement", 0))
        check_design()
        kids = wait_for_the_planned_tree(chaos, SIX)
        master, standby = standby_of(chaos, JOB)
        if (master, standby) != (ROOT, STANDBY):
            raise ScenarioError(f"master {master} and standby {standby}: not the planned ones")
        holders: list[int] = []
        if policy != "passive":
            holders = wait_until(
                lambda: inner_replica_holders(chaos, INNER),
                30,
                f"a replica of inner node {INNER}'s position: an agent whose status "
                f"jobs[{JOB}].active_replicas.positions names {NODE_IDS[INNER]} as master and "
                "has merged an epoch (none: inner-position replication is not running)",
            )
        killed_at, restarted_at = kill_and_restart(chaos, plan, INNER, "inner")
    finally:
        writer.stop()
    reports = check(chaos, [plan], settle_timeout=20)
    figs = chaos_figures(watch, chaos, [plan], reports)
    flagged = [v for v in watch.seen() if v.flagged]
    others = lacking_others(flagged, [NODE_IDS[INNER]], killed_at, restarted_at)
    return InnerKill(
        policy=policy,
        plan=plan,
        agents_reached=reached,
        inner=INNER,
        children=kids[INNER],
        replica_holders=holders,
        killed_at=killed_at,
        restarted_at=restarted_at,
        reports=reports,
        figs=figs,
        flagged=flagged,
        others=others,
    )
