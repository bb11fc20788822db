"""Per-chunk partial aggregates computed where the chunk is parsed (a parse helper process):
the live agent's second core does the aggregation too (docs/ingest.md, "Both cores").

Contract:

* :func:`plan_for` ``(jobs, ts_field)`` is the :class:`AggregationPlan` of the jobs reading one
  input (picklable: each job's spec as JSON data, never code), or None when some job cannot be
  pre-aggregated elsewhere: no batch path, an epoch length that changed (epochs are cut from
  the timestamps alone, ``floor(ts / epoch_seconds)``, as the clock's ``assign_many`` does), or
  iterative mode (its ``map`` reads the master's feedback, which a helper does not have).
* :meth:`AggregationPlan.aggregate` ``(table)`` runs in the helper on a parsed chunk: a
  summary of the rows' timestamps (:class:`TimestampColumn`: how many rows, how many with no
  usable timestamp - the worker counts them bad - and the least and greatest usable one;
  not the column itself: 8 bytes a row through the helper's pipe stalled it) and, per job,
  ``(epoch, keys, states, rows)`` per epoch of the rows with a usable timestamp (the job's
  ``aggregate_batch``). It decides no lateness: the watermark is the running maximum of the
  timestamps in file order, so the record thread decides it
  (:meth:`~agent.runtime.epochs.worker.Worker.process_partials`). It returns None (ship the
  parsed table, as plain parse-ahead does) when the timestamp column is not numeric, or when
  any job's partials cannot be computed there (its class is not importable in the helper, its
  ``aggregate_batch`` declines or fails): the record thread then runs exactly the single-core
  path on the table, with its fallbacks and counters.
* :class:`AggregatedChunk` is what a file tail hands to the workers in place of the chunk's
  table: ``num_rows``, :meth:`~AggregatedChunk.timestamps` (the summary; the values, when
  the clock must decide row by row, from the rows parsed again),
  :meth:`~AggregatedChunk.rows_in_order` ``(job)`` (no row late against the rows' own
  running maximum: the record thread's clock then needs no pass over them),
  :meth:`~AggregatedChunk.partials_for` ``(job, ts_field, epoch_seconds)`` (None unless they
  were computed for this very job spec, timestamp field and epoch length), and
  :meth:`~AggregatedChunk.table`, the chunk's rows parsed again on the record thread on
  first use (a chunk with a late row in a partly accepted epoch, a job that changed since
  the hand-over) and kept. ``column_names``, ``column``, ``slice`` and ``to_pylist`` read
  that table, so a batch's consumers (taps, late samples, jobs without a batch path) see the
  rows as from a plain table.
"""

from __future__ import annotations

import importlib
import math
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


def none_late_within(
    ts: np.ndarray, epoch_seconds: float, allowed_lateness: float, epochs: np.ndarray | None = None
) -> bool:
    """Whether no row of ``ts`` (finite timestamps, in arrival order) is late against the
    column's own running maximum: each row's epoch ends after that maximum up to it less
    ``allowed_lateness``, computed as the record thread's ``EpochClock.assign_many``
    computes it (the ``in_order`` of its ``accept_whole``). ``epochs``: the rows' epochs
    ``floor(ts / epoch_seconds)`` when the caller has them already."""
    import numpy as np

    if not len(ts):
        return True
    if epochs is None:
        epochs = np.floor(ts / epoch_seconds).astype(np.int64)
    ends = (epochs + 1).astype(np.float64) * epoch_seconds
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
        """The chunk's timestamp summary and every job's per-epoch partials, or None (see
        module)."""
        import numpy as np
        import pyarrow as pa

        ts = timestamps(table, self.ts_field)
        if ts is None:
            return None  # the worker takes the row path for such a column
        column = TimestampColumn.of(ts)
        partials: dict[str, tuple[float, Partials]] = {}
        ordered = set()
        for planned in self.jobs:
            try:
                job, agg = _job(planned)
                lateness = job.spec.allowed_lateness
                out: Partials = []
                span = column.epochs(planned.epoch_seconds)
                if span is not None and span[0] == span[1] and not column.bad:
                    # one epoch: no per-row epochs, and the running maximum's test is the
                    # greatest row's (the epoch's end is every row's)
                    if float(span[0] + 1) * planned.epoch_seconds > column.high - lateness:
                        ordered.add(planned.key)
                    keys, states = job.aggregate_batch(table, agg)
                    out.append((span[0], keys, states, table.num_rows))
                else:
                    good = np.isfinite(ts)
                    epochs = np.floor(np.where(good, ts, 0.0) / planned.epoch_seconds)
                    epochs = epochs.astype(np.int64)
                    kept = epochs[good]
                    if none_late_within(ts[good], planned.epoch_seconds, lateness, kept):
                        ordered.add(planned.key)
                    for e in np.unique(kept).tolist():
                        part = table.filter(pa.array(good & (epochs == e)))
                        keys, states = job.aggregate_batch(part, agg)
                        out.append((e, keys, states, part.num_rows))
            except Exception:  # declined or failed: the record thread runs the single-core path
                return None
            partials[planned.key] = (planned.epoch_seconds, out)
        return AggregatedChunk(
            column.rows, column.bad, column.low, column.high, self.ts_field, partials,
            in_order=frozenset(ordered),
        )  # fmt: skip


def timestamps(table: pa.Table, ts_field: str) -> np.ndarray | None:
    """Every row's timestamp of ``table`` as float64 (all NaN without a ``ts_field`` column),
    or None when that column is not numeric (the worker takes the row path for it)."""
    import numpy as np
    import pyarrow as pa

    if ts_field not in table.column_names:
        return np.full(table.num_rows, np.nan)
    col = table.column(ts_field)
    if not (pa.types.is_floating(col.type) or pa.types.is_integer(col.type)):
        return None
    return col.cast(pa.float64()).to_numpy(zero_copy_only=False)


@dataclass(frozen=True, slots=True)
class TimestampColumn:
    """A chunk's timestamps as the record thread's clock needs them: ``rows`` in all, ``bad``
    of them with no usable timestamp (NaN), the least and greatest usable one (``low``,
    ``high``; NaN when none) and ``values()``, every row's (NaN: unusable). A parse helper's
    chunk sends only the summary: ``values()`` then parses the chunk again (it raises
    ``OSError`` when its file no longer holds those bytes), needed only when the clock cannot
    take the chunk whole (``EpochClock.accept_whole``)."""

    rows: int
    bad: int
    low: float
    high: float
    values: Callable[[], np.ndarray]

    @classmethod
    def of(cls, ts: np.ndarray) -> TimestampColumn:
        """The summary of ``ts`` (every row's timestamp, NaN where unusable)."""
        import numpy as np

        good = np.isfinite(ts)
        bad = len(ts) - int(np.count_nonzero(good))
        if bad == len(ts):
            return cls(len(ts), bad, math.nan, math.nan, lambda: ts)
        usable = ts[good] if bad else ts
        return cls(len(ts), bad, float(usable.min()), float(usable.max()), lambda: ts)

    def epochs(self, epoch_seconds: float) -> tuple[int, int] | None:
        """The epochs of the least and greatest usable timestamp (None when none is)."""
        if self.bad == self.rows:
            return None
        return math.floor(self.low / epoch_seconds), math.floor(self.high / epoch_seconds)


@dataclass(slots=True)
class AggregatedChunk:
    """A chunk pre-aggregated on a parse helper, standing in for its table (see module)."""

    num_rows: int
    #: rows with no usable timestamp, and the least and greatest usable one
    bad: int
    low: float
    high: float
    ts_field: str
    partials: dict[str, tuple[float, Partials]]
    #: the chunk's rows parsed again here (set by the tail that received it)
    reparse: Callable[[], pa.Table] | None = None
    #: the jobs (spec keys) none of whose rows is late against the rows' own running maximum
    in_order: frozenset[str] = frozenset()
    _table: pa.Table | None = field(default=None, repr=False)

    def timestamps(self) -> TimestampColumn:
        """The chunk's timestamps: the helper's summary; their values parsed again here."""
        return TimestampColumn(self.num_rows, self.bad, self.low, self.high, self._values)

    def _values(self) -> np.ndarray:
        got = timestamps(self.table(), self.ts_field)
        if got is None or len(got) != self.num_rows:  # not the rows the helper parsed
            raise OSError("the chunk parsed again is not the one a parse helper aggregated")
        return got

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

    def rows_per_epoch(self, ts_field: str, epoch_seconds: float) -> dict[int, int] | None:
        """Epoch ``floor(ts / epoch_seconds)`` -> the chunk's rows with a usable ``ts_field``
        there: from any job's partials of that epoch length (their row counts are taken
        before the job's filter), else from the summary - exact for a chunk of one epoch; for
        a chunk spanning several, all on its first (the split is not known here). None when
        the helper read another timestamp field (the epochs are not known)."""
        if ts_field != self.ts_field:
            return None
        for seconds, partials in self.partials.values():
            if seconds == epoch_seconds:
                return {p[0]: p[3] for p in partials if p[3]}
        span = self.timestamps().epochs(epoch_seconds)
        return {} if span is None else {span[0]: self.num_rows - self.bad}

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
