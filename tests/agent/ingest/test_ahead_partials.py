"""Both cores in the live agent (agent/ingest/columnar/aggregate.py): a file tail whose parse
helper also aggregates the chunks it parses (per-chunk partials, lateness decided on the record
thread) gives exactly what the single-core tail gives — every epoch's snapshot, the worker's
counters and late counts, the tail's counters, quarantined lines with their line numbers and
offsets, the resume state — over generated inputs with late rows, malformed and blank lines,
columns that cannot be one Arrow type, and epoch boundaries; and when the helper is killed
(kill -9) in the middle. Real helper processes; the reference is the same tail and worker on
one core."""

from __future__ import annotations

import json
import os
import random
import signal
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import agent.jobs.ql_job  # noqa: F401  (registers the "ql" job class)
from agent.ingest.columnar.aggregate import plan_for
from agent.ingest.columnar.pool import ChunkParsePool
from agent.ingest.columnar.reader import ChunkReader
from agent.ingest.formats import make_parser
from agent.ingest.records import Quarantine
from agent.ingest.tail import FileTail
from agent.jobs.job import create_job, parse_spec
from agent.jobs.ql_job import spec_from_query
from agent.runtime.epochs.late import UNREADABLE
from agent.runtime.epochs.worker import Worker

QUERY = "SELECT action, count(*) AS n, sum(units) AS total FROM clicks GROUP BY action"
START = 1_700_000_000.0
MAX_LINE = 1024
SETTINGS = settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


def _job() -> Any:
    spec = spec_from_query("q", "t", QUERY, epoch_seconds=1, allowed_lateness=0.5)
    return create_job(parse_spec(spec))


def run(path: Path, pool: ChunkParsePool | None, read_size: int) -> dict[str, Any]:
    """The tail (with ``pool``: parse-ahead helpers aggregating its chunks) feeding a worker
    as the agent's record thread does; everything a user or operator can see of the run."""
    job = _job()
    worker = Worker(job, wall_clock=lambda: START)
    tail = FileTail(
        path,
        parser=make_parser("json"),
        quarantine=Quarantine(limit=100_000),
        read_size=read_size,
        max_line_bytes=MAX_LINE,
    )
    reader = ChunkReader("json", job.batch_projection(), tail.parser.repairs)  # type: ignore[attr-defined]
    reader.plan = plan_for([job], "ts")
    reader.min_rows = 1
    tail.columnar, tail.parse_pool = reader, pool
    snaps: dict[int, Any] = {}
    aggregated = 0
    for _ in range(100_000):
        batch = tail.poll()
        if not batch and tail.unchanged():  # read to the file's end (not just a long line's)
            break
        aggregated += sum(hasattr(p, "partials_for") for p in batch.parts)
        worker.process(batch, skipped=batch.skipped)
        if late := worker.clock.take_late():
            mark = worker.clock.current_watermark
            worker.late.collect(path.name, late, watermark=mark, records=batch)
        snaps.update(worker.poll())
    snaps.update(worker.finish())
    tail.close()
    results = {e: sorted(map(str, job.result_rows(s.items()))) for e, s in snaps.items()}
    quarantined = [
        (e["line_no"], e["offset"], e["reason"], e.get("message"))
        for e in tail.quarantine.entries()
    ]
    skip = ("columnar_chunks", "row_chunks", "ahead_chunks")
    return {
        "results": results,
        "worker": {k: v for k, v in worker.stats().items() if k != "memory_bytes"},
        "late": {e: dict(c) for e, c in worker.late.by_epoch.items()},
        "late_records": worker.late.total,
        "tail": {k: v for k, v in tail.counters.items() if k not in skip},
        "quarantined": quarantined,
        "state": {k: tail.state()[k] for k in ("offset", "line_no")},
        "aggregated_parts": aggregated,
    }


def same(a: dict[str, Any], b: dict[str, Any]) -> None:
    strip = "aggregated_parts"
    assert {k: v for k, v in a.items() if k != strip} == {k: v for k, v in b.items() if k != strip}


@st.composite
def log_lines(draw: Any) -> list[bytes]:
    """JSON click lines in mostly increasing event time across many 1-s epochs, with jumps
    back (late rows: a whole closed epoch, or rows behind the watermark inside a chunk),
    malformed, blank, over-long and unicode lines, a field that is a string on some lines
    (its chunk cannot be columnar), rows without a usable timestamp."""
    n = draw(st.integers(50, 900))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = random.Random(seed)
    t = START
    out = []
    for _ in range(n):
        t += rng.choice([0.0, 0.004, 0.01, 0.03])
        ts = t
        roll = rng.random()
        if roll < 0.04:
            ts = t - rng.choice([0.3, 0.8, 1.5, 4.0])  # late, or within the lateness
        rec: dict[str, Any] = {
            "ts": round(ts, 3),
            "action": rng.choice(["click", "view", "buy", "é☃"]),
            "units": rng.randrange(5),
        }
        if roll > 0.995:
            rec["units"] = "3"  # a string among ints: that chunk takes the row path
        line = json.dumps(rec, ensure_ascii=rng.random() < 0.5).encode()
        roll = rng.random()
        if roll < 0.02:
            line = line[: rng.randrange(len(line))]  # cut: malformed
        elif roll < 0.03:
            line = b""
        elif roll < 0.035:
            line = line[:-1] + b', "pad": "' + b"x" * MAX_LINE + b'"}'  # too long
        elif roll < 0.04:
            line = b'{"action": "click", "units": 1}'  # no timestamp
        out.append(line)
    return out


@SETTINGS
@given(log_lines(), st.sampled_from([700, 2048, 6000]))
def test_helpers_aggregating_equal_the_single_core_tail(
    tmp_path_factory: Any, pool: ChunkParsePool, lines: list[bytes], read_size: int
) -> None:
    path = tmp_path_factory.mktemp("ahead") / "clicks.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    same(run(path, pool, read_size), run(path, None, read_size))


def _big(path: Path, n: int = 6000) -> None:
    rng = random.Random(7)
    lines = []
    for i in range(n):
        ts = START + i * 0.002 - (1.2 if rng.random() < 0.01 else 0.0)
        rec = {"ts": round(ts, 3), "action": rng.choice(["a", "b", "c"]), "units": i % 7}
        lines.append(json.dumps(rec).encode() if i % 97 else b"{not json")
    path.write_bytes(b"\n".join(lines) + b"\n")


def test_the_helper_aggregates_most_chunks(tmp_path: Path, pool: ChunkParsePool) -> None:
    path = tmp_path / "clicks.jsonl"
    _big(path)
    want = run(path, None, 8192)
    got = run(path, pool, 8192)
    same(got, want)
    assert got["aggregated_parts"] > 10  # partials, not tables, came back
    assert want["late_records"] > 0 and want["tail"]["rejected"] > 0


def test_a_killed_helper_costs_nothing(tmp_path: Path, monkeypatch: Any) -> None:
    """kill -9 of the helper between two polls: its chunks are parsed on the record thread,
    the next backlog starts a new helper; nothing is counted twice or lost."""
    path = tmp_path / "clicks.jsonl"
    _big(path)
    want = run(path, None, 8192)
    helper = ChunkParsePool(1)
    helper.warm()
    polls = 0
    poll = FileTail.poll

    def poll_then_kill(self: FileTail) -> Any:
        nonlocal polls
        polls += 1
        batch = poll(self)
        if polls == 3:
            assert helper._pool is not None
            for pid in list(helper._pool._processes):  # kill -9 the helper mid-file
                os.kill(pid, signal.SIGKILL)
        return batch

    monkeypatch.setattr(FileTail, "poll", poll_then_kill)
    try:
        got = run(path, helper, 8192)
    finally:
        helper.close()
    same(got, want)
    assert helper.restarts >= 1 and got["aggregated_parts"] > 0


def test_rows_that_cannot_be_read_again_are_logged_counted_and_reported(caplog: Any) -> None:
    """A pre-aggregated chunk whose rows are needed (here: no partials for this job) after its
    file was truncated (``RangeRows`` raises ``OSError``): the worker goes on, the rows are
    counted lost, logged at WARNING with job, epoch and origin, and queued for the master's
    late ledger under the input ``(unreadable)`` - what each epoch's ``late`` field shows."""

    from agent.ingest.columnar.aggregate import AggregatedChunk

    def gone() -> Any:
        raise OSError("the file no longer holds the 100 bytes at 0 a parse helper aggregated")

    worker = Worker(_job(), wall_clock=lambda: START)
    part = AggregatedChunk(2, 0, START, START + 0.1, "ts", {}, reparse=gone)
    with caplog.at_level("WARNING"):
        assert worker.process_aggregated(part) == 0
    assert worker.counters["rows_unreadable"] == 2  # rows, not chunks
    epoch = int(START)
    assert worker.late.take_report() == {epoch: {UNREADABLE: 2}}
    assert worker.stats()["late"]["by_input"] == {UNREADABLE: 2}
    said = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert any(f"job q: 2 rows of epochs [{epoch}] lost" in m for m in said)
    assert any(f"2 records of epoch {epoch} from origin local" in m for m in said)


def test_timestamps_of_a_chunk_the_clock_cannot_take_whole_are_read_again(caplog: Any) -> None:
    """A helper sends only a summary of its chunk's timestamps. When the clock cannot take
    the chunk whole (here a row is late), the worker reads the timestamps from the rows parsed
    again; when the file lost them meanwhile, the rows are counted lost and logged, and nothing
    of the chunk counts - and otherwise the late row is refused and the others stand."""
    import pyarrow as pa

    from agent.ingest.columnar.aggregate import AggregatedChunk, job_key

    job = _job()
    rows = pa.table({"ts": [START + 5.2, START + 1.1], "action": ["a", "b"], "units": [1, 2]})
    keys_a, states_a = job.aggregate_batch(rows.slice(0, 1), job.make_aggregator())
    keys_b, states_b = job.aggregate_batch(rows.slice(1, 1), job.make_aggregator())
    first, second = int(START + 1.1), int(START + 5.2)
    partials = {job_key(job): (1.0, [(first, keys_b, states_b, 1), (second, keys_a, states_a, 1)])}

    def gone() -> Any:
        raise OSError("the file no longer holds the 100 bytes at 0 a parse helper aggregated")

    for reparse, accepted in ((gone, 0), (lambda: rows, 1)):
        worker = Worker(_job(), wall_clock=lambda: START)
        worker.clock.assign(START + 4.0)  # the watermark: the row at +1.1 is late, +5.2 not
        part = AggregatedChunk(2, 0, START + 1.1, START + 5.2, "ts", partials, reparse=reparse)
        with caplog.at_level("WARNING"):
            assert worker.process_aggregated(part) == accepted
        assert worker.counters["rows_unreadable"] == (2 if reparse is gone else 0)
        assert worker.clock.stats()["late_dropped"] == (0 if reparse is gone else 1)
        # the lost rows per epoch go to the master's ledger; the late one as late
        lost = {first: {UNREADABLE: 1}, second: {UNREADABLE: 1}}
        late = {first: {"ts": 1}} if reparse is not gone else {}
        worker.late.collect("ts", worker.clock.take_late())
        assert worker.late.take_report() == (lost if reparse is gone else late)


def test_rows_of_a_partly_late_epoch_that_cannot_be_read_again_are_reported() -> None:
    """The timestamps are at hand (``elf run``'s helpers send them) but the rows of an epoch
    the clock accepted only partly are gone: that epoch's accepted rows are reported lost
    (the late one stays late), and the epoch taken whole stands."""
    import numpy as np
    import pyarrow as pa

    from agent.ingest.columnar.aggregate import TimestampColumn

    job = _job()
    stamps = [START + 1.2, START + 2.6, START + 1.1]  # 2.6 - 0.5 passes epoch 1's end: 1.1 late
    rows = pa.table({"ts": stamps, "action": ["a", "b", "a"], "units": [1, 2, 3]})
    first, second = int(START + 1), int(START + 2)
    partials = []
    for e, part in ((first, rows.take([0, 2])), (second, rows.take([1]))):
        keys, states = job.aggregate_batch(part, job.make_aggregator())
        partials.append((e, keys, states, part.num_rows))

    def gone() -> Any:
        raise OSError("the file no longer holds the bytes")

    worker = Worker(_job(), wall_clock=lambda: START)
    assert worker.process_partials(TimestampColumn.of(np.array(stamps)), partials, gone) == 1
    assert worker.clock.take_late() == {first: (1, START + 1.1)}
    assert worker.late.take_report() == {first: {UNREADABLE: 1}}
    assert worker.counters["rows_unreadable"] == 1
    assert worker.counters["records_accepted"] == 1
    snaps = dict(worker.finish())
    assert job.result_rows(snaps[second].items()) == [{"action": "b", "n": 1, "total": 2}]
    assert job.result_rows(snaps[first].items()) == []  # its rows lost, its result says so
