"""Lake compaction (issue 13: the lake filled with small files): an hour's epoch files merge
into one file per tree; readers — pyarrow, and the real ``elf`` Spark data source in batch and
streaming mode — see exactly the same rows before, during and after; re-running changes
nothing; a late rewrite of a compacted epoch wins and is folded in next; replaced files go
only after the grace period; retention drops old hours; the lake writer thread runs it."""

from __future__ import annotations

import json
import os
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from agent_helpers import wait_until

from spark_sink.buffer import LakeWriter
from spark_sink.compaction import LakeMaintenance, compact_hour, complete_hours, maintain
from spark_sink.lake import Lake, Rollup, read_table

STEP = 600.0  # ten-minute epochs: six per hour
E = 1_795_298_400 // int(STEP)  # the first epoch of an hour (1_795_298_400 s is a whole hour)
TREES = 2
ALL = [("wc", t, TREES) for t in range(TREES)]


def rows(epoch: int, tree: int, version: int = 0) -> list[tuple[str, int]]:
    return [(f"w{epoch % 50}-{tree}-{i}", i + 1 + version) for i in range(3)]


def write(lake: Lake, epochs: range, version: int = 0) -> Counter:
    want: Counter = Counter()
    for e in epochs:
        for t in range(TREES):
            lake.write(Rollup("wc", t, TREES, e, STEP, rows(e, t, version)))
            want.update((e, k, v) for k, v in rows(e, t, version))
    return want


def lake_rows(lake: Lake) -> Counter:
    table = read_table(lake, lake.files("wc"))
    return Counter((r["epoch"], r["key"], r["value"]) for r in table.to_pylist())


def parquet_files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*.parquet") if not p.name.startswith("."))


def test_compaction_keeps_every_row_once_and_is_idempotent(tmp_path: Path) -> None:
    lake = Lake(str(tmp_path))
    want = write(lake, range(E, E + 20))  # hours 0-2 complete, hour 3 current
    listed = [(f.epoch, f.tree) for f in lake.files("wc")]
    assert lake_rows(lake) == want and len(parquet_files(tmp_path)) == 40
    counts = maintain(lake, ALL, LakeMaintenance(grace=0))
    assert counts["hours_compacted"] == 3 * TREES and counts["files_compacted"] == 36
    assert counts["files_deleted"] == 36
    assert lake_rows(lake) == want  # same rows, none twice
    assert [(f.epoch, f.tree) for f in lake.files("wc")] == listed  # offsets unchanged
    files = parquet_files(tmp_path)
    assert len(files) == 3 * TREES + 2 * TREES  # one per hour and tree + the current hour
    before = {p: p.stat().st_mtime_ns for p in files}
    assert maintain(lake, ALL, LakeMaintenance(grace=0))["hours_compacted"] == 0
    assert {p: p.stat().st_mtime_ns for p in parquet_files(tmp_path)} == before  # unchanged


def test_a_write_interrupted_mid_file_leaves_a_temporary_file_that_is_swept(
    tmp_path: Path,
) -> None:
    """An agent killed while writing leaves ``.tmp-*.parquet`` (never read: hidden); the
    maintenance pass deletes it once it is older than the grace, not before."""
    lake = Lake(str(tmp_path))
    want = write(lake, range(E, E + 8))
    hour_dir = next(p.parent for p in parquet_files(tmp_path))
    leftover = hour_dir / ".tmp-0123456789abcdef.parquet"
    leftover.write_bytes(b"PAR1 half a file")
    assert lake_rows(lake) == want  # readers never see it
    maintain(lake, ALL, LakeMaintenance(grace=3600))
    assert leftover.exists()  # maybe a write still under way
    later = time.time() + 7200
    maintain(lake, ALL, LakeMaintenance(grace=3600), now=later)
    assert not leftover.exists()
    assert lake_rows(lake) == want


def test_replaced_files_stay_for_the_grace_period_but_are_never_read_twice(
    tmp_path: Path,
) -> None:
    lake = Lake(str(tmp_path))
    want = write(lake, range(E, E + 8))
    counts = maintain(lake, ALL, LakeMaintenance(grace=3600))
    assert counts["files_compacted"] == 12 and counts["files_deleted"] == 0
    assert len(parquet_files(tmp_path)) == 16 + TREES  # stale copies still there...
    assert lake_rows(lake) == want  # ...and not listed
    later = time.time() + 7200
    assert maintain(lake, ALL, LakeMaintenance(grace=3600), now=later)["files_deleted"] == 12


def test_a_later_version_of_a_compacted_epoch_wins_and_is_folded_in(tmp_path: Path) -> None:
    lake = Lake(str(tmp_path))
    want = write(lake, range(E, E + 8))
    maintain(lake, ALL, LakeMaintenance(grace=0))
    lake.write(Rollup("wc", 1, TREES, E + 2, STEP, rows(E + 2, 1, version=10), version=2))
    # versions decide, not modification times: the new version's mtime is set *older* than
    # the compaction (another host's clock behind, a restored copy) and it still wins
    (newer,) = tmp_path.rglob(f"epoch-{E + 2}-tree-1-of-{TREES}-v2.parquet")
    os.utime(newer, (1_000_000, 1_000_000))
    want -= Counter((E + 2, k, v) for k, v in rows(E + 2, 1))
    want += Counter((E + 2, k, v) for k, v in rows(E + 2, 1, version=10))
    assert lake_rows(lake) == want  # the newer epoch file, not the compacted rows
    hour = next((f.date, f.hour) for f in lake.files("wc") if f.epoch == E + 2)
    assert compact_hour(lake, "wc", hour, 1, TREES) == 1
    assert lake_rows(lake) == want
    (listed,) = [f for f in lake.files("wc") if f.epoch == E + 2 and f.tree == 1]
    assert listed.compacted and listed.version == 2
    # the same version pushed again after the compaction (a master that died before telling
    # its standby): its epoch file still holds these rows, so nothing is written; the next
    # pass sweeps that file (the compacted one holds its version)
    files_before = sorted(tmp_path.rglob("*.parquet"))
    lake.write(Rollup("wc", 1, TREES, E + 2, STEP, rows(E + 2, 1, version=10), version=2))
    assert sorted(tmp_path.rglob("*.parquet")) == files_before
    assert lake_rows(lake) == want
    counts = maintain(lake, ALL, LakeMaintenance(grace=0))
    assert (counts["files_compacted"], counts["files_deleted"]) == (0, 1)
    assert lake_rows(lake) == want
    # an older version pushed again (a slow retry) is stale at once, whatever its mtime
    lake.write(Rollup("wc", 1, TREES, E + 2, STEP, rows(E + 2, 1), version=1))
    assert lake_rows(lake) == want
    assert maintain(lake, ALL, LakeMaintenance(grace=0))["files_compacted"] == 0


def test_compacted_files_from_before_versions_compare_by_mtime(tmp_path: Path) -> None:
    """A compacted footer written before versions maps epochs to mtimes: a version-1 file is
    stale unless newer than that, a higher version always wins."""
    lake = Lake(str(tmp_path))
    want = write(lake, range(E, E + 8))
    maintain(lake, ALL, LakeMaintenance(grace=3600))
    for compacted in tmp_path.rglob("compact-tree-*.parquet"):
        table = pq.read_table(compacted)
        meta = dict(table.schema.metadata)
        sources = json.loads(meta[b"elf.sources"])
        meta[b"elf.sources"] = json.dumps({e: 10**18 for e in sources}).encode()
        pq.write_table(table.replace_schema_metadata(meta), compacted)
    assert lake_rows(lake) == want  # stale v1 files (mtime < 10**18) stay hidden
    lake.write(Rollup("wc", 0, TREES, E + 1, STEP, rows(E + 1, 0, version=5), version=2))
    want -= Counter((E + 1, k, v) for k, v in rows(E + 1, 0))
    want += Counter((E + 1, k, v) for k, v in rows(E + 1, 0, version=5))
    assert lake_rows(lake) == want


def test_readers_during_compaction_see_exact_rows(tmp_path: Path) -> None:
    lake = Lake(str(tmp_path))
    want = write(lake, range(E, E + 26))
    seen: list[Counter] = []
    errors: list[BaseException] = []
    stop = threading.Event()
    compacted = threading.Event()

    read_after = threading.Event()  # the reader finished reads after the compaction too

    def reader() -> None:
        mine = Lake(str(tmp_path))
        while not stop.is_set():
            try:
                seen.append(lake_rows(mine))
            except BaseException as exc:  # recorded and asserted below
                errors.append(exc)
                read_after.set()
            if len(seen) >= 3 and compacted.is_set():
                read_after.set()

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        # compaction, then a pass with nothing to do; replaced files stay for the grace
        # period, which is what lets a reader that listed them just before still open them
        # (with grace 0 such a reader gets FileNotFoundError: loud, never wrong rows)
        for _ in range(2):
            maintain(lake, ALL, LakeMaintenance(grace=3600))
        compacted.set()
        assert read_after.wait(30), "the reader made no read after the compaction"
    finally:
        stop.set()
        thread.join()
    assert not errors, errors[:1]
    assert seen and all(s == want for s in seen)


def test_retention_drops_old_hours(tmp_path: Path) -> None:
    lake = Lake(str(tmp_path))
    write(lake, range(E, E + 20))
    end_of_hour_1 = (E + 12) * STEP  # hours 0 and 1 ended by then
    now = end_of_hour_1 + 86400  # one day later
    counts = maintain(lake, ALL, LakeMaintenance(grace=0, retention_days=1.0), now=now)
    assert counts["hours_dropped"] == 2
    assert {f.epoch for f in lake.files("wc")} == set(range(E + 12, E + 20))


def test_complete_hours_are_those_before_the_newest_epochs_hour(tmp_path: Path) -> None:
    lake = Lake(str(tmp_path))
    write(lake, range(E, E + 13))
    hours = complete_hours(lake.files("wc"), 0, TREES)
    assert len(hours) == 2  # hour 2 holds the newest epoch E + 12: not complete yet


def test_the_lake_writer_thread_compacts(tmp_path: Path) -> None:
    writer = LakeWriter(
        str(tmp_path / "lake"), tmp_path / "buf", maintenance=LakeMaintenance(every=3600, grace=0)
    )
    try:
        want: Counter = Counter()
        for e in range(E, E + 14):
            for t in range(TREES):
                writer.submit(Rollup("wc", t, TREES, e, STEP, rows(e, t)))
                want.update((e, k, v) for k, v in rows(e, t))
        assert writer.flush(30)
        writer.run_upkeep()
        wait_until(
            lambda: writer.stats()["files_deleted"] >= 24, 30, "the writer's deletions", step=0.05
        )
        stats = writer.stats()
        assert stats["hours_compacted"] == 2 * TREES and stats["files_deleted"] == 24, stats
        assert lake_rows(Lake(str(tmp_path / "lake"))) == want
    finally:
        writer.close()


# ---- the real Spark data source -----------------------------------------------------------


def spark_rows(df: Any) -> Counter:
    return Counter((r["epoch"], r["key"], r["value"]) for r in df.collect())


def run_stream(spark: Any, lake_dir: str, out: Path, checkpoint: Path) -> None:
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


def test_spark_batch_and_stream_read_the_same_rows_across_compaction(
    spark: Any, tmp_path: Path
) -> None:
    pytest.importorskip("pyspark")
    lake_dir = tmp_path / "lake"
    lake = Lake(str(lake_dir))
    out, checkpoint = tmp_path / "out", tmp_path / "cp"
    want = write(lake, range(E, E + 9))
    batch = spark.read.format("elf").option("job", "wc").load(str(lake_dir))
    assert spark_rows(batch) == want
    run_stream(spark, str(lake_dir), out, checkpoint)  # delivers E..E+8
    # compaction of the complete hour (keeping the replaced files for the grace period)
    assert maintain(lake, ALL, LakeMaintenance(grace=3600))["files_compacted"] == 12
    batch = spark.read.format("elf").option("job", "wc").load(str(lake_dir))
    assert spark_rows(batch) == want
    ranged = (
        spark.read.format("elf").option("job", "wc").option("startEpoch", E + 2)
        .option("endEpoch", E + 3).load(str(lake_dir))
    )  # fmt: skip
    assert spark_rows(ranged) == Counter({r: n for r, n in want.items() if E + 2 <= r[0] <= E + 3})
    # the stream restarted from its checkpoint after compaction: new epochs only, once
    want += write(lake, range(E + 9, E + 14))
    later = time.time() + 7200
    counts = maintain(lake, ALL, LakeMaintenance(grace=3600), now=later)
    assert counts["files_compacted"] == 12  # hour 1 is complete now
    assert counts["files_deleted"] == 24  # the grace period of both hours is over
    run_stream(spark, str(lake_dir), out, checkpoint)
    assert spark_rows(spark.read.parquet(str(out))) == want
    # a fresh stream over the compacted lake reads everything once
    out2, checkpoint2 = tmp_path / "out2", tmp_path / "cp2"
    run_stream(spark, str(lake_dir), out2, checkpoint2)
    assert spark_rows(spark.read.parquet(str(out2))) == want
    assert os.path.isdir(lake_dir)
