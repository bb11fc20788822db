"""Runtime changes of one job on one agent: a newer spec, applied between two records.

Contract (:class:`SpecChanges`, one per job runtime; what a change may say is
:mod:`agent.jobs.changes`):

* **At the master**, :meth:`~SpecChanges.serve_change` validates a change, records the new spec
  in the job table (so agents that join later run it too), applies it here, multicasts it
  down the job's first tree and reports when every agent has applied it.
* **Everywhere**, :meth:`~SpecChanges.apply_spec` switches to a newer version (older or equal
  versions, and a stopped job, are ignored), one change at a time, in version order: the job
  instance re-runs ``setup()`` with it, keeping its state; the level operator follows a new
  top-k. A spec that fails here is counted (``changes_refused``) and logged, and the old one
  keeps running. The job and worker side (``setup()``, the worker's swap) runs on the record
  thread, between two batches; the rest on the loop.
* **A new aggregate** (``aggregator_since``) is a new job instance from that epoch on; the
  current one keeps mapping, and rendering results of, earlier epochs
  (:meth:`~SpecChanges.job_for`; at most 8 earlier instances are kept).
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections import OrderedDict
from typing import Any

from agent.jobs.changes import parse_change
from agent.jobs.job import Job, create_job
from agent.jobs.spec import JobSpec
from agent.jobs.table import RUNNING, JobEntry
from agent.runtime.job.host import JobHost
from srt.dataplane.operators import LevelOperator, level_operator_for

log = logging.getLogger(__name__)


def operator_for(job: Job, spec: JobSpec) -> LevelOperator:
    """The level operator of ``job``'s aggregate under ``spec`` (its top k, if any)."""
    return level_operator_for(
        job.make_aggregator(),
        top_k=spec.top_k,
        largest=spec.top_k_largest,
        approximate=spec.top_k_approximate,
    )


class SpecChanges:
    """The runtime changes of one job here (see the module contract). ``changes_applied``
    maps the recent versions applied here to when (at most 64); ``jobs_before`` holds (first
    epoch of the next aggregate, the job instance used before it), oldest first."""

    def __init__(self, host: JobHost) -> None:
        self.host = host
        self.changes_applied: OrderedDict[int, float] = OrderedDict()  # version → time
        self.jobs_before: list[tuple[int, Job]] = []
        self._changing = asyncio.Lock()  # one runtime change at a time, in version order

    async def serve_change(self, body: Any) -> dict[str, Any]:
        """At the master: validate a change, record the new spec in the job table (so agents
        that join later run it too), multicast it down the tree and report when every agent
        has applied it."""
        host = self.host
        started = time.time()
        change = parse_change(body)
        spec = change.apply(host.spec, self._newest_event_time())
        version = host.version
        if spec is not None:
            version = await host.job_table.publish_spec(spec, base_version=host.version)
            await self.apply_spec(spec.to_dict(), version)
        result = await host.control.multicast(host.tree_list[0], change.message(version, spec))
        if spec is not None:  # agents off the job's tree learn it through the job table
            host.tasks.spawn(host.job_table.announce_entry(host.name), f"announce {host.name}")
        return {
            "job": host.name,
            "version": version,
            "agents_reached": result.reached,
            "missing": [f"{m:040x}" for m in result.missing],
            "applied_ms": round((time.time() - started) * 1000, 3),
            "multicast_ms": round(result.elapsed_s * 1000, 3),
        }

    def _newest_event_time(self) -> float | None:
        """This agent's newest event time for the job (None: no record seen here)."""
        worker = self.host.worker
        if worker is None:
            return None
        # one float the record thread writes: a read from the loop sees an old or new value
        newest = worker.clock.max_event_time
        return newest if math.isfinite(newest) else None

    async def on_change(self, message: dict[str, Any]) -> None:
        """A ``change`` multicast: apply its newer spec, pass a batch's markers on."""
        host = self.host
        if message.get("spec") is not None:
            version = message.get("version")
            if isinstance(version, int) and version > host.version:
                await self.apply_spec(message["spec"], version)
        if host.worker is not None and (message.get("empty") or message.get("batch")):
            control = {"kind": "batch" if message.get("batch") else "empty"}
            await host.records.run(host.worker.on_multicast, control)
        elif message.get("batch"):
            host.job.feedback = None
        if message.get("batch"):
            host.tasks.spawn(host.call_job(host.job.on_multicast, {"kind": "batch"}), "batch")

    async def apply_spec(self, spec_dict: Any, version: int) -> bool:
        """Switch to a newer spec between two records (no restart): the job instance re-runs
        ``setup()`` with it, keeping its state; the level operator follows a new top-k. A spec
        that fails here is counted and logged, and the old one keeps running. The job and
        worker side (``setup()``, the worker's swap) runs on the record thread, between two
        batches; the rest on the loop; one change at a time."""
        async with self._changing:
            if version <= self.host.version or self.host.stopped:
                return False
            return await self._apply_spec(spec_dict, version)

    async def _apply_spec(self, spec_dict: Any, version: int) -> bool:
        host = self.host
        job, old = host.job, host.spec
        try:
            spec = JobSpec.from_dict(spec_dict)
            if spec.start_epoch != old.start_epoch:  # a resumed agent's own start
                spec = spec.with_changes(start_epoch=old.start_epoch)
        except ValueError as exc:
            host.count("changes_refused")
            log.warning("job %s: change to version %d refused: %s", host.name, version, exc)
            return False
        if spec.aggregator_since != old.aggregator_since and spec.aggregator_since is not None:
            new_job = await host.records.run(self._switch_job, spec, version)
            if new_job is None:
                return False
            new_job.bind(host.context)
            self.jobs_before.append((spec.aggregator_since, host.job))
            del self.jobs_before[:-8]
            host.job = job = new_job
        else:
            if not await host.records.run(self._reconfigure_job, job, old, spec, version):
                return False
        if (spec.top_k, spec.top_k_largest, spec.top_k_approximate) != (
            host.spec.top_k,
            host.spec.top_k_largest,
            host.spec.top_k_approximate,
        ):
            host.operator = operator_for(job, spec)
            for combiner in host.combiners.values():
                combiner.operator = host.operator
        for combiner in host.combiners.values():
            combiner.straggler_epochs = spec.straggler_epochs
        host.spec, host.version = spec, version
        host.job_table.record_entry(JobEntry(host.name, spec_dict, RUNNING, version))
        self.changes_applied[version] = time.time()
        while len(self.changes_applied) > 64:
            self.changes_applied.popitem(last=False)
        host.count("changes_applied")
        return True

    def _reconfigure_job(self, job: Job, old: JobSpec, spec: JobSpec, version: int) -> bool:
        """Record thread: same aggregate; the running instance re-runs ``setup()`` with the
        new spec."""
        host = self.host
        try:
            job.spec, job.params = spec, spec.params
            job.setup()
            if host.worker is not None:
                host.worker.replace_job(job)
                host.pipeline.refresh_worker_stats()
        except ValueError as exc:  # the master validated it: a version skew, say
            job.spec, job.params = old, old.params
            job.setup()
            host.count("changes_refused")
            log.warning("job %s: change to version %d refused: %s", host.name, version, exc)
            return False
        return True

    def _switch_job(self, spec: JobSpec, version: int) -> Job | None:
        """Record thread: a new aggregate (and map) from epoch ``spec.aggregator_since`` on: a
        new job instance; the current one keeps mapping, and rendering results of, earlier
        epochs."""
        host = self.host
        first = spec.aggregator_since
        assert first is not None
        try:
            job = create_job(spec)
            if host.worker is not None:
                host.worker.switch_job(job, first)
                host.pipeline.refresh_worker_stats()
        except ValueError as exc:
            host.count("changes_refused")
            log.warning("job %s: change to version %d refused: %s", host.name, version, exc)
            return None
        return job

    def job_for(self, epoch: int) -> Job:
        """The job instance whose aggregate ``epoch`` was reduced with (they differ only
        after a runtime change of aggregate; see :meth:`_switch_job`)."""
        for first, job in self.jobs_before:  # oldest first
            if epoch < first:
                return job
        return self.host.job
