"""The narrow services an Agent gives its collaborators, instead of itself.

Contract: every collaborator of :class:`~agent.runtime.host.agent.Agent` gets an object that
offers exactly what it uses, built from the agent's parts (bound methods and getters), never
the agent whole:

* :class:`NetworkPort` — a job runtime's :class:`~agent.runtime.services.NetworkService`:
  node id, trees, data-plane URL and client, overlay neighbours, peers' URLs;
* :class:`JobTablePort` — its :class:`~agent.runtime.services.JobTableService` (the
  supervisor's publish, announce, record and master-tree operations);
* :class:`InputPort` — its :class:`~agent.runtime.services.InputService` (the ticks' input
  names, timestamp fields, read-now and resume positions);
* :class:`UserApi` — the user API's :class:`~agent.runtime.ops.http_api.AgentFacade`: the job
  table's operations, the queries of one job and ingest. A user naming a job that does not run
  here gets **404** (:meth:`UserApi.job_runtime`, documented in the OpenAPI document as the
  ``UnknownJob`` response); a *peer* naming one gets the peer wire's 503 ``unknown_job``
  (:func:`agent.runtime.host.peer_api.runtime_or_reject`).

Ports hold no state of their own; what they return is the parts' answer.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Protocol

from agent.errors import BadRequest, NotFound, StatusError
from agent.jobs.spec import JobSpec
from agent.jobs.table import JobEntry
from overlay import NodeInfo
from srt import DataPlaneClient, TreeManager
from srt import Tunables as SrtTunables
from srt.dataplane.upstream import SnapshotShortcut

log = logging.getLogger(__name__)


class Overlay(Protocol):
    """The overlay node's members a job's network uses (:class:`overlay.OverlayNode`)."""

    @property
    def id(self) -> int: ...

    def leaf_set(self) -> list[NodeInfo]: ...
    def routable(self, node_id: int) -> bool: ...
    def neighbours_of(self, key: int, exclude: int) -> list[NodeInfo]: ...
    def report_gone(self, node_id: int) -> bool: ...
    async def request(self, node: NodeInfo | int, kind: str, payload: dict) -> dict: ...


class NetworkPort:
    """A :class:`~agent.runtime.services.NetworkService` over the agent's overlay node, tree
    manager and data plane."""

    def __init__(
        self,
        overlay: Overlay,
        client: DataPlaneClient,
        srt_tunables: SrtTunables,
        domain: str,
        *,
        trees: Callable[[], TreeManager | None],
        data_url: Callable[[], str],
        count: Callable[[str], None],
        snapshot_datagrams: SnapshotShortcut | None = None,
    ) -> None:
        self.overlay = overlay
        #: small snapshots to a parent as one overlay datagram (srt/dataplane/datagram.py)
        self.snapshot_datagrams = snapshot_datagrams
        self.client = client
        self.srt_tunables = srt_tunables
        self.domain = domain
        self._trees = trees
        self._data_url = data_url
        self._count = count

    @property
    def node_id(self) -> int:
        """This agent's overlay id (known once the agent started)."""
        return self.overlay.id

    @property
    def trees(self) -> TreeManager | None:
        return self._trees()

    @property
    def data_url(self) -> str:
        return self._data_url()

    def neighbours(self) -> list[NodeInfo]:
        """The overlay leaf set."""
        return self.overlay.leaf_set()

    def routable(self, node_id: int) -> bool:
        """False once the overlay holds ``node_id`` failed."""
        return self.overlay.routable(node_id)

    def near(self, key: int, count: int) -> list[NodeInfo]:
        """The ``count`` live contacts closest to ``key``, ``key`` itself left out."""
        return self.overlay.neighbours_of(key, key)[:count]

    def peer_gone(self, node_id: int) -> None:
        """A peer's data-plane port refused us: its process is gone, so the overlay fails it
        now and the trees re-form around it without waiting for timeouts."""
        if self.overlay.report_gone(node_id):
            self._count("peers_failed_by_refusal")
            log.info("peer %x refused a data-plane connection: declared failed", node_id)

    async def data_url_of(self, node: NodeInfo | int) -> str:
        """Another agent's data-plane URL, asked over the overlay (``agent.where``)."""
        reply = await self.overlay.request(node, "agent.where", {})
        return reply["data_url"]


class JobTablePort:
    """A :class:`~agent.runtime.services.JobTableService`: the supervisor's operations."""

    def __init__(
        self,
        *,
        publish_spec: Callable[..., Awaitable[int]],
        announce_entry: Callable[[str], Awaitable[None]],
        record_entry: Callable[[JobEntry], None],
        master_tree: Callable[[int], int],
    ) -> None:
        self._publish, self._announce = publish_spec, announce_entry
        self._record, self._master_tree = record_entry, master_tree

    async def publish_spec(self, spec: JobSpec, *, base_version: int) -> int:
        return await self._publish(spec, base_version=base_version)

    async def announce_entry(self, name: str) -> None:
        await self._announce(name)

    def record_entry(self, entry: JobEntry) -> None:
        self._record(entry)

    def master_tree(self, app: int) -> int:
        return self._master_tree(app)


class Inputs(Protocol):
    """The ticks' input side (:class:`~agent.runtime.host.ticks.Ticks`)."""

    def input_names(self) -> set[str]: ...
    def timestamp_field(self, input_name: str) -> str: ...
    def tick_now(self, inputs: Sequence[str]) -> None: ...
    def resume_spec(self, spec: JobSpec) -> JobSpec: ...


class InputPort:
    """A :class:`~agent.runtime.services.InputService`: the ticks' input operations."""

    def __init__(self, ticks: Inputs) -> None:
        self.input_names = ticks.input_names
        self.timestamp_field = ticks.timestamp_field
        self.tick_now = ticks.tick_now
        self.resume_spec = ticks.resume_spec


class UserQueries(Protocol):
    """A job's results and queries (:class:`~agent.runtime.job.queries.ResultQueries`)."""

    async def results(self, epoch: int | None, emit: str | None = None) -> dict[str, Any]: ...
    async def versions(self) -> list[Any]: ...
    async def query_master(self, message: dict[str, Any]) -> dict[str, Any]: ...


class TimingsReport(Protocol):
    """A job's timings (:class:`~agent.runtime.job.report.JobReport`)."""

    def timings(self) -> dict[str, Any]: ...


class QueriedRuntime(Protocol):
    """The :class:`~agent.runtime.job.runtime.JobRuntime` members the user API calls."""

    job: Any
    queries: UserQueries
    report: TimingsReport

    async def call_job(self, fn: Any, *args: Any) -> Any: ...


class TableOps(Protocol):
    """The supervisor's user operations (:class:`~agent.runtime.host.supervisor.Supervisor`)."""

    async def submit(self, spec: dict[str, Any]) -> dict[str, Any]: ...
    def jobs(self) -> list[dict[str, Any]]: ...
    async def stop_job(self, name: str) -> dict[str, Any]: ...
    async def change_job(self, runtime: Any, name: str, change: Any) -> dict[str, Any]: ...


class UserApi:
    """What the user API asks of this agent (``AgentFacade``; see the module contract)."""

    def __init__(
        self,
        runtimes: Mapping[str, QueriedRuntime],
        table: TableOps,
        *,
        node_id: Callable[[], int],
        status: Callable[[], dict[str, Any]],
        ingest: Callable[[str, Sequence[bytes | str]], Awaitable[dict[str, Any]]],
    ) -> None:
        self.runtimes = runtimes
        self.table = table
        self.node_id = node_id
        self.status = status
        self.ingest = ingest

    def job_runtime(self, name: str) -> QueriedRuntime:
        """The runtime of the job a user named, or 404 (the OpenAPI ``UnknownJob``)."""
        runtime = self.runtimes.get(name)
        if runtime is None:
            raise NotFound(f"no running job named {name!r}")
        return runtime

    async def submit(self, spec: dict[str, Any]) -> dict[str, Any]:
        return await self.table.submit(spec)

    def jobs(self) -> list[dict[str, Any]]:
        return self.table.jobs()

    async def stop_job(self, name: str) -> dict[str, Any]:
        return await self.table.stop_job(name)

    async def change_job(self, name: str, change: Any) -> dict[str, Any]:
        """Apply a runtime change (``agent/jobs/changes.py``) through the job's master."""
        return await self.table.change_job(self.job_runtime(name), name, change)

    def job_timings(self, name: str) -> dict[str, Any]:
        """This agent's epoch and control timings of a job (``JobReport.timings``)."""
        timings = self.job_runtime(name).report.timings()
        return {"job": name, "node_id": f"{self.node_id():040x}", **timings}

    async def results(
        self, name: str, epoch: int | None, emit: str | None = None
    ) -> dict[str, Any]:
        return await self.job_runtime(name).queries.results(epoch, emit)

    async def result_versions(self, name: str) -> list[Any]:
        """The epochs the job's masters hold, with revision and state (the results stream)."""
        return await self.job_runtime(name).queries.versions()

    def job_emit(self, name: str) -> str:
        """The job's ``emit`` (its spec's: the results stream's default)."""
        return str(self.job_runtime(name).queries.emit)

    async def query(self, name: str, message: dict[str, Any]) -> dict[str, Any]:
        return await self.job_runtime(name).queries.query_master(message)

    async def local_query(self, name: str, params: dict[str, str]) -> dict[str, Any]:
        """The job's ``local_query`` hook on this agent (no network hop); a reply with
        ``"error"`` raises the matching API error (its ``"status"``: 404, else 400)."""
        runtime = self.job_runtime(name)
        reply = await runtime.call_job(runtime.job.local_query, params)
        if not isinstance(reply, dict):
            raise StatusError(f"job {name!r}: local_query returned no object")
        if "error" in reply:
            raise (NotFound if reply.get("status") == 404 else BadRequest)(str(reply["error"]))
        return reply
