"""A tentative result's quality in the lake: the master's sink writes a top-k job's accuracy
estimate (column ``accuracy`` and the ``elf.result`` footer) next to its rate-weighted
coverage, other jobs' files are unchanged, and the real ``elf`` Spark source shows the final
version - coverage 1.0, accuracy 1.0 - in place of the tentative one."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pyarrow.parquet as pq
import pytest

from agent.jobs.spec import JobSpec
from agent.runtime.results.lake_sink import LakeSink
from agent.runtime.results.store import ResultStore
from cbt import CompressedBufferTree
from spark_sink.buffer import LakeWriter
from spark_sink.lake import RESULT_KEY, Lake, Rollup, rollup_table
from srt.dataplane.lineage import Counted
from srt.dataplane.operators import level_operator_for

EPOCH = 1_795_300_000
TREE = 111
A, B, C = 0xA, 0xB, 0xC


def snapshot(counts: dict[str, int]) -> Any:
    tree = CompressedBufferTree("count")
    for word, n in counts.items():
        tree.insert(word, n)
    return tree.flush()


class Job:
    def result_rows(self, pairs: list[Any]) -> None:
        return None


def runtime(store: ResultStore, top_k: int | None) -> Any:
    counters: Counter = Counter()
    spec = JobSpec.from_dict(
        {"name": "wc", "creator": "t", "job_class": "wordcount", "top_k": top_k}
    )
    return SimpleNamespace(
        name="wc", store=store, tree_list=[TREE], tree_set={TREE}, spec=spec,
        operator=level_operator_for(CompressedBufferTree("count").agg, top_k=top_k),
        job=Job(), counters=counters, count=lambda what, n=1: counters.update({what: n}),
        job_for=lambda epoch: Job(),
        late_records=lambda epoch: None,
    )  # fmt: skip


def footer(lake: Lake, version: int) -> dict[str, Any]:
    (f,) = [f for f in lake.versions("wc") if f.version == version]
    return json.loads(pq.read_schema(f.path, filesystem=lake.fs).metadata[RESULT_KEY])


def write_tentative_then_final(tmp_path: Path, top_k: int | None) -> Lake:
    lake = Lake(str(tmp_path / "lake"))
    writer = LakeWriter(lake, tmp_path / "buf")
    store = ResultStore()
    sink = LakeSink(runtime(store, top_k), writer)
    for e in range(EPOCH - 8, EPOCH):  # measured rates: A 10, B 30, C 60 records an epoch
        store.put(TREE, e, snapshot({"x": 1}), 0.0, origins=Counted({A, B, C}, {A: 10, B: 30,
                  C: 60}), expected=frozenset({A, B, C}))  # fmt: skip
    words = {f"w{i}": 40 - i for i in range(30)}
    store.put(TREE, EPOCH, snapshot(words), 0.0, origins=Counted({A, B}, {A: 10, B: 30}),
              expected=frozenset({A, B, C}))  # fmt: skip
    sink.epoch(TREE, EPOCH)
    assert writer.flush(10)
    store.add_late(TREE, EPOCH, C, snapshot(words), 0.0, origins=Counted({C}, {C: 60}))
    sink.epoch(TREE, EPOCH)
    assert writer.flush(10)
    return lake


def test_a_top_k_job_gets_an_accuracy_column_and_footer(tmp_path: Path) -> None:
    lake = write_tentative_then_final(tmp_path, top_k=5)
    first, second = footer(lake, 1), footer(lake, 2)
    assert first["tentative"] and first["coverage"] == pytest.approx(0.4)
    assert 0.0 < first["accuracy"] < 1.0
    assert not second["tentative"] and second["coverage"] == 1.0 and second["accuracy"] == 1.0
    (f,) = lake.files("wc")
    table = pq.read_table(f.path, filesystem=lake.fs)
    assert set(table.column("accuracy").to_pylist()) == {1.0}
    assert table.num_rows == 5


def test_other_jobs_files_have_no_accuracy(tmp_path: Path) -> None:
    lake = write_tentative_then_final(tmp_path, top_k=None)
    assert "accuracy" not in footer(lake, 1) and footer(lake, 1)["coverage"] == pytest.approx(0.4)
    (f,) = lake.files("wc")
    assert "accuracy" not in pq.read_schema(f.path, filesystem=lake.fs).names


def test_accuracy_is_part_of_a_version_digest_and_reserved_as_a_name() -> None:
    base = Rollup("j", 0, 1, EPOCH, 1.0, [("a", 1)], tentative=True, coverage=0.5)
    digests = {
        json.loads(rollup_table(r).schema.metadata[RESULT_KEY])["digest"]
        for r in (base, Rollup(**{**base.__dict__, "accuracy": 0.7}),
                  Rollup(**{**base.__dict__, "accuracy": 0.8}))
    }  # fmt: skip
    assert len(digests) == 3
    named = Rollup("j", 0, 1, EPOCH, 1.0, [("a", 1)], value_names=["accuracy"], accuracy=1.0)
    assert rollup_table(named).column_names.count("accuracy") == 1  # the value renamed


def test_spark_shows_the_final_version_in_place_of_the_tentative_one(
    spark: Any, tmp_path: Path
) -> None:
    lake = write_tentative_then_final(tmp_path, top_k=5)
    assert [f.version for f in lake.versions("wc")] == [1, 2]
    df = spark.read.format("elf").option("job", "wc").load(str(tmp_path / "lake"))
    rows = df.select("epoch", "version", "tentative", "coverage", "accuracy", "key").collect()
    assert len(rows) == 5
    assert {(r.version, r.tentative, r.coverage, r.accuracy) for r in rows} == {
        (2, False, 1.0, 1.0)
    }
