"""What fault tolerance needs from its job, and what recovery's parts ask of each other.

Contract: :class:`RecoveryHost` is the narrow view of a job runtime
(:class:`~agent.runtime.job.runtime.JobRuntime` gives an adapter over itself) that the
:class:`~agent.runtime.recovery.recovery.Recovery` facade and its parts are given instead of
the runtime, so nothing in ``recovery/`` imports ``job/`` (the layer test enforces it).
:class:`RecoveryParts` is the narrow view of the facade its parts (commit, origins, repair,
replication, hand-over) are given: the shared state and the few actions one part asks of
another, so no part imports another part's module or the facade (which imports them all).
:class:`ReplicaHost` is the job as replicated positions
(:mod:`agent.runtime.recovery.active_replicas`) see it; the recovery host gives it.
All are structural, like :mod:`srt.trees.host`: nothing needs to inherit from them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from agent.jobs.spec import JobSpec
    from agent.runtime.recovery.absence import Absence
    from agent.runtime.recovery.checkpoints import CheckpointSender
    from agent.runtime.recovery.committed_epochs import CommittedEpochs
    from agent.runtime.recovery.loss import OriginLoss
    from agent.runtime.recovery.master_terms import MasterTerms
    from agent.runtime.recovery.membership import Membership
    from agent.runtime.recovery.retained_epochs import RetainedEpochs
    from agent.runtime.recovery.standby import Replica, ReplicationLog
    from agent.runtime.results.previews import Previews
    from agent.runtime.results.store import ResultStore
    from cbt import Snapshot
    from srt import EpochCombiner, SnapshotName
    from srt.dataplane.lineage import Lineage


class RecoveryHost(Protocol):
    """The job, as fault tolerance sees it (one per job on one agent).

    ``spec`` is read at each use (a runtime change replaces it); ``stopped`` turns True once
    the job stops (loops then end). ``ensure_tree`` gives the tree's barrier (made if needed;
    it admits a peer's snapshot: ``check``); ``barrier`` the one that exists, if any."""

    name: str
    tree_list: list[int]

    @property
    def spec(self) -> JobSpec: ...

    @property
    def stopped(self) -> bool: ...

    @property
    def is_origin(self) -> bool:
        """This agent reads one of the job's inputs (it has a worker)."""
        ...

    @property
    def has_lake(self) -> bool: ...

    @property
    def previews(self) -> Previews: ...

    def is_root(self, tid: int) -> bool: ...

    def known_tree(self, tid: int) -> None:
        """Raise ``RetryLater`` (503) unless ``tid`` is one of the job's trees."""
        ...

    def ensure_tree(self, tid: int) -> EpochCombiner: ...

    def barrier(self, tid: int) -> EpochCombiner | None: ...

    def take_queued(self, tid: int, upto: int | None = None) -> list[tuple[int, bytes]]:
        """The epochs (``upto``: of an epoch ``<= upto``) this agent emitted upward but its
        parent never acknowledged."""
        ...

    def count(self, what: str, n: int = 1) -> None: ...

    async def multicast(self, tid: int, message: dict[str, Any]) -> Any: ...

    async def master_url(self, tid: int) -> str: ...

    def forget_master_url(self, tid: int, exc: BaseException | None = None) -> None: ...

    async def replay_result(
        self, epoch: int, snap: Snapshot, quality: tuple[str, list[str]] | None = None
    ) -> None:
        """Run the job's ``on_epoch_result`` for a result taken over (job state rebuilt),
        after ``on_epoch_quality(epoch, *quality)`` when ``quality`` is given."""
        ...

    def bound_results(self) -> None:
        """Past the results' byte budget, spill the oldest (results/store.py)."""
        ...

    def lake_epoch(self, tid: int, epoch: int) -> None:
        """Write the current version of (tree, epoch) to the lake (only with a lake)."""
        ...

    def seen_epoch(self) -> int | None:
        """The newest epoch of any record offered to the job's worker (None: none yet)."""
        ...

    # ---- replicated masters (active_replicas.py) ------------------------------------------

    def parent_of(self, tid: int) -> int | None:
        """This agent's parent's id in ``tid`` (None: the root, or not on the tree)."""
        ...

    def parent_url_of(self, tid: int) -> str | None:
        """This agent's parent's data-plane URL in ``tid`` (None: none known)."""
        ...

    def child_urls(self, tid: int) -> dict[int, str]:
        """This agent's tree children in ``tid`` and their data-plane URLs."""
        ...

    def child_domains(self, tid: int) -> dict[int, str]:
        """This agent's tree children in ``tid`` and their failure domains."""
        ...

    async def acked_up(self, tid: int, epoch: int, timeout: float) -> bool:
        """Wait until this agent's parent acknowledged an epoch after ``epoch``."""
        ...

    def new_barrier(
        self, tid: int, emit: Callable[[int, Snapshot], None], first_epoch: int | None = None
    ) -> EpochCombiner:
        """A barrier of the job's tree with no local input (the job's operator and checks),
        from the first epoch offered, or from ``first_epoch``."""
        ...

    def store_root(self, tid: int, epoch: int, snap: Snapshot, origins: Lineage | None) -> None:
        """Store an epoch as the root's result, as the root's own barrier would."""
        ...

    def pin_children(self, tid: int, members: Iterable[int], seconds: float) -> None:
        """Keep ``members`` among the barrier's children for ``seconds`` although the tree
        layer does not list them (yet)."""
        ...

    def unpin_child(self, tid: int, member: int) -> None:
        """Stop keeping ``member`` among the barrier's children (it is done, or moved)."""
        ...


class RecoveryParts(Protocol):
    """The :class:`~agent.runtime.recovery.recovery.Recovery` facade as its parts see it: the
    fault-tolerance state of one job on one agent and the actions one part asks of another
    (each returns at once; what takes time runs as a background task)."""

    name: str
    host: RecoveryHost
    store: ResultStore
    membership: Membership
    absence: Absence
    fence: MasterTerms
    retained: RetainedEpochs
    checkpoints: CheckpointSender
    loss: OriginLoss
    replication: ReplicationLog
    replicas: dict[int, Replica]
    committed: dict[int, int]
    committed_epochs: CommittedEpochs

    def publish(self, tid: int, epoch: int) -> None: ...

    def publish_deferred(self, tid: int) -> None: ...

    def replicate(self, tid: int) -> None: ...

    def advance(self, tid: int) -> None: ...

    def commit_heard(self, epoch: int) -> None:
        """A commit up to ``epoch`` was made here (master) or heard (member): times the
        recovery timers meant for late commits (commit_lag.py)."""

    def schedule_repair(self, tid: int) -> None: ...

    def members_changed(self) -> None: ...

    def knowledge_gained(self, tid: int) -> None: ...

    def epoch_stored(
        self, tid: int, epoch: int, origins: Lineage | None, *, new: bool = True
    ) -> None: ...

    def fold_in(self, name: SnapshotName, snap: Snapshot, origins: Lineage | None) -> str: ...

    def replica_owns(self, tid: int, epoch: int) -> bool:
        """A replica of a dead master's position here still owns ``epoch`` of ``tid``."""
        ...

    def fold_own(
        self,
        tid: int,
        origin: int,
        parts: dict[int, Snapshot],
        counts: dict[str, Any],
        epochs: Any = None,
    ) -> int: ...

    def absorb_items(
        self, tid: int, items: list[dict[str, Any]], expected: Any, sender: str
    ) -> int: ...

    def adopted(self, tid: int, epochs: list[int], *, repair: bool) -> None: ...

    def origin_left(self, tid: int, origin: int, through: int) -> bool: ...

    def next_roots(self, tid: int, count: int = 1) -> list[Any]: ...


class ReplicaHost(Protocol):
    """The job as replicated positions see it (the recovery host gives it)."""

    name: str

    @property
    def spec(self) -> Any: ...

    @property
    def stopped(self) -> bool: ...

    @property
    def is_origin(self) -> bool: ...

    def is_root(self, tid: int) -> bool: ...

    def parent_of(self, tid: int) -> int | None:
        """This agent's parent's id in ``tid`` (None: the root, or not on the tree)."""
        ...

    def parent_url_of(self, tid: int) -> str | None:
        """This agent's parent's data-plane URL in ``tid`` (None: none known)."""
        ...

    def child_urls(self, tid: int) -> dict[int, str]:
        """This agent's tree children in ``tid`` and their data-plane URLs."""
        ...

    def child_domains(self, tid: int) -> dict[int, str]:
        """This agent's tree children in ``tid`` and their failure domains."""
        ...

    async def master_url(self, tid: int) -> str:
        """The data-plane URL of ``tid``'s master."""
        ...

    def ensure_tree(self, tid: int) -> EpochCombiner: ...

    def take_queued(self, tid: int, upto: int | None = None) -> list[tuple[int, bytes]]:
        """Remove every unacknowledged epoch (``upto``: of an epoch ``<= upto``) of this
        agent's sender to its parent."""
        ...

    async def acked_up(self, tid: int, epoch: int, timeout: float) -> bool:
        """Wait until this agent's parent acknowledged an epoch after ``epoch``."""
        ...

    def new_barrier(
        self, tid: int, emit: Callable[[int, Snapshot], None], first_epoch: int | None = None
    ) -> EpochCombiner:
        """A barrier of the job's tree with no local input (the job's operator and checks),
        from the first epoch offered, or from ``first_epoch``."""
        ...

    def store_root(self, tid: int, epoch: int, snap: Snapshot, origins: Lineage | None) -> None:
        """Store an epoch as the root's result (as the root's own barrier would)."""
        ...

    def pin_children(self, tid: int, members: Iterable[int], seconds: float) -> None:
        """Keep ``members`` among the barrier's children for ``seconds`` although the tree
        layer does not list them (yet)."""
        ...

    def unpin_child(self, tid: int, member: int) -> None:
        """Stop keeping ``member`` among the barrier's children (it is done, or moved)."""
        ...

    def count(self, what: str, n: int = 1) -> None: ...

    async def multicast(self, tid: int, message: dict[str, Any]) -> Any: ...
