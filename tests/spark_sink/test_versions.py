"""Epoch versions in the lake (issue 12: a final result that replaces an earlier one is a new
version of the epoch, not a silent overwrite): whatever sequence of versioned writes, repeated
pushes, compactions and sweeps happens, a batch reader sees exactly the newest version of each
(epoch, tree), checked by hypothesis against a dict; the streaming source's offsets, driven as
Spark drives them between random writes, compactions and sweeps, deliver no version twice and
every newest version; the real ``elf`` Spark source shows the newest version to batch queries
and every new version, as new rows, to a streaming query."""

from __future__ import annotations

import datetime as dt
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spark_sink.compaction import compact_hour, sweep
from spark_sink.lake import Lake, Rollup, read_table

STEP = 600.0  # six epochs an hour
E = 1_795_298_400 // int(STEP)  # the first epoch of an hour
TREES = 2


def rows(epoch: int, tree: int, version: int) -> list[tuple[str, int]]:
    """A version's rows: a pure function of (epoch, tree, version), as the writer promises
    (the same version pushed twice has the same rows); versions differ in keys and values."""
    return [(f"k{epoch % 7}-{tree}-{i}", 100 * version + i) for i in range(version % 3 + 1)]


def write(lake: Lake, epoch: int, tree: int, version: int) -> None:
    lake.write(Rollup("wc", tree, TREES, epoch, STEP, rows(epoch, tree, version), version=version))


def hour_of(epoch: int) -> tuple[str, int]:
    when = dt.datetime.fromtimestamp(epoch * STEP, dt.UTC)
    return f"{when:%Y-%m-%d}", when.hour


def seen(lake: Lake) -> Counter:
    table = read_table(lake, lake.files("wc"))
    return Counter((r["epoch"], r["tree"], r["version"], r["key"], r["value"])
                   for r in table.to_pylist())  # fmt: skip


def expected(newest: dict[tuple[int, int], int]) -> Counter:
    return Counter((e, t, v, k, x) for (e, t), v in newest.items() for k, x in rows(e, t, v))


OPS = st.lists(
    st.one_of(
        st.tuples(
            st.just("write"), st.integers(0, 13), st.integers(0, TREES - 1), st.integers(1, 4)
        ),
        st.tuples(st.just("compact"), st.integers(0, 13), st.integers(0, TREES - 1)),
        st.tuples(st.just("sweep"), st.integers(0, 13)),
    ),
    max_size=30,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=OPS)
def test_batch_readers_see_the_newest_version_of_every_epoch(ops: list[tuple]) -> None:
    with tempfile.TemporaryDirectory() as root:
        lake = Lake(root)
        newest: dict[tuple[int, int], int] = {}  # the reference
        for op in ops:
            if op[0] == "write":
                _, i, tree, version = op
                write(lake, E + i, tree, version)
                key = (E + i, tree)
                newest[key] = max(newest.get(key, 0), version)
            elif op[0] == "compact":
                compact_hour(lake, "wc", hour_of(E + op[1]), op[2], TREES)
            else:
                sweep(lake, "wc", hour_of(E + op[1]), grace=0)
            assert seen(lake) == expected(newest)
            listed = [(f.epoch, f.tree, f.version) for f in lake.files("wc")]
            assert listed == sorted((e, t, v) for (e, t), v in newest.items())
            # every version listed by versions() is readable and the newest is among them
            every = lake.versions("wc")
            assert {(f.epoch, f.tree) for f in every} == set(newest)
            for f in every:
                assert f.version <= newest[(f.epoch, f.tree)]


# ---- the real Spark data source -----------------------------------------------------------


def spark_rows(df: Any) -> Counter:
    return Counter((r["epoch"], r["tree"], r["version"], r["key"], r["value"])
                   for r in df.collect())  # fmt: skip


def run_stream(spark: Any, lake_dir: str, out: Path, checkpoint: Path) -> None:
    """The stream's log of versions to ``out``, and docs/spark-sink.md's upsert recipe (the
    newest version per (epoch, tree)) to ``out/../current``, until all available is read."""
    current = out.parent / "current"

    def upsert(batch: Any, batch_id: int) -> None:
        # dynamic: replace only the (epoch, tree) partitions this batch holds
        (
            batch.write.mode("overwrite")
            .option("partitionOverwriteMode", "dynamic")
            .partitionBy("epoch", "tree")
            .parquet(str(current))
        )

    stream = spark.readStream.format("elf").option("job", "wc").load(lake_dir)
    stream = stream.select("epoch", "tree", "version", "key", "value")
    queries = [
        stream.writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start(),
        stream.writeStream.foreachBatch(upsert)
        .option("checkpointLocation", str(checkpoint) + "-current")
        .trigger(availableNow=True)
        .start(),
    ]
    try:
        for query in queries:
            query.awaitTermination(120)
    finally:
        for query in queries:
            query.stop()


def newest_per_epoch(df: Any) -> Any:
    """docs/spark-sink.md's recipe: keep the newest version of each (epoch, tree)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    newest = F.max("version").over(Window.partitionBy("epoch", "tree"))
    return df.withColumn("_newest", newest).where(F.col("version") == F.col("_newest"))


def test_spark_batch_sees_the_newest_version_and_a_stream_every_new_version(
    spark: Any, tmp_path: Path
) -> None:
    pytest.importorskip("pyspark")
    from spark_sink.compaction import LakeMaintenance, maintain

    lake_dir = tmp_path / "lake"
    lake = Lake(str(lake_dir))
    out, checkpoint = tmp_path / "out", tmp_path / "cp"
    newest: dict[tuple[int, int], int] = {}
    delivered: Counter = Counter()  # every version a stream must have delivered, once

    def put(epoch: int, tree: int, version: int) -> None:
        write(lake, epoch, tree, version)
        newest[(epoch, tree)] = version

    def batch() -> Counter:
        return spark_rows(spark.read.format("elf").option("job", "wc").load(str(lake_dir)))

    for i in range(8):  # E..E+7: the first hour and two epochs of the next, version 1
        for t in range(TREES):
            put(E + i, t, 1)
    run_stream(spark, str(lake_dir), out, checkpoint)
    delivered += expected(newest)
    assert spark_rows(spark.read.parquet(str(out))) == delivered
    # late data: version 2 of (E+1, tree 0) and of (E+6, tree 1); batch sees only those
    put(E + 1, 0, 2)
    put(E + 6, 1, 2)
    assert batch() == expected(newest)
    run_stream(spark, str(lake_dir), out, checkpoint)  # restarted from its checkpoint
    delivered += expected({(E + 1, 0): 2, (E + 6, 1): 2})
    got = spark.read.parquet(str(out))
    assert spark_rows(got) == delivered  # v1 rows, then v2 as new rows, nothing twice
    assert spark_rows(newest_per_epoch(got)) == expected(newest) == batch()
    assert spark_rows(spark.read.parquet(str(tmp_path / "current"))) == expected(newest)
    # compaction folds the newest versions of the complete hour; a later version still wins
    assert (
        maintain(lake, [("wc", t, TREES) for t in range(TREES)], LakeMaintenance(grace=0))[
            "files_compacted"
        ]
        == 6 * TREES
    )
    assert batch() == expected(newest)
    put(E + 1, 0, 3)
    assert batch() == expected(newest)
    run_stream(spark, str(lake_dir), out, checkpoint)
    delivered += expected({(E + 1, 0): 3})
    got = spark.read.parquet(str(out))
    assert spark_rows(got) == delivered
    assert spark_rows(newest_per_epoch(got)) == expected(newest) == batch()
    assert spark_rows(spark.read.parquet(str(tmp_path / "current"))) == expected(newest)


# ---- the streaming source's offsets, as a state machine (no JVM: the reader is plain Python)


def stream_reader(root: str) -> Any:
    pytest.importorskip("pyspark")
    from spark_sink.datasource import ElfDataSource, ElfStreamReader

    source = ElfDataSource({"path": root, "job": "wc", "incompleteTimeout": "1e9"})
    return ElfStreamReader(source, pa.schema([]))


def micro_batch(reader: Any, offset: dict) -> tuple[dict, list[tuple[int, int, int]]]:
    """One micro-batch as Spark runs it: the new end offset and the (epoch, tree, version)
    of the rows its partitions hold."""
    from spark_sink.lake import read_rows

    end = reader.latestOffset(offset)
    got = []
    for partition in reader.partitions(offset, end):
        for path, epochs in partition.items:
            table = read_rows(reader.lake, path, epochs)
            got += {(r["epoch"], r["tree"], r["version"]) for r in table.to_pylist()}
    return end, got


STREAM_OPS = st.lists(
    st.one_of(
        st.tuples(
            st.just("write"), st.integers(0, 9), st.integers(0, TREES - 1), st.integers(1, 4)
        ),
        st.tuples(st.just("batch")),
        st.tuples(st.just("compact"), st.integers(0, 9), st.integers(0, TREES - 1)),
        st.tuples(st.just("sweep"), st.integers(0, 9)),
    ),
    max_size=30,
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=STREAM_OPS)
def test_a_stream_delivers_each_version_once_and_every_newest_version(ops: list[tuple]) -> None:
    with tempfile.TemporaryDirectory() as root:
        lake = Lake(root)
        reader = stream_reader(root)
        offset = reader.initialOffset()
        newest: dict[tuple[int, int], int] = {}
        delivered: list[tuple[int, int, int]] = []
        passed_empty: set[int] = set()  # epochs the stream passed while no tree had written

        def run_batch() -> None:
            nonlocal offset
            before = offset["epoch"]
            offset, got = micro_batch(reader, offset)
            written = {e for e, _ in newest}
            passed_empty.update(
                e for e in range(E, E + 10) if before < e <= offset["epoch"] and e not in written
            )
            delivered.extend(got)

        for op in ops:
            if op[0] == "write":
                _, i, tree, version = op
                write(lake, E + i, tree, version)
                newest[(E + i, tree)] = max(newest.get((E + i, tree), 0), version)
            elif op[0] == "batch":
                run_batch()
            elif op[0] == "compact":
                compact_hour(lake, "wc", hour_of(E + op[1]), op[2], TREES)
            else:
                sweep(lake, "wc", hour_of(E + op[1]), grace=0)
        for e in {e for e, _ in newest}:  # every started epoch completes: none holds back
            for t in range(TREES):
                if (e, t) not in newest:
                    write(lake, e, t, 1)
                    newest[(e, t)] = 1
        run_batch()
        run_batch()  # nothing new: an empty batch
        assert len(delivered) == len(set(delivered))  # no version twice
        for key in newest:
            mine = [v for e, t, v in delivered if (e, t) == key]
            assert mine == sorted(mine)  # versions of one (epoch, tree) only ever grow
            if key[0] not in passed_empty:
                assert mine and mine[-1] == newest[key], (key, mine, newest[key])
