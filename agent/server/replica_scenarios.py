"""Replicated-master scenarios on a chaos cluster, shared by the cluster test and the benchmark.

Contract (``docs/fault-tolerance.md``, "Replicated masters"). :func:`kill_during_a_stall`
runs the scenario of ``tests/agent/server/test_replicated_masters.py`` and
``bench/redundancy_bench.py`` (section ``replicated``) on a started
:class:`~agent.server.chaos.ChaosCluster` and its every-version reader
(:class:`~agent.server.version_watch.VersionWatch`, started before the job), for one
``fault_tolerance`` policy (``"passive"`` or ``{"policy": "replicated", "replicas": r}``):

* a :class:`~agent.server.chaos.LogWriter` (10 lines/s per agent) and WordCount ``wc`` on 1 s
  epochs, previews and leaping off (``tentative_deadline: 0``, ``straggler_epochs: 0``: only
  results as stored are judged), submitted to every agent (else :class:`ScenarioError`);
* once three epochs are stored and - replicated - the master's replica (its standby, the next
  master) holds the position, one **member** of the master's barrier is stalled (SIGSTOP):
  a member with no children of its own when there is one (its lineage is then itself alone),
  else the lowest-indexed; it stays stalled until the master holds two epochs whose other
  contributions it has received, waiting for it alone;
* the master is killed (kill -9), the new root's take-over awaited, the member resumed, and
  the master restarted :data:`DOWN_EPOCHS` stored epochs later; three more stored epochs;
  the writer stops and the end-of-run check settles (:func:`agent.server.chaos.check`).

It returns a :class:`StallKill`: the end-of-run reports, the every-version figures
(:func:`~agent.server.version_watch.chaos_figures`, which stops the watch), and the versions
the reader saw flagged **lacking an origin other than the killed master and the stalled
member** (or flagged naming none), the restart's included - under replication
transparency there are none: the replica merged every other member's epochs, and the
restarted master waits for the interim master's hand-over before it publishes.
:meth:`StallKill.figures` is its JSON summary. Nothing here asserts: the caller judges.

Bounds: every wait has a timeout (30 s for the position, the stall and the take-over; 90 s
for the down epochs; 60 s after the restart; 20 s to settle) and raises ``TimeoutError``
naming what it waited for.
"""

from __future__ import annotations

import math
import time
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

from agent.server.chaos import ChaosCluster, JobPlan, JobReport, LogWriter, check, wait_until
from agent.server.version_check import Seen, headline
from agent.server.version_watch import VersionWatch, chaos_figures

#: stored epochs (1 s each) between the kill and the restart
DOWN_EPOCHS = 6
JOB = "wc"


class ScenarioError(RuntimeError):
    """The scenario could not be set up as it says (e.g. a submit that missed agents)."""


def standby_of(chaos: ChaosCluster, job: str) -> tuple[int, int]:
    """(master, standby) agent indexes of ``job``'s first tree, from the master's own status
    (its replication target), once the master has one. With replicated masters the standby
    is the first replica (the next master)."""

    def found() -> tuple[int, int] | None:
        master = chaos.pick(job, "master")
        st = chaos.client(master).status()["jobs"][job]
        tree = int(st["tree_ids"][0], 16)
        standbys = {int(t, 16): int(s, 16) for t, s in st["replication"]["standbys"].items()}
        if tree not in standbys:
            return None
        by_id = {int(h, 16): i for i, h in chaos.node_ids().items()}
        return master, by_id[standbys[tree]]

    pair: tuple[int, int] = wait_until(found, 30, f"job {job}'s master to name its standby")
    if pair[0] == pair[1]:
        raise ScenarioError(f"job {job}'s master names itself its standby: {pair}")
    return pair


def replica_holds_position(chaos: ChaosCluster, replica: int, job: str) -> bool:
    """Whether agent ``replica`` holds a replica of a position of ``job`` that has members
    and has merged an epoch."""
    st = chaos.client(replica).status()["jobs"].get(job) or {}
    positions = (st.get("active_replicas") or {}).get("positions") or {}
    return any(p["members"] and p["next_epoch"] > 0 for p in positions.values())


def _barriers(
    chaos: ChaosCluster, index: int, job: str, tree: str | None = None
) -> list[dict[str, Any]]:
    """Agent ``index``'s barriers of ``job`` (of tree ``tree`` alone, when given)."""
    st = chaos.client(index).status()["jobs"].get(job) or {}
    return [b for t, b in (st.get("barrier") or {}).items() if tree in (None, t)]


def _first_tree(chaos: ChaosCluster, index: int, job: str) -> str | None:
    trees = (chaos.client(index).status()["jobs"].get(job) or {}).get("tree_ids") or []
    return trees[0] if trees else None


def _is_leaf(chaos: ChaosCluster, index: int, job: str, tree: str | None) -> bool:
    return not any(b["children"] for b in _barriers(chaos, index, job, tree))


def held_for(chaos: ChaosCluster, master: int, stalled: str, job: str = JOB) -> int:
    """Open epochs at the master's barrier that wait for the stalled member alone, having
    received something."""
    held = 0
    for barrier in _barriers(chaos, master, job):
        for info in barrier["open"].values():
            # compared as numbers: the barrier names a member by its 40-digit id, zero-padded,
            # node_ids() without the padding (a stalled member whose id starts with 0 never
            # matched, and the stall waited out its timeout: 3 CI failures)
            waiting = [w if isinstance(w, int) else origin_of(str(w)) for w in info["waiting_for"]]
            held += waiting == [int(stalled, 16)] and bool(info["received"])
    return held


def pick_member(chaos: ChaosCluster, master: int, replica: int, job: str = JOB) -> int:
    """The member to stall (module contract): a child of the master's barrier, not the
    replica; one without children of its own first, then the lowest index."""
    by_id = {int(h, 16): i for i, h in chaos.node_ids().items()}
    tree = _first_tree(chaos, master, job)
    children = {
        by_id[int(c, 16)]
        for barrier in _barriers(chaos, master, job, tree)
        for c in barrier["children"]
        if c != "local" and int(c, 16) in by_id
    } - {master, replica}
    if not children:  # no barrier children in the master's view: the lowest index
        return min(i for i in range(chaos.n) if i not in (master, replica))
    leaves = [i for i in sorted(children) if _is_leaf(chaos, i, job, tree)]
    return (leaves or sorted(children))[0]


@dataclass
class StallKill:
    """One run of :func:`kill_during_a_stall` (module contract)."""

    policy: Any
    plan: JobPlan
    agents_reached: int
    master: int
    replica: int
    stalled: int
    stalled_is_leaf: bool
    killed_at: float
    restarted_at: float
    reports: list[JobReport]
    figs: dict[str, Any]
    #: flagged versions, the restart's included
    flagged: list[Seen] = field(default_factory=list)
    #: of those, the ones lacking an origin but the killed master's and the stalled
    #: member's, or naming none (the test's list; ``before_kill`` and ``after_restart``
    #: mark the versions first seen outside the kill-to-restart window)
    others: list[dict[str, Any]] = field(default_factory=list)
    flagged_total: int = 0

    def figures(self) -> dict[str, Any]:
        """JSON: the counts of the contract, the reader's violations and headline, the
        end-of-run exact/of."""
        during = [o for o in self.others if not o["before_kill"] and not o["after_restart"]]
        return {
            "flagged_versions_total": self.flagged_total,
            "flagged_versions_before_restart": sum(
                v.first_seen < self.restarted_at for v in self.flagged
            ),
            "lacking_others_versions": len(during),
            "lacking_others_epochs": len({o["epoch"] for o in during}),
            "lacking_others_before_kill": sum(o["before_kill"] for o in self.others),
            "lacking_others_after_restart": sum(o["after_restart"] for o in self.others),
            "violations": self.figs["violations"],
            "never_repaired": self.figs["never_repaired"]["count"],
            "epochs_final_exact_at_end": self.figs["epochs_final_exact_at_end"],
            "stalled_is_leaf": self.stalled_is_leaf,
            "headline": headline(self.figs),
            "examples": self.others[:3],
        }


def start_wordcount(
    chaos: ChaosCluster, watch: VersionWatch, policy: Any, *more: tuple[str, Any]
) -> tuple[JobPlan, int]:
    """WordCount :data:`JOB` on 1 s epochs from two seconds on under ``policy``, previews and
    leaping off (and the settings ``more``), submitted (:class:`ScenarioError` unless every
    agent got it), watched by ``watch``; returns (plan, agents reached) once three epochs
    are stored."""
    start = math.floor(time.time()) + 2
    settings = (("fault_tolerance", policy), ("tentative_deadline", 0), ("straggler_epochs", 0))
    plan = JobPlan(JOB, "wordcount", start, settings=(*settings, *more))
    reached = chaos.submit(plan)["agents_reached"]
    if reached != chaos.n:
        raise ScenarioError(f"the submit reached {reached} of {chaos.n} agents")
    watch.watch(plan.name, start)
    chaos.wait_stored(JOB, start + 3)
    return plan, reached


def kill_during_a_stall(chaos: ChaosCluster, watch: VersionWatch, policy: Any) -> StallKill:
    """The scenario (module contract) under ``policy``; stops ``watch``."""
    writer = LogWriter(chaos.paths, rate=10).start()
    try:
        plan, reached = start_wordcount(chaos, watch, policy)
        start = plan.start_epoch
        master, replica = standby_of(chaos, JOB)
        if policy != "passive":
            wait_until(
                lambda: replica_holds_position(chaos, replica, JOB),
                30,
                "the replica to hold the master's position",
            )
        stalled = pick_member(chaos, master, replica)
        is_leaf = _is_leaf(chaos, stalled, JOB, _first_tree(chaos, master, JOB))
        ids = chaos.node_ids()
        chaos.stall(stalled, JOB, "member")
        wait_until(
            lambda: held_for(chaos, master, ids[stalled]) >= 2,
            30,
            "the master to hold two epochs the others delivered, waiting for the stalled one",
        )
        ev = chaos.kill(master, JOB, "master")
        killed_at = ev.at
        wait_until(lambda: "master" in chaos.roles(JOB).values(), 30, "the replica's take-over")
        chaos.resume(stalled, JOB)
        back = (ev.stored_before or start) + DOWN_EPOCHS
        chaos.wait_stored(JOB, back, timeout=90)
        restarted_at = time.time()
        ev = chaos.restart(master, JOB)
        chaos.wait_stored(JOB, max(back, ev.stored_before or 0) + 3, timeout=60)
    finally:
        writer.stop()
    reports = check(chaos, [plan], settle_timeout=20)
    figs = chaos_figures(watch, chaos, [plan], reports)
    allowed = {origin_of(ids[master]), origin_of(ids[stalled])}
    seen = watch.seen()
    # every version, the restart's included: a restarted master taking its root back waits
    # for the interim master's hand-over before it publishes (master_restart_settle_seconds)
    flagged = [v for v in seen if v.flagged]
    others = [
        {
            "source": v.source,
            "epoch": v.epoch,
            "lacking": v.lacking,
            "partial": v.partial,
            "before_kill": v.first_seen < killed_at,
            "after_restart": v.first_seen >= restarted_at,
        }
        for v in flagged
        if {origin_of(x) for x in v.lacking} - allowed or not v.lacking
    ]
    return StallKill(
        policy=policy,
        plan=plan,
        agents_reached=reached,
        master=master,
        replica=replica,
        stalled=stalled,
        stalled_is_leaf=is_leaf,
        killed_at=killed_at,
        restarted_at=restarted_at,
        reports=reports,
        figs=figs,
        flagged=flagged,
        others=others,
        flagged_total=sum(v.flagged for v in seen),
    )


def kill_and_restart(
    chaos: ChaosCluster,
    plan: JobPlan,
    victim: int,
    role: str,
    mates: Sequence[int] = (),
    fault: str = "kill",
) -> tuple[float, float]:
    """kill -9 of agent ``victim`` (and of ``mates`` with it: the rest of its failure
    domain), their restart :data:`DOWN_EPOCHS` stored epochs later, and three more stored
    epochs; returns (killed at, restarted at). ``fault="partition"``: their network links
    are taken down and brought up again instead (the cluster needs a
    :class:`~agent.server.netns.NetnsLab`): alive, but cut off."""
    down, up = (chaos.kill, chaos.restart) if fault == "kill" else (chaos.partition, chaos.heal)
    ev = down(victim, plan.name, role)
    for mate in mates:
        down(mate, plan.name, "domain mate")
    killed_at = ev.at
    back = (ev.stored_before or plan.start_epoch) + DOWN_EPOCHS
    chaos.wait_stored(plan.name, back, timeout=90)
    restarted_at = time.time()
    ev = up(victim, plan.name)
    for mate in mates:
        up(mate, plan.name)
    chaos.wait_stored(plan.name, max(back, ev.stored_before or 0) + 3, timeout=60)
    return killed_at, restarted_at


def lacking_others(
    flagged: list[Seen], victims_hex: Collection[str], killed_at: float, restarted_at: float
) -> list[dict[str, Any]]:
    """The flagged versions lacking an origin other than the ``victims_hex`` (or naming
    none), each with its phase: ``before_kill``, ``down`` or ``after_restart``."""

    def phase(at: float) -> str:
        return "before_kill" if at < killed_at else "down" if at < restarted_at else "after_restart"

    # one id given as a plain string is one victim, not its characters
    names = [victims_hex] if isinstance(victims_hex, str) else victims_hex
    victims = {origin_of(x) for x in names}
    return [
        {
            "source": v.source,
            "epoch": v.epoch,
            "lacking": v.lacking,
            "partial": v.partial,
            "phase": phase(v.first_seen),
        }
        for v in flagged
        if not v.lacking or {origin_of(x) for x in v.lacking} - victims
    ]


def origin_of(name: str) -> int | str:
    """An origin as results name it (hex, with or without leading zeros; ``"?"``: unknown)."""
    try:
        return int(name, 16)
    except ValueError:
        return name
