"""The lake keeps each sketch aggregate's DataSketches binary beside its estimate
(``<column>_sketch``, BINARY; footer ``elf.sketch_columns``), written by the product's own
path (an ELF QL job's results through LakeSink), and Spark reads them: a week of epoch files
merged with ``hll_union_agg`` and ``kll_merge_agg_double`` matches the exact answer over the
raw lines within the sketches' error."""

from __future__ import annotations

import json
import random
from collections import defaultdict
from pathlib import Path
from typing import Any

import datasketches as ds
import numpy as np
import pyarrow.parquet as pq
import pytest
from ql_lake import QLLake  # tests/spark_sink (conftest)

from cbt.sketches import hll_rse, kll_rank_error
from spark_sink.lake import Lake, read_table

QUERY = """SELECT g, approx_distinct(u) AS users, approx_percentile(v, 0.99) AS p99,
                  approx_percentile(v, ARRAY[0.5, 0.9]) AS ps, approx_top_k(item, 2) AS top,
                  count(*) AS n
           FROM * GROUP BY g"""
START = 1_795_300_000 - 1_795_300_000 % 86_400  # a UTC midnight
TREE = 111


def lines(epoch: int, n: int) -> list[dict[str, Any]]:
    rng = random.Random(epoch)
    out = []
    for _ in range(n):
        out.append(
            {
                "g": rng.choice(["web", "app"]),
                "u": f"user{rng.randrange(20_000)}",
                "v": rng.lognormvariate(3, 1),
                "item": rng.choice(["home", "home", "cart", "search", f"p{rng.randrange(50)}"]),
            }
        )
    return out


def write_lake(tmp_path: Path, epochs: int, per_epoch: int, epoch_seconds: int) -> tuple:
    """``epochs`` epochs of raw lines through the query's CBT into the lake (LakeSink)."""
    lake = Lake(str(tmp_path / "lake"))
    feed = QLLake(QUERY, lake, tmp_path / "buf", name="sk", epoch_seconds=epoch_seconds, tree=TREE)
    raw: list[dict[str, Any]] = []
    first = START // epoch_seconds
    for epoch in range(first, first + epochs):
        batch = lines(epoch, per_epoch)
        raw += batch
        feed.epoch(epoch, batch)
    feed.close(60)
    return lake, raw


def exact(raw: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    by_g: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in raw:
        by_g[r["g"]].append(r)
    return {
        g: {"users": len({r["u"] for r in rs}), "v": np.sort([r["v"] for r in rs]), "n": len(rs)}
        for g, rs in by_g.items()
    }


def rank_error(values: np.ndarray, q: float, rank: float) -> float:
    n = len(values)
    lo = np.searchsorted(values, q, side="left") / n
    hi = np.searchsorted(values, q, side="right") / n
    return 0.0 if lo <= rank <= hi else min(abs(lo - rank), abs(hi - rank))


def test_sketch_columns_are_the_binaries_beside_the_estimates(tmp_path: Path) -> None:
    lake, _ = write_lake(tmp_path, epochs=2, per_epoch=3000, epoch_seconds=3600)
    files = lake.files("sk")
    assert len(files) == 2
    table = read_table(lake, files)
    for name in ("users_sketch", "p99_sketch", "ps_sketch", "top_sketch"):
        assert str(table.schema.field(name).type) == "binary"
    meta = pq.read_schema(files[0].path).metadata
    assert json.loads(meta[b"elf.sketch_columns"]) == {
        "users_sketch": {"sketch": "hll", "estimate": "users"},
        "p99_sketch": {"sketch": "kll_doubles", "estimate": "p99"},
        "ps_sketch": {"sketch": "kll_doubles", "estimate": "ps"},
        "top_sketch": {"sketch": "frequent_strings", "estimate": "top"},
    }
    assert "users_sketch" not in json.loads(meta[b"elf.key_columns"])
    for row in table.to_pylist():
        assert "sketch" not in row["key_json"]  # the reported row: estimates only
        hll = ds.hll_sketch.deserialize(row["users_sketch"])
        assert hll.get_estimate() == row["users"]
        assert hll.lg_config_k == 12
        kll = ds.kll_doubles_sketch.deserialize(row["p99_sketch"])
        assert kll.get_quantile(0.99) == row["p99"] and kll.n == row["n"]
        fi = ds.frequent_strings_sketch.deserialize(row["top_sketch"])
        assert fi.total_weight == row["n"]


def test_spark_merges_a_week_of_epoch_files_within_the_sketch_error(
    spark: Any, tmp_path: Path
) -> None:
    """A week of daily epoch files (7 × 4,000 lines): Spark's hll_union_agg and
    kll_merge_agg_double over the lake's binaries against the exact answer over the raw
    lines."""
    lake, raw = write_lake(tmp_path, epochs=7, per_epoch=4000, epoch_seconds=86_400)
    assert len(lake.files("sk")) == 7
    # the product's reader (format("elf"): the current version of each epoch), binaries intact
    df = spark.read.format("elf").option("job", "sk").load(str(tmp_path / "lake"))
    df.createOrReplaceTempView("lake")
    got = {
        r["g"]: r
        for r in spark.sql(
            """SELECT g, hll_sketch_estimate(hll_union_agg(users_sketch)) AS users,
                      kll_sketch_get_quantile_double(kll_merge_agg_double(p99_sketch), 0.99)
                        AS p99,
                      kll_sketch_get_quantile_double(kll_merge_agg_double(ps_sketch),
                                                     array(0.5, 0.9)) AS ps,
                      kll_sketch_get_n_double(kll_merge_agg_double(p99_sketch)) AS n,
                      count(*) AS files
               FROM lake GROUP BY g"""
        ).collect()
    }
    truth = exact(raw)
    assert sorted(got) == sorted(truth)
    for g, want in truth.items():
        row = got[g]
        assert row["files"] == 7
        assert row["n"] == want["n"]
        # HLL: within 3 relative standard errors of lg_k 12 (Spark's estimate of the union)
        assert abs(row["users"] - want["users"]) <= 3 * hll_rse(12) * want["users"]
        bound = 2 * kll_rank_error(200)
        assert rank_error(want["v"], row["p99"], 0.99) <= bound
        for q, rank in zip(row["ps"], (0.5, 0.9), strict=True):
            assert rank_error(want["v"], q, rank) <= bound


def test_spark_cannot_combine_frequent_items_binaries(spark: Any, tmp_path: Path) -> None:
    """approx_top_k_combine takes the struct approx_top_k_accumulate makes (sketch, max items
    tracked, item type), not a bare frequent-items binary; and wrapped in that struct (768
    items tracked: Spark's map of 2**10 slots, the same as ours for k <= 256) the binary does
    not deserialize either: Spark's item serde for strings is not the layout DataSketches'
    C++ strings sketch writes. No interoperation for approx_top_k (docs/spark-sink.md)."""
    write_lake(tmp_path, epochs=1, per_epoch=500, epoch_seconds=86_400)
    spark.read.parquet(str(tmp_path / "lake")).createOrReplaceTempView("lake1")
    with pytest.raises(Exception, match=r"requires the \"STRUCT\" type"):
        spark.sql("SELECT approx_top_k_estimate(approx_top_k_combine(top_sketch)) FROM lake1")
    wrapped = """named_struct('sketch', top_sketch, 'maxItemsTracked', 768,
                     'itemDataType', CAST(NULL AS STRING),
                     'itemDataTypeDDL', 'item string not null')"""
    with pytest.raises(Exception, match="SketchesArgumentException"):
        spark.sql(
            f"SELECT approx_top_k_estimate(approx_top_k_combine({wrapped}), 2) FROM lake1"
        ).collect()


def test_a_sketch_column_without_any_sketch_is_still_binary() -> None:
    """A file whose groups all lack a sketch (the aggregate saw only NULLs) types the column
    binary all the same, so every file of the job agrees (a string column would turn the
    union of schemas to string and Spark's sketch functions would refuse it)."""
    from spark_sink.lake import Rollup, rollup_table

    named = [{"g": "a", "users": 0.0, "users_sketch": None}]
    table = rollup_table(Rollup("sk", 0, 1, 5, 60.0, [], named_rows=named))
    assert str(table.schema.field("users_sketch").type) == "binary"
    assert json.loads(table.column("key_json")[0].as_py()) == {"g": "a", "users": 0.0}
    meta = table.schema.metadata
    assert json.loads(meta[b"elf.sketch_columns"]) == {
        "users_sketch": {"sketch": None, "estimate": "users"}
    }
