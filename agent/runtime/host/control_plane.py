"""The agent's control plane: tree callbacks, multicasts and queries, routed to the jobs.

Contract: :class:`ControlPlane` is what the agent's :class:`~srt.TreeManager` and overlay call
back: the tree-change callbacks (:class:`srt.trees.types.TreeListener`), every multicast down a
tree this agent is on (:meth:`ControlPlane.on_multicast`), every query routed to a tree this
agent is the root of (:meth:`ControlPlane.on_query`) and the overlay's failure verdicts
(:meth:`ControlPlane.node_failed`). The cluster-wide *jobs tree* is the supervisor's (job-table
multicasts and changes, a resync when its parent or root changes); every other tree is a job's,
and its callbacks go to the runtime holding that tree (:meth:`ControlPlane.runtime_for_tree`).
A query for a tree no job here runs answers 404; a change asked of a runtime that is no longer
its tree's master answers 503 (the asker retries).

It holds no state: it is given the runtimes by name (read only), the supervisor's table
operations (:class:`TableControl`), this agent's node id and data URL, the spawner and counter,
and whether the agent still runs; it reaches a runtime only through :class:`ControlledRuntime`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from agent.errors import StatusError
from agent.jobs.table import JobEntry
from agent.runtime.host.supervisor import JOBS_TREE, error_reply
from overlay import NodeInfo

log = logging.getLogger(__name__)


class FailureSink(Protocol):
    """A job's fault tolerance told of a failed node (``JobRuntime.recovery``)."""

    def node_failed(self, node_id: int) -> None: ...


class MulticastSink(Protocol):
    """A job's control messages (``JobRuntime.control``)."""

    async def on_multicast(self, tree_id: int, message: dict[str, Any]) -> None: ...


class QueryAnswerer(Protocol):
    """Another job's master asking this one (``JobRuntime.queries``)."""

    async def answer_query(self, message: Any) -> dict[str, Any]: ...


class ChangeServer(Protocol):
    """A runtime change served at the master (``JobRuntime.changes``)."""

    async def serve_change(self, change: Any) -> dict[str, Any]: ...


class ControlledRuntime(Protocol):
    """The :class:`~agent.runtime.job.runtime.JobRuntime` members the control plane calls."""

    name: str
    is_master: bool
    tree_set: set[int]
    recovery: FailureSink
    control: MulticastSink
    queries: QueryAnswerer
    changes: ChangeServer

    def parent_changed(self, tree_id: int) -> None: ...
    def children_changed(self, tree_id: int) -> None: ...
    def child_moved(self, tree_id: int, child_id: int) -> None: ...
    def root_changed(self, tree_id: int, is_root: bool) -> None: ...


class TableControl(Protocol):
    """The supervisor's side of the jobs tree
    (:class:`~agent.runtime.host.supervisor.Supervisor`)."""

    def apply_entry(self, entry: JobEntry) -> None: ...
    async def serve_table_change(self, message: dict[str, Any]) -> dict[str, Any]: ...
    async def resync_quietly(self) -> None: ...
    def roots_held(self) -> int: ...


class ControlPlane:
    """Tree callbacks, multicasts and queries of one agent (see the module contract)."""

    def __init__(
        self,
        runtimes: Mapping[str, ControlledRuntime],
        table: TableControl,
        *,
        node_id: Callable[[], int],
        data_url: Callable[[], str],
        spawn: Callable[[Any, str], None],
        count: Callable[..., None],
        running: Callable[[], bool],
    ) -> None:
        self.runtimes = runtimes
        self.table = table
        self.node_id = node_id
        self.data_url = data_url
        self.spawn = spawn
        self.count = count
        self.running = running

    def runtime_for_tree(self, tree_id: int) -> ControlledRuntime | None:
        for runtime in self.runtimes.values():
            if tree_id in runtime.tree_set:
                return runtime
        return None

    # ---- tree callbacks (TreeListener) ---------------------------------------------------------

    def tree_parent_changed(self, tree_id: int, parent: NodeInfo | None) -> None:
        if tree_id == JOBS_TREE and parent is not None and self.running():
            self.spawn(self.table.resync_quietly(), "job table resync")
        runtime = self.runtime_for_tree(tree_id)
        if runtime is not None:
            runtime.parent_changed(tree_id)

    def tree_child_added(self, tree_id: int, child: NodeInfo) -> None:
        runtime = self.runtime_for_tree(tree_id)
        if runtime is not None:
            runtime.children_changed(tree_id)

    def tree_child_removed(self, tree_id: int, child_id: int, reason: str) -> None:
        runtime = self.runtime_for_tree(tree_id)
        if runtime is not None:
            if reason != "failed":
                runtime.child_moved(tree_id, child_id)
            runtime.children_changed(tree_id)

    def tree_root_changed(self, tree_id: int, is_root: bool, new_root: NodeInfo | None) -> None:
        if tree_id == JOBS_TREE and self.running():
            self.spawn(self.table.resync_quietly(), "job table resync")
        runtime = self.runtime_for_tree(tree_id)
        if runtime is not None:
            runtime.root_changed(tree_id, is_root)

    def node_failed(self, info: NodeInfo) -> None:
        """The overlay declared a node failed: a job this agent masters may have lost an
        origin (declared lost after the loss timeout, unless it comes back)."""
        for runtime in list(self.runtimes.values()):
            runtime.recovery.node_failed(info.id)

    # ---- multicasts and queries ----------------------------------------------------------------

    async def on_multicast(self, tree_id: int, message: dict[str, Any]) -> None:
        if tree_id == JOBS_TREE:
            if message.get("op") == "job":
                try:
                    self.table.apply_entry(JobEntry.from_wire(message.get("entry")))
                except ValueError as exc:
                    self.count("bad_job_multicast")
                    log.warning("bad job-table multicast: %s", exc)
            return
        runtime = self.runtime_for_tree(tree_id)
        if runtime is None:
            self.count("multicast_unknown_tree")
            return
        await runtime.control.on_multicast(tree_id, message)

    async def on_query(self, tree_id: int, message: dict[str, Any]) -> dict[str, Any]:
        op = message.get("op")
        if op == "where":
            return {"data_url": self.data_url(), "node_id": f"{self.node_id():040x}"}
        if op == "load":
            return {"roots": self.table.roots_held()}
        if tree_id == JOBS_TREE:
            if op in ("submit", "stop", "update", "announce"):
                return await self.table.serve_table_change(message)
            return {"error": f"unknown jobs-tree operation {op!r}", "status": 400}
        runtime = self.runtime_for_tree(tree_id)
        if runtime is None:
            return {"error": "no job runs on this tree here", "status": 404}
        if op == "job_query":
            return await runtime.queries.answer_query(message.get("message"))
        if op == "change":
            if not runtime.is_master:  # a hand-over in progress: the asker retries
                return {"error": f"not the master of {runtime.name!r} (any more)", "status": 503}
            try:
                return await runtime.changes.serve_change(message.get("change"))
            except StatusError as exc:
                return error_reply(exc)
        return {"error": f"unknown operation {op!r}", "status": 400}
