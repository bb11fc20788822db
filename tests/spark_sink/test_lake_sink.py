"""The master's hook (agent/runtime/results/lake_sink.py) with the agent's real ResultStore: a
stored epoch
is written, a late contribution folded into it replaces the file with the merged result, and
top-k / named rows reach the lake as the results API reports them (pyarrow only)."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import Counter
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from agent.jobs.spec import JobSpec
from agent.runtime.results.lake_sink import LakeSink
from agent.runtime.results.store import ResultStore
from cbt import CompressedBufferTree
from spark_sink.buffer import LakeWriter
from spark_sink.lake import Lake, Rollup, read_table

EPOCH = 1_795_300_000
TREES = [111, 222]


def snapshot(words: list[str]) -> Any:
    tree = CompressedBufferTree("count")
    for w in words:
        tree.insert(w, 1)
    return tree.flush()


class Job:
    def __init__(self, named: bool = False) -> None:
        self.named = named

    def result_rows(self, pairs: list[Any]) -> list[dict[str, Any]] | None:
        if not self.named:
            return None
        return [{"product": k, "clicks": v} for k, v in pairs]


def runtime(store: ResultStore, job: Job, late: dict[int, int] | None = None) -> Any:
    counters: Counter = Counter()
    late = late or {}
    return SimpleNamespace(
        name="wc",
        store=store,
        tree_list=TREES,
        tree_set=set(TREES),
        spec=JobSpec.from_dict({"name": "wc", "creator": "t", "job_class": "wordcount"}),
        operator=None,
        job=job,
        counters=counters,
        count=lambda what, n=1: counters.update({what: n}),
        job_for=lambda epoch: job,
        late_records=lambda epoch: late.get(epoch),
    )


def lake_counter(lake: Lake) -> Counter:
    rows = read_table(lake, lake.files("wc")).to_pylist()
    return Counter({(r["tree"], r["key"]): r["value"] for r in rows})


def test_stored_then_updated_epoch_is_a_new_version(tmp_path: Path) -> None:
    lake = Lake(str(tmp_path / "lake"))
    writer = LakeWriter(lake, tmp_path / "buf")
    store = ResultStore()
    rt = runtime(store, Job())
    sink = LakeSink(rt, writer)
    store.put(TREES[1], EPOCH, snapshot(["a", "a", "b"]), 0.0)
    sink.epoch(TREES[1], EPOCH)
    assert writer.flush(10)
    assert lake_counter(lake) == Counter({(1, "a"): 2, (1, "b"): 1})
    assert store.add_late(TREES[1], EPOCH, 42, snapshot(["a", "c"]), 1.0)
    sink.epoch(TREES[1], EPOCH)  # the runtime's hook after a folded late contribution
    assert writer.flush(10)
    want = Counter({(1, k): v for k, v in store.get(TREES[1], EPOCH).snapshot})
    assert lake_counter(lake) == want == Counter({(1, "a"): 3, (1, "b"): 1, (1, "c"): 1})
    # the update is version 2 (1 + the late contributions folded in); version 1 stays
    assert [f.version for f in lake.files("wc")] == [2]
    assert [f.version for f in lake.versions("wc")] == [1, 2]
    assert rt.counters["lake_submitted"] == 2
    sink.epoch(TREES[0], EPOCH)  # nothing stored for that tree: nothing written
    assert writer.flush(10)
    assert len(lake.files("wc")) == 1
    writer.close()


def test_the_first_trees_files_carry_the_epochs_late_records(tmp_path: Path) -> None:
    """The first tree's master keeps the late-record reports: its file gets ``late_records``
    (column and footer); another tree's file has none, and reading both (and a file from
    before the column) gives null there - never a made-up zero."""
    lake = Lake(str(tmp_path / "lake"))
    writer = LakeWriter(lake, tmp_path / "buf")
    store = ResultStore()
    sink = LakeSink(runtime(store, Job(), late={EPOCH: 7, EPOCH + 1: 0}), writer)
    for tid in TREES:
        store.put(tid, EPOCH, snapshot(["a", "b"] if tid == TREES[0] else ["c"]), 0.0)
        sink.epoch(tid, EPOCH)
    store.put(TREES[0], EPOCH + 1, snapshot(["a"]), 0.0)
    sink.epoch(TREES[0], EPOCH + 1)
    assert writer.flush(10)
    rows = read_table(lake, lake.files("wc")).to_pylist()
    got = sorted((r["epoch"], r["tree"], r["key"], r["late_records"]) for r in rows)
    assert got == [(EPOCH, 0, "a", 7), (EPOCH, 0, "b", 7), (EPOCH, 1, "c", None),
                   (EPOCH + 1, 0, "a", 0)]  # fmt: skip
    # a file written before the column (no late_records) reads as null beside the new ones
    old = Rollup(job="wc", tree=0, trees=2, epoch=EPOCH + 2, epoch_seconds=1.0,
                 rows=[("z", 1)])  # fmt: skip
    assert old.late_records is None
    lake.write(old)
    rows = read_table(lake, lake.files("wc")).to_pylist()
    assert {r["epoch"]: r["late_records"] for r in rows if r["tree"] == 0} == {
        EPOCH: 7,
        EPOCH + 1: 0,
        EPOCH + 2: None,
    }
    writer.close()


def test_named_rows_reach_the_lake(tmp_path: Path) -> None:
    lake = Lake(str(tmp_path / "lake"))
    writer = LakeWriter(lake, tmp_path / "buf")
    store = ResultStore()
    sink = LakeSink(runtime(store, Job(named=True)), writer)
    store.put(TREES[0], EPOCH, snapshot(["p1", "p1", "p2"]), 0.0)
    sink.epoch(TREES[0], EPOCH)
    assert writer.flush(10)
    rows = read_table(lake, lake.files("wc")).to_pylist()
    assert sorted((r["product"], r["clicks"]) for r in rows) == [("p1", 2), ("p2", 1)]
    writer.close()


def test_tentative_results_reach_the_lake_with_version_coverage_and_lacking_origins(
    tmp_path: Path,
) -> None:
    lake = Lake(str(tmp_path / "lake"))
    writer = LakeWriter(lake, tmp_path / "buf")
    store = ResultStore()
    sink = LakeSink(runtime(store, Job()), writer)
    # a master that expects origins ab, cd, ef and 12, holds ab's records, then folds in cd's
    # and 12's late: ef is still missing
    store.put(TREES[0], EPOCH, snapshot(["a"]), 0.0, origins=frozenset({0xAB}),
              expected=frozenset({0xAB, 0xCD, 0xEF, 0x12}))  # fmt: skip
    store.add_late(TREES[0], EPOCH, 0xCD, snapshot(["a"]), 1.0, origins=frozenset({0xCD}))
    store.add_late(TREES[0], EPOCH, 0x12, snapshot(["a"]), 1.0, origins=frozenset({0x12}))
    sink.epoch(TREES[0], EPOCH)
    assert writer.flush(10)
    (row,) = read_table(lake, lake.files("wc")).to_pylist()
    assert (row["tentative"], row["coverage"], row["lacking"], row["version"]) == (
        True,
        0.75,
        ["ef"],
        3,
    )
    assert row["value"] == 3
    assert [f.path.rsplit("-", 1)[1] for f in lake.files("wc")] == ["v3.parquet"]
    writer.close()


# ---- fencing terms ----------------------------------------------------------------------------


def term_store(term: int) -> ResultStore:
    """The agent's ResultStore with its master's fencing term
    (agent/runtime/recovery/master_terms.py)."""
    store = ResultStore()
    store.term_of = lambda tree: term
    return store


def fenced_runtime(store: ResultStore) -> Any:
    rt = runtime(store, Job())
    rt.fenced_calls = []
    rt.lake_fenced = lambda tid, epoch, newer: rt.fenced_calls.append(
        (tid, epoch, newer, threading.get_ident())
    )
    return rt


def newer_master_wrote(lake: Lake, term: int) -> None:
    """Another master, of a higher term, published tree 1's EPOCH."""
    lake.write(Rollup("wc", 1, len(TREES), EPOCH, 1.0, [("z", 9)], term=term))


def test_term_and_partial_reach_the_lake(tmp_path: Path) -> None:
    lake = Lake(str(tmp_path / "lake"))
    writer = LakeWriter(lake, tmp_path / "buf")
    store = term_store(3)
    sink = LakeSink(runtime(store, Job()), writer)
    store.put(TREES[1], EPOCH, snapshot(["a"]), 0.0, origins=frozenset({1}),
              expected=frozenset({1, 2}))  # fmt: skip
    assert store.give_up(TREES[1], EPOCH, frozenset({2}))  # origin 2 retired: partial, v2
    sink.epoch(TREES[1], EPOCH)
    assert writer.flush(10)
    (f,) = lake.files("wc")
    assert f.rank == (3, 2) and f.path.endswith("-t3-v2.parquet")
    (row,) = read_table(lake, [f]).to_pylist()
    assert (row["term"], row["partial"], row["key"]) == (3, True, "a")
    writer.close()


def test_a_fenced_write_is_counted_logged_and_reported(tmp_path: Path, caplog) -> None:
    lake = Lake(str(tmp_path / "lake"))
    newer_master_wrote(lake, term=5)
    writer = LakeWriter(lake, tmp_path / "buf")
    store = term_store(2)
    rt = fenced_runtime(store)
    sink = LakeSink(rt, writer)
    store.put(TREES[1], EPOCH, snapshot(["a", "b"]), 0.0)
    with caplog.at_level(logging.WARNING, "agent.runtime.results.lake_sink"):
        sink.epoch(TREES[1], EPOCH)
        assert writer.flush(10)
    assert rt.counters["lake_fenced_writes"] == 1
    assert [c[:3] for c in rt.fenced_calls] == [(TREES[1], EPOCH, 5)]
    assert writer.stats()["fenced"] == 1 and writer.stats()["pending"] == 0  # not retried
    (record,) = [r for r in caplog.records if "fenced" in r.getMessage()]
    assert record.levelno == logging.WARNING
    for part in ("wc", f"tree {TREES[1]:x}", f"epoch {EPOCH}", "term 2", "term 5"):
        assert part in record.getMessage()
    (f,) = lake.files("wc")  # the newer master's result only
    assert f.rank == (5, 1)
    assert read_table(lake, [f]).column("key").to_pylist() == ["z"]
    writer.close()


async def test_a_fenced_write_is_reported_on_the_event_loop(tmp_path: Path) -> None:
    lake = Lake(str(tmp_path / "lake"))
    newer_master_wrote(lake, term=1)
    writer = LakeWriter(lake, tmp_path / "buf")
    store = ResultStore()
    rt = fenced_runtime(store)
    sink = LakeSink(rt, writer)
    store.put(TREES[1], EPOCH, snapshot(["a"]), 0.0)  # term 0: before terms
    sink.epoch(TREES[1], EPOCH)
    deadline = time.monotonic() + 10
    while not rt.fenced_calls:
        assert time.monotonic() < deadline, "the fenced write was never reported"
        await asyncio.sleep(0.01)  # yields to the loop the report is scheduled on
    ((tid, epoch, newer, thread),) = rt.fenced_calls
    assert (tid, epoch, newer, thread) == (TREES[1], EPOCH, 1, threading.get_ident())
    assert rt.counters["lake_fenced_writes"] == 1
    writer.close()


def test_a_buffered_rollup_fenced_after_a_restart_is_dropped_and_logged(
    tmp_path: Path, caplog
) -> None:
    blocker = tmp_path / "lake"
    blocker.write_text("not a directory")  # the lake cannot be created: unavailable
    store = ResultStore()
    store.put(TREES[1], EPOCH, snapshot(["a"]), 0.0)
    first = LakeWriter(Lake(str(blocker)), tmp_path / "buf", retry_initial=3600)
    LakeSink(runtime(store, Job()), first).epoch(TREES[1], EPOCH)
    deadline = time.monotonic() + 10
    while first.stats()["pending"] != 1:
        assert time.monotonic() < deadline, "the rollup was never buffered"
        threading.Event().wait(0.01)
    first.close()  # the agent stops; the buffered rollup stays on disk
    blocker.unlink()
    newer_master_wrote(Lake(str(blocker)), term=4)  # meanwhile, a newer master published
    with caplog.at_level(logging.WARNING, "spark_sink.buffer"):
        second = LakeWriter(Lake(str(blocker)), tmp_path / "buf")
        assert second.flush(10)
    assert second.stats()["fenced"] == 1 and second.stats()["pending"] == 0
    assert "fenced by term 4" in caplog.text
    assert [f.rank for f in Lake(str(blocker)).versions("wc")] == [(4, 1)]
    second.close()


def test_a_sink_opens_its_writer_with_the_first_write_or_for_a_left_buffer(
    tmp_path: Path,
) -> None:
    """``sink_for`` defers the writer (and pyarrow) to the first write - an agent that never
    masters the job never opens it - unless rollups an earlier run left buffered wait to be
    drained."""
    from agent.runtime.results.lake_sink import LakeTarget, sink_for

    target = LakeTarget(str(tmp_path / "lake"), str(tmp_path / "buf"))
    store = ResultStore()
    sink = sink_for(runtime(store, Job()), target)
    assert sink is not None and sink.stats()["opened"] is False
    asyncio.run(sink.flush())  # nothing handed over: returns at once, opens nothing
    assert sink.stats()["opened"] is False and sink.location == target.location
    store.put(TREES[0], EPOCH, snapshot(["a"]), 0.0)
    sink.epoch(TREES[0], EPOCH)
    assert sink.stats()["opened"] is True
    assert sink.writer.flush(10)
    assert lake_counter(Lake(target.location)) == Counter({(0, "a"): 1})

    left = tmp_path / "left-buf"
    left.mkdir()
    (left / "rollup-1.parquet").write_bytes(b"")  # what a crashed run left
    again = sink_for(runtime(ResultStore(), Job()), LakeTarget(target.location, str(left)))
    assert again is not None and again.stats()["opened"] is True


def test_the_writer_modules_are_imported_off_the_calling_thread() -> None:
    """A master's first lake write must not import pyarrow and pandas on the event loop
    (a second or more, cold): warm_imports loads them in a thread, once per process."""
    import sys
    import threading

    from agent.runtime.results import lake_sink

    warming = lake_sink.warm_imports()
    assert lake_sink.warm_imports() is warming  # once per process
    assert warming is not threading.current_thread()
    warming.join(timeout=60)
    assert not warming.is_alive()
    assert all(m in sys.modules for m in lake_sink.WRITER_MODULES)
