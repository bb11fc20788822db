r"""The agent: one overlay node, one data plane, one tree manager, many jobs.

Contract: :class:`Agent` is what ``elf agent`` runs (once per logical agent) and what the HTTP
API talks to. ``start()`` joins the overlay, opens the data plane (HTTP, authenticated with the
cluster secret), joins the cluster-wide *jobs tree* and catches up on the replicated job table,
starts its inputs and the HTTP API. Per job it holds a
:class:`~agent.runtime.job.runtime.JobRuntime`
with whichever roles it has: worker (it has the job's input), forwarder (inner node of a job
tree), master (root of a job tree). ``stop()`` is graceful: inputs stop, trees are left (children
re-join elsewhere, master results are handed to the next root), the overlay is left.

Job changes (submit, stop) go to the jobs-tree root, which versions them and multicasts them to
every agent; every agent keeps the whole table, so the jobs-tree root is never a single point of
state (see ``agent/jobs/table.py``). Anti-entropy re-syncs the table periodically.

The agent implements the services a job runtime is given (``agent/runtime/services.py``:
network and trees, job table, inputs) and owns the background tasks they spawn
(:class:`~overlay.tasks.BackgroundTasks`: a failed task is counted as ``task_failed:<what>``
and logged, every task is cancelled on stop). Its timings come from ``config.runtime``
(:class:`~agent.tunables.RuntimeTunables`).

**The event loop never runs per-record work.** Reading and parsing inputs (the ingest
endpoint's lines included), every job's ``map``, CBT inserts and epoch closing run on the
agent's record thread (:class:`~agent.runtime.record_thread.RecordThread`), one tick at a time:
the tick loop ``await``\ s the thread's part of a tick (:meth:`Agent._tick_work`) and then offers
the closed epochs to the trees on the loop. An ingest request is processed before it is
answered (the request waits for the thread; the loop does not). A loop-lag sampler
(:class:`~agent.runtime.ops.looplag.LoopLag`) reports in ``status()`` how late the loop woke up.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import dataclasses
import logging
import math
import threading
import time
import weakref
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from aiohttp import web

from agent.config import AgentConfig, InputConfig
from agent.errors import BadRequest, Conflict, NotFound, StatusError, Unavailable
from agent.ingest.base import Resumable
from agent.ingest.columnar.pool import ChunkParsePool
from agent.ingest.columnar.reader import install_columnar
from agent.ingest.fastpath import install_prefilters
from agent.ingest.inputs import open_input
from agent.ingest.replay import ReplayError, replay_range
from agent.ingest.stream import IngestQueue, StreamInput
from agent.ingest.tail import FileTail
from agent.jobs.changes import parse_change
from agent.jobs.job import load_entry_points
from agent.jobs.spec import JobSpec
from agent.jobs.table import RUNNING, STOPPED, JobEntry, JobTable
from agent.runtime.host import admission
from agent.runtime.host.heap import trim_heap
from agent.runtime.host.table_file import JobTableFile
from agent.runtime.job.runtime import JobRuntime
from agent.runtime.ops.dashboard.cluster import SUMMARY_PATH, ClusterPicture
from agent.runtime.ops.dashboard.routes import DashboardRoutes
from agent.runtime.ops.http_api import HttpApi
from agent.runtime.ops.logs import AGENT, AgentName, job_context
from agent.runtime.ops.looplag import LoopLag
from agent.runtime.ops.membership_api import RETIRE_PATH, MembershipRoutes
from agent.runtime.ops.metrics import AgentMetrics
from agent.runtime.ops.ops_api import install as install_ops_routes
from agent.runtime.record_thread import InlineRecords, RecordThread
from agent.runtime.recovery.checkpoints import CheckpointStore, decode_epochs, decode_records
from agent.runtime.recovery.offsets import OffsetKeeper
from agent.runtime.recovery.result_items import decode_items
from agent.runtime.results.lake_sink import lake_target
from cbt import Snapshot, SnapshotError
from overlay import NodeInfo, OverlayNode, key_for
from overlay.tasks import BackgroundTasks
from srt import (
    DataPlaneClient,
    DataPlaneError,
    DataPlaneServer,
    SnapshotName,
    TreeManager,
)
from srt.dataplane.guard import ConnectionLimits
from srt.dataplane.lineage import decode as lineage_of
from srt.errors import Reject
from srt.ids import app_id, placement_id
from srt.trees.types import JoinTimeout

log = logging.getLogger(__name__)

JOBS_TREE = key_for("elf/jobs-tree")
JOBS_TREE_NAME = "elf.jobs"
INGEST_INPUT = "ingest"
TABLE_FILE_SECONDS = 0.25  # how often a changed job table is written to disk
FIRST_RESYNC_RETRY = 0.25  # seconds before the first anti-entropy retry (doubling)
MAX_DRY_RUNS = 4  # unfinished job-spec dry runs (threads) at once; more get a 503


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


@dataclasses.dataclass(frozen=True)
class _Ticked:
    """What the record thread's part of a tick hands back to the loop."""

    busy: bool  # some input had data
    polled: set[str]
    closed: list[tuple[JobRuntime, list[tuple[int, list[Snapshot]]]]]
    positions: dict[str, _Position]  # resumable inputs' positions right after the poll


@dataclasses.dataclass(frozen=True)
class _Position:
    """A resumable input's ``state()`` captured on the record thread (``Resumable``), and
    where its tail began reading in this run (``FileTail.origin``)."""

    captured: dict[str, Any]
    origin: dict[str, Any] | None = None

    def state(self) -> dict[str, Any]:
        return self.captured


class Agent:
    """One logical ELF agent (see the module contract)."""

    def __init__(self, config: AgentConfig, *, network: Any = None) -> None:
        self.config = config
        self.tunables = config.runtime
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
        self.trees: TreeManager | None = None
        t = self.tunables
        self.api = HttpApi(
            self,
            config.api_token,
            host=config.api_host,
            port=config.api_port,
            limits=ConnectionLimits(
                head_timeout=t.api_head_timeout,
                body_timeout=t.api_body_timeout,
                idle_timeout=t.api_idle_timeout,
                max_preauth=t.api_max_preauth,
            ),
        )
        # the dashboard (docs/dashboard.md): its routes on the API, its summary on the data plane
        self.dashboard = ClusterPicture(self, max_agents=t.dashboard_max_agents)
        self.dashboard_routes = DashboardRoutes(
            self.dashboard, self, max_streams=t.dashboard_streams
        )
        self.dashboard_routes.install(self.api.app)
        self.table = JobTable(
            stopped_ttl=self.tunables.stopped_job_ttl,
            tombstone_seconds=self.tunables.tombstone_seconds,
        )
        # the table on disk (None without a data directory): a restart runs its jobs at once
        self.table_file = JobTableFile(config.data_dir) if config.data_dir else None
        self._table_saved = -1  # the table revision last written
        self._synced = False  # a first anti-entropy exchange succeeded
        # the runtimes the record thread has fed at least once (a new one joins the inputs
        # the others read: _join_inputs)
        self._fed: weakref.WeakSet[JobRuntime] = weakref.WeakSet()
        self.runtimes: dict[str, JobRuntime] = {}
        self.inputs: dict[str, FileTail | StreamInput | IngestQueue] = {}
        # file positions, acked epochs
        self.offsets = OffsetKeeper(config.data_dir, max_pending=self.tunables.max_pending)
        self.parse_pool: ChunkParsePool | None = None
        #: other agents' checkpoints held here as one of their hot replicas (checkpoints.py)
        self.checkpoints = CheckpointStore(self.tunables.checkpoint_store_bytes)
        self.input_configs: dict[str, InputConfig] = {}
        self.data_url = ""
        self.started_at = 0.0
        self._tasks = BackgroundTasks(self._task_failed)
        self._loops: list[asyncio.Task[Any]] = []
        self._running = False
        self.counters: dict[str, int] = {}
        #: per-record work runs here (started with the agent); inline before start
        self.records: RecordThread | InlineRecords = InlineRecords()
        self._tick_requests: set[str] = set()  # inputs to read at once (tick_now)
        self._tick_event = asyncio.Event()
        self.loop_lag = LoopLag()
        self._admission_running = 0  # dry-run threads not yet finished (hung ones included)
        self._log_name = AgentName()  # this agent in log records (agent/runtime/ops/logs.py)
        #: set once a job-table resync (or being the jobs-tree root without children) succeeded
        self.table_synced = False
        #: this agent's Prometheus registry (``GET /metrics``), read at scrape time
        self.metrics = AgentMetrics(self)
        install_ops_routes(self.api, self, self.metrics, metrics_public=config.metrics_public)
        #: retiring origins and leaving (agent/runtime/ops/membership_api.py); the daemon sets
        #: ``on_leave`` to its SIGTERM path, an agent run in-process stops itself
        self.on_leave: Callable[[], None] | None = None
        self._leaving: asyncio.Task[None] | None = None
        self.membership = MembershipRoutes(
            self.runtimes.get,
            lambda: sorted(self.runtimes),
            self.client,
            lambda: self.data_url,
            lambda: self.overlay.id,
            self.leave,
        )
        self.membership.install(self.api)

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
        self.server.on_snapshot(self._on_snapshot)
        self.server.route("POST", "/agent/v1/jobs", self._serve_jobs)
        self.server.route("POST", "/agent/v1/results", self._serve_results)
        self.server.route("POST", "/agent/v1/handover", self._serve_handover)
        self.server.route("POST", "/agent/v1/late", self._serve_late)
        self.server.route("POST", "/agent/v1/resend", self._serve_resend)
        self.server.route("POST", "/agent/v1/replica", self._serve_replica)
        self.server.route("POST", "/agent/v1/origin", self._serve_origin)
        self.server.route("POST", "/agent/v1/leave", self._serve_leave)
        self.server.route("POST", "/agent/v1/members", self._serve_members)
        self.server.route("POST", "/agent/v1/checkpoint", self._serve_checkpoint)
        self.server.route("POST", "/agent/v1/checkpoint/fetch", self._serve_checkpoint_fetch)
        self.server.route("POST", "/agent/v1/recv", self._serve_recv)
        self.server.route("POST", RETIRE_PATH, self.membership.serve_retire)
        self.server.route("POST", SUMMARY_PATH, self._serve_summary)
        self.dashboard.attach()
        self.overlay.handle("agent.where", lambda payload, sender: {"data_url": self.data_url})
        self.data_url = await self.server.start()
        self.trees = TreeManager(
            self.overlay,
            data_url=self.data_url,
            # the agent's heartbeat_interval is the trees' (parent timeout: 3.5 of them)
            tunables=self.srt_tunables,
        )
        self.trees.add_listener(self)
        self.trees.on_multicast(self._on_multicast)
        self.trees.on_query(self._on_query)
        await self.trees.start()  # before the overlay: no tree message can arrive too early
        self.overlay.on_node_failed(self._node_failed)
        await self.overlay.start(self.config.bootstrap)
        self._log_name.value = f"{self.overlay.id:040x}"
        self._open_inputs()
        self._restore_table()  # before the tick loop reads: every job sees the first line
        self._running = True
        self.started_at = time.time()
        with contextlib.suppress(JoinTimeout):  # the tree manager keeps retrying
            await self.trees.join(JOBS_TREE, job=JOBS_TREE_NAME, subscriber=True)
        with contextlib.suppress(StatusError):
            self._synced = await self._resync()
        await self.api.start()
        self._loops = [
            asyncio.create_task(self._tick_loop(), name="elf-tick"),
            asyncio.create_task(self._resync_loop(), name="elf-resync"),
            asyncio.create_task(self.loop_lag.run(), name="elf-loop-lag"),
            asyncio.create_task(self._collect_loop(), name="elf-job-gc"),
            asyncio.create_task(self._table_file_loop(), name="elf-job-table-file"),
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
        for source in self.inputs.values():
            source.close()
        self._tasks.cancel_all()
        try:
            await self.overlay.leave()
        except Exception as exc:
            log.warning("leaving the overlay failed: %r", exc)
        finally:
            await self.client.close()
            await self.server.stop()
            records, self.records = self.records, InlineRecords()
            await asyncio.to_thread(records.close)
            if self.parse_pool is not None:  # after the record thread: nothing submits now
                await asyncio.to_thread(self.parse_pool.close)
                self.parse_pool = None

    def leave(self) -> None:
        """Stop gracefully as on SIGTERM (``POST /api/v1/leave``): the daemon's stop when it
        set ``on_leave``, else this agent's own :meth:`stop`."""
        if self.on_leave is not None:
            self.on_leave()
        elif self._leaving is None:
            self._leaving = asyncio.get_running_loop().create_task(self.stop(), name="elf-leave")

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
        self._tasks.spawn(coro, what)

    def _task_failed(self, what: str, exc: BaseException) -> None:
        self.count(f"task_failed:{what}")
        log.warning("%s failed: %r", what, exc)

    def count(self, what: str, n: int = 1) -> None:
        self.counters[what] = self.counters.get(what, 0) + n

    # ---- inputs --------------------------------------------------------------------------------

    def _open_inputs(self) -> None:
        configs = list(self.config.inputs)
        if not any(c.name == INGEST_INPUT for c in configs):
            configs.append(InputConfig(name=INGEST_INPUT, type="ingest"))
        for cfg in configs:
            self.input_configs[cfg.name] = cfg
            state = self.offsets.resume_state(cfg.name)
            self.inputs[cfg.name] = source = open_input(cfg, self.config.data_dir, state=state)
            if hasattr(source, "parse_pool"):  # file tails: a backlog parsed on both cores
                source.parse_pool = self._parse_pool()

    def _parse_pool(self) -> ChunkParsePool | None:
        """The agent's parse-ahead processes (``parse_processes``; None: off), started on the
        first backlog and shared by its file inputs."""
        if self.tunables.parse_processes and self.parse_pool is None:
            self.parse_pool = ChunkParsePool(self.tunables.parse_processes)
        return self.parse_pool

    def input_names(self) -> set[str]:
        return set(self.inputs)

    def timestamp_field(self, input_name: str) -> str:
        """The event-time field of ``input_name``'s records (InputService)."""
        return self.input_configs[input_name].timestamp_field

    def resume_spec(self, spec: JobSpec) -> JobSpec:
        """``spec`` moved past the epochs passed on before a restart (InputService; see
        ``agent/runtime/recovery/offsets.py``)."""
        return self.offsets.resume_spec(spec)

    async def ingest(self, input_name: str, lines: Sequence[bytes | str]) -> dict[str, Any]:
        source = self.inputs.get(input_name)
        if source is None:
            raise NotFound(f"no input named {input_name!r} on this agent")
        if not isinstance(source, IngestQueue):
            raise BadRequest(f"input {input_name!r} tails a file; ingest into an ingest input")
        # Parsing the lines and processing them run on the record thread, in one step: the
        # request is answered once its records are in the jobs (as before), and a runtime
        # change submitted after this request applies to later records only. A record that
        # closes an epoch sends that epoch up the tree without a polling delay.
        runtimes = list(self.runtimes.values())
        outcome, ticked = await self.records.run(
            self._ingest_work, source, lines, input_name, runtimes
        )
        if ticked is not None:
            self._tick_done(ticked)
        return outcome

    def _ingest_work(
        self, source: IngestQueue, lines: list[str], input_name: str, runtimes: list[JobRuntime]
    ) -> tuple[dict[str, Any], _Ticked | None]:
        """Record thread: validate and enqueue ``lines``, then feed the jobs reading them."""
        outcome = source.put_lines(lines).to_dict()
        if not outcome["accepted"]:
            return outcome, None
        return outcome, self._tick_work({input_name}, runtimes)

    async def _tick_loop(self) -> None:
        """Tick every ``tick_seconds`` (at once again while inputs have data: a file tail
        reads a chunk per poll), and in between whenever :meth:`tick_now` asks."""
        next_full = 0.0
        while self._running:
            now = time.monotonic()
            if now >= next_full:
                only: set[str] | None = None
                next_full = now + self.tunables.tick_seconds
                self._tick_requests = set()
            else:
                only, self._tick_requests = self._tick_requests, set()
            self._tick_event.clear()
            busy = False
            try:
                busy = await self._tick_async(only)
            except Exception:  # a bug in one job must not stop the agent's clock
                self.count("tick_errors")
                log.exception("agent tick failed")
            if busy:
                next_full = 0.0
                await asyncio.sleep(0)
                continue
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(
                    self._tick_event.wait(), max(0.0, next_full - time.monotonic())
                )

    def tick_now(self, inputs: Sequence[str]) -> None:
        """Have the jobs reading ``inputs`` run now (read, process, close epochs), between
        ticks: the tick loop does it next, on the record thread; this returns at once."""
        self._tick_requests.update(inputs)
        self._tick_event.set()

    async def _tick_async(self, only: set[str] | None = None) -> bool:
        """One tick: the record thread reads and processes, the loop delivers; True when
        some input had data."""
        ticked = await self.records.run(self._tick_work, only, list(self.runtimes.values()))
        return self._tick_done(ticked)

    def _tick(self, only: set[str] | None = None) -> bool:
        """One tick, blocking the caller until the record thread has done its part (tools and
        tests; the agent itself ticks through :meth:`_tick_async`)."""
        ticked = self.records.run_blocking(self._tick_work, only, list(self.runtimes.values()))
        return self._tick_done(ticked)

    def _tick_work(self, only: set[str] | None, runtimes: list[JobRuntime]) -> _Ticked:
        """Record thread: poll the inputs jobs read, feed the jobs, collect closed epochs."""
        # Only inputs some job reads are polled: unread file data stays in the file and ingested
        # records stay queued (bounded) until a job that wants them arrives. Nor are inputs a
        # job over its CPU budget reads, once its backlog is full: they back up at the source.
        wanted = {name for runtime in runtimes for name in runtime.inputs}
        if only is not None:
            wanted &= only
        install_prefilters(self.inputs, self.input_configs, runtimes)
        install_columnar(self.inputs, self.input_configs, runtimes, enabled=self.tunables.columnar)
        closed = []
        new = [runtime for runtime in runtimes if runtime not in self._fed]
        if new:  # a job new here catches up with what the others read
            readers = [runtime for runtime in runtimes if runtime in self._fed]
            for runtime in new:
                closed.extend(self._join_inputs(runtime, readers))
            self._fed.update(new)
        held = {name for runtime in runtimes if runtime.backlog_full() for name in runtime.inputs}
        polled = wanted - held
        batches = {name: self.inputs[name].poll() for name in polled}
        for runtime in runtimes:
            if only is not None and not wanted.intersection(runtime.inputs):
                continue
            try:
                work = runtime.work({name: batches.get(name, []) for name in runtime.inputs})
            except Exception as exc:
                # One job's failure is that job's: the jobs after it still get this tick's
                # records (a failing job used to starve every job behind it). Its records of
                # this tick may be lost: loud, counted, never silent.
                runtime.count("tick_errors")
                log.warning("job %s: its tick failed (other jobs go on): %r", runtime.name, exc)
                continue
            closed.append((runtime, work))
        busy = any(b or getattr(b, "skipped", 0) for b in batches.values())
        # the read positions as of this poll, for the loop's offset keeping (the live inputs
        # belong to this thread)
        positions = {
            name: _Position(source.state(), getattr(source, "origin", None))
            for name in polled
            if isinstance(source := self.inputs[name], Resumable)
        }
        return _Ticked(busy, polled, closed, positions)

    def _tick_done(self, ticked: _Ticked) -> bool:
        """Event loop: offer the closed epochs to the trees, note the offsets."""
        now = time.time()
        for runtime, closed in ticked.closed:
            runtime.deliver(closed, now)
        self.offsets.observe(ticked.positions, ticked.polled, list(self.runtimes.values()))
        return ticked.busy

    # ---- the job table -------------------------------------------------------------------------

    def _tree_manager(self) -> TreeManager:
        if self.trees is None:
            raise Unavailable("the agent is not started")
        return self.trees

    async def _ask_jobs_root(self, message: dict[str, Any]) -> dict[str, Any]:
        try:
            reply = await self._tree_manager().query(
                JOBS_TREE, message, timeout=self.tunables.query_timeout
            )
        except Exception as exc:
            raise Unavailable(f"the jobs-tree root did not answer: {exc}") from None
        if "error" in reply:
            status = reply.get("status", 400)
            cls = {404: NotFound, 409: Conflict}.get(status, BadRequest)
            raise cls(str(reply["error"]), field=_field(reply))
        return reply

    async def submit(self, spec: dict[str, Any]) -> dict[str, Any]:
        """Validate and dry-run a spec here (a 400 naming the field, without a network hop),
        then have the jobs-tree root version and multicast it (it checks again)."""
        parsed = await self._validate_spec(spec)
        admission.check_start_window(parsed, time.time(), self.tunables)
        return await self._ask_jobs_root({"op": "submit", "spec": parsed.to_dict()})

    async def _validate_spec(self, spec: Any) -> JobSpec:
        """:func:`admission.validate` off the event loop: the dry run calls the job class's
        ``setup()`` (job-class code), which gets ``admission_timeout`` seconds; one that does
        not finish is refused (400) and its thread abandoned — a daemon thread (a thread cannot
        be killed; a daemon one does not keep the process from exiting). At most
        ``MAX_DRY_RUNS`` may be unfinished at once (hung ones count): past that, 503."""
        if self._admission_running >= MAX_DRY_RUNS:
            raise Unavailable("too many job-spec dry runs still running; retry later")
        loop = asyncio.get_running_loop()
        done: asyncio.Future[JobSpec] = loop.create_future()

        def settle(result: JobSpec | None, exc: BaseException | None) -> None:
            self._admission_running -= 1
            if done.done():
                return  # timed out already: the answer went out
            if exc is not None:
                done.set_exception(exc)
            else:
                done.set_result(result)  # type: ignore[arg-type]

        def run() -> None:
            try:
                outcome: tuple[JobSpec | None, BaseException | None] = (
                    admission.validate(spec),
                    None,
                )
            except BaseException as exc:
                outcome = (None, exc)
            with contextlib.suppress(RuntimeError):  # the agent stopped and its loop closed
                loop.call_soon_threadsafe(settle, *outcome)

        self._admission_running += 1
        threading.Thread(target=run, name="elf-admission", daemon=True).start()
        try:
            return await asyncio.wait_for(asyncio.shield(done), self.tunables.admission_timeout)
        except TimeoutError:
            self.count("admission_timeouts")
            log.warning(
                "a job spec's dry run did not finish in %.1f s; refused",
                self.tunables.admission_timeout,
            )
            raise BadRequest(
                "invalid job spec: the job cannot run: its setup() did not finish within "
                f"{self.tunables.admission_timeout:g} s",
                field="spec",
            ) from None

    async def change_job(self, name: str, change: Any) -> dict[str, Any]:
        """Apply a runtime change (``agent/jobs/changes.py``) through the job's master."""
        runtime = self._runtime(name)
        parse_change(change)  # a bad request is answered here, without a network hop
        trees = self._tree_manager()
        try:
            reply = await trees.query(
                runtime.tree_list[0],
                {"op": "change", "change": change},
                timeout=self.tunables.query_timeout,
            )
        except Exception as exc:
            raise Unavailable(f"the master of {name!r} did not answer: {exc}") from None
        if "error" in reply:
            status = reply.get("status", 400)
            cls = {404: NotFound, 409: Conflict, 503: Unavailable}.get(status, BadRequest)
            raise cls(str(reply["error"]), field=_field(reply))
        return reply

    async def publish_spec(self, spec: JobSpec, *, base_version: int) -> int:
        """Record a running job's new spec in the job table; returns its version."""
        reply = await self._ask_jobs_root(
            {"op": "update", "spec": spec.to_dict(), "base_version": base_version}
        )
        return int(reply["version"])

    async def announce_entry(self, name: str) -> None:
        """Have the jobs-tree root multicast a job's current entry to every agent."""
        with contextlib.suppress(StatusError):
            await self._ask_jobs_root({"op": "announce", "name": name})

    def record_entry(self, entry: JobEntry) -> None:
        """Note an entry of a job this agent already runs, as its runtime applied it (a
        runtime change): no start or stop follows (JobTableService)."""
        self.table.apply(entry)

    async def stop_job(self, name: str) -> dict[str, Any]:
        return await self._ask_jobs_root({"op": "stop", "name": name})

    def jobs(self) -> list[dict[str, Any]]:
        out = []
        for entry in self.table.entries():
            runtime = self.runtimes.get(entry.name)
            out.append(
                {
                    "name": entry.name,
                    "state": entry.state,
                    "version": entry.version,
                    "spec": entry.spec,
                    "roles": runtime.roles() if runtime else [],
                }
            )
        return out

    async def _serve_table_change(self, message: dict[str, Any]) -> dict[str, Any]:
        """At the jobs-tree root: version a submit/stop and multicast it to every agent."""
        op = message.get("op")
        if op == "submit":
            try:
                spec = await self._validate_spec(message.get("spec"))
                admission.check_start_window(spec, time.time(), self.tunables)
            except BadRequest as exc:
                return _error_reply(exc)
            current = self.table.get(spec.name)
            if current is not None and current.state == RUNNING:
                return {"error": f"job {spec.name!r} is already running", "status": 409}
            if spec.start_epoch is None:
                # "From now on": the first epoch that starts after every agent has the job (the
                # table multicast takes milliseconds), so no agent's share of it was read by
                # other jobs before this one existed - every worker's first epoch is whole.
                ahead = time.time() + self.tunables.start_margin_seconds
                spec = spec.with_changes(start_epoch=math.ceil(ahead / spec.epoch_seconds))
            if spec.placement is None:
                spec = spec.with_changes(placement=await self._place(spec))
            entry = JobEntry(spec.name, spec.to_dict(), RUNNING, self.table.next_version(spec.name))
        elif op == "update":  # a runtime change, from the job's master (agent/jobs/changes.py)
            try:
                spec = await self._validate_spec(message.get("spec"))
            except BadRequest as exc:
                return _error_reply(exc)
            current = self.table.get(spec.name)
            if current is None or current.state != RUNNING:
                return {"error": f"no running job named {spec.name!r}", "status": 404}
            if current.version != message.get("base_version"):
                return {"error": f"job {spec.name!r} changed concurrently; retry", "status": 409}
            entry = JobEntry(spec.name, spec.to_dict(), RUNNING, current.version + 1)
        else:
            name = message.get("name")
            current = self.table.get(name) if isinstance(name, str) else None
            if current is None:
                return {"error": f"no job named {name!r}", "status": 404}
            if op == "announce":  # after a change: every agent, on the job's tree or not
                entry = current
            elif current.state == STOPPED:
                # stopping a stopped job changes nothing: a new version (and stamp) would put
                # off its collection by stopped_job_ttl at every repeated DELETE
                return {"job": current.name, "state": current.state, "version": current.version}
            else:  # stamped: every agent collects the entry stopped_job_ttl after this
                entry = JobEntry(
                    current.name, current.spec, STOPPED, current.version + 1, time.time()
                )
        self._apply_entry(entry)
        if op == "update":  # the job's master multicasts the change down its own tree first
            return {"job": entry.name, "state": entry.state, "version": entry.version}
        result = await self._tree_manager().multicast(
            JOBS_TREE, {"op": "job", "entry": entry.to_wire()}, timeout=5.0
        )
        return {
            "job": entry.name,
            "state": entry.state,
            "version": entry.version,
            "agents_reached": result.reached,
            "multicast_ms": round(result.elapsed_s * 1000, 3),
        }

    async def _place(self, spec: JobSpec) -> int:
        """Power of two choices: ask the would-be masters of the job's candidate tree ids how
        many trees they already root; take the least loaded (ties and failures: salt 0)."""
        app = app_id(spec.name, spec.creator)
        trees = self._tree_manager()

        async def load(salt: int) -> int:
            try:
                reply = await trees.query(placement_id(app, salt), {"op": "load"}, timeout=2.0)
                return int(reply["roots"])
            except Exception:
                return 1 << 30

        choices = self.tunables.placement_choices
        loads = await asyncio.gather(*(load(s) for s in range(choices)))
        return min(range(choices), key=lambda s: (loads[s], s))

    def roots_held(self) -> int:
        """Job trees this agent is the master of (its load for placement)."""
        trees = self._tree_manager()
        return sum(1 for v in trees.views() if v.is_root and v.tree_id != JOBS_TREE)

    def _apply_entry(self, entry: JobEntry) -> None:
        if self.table.apply(entry):
            self._reconcile(entry)

    def _reconcile(self, entry: JobEntry) -> None:
        runtime = self.runtimes.get(entry.name)
        if entry.state == RUNNING and runtime is None:
            try:
                runtime = JobRuntime(
                    entry,
                    network=self,
                    job_table=self,
                    inputs=self,
                    tasks=self._tasks,
                    tunables=self.tunables,
                    lake=lake_target(self.config.lake, self.config.data_dir, self.node_id),
                    records=self.records,
                    data_dir=self.config.data_dir,
                )
            except Exception as exc:
                self.count("job_start_errors")
                log.warning(
                    "cannot run job %s here: %r", entry.name, exc, extra={"job": entry.name}
                )
                return
            runtime.observer = self.metrics  # read-only: latency histograms
            self.runtimes[entry.name] = runtime
            with job_context(entry.name):  # the job's start-up tasks log its name
                self.spawn(runtime.start(), f"start job {entry.name}")
        elif entry.state == RUNNING and runtime is not None and entry.version > runtime.version:
            # a runtime change, via the table
            self.spawn(
                runtime.changes.apply_spec(entry.spec, entry.version), f"change {entry.name}"
            )
        elif entry.state == STOPPED and runtime is not None:
            del self.runtimes[entry.name]
            self.checkpoints.forget_job(entry.name)
            self.spawn(self._stop_runtime(runtime), f"stop job {entry.name}")

    def _join_inputs(self, runtime: JobRuntime, readers: list[JobRuntime]) -> list[Any]:
        """Record thread, at ``runtime``'s first tick, before the poll: the jobs in ``readers``
        already read its inputs (up to the shared tails' positions now). Re-read for it what
        they read of its epochs, or, where that cannot be done, mark those epochs incomplete
        on this agent (flagged, never counted as whole). Checked here rather than when the job
        is installed: a tick already under way then still feeds only the other jobs."""
        start = runtime.spec.start_epoch
        if runtime.clock is None or start is None:
            return []
        shared = {
            name
            for name in runtime.inputs
            if any(name in r.inputs and r.clock is not None for r in readers)
        }
        newest = max(
            (
                r.clock.max_seen_time
                for r in readers
                if r.clock is not None and shared.intersection(r.inputs)
            ),
            default=-math.inf,
        )
        if newest == -math.inf or runtime.spec.schedule.epoch_of(newest) < start:
            return []  # nothing of its epochs was read yet
        plan = self._replay_plan(runtime, shared, start)
        if plan is None:
            runtime.recovery.started_after_others(newest, sorted(shared))
            return []
        return self._replay(runtime, plan, newest)

    def _replay_plan(
        self, runtime: JobRuntime, shared: set[str], start: int
    ) -> dict[str, dict[str, Any]] | None:
        """Where to re-read each shared input from so that ``runtime`` gets every record of
        its start epoch on (``agent/ingest/replay.py``), or None if one cannot be re-read:
        not a file, or no position is known before which nothing of those epochs was read."""
        plan = {}
        for name in sorted(shared):
            cfg = self.input_configs.get(name)
            if cfg is None or cfg.type == "ingest" or cfg.path in (None, "-"):
                return None
            position = self.offsets.replay_from(name, start)
            if position is None:
                return None
            plan[name] = position
        return plan

    def _replay(
        self, runtime: JobRuntime, plan: dict[str, dict[str, Any]], newest: float
    ) -> list[Any]:
        """Record thread, before the tick's poll: feed ``runtime`` what the other jobs had
        read of its inputs (from the planned positions up to where the shared tails stand
        now, so this tick's batches follow on exactly). An input that cannot be re-read
        makes those epochs incomplete here instead: flagged, never counted as whole."""
        out: list[Any] = []
        for name, start in plan.items():
            source = self.inputs.get(name)
            lines = 0
            try:
                if not isinstance(source, FileTail):
                    raise ReplayError("not a file tail")
                now = source.state()
                if now["inode"] != start.get("inode"):
                    raise ReplayError("the input moved on to another file")
                ranged = replay_range(
                    self.input_configs[name],
                    start,
                    now["offset"],
                    max_bytes=self.tunables.replay_max_bytes,
                )
                for batch in ranged:
                    lines += len(batch)
                    work = runtime.work({n: batch if n == name else [] for n in runtime.inputs})
                    out.append((runtime, work))
            except (ReplayError, OSError) as exc:
                self.count("replays_failed")
                log.warning(
                    "job %s: input %s cannot be re-read for its first epochs (%s)",
                    runtime.name,
                    name,
                    exc,
                )
                runtime.recovery.started_after_others(newest, [name])
                continue
            self.count("replays")
            log.info(
                "job %s: re-read %d records of input %s that other jobs had read before it "
                "started (from byte %s)",
                runtime.name,
                lines,
                name,
                start.get("offset"),
            )
        return out

    async def _stop_runtime(self, runtime: JobRuntime) -> None:
        """Stop a job the table stopped and give its memory back (``JobRuntime.release``
        frees it; the heap is trimmed so the agent's RSS shrinks too)."""
        try:
            await runtime.stop(graceful=False)
        finally:
            await runtime.release()
            trim_heap()
            self.count("jobs_released")

    def _restore_table(self) -> None:
        """Run the jobs of the table this agent saved before it stopped or died (module
        contract of :mod:`agent.runtime.host.table_file`); the cluster's newer versions and stops
        still win when the first resync merges them."""
        if self.table_file is None:
            return
        jobs, removed = self.table_file.load()
        try:
            stopped = self.table.merge_removed(removed)
            restored = self.table.merge(jobs)
        except ValueError as exc:
            log.warning("job table file %s malformed: %s", self.table_file.path, exc)
            return
        for entry in [*stopped, *restored]:
            self._reconcile(entry)
        self._table_saved = self.table.revision
        if restored:
            self.count("jobs_restored", len(restored))
            log.info("job table: %d entries restored from %s", len(restored), self.table_file.path)

    async def _table_file_loop(self) -> None:
        """Write the job table to disk when it changed (off the loop, one write at a time;
        a failed write is logged and tried again on the next change or pass)."""
        while self._running and self.table_file is not None:
            revision = self.table.revision
            if revision != self._table_saved:
                jobs, removed = self.table.snapshot(), self.table.removed()
                try:
                    await asyncio.to_thread(self.table_file.save, jobs, removed)
                    self._table_saved = revision
                except OSError as exc:
                    self.count("job_table_write_errors")
                    log.warning("job table file %s not written: %r", self.table_file.path, exc)
            await asyncio.sleep(TABLE_FILE_SECONDS)

    async def _resync(self) -> bool:
        """Fetch the job table from the jobs-tree root over the data plane and merge it;
        True if a peer's table was merged."""
        view = self._tree_manager().view(JOBS_TREE)
        if view is not None and view.is_root:
            # A new root (a closer agent joined, or a split tree healed) may hold an empty or
            # old table while its children hold the current one: it learns it from them.
            urls = [url for url in view.child_urls.values() if url][: self.tunables.resync_fanout]
        else:
            urls = [(await self._ask_jobs_root({"op": "where"}))["data_url"]]
        merged = False
        for url in urls:
            try:
                await self.merge_table_from(url)
                merged = True
            except (DataPlaneError, ValueError, KeyError, TypeError) as exc:
                self.count("resync_errors")
                log.info("job table resync from %s failed: %r", url, exc)
        # readiness: a root without children holds the table itself
        self.table_synced = self.table_synced or merged or not urls
        return merged

    async def merge_table_from(self, url: str) -> None:
        """Merge the job table (and tombstones) of the agent at data-plane ``url`` into ours
        and start or stop jobs accordingly (one anti-entropy exchange)."""
        reply = await self.client.post_json(url, "/agent/v1/jobs", {})
        # tombstones first: a collected job's stale entries must not come back
        for entry in self.table.merge_removed(reply.get("removed", [])):
            self._reconcile(entry)
        for entry in self.table.merge(reply.get("jobs", [])):
            self._reconcile(entry)

    async def _resync_quietly(self) -> None:
        with contextlib.suppress(StatusError):
            await self._resync()

    async def _resync_loop(self) -> None:
        """Anti-entropy every ``resync_seconds``; until a first exchange succeeds (a new
        agent, or one restarted as the jobs-tree root before its children re-joined), retry
        soon, backing off to that period."""
        delay = FIRST_RESYNC_RETRY if not self._synced else self.tunables.resync_seconds
        while self._running:
            await asyncio.sleep(delay)
            with contextlib.suppress(StatusError):
                if await self._resync():
                    self._synced = True
            if self._synced:
                delay = self.tunables.resync_seconds
            else:
                delay = min(self.tunables.resync_seconds, delay * 2)

    async def _collect_loop(self) -> None:
        """Garbage-collect stopped jobs from the table (``agent/jobs/table.py``), often enough
        to honour ``stopped_job_ttl`` within a quarter of it (or the resync period)."""
        period = max(0.05, min(self.tunables.resync_seconds, self.tunables.stopped_job_ttl / 4))
        while self._running:
            await asyncio.sleep(period)
            for entry in self.table.collect():
                log.info(
                    "job table: stopped job %s (version %d) collected", entry.name, entry.version
                )

    async def _serve_summary(self, request: web.Request) -> dict[str, Any]:
        """This agent's compact picture, for a peer's dashboard (docs/dashboard.md)."""
        return self.dashboard.summary()

    async def _serve_jobs(self, request: web.Request) -> dict[str, Any]:
        return {"jobs": self.table.snapshot(), "removed": self.table.removed()}

    # ---- tree callbacks (TreeListener) and control plane ---------------------------------------

    def master_tree(self, app: int) -> int:
        """The tree-0 id of the job whose appId is ``app`` (the placement salt is in the job
        table every agent holds); ``app`` itself for a job this agent does not know."""
        for entry in self.table.entries():
            spec = entry.spec
            if app_id(spec["name"], spec["creator"]) == app:
                return placement_id(app, spec.get("placement") or 0)
        return app

    def runtime_for_tree(self, tree_id: int) -> JobRuntime | None:
        for runtime in self.runtimes.values():
            if tree_id in runtime.tree_set:
                return runtime
        return None

    def tree_parent_changed(self, tree_id: int, parent: NodeInfo | None) -> None:
        if tree_id == JOBS_TREE and parent is not None and self._running:
            self.spawn(self._resync_quietly(), "job table resync")
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
            runtime.children_changed(tree_id)

    def tree_root_changed(self, tree_id: int, is_root: bool, new_root: NodeInfo | None) -> None:
        if tree_id == JOBS_TREE and self._running:
            self.spawn(self._resync_quietly(), "job table resync")
        runtime = self.runtime_for_tree(tree_id)
        if runtime is not None:
            runtime.root_changed(tree_id, is_root)

    async def _on_multicast(self, tree_id: int, message: dict[str, Any]) -> None:
        if tree_id == JOBS_TREE:
            if message.get("op") == "job":
                try:
                    self._apply_entry(JobEntry.from_wire(message.get("entry")))
                except ValueError as exc:
                    self.count("bad_job_multicast")
                    log.warning("bad job-table multicast: %s", exc)
            return
        runtime = self.runtime_for_tree(tree_id)
        if runtime is None:
            self.count("multicast_unknown_tree")
            return
        await runtime.control.on_multicast(tree_id, message)

    async def _on_query(self, tree_id: int, message: dict[str, Any]) -> dict[str, Any]:
        op = message.get("op")
        if op == "where":
            return {"data_url": self.data_url, "node_id": f"{self.overlay.id:040x}"}
        if op == "load":
            return {"roots": self.roots_held()}
        if tree_id == JOBS_TREE:
            if op in ("submit", "stop", "update", "announce"):
                return await self._serve_table_change(message)
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
                return _error_reply(exc)
        return {"error": f"unknown operation {op!r}", "status": 400}

    # ---- data plane ----------------------------------------------------------------------------

    @property
    def node_id(self) -> int:
        """This agent's overlay id (NetworkService; known once the agent started)."""
        return self.overlay.id

    def neighbours(self) -> list[NodeInfo]:
        """The overlay leaf set (NetworkService)."""
        return self.overlay.leaf_set()

    @property
    def domain(self) -> str:
        """This agent's failure-domain label (NetworkService)."""
        return self.config.domain

    def routable(self, node_id: int) -> bool:
        """False once the overlay holds ``node_id`` failed (NetworkService)."""
        return self.overlay.routable(node_id)

    def near(self, key: int, count: int) -> list[NodeInfo]:
        """The ``count`` live contacts closest to ``key``, ``key`` itself left out."""
        return self.overlay.neighbours_of(key, key)[:count]

    def peer_gone(self, node_id: int) -> None:
        """A peer's data-plane port refused us (NetworkService): its process is gone, so the
        overlay fails it now and the trees re-form around it without waiting for timeouts."""
        if self.overlay.report_gone(node_id):
            self.count("peers_failed_by_refusal")
            log.info("peer %x refused a data-plane connection: declared failed", node_id)

    async def data_url_of(self, node: NodeInfo | int) -> str:
        """Another agent's data-plane URL, asked over the overlay (NetworkService)."""
        reply = await self.overlay.request(node, "agent.where", {})
        return reply["data_url"]

    async def _on_snapshot(self, name: SnapshotName, payload: bytes) -> str:
        runtime = self.runtimes.get(name.job)
        if runtime is None or name.tree not in runtime.tree_set:
            # A job this agent has not heard of yet (multicast in flight): let the child retry.
            raise Reject(503, "unknown_job", f"job {name.job!r} tree not known here yet")
        origins, payload = lineage_of(payload)  # LineageError (a SnapshotError) → 422
        snap = Snapshot.from_bytes(payload)  # SnapshotError → 422, the sender resends
        return runtime.trees.offer_child(name, snap, origins)

    async def _serve_late(self, request: web.Request) -> dict[str, Any]:
        name = SnapshotName.from_headers(request.headers)
        runtime = self.runtimes.get(name.job)
        if runtime is None:
            raise Reject(503, "unknown_job", f"job {name.job!r} not known here yet")
        try:
            origins, payload = lineage_of(await request.read())
            snap = Snapshot.from_bytes(payload)
        except SnapshotError as exc:
            raise Reject(422, "corrupt", str(exc)) from None
        return {"result": runtime.recovery.offer_late(name, snap, origins)}

    async def _serve_recv(self, request: web.Request) -> dict[str, Any]:
        body = await self._json_body(request, "job", "from")
        runtime = self.runtimes.get(body["job"])
        if runtime is None:
            raise Reject(404, "unknown_job", f"job {body.get('job')!r} does not run here")
        try:
            sender = int(body["from"], 16)
            if "snapshot" in body:
                paos: Any = Snapshot.from_bytes(base64.b64decode(body["snapshot"]))
            else:
                paos = body.get("data")
        except (KeyError, ValueError, TypeError, SnapshotError) as exc:
            raise Reject(400, "bad_recv", f"bad send_to body: {exc}") from None
        await runtime.control.receive(sender, paos)  # 409 incompatible, 400 recv_refused
        return {"result": "delivered"}

    @staticmethod
    async def _json_body(request: web.Request, *fields: str) -> dict[str, Any]:
        try:
            body = await request.json()
        except (ValueError, RecursionError) as exc:  # RecursionError: absurdly deep nesting
            raise Reject(400, "bad_json", f"body is not JSON: {str(exc)[:200]}") from None
        if not isinstance(body, dict) or any(f not in body for f in fields):
            raise Reject(400, "bad_body", f"body must be an object with {', '.join(fields)}")
        return body

    async def _serve_results(self, request: web.Request) -> dict[str, Any]:
        body = await self._json_body(request, "job", "tree")
        runtime = self.runtimes.get(body["job"])
        if runtime is None:
            raise Reject(404, "unknown_job", f"job {body['job']!r} does not run here")
        try:
            return await runtime.queries.local_results(int(body["tree"]), body.get("epoch"))
        except (TypeError, ValueError, OverflowError) as exc:  # int(1e400): OverflowError
            raise Reject(400, "bad_body", f"bad tree or epoch: {exc}") from None

    async def _serve_resend(self, request: web.Request) -> dict[str, Any]:
        """A master repairing a tentative epoch asks this origin for its own snapshots."""
        body = await self._json_body(request, "job", "tree", "origin", "epochs")
        runtime = self.runtimes.get(body["job"])
        if runtime is None:
            raise Reject(404, "unknown_job", f"job {body['job']!r} does not run here")
        epochs = body["epochs"]
        if not isinstance(epochs, list) or not all(type(e) is int for e in epochs):
            raise Reject(400, "bad_body", "epochs must be a list of integers")
        tree, origin = _tree_and_origin(body)
        return await runtime.recovery.resend(tree, origin, epochs)

    async def _serve_origin(self, request: web.Request) -> dict[str, Any]:
        """An agent that reads a job's input tells the job's master it is an origin."""
        body = await self._json_body(request, "job", "tree", "origin", "from")
        runtime = self.runtimes.get(body["job"])
        if runtime is None:
            raise Reject(503, "unknown_job", f"job {body['job']!r} not known here yet")
        start = body["from"]
        if type(start) is not int or start < 0:
            raise Reject(400, "bad_body", "from must be a non-negative integer epoch")
        tree, origin = _tree_and_origin(body)
        runtime.recovery.origin_joined(tree, origin, start, body.get("url"))
        return {"ok": True}

    async def _serve_leave(self, request: web.Request) -> dict[str, Any]:
        """An origin stopping gracefully declares its end to the job's master."""
        body = await self._json_body(request, "job", "tree", "origin", "through")
        runtime = self.runtimes.get(body["job"])
        if runtime is None:
            raise Reject(503, "unknown_job", f"job {body['job']!r} not known here yet")
        tree, origin = _tree_and_origin(body)
        try:
            left = await runtime.recovery.accept_leave(tree, origin, body)
        except Reject:
            raise
        except (TypeError, ValueError, KeyError, OverflowError, SnapshotError) as exc:
            raise Reject(400, "bad_body", f"leave rejected: {exc}") from None
        return {"left": left}

    async def _serve_members(self, request: web.Request) -> dict[str, Any]:
        """A job's master shares its membership with the tree's likely next masters."""
        body = await self._json_body(request, "job", "tree", "term", "membership")
        runtime = self.runtimes.get(body["job"])
        if runtime is None:
            raise Reject(503, "unknown_job", f"job {body['job']!r} not known here yet")
        try:
            runtime.recovery.accept_members(int(body["tree"]), body)
        except Reject:
            raise
        except (TypeError, ValueError, OverflowError) as exc:
            raise Reject(400, "bad_body", f"members rejected: {exc}") from None
        return {"ok": True}

    async def _serve_checkpoint(self, request: web.Request) -> dict[str, Any]:
        """An origin checkpoints its uncommitted epochs here, one of its hot replicas."""
        body = await self._json_body(request, "job", "tree", "origin", "epochs")
        tree, origin = _tree_and_origin(body)
        job, committed = body["job"], body.get("committed")
        if not isinstance(job, str) or not job or len(job) > 256:
            raise Reject(400, "bad_body", "job must be a non-empty string")
        if committed is not None and type(committed) is not int:
            raise Reject(400, "bad_body", "committed must be an integer epoch or null")
        seen = body.get("seen")
        if seen is not None and type(seen) is not int:
            raise Reject(400, "bad_body", "seen must be an integer epoch or null")
        try:
            epochs = decode_epochs(body["epochs"])
            records = decode_records(body.get("records"))
        except ValueError as exc:
            raise Reject(400, "bad_body", str(exc)) from None
        held = self.checkpoints.keep(origin, job, tree, committed, epochs, records, seen)
        return {"held": held}

    async def _serve_checkpoint_fetch(self, request: web.Request) -> dict[str, Any]:
        """A master re-issuing a lost origin's epochs asks for the checkpoints held here."""
        body = await self._json_body(request, "job", "tree", "origin")
        tree, origin = _tree_and_origin(body)
        wanted = body.get("epochs")
        if wanted is not None and (
            not isinstance(wanted, list) or not all(type(e) is int for e in wanted)
        ):
            raise Reject(400, "bad_body", "epochs must be a list of integers")
        job = str(body["job"])
        parts = self.checkpoints.fetch(origin, job, tree, wanted)
        counts = self.checkpoints.records(origin, job, tree, parts)
        return {
            "epochs": {str(e): base64.b64encode(b).decode() for e, b in parts.items()},
            "records": {str(e): n for e, n in counts.items()},
            "seen": self.checkpoints.seen(origin, job),
        }

    def _node_failed(self, info: NodeInfo) -> None:
        """The overlay declared a node failed: a job this agent masters may have lost an
        origin (declared lost after the loss timeout, unless it comes back)."""
        for runtime in list(self.runtimes.values()):
            runtime.recovery.loss.overlay_failed(info.id)

    async def _serve_replica(self, request: web.Request) -> dict[str, Any]:
        """A master replicating its state to this agent, its standby."""
        body = await self._json_body(request, "job", "tree", "master", "items")
        runtime = self.runtimes.get(body["job"])
        if runtime is None:
            raise Reject(503, "unknown_job", f"job {body['job']!r} not known here yet")
        try:
            return runtime.recovery.accept_replica(int(body["tree"]), body)
        except Reject:
            raise
        except (TypeError, ValueError, KeyError, OverflowError, binascii.Error) as exc:
            raise Reject(400, "bad_replica", f"{type(exc).__name__}: {exc}") from None

    async def _serve_handover(self, request: web.Request) -> dict[str, Any]:
        body = await self._json_body(request, "job", "tree", "items")
        runtime = self.runtimes.get(body["job"])
        if runtime is None:
            raise Reject(503, "unknown_job", f"job {body['job']!r} not known here yet")
        try:
            items = decode_items(body["items"])
            taken = runtime.recovery.absorb(
                int(body["tree"]), items, body.get("expected"), body.get("term", 0)
            )
            return {"taken": taken}
        except Reject:  # 409 incompatible, 503 epoch_ahead / unknown_job: nothing taken
            self.count("bad_handover")
            raise
        except (KeyError, TypeError, ValueError, OverflowError, SnapshotError) as exc:
            self.count("bad_handover")
            raise Reject(400, "bad_handover", f"hand-over rejected: {exc}") from None

    # ---- queries from users ----------------------------------------------------------------

    def _runtime(self, name: str) -> JobRuntime:
        runtime = self.runtimes.get(name)
        if runtime is None:
            raise NotFound(f"no running job named {name!r}")
        return runtime

    def job_timings(self, name: str) -> dict[str, Any]:
        """This agent's epoch and control timings of a job (``JobReport.timings``)."""
        return {
            "job": name,
            "node_id": f"{self.overlay.id:040x}",
            **self._runtime(name).report.timings(),
        }

    async def results(self, name: str, epoch: int | None) -> dict[str, Any]:
        return await self._runtime(name).queries.results(epoch)

    async def query(self, name: str, message: dict[str, Any]) -> dict[str, Any]:
        return await self._runtime(name).queries.query_master(message)

    async def local_query(self, name: str, params: dict[str, str]) -> dict[str, Any]:
        """The job's ``local_query`` hook on this agent (no network hop); a reply with
        ``"error"`` raises the matching API error (its ``"status"``: 404, else 400)."""
        runtime = self._runtime(name)
        reply = await runtime.call_job(runtime.job.local_query, params)
        if not isinstance(reply, dict):
            raise StatusError(f"job {name!r}: local_query returned no object")
        if "error" in reply:
            raise (NotFound if reply.get("status") == 404 else BadRequest)(str(reply["error"]))
        return reply

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
            "counters": dict(self.counters),
            "loop_lag": self.loop_lag.stats(),
            "overlay": self.overlay.stats(),
            "data_plane": self.server.stats(),
            "api": self.api.stats(),
            "dashboard": self.dashboard_routes.stats(),
        }

    # ---- the operator's view (agent/runtime/ops/metrics.py, agent/runtime/ops/ops_api.py) -------

    def readiness(self) -> dict[str, bool]:
        """The readiness checks of ``GET /readyz`` (booleans only: nothing to leak)."""
        running = self._running and self.trees is not None
        view = self.trees.view(JOBS_TREE) if self.trees is not None else None
        return {
            "started": running,
            # alone in its cluster (no bootstrap) an agent has joined by definition
            "overlay": running and (bool(self.overlay.contacts()) or not self.config.bootstrap),
            "jobs_tree": view is not None and view.state != "joining",
            "job_table": self.table_synced,
        }

    def metrics_node(self) -> dict[str, Any]:
        """Agent-wide figures for the metrics collector (``MetricsSource``)."""
        lake = next(
            (st for r in self.runtimes.values() if (st := r.lake.stats() if r.lake else None)),
            None,
        )
        return {
            "uptime_s": time.time() - self.started_at if self.started_at else 0.0,
            "ready": all(self.readiness().values()),
            "contacts": len(self.overlay.contacts()),
            "overlay": self.overlay.stats(),
            "data_plane": self.server.stats(),
            "api": self.api.stats(),
            "counters": dict(self.counters),
            "job_table": self.table.stats(),
            "loop_lag": self.loop_lag.stats(),
            "lake": lake,
            "checkpoints_held": self.checkpoints.stats(),
        }

    def metrics_inputs(self) -> dict[str, dict[str, Any]]:
        """Per input: its counters (``MetricsSource``)."""
        return {name: src.stats() for name, src in self.inputs.items()}

    def metrics_jobs(self) -> dict[str, dict[str, Any]]:
        """Per running job: its status and the newest stored epochs' flags (``MetricsSource``)."""
        out = {}
        for name, runtime in self.runtimes.items():
            st = runtime.status()
            st["results_now"] = _results_now(runtime)
            out[name] = st
        return out


def _results_now(runtime: JobRuntime, recent: int = 64) -> dict[str, Any]:
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


def _error_reply(exc: StatusError) -> dict[str, Any]:
    """A refused request as a query reply (another agent re-raises it, field included)."""
    reply: dict[str, Any] = {"error": str(exc), "status": exc.status}
    if exc.field:
        reply["field"] = exc.field
    return reply


def _field(reply: dict[str, Any]) -> str | None:
    field = reply.get("field")
    return field if isinstance(field, str) else None


def _tree_and_origin(body: dict[str, Any]) -> tuple[int, int]:
    """A peer request's ``tree`` (int) and ``origin`` (hex, a 160-bit id): 400 if not."""
    try:
        tree, origin = int(body["tree"]), int(str(body["origin"]), 16)
    except (TypeError, ValueError, OverflowError) as exc:
        raise Reject(400, "bad_body", f"bad tree or origin: {exc}") from None
    if not 0 <= origin < 1 << 160:
        raise Reject(400, "bad_body", "origin must be a 160-bit id")
    return tree, origin
