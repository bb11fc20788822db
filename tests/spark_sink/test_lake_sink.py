"""The master's hook (agent/runtime/lake_sink.py) with the agent's real ResultStore: a stored epoch
is written, a late contribution folded into it replaces the file with the merged result, and
top-k / named rows reach the lake as the results API reports them (pyarrow only)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from agent.jobs.spec import JobSpec
from agent.runtime.lake_sink import LakeSink
from agent.runtime.results import ResultStore
from cbt import CompressedBufferTree
from spark_sink.buffer import LakeWriter
from spark_sink.lake import Lake, read_table

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


def runtime(store: ResultStore, job: Job) -> Any:
    counters: Counter = Counter()
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
