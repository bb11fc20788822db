"""``EpochClock.accept_whole`` (a chunk a parse helper aggregated, taken without a pass over
its rows) and ``accept_one_epoch`` (a table of one epoch) against ``assign_many`` on the same
column: two clocks fed the same batches in lockstep, one taking each batch whole when it is
proven it may (from what a parse helper's own ``AggregationPlan.aggregate`` answers for the
batch: its least and greatest timestamps, rows per epoch and order), must agree on every
counter, the watermark, the epochs they close and the records of each epoch, after every
batch."""

from __future__ import annotations

import functools
import math
from collections import Counter
from typing import Any

import numpy as np
import pyarrow as pa
from hypothesis import event, given, settings
from hypothesis import strategies as st

import agent.jobs.ql_job  # noqa: F401  (registers the "ql" job class)
from agent.ingest.columnar.aggregate import job_key, none_late_within, plan_for
from agent.jobs.job import create_job, parse_spec
from agent.jobs.ql_job import spec_from_query
from agent.runtime.epochs.clock import EpochClock

T0 = 1_000_000.0
QUERY = "SELECT action, count(*) AS n, sum(units) AS total FROM clicks GROUP BY action"

batches = st.lists(
    st.lists(st.floats(-4.0, 12.0, allow_nan=False), min_size=1, max_size=30),
    min_size=1,
    max_size=12,
)


def clocks(seconds: float, lateness: float, future: float | None, start: int | None):
    now = [T0 + 3.0]
    make = lambda: EpochClock(  # noqa: E731
        seconds, lateness, None, lambda: now[0], start_epoch=start, max_future=future
    )
    return make(), make(), now


def rows_of(ts: np.ndarray, seconds: float) -> dict[int, int]:
    return dict(Counter(math.floor(t / seconds) for t in ts.tolist()))


@functools.cache
def helper_job(seconds: float, lateness: float) -> Any:
    spec = spec_from_query("q", "t", QUERY, epoch_seconds=seconds, allowed_lateness=lateness)
    return create_job(parse_spec(spec))


def helper_chunk(ts: np.ndarray, seconds: float, lateness: float) -> Any:
    """What a parse helper answers for rows with these timestamps (its own code)."""
    table = pa.table({"ts": ts, "action": ["a"] * len(ts), "units": [1] * len(ts)})
    got = plan_for([helper_job(seconds, lateness)], "ts").aggregate(table)  # type: ignore[union-attr]
    assert got is not None
    return got


def agree(ref: EpochClock, got: EpochClock) -> None:
    assert got.stats() == ref.stats()
    assert got.max_seen_time == ref.max_seen_time
    closable = ref.closable()
    assert got.closable() == closable
    for epoch in closable:
        ref.close(epoch)
        got.close(epoch)
        assert got.take_records(epoch) == ref.take_records(epoch)


@settings(max_examples=300, deadline=None)
@given(
    batches,
    st.sampled_from([0.5, 1.0, 2.0]),
    st.sampled_from([0.0, 0.5, 3.0]),
    st.sampled_from([None, 4.0]),
    st.sampled_from([None, math.floor(T0) - 2]),
    st.data(),
)
def test_accept_whole_changes_what_assign_many_changes(
    steps, seconds, lateness, future, start, data
) -> None:
    if start is not None:
        start = math.floor(start / seconds)
    ref, got, now = clocks(seconds, lateness, future, start)
    taken = 0
    for i, offsets in enumerate(steps):
        ts = T0 + i + np.asarray(offsets, dtype=np.float64)
        if data.draw(st.booleans(), "in time order"):
            ts = np.sort(ts)
        now[0] += data.draw(st.sampled_from([0.0, 1.0]))
        ref_epochs, ref_ok = ref.assign_many(ts)
        if data.draw(st.booleans(), "one epoch"):  # what a worker's own table takes
            epoch = got.accept_one_epoch(ts)
            took = epoch is not None
            if took:
                assert ref_ok.all() and (ref_epochs == epoch).all()
        else:  # what a parse helper's partials take, with what it found of their order
            part = helper_chunk(ts, seconds, lateness)
            ordered = part.rows_in_order(helper_job(seconds, lateness))
            assert ordered == none_late_within(ts, seconds, lateness)
            assert (part.low, part.high) == (float(ts.min()), float(ts.max()))
            key = job_key(helper_job(seconds, lateness))
            rows = {e: n for e, _, _, n in part.partials[key][1]}
            assert rows == rows_of(ts, seconds)
            took = got.accept_whole(part.low, part.high, rows, ordered)
            if took:
                assert ref_ok.all()
        if took:
            taken += 1
        else:
            got.assign_many(ts)
        agree(ref, got)
    event(f"batches taken whole: {min(taken, 3)}+")  # both paths are exercised


def test_batches_in_order_are_taken_whole_and_a_late_one_is_not() -> None:
    ref, got, _ = clocks(1.0, 1.0, None, None)
    for i in range(5):
        ts = T0 + i + np.linspace(0.0, 0.9, 50)
        ref.assign_many(ts)
        assert got.accept_whole(float(ts.min()), float(ts.max()), rows_of(ts, 1.0))
        agree(ref, got)
    late = np.array([T0 + 1.5, T0 + 5.0])  # epoch T0 + 1 closed long ago
    ref.assign_many(late)
    assert not got.accept_whole(float(late.min()), float(late.max()), rows_of(late, 1.0))
    got.assign_many(late)
    agree(ref, got)
    assert got.stats()["late_dropped"] == 1
    # rows in time order over three epochs, lateness 1 s: no row is late against its own
    # running maximum, so the column is taken whole with ``in_order`` and not without it
    ts = T0 + 6 + np.linspace(0.0, 2.9, 30)
    assert none_late_within(ts, 1.0, 1.0)
    assert not got.accept_whole(float(ts.min()), float(ts.max()), rows_of(ts, 1.0))
    ref.assign_many(ts)
    assert got.accept_whole(float(ts.min()), float(ts.max()), rows_of(ts, 1.0), True)
    agree(ref, got)
    assert not none_late_within(ts[::-1], 1.0, 1.0)  # the newest first: the oldest are late
    ts = T0 + 20 + np.array([0.1, 0.2])
    # rows that do not match the column's least and greatest epochs: not taken
    assert not got.accept_whole(float(ts.min()), float(ts.max()), {math.floor(T0) + 19: 2})
