"""The job specification: what a user submits, validated field by field.

Contract: :meth:`JobSpec.from_dict` takes a decoded JSON object (e.g. an HTTP submit body)
and returns a frozen, validated :class:`JobSpec` or raises :class:`JobSpecError` whose
``field`` names the offending field and whose message says what was expected and what came.
Unknown fields are rejected (typos must not pass silently). :meth:`JobSpec.to_dict` is the
JSON-able inverse (``from_dict(spec.to_dict()) == spec``). ``job_class`` is a *registered
name* (see :func:`agent.jobs.job.register_job`), never a module path.

Fields (JSON name: type, default):

* ``name``: str (``[A-Za-z0-9][A-Za-z0-9_.-]{0,127}``), required; ``creator``: str, required
  (the pair defines the job's app id).
* ``job_class``: registered job class name, required.
* ``aggregator``: a CBT aggregator name (default the job class's choice, else ``"count"``);
  ``aggregator_params``: dict of its constructor arguments (``{"k": 10}``; a ``topk`` k is at
  most ``MAX_TOP_K``).
* ``epoch_seconds``: number in [``MIN_EPOCH_SECONDS`` = 0.1, 86400], default 1;
  ``allowed_lateness``: number in [0, 3600] and at most ``MAX_OPEN_EPOCHS`` (1024) epochs of
  the current length, default 0; ``idle_timeout``: number in [0, 86400] or null (null:
  ``epoch_seconds``; 0: never advance the watermark by the wall clock); ``max_future``: seconds
  in [0, 7 days] or null, default 600 (records that far ahead of the agent's wall clock are
  dropped, so one bad clock cannot close every epoch up to it; null: no limit);
  ``start_epoch``: int in [0, 2**53] or null (the first epoch every worker reports; null: each
  worker starts at its first record). How far behind or ahead of *now* a submitted
  ``start_epoch`` may be is checked at submission (``agent/runtime/host/admission.py``): it depends
  on the clock, so it is no property of the spec.
* ``epoch_schedule``: list of ``[first_epoch, seconds]``, default []: runtime changes of the
  epoch length (``agent/jobs/schedule.py``; set by the master on a change, not at submission);
  every length obeys the same bounds as ``epoch_seconds``.
* ``aggregator_since``: int in [0, 2**53] or null (default): the first epoch the current
  aggregator (and map) applies to, after a runtime change of the aggregate (set by the master;
  a worker that never ran the previous aggregator starts there).
* ``trees``: int in [1, 64], default 1 (m reducer trees, each owning a key-hash range). The
  master of each tree writes one lake file per epoch, so ``trees / epoch_seconds`` (every
  length in the schedule) is at most ``MAX_LAKE_FILES_PER_SECOND`` (16).
* ``mode``: ``"batch"`` | ``"window"`` | ``"iterative"``, default ``"batch"``;
  ``window_size`` / ``window_slide``: epochs, ints with 1 <= slide <= size <= 10,000, default 1/1.
* ``inputs``: list of at most 64 input names on the agents (empty: every input), default [].
* ``params``: a JSON object for the job class, default {}.
* ``top_k``: int in [1, 10,000] or null (default): report only the k best keys per epoch,
  ranked by value (``top_k_largest``, default true; false ranks smallest first). Levels of the
  tree cut to k only where that is exact (max ranked largest, min ranked smallest); sums and
  counts are never cut below the root unless ``top_k_approximate`` (a factor c in [1, 100]:
  every level keeps its ceil(k*c) best keys; documented error in
  ``srt/dataplane/operators.py``).
* ``placement``: int salt or null (default): which of the job's candidate tree ids it uses
  (``srt.ids.placement_id``); null lets the cluster pick the least-loaded of two candidate
  masters at submission ("power of two choices").
* ``emit``: ``"changes"`` (default) | ``"final"`` (changeable at runtime): what readers see by
  default (``docs/http-api.md``, results and their stream): every version of an epoch's result,
  tentative ones flagged, or only its non-tentative (final or partial) versions. It changes
  nothing the agents compute; a ``ql`` query's ``EMIT`` clause sets it.
* Fault tolerance (``docs/fault-tolerance.md``, changeable at runtime):
  ``straggler_epochs``: int in [0, ``MAX_OPEN_EPOCHS``], default 2 - a tree member this many
  epochs behind another member of its parent is leapt over (the epoch moves up tentative
  without it; its late snapshot is folded in at the master); 0: never leap.
  ``tentative_deadline``: seconds, 0 or in [``MIN_TENTATIVE_DEADLINE`` = 0.05, 3600], or
  null (default: ``max(0.3, 0.1 * epoch length)``, :meth:`JobSpec.tentative_deadline_for`) -
  a master that has not emitted an epoch this long after it first learnt the epoch closed
  stores a tentative preview of what has arrived; 0: no previews.
  ``checkpoint_replicas``: int in [0, ``MAX_CHECKPOINT_REPLICAS`` = 8], default 2 - overlay
  neighbours each agent replicates its uncommitted epoch snapshots to (0: none).
  ``retire_after``: seconds in [``MIN_RETIRE_AFTER`` = 1, ``MAX_RETIRE_AFTER`` = 30 days],
  default ``DEFAULT_RETIRE_AFTER`` (900 s: a restart takes seconds, a reboot minutes) - an
  absent origin (crashed, stopped, cut off: not left) nobody heard of this long is retired:
  later epochs no longer wait for it, the epochs it missed stay *partial*.
  ``fault_tolerance``: ``"passive"`` (default) or ``{"policy": "replicated", "replicas": r}``
  (:mod:`agent.jobs.fault_policy`).

Sizes: ``params`` and ``aggregator_params`` hold JSON only — integers within signed 64 bits
(what msgpack, Arrow and the lake carry), finite numbers, nesting at most ``MAX_JSON_DEPTH``
(16) deep — and the whole spec, msgpack-encoded, is at most ``MAX_SPEC_BYTES`` (6144): every
job-table entry and runtime change travels in one overlay datagram (8192 bytes by default).
A violation is a ``JobSpecError`` naming the field (``params.a.b[2]`` for a nested value).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, fields
from functools import cached_property
from typing import Any

import msgpack
import orjson

from agent.errors import AgentError
from agent.jobs.fault_policy import FaultPolicy, parse_policy
from agent.jobs.schedule import EpochSchedule
from cbt import get_aggregator

MODES = ("batch", "window", "iterative")
#: what readers see by default: every version (tentative ones flagged), or final ones only
EMITS = ("changes", "final")
#: the fields that define the epochs and the snapshots every tree level merges: a running
#: job cannot change them (agent/jobs/changes.py, Worker.replace_job)
SNAPSHOT_FIELDS = (
    "aggregator",
    "aggregator_params",
    "epoch_seconds",
    "mode",
    "window_size",
    "window_slide",
    "trees",
)
MAX_TREES = 64
MAX_EPOCH_SECONDS = 86_400.0
#: the shortest epoch: each epoch costs a snapshot per tree level and a lake file per tree
MIN_EPOCH_SECONDS = 0.1
#: trees / epoch length: the lake files a job's masters write per second of event time
MAX_LAKE_FILES_PER_SECOND = 16.0
DEFAULT_MAX_FUTURE = 600.0
MAX_FUTURE_SECONDS = 7 * 86_400.0
MAX_LATENESS_SECONDS = 3_600.0
#: allowed lateness in epochs: each open epoch is one CBT on every worker
MAX_OPEN_EPOCHS = 1024
MAX_IDLE_TIMEOUT = 86_400.0
#: epoch indices (start_epoch, aggregator_since, schedule changes): exact as floats, int64
MAX_EPOCH_INDEX = 2**53
MAX_WINDOW_EPOCHS = 10_000
MAX_TOP_K = 10_000
MAX_TOP_K_APPROXIMATE = 100.0
MAX_INPUTS = 64
DEFAULT_STRAGGLER_EPOCHS = 2
MAX_CHECKPOINT_REPLICAS = 8
DEFAULT_CHECKPOINT_REPLICAS = 2
#: a non-zero tentative deadline shorter than this would preview nearly every epoch
MIN_TENTATIVE_DEADLINE = 0.05
MAX_TENTATIVE_DEADLINE = 3_600.0
#: an absent origin is retired after this long (docs/fault-tolerance.md, "Retiring")
DEFAULT_RETIRE_AFTER = 900.0
MIN_RETIRE_AFTER = 1.0
MAX_RETIRE_AFTER = 30 * 86_400.0
#: the default tentative deadline: max(floor, share x epoch length) - see tentative_deadline_for
TENTATIVE_DEADLINE_FLOOR = 0.3
TENTATIVE_DEADLINE_SHARE = 0.1
MAX_JSON_DEPTH = 16
#: the msgpack-encoded spec: a job-table entry or change travels in one overlay datagram
MAX_SPEC_BYTES = 6144
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}")


class JobSpecError(AgentError, ValueError):
    """An invalid job specification; ``field`` names the field at fault.

    An :class:`~agent.errors.AgentError` with no HTTP status: the agent answers a submission
    that fails with ``BadRequest``."""

    def __init__(self, field_name: str, message: str) -> None:
        super().__init__(f"{field_name}: {message}")
        self.field = field_name


@dataclass(frozen=True)
class JobSpec:
    """A validated job specification (see module docstring for the fields)."""

    name: str
    creator: str
    job_class: str
    aggregator: str = "count"
    aggregator_params: dict[str, Any] = field(default_factory=dict)
    epoch_seconds: float = 1.0
    allowed_lateness: float = 0.0
    idle_timeout: float | None = None
    max_future: float | None = DEFAULT_MAX_FUTURE
    start_epoch: int | None = None
    trees: int = 1
    mode: str = "batch"
    window_size: int = 1
    window_slide: int = 1
    inputs: tuple[str, ...] = ()
    params: dict[str, Any] = field(default_factory=dict)
    top_k: int | None = None
    top_k_largest: bool = True
    top_k_approximate: float | None = None
    placement: int | None = None
    epoch_schedule: tuple[tuple[int, float], ...] = ()
    aggregator_since: int | None = None
    straggler_epochs: int = DEFAULT_STRAGGLER_EPOCHS
    tentative_deadline: float | None = None
    checkpoint_replicas: int = DEFAULT_CHECKPOINT_REPLICAS
    retire_after: float = DEFAULT_RETIRE_AFTER
    fault_tolerance: FaultPolicy = field(default_factory=FaultPolicy)
    emit: str = "changes"

    # ---- construction ---------------------------------------------------------------------
    @classmethod
    def from_dict(cls, data: Any, *, default_aggregator: str = "count") -> JobSpec:
        """Validate a decoded JSON object into a spec (``JobSpecError`` names the field)."""
        if not isinstance(data, dict):
            raise JobSpecError("spec", f"must be a JSON object, got {type(data).__name__}")
        known = {f.name for f in fields(cls)}
        for key in data:
            if key not in known:
                raise JobSpecError(
                    str(key), f"unknown field; known fields: {', '.join(sorted(known))}"
                )
        for key in ("name", "creator", "job_class"):
            if key not in data:
                raise JobSpecError(key, "is required")
        name = _name(data, "name")
        creator = _text(data, "creator")
        job_class = _name(data, "job_class")
        aggregator = data.get("aggregator", default_aggregator)
        if not isinstance(aggregator, str) or not aggregator:
            raise JobSpecError("aggregator", f"must be an aggregator name, got {aggregator!r}")
        agg_params = _json_object(data, "aggregator_params")
        try:
            agg = get_aggregator(aggregator, agg_params or None)
        except (TypeError, ValueError) as exc:
            where = "aggregator" if "unknown aggregator" in str(exc) else "aggregator_params"
            raise JobSpecError(where, str(exc)) from None
        _check_aggregator_size(agg.name, agg.params())
        epoch_seconds = _number(
            data, "epoch_seconds", 1.0, low=MIN_EPOCH_SECONDS, high=MAX_EPOCH_SECONDS
        )
        idle = data.get("idle_timeout")
        idle_timeout = (
            None
            if idle is None
            else _number(data, "idle_timeout", 0.0, low=0.0, high=MAX_IDLE_TIMEOUT)
        )
        future = data.get("max_future", DEFAULT_MAX_FUTURE)
        max_future = (
            None
            if future is None
            else _number(data, "max_future", future, low=0.0, high=MAX_FUTURE_SECONDS)
        )
        start = _epoch_index(data, "start_epoch")
        trees = data.get("trees", 1)
        if not _is_int(trees) or not 1 <= trees <= MAX_TREES:
            raise JobSpecError("trees", f"must be an integer in [1, {MAX_TREES}], got {trees!r}")
        mode = data.get("mode", "batch")
        if mode not in MODES:
            raise JobSpecError("mode", f"must be one of {', '.join(MODES)}; got {mode!r}")
        size = data.get("window_size", 1)
        if not _is_int(size) or not 1 <= size <= MAX_WINDOW_EPOCHS:
            raise JobSpecError(
                "window_size",
                f"must be an integer in [1, {MAX_WINDOW_EPOCHS}] (epochs), got {size!r}",
            )
        slide = data.get("window_slide", 1)
        if not _is_int(slide) or not 1 <= slide <= size:
            raise JobSpecError(
                "window_slide", f"must be an integer in [1, window_size={size}], got {slide!r}"
            )
        inputs = data.get("inputs", [])
        if (
            not isinstance(inputs, list | tuple)
            or len(inputs) > MAX_INPUTS
            or not all(isinstance(i, str) and _NAME_RE.fullmatch(i) for i in inputs)
        ):
            raise JobSpecError(
                "inputs", f"must be a list of at most {MAX_INPUTS} input names, got {inputs!r}"
            )
        params = _json_object(data, "params")
        top_k = data.get("top_k")
        if top_k is not None and (not _is_int(top_k) or not 1 <= top_k <= MAX_TOP_K):
            raise JobSpecError(
                "top_k", f"must be an integer in [1, {MAX_TOP_K}] or null, got {top_k!r}"
            )
        largest = data.get("top_k_largest", True)
        if not isinstance(largest, bool):
            raise JobSpecError("top_k_largest", f"must be true or false, got {largest!r}")
        approx = data.get("top_k_approximate")
        if approx is not None:
            approx = _number(data, "top_k_approximate", 1.0, low=1.0, high=MAX_TOP_K_APPROXIMATE)
        placement = data.get("placement")
        if placement is not None and (not _is_int(placement) or not 0 <= placement < 1 << 32):
            raise JobSpecError(
                "placement", f"must be an integer in [0, 2**32) or null, got {placement!r}"
            )
        try:
            schedule = EpochSchedule.parse(epoch_seconds, data.get("epoch_schedule", []))
        except ValueError as exc:
            raise JobSpecError("epoch_schedule", str(exc)) from None
        # the lake-file rate names the field the submitter chose (trees alone, or the length)
        rate_field = "trees" if "trees" in data and "epoch_seconds" not in data else None
        _check_schedule(schedule, trees, rate_field)
        lateness = _number(data, "allowed_lateness", 0.0, low=0.0, high=MAX_LATENESS_SECONDS)
        if lateness > MAX_OPEN_EPOCHS * schedule.current_seconds:
            raise JobSpecError(
                "allowed_lateness",
                f"must be at most {MAX_OPEN_EPOCHS} epochs of {schedule.current_seconds:g} s "
                f"(each open epoch is a buffer tree on every worker), got {lateness:g}",
            )
        since = _epoch_index(data, "aggregator_since")
        if since is not None and mode == "window":
            raise JobSpecError(
                "aggregator_since", "a window job's aggregator is fixed (its panes merge)"
            )
        if schedule.changes and mode == "window":
            raise JobSpecError(
                "epoch_schedule", "a window job's epoch length is fixed (its window counts epochs)"
            )
        stragglers, deadline, replicas = _fault_fields(data)
        emit = data.get("emit", "changes")
        if emit not in EMITS:
            raise JobSpecError("emit", f"must be one of {', '.join(EMITS)}; got {emit!r}")
        spec = cls(
            name=name,
            creator=creator,
            job_class=job_class,
            aggregator=aggregator,
            aggregator_params=agg_params,
            epoch_seconds=epoch_seconds,
            allowed_lateness=lateness,
            idle_timeout=idle_timeout,
            max_future=max_future,
            start_epoch=start,
            trees=trees,
            mode=mode,
            window_size=size,
            window_slide=slide,
            inputs=tuple(inputs),
            params=params,
            top_k=top_k,
            top_k_largest=largest,
            top_k_approximate=approx,
            placement=placement,
            epoch_schedule=schedule.changes,
            aggregator_since=since,
            straggler_epochs=stragglers,
            tentative_deadline=deadline,
            checkpoint_replicas=replicas,
            retire_after=_number(
                data,
                "retire_after",
                DEFAULT_RETIRE_AFTER,
                low=MIN_RETIRE_AFTER,
                high=MAX_RETIRE_AFTER,
            ),
            fault_tolerance=_policy(data),
            emit=emit,
        )
        size_bytes = len(msgpack.packb(spec.to_dict(), use_bin_type=True))
        if size_bytes > MAX_SPEC_BYTES:
            raise JobSpecError(
                "spec",
                f"is {size_bytes} bytes encoded; at most {MAX_SPEC_BYTES} fit the job table's "
                "overlay messages (shorten params or the query)",
            )
        return spec

    @classmethod
    def from_json(cls, data: bytes | str) -> JobSpec:
        """Parse and validate a JSON document."""
        try:
            obj = orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            raise JobSpecError("spec", f"not valid JSON: {exc}") from None
        return cls.from_dict(obj)

    def to_dict(self) -> dict[str, Any]:
        """The JSON-able form, accepted back by :meth:`from_dict`."""
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["inputs"] = list(self.inputs)
        out["params"] = orjson.loads(orjson.dumps(self.params))
        out["aggregator_params"] = orjson.loads(orjson.dumps(self.aggregator_params))
        out["epoch_schedule"] = [[first, seconds] for first, seconds in self.epoch_schedule]
        out["fault_tolerance"] = self.fault_tolerance.to_dict()
        return out

    def with_changes(self, **changes: Any) -> JobSpec:
        """A new validated spec with some fields changed (runtime job changes)."""
        return JobSpec.from_dict({**self.to_dict(), **changes})

    # ---- derived values -------------------------------------------------------------------
    @cached_property
    def schedule(self) -> EpochSchedule:
        """Epoch index ↔ event time, with the runtime changes of the epoch length (built once
        per spec: specs are immutable)."""
        return EpochSchedule(self.epoch_seconds, self.epoch_schedule)

    @property
    def effective_idle_timeout(self) -> float | None:
        """Seconds without records before the watermark follows the wall clock (None: never)."""
        if self.idle_timeout is None:
            return self.schedule.current_seconds
        return None if self.idle_timeout == 0 else self.idle_timeout

    def tentative_deadline_for(self, epoch: int) -> float | None:
        """Seconds a master waits for ``epoch`` (after it first learnt the epoch closed)
        before it stores a tentative preview; None: no previews. The default,
        ``max(0.3 s, 0.1 x the epoch's length)``, stays clear of the steady state - where the
        last contribution reaches the master within a few agent ticks (0.1 s) of the first,
        plus a roll-up of ~1-5 ms - and still shows a preview well within the epoch after."""
        if self.tentative_deadline is not None:
            return self.tentative_deadline or None
        seconds = self.schedule.seconds_of(epoch) or self.epoch_seconds
        return max(TENTATIVE_DEADLINE_FLOOR, TENTATIVE_DEADLINE_SHARE * seconds)

    def window_bounds(self, epoch: int) -> tuple[int, int] | None:
        """The epochs a result for ``epoch`` covers: ``(epoch, epoch)`` outside window mode;
        in window mode the window ending at ``epoch``, or None if ``epoch`` ends no window
        (its result is empty filler)."""
        if self.mode != "window":
            return epoch, epoch
        if (epoch + 1) % self.window_slide:
            return None
        return epoch - self.window_size + 1, epoch

    def __hash__(self) -> int:
        return hash((self.name, self.creator))


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _name(data: dict[str, Any], key: str) -> str:
    v = data[key]
    if not isinstance(v, str) or not _NAME_RE.fullmatch(v):
        raise JobSpecError(
            key, f"must be 1-128 characters of letters, digits, '_', '.', '-', got {v!r}"
        )
    return v


def _text(data: dict[str, Any], key: str) -> str:
    v = data[key]
    if not isinstance(v, str) or not v or len(v) > 128 or not v.isprintable():
        raise JobSpecError(key, f"must be a non-empty printable string of <= 128 chars, got {v!r}")
    return v


def _number(data: dict[str, Any], key: str, default: float, *, low: float, high: float) -> float:
    v = data.get(key, default)
    bad = isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v)
    if bad or not low <= v <= high:
        raise JobSpecError(key, f"must be a number in [{low:g}, {high:g}], got {v!r}")
    return float(v)


def _fault_fields(data: dict[str, Any]) -> tuple[int, float | None, int]:
    """``straggler_epochs``, ``tentative_deadline``, ``checkpoint_replicas`` (module doc)."""
    stragglers = data.get("straggler_epochs", DEFAULT_STRAGGLER_EPOCHS)
    if not _is_int(stragglers) or not 0 <= stragglers <= MAX_OPEN_EPOCHS:
        raise JobSpecError(
            "straggler_epochs",
            f"must be an integer in [0, {MAX_OPEN_EPOCHS}] (epochs behind; 0: never leap), "
            f"got {stragglers!r}",
        )
    deadline = data.get("tentative_deadline")
    if deadline is not None:
        deadline = _number(data, "tentative_deadline", 0.0, low=0.0, high=MAX_TENTATIVE_DEADLINE)
        if 0 < deadline < MIN_TENTATIVE_DEADLINE:
            raise JobSpecError(
                "tentative_deadline",
                f"must be 0 (no previews), null (the default) or in "
                f"[{MIN_TENTATIVE_DEADLINE:g}, {MAX_TENTATIVE_DEADLINE:g}] seconds, got "
                f"{deadline!r}",
            )
    replicas = data.get("checkpoint_replicas", DEFAULT_CHECKPOINT_REPLICAS)
    if not _is_int(replicas) or not 0 <= replicas <= MAX_CHECKPOINT_REPLICAS:
        raise JobSpecError(
            "checkpoint_replicas",
            f"must be an integer in [0, {MAX_CHECKPOINT_REPLICAS}], got {replicas!r}",
        )
    return stragglers, deadline, replicas


def _policy(data: dict[str, Any]) -> FaultPolicy:
    try:
        return parse_policy(data.get("fault_tolerance"))
    except ValueError as exc:
        raise JobSpecError("fault_tolerance", str(exc)) from None


def _epoch_index(data: dict[str, Any], key: str) -> int | None:
    v = data.get(key)
    if v is not None and (not _is_int(v) or not 0 <= v <= MAX_EPOCH_INDEX):
        raise JobSpecError(key, f"must be an integer in [0, 2**53] or null, got {v!r}")
    return v


def _check_schedule(schedule: EpochSchedule, trees: int, rate_field: str | None) -> None:
    """Every epoch length of the job obeys the floor, the ceiling and the lake-file rate
    (``rate_field``: the field a base-rate violation names, default ``epoch_seconds``)."""
    for first, seconds in ((0, schedule.base), *schedule.changes):
        field_name = "epoch_seconds" if first == 0 else "epoch_schedule"
        if first > MAX_EPOCH_INDEX:
            raise JobSpecError(field_name, f"first epoch {first} is beyond 2**53")
        if not MIN_EPOCH_SECONDS <= seconds <= MAX_EPOCH_SECONDS:
            raise JobSpecError(
                field_name,
                f"epoch lengths must be in [{MIN_EPOCH_SECONDS:g}, {MAX_EPOCH_SECONDS:g}] "
                f"seconds, got {seconds!r}",
            )
        if trees / seconds > MAX_LAKE_FILES_PER_SECOND:
            raise JobSpecError(
                (rate_field or field_name) if first == 0 else field_name,
                f"{trees} trees with {seconds:g} s epochs write {trees / seconds:g} lake files "
                f"per second; at most {MAX_LAKE_FILES_PER_SECOND:g} (epochs of at least "
                f"{trees / MAX_LAKE_FILES_PER_SECOND:g} s, or fewer trees)",
            )


def _check_aggregator_size(name: str, params: dict[str, Any]) -> None:
    """A ``topk`` aggregator keeps k pairs per key: k is bounded like the spec's ``top_k``
    (composite parts too)."""
    if name == "topk" and params.get("k", 0) > MAX_TOP_K:
        raise JobSpecError(
            "aggregator_params", f"topk k must be at most {MAX_TOP_K}, got {params['k']!r}"
        )
    for part in params.get("parts", ()) if name == "composite" else ():
        _check_aggregator_size(part[0], part[1])


def _json_object(data: dict[str, Any], key: str) -> dict[str, Any]:
    v = data.get(key, {})
    if not isinstance(v, dict) or not all(isinstance(k, str) for k in v):
        raise JobSpecError(key, f"must be a JSON object, got {type(v).__name__}")
    _check_json(v, key, 0)
    try:
        return orjson.loads(orjson.dumps(v))  # a private, JSON-clean copy
    except TypeError as exc:
        raise JobSpecError(key, f"must be JSON-serializable: {exc}") from None


def _check_json(v: Any, path: str, depth: int) -> None:
    """JSON values the runtime can carry unchanged: int64 integers, finite numbers, bounded
    nesting (an out-of-range integer would fail msgpack or Arrow on every agent; a NaN would
    silently become null)."""
    if depth > MAX_JSON_DEPTH:
        raise JobSpecError(path, f"nests deeper than {MAX_JSON_DEPTH} levels")
    if isinstance(v, bool) or v is None or isinstance(v, str):
        return
    if isinstance(v, int):
        if not INT64_MIN <= v <= INT64_MAX:
            raise JobSpecError(path, f"integer {v} is outside the signed 64-bit range")
    elif isinstance(v, float):
        if not math.isfinite(v):
            raise JobSpecError(path, f"must be a finite number, got {v!r}")
    elif isinstance(v, dict):
        for k, item in v.items():
            if not isinstance(k, str):
                raise JobSpecError(path, f"keys must be strings, got {k!r}")
            _check_json(item, f"{path}.{k}", depth + 1)
    elif isinstance(v, list | tuple):
        for i, item in enumerate(v):
            _check_json(item, f"{path}[{i}]", depth + 1)
    else:
        raise JobSpecError(
            path,
            f"must be JSON (object, array, string, number, boolean, null), got {type(v).__name__}",
        )
