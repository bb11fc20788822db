"""Runtime job changes: what a client may change in a running job, validated into a new spec.

Contract: :func:`parse_change` turns a decoded JSON request body into a :class:`JobChange` or
raises :class:`~agent.errors.BadRequest` naming the offending field. :meth:`JobChange.apply`
returns the job's next :class:`~agent.jobs.spec.JobSpec` (``None`` when the change only carries
control: ``empty`` / ``batch``), validated by building a throwaway job instance, or raises
``BadRequest`` (the new values are invalid) / :class:`~agent.errors.Conflict` (the change would
alter what running snapshots are made of).

Request fields (all optional, at least one):

* ``params``: object merged into ``spec.params`` (a key set to null is removed);
  ``replace_params: true`` replaces them instead. Job classes re-run ``setup()`` with them on
  every agent: new thresholds, k, a new filter, or a switch between named functions the class
  defines (code never travels; only names and values do).
* ``query``: new ELF QL text for ``ql`` jobs (a new WHERE filter, new SELECT expressions or
  GROUP BY keys, HAVING, ORDER BY/LIMIT). The spec fields the query implies must match the
  running job's except ``top_k`` and the aggregate (a new one is scheduled, below).
* ``top_k`` / ``top_k_largest`` / ``top_k_approximate``, ``allowed_lateness``,
  ``idle_timeout``, ``max_future``, ``straggler_epochs``, ``tentative_deadline``,
  ``checkpoint_replicas``, ``retire_after``, ``fault_tolerance``, ``emit``: those spec fields
  (a ``ql`` job whose query has an ``EMIT`` clause changes ``emit`` with a new query; a new
  query without one keeps the job's ``emit``).
* ``epoch_seconds``: a new epoch length (batch and iterative jobs). The master picks the
  epoch it starts from: the first one starting at least ``max(EPOCH_SWITCH_LEAD, one current
  epoch)`` after its wall clock (or its newest event time, if that is ahead), so no agent's
  records have reached it yet (for logs replayed far behind the wall clock the new length
  thus starts when event time reaches the present); the spec's ``epoch_schedule`` records
  it and every agent's clock cuts epochs from there with the new length, indices continuing
  (``agent/jobs/schedule.py``). A window job's windows count epochs, as do a ``WINDOW
  SESSION`` query's sessions (``Job.merges_epochs``): 409.
* ``aggregator`` / ``aggregator_params``, or a ``query`` whose aggregates differ: a new
  aggregate (new map and reduce functions). Like a new epoch length it is scheduled: the
  spec's ``aggregator_since`` is the first epoch that starts at least that lead ahead; every
  agent keeps the old job instance (map and aggregator) for earlier epochs until they close,
  and the master renders each epoch's result with the instance that reduced it. A worker
  that never ran the old aggregate starts at ``aggregator_since``. Window jobs and session
  queries (``Job.merges_epochs``): 409; a second
  change of aggregate before the previous one took effect everywhere: 409.
* ``empty: true``: every agent empties its window state now; ``batch: true``: a new batch
  (window state and iterative feedback are cleared and the job's ``on_multicast`` sees
  ``{"kind": "batch"}``).

Fixed while running (409): ``mode``, ``window_size``/``window_slide``, ``trees``,
``inputs``, ``placement``, ``start_epoch``, name, creator and job class, and a window job's
epoch length and aggregator. They define how epochs are cut into trees and windows, so
agents cannot switch them one by one between records; stop the job and submit the new one
instead (Flink and Kafka Streams likewise need a restart for a new window or state type).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from agent.errors import BadRequest, Conflict
from agent.jobs.job import Job, create_job, dry_run
from agent.jobs.spec import MAX_EPOCH_SECONDS, MIN_EPOCH_SECONDS, SNAPSHOT_FIELDS, JobSpec

SPEC_FIELDS = (
    "top_k",
    "top_k_largest",
    "top_k_approximate",
    "allowed_lateness",
    "idle_timeout",
    "max_future",
    "straggler_epochs",
    "tentative_deadline",
    "retire_after",
    "checkpoint_replicas",
    "fault_tolerance",
    "emit",
)
CONTROL_FIELDS = ("empty", "batch")
#: a new aggregate: scheduled from an epoch ahead, like a new epoch length
AGGREGATE_FIELDS = ("aggregator", "aggregator_params")
KNOWN = {
    "params",
    "replace_params",
    "query",
    "epoch_seconds",
    *SPEC_FIELDS,
    *AGGREGATE_FIELDS,
    *CONTROL_FIELDS,
}
FIXED = (*SNAPSHOT_FIELDS, "inputs", "placement", "start_epoch")
#: the least event time between a change of epoch length and the epoch it starts from
EPOCH_SWITCH_LEAD = 2.0


@dataclass(frozen=True)
class JobChange:
    """One validated change request (see module docstring)."""

    params: dict[str, Any] | None = None
    replace_params: bool = False
    query: str | None = None
    fields: tuple[tuple[str, Any], ...] = ()
    empty: bool = False
    batch: bool = False
    epoch_seconds: float | None = None

    @property
    def changes_spec(self) -> bool:
        return (
            self.params is not None
            or self.query is not None
            or bool(self.fields)
            or self.epoch_seconds is not None
        )

    def apply(self, spec: JobSpec, event_time: float | None = None) -> JobSpec | None:
        """The next spec of a job now running ``spec`` (None: control only). ``event_time``:
        the master's newest event time (default its wall clock), from which a new epoch
        length is scheduled."""
        if not self.changes_spec:
            return None
        data = spec.to_dict()
        if self.params is not None:
            merged = {} if self.replace_params else dict(data["params"])
            for key, value in self.params.items():
                if value is None:
                    merged.pop(key, None)
                else:
                    merged[key] = value
            data["params"] = merged
        if self.query is not None:
            data.update(self._query_fields(spec))
        data.update(self.fields)
        running: Job | None = None
        if self.epoch_seconds is not None:
            running = _running(spec)
            data["epoch_schedule"] = self._schedule(spec, event_time, running.merges_epochs())
        try:
            new = JobSpec.from_dict(data)
        except ValueError as exc:
            # a new length is asked as epoch_seconds; the spec records it in its schedule
            asked = "epoch_seconds" if self.epoch_seconds is not None else None
            raise _invalid(exc, {"epoch_schedule": asked} if asked else None) from None
        changed = [
            f for f in FIXED if f not in AGGREGATE_FIELDS and getattr(new, f) != getattr(spec, f)
        ]
        if changed:
            raise Conflict(_fixed_message(changed), field=changed[0])
        try:
            # the new spec runs the class's setup() as every agent will (a dry run)
            running = running or create_job(spec)
            old_agg, new_agg = running.make_aggregator(), dry_run(new).make_aggregator()
        except ValueError as exc:
            raise _invalid(exc) from None
        if (old_agg.name, old_agg.params()) == (new_agg.name, new_agg.params()):
            return new
        if running.merges_epochs():
            raise Conflict(
                f"cannot change the aggregator of window job {spec.name!r} (running "
                f"{old_agg.name} {old_agg.params()}, asked {new_agg.name}): its window panes "
                "(or sessions) merge across epochs; stop the job and submit the new spec"
            )
        schedule = new.schedule
        if spec.aggregator_since is not None:
            # Agents hold one previous aggregate at a time: the last change must have taken
            # effect everywhere (its first epoch plus lateness and an epoch in the past).
            settled = (
                schedule.start(spec.aggregator_since)
                + spec.allowed_lateness
                + schedule.current_seconds
            )
            if settled > time.time():
                raise Conflict(
                    f"job {spec.name!r}: the previous change of aggregate takes effect from "
                    f"epoch {spec.aggregator_since}; change it again after "
                    f"{settled - time.time():.1f} s"
                )
        first = schedule.first_epoch_from(_not_before(schedule.current_seconds, event_time))
        if spec.aggregator_since is not None:
            first = max(first, spec.aggregator_since + 1)
        try:
            return JobSpec.from_dict({**new.to_dict(), "aggregator_since": first})
        except ValueError as exc:
            raise _invalid(exc) from None

    def _schedule(
        self, spec: JobSpec, event_time: float | None, merges_epochs: bool
    ) -> list[list[Any]]:
        if merges_epochs:
            raise Conflict(
                f"cannot change epoch_seconds of window job {spec.name!r}: its windows (or "
                "sessions) count epochs; stop the job and submit the new spec"
            )
        schedule = spec.schedule
        seconds = self.epoch_seconds
        assert seconds is not None
        if seconds == schedule.current_seconds:
            return schedule.to_wire()
        try:
            return schedule.switched(
                seconds, _not_before(schedule.current_seconds, event_time)
            ).to_wire()
        except ValueError as exc:
            raise BadRequest(f"epoch_seconds: {exc}", field="epoch_seconds") from None

    def _query_fields(self, spec: JobSpec) -> dict[str, Any]:
        if spec.job_class != "ql":
            raise BadRequest(
                f"query: job {spec.name!r} is a {spec.job_class!r} job, not ql", field="query"
            )
        from agent.jobs.ql_job import spec_from_query  # the ql job class is optional here

        try:
            implied = spec_from_query(spec.name, spec.creator, self.query or "")
        except ValueError as exc:
            raise BadRequest(f"query: {exc}", field="query") from None
        params = {**spec.params, **implied.get("params", {})}
        out = {k: v for k, v in implied.items() if k not in ("name", "creator", "params")}
        out["params"] = params
        from agent.ql import parse

        if parse(self.query or "").window is None:
            # no WINDOW: the query implies only the default length; the job keeps its own
            # (submitted with the spec, or changed with epoch_seconds)
            out.pop("epoch_seconds", None)
        for key in ("start_epoch", "placement"):  # decided at submission, not by the query
            out.pop(key, None)
        return out

    def message(self, version: int | None, spec: JobSpec | None) -> dict[str, Any]:
        """The control message the master multicasts down the job's tree."""
        out: dict[str, Any] = {"kind": "change", "empty": self.empty, "batch": self.batch}
        if spec is not None:
            out["version"] = version
            out["spec"] = spec.to_dict()
        return out


def _running(spec: JobSpec) -> Job:
    """The running spec's job instance (what it is made of); a failure is a 400."""
    try:
        return create_job(spec)
    except ValueError as exc:
        raise _invalid(exc) from None


def _invalid(exc: ValueError, rename: dict[str, str] | None = None) -> BadRequest:
    """A refused change, naming the field (a ``JobSpecError``'s, when it has one; ``rename``
    maps a spec field to the change field the client sent)."""
    field = getattr(exc, "field", None)
    if rename and field in rename:
        field = rename[field]
    return BadRequest(f"invalid change: {exc}", field=field)


def _not_before(epoch_seconds: float, event_time: float | None) -> float:
    """The earliest event time a scheduled change (epoch length, aggregate) may start at."""
    # Live logs: event time tracks the wall clock, and agents ahead of the master's own
    # input must not have passed the switch, so never earlier than the wall clock.
    now = time.time() if event_time is None else max(time.time(), event_time)
    return now + max(EPOCH_SWITCH_LEAD, epoch_seconds)


def _fixed_message(fields: list[str]) -> str:
    return (
        f"cannot change {', '.join(fields)} of a running job: it defines the epochs and "
        "snapshots every tree level merges; stop the job and submit the new spec"
    )


def parse_change(body: Any) -> JobChange:
    """Validate a change request body (see module docstring)."""
    if not isinstance(body, dict):
        raise BadRequest("a job change must be a JSON object")
    fixed = [
        f
        for f in (*FIXED, "name", "creator", "job_class")
        if f in body and f not in ("epoch_seconds", *AGGREGATE_FIELDS)
    ]
    if fixed:
        raise Conflict(_fixed_message(fixed), field=fixed[0])
    unknown = set(body) - KNOWN
    if unknown:
        raise BadRequest(
            f"unknown change fields {sorted(unknown)}; expected some of {sorted(KNOWN)}"
        )
    if not body:
        raise BadRequest(f"an empty change; expected some of {sorted(KNOWN)}")
    params = body.get("params")
    if params is not None and not isinstance(params, dict):
        raise BadRequest(
            f"params: expected a JSON object, got {type(params).__name__}", field="params"
        )
    query = body.get("query")
    if query is not None and (not isinstance(query, str) or not query.strip()):
        raise BadRequest("query: expected the ELF QL text (a non-empty string)", field="query")
    flags = {}
    for name in ("replace_params", *CONTROL_FIELDS):
        value = body.get(name, False)
        if not isinstance(value, bool):
            raise BadRequest(f"{name}: expected true or false, got {value!r}", field=name)
        flags[name] = value
    fields = tuple((k, body[k]) for k in (*SPEC_FIELDS, *AGGREGATE_FIELDS) if k in body)
    seconds = body.get("epoch_seconds")
    if seconds is not None and (
        isinstance(seconds, bool)
        or not isinstance(seconds, int | float)
        or not MIN_EPOCH_SECONDS <= seconds <= MAX_EPOCH_SECONDS
    ):
        raise BadRequest(
            f"epoch_seconds: expected a number in [{MIN_EPOCH_SECONDS:g}, "
            f"{MAX_EPOCH_SECONDS:g}], got {seconds!r}",
            field="epoch_seconds",
        )
    return JobChange(
        params=params,
        replace_params=flags["replace_params"],
        query=query,
        fields=fields,
        empty=flags["empty"],
        batch=flags["batch"],
        epoch_seconds=None if seconds is None else float(seconds),
    )
