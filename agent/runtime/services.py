"""What a job runtime needs from its agent, as narrow protocols (one per concern).

Contract: a :class:`~agent.runtime.job.runtime.JobRuntime` is constructed with these services,
never with the whole :class:`~agent.runtime.host.agent.Agent`: the agent's ports implement them
(``agent/runtime/host/ports.py``; the spawner is the agent's
:class:`~overlay.tasks.BackgroundTasks`). Each protocol lists exactly what the runtime uses, so
what a job can reach of its agent is visible here and a test can fake one concern without the
others:

* :class:`NetworkService` — this agent's place on the network: node id, its job trees
  (:class:`JobTrees`, satisfied by :class:`srt.TreeManager`), its data-plane URL and client,
  its overlay neighbours and the data-plane URL of another agent.
* :class:`JobTableService` — the replicated job table: publish a changed spec (through the
  jobs-tree root), announce an entry to every agent, record an entry this agent already runs,
  and the tree-0 id of a job known by its appId.
* :class:`InputService` — the agent's inputs: their names and timestamp fields, a read-now
  (between ticks), and where a restarted agent resumes a job (durable offsets).
* :class:`Spawner` — background tasks whose failures are counted and logged, cancelled when
  the agent stops.
* :class:`RecordExecutor` — the thread per-record work runs on (never the event loop).
* :class:`EpochObserver` — a read-only hook the runtime tells of what it did (the agent's
  metrics, ``agent/runtime/ops/metrics.py``): it observes, never changes the runtime.

This module imports no runtime module (only types of the layers below), so it sits at the
bottom of ``agent.runtime`` and closes no import cycle.
"""

from __future__ import annotations

from collections.abc import Awaitable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from agent.jobs.spec import JobSpec
    from agent.jobs.table import JobEntry
    from overlay import NodeInfo
    from srt import DataPlaneClient, MulticastResult, TreeView
    from srt import Tunables as SrtTunables
    from srt.dataplane.upstream import SnapshotShortcut


class JobTrees(Protocol):
    """The tree operations a job uses (implemented by :class:`srt.TreeManager`)."""

    def view(self, tree_id: int) -> TreeView | None: ...
    async def join(self, tree_id: int, *, job: str, subscriber: bool = True) -> TreeView: ...
    async def leave(self, tree_id: int) -> None: ...
    async def multicast(
        self, tree_id: int, message: dict, *, timeout: float = 5.0
    ) -> MulticastResult: ...
    async def query(self, tree_id: int, message: dict, *, timeout: float = 5.0) -> dict: ...


class NetworkService(Protocol):
    """This agent's node id, job trees and data plane (implemented by the Agent)."""

    @property
    def node_id(self) -> int:
        """This agent's overlay id."""
        ...

    @property
    def trees(self) -> JobTrees | None:
        """The tree manager; None before the agent started."""
        ...

    @property
    def data_url(self) -> str:
        """This agent's data-plane URL (where children and late contributions post)."""
        ...

    @property
    def client(self) -> DataPlaneClient:
        """The authenticated data-plane client (shared by every job of the agent)."""
        ...

    @property
    def snapshot_datagrams(self) -> SnapshotShortcut | None:
        """Where small snapshots go to a parent by datagram (None: always HTTP)."""
        ...

    @property
    def srt_tunables(self) -> SrtTunables:
        """The SRT layer's tunables of this agent (upstream retry backoff, ...)."""
        ...

    def neighbours(self) -> list[NodeInfo]:
        """The overlay leaf set: the live agents closest to this one."""
        ...

    def peer_gone(self, node_id: int) -> None:
        """Evidence that a peer's process is gone (its data-plane port refused us)."""
        ...

    @property
    def domain(self) -> str:
        """This agent's failure-domain label (hot replicas prefer other domains)."""
        ...

    def routable(self, node_id: int) -> bool:
        """False once the overlay holds ``node_id`` failed."""
        ...

    def near(self, key: int, count: int) -> list[NodeInfo]:
        """The ``count`` live overlay contacts closest to ``key`` (``key`` left out)."""
        ...

    async def data_url_of(self, node: NodeInfo | int) -> str:
        """Another agent's data-plane URL, asked over the overlay (``agent.where``)."""
        ...


class JobTableService(Protocol):
    """The replicated job table, as a running job changes and reads it (the Agent)."""

    async def publish_spec(self, spec: JobSpec, *, base_version: int) -> int:
        """Record a running job's new spec at the jobs-tree root; returns its version."""
        ...

    async def announce_entry(self, name: str) -> None:
        """Have the jobs-tree root multicast a job's current entry to every agent."""
        ...

    def record_entry(self, entry: JobEntry) -> None:
        """Note in the local table an entry this agent already runs (no start, no stop)."""
        ...

    def master_tree(self, app: int) -> int:
        """The tree-0 id of the job whose appId is ``app`` (``app`` itself if unknown)."""
        ...


class InputService(Protocol):
    """The agent's inputs, as a job reads them (the Agent)."""

    def input_names(self) -> set[str]:
        """Every input this agent has."""
        ...

    def timestamp_field(self, input_name: str) -> str:
        """The record field holding event time in ``input_name``'s records."""
        ...

    def tick_now(self, inputs: Sequence[str]) -> None:
        """Read ``inputs`` and feed the jobs reading them now, between two ticks."""
        ...

    def resume_spec(self, spec: JobSpec) -> JobSpec:
        """``spec`` moved past the epochs this agent already passed on before a restart."""
        ...


class Spawner(Protocol):
    """Runs background work; a failure is counted and logged, never lost
    (:class:`overlay.tasks.BackgroundTasks`)."""

    def spawn(self, coro: Awaitable[Any], what: str = "task") -> Any: ...


class RecordExecutor(Protocol):
    """Where a runtime's per-record work runs (:class:`~agent.runtime.record_thread.RecordThread`:
    the agent's record thread; ``InlineRecords`` without an agent): every access to the
    worker goes through it, in order."""

    def in_thread(self) -> bool: ...
    async def run(self, fn: Any, *args: Any) -> Any: ...
    def run_blocking(self, fn: Any, *args: Any) -> Any: ...


class EpochObserver(Protocol):
    """Told by a job runtime, as master, of each epoch it stored and of each multicast down a
    job tree (the latency histograms of ``agent/runtime/ops/metrics.py``). Read-only: it must not
    raise nor call back into the runtime; the default :data:`NO_OBSERVER` ignores both."""

    def epoch_stored(self, job: str, epoch_end: float, stored_at: float) -> None: ...
    def multicast_done(self, job: str, kind: str, seconds: float) -> None: ...


class _NoObserver:
    def epoch_stored(self, job: str, epoch_end: float, stored_at: float) -> None:
        return None

    def multicast_done(self, job: str, kind: str, seconds: float) -> None:
        return None


#: the observer of a runtime nobody watches (unit tests, a runtime built without an agent)
NO_OBSERVER: EpochObserver = _NoObserver()
