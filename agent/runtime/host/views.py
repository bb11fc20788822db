"""What the operator's side reads of an agent: plain summaries behind ops/'s protocols.

Contract: ``agent/runtime/ops`` never reads a job runtime or the overlay whole; it declares
what it reads as narrow protocols and this module adapts the agent's parts to them:

* :class:`AgentView` — the agent for the dashboard (``SummarySource`` and ``ClusterSource``
  of :mod:`agent.runtime.ops.dashboard`), the metrics collector (``MetricsSource`` of
  :mod:`agent.runtime.ops.metrics`) and the readiness checks (``OpsSource`` of
  :mod:`agent.runtime.ops.ops_api`);
* :class:`JobView` — one job runtime as the summary's ``JobSummarySource``: plain dicts and
  values, read without copying a result and without awaiting.

Views read, never change; they hold no state of their own (every call reads the parts now).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol

from overlay import NodeInfo
from srt import TreeManager, TreeView


class ViewedPipeline(Protocol):
    """The epoch pipeline's figures (:class:`~agent.runtime.job.pipeline.EpochPipeline`)."""

    sent_at: Any  # (tree, epoch) → when it was sent upward; a bounded OrderedDict

    def worker_stats(self) -> dict[str, Any] | None: ...


class ViewedRecovery(Protocol):
    """Fault tolerance's figures (:class:`~agent.runtime.recovery.recovery.Recovery`)."""

    replicas: dict[int, Any]
    replication: Any
    committed: dict[int, int]

    def membership_status(self) -> dict[str, Any]: ...


class ViewedQueries(Protocol):
    """Results as the views read them (:class:`~agent.runtime.job.queries.ResultQueries`)."""

    def accuracy_now(self, tid: int, epoch: int, result: Any) -> float | None: ...
    async def results(self, epoch: int | None) -> dict[str, Any]: ...


class ViewedRuntime(Protocol):
    """The :class:`~agent.runtime.job.runtime.JobRuntime` members the views read."""

    version: int
    tree_list: list[int]
    combiners: dict[int, Any]
    counters: dict[str, int]
    spec: Any
    store: Any
    lake: Any
    pipeline: ViewedPipeline
    recovery: ViewedRecovery
    queries: ViewedQueries

    def roles(self) -> list[str]: ...
    def status(self) -> dict[str, Any]: ...


class JobView:
    """One job runtime as plain values (``JobSummarySource``; see the module contract)."""

    def __init__(self, runtime: ViewedRuntime) -> None:
        self.runtime = runtime

    def summary_state(self) -> dict[str, Any]:
        rt = self.runtime
        last_sent: dict[int, int] = {}
        for tid, epoch in reversed(rt.pipeline.sent_at):  # newest last; a bounded OrderedDict
            if tid not in last_sent:
                last_sent[tid] = epoch
        next_epoch = {}
        for tid in rt.tree_list:
            combiner = rt.combiners.get(tid)
            next_epoch[tid] = combiner.next_epoch if combiner is not None else None
        return {
            "version": rt.version,
            "roles": rt.roles(),
            "trees": list(rt.tree_list),
            "last_sent": last_sent,
            "next_epoch": next_epoch,
            "worker": rt.pipeline.worker_stats(),  # the record thread's published copy
            "standby": rt.recovery.replication.stats().get("standbys", {}),
            "replica_of": {t: r.stats().get("master") for t, r in rt.recovery.replicas.items()},
            "active_replica_of": rt.recovery.active_positions(),
            "counters": rt.counters,
        }

    def epoch_seconds(self, epoch: int) -> float:
        return self.runtime.spec.schedule.seconds_of(epoch)

    def stored_epochs(self, tree: int, newest: int) -> list[dict[str, Any]]:
        rt = self.runtime
        schedule = rt.spec.schedule
        out = []
        for epoch in rt.store.epochs(tree)[-newest:]:
            result = rt.store.peek(tree, epoch)  # flags only, no snapshot copy
            if result is None:
                continue
            out.append(
                {
                    "epoch": epoch,
                    "completed_at": result.completed_at,
                    "end": schedule.start(epoch) + schedule.seconds_of(epoch),
                    "tentative": result.tentative,
                    "partial": result.partial,
                    "coverage": result.coverage,
                    "accuracy": rt.queries.accuracy_now(tree, epoch, result),
                    "version": result.version,
                    "term": result.term,  # the master's term that stored it
                    "lacking": result.lacking,
                }
            )
        return out

    def committed(self, tree: int) -> int | None:
        return self.runtime.recovery.committed.get(tree)

    def membership_status(self) -> dict[str, Any] | None:
        return self.runtime.recovery.membership_status()


def results_now(runtime: ViewedRuntime, recent: int = 64) -> dict[str, Any]:
    """As master: tentative epochs among the newest ``recent`` stored per tree, and the
    newest epoch's coverage and, for a top-k job, its accuracy estimate once computed (the
    lowest over the job's trees); read without copying."""
    tentative, coverage, accuracy = 0, None, None
    store = runtime.store
    for tid in store.trees():
        epochs = store.epochs(tid)[-recent:]
        for epoch in epochs:
            result = store.peek(tid, epoch)
            if result is not None and result.tentative:
                tentative += 1
        newest = store.peek(tid, epochs[-1]) if epochs else None
        if newest is not None:
            cov = float(newest.coverage)
            coverage = cov if coverage is None else min(coverage, cov)
            acc = runtime.queries.accuracy_now(tid, epochs[-1], newest)
            if acc is not None:
                accuracy = acc if accuracy is None else min(accuracy, acc)
    return {"tentative": tentative, "coverage": coverage, "accuracy": accuracy}


class ViewedOverlay(Protocol):
    """The overlay node's members the views read (:class:`overlay.OverlayNode`)."""

    @property
    def id(self) -> int: ...

    def leaf_set(self) -> list[NodeInfo]: ...
    def contacts(self) -> list[NodeInfo]: ...
    def size_estimate(self) -> int: ...
    def stats(self) -> dict[str, Any]: ...
    def on_node_failed(self, callback: Callable[[NodeInfo], Any]) -> None: ...
    def on_node_joined(self, callback: Callable[[NodeInfo], Any]) -> None: ...


class Stats(Protocol):
    """A part that reports figures (``stats()``): servers, the table, the offsets, ..."""

    def stats(self) -> dict[str, Any]: ...


class PeerClient(Protocol):
    """The data-plane client (:class:`srt.DataPlaneClient`)."""

    async def post_json(self, url: str, path: str, body: dict) -> dict: ...


class AgentView:
    """The agent as ops/ reads it (see the module contract)."""

    def __init__(
        self,
        *,
        overlay: ViewedOverlay,
        client: PeerClient,
        runtimes: Mapping[str, ViewedRuntime],
        inputs: Mapping[str, Stats],
        parts: Mapping[str, Stats],
        counters: Mapping[str, int],
        jobs: Callable[[], list[dict[str, Any]]],
        trees: Callable[[], TreeManager | None],
        readiness: Callable[[], dict[str, bool]],
        describe: Callable[[], dict[str, Any]],
        started_at: Callable[[], float],
        urls: Callable[[NodeInfo | int], Awaitable[str]],
    ) -> None:
        self.overlay = overlay
        self.client = client
        self.runtimes = runtimes
        self.inputs = inputs
        self.parts = parts  # data_plane, api, job_table, loop_lag, checkpoints_held
        self.counters = counters
        self.jobs = jobs
        self.trees = trees
        self.readiness = readiness
        self.describe = describe
        self._started_at = started_at
        self.urls = urls  # another agent's data-plane URL (NetworkPort.data_url_of)

    # ---- SummarySource -------------------------------------------------------------------------

    @property
    def node_id(self) -> int:
        return self.overlay.id

    @property
    def started_at(self) -> float:
        return self._started_at()

    def loop_lag_stats(self) -> dict[str, Any]:
        return self.parts["loop_lag"].stats()

    def input_stats(self) -> dict[str, dict[str, Any]]:
        return {name: src.stats() for name, src in self.inputs.items()}

    def job_summaries(self) -> dict[str, JobView]:
        return {name: JobView(runtime) for name, runtime in self.runtimes.items()}

    def tree_view(self, tree: int) -> TreeView | None:
        trees = self.trees()
        return trees.view(tree) if trees is not None else None

    # ---- ClusterSource -------------------------------------------------------------------------

    def tree_members(self) -> list[NodeInfo]:
        out = []
        for runtime in self.runtimes.values():
            for tid in runtime.tree_list:
                view = self.tree_view(tid)
                if view is not None:
                    out.extend(i for i in (view.parent, view.root, *view.children.values()) if i)
        return out

    def leaf_set(self) -> list[NodeInfo]:
        return self.overlay.leaf_set()

    def contacts(self) -> list[NodeInfo]:
        return self.overlay.contacts()

    def size_estimate(self) -> int:
        return self.overlay.size_estimate()

    def watch_membership(
        self, failed: Callable[[NodeInfo], None], joined: Callable[[NodeInfo], None]
    ) -> None:
        self.overlay.on_node_failed(failed)
        self.overlay.on_node_joined(joined)

    async def data_url_of(self, node: NodeInfo | int) -> str:
        return await self.urls(node)

    async def post_json(self, url: str, path: str, body: dict) -> dict:
        return await self.client.post_json(url, path, body)

    def result_reader(self, name: str) -> Callable[[int], Awaitable[dict[str, Any]]] | None:
        runtime = self.runtimes.get(name)
        return None if runtime is None else runtime.queries.results

    # ---- MetricsSource -------------------------------------------------------------------------

    def metrics_node(self) -> dict[str, Any]:
        """Agent-wide figures for the metrics collector."""
        started = self.started_at
        lake = next(
            (st for r in self.runtimes.values() if (st := r.lake.stats() if r.lake else None)),
            None,
        )
        parts = self.parts
        return {
            "uptime_s": time.time() - started if started else 0.0,
            "ready": all(self.readiness().values()),
            "contacts": len(self.overlay.contacts()),
            "overlay": self.overlay.stats(),
            "data_plane": parts["data_plane"].stats(),
            "api": parts["api"].stats(),
            "counters": dict(self.counters),
            "job_table": parts["job_table"].stats(),
            "loop_lag": parts["loop_lag"].stats(),
            "lake": lake,
            "checkpoints_held": parts["checkpoints_held"].stats(),
        }

    def metrics_inputs(self) -> dict[str, dict[str, Any]]:
        """Per input: its counters."""
        return self.input_stats()

    def metrics_jobs(self) -> dict[str, dict[str, Any]]:
        """Per running job: its status and the newest stored epochs' flags."""
        out = {}
        for name, runtime in self.runtimes.items():
            st = runtime.status()
            st["results_now"] = results_now(runtime)
            out[name] = st
        return out
