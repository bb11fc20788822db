"""Admission of a job spec at submission: a spec accepted is a spec that runs.

Contract: :func:`validate` is what the agent runs on every submitted spec (the agent that
received ``POST /api/v1/jobs``, again at the jobs-tree root) and on every new spec a runtime
change produces (at the jobs-tree root): it validates the fields
(:func:`~agent.jobs.job.parse_spec`, which dry-runs the job class's ``setup()``), then builds
the runtime objects every agent will build for the job — the worker with its epoch clock, the
level operator, one tree's barrier — without joining any tree, so anything an agent would
fail on fails here. :func:`check_start_window` bounds how far the spec's ``start_epoch`` lies
from *now* (a clock-dependent bound, so it is checked at submission only, never on a running
job's spec):

* at most ``max_catchup_epochs`` epochs, and at most ``max_catchup_seconds`` of event time,
  before the epoch of now (a worker emits every epoch from ``start_epoch`` on, and the lake
  gets one file per epoch and tree: ``start_epoch: 0`` would be 1.8×10⁹ epochs);
* at most ``max_start_ahead_seconds`` after now.

Both raise :class:`~agent.errors.BadRequest` whose ``field`` names the field at fault. The
bounds are :class:`~agent.tunables.RuntimeTunables` fields (defaults: 3600 epochs, 1 h,
1 day).
"""

from __future__ import annotations

import math
from typing import Any

from agent.errors import BadRequest
from agent.jobs.job import parse_spec
from agent.jobs.spec import JobSpec
from agent.runtime.epochs.worker import Worker
from agent.tunables import RuntimeTunables
from srt import EpochCombiner
from srt.dataplane.operators import level_operator_for


def validate(data: Any) -> JobSpec:
    """The validated spec of a submission or change, dry-run as every agent will run it."""
    try:
        spec = parse_spec(data)
    except ValueError as exc:
        raise BadRequest(f"invalid job spec: {exc}", field=getattr(exc, "field", None)) from None
    try:
        _dry_run_runtime(spec)
    except Exception as exc:  # job-class code runs in the worker too: any failure refuses it
        raise BadRequest(
            f"invalid job spec: the job cannot run: {type(exc).__name__}: {exc}", field="spec"
        ) from None
    return spec


def _dry_run_runtime(spec: JobSpec) -> None:
    """What ``JobRuntime.__init__`` and ``ensure_tree`` build, minus the network."""
    from agent.jobs.job import create_job

    job = create_job(spec)
    Worker(job)
    operator = level_operator_for(
        job.make_aggregator(),
        top_k=spec.top_k,
        largest=spec.top_k_largest,
        approximate=spec.top_k_approximate,
    )
    EpochCombiner(
        job=spec.name,
        tree=0,
        expect_local=True,
        children=(),
        emit=lambda epoch, snap: None,
        operator=operator,
        first_epoch=spec.start_epoch,
    )


def check_start_window(spec: JobSpec, now: float, tunables: RuntimeTunables) -> None:
    """Refuse a ``start_epoch`` outside the catch-up window around ``now`` (module contract)."""
    if spec.start_epoch is None:
        return
    schedule = spec.schedule
    seconds = schedule.current_seconds
    current = schedule.epoch_of(now)
    behind = min(tunables.max_catchup_epochs, math.floor(tunables.max_catchup_seconds / seconds))
    ahead = math.ceil(tunables.max_start_ahead_seconds / seconds)
    start = spec.start_epoch
    if start < current - behind:
        raise BadRequest(
            f"invalid job spec: start_epoch: {start} is {current - start} epochs "
            f"({(current - start) * seconds:g} s) before now (epoch {current}); at most "
            f"{behind} epochs of catch-up (max_catchup_epochs {tunables.max_catchup_epochs}, "
            f"max_catchup_seconds {tunables.max_catchup_seconds:g})",
            field="start_epoch",
        )
    if start > current + ahead:
        raise BadRequest(
            f"invalid job spec: start_epoch: {start} is {start - current} epochs "
            f"({(start - current) * seconds:g} s) after now (epoch {current}); at most "
            f"{ahead} (max_start_ahead_seconds {tunables.max_start_ahead_seconds:g})",
            field="start_epoch",
        )
