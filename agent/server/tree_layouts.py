"""Fixed node-id layouts whose job tree has a known shape, for the cluster scenarios that need
an agent in a given role (an inner node with children of its own), shared by the inner-kill
and the inner-pause scenarios and the benchmark.

Contract (``docs/fault-tolerance.md``, "Replicated inner positions" and "Adaptive
redundancy: the running policy"). Trees are Pastry-style prefix routes
(``overlay/routing.py``), so with complete routing tables a tree's shape is a function of the
node ids and the tree id (:func:`srt.trees.shape.predicted_parents`). A :class:`Layout`
fixes the ids of its agents (``--node-id``, one per process index: :meth:`Layout.cluster`)
and names, by agent index, tree 0's root, the master's standby (the next closest to the tree
id) and the inner nodes (non-root agents with two or more children) of job ``wc`` (creator
``chaos``, placement salt 0). :meth:`Layout.check` verifies that plan from the ids alone;
:func:`wait_for_the_planned_tree` waits until the running cluster has it (every agent's tree
view names its planned parent, every inner node's barrier lists its planned children), else
:class:`~agent.server.replica_scenarios.ScenarioError` naming what it saw.

* :data:`SIX`: six agents, one inner node (agent 2, children 3 and 4) below the root;
* :data:`TWELVE`: twelve agents, three inner nodes - 7 (children 2, 3) and 9 (children 8,
  10) below the root, and 8 (children 4, 6) below 9: an inner node inside an inner node's
  subtree.

Bounds: :func:`wait_for_the_planned_tree` waits at most :data:`SHAPE_TIMEOUT` seconds; each
poll is one status call per live agent.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent.server.chaos import ChaosCluster, wait_until
from agent.server.replica_scenarios import JOB, ScenarioError
from srt.ids import app_id, tree_ids
from srt.trees.shape import children_of, predicted_parents

CREATOR = "chaos"  # JobPlan's creator: part of the job's app id, so of its tree ids
SHAPE_TIMEOUT = 30.0


def first_tree(job: str = JOB) -> int:
    """Tree 0's id of ``job`` as :class:`~agent.server.chaos.JobPlan` submits it (placement
    salt 0)."""
    return tree_ids(app_id(job, CREATOR), 1, 0)[0]


@dataclass(frozen=True)
class Layout:
    """Node ids (hex, by agent index) and the roles they give tree 0 of ``wc`` (module
    contract)."""

    name: str
    ids: tuple[str, ...]
    root: int
    standby: int
    inner: tuple[int, ...]

    @property
    def agents(self) -> int:
        return len(self.ids)

    def cluster(self, workdir: Path, **kw: Any) -> ChaosCluster:
        """A (not started) chaos cluster of these agents with these ids."""
        args = {i: ["--node-id", h] for i, h in enumerate(self.ids)}
        return ChaosCluster(self.agents, workdir, agent_args=args, **kw)

    def index_of(self, node_id: int) -> int | None:
        """The agent index of ``node_id`` (None: not an agent of the layout)."""
        return next((i for i, h in enumerate(self.ids) if int(h, 16) == node_id), None)

    def planned_parents(self, job: str = JOB) -> dict[int, int | None]:
        """agent index -> its parent's index in ``job``'s first tree (None: the root), with
        complete routing tables."""
        ids = [int(h, 16) for h in self.ids]
        index = {v: i for i, v in enumerate(ids)}
        parents = predicted_parents(ids, first_tree(job))
        return {index[v]: None if p is None else index[p] for v, p in parents.items()}

    def check(self, job: str = JOB) -> dict[int, list[int]]:
        """The plan's children per agent index; :class:`ScenarioError` unless :attr:`root`
        is the root, :attr:`standby` the next closest to the tree id and every one of
        :attr:`inner` a non-root agent with two or more children."""
        tree = first_tree(job)
        parents = self.planned_parents(job)
        kids = children_of(parents)
        by_distance = sorted(range(self.agents), key=lambda i: int(self.ids[i], 16) ^ tree)
        if by_distance[:2] != [self.root, self.standby] or parents[self.root] is not None:
            raise ScenarioError(
                f"{self.name}, job {job}: not root {self.root}, standby {self.standby}: "
                f"{by_distance}"
            )
        for i in self.inner:
            if parents[i] is None or len(kids[i]) < 2:
                raise ScenarioError(f"{self.name}, job {job}: {i} is not an inner node: {parents}")
        return kids


#: six agents; found by a seeded search over ids sharing 4, 2, 1 and 0 leading digits with
#: tree 0 of ``wc`` (ad2e9240...): root, standby, inner node, the rest
SIX = Layout(
    "six",
    (
        "ad2e6e5bcb86a1633a7f66bbd53b21a05d4e6c33",  # 0: the root (4 digits shared)
        "ad88e75082417a62c83f3e8cf3e5626bee5339a1",  # 1: the standby (2 digits)
        "a1bae2d55ba5e1cf15d1f5a71330ad0c552cdd21",  # 2: the inner node (1 digit)
        "f5fd16a95b75433973c022b7ecd47b62d787641b",  # 3: the inner node's child
        "3ce2fd9569e798e7907991e978a6b64f72dc8cf8",  # 4: the inner node's child
        "07d0586484dea77929bc288c1bc521c408a2a7e7",  # 5: the root's child
    ),
    root=0,
    standby=1,
    inner=(2,),
)

#: twelve agents: SIX's root and standby, the rest from a seeded search (ids sharing 0-3
#: leading digits with the tree id) for three inner nodes with two children each
TWELVE = Layout(
    "twelve",
    (
        "ad2e6e5bcb86a1633a7f66bbd53b21a05d4e6c33",  # 0: the root
        "ad88e75082417a62c83f3e8cf3e5626bee5339a1",  # 1: the standby
        "124451891fed552c4c0f139a2a028a0733d4f9a1",  # 2: child of 7
        "ee1c1a7bbb9bbae1248ca1ca61a08511fc2660af",  # 3: child of 7
        "20bfdfa4183e130d30673ea475f371b71d74d5b5",  # 4: child of 8
        "7b6cfef57f5ad79aade2535c637f13a5004362bf",  # 5: the root's child
        "b6f6fa629ca7694e336688747b9b66d136e5ddbf",  # 6: child of 8
        "adf7961a8eb04d3cab6a05dde9cd8561fbb9a575",  # 7: inner, below the root
        "a28f156f8c754ec715e6fea6f289ba1cad14c9e4",  # 8: inner, below 9
        "adcc20900a9a7da2719ac2b3c12f911ef821fcfc",  # 9: inner, below the root
        "abfc317914b98b4bffb1f3ab6398082124d593c8",  # 10: child of 9
        "9396b428b7b83482440edc004bf2c9567f437e97",  # 11: the root's child
    ),
    root=0,
    standby=1,
    inner=(7, 8, 9),
)


def job_status(chaos: ChaosCluster, index: int, job: str) -> dict[str, Any]:
    """Agent ``index``'s status of ``job`` (empty: it has none)."""
    return chaos.client(index).status()["jobs"].get(job) or {}


def observed_parents(
    chaos: ChaosCluster, layout: Layout, job: str = JOB
) -> dict[int, int | str | None]:
    """agent index -> its parent's index in ``job``'s first tree as its own tree view says
    (None: the root; ``"?"``: no view yet, or a parent that is no agent of the layout)."""
    tree = f"{first_tree(job):040x}"
    out: dict[int, int | str | None] = {}
    for i in chaos.live():
        view = next(
            (t for t in job_status(chaos, i, job).get("trees") or [] if t["tree_id"] == tree),
            None,
        )
        if view is None or view["state"] not in ("member", "root"):
            out[i] = "?"
        elif view["is_root"]:
            out[i] = None
        else:
            parent = layout.index_of(int((view["parent"] or {}).get("id") or "0", 16))
            out[i] = "?" if parent is None else parent
    return out


def barrier_children(chaos: ChaosCluster, layout: Layout, index: int, job: str = JOB) -> set[int]:
    """The agent indexes agent ``index``'s barrier of ``job``'s first tree waits for."""
    status = job_status(chaos, index, job).get("barrier") or {}
    barrier = status.get(f"{first_tree(job):040x}") or {}
    out = set()
    for c in barrier.get("children") or {}:
        if c != "local" and (i := layout.index_of(int(str(c), 16))) is not None:
            out.add(i)
    return out


def wait_for_the_planned_tree(
    chaos: ChaosCluster, layout: Layout, job: str = JOB
) -> dict[int, list[int]]:
    """Wait until every agent's view is the planned tree and every inner node's barrier waits
    for its planned children; :class:`ScenarioError` naming what was seen otherwise."""
    kids = layout.check(job)
    want = layout.planned_parents(job)
    last: dict[str, Any] = {}

    def matches() -> bool:
        last["parents"] = observed_parents(chaos, layout, job)
        last["inner_barriers"] = {
            i: sorted(barrier_children(chaos, layout, i, job)) for i in layout.inner
        }
        return last["parents"] == want and all(
            set(kids[i]) <= set(last["inner_barriers"][i]) for i in layout.inner
        )

    try:
        wait_until(matches, SHAPE_TIMEOUT, f"job {job}'s first tree to take its planned shape")
    except TimeoutError:
        raise ScenarioError(
            f"{layout.name}: job {job}'s first tree is not the planned one after "
            f"{SHAPE_TIMEOUT}s: planned parents {want}, inner nodes' children "
            f"{ {i: kids[i] for i in layout.inner} }; seen {last}"
        ) from None
    return kids
