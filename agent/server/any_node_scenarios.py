"""Kill -9 of any one node: the benchmark's scenario for "r = 2, kill -9 of any one node".

Contract (``docs/fault-tolerance.md``, "Replicated inner positions"; issue "Active
redundancy"). On a started :class:`~agent.server.chaos.ChaosCluster` (agent ids as they
come) and an every-version reader started before the job, for one ``fault_tolerance``
policy and one **victim** agent index:

* a :class:`~agent.server.chaos.LogWriter` (10 lines/s per agent) and WordCount ``wc`` on 1 s
  epochs, previews and leaping off (only results as stored are judged), submitted to every
  agent; three epochs stored;
* the victim - an agent index, or a role resolved on the running job (:func:`with_role`) -
  and its **role** in the job's first tree are read from the agents' status - ``master``
  (the root), ``inner`` (a barrier with children) or ``leaf`` - and, under a replicated
  policy, a position the victim holds (master or inner) must have a replica that merged an
  epoch before the fault (a leaf holds none: its own input is its own, and a dead leaf is
  absent whatever the policy);
* the victim is killed (kill -9), restarted :data:`~agent.server.replica_scenarios.
  DOWN_EPOCHS` stored epochs later, three more stored epochs; the writer stops and the
  end-of-run check settles.

It returns an :class:`AnyKill`: the role, the every-version figures and the versions flagged
lacking an origin other than the victim (``others``, each with its phase: ``before_kill``,
``down`` - the kill to the restart, what replication guarantees: none - or
``after_restart``: a restarted master taking its root back must wait for the interim
master's hand-over before it publishes, ``master_restart_settle_seconds``). Nothing here
asserts.

Bounds: every wait has a timeout (30 s for the replica, 90 s for the down epochs, 60 s after
the restart, 20 s to settle) and raises ``TimeoutError`` naming what it waited for.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from agent.server.chaos import ChaosCluster, JobPlan, JobReport, LogWriter, check, wait_until
from agent.server.replica_scenarios import (
    JOB,
    kill_and_restart,
    lacking_others,
    start_wordcount,
)
from agent.server.version_check import Seen
from agent.server.version_watch import VersionWatch, chaos_figures


def role_of(chaos: ChaosCluster, index: int, job: str = JOB) -> str:
    """``master``, ``inner`` or ``leaf``: agent ``index``'s place in ``job``'s first tree."""
    st = chaos.client(index).status()["jobs"].get(job) or {}
    if "master" in (st.get("roles") or []):
        return "master"
    trees = st.get("tree_ids") or []
    barrier = (st.get("barrier") or {}).get(trees[0]) if trees else None
    return "inner" if barrier and barrier.get("children") else "leaf"


def replicated_here(chaos: ChaosCluster, holder_hex: str, job: str = JOB) -> bool:
    """Whether some other agent holds a replica of ``holder_hex``'s position that merged an
    epoch (``jobs[job].active_replicas.positions``)."""
    want = int(holder_hex, 16)
    for i in chaos.live():
        st = chaos.client(i).status()["jobs"].get(job) or {}
        for p in ((st.get("active_replicas") or {}).get("positions") or {}).values():
            if int(str(p.get("master") or "0"), 16) == want and (p.get("next_epoch") or 0) > 0:
                return True
    return False


@dataclass
class AnyKill:
    """One run of :func:`kill_one_node` (module contract)."""

    policy: Any
    plan: JobPlan
    victim: int
    role: str
    reports: list[JobReport]
    figs: dict[str, Any]
    flagged: list[Seen] = field(default_factory=list)
    others: list[dict[str, Any]] = field(default_factory=list)
    #: the victim's domain mates killed with it (``whole_domain``)
    mates: list[int] = field(default_factory=list)

    def figures(self) -> dict[str, Any]:
        return {
            "victim": self.victim,
            "domain_mates": self.mates,
            "role": self.role,
            "flagged_versions": len(self.flagged),
            "lacking_others_versions": len(self.others),
            "lacking_others_epochs": len({o["epoch"] for o in self.others}),
            "lacking_others_epochs_down": len(
                {o["epoch"] for o in self.others if o["phase"] == "down"}
            ),
            "lacking_others_by_phase": {
                p: sum(o["phase"] == p for o in self.others)
                for p in ("before_kill", "down", "after_restart")
            },
            "violations": self.figs["violations"],
            "never_repaired": self.figs["never_repaired"]["count"],
            "epochs_final_exact_at_end": self.figs["epochs_final_exact_at_end"],
            "examples": self.others[:3],
        }


def with_role(chaos: ChaosCluster, role: str, job: str = JOB) -> int:
    """The first agent (by index) whose place in ``job``'s first tree is ``role``; raises
    ``LookupError`` when none is (eight agents with ids as they come have no inner node)."""
    for i in chaos.live():
        if role_of(chaos, i, job) == role:
            return i
    raise LookupError(f"no agent is {role!r} in {job}'s first tree")


def kill_one_node(
    chaos: ChaosCluster,
    watch: VersionWatch,
    policy: Any,
    victim: int | str,
    whole_domain: bool = False,
    fault: str = "kill",
) -> AnyKill:
    """The scenario (module contract) under ``policy``; stops ``watch``. ``victim`` is an
    agent index, or a role (``master``, ``inner``) resolved once the job runs;
    ``whole_domain``: every agent of the victim's ``--domain`` is killed and restarted with
    it (the worst correlated failure), and the versions judged are those lacking an origin
    outside that domain. ``fault="partition"``: their links are taken down and up instead
    of kill -9 and restart (a cluster in network namespaces)."""
    writer = LogWriter(chaos.paths, rate=10).start()
    try:
        plan, _ = start_wordcount(chaos, watch, policy)
        if isinstance(victim, str):
            victim = with_role(chaos, victim)
        holder = chaos.node_ids()[victim]
        role = role_of(chaos, victim)
        if policy != "passive" and role != "leaf":
            wait_until(
                lambda: replicated_here(chaos, holder), 30, f"a replica of {holder}'s position"
            )
            role = role_of(chaos, victim)  # (re-read: the tree may have settled meanwhile)
        mates = domain_mates(chaos, victim) if whole_domain else []
        killed_at, restarted_at = kill_and_restart(chaos, plan, victim, role, mates, fault)
    finally:
        writer.stop()
    reports = check(chaos, [plan], settle_timeout=20)
    figs = chaos_figures(watch, chaos, [plan], reports)
    flagged = [v for v in watch.seen() if v.flagged]
    ids = chaos.node_ids()
    others = lacking_others(flagged, [holder, *(ids[m] for m in mates)], killed_at, restarted_at)
    return AnyKill(policy, plan, victim, role, reports, figs, flagged, others, mates)


def domain_mates(chaos: ChaosCluster, victim: int) -> list[int]:
    """The other agents of ``victim``'s ``--domain`` (none without domains)."""
    domains = chaos.domains or []
    if victim >= len(domains):
        return []
    return [i for i, d in enumerate(domains) if d == domains[victim] and i != victim]
