"""The worker role: per-epoch results equal a Counter over the same records, in the three
execution models, with late records, idle epochs, job errors and tree splitting."""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.jobs.job import Job, register_job
from agent.jobs.spec import JobSpec
from agent.runtime.epochs.worker import Worker
from cbt import EpochWindows, Snapshot, get_aggregator


class FakeClock:
    def __init__(self, t: float = 0.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


@register_job("test-keys")
class Keys(Job):
    """One pair per record: (record["k"], record.get("v", 1)); skips records with skip=True;
    iterative runs drop the keys listed in the feedback."""

    def map(self, record: dict[str, Any]) -> list[tuple[Any, Any]]:
        if record.get("boom"):
            raise RuntimeError("boom")
        if record.get("skip") or (self.feedback and record["k"] in self.feedback):
            return []
        return [(record["k"], record.get("v", 1))]


def make(wall: FakeClock | None = None, **spec: Any) -> Worker:
    data = {"name": "t", "creator": "me", "job_class": "test-keys", **spec}
    return Worker(Keys(JobSpec.from_dict(data)), wall_clock=wall or FakeClock(0.0))


def records(n: int, seed: int, *, span: float = 50.0, disorder: float = 0.0) -> list[dict]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        base = span * i / n
        ts = max(0.0, base - rng.uniform(0, disorder))
        out.append({"ts": ts, "k": rng.choice("abcdefghij"), "i": i})
    return out


def per_epoch(recs: list[dict], e: float) -> dict[int, Counter]:
    out: dict[int, Counter] = {}
    for r in recs:
        out.setdefault(int(r["ts"] // e), Counter())[r["k"]] += 1
    return out


def run_all(worker: Worker, recs: list[dict], batch: int = 37) -> list[tuple[int, Snapshot]]:
    out = []
    for i in range(0, len(recs), batch):
        worker.process(recs[i : i + batch])
        out.extend(worker.poll())
    out.extend(worker.finish())
    return out


def test_batch_epochs_equal_counter_per_epoch() -> None:
    recs = records(5000, 1, disorder=3.0)
    worker = make(epoch_seconds=2.0, allowed_lateness=3.0)
    out = run_all(worker, recs)
    epochs = [e for e, _ in out]
    assert epochs == list(range(epochs[0], epochs[-1] + 1))
    want = per_epoch(recs, 2.0)
    assert {e: Counter(s.to_dict()) for e, s in out if len(s)} == want
    stats = worker.stats()
    assert stats["records_in"] == stats["records_accepted"] == 5000
    assert stats["late_dropped"] == 0 and stats["pairs_out"] == 5000
    assert stats["epochs_emitted"] == len(out) and stats["open_epochs"] == 0


def test_late_records_are_dropped_counted_and_absent_from_results() -> None:
    worker = make(epoch_seconds=10.0, allowed_lateness=5.0)
    worker.process([{"ts": 1, "k": "a"}, {"ts": 26, "k": "b"}])
    assert [e for e, _ in worker.poll()] == [0, 1]  # watermark 21
    worker.process([{"ts": 19, "k": "late"}, {"ts": 22, "k": "c"}, {"ts": 21.5, "k": "c"}])
    out = worker.finish()
    assert [(e, s.to_dict()) for e, s in out] == [(2, {"b": 1, "c": 2})]
    assert worker.stats()["late_dropped"] == 1


def test_epochs_without_records_yield_empty_snapshots() -> None:
    worker = make(epoch_seconds=1.0)
    worker.process([{"ts": 0.5, "k": "a"}, {"ts": 5.5, "k": "b"}])
    out = worker.poll()
    assert [(e, len(s)) for e, s in out] == [(0, 1), (1, 0), (2, 0), (3, 0), (4, 0)]
    assert all(s.agg.name == "count" for _, s in out)
    assert worker.stats()["empty_epochs"] == 4


def test_idle_worker_keeps_closing_epochs_by_wall_clock() -> None:
    wall = FakeClock(100.0)
    worker = make(wall, epoch_seconds=1.0, idle_timeout=2)
    worker.process([{"ts": 100.2, "k": "a"}])
    assert worker.poll() == []
    wall.t = 101.5
    assert worker.poll() == []  # not idle yet, watermark 100.2
    wall.t = 104.0
    out = worker.poll()
    assert [(e, s.to_dict()) for e, s in out] == [(100, {"a": 1}), (101, {}), (102, {}), (103, {})]


def test_bad_records_map_errors_and_rejected_pairs_cost_only_themselves() -> None:
    worker = make(epoch_seconds=10.0)
    recs = [
        {"ts": 1, "k": "a"},
        {"k": "no-ts"},
        {"ts": "x", "k": "bad-ts"},
        {"ts": 2, "k": "b", "boom": True},
        {"ts": 3, "k": 1.5},  # float keys are rejected by the CBT
        {"ts": 4, "k": "c"},
        {"ts": 5, "k": ["unhashable"]},
        {"ts": 6, "k": "a"},
        {"ts": 7, "k": "s", "skip": True},
    ]
    assert worker.process(recs) == 6
    out = worker.finish()
    assert [(e, s.to_dict()) for e, s in out] == [(0, {"a": 2, "c": 1})]
    stats = worker.stats()
    assert stats["bad_records"] == 2 and stats["map_errors"] == 3 and stats["pairs_out"] == 3
    assert [e["where"] for e in worker.errors()] == ["map", "pair", "pair"]
    assert "RuntimeError: boom" in worker.errors()[0]["error"]


@pytest.mark.parametrize(("size", "slide"), [(3, 1), (4, 2), (3, 3)])
@pytest.mark.parametrize("aggregator", ["count", "sum", "max"])
def test_window_mode_equals_counter_over_the_window(size: int, slide: int, aggregator: str) -> None:
    recs = records(3000, 2, span=30.0, disorder=1.5)
    for r in recs:
        r["v"] = r["i"] % 7 + 0.5 if aggregator != "count" else 1
    worker = make(
        epoch_seconds=1.0,
        allowed_lateness=2.0,
        mode="window",
        window_size=size,
        window_slide=slide,
        aggregator=aggregator,
    )
    out = run_all(worker, recs)
    epochs = [e for e, _ in out]
    assert epochs == list(range(0, 30))
    for epoch, snap in out:
        bounds = worker.window_bounds(epoch)
        if (epoch + 1) % slide:
            assert bounds is None and len(snap) == 0
            continue
        assert bounds == (epoch - size + 1, epoch)
        inside = [r for r in recs if bounds[0] <= r["ts"] // 1 <= bounds[1]]
        want: dict[str, float] = {}
        for r in inside:
            if aggregator == "max":
                want[r["k"]] = max(want.get(r["k"], float("-inf")), r["v"])
            else:
                want[r["k"]] = want.get(r["k"], 0) + r["v"]
        got = snap.to_dict()
        assert got.keys() == want.keys()
        for k in want:
            assert got[k] == pytest.approx(want[k])


def test_window_empty_control_drops_the_window_state() -> None:
    worker = make(epoch_seconds=1.0, mode="window", window_size=3)
    worker.process([{"ts": 0.5, "k": "a"}, {"ts": 1.5, "k": "a"}])
    assert [s.to_dict() for _, s in worker.poll()] == [{"a": 1}]
    worker.on_multicast({"kind": "empty"})
    worker.process([{"ts": 2.5, "k": "b"}])
    out = worker.finish()
    # epoch 0's pane is gone; epoch 1 was still open, so it counts in the new windows
    assert [(e, s.to_dict()) for e, s in out] == [(1, {"a": 1}), (2, {"a": 1, "b": 1})]


def test_iterative_map_sees_the_last_feedback() -> None:
    seen = []

    class Spy(Keys):
        def on_multicast(self, message: dict[str, Any]) -> None:
            seen.append(message)

    spec = JobSpec.from_dict(
        {"name": "t", "creator": "me", "job_class": "test-keys", "mode": "iterative"}
    )
    worker = Worker(Spy(spec), wall_clock=FakeClock(0))
    worker.process([{"ts": 0.1, "k": "a"}, {"ts": 0.2, "k": "b"}, {"ts": 0.3, "k": "a"}])
    worker.process([{"ts": 1.1, "k": "c"}])
    first = worker.poll()
    assert [(e, s.to_dict()) for e, s in first] == [(0, {"a": 2, "b": 1})]
    # the master feeds back epoch 0's top key; later records are mapped with it
    message = {"kind": "feedback", "epoch": 0, "value": [first[0][1].top(1)[0][0]]}
    worker.on_multicast(message)
    assert seen == [message] and worker.job.feedback == ["a"]
    worker.process([{"ts": 1.2, "k": "a"}, {"ts": 1.3, "k": "b"}])
    assert [(e, s.to_dict()) for e, s in worker.finish()] == [(1, {"b": 1, "c": 1})]


def test_records_far_in_the_future_are_dropped() -> None:
    worker = make(FakeClock(1000.0), epoch_seconds=1.0, max_future=60)
    worker.process([{"ts": 1000.5, "k": "a"}, {"ts": 5e9, "k": "bogus"}])
    assert worker.stats()["future_dropped"] == 1
    assert [(e, s.to_dict()) for e, s in worker.finish()] == [(1000, {"a": 1})]


def test_poll_is_bounded_and_catches_up() -> None:
    worker = make(FakeClock(3000.0), epoch_seconds=1.0)
    worker.process([{"ts": 0.5, "k": "a"}, {"ts": 3000.5, "k": "b"}])
    first = worker.poll()
    assert len(first) == 1024 and first[0] == (0, first[0][1]) and first[0][1].to_dict() == {"a": 1}
    rest = worker.poll(None)
    assert [e for e, _ in first + rest] == list(range(3000))


def test_start_epoch_aligns_every_worker() -> None:
    worker = make(epoch_seconds=1.0, start_epoch=3)
    worker.process([{"ts": 2.5, "k": "early"}, {"ts": 5.5, "k": "a"}])
    assert [(e, s.to_dict()) for e, s in worker.poll()] == [(3, {}), (4, {})]
    assert worker.stats()["late_dropped"] == 1


def test_other_aggregators_merge_with_params() -> None:
    worker = make(epoch_seconds=10.0, aggregator="topk", aggregator_params={"k": 2})
    worker.process([{"ts": 1, "k": "x", "v": ["a", 5]}, {"ts": 2, "k": "x", "v": ["b", 9]}])
    worker.process([{"ts": 3, "k": "x", "v": ["c", 1]}])
    ((_, snap),) = worker.finish()
    assert snap.to_dict() == {"x": [("b", 9), ("a", 5)]}
    other = Snapshot.empty(get_aggregator("topk", {"k": 2}))
    assert snap.merge(other) == snap  # same aggregator params as every other agent's


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    n=st.integers(0, 400),
    epoch_seconds=st.sampled_from([0.5, 1.0, 3.0]),
    lateness=st.sampled_from([0.0, 1.0, 4.0]),
    disorder=st.sampled_from([0.0, 1.0, 6.0]),
    batch=st.integers(1, 50),
)
def test_property_results_plus_late_equal_input(
    seed: int, n: int, epoch_seconds: float, lateness: float, disorder: float, batch: int
) -> None:
    recs = records(n, seed, span=20.0, disorder=disorder)
    worker = make(epoch_seconds=epoch_seconds, allowed_lateness=lateness)
    out = run_all(worker, recs, batch)
    epochs = [e for e, _ in out]
    assert epochs == sorted(set(epochs))
    if epochs:
        assert epochs == list(range(epochs[0], epochs[-1] + 1))
    total = Counter()
    for _, snap in out:
        total.update(snap.to_dict())
    late = worker.stats()["late_dropped"]
    assert sum(total.values()) + late == n
    if disorder <= lateness:
        assert late == 0
        assert {e: Counter(s.to_dict()) for e, s in out if len(s)} == per_epoch(recs, epoch_seconds)


def test_timestamp_field_per_worker_and_per_call() -> None:
    worker = make(epoch_seconds=10.0, params={"ts_field": "time"})
    worker.process([{"time": 1, "k": "a"}, {"ts": 2, "k": "no-time"}])
    worker.process([{"when": 3, "k": "b"}], ts_field="when")
    assert [(e, s.to_dict()) for e, s in worker.finish()] == [(0, {"a": 1, "b": 1})]
    assert worker.stats()["bad_records"] == 1


def test_epoch_windows_rejects_gaps_and_non_invertible() -> None:
    agg = get_aggregator("max")
    with pytest.raises(ValueError, match="not invertible"):
        EpochWindows(2, 1, agg, invertible=True)
    w = EpochWindows(2, 1, agg)
    w.push(0, Snapshot.empty(agg))
    with pytest.raises(ValueError, match="consecutive"):
        w.push(2, Snapshot.empty(agg))


@register_job("test-keys-only")
class KeysOnly(Job):
    def map_keys(self, record: dict[str, Any]) -> list[Any]:
        return record["keys"]


def test_map_keys_fast_path() -> None:
    spec = JobSpec.from_dict({"name": "t", "creator": "me", "job_class": "test-keys-only"})
    job = KeysOnly(spec)
    assert job.map({"keys": ["a", "b"]}) == [("a", 1), ("b", 1)]
    worker = Worker(job, wall_clock=FakeClock(0))
    worker.process([{"ts": 1, "keys": ["a", "b", "a"]}, {"ts": 2, "keys": ["c", 2.5, "a"]}])
    worker.process([{"ts": 3, "keys": 7}])  # not iterable: a map error
    out = [(e, s.to_dict()) for e, s in worker.finish()]
    assert out == [(1, {"a": 2, "b": 1}), (2, {"a": 1, "c": 1})]
    stats = worker.stats()
    assert stats["map_errors"] == 2 and stats["pairs_out"] == 5


def test_replace_job_applies_to_later_records_only() -> None:
    worker = make(epoch_seconds=10.0, params={"v": 1})
    worker.process([{"ts": 1, "k": "a"}])
    worker.on_multicast({"kind": "feedback", "value": ["zzz"]})

    class Upper(Keys):
        def map(self, record: dict[str, Any]) -> list[tuple[Any, Any]]:
            return [(k.upper(), v) for k, v in super().map(record)]

    base = worker.spec.to_dict()
    worker.replace_job(Upper(worker.spec.with_changes(params={"v": 2})))
    assert worker.job.feedback == ["zzz"] and worker.spec.params == {"v": 2}
    worker.process([{"ts": 2, "k": "a"}])
    assert [(e, s.to_dict()) for e, s in worker.finish()] == [(0, {"a": 1, "A": 1})]
    with pytest.raises(ValueError, match="aggregator, epoch_seconds"):
        worker.replace_job(
            Keys(JobSpec.from_dict({**base, "aggregator": "sum", "epoch_seconds": 2}))
        )


def test_spec_window_bounds() -> None:
    spec = JobSpec.from_dict(
        {
            "name": "t",
            "creator": "me",
            "job_class": "x",
            "mode": "window",
            "window_size": 4,
            "window_slide": 2,
        }
    )
    assert [spec.window_bounds(e) for e in range(4)] == [None, (-2, 1), None, (0, 3)]
    assert spec.with_changes(mode="batch").window_bounds(5) == (5, 5)
