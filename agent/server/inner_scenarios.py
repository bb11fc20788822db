"""Inner-position scenario on a chaos cluster: kill -9 of an inner node of the job's tree,
shared by the cluster test and the benchmark.

Contract (``docs/fault-tolerance.md``, "Replicated inner positions"; issue "Active
redundancy"). An *inner* node is a non-root agent with children in the job's tree. Trees are
Pastry-style prefix routes (``overlay/routing.py``), so with complete routing tables a tree's
shape is a function of the node ids and the tree id (:func:`srt.trees.shape.predicted_parents`).
:data:`NODE_IDS` fixes the ids of :data:`AGENTS` agents (``--node-id``, one per process
index: :func:`inner_cluster`) so that tree 0 of job ``wc`` (creator ``chaos``, placement
salt 0) is, by agent index::

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
from agent.server.version_check import Seen, headline
from agent.server.version_watch import VersionWatch, chaos_figures
from srt.ids import app_id, tree_ids
from srt.trees.shape import children_of, predicted_parents

CREATOR = "chaos"  # JobPlan's creator: part of the job's app id, so of its tree ids
#: agent index -> node id (hex). Found by a seeded search over ids sharing 4, 2, 1 and 0
#: leading digits with tree 0 of ``wc`` (ad2e9240...): root, standby, inner node, the rest.
NODE_IDS = (
    "ad2e6e5bcb86a1633a7f66bbd53b21a05d4e6c33",  # 0: the root (4 digits shared)
    "ad88e75082417a62c83f3e8cf3e5626bee5339a1",  # 1: the standby (2 digits)
    "a1bae2d55ba5e1cf15d1f5a71330ad0c552cdd21",  # 2: the inner node (1 digit)
    "f5fd16a95b75433973c022b7ecd47b62d787641b",  # 3: the inner node's child
    "3ce2fd9569e798e7907991e978a6b64f72dc8cf8",  # 4: the inner node's child
    "07d0586484dea77929bc288c1bc521c408a2a7e7",  # 5: the root's child
)
AGENTS = len(NODE_IDS)
ROOT, STANDBY, INNER = 0, 1, 2
SHAPE_TIMEOUT = 30.0


def first_tree(job: str = JOB) -> int:
    """Tree 0's id of ``job`` as :class:`JobPlan` submits it (placement salt 0)."""
    return tree_ids(app_id(job, CREATOR), 1, 0)[0]


def planned_parents(job: str = JOB) -> dict[int, int | None]:
    """agent index -> its parent's index in ``job``'s first tree (None: the root), with
    complete routing tables."""
    ids = [int(h, 16) for h in NODE_IDS]
    index = {v: i for i, v in enumerate(ids)}
    parents = predicted_parents(ids, first_tree(job))
    return {index[v]: None if p is None else index[p] for v, p in parents.items()}


def check_design(job: str = JOB) -> dict[int, list[int]]:
    """The plan's children per agent index; :class:`ScenarioError` unless agent
    :data:`ROOT` is the root, :data:`STANDBY` the next closest to the tree id (the master's
    standby) and :data:`INNER` a child of the root with two or more children of its own."""
    tree = first_tree(job)
    parents = planned_parents(job)
    kids = children_of(parents)
    by_distance = sorted(range(AGENTS), key=lambda i: int(NODE_IDS[i], 16) ^ tree)
    if by_distance[:2] != [ROOT, STANDBY] or parents[ROOT] is not None:
        raise ScenarioError(f"job {job}: not root {ROOT}, standby {STANDBY}: {by_distance}")
    if parents[INNER] != ROOT or len(kids[INNER]) < 2:
        raise ScenarioError(f"job {job}: agent {INNER} is not an inner node: {parents}")
    return kids


def inner_cluster(workdir: Path, **kw: Any) -> ChaosCluster:
    """A (not started) chaos cluster of :data:`AGENTS` agents with the ids of :data:`NODE_IDS`."""
    args = {i: ["--node-id", h] for i, h in enumerate(NODE_IDS)}
    return ChaosCluster(AGENTS, workdir, agent_args=args, **kw)


def _job_status(chaos: ChaosCluster, index: int, job: str) -> dict[str, Any]:
    return chaos.client(index).status()["jobs"].get(job) or {}


def observed_parents(chaos: ChaosCluster, job: str = JOB) -> dict[int, int | str | None]:
    """agent index -> its parent's index in ``job``'s first tree as its own tree view says
    (None: the root; ``"?"``: no view yet, or a parent that is no agent of the cluster)."""
    tree = f"{first_tree(job):040x}"
    index = {int(h, 16): i for i, h in enumerate(NODE_IDS)}
    out: dict[int, int | str | None] = {}
    for i in chaos.live():
        view = next(
            (t for t in _job_status(chaos, i, job).get("trees") or [] if t["tree_id"] == tree), None
        )
        if view is None or view["state"] not in ("member", "root"):
            out[i] = "?"
        elif view["is_root"]:
            out[i] = None
        else:
            out[i] = index.get(int((view["parent"] or {}).get("id") or "0", 16), "?")
    return out


def barrier_children(chaos: ChaosCluster, index: int, job: str = JOB) -> set[int]:
    """The agent indexes agent ``index``'s barrier of ``job``'s first tree waits for."""
    barrier = (_job_status(chaos, index, job).get("barrier") or {}).get(f"{first_tree(job):040x}")
    index_of = {int(h, 16): i for i, h in enumerate(NODE_IDS)}
    out = set()
    for c in (barrier or {}).get("children") or {}:
        if c != "local" and (i := index_of.get(int(str(c), 16))) is not None:
            out.add(i)
    return out


def inner_replica_holders(chaos: ChaosCluster, inner: int, job: str = JOB) -> list[int]:
    """Agents holding a replica of agent ``inner``'s position in ``job`` that has merged an
    epoch: a ``jobs[job].active_replicas.positions`` entry whose ``master`` is its id."""
    want = int(NODE_IDS[inner], 16)
    holders = []
    for i in chaos.live():
        positions = (_job_status(chaos, i, job).get("active_replicas") or {}).get("positions")
        for p in (positions or {}).values():
            if int(str(p.get("master") or "0"), 16) == want and (p.get("next_epoch") or 0) > 0:
                holders.append(i)
                break
    return holders


def wait_for_the_planned_tree(chaos: ChaosCluster, job: str = JOB) -> dict[int, list[int]]:
    """Wait until every agent's view is the planned tree and the inner node's barrier waits
    for its planned children; :class:`ScenarioError` naming what was seen otherwise."""
    kids = check_design(job)
    want = planned_parents(job)
    last: dict[str, Any] = {}

    def matches() -> bool:
        last["parents"] = observed_parents(chaos, job)
        last["inner_barrier"] = sorted(barrier_children(chaos, INNER, job))
        return last["parents"] == want and set(kids[INNER]) <= set(last["inner_barrier"])

    try:
        wait_until(matches, SHAPE_TIMEOUT, f"job {job}'s first tree to take its planned shape")
    except TimeoutError:
        raise ScenarioError(
            f"job {job}'s first tree is not the planned one after {SHAPE_TIMEOUT}s: "
            f"planned parents {want}, inner node {INNER}'s children {kids[INNER]}; "
            f"seen {last}"
        ) from None
    return kids


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
        kids = wait_for_the_planned_tree(chaos)
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
