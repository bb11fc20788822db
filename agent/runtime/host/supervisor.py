"""The job table of one agent: submit, validate, change, publish, stop; reconcile; resync.

Contract: :class:`Supervisor` keeps the agent's copy of the replicated job table
(``agent/jobs/table.py``) and the runtimes it implies: every entry the table applies is
*reconciled* (a running job without a runtime here gets one, a newer version is applied as a
runtime change, a stopped job's runtime is stopped and released). Job changes (submit, update,
announce, stop) go to the jobs-tree root (:meth:`ask_jobs_root`), which versions them
(:meth:`serve_table_change`, with power-of-two-choices placement: :meth:`place`) and multicasts
them to every agent. Anti-entropy (:meth:`resync`, :meth:`resync_loop`) merges a peer's table;
the table file (:mod:`agent.runtime.host.table_file`) is restored at start and rewritten when
the table changed (:meth:`table_file_loop`); stopped entries are collected
(:meth:`collect_loop`). It also serves the job table a running job changes and reads
(:class:`~agent.runtime.services.JobTableService`: publish, announce, record, master tree).

The supervisor is given narrow parts, never the agent: the table, the runtimes by name (it is
their only writer), a runtime factory, the tree manager (a callable: 503 before the agent
started), the data-plane client, the held checkpoints (forgotten with a stopped job), the
spawner and counter, and whether the agent still runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

from agent.errors import BadRequest, Conflict, NotFound, StatusError, Unavailable
from agent.jobs.changes import parse_change
from agent.jobs.spec import JobSpec
from agent.jobs.table import RUNNING, STOPPED, JobEntry, JobTable
from agent.runtime.host import admission
from agent.runtime.host.heap import trim_heap
from agent.runtime.host.table_file import JobTableFile
from agent.runtime.ops.logs import job_context
from agent.tunables import RuntimeTunables
from overlay import key_for
from srt import DataPlaneError, TreeManager
from srt.ids import app_id, placement_id

log = logging.getLogger(__name__)

JOBS_TREE = key_for("elf/jobs-tree")
JOBS_TREE_NAME = "elf.jobs"
TABLE_FILE_SECONDS = 0.25  # how often a changed job table is written to disk
FIRST_RESYNC_RETRY = 0.25  # seconds before the first anti-entropy retry (doubling)
MAX_DRY_RUNS = 4  # unfinished job-spec dry runs (threads) at once; more get a 503


class SpecApplier(Protocol):
    """A newer table entry's spec to a running job (``JobRuntime.changes``)."""

    async def apply_spec(self, spec: dict[str, Any], version: int) -> bool: ...


class SupervisedRuntime(Protocol):
    """The :class:`~agent.runtime.job.runtime.JobRuntime` members the supervisor calls."""

    @property
    def version(self) -> int: ...
    @property
    def tree_list(self) -> list[int]: ...
    @property
    def changes(self) -> SpecApplier: ...

    def roles(self) -> list[str]: ...
    async def start(self) -> None: ...
    async def stop(self, graceful: bool) -> None: ...
    async def release(self) -> None: ...


class PeerTable(Protocol):
    """Where another agent's table is fetched (:class:`srt.DataPlaneClient`)."""

    async def post_json(self, url: str, path: str, body: dict) -> dict: ...


class ForgetsJobs(Protocol):
    """Held checkpoints of other agents
    (:class:`~agent.runtime.recovery.checkpoints.CheckpointStore`)."""

    def forget_job(self, job: str) -> None: ...


def error_reply(exc: StatusError) -> dict[str, Any]:
    """A refused request as a query reply (another agent re-raises it, field included)."""
    reply: dict[str, Any] = {"error": str(exc), "status": exc.status}
    if exc.field:
        reply["field"] = exc.field
    return reply


def raise_reply(reply: dict[str, Any], statuses: dict[int, type[StatusError]]) -> None:
    """Re-raise a query reply carrying ``"error"`` as the matching API error (400 unless its
    ``"status"`` is one of ``statuses``), field included."""
    if "error" in reply:
        field = reply.get("field")
        cls = statuses.get(reply.get("status", 400), BadRequest)
        raise cls(str(reply["error"]), field=field if isinstance(field, str) else None)


class Supervisor:
    """The job table and the runtimes it implies (see the module contract)."""

    def __init__(
        self,
        table: JobTable,
        runtimes: dict[str, Any],
        *,
        new_runtime: Callable[[JobEntry], Any],
        trees: Callable[[], TreeManager],
        client: PeerTable,
        checkpoints: ForgetsJobs,
        table_file: JobTableFile | None,
        tunables: RuntimeTunables,
        spawn: Callable[[Any, str], None],
        count: Callable[..., None],
        running: Callable[[], bool],
    ) -> None:
        self.table = table
        self.runtimes = runtimes
        self.new_runtime = new_runtime
        self.trees = trees
        self.client = client
        self.checkpoints = checkpoints
        self.table_file = table_file
        self.tunables = tunables
        self.spawn = spawn
        self.count = count
        self.running = running
        self.table_saved = -1  # the table revision last written
        self.synced = False  # a first anti-entropy exchange succeeded
        #: set once a job-table resync (or being the jobs-tree root without children) succeeded
        self.table_synced = False
        self.admission_running = 0  # dry-run threads not yet finished (hung ones included)

    # ---- changes, through the jobs-tree root ---------------------------------------------------

    async def ask_jobs_root(self, message: dict[str, Any]) -> dict[str, Any]:
        try:
            reply = await self.trees().query(
                JOBS_TREE, message, timeout=self.tunables.query_timeout
            )
        except Exception as exc:
            raise Unavailable(f"the jobs-tree root did not answer: {exc}") from None
        raise_reply(reply, {404: NotFound, 409: Conflict})
        return reply

    async def submit(self, spec: dict[str, Any]) -> dict[str, Any]:
        """Validate and dry-run a spec here (a 400 naming the field, without a network hop),
        then have the jobs-tree root version and multicast it (it checks again)."""
        parsed = await self.validate_spec(spec)
        admission.check_start_window(parsed, time.time(), self.tunables)
        return await self.ask_jobs_root({"op": "submit", "spec": parsed.to_dict()})

    async def validate_spec(self, spec: Any) -> JobSpec:
        """:func:`admission.validate` off the event loop: the dry run calls the job class's
        ``setup()`` (job-class code), which gets ``admission_timeout`` seconds; one that does
        not finish is refused (400) and its thread abandoned — a daemon thread (a thread cannot
        be killed; a daemon one does not keep the process from exiting). At most
        ``MAX_DRY_RUNS`` may be unfinished at once (hung ones count): past that, 503."""
        if self.admission_running >= MAX_DRY_RUNS:
            raise Unavailable("too many job-spec dry runs still running; retry later")
        loop = asyncio.get_running_loop()
        done: asyncio.Future[JobSpec] = loop.create_future()

        def settle(result: JobSpec | None, exc: BaseException | None) -> None:
            self.admission_running -= 1
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

        self.admission_running += 1
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

    async def change_job(
        self, runtime: SupervisedRuntime, name: str, change: Any
    ) -> dict[str, Any]:
        """Apply a runtime change (``agent/jobs/changes.py``) through the job's master."""
        parse_change(change)  # a bad request is answered here, without a network hop
        trees = self.trees()
        try:
            reply = await trees.query(
                runtime.tree_list[0],
                {"op": "change", "change": change},
                timeout=self.tunables.query_timeout,
            )
        except Exception as exc:
            raise Unavailable(f"the master of {name!r} did not answer: {exc}") from None
        raise_reply(reply, {404: NotFound, 409: Conflict, 503: Unavailable})
        return reply

    async def publish_spec(self, spec: JobSpec, *, base_version: int) -> int:
        """Record a running job's new spec in the job table; returns its version."""
        reply = await self.ask_jobs_root(
            {"op": "update", "spec": spec.to_dict(), "base_version": base_version}
        )
        return int(reply["version"])

    async def announce_entry(self, name: str) -> None:
        """Have the jobs-tree root multicast a job's current entry to every agent."""
        with contextlib.suppress(StatusError):
            await self.ask_jobs_root({"op": "announce", "name": name})

    def record_entry(self, entry: JobEntry) -> None:
        """Note an entry of a job this agent already runs, as its runtime applied it (a
        runtime change): no start or stop follows (JobTableService)."""
        self.table.apply(entry)

    def master_tree(self, app: int) -> int:
        """The tree-0 id of the job whose appId is ``app`` (the placement salt is in the job
        table every agent holds); ``app`` itself for a job this agent does not know."""
        for entry in self.table.entries():
            spec = entry.spec
            if app_id(spec["name"], spec["creator"]) == app:
                return placement_id(app, spec.get("placement") or 0)
        return app

    async def stop_job(self, name: str) -> dict[str, Any]:
        return await self.ask_jobs_root({"op": "stop", "name": name})

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

    # ---- at the jobs-tree root -----------------------------------------------------------------

    async def serve_table_change(self, message: dict[str, Any]) -> dict[str, Any]:
        """At the jobs-tree root: version a submit/stop and multicast it to every agent."""
        op = message.get("op")
        if op == "submit":
            try:
                spec = await self.validate_spec(message.get("spec"))
                admission.check_start_window(spec, time.time(), self.tunables)
            except BadRequest as exc:
                return error_reply(exc)
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
                spec = spec.with_changes(placement=await self.place(spec))
            entry = JobEntry(spec.name, spec.to_dict(), RUNNING, self.table.next_version(spec.name))
        elif op == "update":  # a runtime change, from the job's master (agent/jobs/changes.py)
            try:
                spec = await self.validate_spec(message.get("spec"))
            except BadRequest as exc:
                return error_reply(exc)
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
        self.apply_entry(entry)
        if op == "update":  # the job's master multicasts the change down its own tree first
            return {"job": entry.name, "state": entry.state, "version": entry.version}
        result = await self.trees().multicast(
            JOBS_TREE, {"op": "job", "entry": entry.to_wire()}, timeout=5.0
        )
        return {
            "job": entry.name,
            "state": entry.state,
            "version": entry.version,
            "agents_reached": result.reached,
            "multicast_ms": round(result.elapsed_s * 1000, 3),
        }

    async def place(self, spec: JobSpec) -> int:
        """Power of two choices: ask the would-be masters of the job's candidate tree ids how
        many trees they already root; take the least loaded (ties and failures: salt 0)."""
        app = app_id(spec.name, spec.creator)
        trees = self.trees()

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
        trees = self.trees()
        return sum(1 for v in trees.views() if v.is_root and v.tree_id != JOBS_TREE)

    # ---- entries to runtimes -------------------------------------------------------------------

    def apply_entry(self, entry: JobEntry) -> None:
        if self.table.apply(entry):
            self.reconcile(entry)

    def reconcile(self, entry: JobEntry) -> None:
        runtime = self.runtimes.get(entry.name)
        if entry.state == RUNNING and runtime is None:
            try:
                runtime = self.new_runtime(entry)
            except Exception as exc:
                self.count("job_start_errors")
                log.warning(
                    "cannot run job %s here: %r", entry.name, exc, extra={"job": entry.name}
                )
                return
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
            self.spawn(self.stop_runtime(runtime), f"stop job {entry.name}")

    async def stop_runtime(self, runtime: SupervisedRuntime) -> None:
        """Stop a job the table stopped and give its memory back (``JobRuntime.release``
        frees it; the heap is trimmed so the agent's RSS shrinks too)."""
        try:
            await runtime.stop(graceful=False)
        finally:
            await runtime.release()
            trim_heap()
            self.count("jobs_released")

    # ---- the table file and anti-entropy -------------------------------------------------------

    def restore_table(self) -> None:
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
            self.reconcile(entry)
        self.table_saved = self.table.revision
        if restored:
            self.count("jobs_restored", len(restored))
            log.info("job table: %d entries restored from %s", len(restored), self.table_file.path)

    async def table_file_loop(self) -> None:
        """Write the job table to disk when it changed (off the loop, one write at a time;
        a failed write is logged and tried again on the next change or pass)."""
        while self.running() and self.table_file is not None:
            revision = self.table.revision
            if revision != self.table_saved:
                jobs, removed = self.table.snapshot(), self.table.removed()
                try:
                    await asyncio.to_thread(self.table_file.save, jobs, removed)
                    self.table_saved = revision
                except OSError as exc:
                    self.count("job_table_write_errors")
                    log.warning("job table file %s not written: %r", self.table_file.path, exc)
            await asyncio.sleep(TABLE_FILE_SECONDS)

    async def resync(self) -> bool:
        """Fetch the job table from a jobs-tree neighbour over the data plane and merge it;
        True if a peer's table was merged. A member pulls from its parent (the root when it
        has none, or when the parent fails it): every agent pulling from the root made one
        agent serve the whole cluster every period, each pull after a routed query, while
        pairwise merges converge all the same (a change reaches depth d within d periods
        when its multicast was lost; newer versions win)."""
        view = self.trees().view(JOBS_TREE)
        if view is not None and view.is_root:
            # A new root (a closer agent joined, or a split tree healed) may hold an empty or
            # old table while its children hold the current one: it learns it from them.
            urls = [url for url in view.child_urls.values() if url][: self.tunables.resync_fanout]
        else:
            if view is not None and view.parent_url and await self._merged_from(view.parent_url):
                self.table_synced = True
                return True
            urls = [(await self.ask_jobs_root({"op": "where"}))["data_url"]]
        merged = False
        for url in urls:
            merged = await self._merged_from(url) or merged
        # readiness: a root without children holds the table itself
        self.table_synced = self.table_synced or merged or not urls
        return merged

    async def _merged_from(self, url: str) -> bool:
        """One anti-entropy exchange with the agent at ``url``; False (counted) if it failed."""
        try:
            await self.merge_table_from(url)
            return True
        except (DataPlaneError, ValueError, KeyError, TypeError) as exc:
            self.count("resync_errors")
            log.info("job table resync from %s failed: %r", url, exc)
            return False

    async def merge_table_from(self, url: str) -> None:
        """Merge the job table (and tombstones) of the agent at data-plane ``url`` into ours
        and start or stop jobs accordingly (one anti-entropy exchange)."""
        reply = await self.client.post_json(url, "/agent/v1/jobs", {})
        # tombstones first: a collected job's stale entries must not come back
        for entry in self.table.merge_removed(reply.get("removed", [])):
            self.reconcile(entry)
        for entry in self.table.merge(reply.get("jobs", [])):
            self.reconcile(entry)

    async def resync_quietly(self) -> None:
        with contextlib.suppress(StatusError):
            await self.resync()

    async def first_resync(self) -> None:
        """The resync at start (its success sets how soon :meth:`resync_loop` tries again)."""
        with contextlib.suppress(StatusError):
            self.synced = await self.resync()

    async def resync_loop(self) -> None:
        """Anti-entropy every ``resync_seconds``; until a first exchange succeeds (a new
        agent, or one restarted as the jobs-tree root before its children re-joined), retry
        soon, backing off to that period."""
        delay = FIRST_RESYNC_RETRY if not self.synced else self.tunables.resync_seconds
        while self.running():
            await asyncio.sleep(delay)
            with contextlib.suppress(StatusError):
                if await self.resync():
                    self.synced = True
            if self.synced:
                delay = self.tunables.resync_seconds
            else:
                delay = min(self.tunables.resync_seconds, delay * 2)

    async def collect_loop(self) -> None:
        """Garbage-collect stopped jobs from the table (``agent/jobs/table.py``), often enough
        to honour ``stopped_job_ttl`` within a quarter of it (or the resync period)."""
        period = max(0.05, min(self.tunables.resync_seconds, self.tunables.stopped_job_ttl / 4))
        while self.running():
            await asyncio.sleep(period)
            for entry in self.table.collect():
                log.info(
                    "job table: stopped job %s (version %d) collected", entry.name, entry.version
                )
