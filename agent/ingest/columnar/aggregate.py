"""Per-chunk partial aggregates computed where the chunk is parsed (a parse helper process):
the live agent's second core does the aggregation too (docs/ingest.md, "Both cores").

Contract:

* :func:`plan_for` ``(jobs, ts_field)`` is the :class:`AggregationPlan` of the jobs reading one
  input (picklable: each job's spec as JSON data, never code), or None when some job cannot be
  pre-aggregated elsewhere: no batch path, an epoch length that changed (epochs are cut from
  the timestamps alone, ``floor(ts / epoch_seconds)``, as the clock's ``assign_many`` does), or
  iterative mode (its ``map`` reads the master's feedback, which a helper does not have).
* :meth:`AggregationPlan.aggregate` ``(table)`` runs in the helper on a parsed chunk: every
  row's timestamp (float64, NaN where unusable: the worker counts it as bad) and, per job,
  ``(epoch, keys, states, rows)`` per epoch of the rows with a usable timestamp (the job's
  ``aggregate_batch``). It decides no lateness: the watermark is the running maximum of the
  timestamps in file order, so the record thread decides it
  (:meth:`~agent.runtime.epochs.worker.Worker.process_partials`). It returns None (ship the
  parsed table, as plain parse-ahead does) when the timestamp column is not numeric, or when
  any job's partials cannot be computed there (its class is not importable in the helper, its
  ``aggregate_batch`` declines or fails): the record thread then runs exactly the single-core
  path on the table, with its fallbacks and counters.
* :class:`AggregatedChunk` is what a file tail hands to the workers in place of the chunk's
  table: ``num_rows``, ``ts``, :meth:`~AggregatedChunk.rows_in_order` ``(job)`` (no row
  late against the rows' own running maximum: the record thread's clock then needs no pass
  over them), :meth:`~AggregatedChunk.partials_for` ``(job, ts_field,
  epoch_seconds)`` (None unless they were computed for this very job spec, timestamp field and
  epoch length), and :meth:`~AggregatedChunk.table`, the chunk's rows parsed again on the
  record thread on first use (a chunk with a late row in a partly accepted epoch, a job that
  changed since the hand-over) and kept. ``column_names``, ``column``, ``slice`` and
  ``to_pylist`` read that table, so a batch's consumers (taps, late samples, jobs without a
  batch path) see the rows as from a plain table.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import orjson
import xxhash

if TYPE_CHECKING:  # the Arrow stack loads with the first chunk parsed
    import numpy as np
    import pyarrow as pa

#: per job: ``[(epoch, keys, states, rows)]``
Partials = list[tuple[int, list[Any], list[Any], int]]

_KEYS: dict[int, tuple[Any, str]] = {}  # id(spec) -> (spec, key): specs are immutable
_JOBS: dict[str, tuple[Any, Any]] = {}  # in a helper: key -> (job, aggregator)
_CACHED = 64


def job_key(job: Any) -> str:
    """A digest of ``job``'s spec (its JSON form): partials computed for one spec are used
    only by a job of that very spec."""
    spec = job.spec
    got = _KEYS.get(id(spec))
    if got is not None and got[0] is spec:
        return got[1]
    key = xxhash.xxh3_128_hexdigest(orjson.dumps(spec.to_dict(), option=orjson.OPT_SORT_KEYS))
    if len(_KEYS) >= _CACHED:
        _KEYS.clear()
    _KEYS[id(spec)] = (spec, key)
    return key


@dataclass(frozen=True, slots=True)
class PlannedJob:
    """One job of a plan: its spec key, spec (JSON data), epoch length and the module of its
    class (imported in the helper, which registers it)."""

    key: str
    spec: dict[str, Any]
    epoch_seconds: float
    module: str


def plan_for(jobs: Iterable[Any], ts_field: str) -> AggregationPlan | None:
    """The plan of the jobs reading one input (see module docstring), or None."""
    planned = []
    for job in jobs:
        spec = job.spec
        if not job.has_batch_path() or spec.schedule.changes or spec.mode == "iterative":
            return None
        module = type(job).__module__
        planned.append(PlannedJob(job_key(job), spec.to_dict(), spec.epoch_seconds, module))
    return AggregationPlan(ts_field, tuple(planned)) if planned else None


def none_late_within(ts: np.ndarray, epoch_seconds: float, allowed_lateness: float) -> bool:
    """Whether no row of ``ts`` (finite timestamps, in arrival order) is late against the
    column's own running maximum: each row's epoch ends after that maximum up to it less
    ``allowed_lateness``, computed as the record thread's ``EpochClock.assign_many``
    computes it (the ``in_order`` of its ``accept_whole``)."""
    import numpy as np

    if not len(ts):
        return True
    ends = (np.floor(ts / epoch_seconds).astype(np.int64) + 1).astype(np.float64) * epoch_seconds
    return bool((ends > np.maximum.accumulate(ts) - allowed_lateness).all())


def _job(planned: PlannedJob) -> tuple[Any, Any]:
    """The job and aggregator of ``planned``, built once per helper process."""
    got = _JOBS.get(planned.key)
    if got is None:
        import agent.jobs.ql_job  # noqa: F401  (registers the "ql" job class)
        from agent.jobs.job import create_job, parse_spec

        importlib.import_module(planned.module)  # registers a job class defined there
        job = create_job(parse_spec(planned.spec))
        if len(_JOBS) >= _CACHED:
            _JOBS.clear()
        got = _JOBS[planned.key] = (job, job.make_aggregator())
    return got


@dataclass(frozen=True, slots=True)
class AggregationPlan:
    """What a parse helper aggregates a chunk for (see module docstring)."""

    ts_field: str
    jobs: tuple[PlannedJob, ...]

    def aggregate(self, table: pa.Table) -> AggregatedChunk | None:
        """The chunk's timestamps and every job's per-epoch partials, or None (see module)."""
        import numpy as np
        import pyarrow as pa

        n = table.num_rows
        if self.ts_field in table.column_names:
            col = table.column(self.ts_field)
            if not (pa.types.is_floating(col.type) or pa.types.is_integer(col.type)):
                return None  # the worker takes the row path for such a column
            ts = col.cast(pa.float64()).to_numpy(zero_copy_only=False)
        else:
            ts = np.full(n, np.nan)
        good = np.isfinite(ts)
        everything = bool(good.all())
        usable = ts if everything else ts[good]
        partials: dict[str, tuple[float, Partials]] = {}
        ordered = set()
        for planned in self.jobs:
            try:
                job, agg = _job(planned)
                if none_late_within(usable, planned.epoch_seconds, job.spec.allowed_lateness):
                    ordered.add(planned.key)
                epochs = np.floor(np.where(good, ts, 0.0) / planned.epoch_seconds)
                epochs = epochs.astype(np.int64)
                uniq = np.unique(epochs[good]).tolist()
                out: Partials = []
                for e in uniq:
                    whole = everything and len(uniq) == 1
                    part = table if whole else table.filter(pa.array(good & (epochs == e)))
                    keys, states = job.aggregate_batch(part, agg)
                    out.append((e, keys, states, part.num_rows))
            except Exception:  # declined or failed: the record thread runs the single-core path
                return None
            partials[planned.key] = (planned.epoch_seconds, out)
        return AggregatedChunk(n, ts, self.ts_field, partials, in_order=frozenset(ordered))


@dataclass(slots=True)
class AggregatedChunk:
    """A chunk pre-aggregated on a parse helper, standing in for its table (see module)."""

    num_rows: int
    ts: np.ndarray
    ts_field: str
    partials: dict[str, tuple[float, Partials]]
    #: the chunk's rows parsed again here (set by the tail that received it)
    reparse: Callable[[], pa.Table] | None = None
    #: the jobs (spec keys) none of whose rows is late against the rows' own running maximum
    in_order: frozenset[str] = frozenset()
    _table: pa.Table | None = field(default=None, repr=False)

    def rows_in_order(self, job: Any) -> bool:
        """Whether no row is late for ``job`` against the rows' own running maximum (what
        ``EpochClock.accept_whole`` needs besides the clock's own state)."""
        return job_key(job) in self.in_order

    def partials_for(self, job: Any, ts_field: str, epoch_seconds: float) -> Partials | None:
        """``job``'s partials, when they were computed for its spec with these timestamps and
        epochs; None otherwise (the caller aggregates :meth:`table` itself)."""
        if ts_field != self.ts_field:
            return None
        got = self.partials.get(job_key(job))
        if got is None or got[0] != epoch_seconds:
            return None
        return got[1]

    def table(self) -> pa.Table:
        """The chunk's rows (parsed again on first use, then kept)."""
        if self._table is None:
            assert self.reparse is not None, "the tail sets reparse before handing it on"
            self._table = self.reparse()
            self.reparse = None  # the chunk's bytes are not needed any more
        return self._table

    @property
    def column_names(self) -> list[str]:
        return self.table().column_names

    def column(self, name: str) -> pa.ChunkedArray:
        return self.table().column(name)

    def slice(self, offset: int = 0, length: int | None = None) -> pa.Table:
        return self.table().slice(offset, length)

    def to_pylist(self) -> list[dict[str, Any]]:
        return self.table().to_pylist()
