r"""The agent: one overlay node, one data plane, one tree manager, many jobs.

Contract: :class:`Agent` is what ``elf agent`` runs (once per logical agent) and what the HTTP
API talks to. ``start()`` joins the overlay, opens the data plane (HTTP, authenticated with the
cluster secret), joins the cluster-wide *jobs tree* and catches up on the replicated job table,
starts its inputs and the HTTP API. Per job it holds a
:class:`~agent.runtime.job.runtime.JobRuntime`
with whichever roles it has: worker (it has the job's input), forwarder (inner node of a job
tree), master (root of a job tree). ``stop()`` is graceful: inputs stop, trees are left (children
re-join elsewhere, master results are handed to the next root), the overlay is left.

The Agent is a facade over parts that never see it whole (each is given narrow objects and
bound callables, the pattern of ``srt/trees/``):

* :mod:`~agent.runtime.host.supervisor` — the job table: submit, validate, change, publish,
  stop; reconcile entries into runtimes; anti-entropy and the table file. Job changes go to
  the jobs-tree root, which versions them and multicasts them to every agent; every agent
  keeps the whole table, so the jobs-tree root is never a single point of state (see
  ``agent/jobs/table.py``);
* :mod:`~agent.runtime.host.ticks` — the inputs, ingest and the tick loop;
* :mod:`~agent.runtime.host.control_plane` — tree callbacks, multicasts and queries;
* :mod:`~agent.runtime.host.peer_api` — every ``/agent/v1`` route (the peer wire);
* :mod:`~agent.runtime.host.ports` — the services a job runtime is given
  (``agent/runtime/services.py``: network and trees, job table, inputs) and the user API's;
* :mod:`~agent.runtime.host.views` — the plain summaries ops/ reads (dashboard, metrics).

The agent owns the background tasks its parts spawn (:class:`~overlay.tasks.BackgroundTasks`:
a failed task is counted as ``task_failed:<what>`` and logged, every task is cancelled on
stop). Its timings come from ``config.runtime`` (:class:`~agent.tunables.RuntimeTunables`).

**The event loop never runs per-record work.** Reading and parsing inputs (the ingest
endpoint's lines included), every job's ``map``, CBT inserts and epoch closing run on the
agent's record thread (:class:`~agent.runtime.record_thread.RecordThread`), one tick at a time
(:mod:`~agent.runtime.host.ticks`). A loop-lag sampler
(:class:`~agent.runtime.ops.looplag.LoopLag`) reports in ``status()`` how late the loop woke up.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from agent.config import AgentConfig
from agent.errors import Unavailable
from agent.jobs.job import load_entry_points
from agent.jobs.table import JobEntry, JobTable
from agent.runtime.host.control_plane import ControlPlane
from agent.runtime.host.peer_api import PeerApi
from agent.runtime.host.ports import InputPort, JobTablePort, NetworkPort, UserApi
from agent.runtime.host.supervisor import JOBS_TREE, JOBS_TREE_NAME, Supervisor
from agent.runtime.host.table_file import JobTableFile
from agent.runtime.host.ticks import Ticks
from agent.runtime.host.views import AgentView
from agent.runtime.job.runtime import JobRuntime
from agent.runtime.memory_budget import Held, MemoryBudget, MemoryConsumer
from agent.runtime.ops.dashboard.cluster import ClusterPicture
from agent.runtime.ops.dashboard.routes import DashboardRoutes
from agent.runtime.ops.http_api import HttpApi
from agent.runtime.ops.logs import AGENT, AgentName
from agent.runtime.ops.looplag import LoopLag
from agent.runtime.ops.membership_api import MembershipRoutes
from agent.runtime.ops.metrics import AgentMetrics
from agent.runtime.ops.ops_api import install as install_ops_routes
from agent.runtime.ops.results_stream import ResultStreams
from agent.runtime.ops.tap_api import TapRoutes
from agent.runtime.record_thread import InlineRecords, RecordThread
from agent.runtime.recovery.checkpoints import CheckpointStore
from agent.runtime.recovery.offsets import OffsetKeeper
from agent.runtime.results.lake_sink import lake_target
from overlay import OverlayNode
from overlay.tasks import BackgroundTasks
from srt import DataPlaneClient, DataPlaneServer, TreeManager
from srt.dataplane.datagram import DATAGRAM_KIND, FIELDS_ALLOWANCE, SnapshotDatagrams
from srt.dataplane.guard import ConnectionLimits
from srt.trees.types import JoinTimeout

__all__ = ["JOBS_TREE", "Agent", "load_job_classes", "spans_one_tree"]

log = logging.getLogger(__name__)


def spans_one_tree(views: Sequence[dict[str, Any] | None]) -> bool:
    """Whether members' views of one tree (``TreeView.to_dict()`` form, None = not a member)
    form a single tree: everyone attached, exactly one root, one child link per non-root."""
    if any(v is None or v["state"] == "joining" for v in views):
        return False
    roots = sum(1 for v in views if v["is_root"])  # type: ignore[index]
    return roots == 1 and sum(len(v["children"]) for v in views) == len(views) - 1  # type: ignore[index]


_JOB_CLASSES_LOADED = False


def load_job_classes() -> None:
    """Register the job classes installed distributions declare (entry points ``elf.jobs``),
    once per process; a broken plug-in is logged, never fatal."""
    global _JOB_CLASSES_LOADED
    if _JOB_CLASSES_LOADED:
        return
    _JOB_CLASSES_LOADED = True
    for name in load_entry_points():
        if ":" in name:
            log.warning("job class entry point failed: %s", name)


class Agent:
    """One logical ELF agent (see the module contract)."""

    def __init__(self, config: AgentConfig, *, network: Any = None) -> None:
        self.config = config
        self.tunables = t = config.runtime
        self.overlay = OverlayNode(
            config.secret,
            host=config.host,
            port=config.overlay_port,
            domain=config.domain,
            tunables=config.tunables,
            node_id=config.node_id,
            network=network,
        )
        self.srt_tunables = dataclasses.replace(
            config.srt, heartbeat_interval=config.heartbeat_interval
        )
        self.server = DataPlaneServer(
            config.secret, host=config.host, port=config.data_port, tunables=self.srt_tunables
        )
        self.client = DataPlaneClient(config.secret, tunables=self.srt_tunables)
        # small snapshots go to the parent as one overlay datagram (srt/dataplane/datagram.py),
        # at most what fits the overlay's datagram beside the request's other fields
        room = config.tunables.max_datagram - FIELDS_ALLOWANCE
        self.snapshot_datagrams = SnapshotDatagrams(
            lambda node, kind, payload, timeout: self.overlay.request(
                node, kind, payload, timeout=timeout, retries=0
            ),
            limit=max(0, min(self.srt_tunables.snapshot_datagram_bytes, room)),
            timeout=self.srt_tunables.snapshot_datagram_timeout,
        )
        self.trees: TreeManager | None = None
        table = JobTable(stopped_ttl=t.stopped_job_ttl, tombstone_seconds=t.tombstone_seconds)
        self.runtimes: dict[str, JobRuntime] = {}
        # file positions, acked epochs
        self.offsets = OffsetKeeper(config.data_dir, max_pending=t.max_pending)
        #: other agents' checkpoints held here as one of their hot replicas (checkpoints.py)
        self.checkpoints = CheckpointStore(t.checkpoint_store_bytes)
        #: everything this agent holds shares one budget (agent/runtime/memory_budget.py)
        self.memory = MemoryBudget(t.memory_budget_bytes)
        self.data_url = ""
        self.started_at = 0.0
        self.tasks = BackgroundTasks(self._task_failed)
        self._loops: list[asyncio.Task[Any]] = []
        self._running = False
        self.counters: dict[str, int] = {}
        #: per-record work runs here (started with the agent); inline before start
        self.records: RecordThread | InlineRecords = InlineRecords()
        self.loop_lag = LoopLag()
        self._log_name = AgentName()  # this agent in log records (agent/runtime/ops/logs.py)
        running = self.running
        self.ticks = Ticks(
            config,
            self.runtimes,
            self.offsets,
            records=lambda: self.records,
            count=self.count,
            running=running,
            after_tick=self._rebalance_memory,
        )
        self.inputs = self.ticks.inputs
        self.supervisor = Supervisor(
            table,
            self.runtimes,
            new_runtime=self._new_runtime,
            trees=self._tree_manager,
            client=self.client,
            checkpoints=self.checkpoints,
            # the table on disk (None without a data directory): a restart runs its jobs at once
            table_file=JobTableFile(config.data_dir) if config.data_dir else None,
            tunables=t,
            spawn=self.spawn,
            count=self.count,
            running=running,
        )
        self.control = ControlPlane(
            self.runtimes,
            self.supervisor,
            node_id=lambda: self.overlay.id,
            data_url=lambda: self.data_url,
            spawn=self.spawn,
            count=self.count,
            running=running,
        )
        # what each job runtime is given of its agent (agent/runtime/services.py)
        self.network = NetworkPort(
            self.overlay,
            self.client,
            self.srt_tunables,
            config.domain,
            trees=lambda: self.trees,
            data_url=lambda: self.data_url,
            count=self.count,
            snapshot_datagrams=self.snapshot_datagrams,
        )
        s = self.supervisor
        self.job_table = JobTablePort(
            publish_spec=s.publish_spec,
            announce_entry=s.announce_entry,
            record_entry=s.record_entry,
            master_tree=s.master_tree,
        )
        self.input_port = InputPort(self.ticks)
        #: the user API's answers (ports.UserApi: 404 for a job that does not run here)
        self.user = UserApi(
            self.runtimes,
            s,
            node_id=lambda: self.overlay.id,
            status=self.status,
            ingest=self.ticks.ingest,
        )
        #: the daemon sets ``on_leave`` to its SIGTERM path; an agent run in-process stops itself
        self.on_leave: Callable[[], None] | None = None
        self._leaving: asyncio.Task[None] | None = None
        self._install_ops(table)

    def _install_ops(self, table: JobTable) -> None:
        """The user API, the dashboard, the metrics, the membership routes and the peer wire,
        each given its narrow port or view (agent/runtime/host/ports.py, views.py)."""
        config, t, s = self.config, self.tunables, self.supervisor
        limits = ConnectionLimits(
            head_timeout=t.api_head_timeout,
            body_timeout=t.api_body_timeout,
            idle_timeout=t.api_idle_timeout,
            max_preauth=t.api_max_preauth,
        )
        self.api = HttpApi(
            self.user, config.api_token, host=config.api_host, port=config.api_port, limits=limits
        )
        self.views = AgentView(
            overlay=self.overlay,
            client=self.client,
            runtimes=self.runtimes,
            inputs=self.inputs,
            parts={
                "data_plane": self.server,
                "api": self.api,
                "job_table": table,
                "loop_lag": self.loop_lag,
                "checkpoints_held": self.checkpoints,
            },
            counters=self.counters,
            jobs=s.jobs,
            trees=lambda: self.trees,
            readiness=self.readiness,
            describe=self.describe,
            started_at=lambda: self.started_at,
            urls=self.network.data_url_of,
        )
        # the dashboard (docs/dashboard.md): its routes on the API, its summary on the data plane
        self.dashboard = ClusterPicture(self.views, max_agents=t.dashboard_max_agents)
        self.dashboard_routes = DashboardRoutes(
            self.dashboard, self.user, max_streams=t.dashboard_streams
        )
        self.dashboard_routes.install(self.api.app)
        #: this agent's Prometheus registry (``GET /metrics``), read at scrape time
        self.metrics = AgentMetrics(self.views)
        install_ops_routes(self.api, self.views, self.metrics, metrics_public=config.metrics_public)
        #: retiring origins and leaving (agent/runtime/ops/membership_api.py)
        self.membership = MembershipRoutes(
            self.user.job_runtime,
            lambda: sorted(self.runtimes),
            self.client,
            lambda: self.data_url,
            lambda: self.overlay.id,
            self.leave,
        )
        self.membership.install(self.api)
        #: live samples of a job's records (``elf tap``; agent/runtime/ops/tap_api.py)
        self.tap_routes = TapRoutes(self.user.job_runtime, lambda: self.overlay.id)
        self.tap_routes.install(self.api)
        #: a job's results as they change (``elf results --follow``; ops/results_stream.py)
        self.result_streams = ResultStreams(self.user)
        self.result_streams.install(self.api)
        #: every /agent/v1 route (agent/runtime/host/peer_api.py)
        self.peers = PeerApi(
            self.runtimes,
            checkpoints=self.checkpoints,
            table=table,
            summary=self.dashboard.summary,
            count=self.count,
        )

    @property
    def table(self) -> JobTable:
        """This agent's copy of the replicated job table (the supervisor's)."""
        return self.supervisor.table

    @table.setter
    def table(self, table: JobTable) -> None:
        """Replace the table (a test's cut-off agent): every part reads the new one."""
        self.supervisor.table = self.peers.table = table
        self.views.parts = {**self.views.parts, "job_table": table}

    def _new_runtime(self, entry: JobEntry) -> JobRuntime:
        """A runtime for a job the table runs (the supervisor's factory): it is given the
        agent's narrow services, never the agent."""
        runtime = JobRuntime(
            entry,
            network=self.network,
            job_table=self.job_table,
            inputs=self.input_port,
            tasks=self.tasks,
            tunables=self.tunables,
            lake=lake_target(self.config.lake, self.config.data_dir, self.node_id),
            records=self.records,
            data_dir=self.config.data_dir,
        )
        runtime.observer = self.metrics  # read-only: latency histograms
        return runtime

    # ---- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> None:
        # Log records of this agent's tasks and callbacks name it: everything created while
        # starting copies the context holding this name (filled in once the overlay has bound
        # its port and so has an id); the caller's context is restored after.
        token = AGENT.set(self._log_name)
        try:
            await self._start()
        finally:
            AGENT.reset(token)

    async def _start(self) -> None:
        load_job_classes()
        self.records = RecordThread(f"elf-records-{self.config.overlay_port or 'agent'}")
        self.peers.install(self.server)
        self.dashboard.attach()
        self.overlay.handle("agent.where", lambda payload, sender: {"data_url": self.data_url})
        self.overlay.handle(DATAGRAM_KIND, self.server.serve_datagram)
        self.data_url = await self.server.start()
        self.trees = TreeManager(
            self.overlay,
            data_url=self.data_url,
            # the agent's heartbeat_interval is the trees' (parent timeout: 3.5 of them)
            tunables=self.srt_tunables,
        )
        self.trees.add_listener(self.control)
        self.trees.on_multicast(self.control.on_multicast)
        self.trees.on_query(self.control.on_query)
        await self.trees.start()  # before the overlay: no tree message can arrive too early
        self.overlay.on_node_failed(self.control.node_failed)
        await self.overlay.start(self.config.bootstrap)
        self._log_name.value = f"{self.overlay.id:040x}"
        self.ticks.open_inputs()
        self.supervisor.restore_table()  # before the tick loop reads: every job sees line one
        self._running = True
        self.started_at = time.time()
        with contextlib.suppress(JoinTimeout):  # the tree manager keeps retrying
            await self.trees.join(JOBS_TREE, job=JOBS_TREE_NAME, subscriber=True)
        await self.supervisor.first_resync()
        await self.api.start()
        self._loops = [
            asyncio.create_task(self.ticks.tick_loop(), name="elf-tick"),
            asyncio.create_task(self.supervisor.resync_loop(), name="elf-resync"),
            asyncio.create_task(self.loop_lag.run(), name="elf-loop-lag"),
            asyncio.create_task(self.supervisor.collect_loop(), name="elf-job-gc"),
            asyncio.create_task(self.supervisor.table_file_loop(), name="elf-job-table-file"),
        ]
        log.info("agent started: data plane %s, API %s", self.data_url, self.api.url)

    async def stop(self) -> None:
        """Graceful: hand master results over, leave every tree, leave the overlay. Each step
        is attempted even if an earlier one fails (and the failure is logged)."""
        if not self._running:
            return
        self._running = False
        for task in self._loops:
            task.cancel()
        for task in self._loops:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        # let the record thread finish what it was given (an ingest, a change) before the
        # runtimes stop; it is ended last, once nothing can submit to it any more
        await self.records.run(lambda: None)
        steps: list[tuple[str, Callable[[], Awaitable[Any]]]] = [
            (f"stop job {name}", lambda r=runtime: r.stop(graceful=True))
            for name, runtime in self.runtimes.items()
        ]
        steps.append(("stop the HTTP API", self.api.stop))
        if self.trees is not None:
            steps.append(("leave the trees", self.trees.stop))
        for what, step in steps:
            try:
                await step()
            except Exception as exc:
                log.warning("%s failed during shutdown: %r", what, exc)
        self.offsets.observe(self.inputs, set(), list(self.runtimes.values()), final=True)
        for runtime in self.runtimes.values():
            await runtime.release()  # spill files and results go with the agent
        self.ticks.close()
        self.tasks.cancel_all()
        try:
            await self.overlay.leave()
        except Exception as exc:
            log.warning("leaving the overlay failed: %r", exc)
        finally:
            await self.client.close()
            await self.server.stop()
            records, self.records = self.records, InlineRecords()
            await asyncio.to_thread(records.close)
            pool, self.ticks.parse_pool = self.ticks.parse_pool, None
            if pool is not None:  # after the record thread: nothing submits now
                await asyncio.to_thread(pool.close)

    def leave(self) -> None:
        """Stop gracefully as on SIGTERM (``POST /api/v1/leave``): the daemon's stop when it
        set ``on_leave``, else this agent's own :meth:`stop`."""
        if self.on_leave is not None:
            self.on_leave()
        elif self._leaving is None:
            self._leaving = asyncio.get_running_loop().create_task(self.stop(), name="elf-leave")

    def running(self) -> bool:
        """Between a successful start and the beginning of stop (the parts' loops run)."""
        return self._running

    @property
    def node_id(self) -> int:
        """This agent's overlay id (known once the agent started)."""
        return self.overlay.id

    def describe(self) -> dict[str, Any]:
        """What ``elf agent`` prints when ready."""
        host, port = self.overlay.info.address
        return {
            "node_id": f"{self.overlay.id:040x}",
            "overlay": f"{host}:{port}",
            "data_url": self.data_url,
            "api_url": self.api.url,
        }

    def spawn(self, coro: Awaitable[Any], what: str) -> None:
        """Run ``coro`` in the background; failures are logged and counted, never lost."""
        self.tasks.spawn(coro, what)

    def _task_failed(self, what: str, exc: BaseException) -> None:
        self.count(f"task_failed:{what}")
        log.warning("%s failed: %r", what, exc)

    def count(self, what: str, n: int = 1) -> None:
        self.counters[what] = self.counters.get(what, 0) + n

    def _tree_manager(self) -> TreeManager:
        if self.trees is None:
            raise Unavailable("the agent is not started")
        return self.trees

    # ---- what users and tools ask (the user API's answers: ports.UserApi) ----------------------

    async def submit(self, spec: dict[str, Any]) -> dict[str, Any]:
        return await self.supervisor.submit(spec)

    def jobs(self) -> list[dict[str, Any]]:
        return self.supervisor.jobs()

    async def stop_job(self, name: str) -> dict[str, Any]:
        return await self.supervisor.stop_job(name)

    async def change_job(self, name: str, change: Any) -> dict[str, Any]:
        return await self.user.change_job(name, change)

    async def results(
        self, name: str, epoch: int | None, emit: str | None = None
    ) -> dict[str, Any]:
        return await self.user.results(name, epoch, emit)

    async def query(self, name: str, message: dict[str, Any]) -> dict[str, Any]:
        return await self.user.query(name, message)

    async def local_query(self, name: str, params: dict[str, str]) -> dict[str, Any]:
        return await self.user.local_query(name, params)

    def job_timings(self, name: str) -> dict[str, Any]:
        return self.user.job_timings(name)

    async def ingest(self, input_name: str, lines: Sequence[bytes | str]) -> dict[str, Any]:
        return await self.ticks.ingest(input_name, lines)

    def tick_now(self, inputs: Sequence[str]) -> None:
        self.ticks.tick_now(inputs)

    async def merge_table_from(self, url: str) -> None:
        """One anti-entropy exchange with the agent at data-plane ``url``."""
        await self.supervisor.merge_table_from(url)

    def jobs_tree(self) -> dict[str, Any] | None:
        """This agent's view of the cluster-wide jobs tree (``TreeView.to_dict()``)."""
        view = self.trees.view(JOBS_TREE) if self.trees is not None else None
        return view.to_dict() if view is not None else None

    def status(self) -> dict[str, Any]:
        self._tree_manager()  # Unavailable before start
        return {
            **self.describe(),
            "uptime_s": round(time.time() - self.started_at, 3),
            "domain": self.config.domain,
            "neighbours": [f"{n.id:040x}" for n in self.overlay.leaf_set()],
            "contacts": len(self.overlay.contacts()),
            "jobs": {name: r.status() for name, r in sorted(self.runtimes.items())},
            "jobs_tree": self.jobs_tree(),
            "job_table": self.table.stats(),
            "inputs": {name: src.stats() for name, src in self.inputs.items()},
            "offsets": self.offsets.stats(),
            "checkpoints_held": self.checkpoints.stats(),
            "memory": self.memory.stats(),
            "counters": dict(self.counters),
            "loop_lag": self.loop_lag.stats(),
            "overlay": self.overlay.stats(),
            "data_plane": self.server.stats(),
            # this agent's small snapshots to its parents: sent, acknowledged, unanswered
            "snapshot_datagrams": dict(self.snapshot_datagrams.counters),
            "api": self.api.stats(),
            "dashboard": self.dashboard_routes.stats(),
        }

    def _rebalance_memory(self) -> None:
        """After a tick, at most every second: every job's and the held checkpoints' share of
        the agent's memory budget (they spill or shed down to it)."""
        if not self.memory.due():
            return
        consumers: list[MemoryConsumer] = [
            c for r in list(self.runtimes.values()) if not r.stopped for c in r.memory_consumers()
        ]
        held = self.checkpoints
        consumers.append(
            Held(
                "checkpoints held for other agents",
                "shed",
                self.tunables.checkpoint_store_bytes,
                lambda: held.bytes,
                held.set_limit,
            )
        )
        self.memory.rebalance(consumers)

    def readiness(self) -> dict[str, bool]:
        """The readiness checks of ``GET /readyz`` (booleans only: nothing to leak)."""
        running = self._running and self.trees is not None
        view = self.trees.view(JOBS_TREE) if self.trees is not None else None
        return {
            "started": running,
            # alone in its cluster (no bootstrap) an agent has joined by definition
            "overlay": running and (bool(self.overlay.contacts()) or not self.config.bootstrap),
            "jobs_tree": view is not None and view.state != "joining",
            "job_table": self.supervisor.table_synced,
        }
