"""The worker role of one job on one agent, independent of networking.

Contract (:class:`Worker`): ``process(records)`` runs ``job.map`` over validated records,
assigns each to an event-time epoch with an :class:`~agent.runtime.epochs.clock.EpochClock`,
folds its pairs into that epoch's CBT; ``poll()`` returns ``[(epoch, Snapshot), ...]`` for
every epoch the watermark closed, in order, each exactly once, with no gaps (an epoch without
records yields an empty snapshot, so the parent's barrier is never blocked). Snapshots use
the spec's aggregator (so they merge with every other agent's). ``finish()`` closes
everything that is open (end of input).

``job.map_keys`` (keys only, value 1) is used instead of ``job.map`` when the job class
overrides it: no pair tuples, and the CBT's C counting path for ``count``.

Columnar path (docs/ingest.md): ``process`` given a
:class:`~agent.ingest.base.ColumnarBatch` runs its Arrow tables through
:meth:`Worker.process_table` (epochs from the timestamp column with
``EpochClock.assign_many``: the same lateness decisions and counts, in row order; then the
job's ``aggregate_batch`` / ``aggregate_epochs`` gives per-key partial states that
``merge_states`` folds into each epoch's CBT) and its row parts through the row path;
:meth:`Worker.process_partials` takes chunks pre-aggregated on other processes (a parse
helper's chunk in a batch: :meth:`Worker.process_aggregated`). Whatever the
job cannot compute exactly on Arrow takes ``map`` for those rows; results are the row
path's. Extra counters: ``columnar_rows``, ``columnar_fallback_rows``, ``partials_out`` (one
per key per epoch per chunk, instead of ``pairs_out`` per pair), ``map_batch_errors``.

State layout: **one CompressedBufferTree per open epoch** (created on the epoch's first pair,
flushed and dropped when the epoch closes). ``memory_budget_bytes`` (the job's, from
``RuntimeTunables.worker_memory_bytes``) bounds the open epochs' resident compressed buffers
together: past it each tree gets an equal share and spills the rest to ``spill_dir``;
``close()`` drops every open epoch (a stopped job). With a small allowed lateness only one or
two are open; a single tree with epoch-tagged keys would need a per-epoch split of every flush.

Execution models (``spec.mode``):

* ``batch`` — each epoch's own pane (flush, then the tree is dropped: "empty" every epoch).
* ``window`` — for each epoch ``e`` that ends a window, i.e. ``(e + 1) % window_slide == 0``
  (windows are aligned to epoch 0, so every agent cuts the same windows), the aggregate of
  epochs ``[e - window_size + 1, e]``; other epochs yield an empty snapshot (they keep the
  barrier moving and merge to nothing). :class:`EpochWindows` computes it: for ``count`` a
  running snapshot updated by the paper's invertible reduce (merge the new pane, subtract the
  one that left); for other aggregators a merge of the panes in the window (exact for floats
  and non-invertible aggregators; aligned to epoch 0, unlike cbt's ``SlidingWindow``, which
  counts from its first push). ``{"kind": "empty"}`` control drops the panes of the epochs
  already closed (epochs still open count in the windows that follow).
* ``iterative`` — like batch, and ``job.map`` reads ``job.feedback``: the last value the
  master fed back (``{"kind": "feedback", ...}`` multicast, see :meth:`Worker.on_multicast`).

Counters (``stats()``): ``records_in``, ``records_accepted``, ``pairs_out``, ``map_errors``,
``prefiltered`` (lines skipped unparsed by the input's prefilter, see :mod:`agent.ingest.fastpath`),
``bad_records`` (no/invalid timestamp), ``late_dropped``, ``future_dropped`` (from the clock),
``late`` (:class:`~agent.runtime.epochs.late.LateRecords`: per input and epoch),
``epochs_emitted``, ``empty_epochs``, ``open_epochs``, ``epochs_rebucketed`` and
``epoch_switch_late`` (see :meth:`Worker.replace_job`). A ``map`` that raises, or yields a
pair the CBT rejects (``TypeError``: a float key, an unserializable value), costs that record
or pair only: it is counted and sampled in ``errors()``.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from agent.ingest.base import ColumnarBatch
from agent.ingest.columnar.aggregate import TimestampColumn, timestamps
from agent.jobs.job import Job
from agent.jobs.spec import SNAPSHOT_FIELDS, JobSpec
from agent.ql.fallback import Unsupported
from agent.runtime.epochs.clock import EpochClock
from agent.runtime.epochs.job_change import clock_changed, closed_before, discard_from, rebucket
from agent.runtime.epochs.late import LateRecords
from agent.runtime.epochs.partials import (
    inserted_before_error,
    split_accepted,
    whole_rows,
)
from cbt import Aggregator, CompressedBufferTree, EpochWindows, Snapshot

if TYPE_CHECKING:  # the Arrow stack loads with the first columnar batch (agent/ql/fallback.py)
    import pyarrow as pa

log = logging.getLogger(__name__)

FEEDBACK = "feedback"
EMPTY = "empty"
BATCH = "batch"
POLL_LIMIT = 1024
CLOSED_RECORDS = 4096  # record counts of closed epochs kept for the runtime to take
_MAX_ERROR_SAMPLES = 50


class Worker:
    """Runs one job's worker role over records (see module docstring)."""

    def __init__(
        self,
        job: Job,
        *,
        clock: EpochClock | None = None,
        wall_clock: Callable[[], float] = time.time,
        ts_field: str | None = None,
        tree_options: dict[str, Any] | None = None,
        memory_budget_bytes: int | None = None,
        spill_dir: str | None = None,
        late: LateRecords | None = None,
    ) -> None:
        spec = job.spec
        self.job = job
        self.spec = spec
        self.agg = job.make_aggregator()
        self.ts_field = ts_field or str(spec.params.get("ts_field", "ts"))
        start = spec.start_epoch
        if spec.aggregator_since is not None and (start is None or start < spec.aggregator_since):
            start = spec.aggregator_since  # this worker never ran the previous aggregate
        self.clock = clock or EpochClock(
            spec.epoch_seconds,
            spec.allowed_lateness,
            spec.effective_idle_timeout,
            wall_clock,
            start_epoch=start,
            max_future=spec.max_future,
            schedule=spec.schedule,
        )
        #: the records the clock refused as late: whoever feeds the worker hands them over
        #: after each batch (``late.collect(input, clock.take_late())``; epochs/late.py)
        self.late = late or LateRecords(spec.name, "local")
        self._tree_options = dict(tree_options or {})
        if spill_dir is not None:
            self._tree_options.setdefault("spill_dir", spill_dir)
        #: the job's budget of resident compressed CBT buffers, shared by its open epochs
        self.memory_budget_bytes = memory_budget_bytes
        self._trees: dict[int, CompressedBufferTree] = {}
        #: closed epoch → records the clock assigned to it, until :meth:`take_closed_records`
        #: (the counts lineage carries to the master; at most CLOSED_RECORDS kept)
        self.closed_records: dict[int, int] = {}
        self._carried: dict[int, Snapshot] = {}  # open epochs' data moved by a length change
        #: during a change of aggregate: (first epoch of the new one, old job, old aggregator)
        self._before: tuple[int, Job, Aggregator] | None = None
        self._windows = (
            EpochWindows(spec.window_size, spec.window_slide, self.agg)
            if spec.mode == "window"
            else None
        )
        self._errors: deque[dict[str, Any]] = deque(maxlen=_MAX_ERROR_SAMPLES)
        # (rows_unreadable: pre-aggregated rows lost, not readable again: _rows_again)
        self.counters = dict.fromkeys(
            ("records_in", "records_accepted", "pairs_out", "map_errors", "bad_records",
             "epochs_emitted", "empty_epochs", "prefiltered", "epochs_rebucketed",
             "epoch_switch_late", "switch_discarded_keys", "budget_enforcements", "columnar_rows",
             "columnar_fallback_rows", "partials_out", "map_batch_errors", "rows_unreadable"),
            0,
        )  # fmt: skip

    # ---- input ----------------------------------------------------------------------------
    def process(
        self,
        records: Iterable[dict[str, Any]],
        ts_field: str | None = None,
        *,
        skipped: int = 0,
    ) -> int:
        """Map and insert ``records``; returns how many were accepted (not late, no error).

        ``ts_field`` names the timestamp field of these records (default: the worker's, from
        the constructor, else ``spec.params["ts_field"]``, else ``"ts"``): pass the input's
        when inputs use different fields. ``skipped``: lines the input's prefilter skipped
        unparsed before these records (:mod:`agent.ingest.fastpath`): counted in ``prefiltered``;
        they keep the source active for the idle clock but never move the watermark.
        """
        if isinstance(records, ColumnarBatch):
            return self._process_parts(records, ts_field, skipped)
        if skipped:
            self.counters["prefiltered"] += skipped
            self.clock.touch()
        if self._before is not None:
            return self._process_switching(records, ts_field or self.ts_field)
        pending: dict[int, list[Any]] = {}
        assign = self.clock.assign
        keys_only = type(self.job).map_keys is not Job.map_keys
        job_map = self.job.map_keys if keys_only else self.job.map
        ts_field = ts_field or self.ts_field
        accepted = n = bad = 0
        last_epoch: int | None = None
        slot: list[Any] = []
        for rec in records:
            n += 1
            try:
                epoch = assign(rec[ts_field])
            except (KeyError, TypeError, ValueError):
                bad += 1
                continue
            if epoch is None:
                continue
            try:
                pairs = list(job_map(rec))
            except Exception as exc:
                self._error("map", exc, rec)
                continue
            accepted += 1
            if pairs:
                if epoch != last_epoch:
                    last_epoch = epoch
                    slot = pending.setdefault(epoch, [])
                slot.extend(pairs)
        self._count_batch(n, accepted, bad)
        self._insert_pending(pending, keys_only)
        return accepted

    def _process_parts(self, batch: ColumnarBatch, ts_field: str | None, skipped: int) -> int:
        """A columnar poll: its tables and row parts in input order."""
        import pyarrow as pa  # (loaded: a columnar batch came with it)

        accepted = 0
        for i, part in enumerate(batch.parts):
            extra = skipped if i == 0 else 0
            if isinstance(part, pa.Table):
                accepted += self.process_table(part, ts_field, skipped=extra)
            elif hasattr(part, "partials_for"):  # pre-aggregated by a parse helper
                accepted += self.process_aggregated(part, ts_field, skipped=extra)
            else:
                accepted += self.process(part, ts_field, skipped=extra)
        if not batch.parts and skipped:
            self.process([], ts_field, skipped=skipped)
        return accepted

    def process_table(
        self, table: pa.Table, ts_field: str | None = None, *, skipped: int = 0
    ) -> int:
        """:meth:`process` for an Arrow table of records (the columnar ingest path, see
        docs/ingest.md): epochs from the timestamp column with the clock's vectorized
        ``assign_many`` (the same lateness decisions and counts, in row order), then per
        epoch the job's ``aggregate_batch`` (per-key partial states folded into the epoch's
        CBT with ``merge_states``: one insert per group, counted in ``partials_out``). Rows
        whose timestamp is NULL or not finite count as ``bad_records``. Where the job has no
        batch path, a change of aggregate is pending, or ``aggregate_batch`` raises
        ``Unsupported``, those rows take the row path (``map``; counted in
        ``columnar_fallback_rows``); the result is the same either way."""
        import pyarrow as pa  # (loaded: a columnar batch came with it)

        ts_field = ts_field or self.ts_field
        if self._before is not None or not self.job.has_batch_path():
            self.counters["columnar_fallback_rows"] += table.num_rows
            return self.process(table.to_pylist(), ts_field, skipped=skipped)
        if skipped:
            self.counters["prefiltered"] += skipped
            self.clock.touch()
        n = table.num_rows
        if n == 0:
            return 0
        ts = timestamps(table, ts_field)
        if ts is None:  # not a numeric column: the row path
            self.counters["columnar_fallback_rows"] += n
            return self.process(table.to_pylist(), ts_field)
        good = np.isfinite(ts)  # NULL became NaN
        bad = n - int(good.sum())
        if bad:
            table = table.filter(pa.array(good))
            ts = ts[good]
        self.counters["records_in"] += n
        self.counters["bad_records"] += bad
        self.counters["columnar_rows"] += n
        if (whole := self.clock.accept_one_epoch(ts)) is not None:  # no pass over the rows
            done = self._aggregate_part(whole, table)
        else:
            epochs, ok = self.clock.assign_many(ts)
            accepted = int(ok.sum())
            if not accepted:
                return 0
            kept = epochs[ok]
            lo, hi = int(kept.min()), int(kept.max())
            rows = table if accepted == len(ts) else table.filter(pa.array(ok))
            part = self._aggregate_part
            done = part(lo, rows) if lo == hi else self._aggregate_epochs(rows, kept)
        return self._accepted(done)

    def process_aggregated(
        self, part: Any, ts_field: str | None = None, *, skipped: int = 0
    ) -> int:
        """:meth:`process_table` for a chunk a parse helper pre-aggregated (an
        :class:`~agent.ingest.columnar.aggregate.AggregatedChunk`): its partials when they
        were computed for this job's spec, timestamp field and epoch length, through
        :meth:`process_partials`; else its rows (parsed again) through :meth:`process_table`."""
        ts_field = ts_field or self.ts_field
        clock = self.clock
        if skipped:  # lines a prefilter skipped before this chunk (as process_table counts)
            self.counters["prefiltered"] += skipped
            clock.touch()
        if self._before is None and not clock.schedule.changes:
            partials = part.partials_for(self.job, ts_field, clock.epoch_seconds)
            if partials is not None:
                ordered = part.rows_in_order(self.job)
                return self.process_partials(part.timestamps(), partials, part.table, ordered)
        lost = part.rows_per_epoch(ts_field, clock.epoch_seconds)
        rows = self._rows_again(part.table, lost, part.num_rows)
        return 0 if rows is None else self.process_table(rows, ts_field)

    def process_partials(
        self,
        ts: TimestampColumn,
        partials: list[Any],
        table: Callable[[], pa.Table],
        in_order: bool = False,
    ) -> int:
        """A chunk pre-aggregated elsewhere (a parse helper, :mod:`agent.runtime.local.parallel`):
        ``ts`` its rows' timestamps (NaN: none usable; the summary, the values read only when
        needed), ``partials`` ``(epoch, keys, states, rows)`` per epoch ``floor(ts /
        epoch_seconds)``. The clock decides lateness here (as :meth:`process_table` does): an
        epoch whose rows it accepted all is merged as computed, one it accepted none of
        dropped, and only for an epoch it accepted some rows of is ``table()`` (the chunk's
        rows, parsed again) aggregated for those rows. Same results and counts as
        :meth:`process_table`. ``in_order``: none of the rows is late against their own
        running maximum (the helper's ``none_late_within``)."""
        import pyarrow as pa  # (loaded: a columnar batch came with it)

        n, bad = ts.rows, ts.bad
        self.counters["records_in"] += n
        self.counters["bad_records"] += bad
        self.counters["columnar_rows"] += n
        if bad == n:
            return 0
        # every row accepted (none late, none too far ahead): no pass over the rows
        rows = whole_rows(partials, n - bad) if self._before is None else None
        if rows is not None and self.clock.accept_whole(ts.low, ts.high, rows, in_order):
            return self._accepted(self._merge_whole(partials))
        values = self._rows_again(ts.values, {p[0]: p[3] for p in partials}, n - bad)
        if values is None:
            return 0
        good = np.isfinite(values)
        epochs, ok = self.clock.assign_many(values[good] if bad else values)
        if not ok.any():
            return 0
        kept = epochs[ok]
        if self._before is None:
            whole, again = split_accepted(partials, kept)
        else:
            whole, again = [], np.unique(kept).tolist()
        done = self._merge_whole(whole)
        lost = {e: int((kept == e).sum()) for e in again}  # should the rows be gone
        if again and (rows_again := self._rows_again(table, lost, sum(lost.values()))) is not None:
            if bad:
                rows_again = rows_again.filter(pa.array(good))
            for e in again:
                done += self._aggregate_part(e, rows_again.filter(pa.array(ok & (epochs == e))))
        return self._accepted(done)

    def _merge_whole(self, partials: list[Any]) -> int:
        """Merge ``partials`` whose rows were all accepted; the rows they stand for."""
        for epoch, keys, states, _rows in partials:
            self._merge(epoch, keys, states)
        return sum(p[3] for p in partials)

    def _accepted(self, done: int) -> int:
        """Count ``done`` rows accepted and enforce the memory budget; returns ``done``."""
        self.counters["records_accepted"] += done
        self._enforce_budget()
        return done

    def _rows_again(
        self, table: Callable[[], Any], lost: Mapping[int, int] | None, rows: int
    ) -> Any:
        """A pre-aggregated chunk's rows (or timestamps) parsed again; None when its bytes are
        gone (a truncation meanwhile: ``handed.py``): the ``rows`` are counted lost, logged,
        and ``lost`` (epoch -> rows; None: unknown) goes to each epoch's result (``late``)."""
        try:
            return table()
        except OSError as exc:
            self.counters["rows_unreadable"] += rows
            epochs = "unknown" if lost is None else sorted(lost)
            log.warning("job %s: %d rows of epochs %s lost: %s", self.spec.name, rows, epochs, exc)
            if lost:  # (else no epoch to name: the count and the log above only)
                self.late.lost(lost, str(exc))
            return None

    def _merge(self, epoch: int, keys: list[Any], states: list[Any]) -> None:
        if not keys:
            return
        tree = self._trees.get(epoch)
        if tree is None:
            tree = self._trees[epoch] = CompressedBufferTree(
                self.agg_for(epoch), **self._tree_options
            )
        try:
            tree.merge_states(keys, states)
        except TypeError as exc:  # a key the CBT refuses: a job bug, counted
            self._error("pair", exc, {"keys": len(keys)})
            return
        self.counters["partials_out"] += len(keys)

    def _aggregate_epochs(self, rows: pa.Table, epochs: np.ndarray) -> int:
        """Rows of several epochs (``epochs``: each row's) in one pass of the job's
        ``aggregate_epochs``; per epoch through ``_aggregate_part`` when it declines."""
        import pyarrow as pa  # (loaded: a columnar batch came with it)

        try:
            parts = self.job.aggregate_epochs(rows, epochs, self.agg)
        except Exception:  # Unsupported, or a job's bug: epoch by epoch (and its fallbacks)
            return sum(
                self._aggregate_part(int(e), rows.filter(pa.array(epochs == e)))
                for e in np.unique(epochs).tolist()
            )
        for epoch, keys, states in parts:
            self._merge(epoch, keys, states)
        return rows.num_rows

    def _aggregate_part(self, epoch: int, part: pa.Table) -> int:
        """One epoch's rows of a table into its CBT; returns the rows accepted."""
        agg = self.agg_for(epoch)
        try:
            keys, states = self.job.aggregate_batch(part, agg)
        except Unsupported:
            return self._map_rows(epoch, part.to_pylist())
        except Exception as exc:  # a job's map_batch bug: its rows take the row path
            self.counters["map_batch_errors"] += 1
            log.warning(
                "job %s: map_batch failed on %d rows of epoch %d (they take map): %r",
                self.spec.name,
                part.num_rows,
                epoch,
                exc,
            )
            return self._map_rows(epoch, part.to_pylist())
        self._merge(epoch, keys, states)
        return part.num_rows

    def _map_rows(self, epoch: int, rows: list[dict[str, Any]]) -> int:
        """Rows of ``epoch`` (already assigned by the clock) through the row ``map``."""
        self.counters["columnar_fallback_rows"] += len(rows)
        keys_only = type(self.job).map_keys is not Job.map_keys
        job_map = self.job.map_keys if keys_only else self.job.map
        slot: list[Any] = []
        accepted = 0
        for rec in rows:
            try:
                pairs = list(job_map(rec))
            except Exception as exc:
                self._error("map", exc, rec)
                continue
            accepted += 1
            slot.extend(pairs)
        if slot:
            self._insert_pending({epoch: slot}, keys_only)
        return accepted

    def _process_switching(self, records: Iterable[dict[str, Any]], ts_field: str) -> int:
        """:meth:`process` while a change of aggregate is pending: each record is mapped by
        the job of its epoch (the old one before the switch epoch, the new one from it). A
        loop of its own, so the per-record path of :meth:`process` pays nothing for it."""
        assert self._before is not None
        first, old_job = self._before[0], self._before[1]
        stages = {}
        for job in (old_job, self.job):
            keys_only = type(job).map_keys is not Job.map_keys
            stages[job is self.job] = (job.map_keys if keys_only else job.map, keys_only)
        pending: dict[bool, dict[int, list[Any]]] = {False: {}, True: {}}
        assign = self.clock.assign
        accepted = n = bad = 0
        for rec in records:
            n += 1
            try:
                epoch = assign(rec[ts_field])
            except (KeyError, TypeError, ValueError):
                bad += 1
                continue
            if epoch is None:
                continue
            new = epoch >= first
            try:
                pairs = list(stages[new][0](rec))
            except Exception as exc:
                self._error("map", exc, rec)
                continue
            accepted += 1
            if pairs:
                pending[new].setdefault(epoch, []).extend(pairs)
        self._count_batch(n, accepted, bad)
        for new, per_epoch in pending.items():
            self._insert_pending(per_epoch, stages[new][1])
        return accepted

    def agg_for(self, epoch: int) -> Aggregator:
        """The aggregator of ``epoch`` (the previous one before a pending change's epoch)."""
        before = self._before
        return before[2] if before is not None and epoch < before[0] else self.agg

    def active_jobs(self) -> list[Job]:
        """The job instances mapping records now (two while a change of aggregate is
        pending): the input prefilter keeps a line any of them may match."""
        return [self.job] if self._before is None else [self._before[1], self.job]

    def switch_job(self, job: Job, first: int) -> None:
        """A runtime change of aggregate: ``job`` (a new instance, with another aggregator
        and map) applies from epoch ``first`` on; epochs before it keep the current job and
        aggregator until they close. The master picks ``first`` ahead of every agent's
        records; data already in open epochs from ``first`` on was mapped for the old
        aggregate and cannot be re-mapped: it is discarded and counted
        (``switch_discarded_keys``), as are closed ones (``epoch_switch_late``)."""
        if self._windows is not None:
            raise ValueError("a window job's aggregator cannot change while it runs")
        new_agg = job.make_aggregator()
        nxt = self.clock.next_epoch
        self.counters["epoch_switch_late"] += closed_before(
            job.spec.name, "the aggregate", first, nxt
        )
        discarded = discard_from(self._trees, self._carried, first)
        if discarded:
            self.counters["switch_discarded_keys"] += discarded
            log.warning(
                "job %s: %d keys aggregated for the old aggregate in epochs >= %d discarded",
                job.spec.name,
                discarded,
                first,
            )
        old = self.spec
        job.feedback = self.job.feedback
        self._before = (first, self.job, self.agg) if nxt is None or nxt < first else None
        self.job, self.spec, self.agg = job, job.spec, new_agg
        if clock_changed(old, job.spec):
            self._reconfigure_clock(old, job.spec)

    def map_function(self) -> tuple[Callable[[dict[str, Any]], Any], bool]:
        """The per-record function :meth:`process` applies and whether it yields keys only
        (``job.map_keys``) rather than pairs (for :meth:`process_mapped`'s producers)."""
        keys_only = type(self.job).map_keys is not Job.map_keys
        return (self.job.map_keys if keys_only else self.job.map), keys_only

    def process_mapped(
        self, items: Iterable[tuple[Any, list[Any] | None, str | None]], *, keys_only: bool
    ) -> int:
        """As :meth:`process`, for records mapped elsewhere (another process, see
        :mod:`agent.runtime.local.parallel`): ``items`` are ``(ts, out, error)`` per record in input
        order,
        ``ts`` the record's timestamp field (None when missing), ``out`` what the function of
        :meth:`map_function` returned (a list), ``error`` a description when it raised (then
        ``out`` is None). Epochs, lateness and accounting are :meth:`process`'s, in the same
        order: a record dropped as late or without a timestamp costs no map error."""
        pending: dict[int, list[Any]] = {}
        assign = self.clock.assign
        accepted = n = bad = 0
        last_epoch: int | None = None
        slot: list[Any] = []
        for ts, out, error in items:
            n += 1
            try:
                epoch = assign(ts)
            except (TypeError, ValueError):
                bad += 1
                continue
            if epoch is None:
                continue
            if error is not None:
                self._error("map", RuntimeError(error), {"ts": ts})
                continue
            accepted += 1
            if out:
                if epoch != last_epoch:
                    last_epoch = epoch
                    slot = pending.setdefault(epoch, [])
                slot.extend(out)
        self._count_batch(n, accepted, bad)
        self._insert_pending(pending, keys_only)
        return accepted

    def _count_batch(self, records: int, accepted: int, bad: int) -> None:
        self.counters["records_in"] += records
        self.counters["records_accepted"] += accepted
        self.counters["bad_records"] += bad

    def _insert_pending(self, pending: dict[int, list[Any]], keys_only: bool) -> None:
        for epoch, items in pending.items():
            if keys_only:
                self._insert(epoch, items, None)
            else:
                self._insert(epoch, *self._columns(items, self.agg_for(epoch)))
        if pending:
            self._enforce_budget()

    def _enforce_budget(self) -> None:
        """Keep the open epochs' resident compressed buffers within the job's budget, if any:
        past it, each tree gets an equal share and spills what exceeds it (cbt's spill store).
        The uncompressed roots are bounded by ``root_capacity`` entries per open epoch."""
        trees, budget = list(self._trees.values()), self.memory_budget_bytes
        if budget is None or sum(t.resident_compressed_bytes() for t in trees) <= budget:
            return
        share = budget // max(1, len(trees))
        for tree in trees:
            tree.set_memory_budget(share)
        self.counters["budget_enforcements"] += 1

    def set_memory_budget(self, budget: int) -> None:
        """A new bound on the open epochs' resident compressed buffers (the agent's memory
        budget moved it; set from the event loop - one attribute store). The record thread
        enforces it at the next batch it inserts: a worker with no input grows nothing."""
        self.memory_budget_bytes = budget

    def memory_bytes(self) -> int:
        """Resident compressed bytes of the open epochs' trees (what the budget bounds). Read
        by the status page from the event loop while the record thread works: the list copy is
        one C-level step under the GIL, so a concurrent epoch open/close cannot break it."""
        return sum(t.resident_compressed_bytes() for t in list(self._trees.values()))

    def close(self) -> None:
        """Drop every open epoch (a stopping job): trees closed, spill files removed."""
        for tree in self._trees.values():
            tree.close()
        self._trees.clear()
        self._carried.clear()
        if self._windows is not None:
            self._windows.reset()

    def _columns(self, pairs: list[Any], agg: Aggregator) -> tuple[list[Any], list[Any] | None]:
        """Keys and values of ``pairs``; values None when they are all int 1 for ``count``
        (the CBT's C fast path). Malformed pairs are counted and dropped."""
        try:
            keys = [k for k, _ in pairs]
            values = [v for _, v in pairs]
        except (TypeError, ValueError):
            keys, values = [], []
            for pair in pairs:
                try:
                    k, v = pair
                except (TypeError, ValueError) as exc:
                    self._error("pair", exc, pair)
                    continue
                keys.append(k)
                values.append(v)
        if (
            agg.name == "count"
            and values.count(1) == len(values)
            and set(map(type, values)) <= {int}
        ):
            return keys, None
        return keys, values

    def _insert(self, epoch: int, keys: list[Any], values: list[Any] | None) -> None:
        tree = self._trees.get(epoch)
        if tree is None:
            tree = self._trees[epoch] = CompressedBufferTree(
                self.agg_for(epoch), **self._tree_options
            )
        start = 0
        while start < len(keys):
            try:
                tree.insert_many(keys[start:], None if values is None else values[start:])
            except TypeError as exc:
                # insert_many inserted exactly the pairs before the offending one
                done = inserted_before_error(tree, keys, values, start)
                self.counters["pairs_out"] += done
                bad = start + done
                if bad >= len(keys):  # not reproducible on a fresh tree: give up on the rest
                    self._error("pair", exc, {"pairs": len(keys) - start})
                    return
                value = 1 if values is None else values[bad]
                self._error("pair", exc, {"key": keys[bad], "value": value})
                start = bad + 1
            else:
                self.counters["pairs_out"] += len(keys) - start
                return

    def _error(self, where: str, exc: Exception, item: Any) -> None:
        self.counters["map_errors"] += 1
        self._errors.append(
            {
                "where": where,
                "error": f"{type(exc).__name__}: {exc}"[:200],
                "item": repr(item)[:200],
            }
        )

    # ---- output ---------------------------------------------------------------------------
    def poll(self, limit: int | None = POLL_LIMIT) -> list[tuple[int, Snapshot]]:
        """``(epoch, snapshot)`` for the epochs the watermark closed, in order (at most
        ``limit`` per call; the rest come with the next calls)."""
        return [self._close(epoch) for epoch in self.clock.closable(limit)]

    def finish(self) -> list[tuple[int, Snapshot]]:
        """End of input: close every epoch up to the last one holding data."""
        if self._trees:
            self.clock.advance_to(self.clock.epoch_end(max(self._trees)))
        return self.poll(None)

    def _close(self, epoch: int) -> tuple[int, Snapshot]:
        self.clock.close(epoch)
        self.closed_records[epoch] = self.clock.take_records(epoch)
        while len(self.closed_records) > CLOSED_RECORDS:  # nobody takes them (e.g. `elf run`)
            del self.closed_records[next(iter(self.closed_records))]
        tree = self._trees.pop(epoch, None)
        carried = self._carried.pop(epoch, None)
        if tree is None:
            pane = carried if carried is not None else Snapshot.empty(self.agg_for(epoch))
            if carried is None:
                self.counters["empty_epochs"] += 1
        else:
            pane = tree.flush()
            tree.close()
            if carried is not None:
                pane = pane.merge(carried)
        out = pane
        if self._windows is not None:
            window = self._windows.push(epoch, pane)
            out = window if window is not None else Snapshot.empty(self.agg)
        self.counters["epochs_emitted"] += 1
        if self._before is not None and epoch + 1 >= self._before[0]:
            self._before = None  # every epoch of the previous aggregate has closed here
        return epoch, out

    def take_closed_records(self) -> dict[int, int]:
        """Closed epoch → its record count, for the epochs closed since the last call."""
        out, self.closed_records = self.closed_records, {}
        return out

    def window_bounds(self, epoch: int) -> tuple[int, int] | None:
        """The epochs the snapshot emitted for ``epoch`` covers (None: it is empty filler)."""
        return self.spec.window_bounds(epoch)

    def replace_job(self, job: Job) -> None:
        """Switch to another job instance between two ``process`` calls (a runtime job change:
        new params, filter or map). The records processed from now on use it; open epochs
        keep what they hold. The aggregator, epochs and execution model must stay the same
        (``ValueError`` otherwise): they define the snapshots the tree merges. New lateness,
        idle-timeout and future limits go to the clock; so does a new epoch length
        (``spec.epoch_schedule``), which takes effect from the epoch the master chose."""
        old, new = self.spec, job.spec
        changed = [name for name in SNAPSHOT_FIELDS if getattr(old, name) != getattr(new, name)]
        if changed:
            raise ValueError(f"cannot change {', '.join(changed)} of a running worker")
        job.feedback = self.job.feedback
        if clock_changed(old, new):
            self._reconfigure_clock(old, new)
        self.job, self.spec = job, new

    def _reconfigure_clock(self, old: JobSpec, new: JobSpec) -> None:
        """New lateness/idle/future limits, or a new epoch length from an open epoch on. Data
        already in an open epoch that the new schedule cuts differently moves to the epoch
        its start falls in (counted: ``epochs_rebucketed``)."""
        changed_from = old.schedule.first_difference(new.schedule)
        # this agent may have closed epochs the new lengths re-cut: they were emitted already
        late = closed_before(new.name, "epoch length", changed_from, self.clock.next_epoch)
        self.counters["epoch_switch_late"] += late
        self.clock.reconfigure(
            schedule=new.schedule,
            allowed_lateness=new.allowed_lateness,
            idle_timeout=new.effective_idle_timeout,
            max_future=new.max_future,
        )
        if changed_from is not None:
            self.counters["epochs_rebucketed"] += rebucket(
                self._trees, self._carried, old.schedule, new.schedule, changed_from
            )

    # ---- control --------------------------------------------------------------------------
    def set_feedback(self, value: Any) -> None:
        """Iterative jobs: ``map`` sees ``value`` as ``job.feedback`` from now on."""
        self.job.feedback = value

    def on_multicast(self, message: dict[str, Any]) -> Any:
        """Apply worker-level control, then hand the message to the job's ``on_multicast``.

        ``{"kind": "feedback", "value": v}`` sets the feedback; ``{"kind": "empty"}`` drops
        the window state; ``{"kind": "batch"}`` (a new batch) drops both and returns None
        (the runtime hands it to the job). Otherwise returns what the job's hook returned
        (maybe an awaitable).
        """
        kind = message.get("kind") if isinstance(message, dict) else None
        if kind == FEEDBACK:
            self.set_feedback(message.get("value"))
        elif kind in (EMPTY, BATCH) and self._windows is not None:
            self._windows.reset()
        if kind == BATCH:
            self.set_feedback(None)
            return None  # the runtime hands "batch" to the job itself
        return self.job.on_multicast(message)

    # ---- introspection --------------------------------------------------------------------
    def errors(self) -> list[dict[str, Any]]:
        """The most recent map/insert errors (bounded sample)."""
        return list(self._errors)

    def stats(self) -> dict[str, Any]:
        clock = self.clock.stats()
        return {
            **self.counters,
            "late_dropped": clock["late_dropped"],
            "late": self.late.stats(),
            "future_dropped": clock["future_dropped"],
            "open_epochs": len(self._trees),
            "memory_bytes": self.memory_bytes(),
            "memory_budget_bytes": self.memory_budget_bytes,
            "watermark": clock["watermark"],
            "next_epoch": clock["next_epoch"],
        }
