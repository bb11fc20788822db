"""Fencing terms in the lake (two agents that both believed they were an epoch's master wrote
its v1 twice with different rows): hypothesis interleaves writes of (term, version, rows) by
several writers and checks the reader rule (highest (term, version)) against a reference, that
no (term, version) ever holds two row sets, and that a lower term than the lake holds is
fenced; two real processes race to write different rows at the same (term, version); files
named before terms read as term 0; compaction and the streaming source order by (term,
version) and a stream never goes back."""

from __future__ import annotations

import contextlib
import datetime as dt
import multiprocessing
import os
import queue
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spark_sink.compaction import compact_hour, sweep
from spark_sink.fencing import FencedWrite, list_directory
from spark_sink.lake import Lake, Rollup, read_epoch, read_rows, read_table, rollup_table
from spark_sink.lake_names import parse_epoch_name

STEP = 600.0
E = 1_795_298_400 // int(STEP)  # the first epoch of an hour
TREES = 2


def content(epoch: int, tree: int, c: int) -> list[tuple[str, int]]:
    """Row set number ``c`` of (epoch, tree): different ``c``, different rows."""
    return [(f"e{epoch % 7}-t{tree}-c{c}-{i}", 10 * c + i) for i in range(c % 3 + 1)]


def rollup(epoch: int, tree: int, term: int, version: int, c: int) -> Rollup:
    return Rollup("wc", tree, TREES, epoch, STEP, content(epoch, tree, c), term=term,
                  version=version)  # fmt: skip


def rows_of(lake: Lake, path: str, epoch: int, compacted: bool) -> frozenset:
    table = read_rows(lake, path, [epoch] if compacted else None)
    return frozenset((r["key"], r["value"]) for r in table.to_pylist())


def hour_of(epoch: int) -> tuple[str, int]:
    when = dt.datetime.fromtimestamp(epoch * STEP, dt.UTC)
    return f"{when:%Y-%m-%d}", when.hour


# ---- the reader rule and the writer's promises, by hypothesis ------------------------------

WRITES = st.lists(
    st.one_of(
        st.tuples(
            st.just("write"),
            st.integers(0, 2),  # writer
            st.integers(0, 2),  # epoch offset
            st.integers(0, TREES - 1),
            st.integers(0, 3),  # term
            st.integers(1, 3),  # version
            st.integers(0, 3),  # content
        ),
        st.tuples(st.just("compact"), st.integers(0, TREES - 1)),
        st.tuples(st.just("sweep")),
    ),
    max_size=25,
)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=WRITES)
def test_interleaved_writers_keep_every_promise(ops: list[tuple]) -> None:
    with tempfile.TemporaryDirectory() as root:
        writers = [Lake(root) for _ in range(3)]  # separate instances: separate caches
        reader = Lake(root)
        top_term: dict[tuple[int, int], int] = {}  # the highest term written per (e, t)
        current: dict[tuple[int, int], tuple[tuple[int, int], int]] = {}  # rank, content
        ever: dict[tuple[int, int, int, int], frozenset] = {}  # (e, t, term, v) → rows
        for op in ops:
            if op[0] == "compact":
                compact_hour(reader, "wc", hour_of(E), op[1], TREES)
            elif op[0] == "sweep":
                sweep(reader, "wc", hour_of(E), grace=0)
            else:
                _, w, i, tree, term, version, c = op
                key = (E + i, tree)
                if term < top_term.get(key, 0):
                    with pytest.raises(FencedWrite) as fenced:
                        writers[w].write(rollup(E + i, tree, term, version, c))
                    assert fenced.value.newer_term == top_term[key] > term
                    assert (fenced.value.epoch, fenced.value.term) == (E + i, term)
                    continue
                path = writers[w].write(rollup(E + i, tree, term, version, c))
                name = parse_epoch_name(Path(path).name)
                top_term[key] = max(top_term.get(key, 0), term)
                if name is not None:  # an epoch file holding this content
                    assert name.term == term and name.version >= version
                    assert rows_of(reader, path, E + i, False) == frozenset(content(E + i, tree, c))
                    if key not in current or name.rank > current[key][0]:
                        current[key] = (name.rank, c)
            # the reader rule: each (epoch, tree)'s highest (term, version), its rows
            listed = {(f.epoch, f.tree): f for f in reader.files("wc")}
            assert set(listed) == set(current)
            for key, (rank, c) in current.items():
                f = listed[key]
                assert f.rank == rank
                assert rows_of(reader, f.path, f.epoch, f.compacted) == frozenset(content(*key, c))
            # no (term, version) ever holds two row sets, whoever wrote it, whenever read
            for f in reader.versions("wc"):
                held = rows_of(reader, f.path, f.epoch, f.compacted)
                assert ever.setdefault((f.epoch, f.tree, f.term, f.version), held) == held
            # versions() is ordered by (term, version) within an (epoch, tree)
            ranks = [(f.epoch, f.tree, f.rank) for f in reader.versions("wc")]
            assert ranks == sorted(ranks)


def test_a_new_term_is_its_own_file_even_with_the_same_rows(tmp_path: Path) -> None:
    """Same content under a higher term is written: a stale lower-term writer could otherwise
    later out-version the content's only file."""
    lake = Lake(str(tmp_path))
    first = lake.write(rollup(E, 0, 1, 1, c=0))
    assert lake.write(rollup(E, 0, 1, 1, c=0)) == first  # a retry writes nothing
    second = lake.write(rollup(E, 0, 2, 1, c=0))
    assert second != first and Path(second).name.endswith("-t2-v1.parquet")
    assert lake.write(rollup(E, 0, 2, 1, c=1)).endswith("-t2-v2.parquet")  # v1 taken
    with pytest.raises(FencedWrite) as fenced:
        lake.write(rollup(E, 0, 1, 9, c=0))
    assert fenced.value.newer_term == 2 and "-t2-" in fenced.value.path
    assert [f.rank for f in lake.versions("wc")] == [(1, 1), (2, 1), (2, 2)]
    (f,) = lake.files("wc")
    assert f.rank == (2, 2)
    table, meta = read_epoch(lake, f)
    assert (meta["term"], meta["version"], meta["partial"]) == (2, 2, False)
    assert set(table.column("term").to_pylist()) == {2}


def test_partial_results_carry_the_flag_and_their_own_digest(tmp_path: Path) -> None:
    lake = Lake(str(tmp_path))
    base = Rollup("wc", 0, 1, E, STEP, [("a", 1)], term=3, coverage=0.5, lacking=["ab"])
    lake.write(base)
    partial = Rollup("wc", 0, 1, E, STEP, [("a", 1)], term=3, coverage=0.5, lacking=["ab"],
                     partial=True)  # fmt: skip
    # the same rows, now partial (an origin retired): other content, so the next version
    assert lake.write(partial).endswith("-t3-v2.parquet")
    (f,) = lake.files("wc")
    (row,) = read_table(lake, [f]).to_pylist()
    assert (row["partial"], row["tentative"], row["coverage"], row["lacking"]) == (
        True, False, 0.5, ["ab"]
    )  # fmt: skip
    _, meta = read_epoch(lake, f)
    assert meta["partial"] is True and meta["term"] == 3
    digests = [rollup_table(r).schema.metadata[b"elf.result"] for r in (base, partial)]
    assert digests[0] != digests[1]
    # a retry of the non-partial v1 is recognised by its digest: nothing new is written
    files = sorted(tmp_path.rglob("*.parquet"))
    assert lake.publish(rollup_table(base)).endswith("-t3-v1.parquet")
    assert sorted(tmp_path.rglob("*.parquet")) == files


def test_files_named_before_terms_read_as_term_zero(tmp_path: Path) -> None:
    lake = Lake(str(tmp_path))
    old = rollup_table(Rollup("wc", 0, 1, E, STEP, [("a", 1)]))
    old = old.drop(["term", "partial", "version", "lacking"])
    hour = tmp_path / "job=wc/date=2026-11-21/hour=22"
    hour.mkdir(parents=True)
    pq.write_table(old, hour / f"epoch-{E}-tree-0-of-1.parquet")  # no -t, no -v
    (f,) = lake.files("wc")
    assert (f.term, f.version) == (0, 1)
    (row,) = read_table(lake, [f]).to_pylist()
    assert (row["term"], row["version"], row["partial"], row["key"]) == (0, 1, False, "a")
    # a term-0 write of other rows does not take (0, 1): that name is held
    assert lake.write(Rollup("wc", 0, 1, E, STEP, [("a", 2)])).endswith("-v2.parquet")
    # version 5 of term 0 is still below version 1 of term 1
    lake.write(Rollup("wc", 0, 1, E, STEP, [("a", 5)], version=5))
    lake.write(Rollup("wc", 0, 1, E, STEP, [("a", 7)], term=1))
    (row,) = read_table(lake, lake.files("wc")).to_pylist()
    assert (row["term"], row["version"], row["value"]) == (1, 1, 7)
    assert [f.rank for f in lake.versions("wc")] == [(0, 1), (0, 2), (0, 5), (1, 1)]
    with pytest.raises(FencedWrite):
        lake.write(Rollup("wc", 0, 1, E, STEP, [("a", 9)], version=9))


def test_compaction_records_terms_and_fences_through_the_compacted_file(tmp_path: Path) -> None:
    lake = Lake(str(tmp_path))
    for v in (1, 2, 3):
        lake.write(rollup(E, 0, 1, v, c=v))
    lake.write(rollup(E, 0, 2, 1, c=0))  # a newer master: version 1 of term 2 outranks t1 v3
    lake.write(rollup(E + 1, 0, 0, 1, c=0))
    assert compact_hour(lake, "wc", hour_of(E), 0, TREES) == 2
    assert sweep(lake, "wc", hour_of(E), grace=0) == 5  # every epoch file is superseded
    listed = {f.epoch: f for f in lake.files("wc")}
    assert listed[E].compacted and listed[E].rank == (2, 1)
    assert rows_of(lake, listed[E].path, E, True) == frozenset(content(E, 0, 0))
    # the compacted file holds term 2: a term-1 writer is fenced though no epoch file is left
    with pytest.raises(FencedWrite) as fenced:
        lake.write(rollup(E, 0, 1, 4, c=4))
    assert fenced.value.newer_term == 2 and "compact-tree-0" in fenced.value.path
    # term 2's v1 again with other rows: v1 is held (compacted), so it becomes v2 and wins
    assert lake.write(rollup(E, 0, 2, 1, c=5)).endswith("-t2-v2.parquet")
    assert {f.epoch: f.rank for f in lake.files("wc")}[E] == (2, 2)
    # a term 3 epoch file written with a clock far behind still wins over the compacted rows
    path = Path(lake.write(rollup(E + 1, 0, 3, 1, c=2)))
    os.utime(path, (1_000_000, 1_000_000))
    assert {f.epoch: f.rank for f in lake.files("wc")}[E + 1] == (3, 1)
    assert compact_hour(lake, "wc", hour_of(E), 0, TREES) == 2
    listed = {f.epoch: f for f in lake.files("wc")}
    assert listed[E].rank == (2, 2) and listed[E + 1].rank == (3, 1)
    assert all(f.compacted for f in listed.values())


# ---- two processes racing for one (term, version) -------------------------------------------


def test_two_processes_racing_never_replace_each_others_rows(tmp_path: Path) -> None:
    here = str(Path(__file__).parent)
    sys.path.insert(0, here)  # spawned children copy sys.path when started
    try:
        import fence_worker

        ctx = multiprocessing.get_context("spawn")
        barrier, out = ctx.Barrier(2), ctx.Queue()
        epochs = 60
        procs = [
            ctx.Process(target=fence_worker.race, args=(str(tmp_path), w, epochs, barrier, out))
            for w in (1, 2)
        ]
        for p in procs:
            p.start()
    finally:
        sys.path.remove(here)
    results: dict[int, list] = {}
    deadline = time.monotonic() + 300
    while len(results) < len(procs):  # a child that dies fails the test now, not at 300 s
        assert time.monotonic() < deadline, "the racing writers did not finish"
        try:
            w, got = out.get(timeout=1)
            results[w] = got
        except queue.Empty:
            assert all(p.exitcode in (None, 0) for p in procs), [p.exitcode for p in procs]
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    lake = Lake(str(tmp_path))
    by_rank: dict[tuple[int, int], set[int]] = {}
    for f in lake.versions("race"):
        held = rows_of(lake, f.path, f.epoch, False)
        owners = [w for w in (1, 2) if held == frozenset(fence_worker.writer_rows(w, f.epoch))]
        assert len(owners) == 1, (f.path, held)  # one writer's rows, whole
        by_rank.setdefault(f.rank, set()).add(owners[0])
    # every epoch: each writer's rows in a file of its own, v1 and v2 of term 1
    assert by_rank == {(1, 1): {1, 2}, (1, 2): {1, 2}}
    assert len(lake.versions("race")) == 2 * epochs
    for w, got in results.items():
        assert len(got) == epochs
        for epoch, path in got:  # the path each write returned still holds its rows
            assert rows_of(lake, path, epoch, False) == frozenset(
                fence_worker.writer_rows(w, epoch)
            )
    assert not [p for p in tmp_path.rglob(".tmp-*")]  # no temporary file left behind


# ---- the streaming source orders by (term, version) and never goes back ----------------------


def stream_reader(root: str) -> Any:
    pytest.importorskip("pyspark")
    from spark_sink.datasource import ElfDataSource, ElfStreamReader

    source = ElfDataSource({"path": root, "job": "wc", "incompleteTimeout": "1e9"})
    return ElfStreamReader(source, pa.schema([]))


def micro_batch(reader: Any, offset: dict) -> tuple[dict, list[tuple[int, int, int, int]]]:
    end = reader.latestOffset(offset)
    got = []
    for partition in reader.partitions(offset, end):
        for path, epochs in partition.items:
            table = read_rows(reader.lake, path, epochs)
            got += {(r["epoch"], r["tree"], r["term"], r["version"]) for r in table.to_pylist()}
    return end, got


STREAM_OPS = st.lists(
    st.one_of(
        st.tuples(
            st.just("write"),
            st.integers(0, 5),
            st.integers(0, TREES - 1),
            st.integers(0, 3),
            st.integers(1, 3),
        ),
        st.tuples(st.just("batch")),
        st.tuples(st.just("compact"), st.integers(0, TREES - 1)),
        st.tuples(st.just("sweep")),
    ),
    max_size=30,
)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=STREAM_OPS)
def test_a_stream_never_goes_back_to_a_lower_term_or_version(ops: list[tuple]) -> None:
    with tempfile.TemporaryDirectory() as root:
        lake = Lake(root)
        reader = stream_reader(root)
        offset = reader.initialOffset()
        newest: dict[tuple[int, int], tuple[int, int]] = {}
        delivered: list[tuple[int, int, int, int]] = []
        passed_empty: set[int] = set()

        def run_batch() -> None:
            nonlocal offset
            before = offset["epoch"]
            offset, got = micro_batch(reader, offset)
            written = {e for e, _ in newest}
            passed_empty.update(
                e for e in range(E, E + 6) if before < e <= offset["epoch"] and e not in written
            )
            delivered.extend(got)

        for op in ops:
            if op[0] == "write":
                _, i, tree, term, version = op
                try:
                    path = lake.write(rollup(E + i, tree, term, version, c=version))
                except FencedWrite:
                    continue
                name = parse_epoch_name(Path(path).name)
                if name is not None:
                    key = (E + i, tree)
                    newest[key] = max(newest.get(key, (0, 0)), name.rank)
            elif op[0] == "batch":
                run_batch()
            elif op[0] == "compact":
                compact_hour(lake, "wc", hour_of(E), op[1], TREES)
            else:
                sweep(lake, "wc", hour_of(E), grace=0)
        for e in {e for e, _ in newest}:  # every started epoch completes
            for t in range(TREES):
                if (e, t) not in newest:
                    lake.write(rollup(e, t, 0, 1, c=1))
                    newest[(e, t)] = (0, 1)
        run_batch()
        run_batch()
        assert len(delivered) == len(set(delivered))
        for key in newest:
            mine = [(t, v) for e, tr, t, v in delivered if (e, tr) == key]
            assert mine == sorted(mine) and len(set(mine)) == len(mine)  # only ever up
            if key[0] not in passed_empty:
                assert mine and mine[-1] == newest[key], (key, mine, newest[key])


def test_a_stream_keeps_its_rank_when_a_higher_file_disappears(tmp_path: Path) -> None:
    """The offset never goes below what the stream delivered: a higher (term, version) that
    vanishes (an operator's hand, a restore) does not bring a lower one back."""
    lake = Lake(str(tmp_path))
    reader = stream_reader(str(tmp_path))
    for t in range(TREES):
        lake.write(rollup(E, t, 1, 3, c=1))
    offset, got = micro_batch(reader, reader.initialOffset())
    assert sorted(got) == [(E, 0, 1, 3), (E, 1, 1, 3)]
    assert offset.get("default") == [1, 3] and offset["versions"] == {}  # compact offset
    newer = Path(lake.write(rollup(E, 0, 2, 1, c=2)))
    offset, got = micro_batch(reader, offset)
    assert got == [(E, 0, 2, 1)]
    newer.unlink()  # (1, 3) is the highest in the lake again
    offset, got = micro_batch(reader, offset)
    assert got == [] and reader._delivered(offset, E, 0) == (2, 1)
    lake.write(rollup(E, 0, 2, 1, c=2))  # back: already delivered, not again
    offset, got = micro_batch(reader, offset)
    assert got == []


def test_offsets_written_before_terms_still_read(tmp_path: Path) -> None:
    reader = stream_reader(str(tmp_path))
    old = {"epoch": E, "versions": {f"{E}/0": 3, f"{E}/1": 0}}
    assert reader._delivered(old, E, 0) == (0, 3)
    assert reader._delivered(old, E, 1) == (0, 0)
    assert reader._delivered({"epoch": E, "versions": {}}, E, 1) == (0, 1)


def test_spark_stream_delivers_a_higher_term_and_batch_shows_it(spark: Any, tmp_path: Path) -> None:
    """The real ``elf`` source: a new master's term-1 version 1 outranks term 0's version 3,
    as new rows for the stream (its offset JSON holds [term, version]), the current result for
    batch reads; a stale writer of the old term is fenced and the stream sees nothing new."""
    lake_dir = tmp_path / "lake"
    lake = Lake(str(lake_dir))
    out, checkpoint = tmp_path / "out", tmp_path / "cp"

    def run() -> Counter:
        query = (
            spark.readStream.format("elf")
            .option("job", "wc")
            .load(str(lake_dir))
            .select("epoch", "tree", "term", "version", "key", "value")
            .writeStream.format("parquet")
            .option("path", str(out))
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        try:
            query.awaitTermination(120)
        finally:
            query.stop()
        rows = spark.read.parquet(str(out)).collect()
        return Counter((r["epoch"], r["tree"], r["term"], r["version"]) for r in rows)

    def expect(*ranks: tuple[int, int, int, int]) -> Counter:
        return Counter((e, tr, t, v) for e, tr, t, v in ranks for _ in content(e, tr, v))

    for t in range(TREES):
        lake.write(rollup(E, t, 0, 3, c=3))
    assert run() == expect((E, 0, 0, 3), (E, 1, 0, 3))
    lake.write(rollup(E, 1, 1, 1, c=1))
    with pytest.raises(FencedWrite):
        lake.write(rollup(E, 1, 0, 4, c=4))
    assert run() == expect((E, 0, 0, 3), (E, 1, 0, 3), (E, 1, 1, 1))
    batch = spark.read.format("elf").option("job", "wc").load(str(lake_dir)).collect()
    assert Counter((r["tree"], r["term"], r["version"]) for r in batch) == Counter(
        {(0, 0, 3): len(content(E, 0, 3)), (1, 1, 1): len(content(E, 1, 1))}
    )
    assert run() == expect((E, 0, 0, 3), (E, 1, 0, 3), (E, 1, 1, 1))  # nothing new


def test_a_listing_never_fails_while_a_twin_creates_or_deletes_the_directory(
    tmp_path: Path,
) -> None:
    """pyarrow's ``allow_not_found`` checks existence only after a failed listing, so a hour
    directory a racing writer creates in between made ``Lake.publish`` raise (a CI run). A
    thread creates and deletes the directory as fast as it can while it is listed."""
    hour = tmp_path / "hour=23"
    stop = threading.Event()

    def churn() -> None:
        while not stop.is_set():
            with contextlib.suppress(FileExistsError):
                hour.mkdir()
            with contextlib.suppress(FileNotFoundError):
                hour.rmdir()

    twin = threading.Thread(target=churn)
    twin.start()
    fs = pafs.LocalFileSystem()
    try:
        listings = [list_directory(fs, str(hour)) for _ in range(5000)]
        walks = [list_directory(fs, str(tmp_path), recursive=True) for _ in range(2000)]
    finally:
        stop.set()
        twin.join()
    assert all(listing == [] for listing in listings)  # nothing is ever written inside it
    assert {info.base_name for walk in walks for info in walk} <= {"hour=23"}
