"""Late records made visible: the clock's per-epoch late counts (row and vectorized paths)
against a reference of the watermark rule, the worker's per-input/per-epoch counts, the
dead-letter samples and their bounds, the budgeted WARNING lines, the master's ledger and the
late-report body check."""

from __future__ import annotations

import json
import logging
import math
from collections import Counter
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import agent.jobs.ql_job  # noqa: F401  (registers the "ql" job class)
from agent.ingest.base import ColumnarBatch
from agent.jobs.job import create_job, parse_spec
from agent.jobs.ql_job import spec_from_query
from agent.runtime.epochs import late as late_mod
from agent.runtime.epochs.clock import EpochClock
from agent.runtime.epochs.late import LateRecords, late_dead_letter
from agent.runtime.epochs.worker import Worker
from agent.runtime.job.late_reports import LateReporter
from agent.runtime.results.late_ledger import LateLedger, parse_report


def reference(
    batches: list[list[float]], e: float, lateness: float
) -> tuple[int, Counter, list[bool]]:
    """The watermark rule written out: watermark = max event time - lateness; a record is late
    when its epoch ends at or before the watermark or was closed; after each batch every epoch
    ending at or before the watermark closes. Returns (accepted, late per epoch, whether each
    record in offer order is late)."""
    max_ts, mark, nxt, closed = -math.inf, -math.inf, None, False
    accepted, late, flags = 0, Counter(), []
    for batch in batches:
        for ts in batch:
            ep = math.floor(ts / e)
            if closed and ep < nxt:
                late[ep] += 1
                flags.append(True)
                continue
            if ts > max_ts:
                max_ts, mark = ts, max(mark, ts - lateness)
            if (ep + 1) * e <= mark:
                late[ep] += 1
                flags.append(True)
                continue
            accepted += 1
            flags.append(False)
            if nxt is None or (not closed and ep < nxt):
                nxt = ep
        while nxt is not None and (nxt + 1) * e <= mark:
            nxt, closed = nxt + 1, True
    return accepted, late, flags


def run_clock(batches: list[list[float]], e: float, lateness: float, vectorized: bool):
    clock = EpochClock(e, lateness, None, lambda: 0.0)
    accepted, late, firsts, refused = 0, Counter(), [], []
    for batch in batches:
        if vectorized:
            _, ok = clock.assign_many(np.asarray(batch, dtype=np.float64))
            refused += (~ok).tolist()
        else:
            refused += [clock.assign(ts) is None for ts in batch]
        accepted = refused.count(False)
        got = clock.take_late()
        for ep, (n, first) in got.items():
            late[ep] += n
            # the first late record of that epoch in this batch
            firsts.append((ep, first, batch))
        for ep in clock.closable():
            clock.close(ep)
    clock.refused = refused  # type: ignore[attr-defined]
    return clock, accepted, late, firsts


timestamps = st.lists(
    st.lists(st.floats(0, 200, allow_nan=False).map(lambda x: round(x, 2)), max_size=40),
    min_size=1,
    max_size=6,
)


@settings(max_examples=150, deadline=None)
@given(
    batches=timestamps,
    e=st.sampled_from([1.0, 2.5, 10.0]),
    lateness=st.sampled_from([0.0, 1.0, 7.5, 30.0]),
    vectorized=st.booleans(),
)
def test_late_records_follow_the_watermark_rule(
    batches: list[list[float]], e: float, lateness: float, vectorized: bool
) -> None:
    clock, accepted, late, firsts = run_clock(batches, e, lateness, vectorized)
    want_accepted, want_late, want_flags = reference(batches, e, lateness)
    offered = sum(len(b) for b in batches)
    assert accepted + sum(late.values()) == offered
    assert accepted == want_accepted
    assert clock.refused == want_flags  # the very records the rule calls late, no others
    assert late == want_late
    assert clock.stats()["late_dropped"] == sum(want_late.values())
    for ep, first, batch in firsts:
        assert first in batch and math.floor(first / e) == ep


def test_row_and_columnar_paths_agree() -> None:
    rng = np.random.default_rng(3)
    ts = np.round(np.cumsum(rng.uniform(0, 1, 500)) - rng.uniform(0, 20, 500), 3).clip(0)
    batches = [ts[i : i + 50].tolist() for i in range(0, 500, 50)]
    _, a1, l1, _ = run_clock(batches, 2.0, 3.0, False)
    _, a2, l2, _ = run_clock(batches, 2.0, 3.0, True)
    assert (a1, l1) == (a2, l2) and sum(l1.values()) > 0


def test_records_before_the_start_epoch_are_not_late_for_a_result() -> None:
    clock = EpochClock(10.0, 0.0, None, lambda: 0.0, start_epoch=5)
    assert clock.assign(12.0) is None
    clock.assign_many(np.array([1.0, 2.0, 55.0]))
    assert clock.take_late() == {}
    st_ = clock.stats()
    assert st_["late_dropped"] == 3 and st_["before_start"] == 3


def test_pending_late_epochs_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("agent.runtime.epochs.clock.LATE_EPOCHS", 4)
    clock = EpochClock(1.0, 0.0, None, lambda: 0.0)
    clock.assign(100.0)
    for t in range(10):
        clock.assign(float(t))
    clock.assign_many(np.arange(10, 20, dtype=np.float64))
    assert len(clock.take_late()) == 4
    assert clock.stats()["late_dropped"] == 20  # every one still counted


# ---- the worker's late records: per input and epoch, sampled, logged ------------------------


def ql_worker(tmp_path: Path, lateness: float = 0.0) -> Worker:
    spec = spec_from_query("q", "t", "SELECT s, count(*) FROM x GROUP BY s", epoch_seconds=10)
    spec["allowed_lateness"] = lateness
    job = create_job(parse_spec(spec))
    late = LateRecords("q", "ab12", dead_letter=late_dead_letter(tmp_path, "q"))
    return Worker(job, wall_clock=lambda: 10_000.0, late=late)  # no record from the future


def feed(worker: Worker, name: str, batch: Any) -> None:
    """What the pipeline does with one batch (agent/runtime/job/pipeline.py); a table comes
    as a columnar batch."""
    if isinstance(batch, pa.Table):
        table, batch = batch, ColumnarBatch()
        batch.add(table)
    worker.process(batch)
    if late := worker.clock.take_late():
        worker.late.collect(
            name, late, watermark=worker.clock.current_watermark, records=batch, ts_field="ts"
        )


def dead_letters(tmp_path: Path) -> list[dict[str, Any]]:
    path = tmp_path / "deadletter" / "late" / "q.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_worker_counts_late_records_per_input_and_epoch(tmp_path: Path) -> None:
    w = ql_worker(tmp_path, lateness=5.0)
    feed(w, "web", [{"ts": t, "s": "a"} for t in (1.0, 12.0, 31.0)])  # watermark 26
    w.poll()
    # rows: epoch 0 and 1 are closed now; 25.0 is within lateness of 31 but epoch 2 is open
    rows = [{"ts": t, "s": "b"} for t in (2.0, 3.0, 15.0, 25.0, 8.0)]
    feed(w, "web", rows)
    table = pa.table({"ts": pa.array([4.0, 19.0, 40.0, 11.0]), "s": pa.array(["c"] * 4)})
    feed(w, "api", table)  # columnar: watermark 35 after 40.0, so 11.0 is late too
    st_ = w.stats()
    late = st_["late"]
    assert late["records"] == 7 == st_["late_dropped"]
    assert late["by_input"] == {"web": 4, "api": 3}
    report = w.late.take_report()
    assert report == {0: {"web": 3, "api": 1}, 1: {"web": 1, "api": 2}}
    assert w.late.take_report() == {}
    # every (epoch, input) with late records left one sample, with the record itself
    samples = dead_letters(tmp_path)
    got = {(s["epoch"], s["input"]) for s in samples}
    assert got == {(0, "web"), (1, "web"), (0, "api"), (1, "api")}
    for s in samples:
        assert s["reason"] == "late" and s["job"] == "q" and s["origin"] == "ab12"
        assert math.floor(s["event_time"] / 10) == s["epoch"]
        assert json.loads(s["line"])["ts"] == s["event_time"]
        assert s["watermark"] == (26.0 if s["input"] == "web" else 35.0)


def test_dead_letter_samples_are_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    w = ql_worker(tmp_path)
    feed(w, "web", [{"ts": 1000.0, "s": "a"}])
    w.poll()
    for i in range(20):  # 20 batches late for epoch 0: SAMPLES_PER_EPOCH samples, all counted
        feed(w, "web", [{"ts": 1.0 + i / 100, "s": "x"}] * 3)
    assert len(dead_letters(tmp_path)) == late_mod.SAMPLES_PER_EPOCH
    assert w.late.total == 60
    # the file's hourly bound caps the samples of many epochs
    monkeypatch.setattr(w.late.dead_letter, "per_reason_per_hour", 10)
    for i in range(50):
        feed(w, "web", [{"ts": 10.0 * i + 5, "s": "x"}])
    assert len(dead_letters(tmp_path)) == 10
    assert w.late.dead_letter.counters["suppressed"] > 0
    assert w.late.total == 110


def test_warnings_name_job_epoch_origin_and_count_within_a_budget(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    w = ql_worker(tmp_path)
    feed(w, "web", [{"ts": 1000.0, "s": "a"}])
    w.poll()
    with caplog.at_level(logging.WARNING, logger="agent.runtime.epochs.late"):
        feed(w, "web", [{"ts": 31.0, "s": "x"}] * 4)
        for _ in range(100):
            feed(w, "web", [{"ts": 1.0, "s": "x"}])
    lines = [r.getMessage() for r in caplog.records]
    assert "job q: 4 records arrived too late for epoch 3 from origin ab12 (input web" in lines[0]
    assert 1 < len(lines) <= 10  # a budget per job, never one line per record


# ---- the master's ledger and the report body -------------------------------------------------


def test_ledger_sums_reports_per_epoch_origin_and_input() -> None:
    ledger = LateLedger(max_epochs=3)
    assert ledger.of(5) == {"records": 0, "origins": {}, "inputs": {}}
    ledger.add("a1", {5: {"web": 2}, 6: {"web": 1, "api": 1}})
    ledger.add("b2", {5: {"web": 3}})
    assert ledger.of(5) == {"records": 5, "origins": {"a1": 2, "b2": 3}, "inputs": {"web": 5}}
    assert ledger.records(6) == 2
    ledger.add("a1", {7: {"web": 1}, 8: {"web": 1}})  # four epochs: 5 is forgotten
    assert ledger.of(5) is None and ledger.records(4) is None
    assert ledger.add("a1", {5: {"web": 9}}) == {5: 9}  # counted in the total only
    assert ledger.of(5) is None  # (its count stays unknown; the job still hears of them)
    assert ledger.stats()["records"] == 18 and ledger.stats()["forgotten_below"] == 5
    assert ledger.stats()["by_origin"] == {"a1": 15, "b2": 3}


def test_a_windows_late_field_sums_its_panes() -> None:
    """A sliding window's result covers its panes' epochs: its late field is theirs, summed
    (none of them is in the window's rows); unknown once one of them is forgotten."""
    ledger = LateLedger(max_epochs=4)
    ledger.add("a1", {5: {"web": 2}, 7: {"web": 1, "api": 1}})
    ledger.add("b2", {7: {"web": 3}})
    assert ledger.of(5, 7) == {
        "records": 7, "origins": {"a1": 4, "b2": 3}, "inputs": {"web": 6, "api": 1}
    }  # fmt: skip
    assert ledger.records(6, 6) == 0 and ledger.records(6, 8) == 5 and ledger.records(8, 9) == 0
    assert ledger.of(6, 10**9)["records"] == 5  # type: ignore[index]  (a long span: by epoch)
    ledger.add("a1", {e: {"web": 1} for e in (8, 9, 10)})  # five epochs: 5 is forgotten
    assert ledger.of(4, 7) is None and ledger.records(5, 6) is None


def test_a_master_that_took_over_says_the_counts_before_are_unknown() -> None:
    """The late reports before a takeover went to the previous master: the epochs before
    the takeover's answer null (unknown), never a made-up 0; later ones count as before."""
    ledger = LateLedger()
    ledger.add("a1", {5: {"web": 2}, 9: {"web": 1}})
    ledger.unknown_before(8)
    assert ledger.of(5) is None and ledger.of(7) is None and ledger.of(6, 9) is None
    assert ledger.of(8) == {"records": 0, "origins": {}, "inputs": {}}
    assert ledger.records(9) == 1
    assert ledger.add("b2", {7: {"web": 4}, 8: {"web": 1}}) == {7: 4, 8: 1}
    assert ledger.records(7) is None and ledger.records(8) == 1
    ledger.unknown_before(6)  # never lowers the floor
    assert ledger.of(7) is None and ledger.stats()["forgotten_below"] == 7


@pytest.mark.parametrize(
    "body",
    [
        {"a": 1},
        [[1.5, {}]],
        [[1, {"web": -1}]],
        [[1, {"web": 1.0}]],
        [[1, {"x" * 200: 1}]],
        [[1, [1]]],
        [[e, {}] for e in range(5000)],
    ],
)
def test_malformed_reports_are_refused(body: Any) -> None:
    with pytest.raises(ValueError):
        parse_report(body)


def test_a_report_reads_back() -> None:
    assert parse_report([[3, {"web": 2}], [3, {"web": 1, "api": 4}]]) == {3: {"web": 3, "api": 4}}


# ---- the origin's reports to the master -------------------------------------------------------


class ReportHost:
    """The parts of a job runtime the reporter uses, with a master that fails first."""

    def __init__(self) -> None:
        self.name, self.tree_list = "q", [7]
        self.counters: Counter = Counter()
        self.posted: list[dict[str, Any]] = []
        self.tasks_run: list[Any] = []
        self.network = SimpleNamespace(
            node_id=0xAB, data_url="http://me", client=SimpleNamespace(post_json=self.post)
        )
        self.tasks = SimpleNamespace(spawn=lambda coro, what: self.tasks_run.append(coro))
        self.fail = 1

    def count(self, what: str, n: int = 1) -> None:
        self.counters[what] += n

    async def post(self, url: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
        if self.fail:
            self.fail -= 1
            raise OSError("refused")
        self.posted.append(body)
        return {"ok": True}


async def test_reports_reach_the_master_once_after_a_failure() -> None:
    host = ReportHost()
    local: list[Any] = []
    forgot: list[int] = []

    async def master_url(tid: int) -> str:
        return "http://master"

    rep = LateReporter(host, master_url=master_url,  # type: ignore[arg-type]
                       forget_master_url=lambda tid, exc: forgot.append(tid),
                       local=lambda origin, epochs: local.append((origin, epochs)))  # fmt: skip
    rep.add({5: {"web": 2}})
    rep.flush(now=100.0)
    rep.flush(now=100.1)  # one in flight: nothing more spawned
    assert len(host.tasks_run) == 1
    rep.add({5: {"web": 1}, 6: {"api": 4}})  # while the first is in flight
    await host.tasks_run.pop()  # the master refused: the counts are kept
    assert host.counters["late_report_retries"] == 1 and forgot == [7]
    rep.flush(now=100.5)  # within a second of the last attempt: not yet
    assert not host.tasks_run
    rep.flush(now=101.5)
    await host.tasks_run.pop()
    assert host.posted == [
        {"job": "q", "origin": "ab", "epochs": [[5, {"web": 3}], [6, {"api": 4}]]}
    ]
    rep.flush(now=103.0)  # nothing pending: nothing sent twice
    assert not host.tasks_run and not local


async def test_a_master_here_takes_the_report_locally() -> None:
    host = ReportHost()
    local: list[Any] = []

    async def master_url(tid: int) -> str:
        return "http://me"

    rep = LateReporter(host, master_url=master_url,  # type: ignore[arg-type]
                       forget_master_url=lambda tid, exc: None,
                       local=lambda o, epochs: not local.append((o, dict(epochs))))  # fmt: skip
    rep.add({3: {"web": 1}})
    rep.flush(now=10.0)
    await host.tasks_run.pop()
    assert local == [("ab", {3: Counter({"web": 1})})] and not host.posted


def test_pending_reports_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("agent.runtime.job.late_reports.MAX_EPOCHS", 3)
    host = ReportHost()
    rep = LateReporter(host, master_url=None, forget_master_url=None, local=None)  # type: ignore[arg-type]
    rep.add({e: {"web": e} for e in range(1, 6)})  # epochs 1 and 2 dropped, counted
    assert host.counters["late_report_dropped"] == 3


async def test_a_report_this_agent_can_no_longer_take_is_kept() -> None:
    host = ReportHost()
    answers = [False, True]
    taken: list[Any] = []

    async def master_url(tid: int) -> str:
        return "http://me"

    def local(origin: str, epochs: Any) -> bool:
        taken.append(dict(epochs))
        return answers.pop(0)

    rep = LateReporter(host, master_url=master_url,  # type: ignore[arg-type]
                       forget_master_url=lambda tid, exc: None, local=local)  # fmt: skip
    rep.add({3: {"web": 2}})
    rep.flush(now=10.0)
    await host.tasks_run.pop()  # stopped being the master: kept
    assert host.counters["late_report_retries"] == 1
    rep.flush(now=11.5)
    await host.tasks_run.pop()
    assert taken == [{3: Counter({"web": 2})}] * 2
