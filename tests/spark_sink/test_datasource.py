"""format("elf") with real PySpark (local): batch reads equal the rows written, a duplicate
push adds no rows, epoch filters, views and plain Parquet reads, and a streaming query
stopped and restarted from its checkpoint delivers every epoch exactly once."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from spark_sink.lake import Lake, Rollup

pytest.importorskip("pyspark")

E = 1_795_300_000


def words(epoch: int, tree: int) -> list[tuple[str, int]]:
    return [(f"w{epoch % 100}-{tree}-{i}", i + 1) for i in range(3)]


def written(lake: Lake, epochs: range, trees: int = 2, skip: set | None = None) -> Counter:
    want: Counter = Counter()
    for e in epochs:
        for t in range(trees):
            if skip and (e, t) in skip:
                continue
            rows = words(e, t)
            lake.write(Rollup("wc", t, trees, e, 1.0, rows))
            want.update((e, k, v) for k, v in rows)
    return want


def rows_of(df: Any) -> Counter:
    return Counter((r["epoch"], r["key"], r["value"]) for r in df.collect())


def test_batch_read_equals_rows_written_and_duplicates_add_nothing(spark, tmp_path: Path):
    lake = Lake(str(tmp_path))
    want = written(lake, range(E, E + 3))
    written(lake, range(E + 1, E + 2))  # the same epoch pushed again
    df = spark.read.format("elf").option("job", "wc").load(str(tmp_path))
    assert rows_of(df) == want
    assert max(rows_of(df).values()) == 1
    got = df.where(f"epoch = {E}").select("key_json", "value_json").collect()
    assert sorted((json.loads(r[0]), json.loads(r[1])) for r in got) == sorted(
        words(E, 0) + words(E, 1)
    )
    # epoch range and complete epochs only
    lake.write(Rollup("wc", 0, 2, E + 3, 1.0, [("half", 1)]))
    part = (
        spark.read.format("elf")
        .option("job", "wc")
        .option("startEpoch", E + 1)
        .option("completeOnly", "true")
        .load(str(tmp_path))
    )
    assert {r["epoch"] for r in part.select("epoch").distinct().collect()} == {E + 1, E + 2}


def test_views_and_plain_parquet_reads(spark, tmp_path: Path):
    from spark_sink.datasource import read_parquet, register_views

    lake = Lake(str(tmp_path))
    want = written(lake, range(E, E + 2))
    assert register_views(spark, str(tmp_path)) == {"wc": "elf_wc"}
    total = spark.sql("SELECT sum(value) AS s FROM elf_wc").collect()[0]["s"]
    assert total == sum(v * n for (_, _, v), n in want.items())
    plain = read_parquet(spark, str(tmp_path), "wc")
    assert rows_of(plain) == want
    assert {r["hour"] for r in plain.select("hour").collect()} == {22}
    one_task = spark.read.format("elf").option("job", "wc").option("maxPartitions", 1)
    assert rows_of(one_task.load(str(tmp_path))) == want  # files grouped into one task


def test_missing_lake_option_is_a_clear_error(spark, monkeypatch):
    monkeypatch.delenv("ELF_LAKE", raising=False)
    with pytest.raises(Exception, match="no lake location"):
        spark.read.format("elf").option("job", "wc").load().collect()


def run_stream(spark, lake_dir: str, out: Path, checkpoint: Path) -> None:
    stream = spark.readStream.format("elf").option("job", "wc").load(lake_dir)
    query = (
        stream.select("epoch", "key", "value")
        .writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(checkpoint))
        .start()
    )
    try:
        query.processAllAvailable()
    finally:
        query.stop()


def test_stream_restarted_from_its_checkpoint_yields_every_epoch_once(spark, tmp_path: Path):
    lake_dir = tmp_path / "lake"
    lake = Lake(str(lake_dir))
    out, checkpoint = tmp_path / "out", tmp_path / "cp"
    # epochs E..E+2 complete; E+3 has only tree 0 so far: the stream must wait for it
    want = written(lake, range(E, E + 4), skip={(E + 3, 1)})
    run_stream(spark, str(lake_dir), out, checkpoint)
    first = rows_of(spark.read.parquet(str(out)))
    assert {e for e, _, _ in first} == {E, E + 1, E + 2}
    want += written(lake, range(E + 3, E + 4), skip={(E + 3, 0)})  # the late tree arrives
    want += written(lake, range(E + 4, E + 6))
    run_stream(spark, str(lake_dir), out, checkpoint)  # restarted from the checkpoint
    got = rows_of(spark.read.parquet(str(out)))
    assert got == want  # every row of every epoch, none twice


def test_late_records_read_in_spark_beside_files_without_them(spark, tmp_path: Path):
    """The first tree's files carry ``late_records`` (the epoch's late count when written);
    another tree's files and files from before the column read null in Spark, never 0."""
    lake = Lake(str(tmp_path))
    lake.write(Rollup("wc", 0, 2, E, 1.0, [("a", 1)], late_records=4))
    lake.write(Rollup("wc", 1, 2, E, 1.0, [("b", 2)]))  # tree 1: unknown here
    lake.write(Rollup("wc", 0, 2, E + 1, 1.0, [("c", 3)]))  # as before the column
    df = spark.read.format("elf").option("job", "wc").load(str(tmp_path))
    got = {(r["epoch"], r["tree"]): r["late_records"] for r in df.collect()}
    assert got == {(E, 0): 4, (E, 1): None, (E + 1, 0): None}
    late = df.where("tree = 0").groupBy("epoch").agg({"late_records": "max"}).collect()
    assert {r["epoch"]: r["max(late_records)"] for r in late} == {E: 4, E + 1: None}


def test_a_session_querys_sessions_read_in_spark_as_their_own_job(spark, tmp_path: Path):
    """A session query's master writes each epoch's closed sessions under the job
    ``<name>~sessions`` (agent/runtime/results/lake_sink.py): Spark reads them as one row per
    session, with the window bounds, the SELECT columns and the flags (an array: empty when
    exact), beside the job's own per-epoch rows."""
    from agent.runtime.results.lake_sink import sessions_job

    lake = Lake(str(tmp_path))
    flag = "tentative: epoch 101 lacks origins 2"
    closed = {
        E: [],
        E + 1: [{"window_start": E - 2.0, "window_end": E + 1.0, "user": "a", "n": 5, "flags": []}],
        E + 2: [
            {"window_start": E - 1.0, "window_end": E + 2.0, "user": "b", "n": 2, "flags": [flag]},
            {"window_start": E + 1.0, "window_end": E + 2.0, "user": "c", "n": 1, "flags": []},
        ],
    }
    for epoch, rows in closed.items():
        lake.write(Rollup("visits", 0, 1, epoch, 1.0, [], named_rows=[{"user": "a", "n": 1}]))
        lake.write(Rollup(sessions_job("visits"), 0, 1, epoch, 1.0, [], named_rows=rows))
    df = spark.read.format("elf").option("job", "visits~sessions").load(str(tmp_path))
    got = sorted(
        (r["epoch"], r["window_start"], r["window_end"], r["user"], r["n"], list(r["flags"]))
        for r in df.collect()
    )
    want = sorted(
        (e, r["window_start"], r["window_end"], r["user"], r["n"], r["flags"])
        for e, rows in closed.items()
        for r in rows
    )
    assert got == want
    assert {r["user"] for r in df.where("size(flags) = 0").collect()} == {"a", "c"}
    # a read of every job has both, told apart by the job column
    jobs = spark.read.format("elf").load(str(tmp_path)).groupBy("job").count().collect()
    assert {r["job"]: r["count"] for r in jobs} == {"visits": 3, "visits~sessions": 3}
