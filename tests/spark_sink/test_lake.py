"""The lake's layout, schema and idempotency (pyarrow only), checked against the rows
written; hypothesis round-trips keys and values through the columns and the JSON columns."""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq
from hypothesis import given, settings
from hypothesis import strategies as st

from spark_sink.lake import (
    FIXED_NAMES,
    Lake,
    Rollup,
    complete_epochs,
    normalize,
    read_table,
    rollup_table,
)

EPOCH = 1_795_300_000  # 2026-11-21 22:26:40 UTC


def test_layout_is_partitioned_by_job_date_hour_and_named_by_tree_and_epoch(tmp_path: Path):
    lake = Lake(str(tmp_path))
    path = lake.write(Rollup("wc", 1, 4, EPOCH, 1.0, [("a", 1)]))
    rel = Path(path).relative_to(tmp_path)
    assert str(rel) == "job=wc/date=2026-11-21/hour=22/epoch-1795300000-tree-1-of-4-v1.parquet"
    assert [f.name for f in tmp_path.rglob("*") if f.name.startswith(".")] == []  # no temp left


def test_duplicate_pushes_replace_the_file_and_a_new_version_is_a_new_file(tmp_path: Path):
    lake = Lake(str(tmp_path))
    first = Rollup("wc", 0, 1, EPOCH, 1.0, [("a", 1), ("b", 2)])
    lake.write(first)
    lake.write(first)  # a retried push of the same version
    rows = read_table(lake, lake.files("wc")).to_pylist()
    assert Counter((r["key"], r["value"]) for r in rows) == Counter({("a", 1): 1, ("b", 2): 1})
    # late data: version 2 of the epoch, tentative, naming the origin it still lacks
    lake.write(Rollup("wc", 0, 1, EPOCH, 1.0, [("a", 5)], version=2, tentative=True,
                      coverage=0.5, lacking=["ab12"]))  # fmt: skip
    rows = read_table(lake, lake.files("wc")).to_pylist()
    assert [(r["key"], r["value"], r["version"], r["lacking"]) for r in rows] == [
        ("a", 5, 2, ["ab12"])
    ]
    assert [(f.epoch, f.version) for f in lake.files("wc")] == [(EPOCH, 2)]
    assert [(f.epoch, f.version) for f in lake.versions("wc")] == [(EPOCH, 1), (EPOCH, 2)]
    assert len(list(tmp_path.rglob("*.parquet"))) == 2  # v1 kept for streaming readers
    lake.write(first)  # an older version pushed again (a slow retry) changes nothing read
    assert [f.version for f in lake.files("wc")] == [2]


def test_the_footer_names_the_policy_that_produced_the_result_outside_the_digest() -> None:
    """``elf.result`` says which fault-tolerance policy produced the result; rows and flags
    alone make the digest, so the same rows under another policy are the same content."""
    rows = [("a", 1), ("b", 2)]
    passive = rollup_table(Rollup("wc", 0, 1, EPOCH, 1.0, rows, policy="passive"))
    replicated = rollup_table(Rollup("wc", 0, 1, EPOCH, 1.0, rows, policy="replicated:2"))
    unknown = rollup_table(Rollup("wc", 0, 1, EPOCH, 1.0, rows))

    def meta(table):
        return json.loads(table.schema.metadata[b"elf.result"])

    assert meta(passive)["policy"] == "passive"
    assert meta(replicated)["policy"] == "replicated:2"
    assert "policy" not in meta(unknown)
    assert len({meta(t)["digest"] for t in (passive, replicated, unknown)}) == 1


def test_files_without_a_version_read_as_version_one(tmp_path: Path):
    """A lake written before versions: unversioned names and no version / lacking columns."""
    lake = Lake(str(tmp_path))
    table = rollup_table(Rollup("wc", 0, 1, EPOCH, 1.0, [("a", 1)]))
    old = table.drop(["version", "lacking"])
    final = tmp_path / "job=wc/date=2026-11-21/hour=22/epoch-1795300000-tree-0-of-1.parquet"
    final.parent.mkdir(parents=True)
    pq.write_table(old, final)
    (f,) = lake.files("wc")
    assert (f.epoch, f.version, f.path) == (EPOCH, 1, str(final))
    (row,) = read_table(lake, [f]).to_pylist()
    assert (row["version"], row["lacking"], row["key"]) == (1, [], "a")
    lake.write(Rollup("wc", 0, 1, EPOCH, 1.0, [("a", 7)], version=2))
    (row,) = read_table(lake, lake.files("wc")).to_pylist()
    assert (row["version"], row["value"]) == (2, 7)


def test_fixed_columns_and_completeness(tmp_path: Path):
    lake = Lake(str(tmp_path))
    lake.write(Rollup("j", 0, 2, EPOCH, 60.0, [("k", 1)]))
    lake.write(Rollup("j", 0, 2, EPOCH + 1, 60.0, []))  # an empty epoch still gets a file
    lake.write(Rollup("j", 1, 2, EPOCH + 1, 60.0, [("z", 3)]))
    files = lake.files("j")
    assert complete_epochs(files) == {EPOCH: False, EPOCH + 1: True}
    row = read_table(lake, files[:1]).to_pylist()[0]
    assert row["epoch_start"].timestamp() == EPOCH * 60.0
    assert row["epoch_end"].timestamp() == (EPOCH + 1) * 60.0
    assert (row["tentative"], row["coverage"], row["tree"], row["trees"]) == (False, 1.0, 0, 2)
    assert (row["version"], row["lacking"]) == (1, [])
    assert lake.jobs() == ["j"]


def test_epochs_after_a_runtime_length_change_carry_their_own_start_and_length(tmp_path: Path):
    from agent.jobs.schedule import EpochSchedule

    schedule = EpochSchedule(1.0).switched(60.0, EPOCH + 0.5)  # 60 s epochs from EPOCH + 1 on
    lake = Lake(str(tmp_path))
    for epoch in (EPOCH, EPOCH + 1, EPOCH + 2):
        start, seconds = schedule.start(epoch), schedule.seconds_of(epoch)
        lake.write(Rollup("s", 0, 1, epoch, seconds, [("k", 1)], start_time=start))
    rows = sorted(read_table(lake, lake.files("s")).to_pylist(), key=lambda r: r["epoch"])
    got = [(r["epoch_start"].timestamp(), r["epoch_end"].timestamp()) for r in rows]
    assert got == [(EPOCH, EPOCH + 1), (EPOCH + 1, EPOCH + 61), (EPOCH + 61, EPOCH + 121)]


def test_named_columns_for_tuple_keys_and_dict_values(tmp_path: Path):
    lake = Lake(str(tmp_path))
    rows = [(("p1", "shoes"), {"clicks": 7, "users": 2}), (("p2", "hats"), {"clicks": 3})]
    lake.write(Rollup("promo", 0, 1, EPOCH, 1.0, rows, key_names=["product", "directory"]))
    got = read_table(lake, lake.files("promo")).to_pylist()
    assert [(r["product"], r["directory"], r["clicks"], r["users"]) for r in got] == [
        ("p1", "shoes", 7, 2),
        ("p2", "hats", 3, None),
    ]


def test_unrepresentable_columns_fall_back_to_json(tmp_path: Path):
    lake = Lake(str(tmp_path))
    rows = [("a", 1 << 70), (7, "x"), (("t", 1), 2.5)]
    lake.write(Rollup("odd", 0, 1, EPOCH, 1.0, rows))
    got = read_table(lake, lake.files("odd")).to_pylist()
    assert [json.loads(r["key_json"]) for r in got] == ["a", 7, ["t", 1]]
    assert [json.loads(r["value_json"]) for r in got] == [1 << 70, "x", 2.5]


def test_schema_union_across_epochs_promotes_int_to_float(tmp_path: Path):
    lake = Lake(str(tmp_path))
    lake.write(Rollup("s", 0, 1, EPOCH, 1.0, [("a", 1)]))
    lake.write(Rollup("s", 0, 1, EPOCH + 1, 1.0, [("a", 1.5)]))
    table = read_table(lake, lake.files("s"))
    assert str(table.schema.field("value").type) == "double"
    assert table.column("value").to_pylist() == [1.0, 1.5]


keys = st.one_of(
    st.text(max_size=8),
    st.integers(-(1 << 62), 1 << 62),
    st.tuples(st.text(max_size=4), st.integers(0, 100)),
)
values = st.one_of(
    st.integers(-(1 << 62), 1 << 62),
    st.floats(allow_nan=False, allow_infinity=False),
    st.lists(st.integers(0, 9), max_size=4),
    st.fixed_dictionaries({"clicks": st.integers(0, 9), "rev": st.floats(0, 10)}),
)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(keys, values), max_size=20))
def test_json_columns_round_trip_every_key_and_value(rows: list) -> None:
    table = rollup_table(Rollup("h", 0, 1, EPOCH, 1.0, rows))
    got = table.to_pylist()
    assert [json.loads(r["key_json"]) for r in got] == [normalize(k) for k, _ in rows]
    for r, (_, v) in zip(got, rows, strict=True):
        back = json.loads(r["value_json"])
        if isinstance(v, float):
            assert math.isclose(back, v, rel_tol=0, abs_tol=0) or back == v
        else:
            assert back == normalize(v)
    assert set(table.column_names) >= FIXED_NAMES


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.text(max_size=6), st.integers(0, 1 << 40)), max_size=30))
def test_typed_columns_hold_scalar_rows(rows: list) -> None:
    table = rollup_table(Rollup("h", 0, 1, EPOCH, 1.0, rows))
    if rows:
        assert list(zip(table["key"].to_pylist(), table["value"].to_pylist(), strict=True)) == rows


def test_plain_parquet_footer_keeps_the_lake_path(tmp_path: Path):
    lake = Lake(f"file://{tmp_path}")
    path = lake.write(Rollup("u", 0, 1, EPOCH, 1.0, [("a", 1)]))
    assert pq.read_schema(path).metadata[b"elf.path"].decode().startswith("job=u/")


def test_named_result_rows_become_columns(tmp_path: Path):
    lake = Lake(str(tmp_path))
    pairs = [("p1", 7), ("p2", 3)]
    named = [{"product": "p1", "clicks": 7}, {"product": "p2", "clicks": 3}]
    lake.write(Rollup("mp", 0, 1, EPOCH, 1.0, pairs, named_rows=named))
    got = read_table(lake, lake.files("mp")).to_pylist()
    assert [(r["product"], r["clicks"]) for r in got] == [("p1", 7), ("p2", 3)]
    assert [json.loads(r["key_json"]) for r in got] == named
    assert {r["value_json"] for r in got} == {"null"}


def test_a_version_taken_by_other_rows_moves_to_the_next_free_version(tmp_path: Path):
    """Two masters of one job number versions independently (the old master restarted after
    its standby took over): the second writer's version 1 must not replace the first's file
    under a reader; it becomes version 2, and a retry of either write adds nothing."""
    lake = Lake(str(tmp_path))
    final = Rollup("wc", 0, 1, EPOCH, 1.0, [("a", 3), ("b", 1)])
    poorer = Rollup("wc", 0, 1, EPOCH, 1.0, [("a", 1)], tentative=True, coverage=0.5,
                    lacking=["ab12"])  # fmt: skip
    first = lake.write(final)
    before = pq.read_table(first).to_pylist()
    second = lake.write(poorer)
    assert second != first and second.endswith("-v2.parquet")
    assert pq.read_table(first).to_pylist() == before  # never rewritten under a reader
    assert [(f.version, f.path) for f in lake.versions("wc")] == [(1, first), (2, second)]
    (row,) = read_table(lake, lake.files("wc")).to_pylist()
    assert (row["key"], row["value"], row["tentative"], row["lacking"]) == ("a", 1, True, ["ab12"])
    assert lake.write(poorer) == second and lake.write(final) == first  # retries: no new file
    assert len(list(tmp_path.rglob("*.parquet"))) == 2
