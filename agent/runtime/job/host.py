"""What the parts of a job runtime need from it, and from its fault tolerance.

Contract: a :class:`~agent.runtime.job.runtime.JobRuntime` is a facade over named parts, each
in its own module of ``agent/runtime/job/`` — the epoch pipeline
(:mod:`~agent.runtime.job.pipeline`), the trees (:mod:`~agent.runtime.job.trees`), control
messages (:mod:`~agent.runtime.job.control`), runtime changes
(:mod:`~agent.runtime.job.spec_changes`), results serving (:mod:`~agent.runtime.job.queries`),
status (:mod:`~agent.runtime.job.report`) and the job's context
(:mod:`~agent.runtime.job.context`). A part is given the narrow :class:`JobHost` view of its
runtime, never the runtime's module (which imports all of them), and reaches a sibling only
through the host's named part (typed here by the few calls it makes of it), as
``srt/trees/host.py`` does for the tree layer. :class:`RecoveryHooks` lists what the parts ask
of fault tolerance (folding a late contribution, keeping a closed epoch, a control message
of its own, its status), so no part reaches into ``recovery/`` state. All are
structural: nothing needs to inherit from them.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Any, Protocol

from agent.jobs.job import Job, JobContext
from agent.jobs.spec import JobSpec
from agent.runtime.epochs.worker import Worker
from agent.runtime.results.lake_sink import LakeSink
from agent.runtime.results.late_ledger import LateLedger
from agent.runtime.results.previews import Previews
from agent.runtime.results.store import ResultStore
from agent.runtime.services import (
    EpochObserver,
    InputService,
    JobTableService,
    NetworkService,
    RecordExecutor,
    Spawner,
)
from agent.tunables import RuntimeTunables
from cbt import Snapshot
from srt import EpochCombiner, SnapshotName, UpstreamSender
from srt.dataplane.compat import Expectation
from srt.dataplane.lineage import Lineage
from srt.dataplane.operators import LevelOperator


class RecoveryHooks(Protocol):
    """What the job's non-fault-tolerance parts ask of its fault tolerance: the few named
    points where the happy path tells :class:`~agent.runtime.recovery.recovery.Recovery`
    what happened (the runtime's ``recovery`` satisfies this)."""

    def fold_in(self, name: SnapshotName, snap: Snapshot, origins: Lineage | None) -> str:
        """A contribution for an epoch already emitted here: fold it in at the master (or
        forward it there); ``"merged"`` or ``"duplicate"``."""

    def closed(self, tid: int, epoch: int, part: Snapshot, records: int | None) -> None:
        """This origin closed ``epoch``'s whole share of ``tid``: keep it for the master's
        keep it until the master no longer needs it."""

    def whole(self, epoch: int) -> bool:
        """Whether this origin's records of ``epoch`` are whole here (a job started after
        others read a shared input, or a window before the first pane, is short)."""

    def parent_seen(self, tid: int) -> None:
        """This agent has a parent in ``tid`` (a member of the tree, for a later master)."""

    def on_multicast(self, tid: int, message: dict[str, Any]) -> bool:
        """A control message of fault tolerance's own kinds: handled, True."""

    def readable_upto(self, tid: int) -> int | None:
        """The epoch this agent's read positions may pass for ``tid`` (None: none yet)."""

    def unpublished(self, tid: int, epoch: int) -> bool:
        """This master holds (tree, epoch) but waits to settle before publishing it."""

    def status(self) -> dict[str, Any]:
        """The fault-tolerance fields of the job's status, in their order there."""

    def replicated(self) -> bool:
        """The job's policy replicates tree positions (fault_tolerance "replicated")."""

    def to_replicas(self, tid: int, epoch: int, payload: bytes, *, own: bool = False) -> None:
        """An epoch this agent sends up (``own``: its own share, as a position's holder), to
        the replicas of the position it is a member of too."""

    def hand_off(self, tid: int, parent: int | None) -> bool:
        """This agent's parent changed: True when the epochs queued for the old (dead)
        parent are its position's replicas' (the caller drops them from its queue)."""

    def route_replica(
        self, tid: int, sender: int, epoch: int, snap: Snapshot, origins: Lineage | None
    ) -> str | None:
        """After a take-over, a contribution of an epoch this agent's replica of the dead
        master's position still owns: its answer (None: the root's own barrier takes it)."""


class TreeParts(Protocol):
    """The trees part as its siblings use it (:class:`~agent.runtime.job.trees.TreeLinks`)."""

    def ensure_tree(self, tid: int) -> EpochCombiner: ...

    def expectation(self, epoch: int | None) -> Expectation: ...


class ControlParts(Protocol):
    """The control part as its siblings use it (:class:`~agent.runtime.job.control.
    JobControl`)."""

    multicasts: list[dict[str, Any]]
    multicast_stats: list[dict[str, Any]]

    async def multicast(self, tid: int, message: dict[str, Any]) -> Any: ...


class ChangeParts(Protocol):
    """The runtime changes part as its siblings use it (:class:`~agent.runtime.job.
    spec_changes.SpecChanges`)."""

    changes_applied: OrderedDict[int, float]
    jobs_before: list[tuple[int, Job]]

    def job_for(self, epoch: int) -> Job: ...

    async def on_change(self, message: dict[str, Any]) -> None: ...


class PipelineParts(Protocol):
    """The epoch pipeline as its siblings use it (:class:`~agent.runtime.job.pipeline.
    EpochPipeline`)."""

    sent_at: OrderedDict[tuple[int, int], float]

    def bound_results(self) -> None: ...

    def cpu_status(self) -> dict[str, Any]: ...

    def worker_stats(self) -> dict[str, Any] | None: ...

    def refresh_worker_stats(self) -> None: ...


class JobHost(Protocol):
    """The job runtime as its parts see it: the job's shared state, the agent's services,
    its named parts and its fault tolerance (:attr:`recovery`).

    ``spec``, ``version``, ``job`` and ``operator`` are replaced by a runtime change (read
    them at each use). ``stopped`` is True from the moment the job stops: no new work then.
    """

    name: str
    app_id: int
    spec: JobSpec
    version: int
    job: Job
    operator: LevelOperator
    tree_list: list[int]
    tree_set: set[int]
    inputs: list[str]
    worker: Worker | None
    combiners: dict[int, EpochCombiner]
    senders: dict[int, UpstreamSender]
    store: ResultStore
    late_ledger: LateLedger
    previews: Previews
    lake: LakeSink | None
    observer: EpochObserver
    counters: dict[str, int]
    network: NetworkService
    job_table: JobTableService
    input_service: InputService
    tasks: Spawner
    records: RecordExecutor
    tunables: RuntimeTunables
    context: JobContext
    recovery: RecoveryHooks
    trees: TreeParts
    control: ControlParts
    changes: ChangeParts
    pipeline: PipelineParts

    @property
    def stopped(self) -> bool: ...

    @property
    def is_master(self) -> bool: ...

    def count(self, what: str, n: int = 1) -> None: ...

    async def call_job(self, fn: Callable[..., Any], *args: Any) -> Any: ...


def tree_view(host: JobHost, tid: int) -> Any:
    """This agent's view of the job's tree ``tid`` (None: not on it, or no tree manager)."""
    trees = host.network.trees
    return trees.view(tid) if trees is not None else None


def is_root(host: JobHost, tid: int) -> bool:
    """Whether this agent is the root (the master) of the job's tree ``tid`` now."""
    view = tree_view(host, tid)
    return view is not None and view.is_root
