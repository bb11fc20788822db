"""Sketch roll-ups (spark_sink/jobs/sketch_rollup.py): eleven daily epochs of an ELF QL job
written by the product's path (CBT → ResultStore → LakeSink → lake), one of them tentative,
merged per day / week / month in local PySpark and compared with the exact answers over the
raw lines within the sketches' error; the tentative epoch's bucket says so; the CLI."""

from __future__ import annotations

import datetime as dt
import json
import random
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner
from ql_lake import QLLake  # tests/spark_sink (conftest)

from agent.cli import cli
from cbt.sketches import hll_rse, kll_rank_error
from spark_sink.jobs.sketch_rollup import RollupError, parse_time, percentiles, uniques
from spark_sink.lake import Lake

pytest.importorskip("pyspark")

QUERY = """SELECT g, approx_distinct(u) AS users, approx_percentile(v, 0.99) AS p99,
                  approx_top_k(item, 2) AS top, count(*) AS n
           FROM * GROUP BY g"""
DAY = 86_400
START = 1_795_300_000 - 1_795_300_000 % DAY  # 2026-11-21, a Saturday (UTC midnight)
DAYS = 11  # Sat 21 Nov .. Tue 1 Dec: weeks of 2, 7 and 2 days, two months
TENTATIVE = START // DAY + 4  # Wed 25 Nov: stored doubtful, so its lake version is tentative
TREE = 7
HLL_BOUND = 3 * hll_rse(12)  # relative, lg_k 12 (≈ 3 × 1.6 %)
KLL_BOUND = kll_rank_error(200)  # normalized rank error, k 200 (≈ 1.65 %)


def lines(epoch: int, n: int) -> list[dict[str, Any]]:
    rng = random.Random(epoch)
    # users drift over the days so a week has more uniques than any day
    return [
        {
            "g": rng.choice(["web", "app"]),
            "u": f"user{rng.randrange(epoch % 100 * 300, epoch % 100 * 300 + 6000)}",
            "v": rng.lognormvariate(3, 1),
            "item": rng.choice(["home", "cart"]),
        }
        for _ in range(n)
    ]


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict[int, list[dict]]]:
    """The lake path and the raw lines of each epoch."""
    tmp = tmp_path_factory.mktemp("rollup")
    feed = QLLake(
        QUERY, Lake(str(tmp / "lake")), tmp / "buf", name="sk", epoch_seconds=DAY, tree=TREE
    )
    raw: dict[int, list[dict]] = {}
    for epoch in range(START // DAY, START // DAY + DAYS):
        raw[epoch] = lines(epoch, 2500)
        feed.epoch(epoch, raw[epoch], doubtful=epoch == TENTATIVE)
    feed.close(60)
    return str(tmp / "lake"), raw


def bucket(epoch: int, grain: str) -> dt.datetime:
    day = dt.datetime.fromtimestamp(epoch * DAY, dt.UTC).replace(tzinfo=None)
    if grain == "week":
        return day - dt.timedelta(days=day.weekday())
    if grain == "month":
        return day.replace(day=1)
    return day


def truth(raw: dict[int, list[dict]], grain: str, skip: int | None = None) -> dict:
    """(bucket, g) → (exact uniques, sorted values); g None: every group."""
    users: dict[tuple, set] = defaultdict(set)
    values: dict[tuple, list] = defaultdict(list)
    for epoch, rows in raw.items():
        if epoch == skip:
            continue
        for r in rows:
            for g in (r["g"], None):
                users[(bucket(epoch, grain), g)].add(r["u"])
                values[(bucket(epoch, grain), g)].append(r["v"])
    return {k: (len(users[k]), np.sort(values[k])) for k in users}


def rank_error(values: np.ndarray, q: float, rank: float) -> float:
    n = len(values)
    lo = np.searchsorted(values, q, side="left") / n
    hi = np.searchsorted(values, q, side="right") / n
    return 0.0 if lo <= rank <= hi else min(abs(lo - rank), abs(hi - rank))


def flags(rows: list[Any]) -> dict[dt.datetime, tuple[int, int, bool]]:
    return {r["period_start"]: (r["bucket_epochs"], r["flagged_epochs"], r["complete"])
            for r in rows}  # fmt: skip


@pytest.mark.parametrize("grain", ["day", "week"])
def test_uniques_per_bucket_and_group_within_the_hll_bound(spark: Any, lake: Any, grain) -> None:
    path, raw = lake
    rows = uniques(spark, path, "sk", "users", grain, keys=["g"], include_tentative=True)
    rows = rows.collect()
    want = truth(raw, grain)
    got = {(r["period_start"], r["g"]): r for r in rows}
    assert set(got) == {k for k in want if k[1] is not None}
    for key, row in got.items():
        exact = want[key][0]
        assert abs(row["uniques"] - exact) <= HLL_BOUND * exact, (key, row["uniques"], exact)
    # the tentative epoch was merged, and its bucket says so; every other bucket is exact
    tentative = bucket(TENTATIVE, grain)
    for start, (epochs, flagged, complete) in flags(rows).items():
        assert (flagged, complete) == ((1, False) if start == tentative else (0, True))
        assert epochs == len({e for e in raw if bucket(e, grain) == start})
    if grain == "week":
        assert sorted(r["epochs"] for r in rows if r["g"] == "web") == [2, 2, 7]


def test_percentiles_per_week_within_the_kll_bound(spark: Any, lake: Any) -> None:
    path, raw = lake
    ps = (0.5, 0.9, 0.99)
    rows = percentiles(spark, path, "sk", "p99", "week", ps=ps, include_tentative=True).collect()
    want = truth(raw, "week")
    assert len(rows) == 3
    for row in rows:
        values = want[(row["period_start"], None)][1]
        assert row["n"] == len(values)  # every value of every group of the week
        for p in ps:
            assert rank_error(values, row[f"p{round(p * 100)}"], p) <= KLL_BOUND


def test_by_default_the_tentative_epoch_is_left_out_and_its_buckets_flagged(
    spark: Any, lake: Any
) -> None:
    path, raw = lake
    by_day = uniques(spark, path, "sk", "users_sketch", "day").collect()
    day = {r["period_start"]: r for r in by_day}
    assert len(day) == DAYS  # the left-out day still has its row, flagged
    gone = day[bucket(TENTATIVE, "day")]
    assert (gone["uniques"], gone["epochs"], gone["complete"]) == (None, 0, False)
    by_week = percentiles(spark, path, "sk", "p99", "week", ps=(0.5,)).collect()
    want = truth(raw, "week", skip=TENTATIVE)
    for row in by_week:
        values = want[(row["period_start"], None)][1]
        assert row["n"] == len(values)  # the tentative epoch's values are not in it
        assert rank_error(values, row["p50"], 0.5) <= KLL_BOUND
        assert row["complete"] == (row["period_start"] != bucket(TENTATIVE, "week"))


def test_month_buckets_and_a_time_range(spark: Any, lake: Any) -> None:
    path, _ = lake
    months = uniques(spark, path, "sk", "users", "month", include_tentative=True)
    months = months.orderBy("period_start").collect()
    assert [(r["period_start"].month, r["epochs"]) for r in months] == [(11, 10), (12, 1)]
    since, until = parse_time("2026-11-26"), parse_time("2026-11-28T00")
    rows = uniques(spark, path, "sk", "users", "day", since=since, until=until)
    rows = rows.orderBy("period_start").collect()
    assert [r["period_start"].day for r in rows] == [26, 27]
    assert all(r["complete"] for r in rows)
    with pytest.raises(RollupError, match="whole hours"):
        parse_time("2026-11-26T10:30")
    with pytest.raises(RollupError, match="no epoch starting in the range"):
        uniques(spark, path, "sk", "users", "day", since=parse_time("2027-01-01"))


def test_a_column_without_the_right_sketch_names_the_ones_that_have_it(
    spark: Any, lake: Any
) -> None:
    path, _ = lake
    with pytest.raises(RollupError, match=r"'n' has no sketch.*hll sketch: users \(users_sketch"):
        uniques(spark, path, "sk", "n", "day")
    with pytest.raises(RollupError, match=r"'p99' holds a kll_doubles sketch, not hll"):
        uniques(spark, path, "sk", "p99", "day")
    with pytest.raises(RollupError, match=r"'top' holds a frequent_strings.*p99 \(p99_sketch"):
        percentiles(spark, path, "sk", "top", "day")
    with pytest.raises(RollupError, match="no key column"):
        uniques(spark, path, "sk", "users", "day", keys=["nope"])
    with pytest.raises(RollupError, match="no epoch in the lake"):
        uniques(spark, path, "other", "users", "day")


def test_cli_prints_the_rollup_and_refuses_bad_arguments(spark: Any, lake: Any) -> None:
    path, _ = lake
    runner = CliRunner()
    base = ["spark", "uniques", "--lake", path, "--job", "sk", "--master", "local[2]"]
    result = runner.invoke(cli, [*base, "--column", "users", "--by", "week", "--key", "g"])
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in result.output.splitlines() if line.startswith("{")]
    assert len(rows) == 6 and {r["g"] for r in rows} == {"web", "app"}
    assert [r["complete"] for r in rows if r["g"] == "web"] == [True, False, True]
    out = Path(path).parent / "p.parquet"
    result = runner.invoke(
        cli,
        ["spark", "percentiles", "--lake", path, "--job", "sk", "--column", "p99", "--by",
         "day", "--p", "0.5,0.999", "--out", str(out)],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert set(spark.read.parquet(str(out)).columns) >= {"p50", "p99_9", "n", "complete"}
    for args, message in [
        (["--column", "n", "--by", "day"], "columns with a hll sketch: users (users_sketch)"),
        (["--column", "users", "--by", "fortnight"], "invalid choice: 'fortnight'"),
        (["--column", "users", "--by", "day", "--p", "0.5"], "--p applies to percentiles"),
        (["--column", "users", "--by", "day", "--since", "Tuesday"], "not a UTC date"),
        (["--by", "day"], "--column"),
    ]:
        result = runner.invoke(cli, [*base, *args])
        assert result.exit_code == 2, (args, result.output)
        assert message in result.output, (args, result.output)
    result = runner.invoke(cli, ["spark", "medians"])
    assert result.exit_code == 1 and "percentiles" in result.output and "uniques" in result.output


def test_the_parquet_reader_gives_the_rows_format_elf_gives(spark: Any, lake: Any) -> None:
    """The same rows, flags and HLL unions (deterministic); KLL merges depend on the order the
    sketches arrive in (random compactions), so the quantiles are held to the bound instead."""
    path, raw = lake
    kw: dict[str, Any] = {"keys": ["g"], "include_tentative": True}
    elf = uniques(spark, path, "sk", "users", "week", **kw).collect()
    pq_rows = uniques(spark, path, "sk", "users", "week", reader="parquet", **kw).collect()
    assert sorted(map(repr, pq_rows)) == sorted(map(repr, elf))
    elf = percentiles(spark, path, "sk", "p99", "day", ps=(0.5, 0.99)).collect()
    pq_rows = percentiles(spark, path, "sk", "p99", "day", ps=(0.5, 0.99), reader="parquet")
    pq_rows = pq_rows.collect()
    assert len(pq_rows) == len(elf) == DAYS

    def exact_part(r: Any) -> str:
        return repr({k: v for k, v in r.asDict().items() if k not in ("p50", "p99")})

    assert sorted(map(exact_part, pq_rows)) == sorted(map(exact_part, elf))
    want = truth(raw, "day", skip=TENTATIVE)
    for row in pq_rows:
        if row["n"] is not None:
            values = want[(row["period_start"], None)][1]
            assert rank_error(values, row["p50"], 0.5) <= KLL_BOUND
            assert rank_error(values, row["p99"], 0.99) <= KLL_BOUND


def hll_rollup(epoch: int, users: range, seconds: float = DAY) -> Any:
    import datasketches as ds

    from spark_sink.lake import Rollup

    hll = ds.hll_sketch(12, ds.tgt_hll_type.HLL_8)
    for u in users:
        hll.update(f"u{u}")
    row = {"g": "web", "users": hll.get_estimate(), "users_sketch": hll.serialize_compact()}
    return Rollup("sk", 0, 1, epoch, seconds, [], named_rows=[row])


def test_the_parquet_reader_keeps_only_the_current_version(spark: Any, tmp_path: Path) -> None:
    """Version 1 and version 2 of an epoch both in the lake: only version 2 is merged."""
    lake = Lake(str(tmp_path / "lake"))
    lake.write(hll_rollup(START // DAY, range(100)))
    lake.write(hll_rollup(START // DAY, range(1000)))  # other content: the next version
    assert [f.version for f in lake.versions("sk")] == [1, 2]
    for reader in ("elf", "parquet"):
        [row] = uniques(
            spark, str(tmp_path / "lake"), "sk", "users", "day", reader=reader
        ).collect()
        assert abs(row["uniques"] - 1000) <= HLL_BOUND * 1000, reader
        assert (row["epochs"], row["complete"]) == (1, True)
    with pytest.raises(RollupError, match="reader must be one of"):
        uniques(spark, str(tmp_path / "lake"), "sk", "users", "day", reader="csv")


def test_the_parquet_reader_reads_compacted_hours_by_the_rule(spark: Any, tmp_path: Path) -> None:
    """Two ten-minute epochs compacted into their hour's file, then a version 2 of the first:
    the first is read from its new epoch file, the second from the compacted file."""
    from spark_sink.compaction import compact_hour

    lake = Lake(str(tmp_path / "lake"))
    e = START // 600
    lake.write(hll_rollup(e, range(0, 500), 600.0))
    lake.write(hll_rollup(e + 1, range(500, 1000), 600.0))
    (hour,) = {(f.date, f.hour) for f in lake.files("sk")}
    assert compact_hour(lake, "sk", hour, 0, 1) == 2
    lake.write(hll_rollup(e, range(2000, 4000), 600.0))  # version 2 of the first epoch
    listed = {f.epoch: f.compacted for f in lake.files("sk")}
    assert listed == {e: False, e + 1: True}
    for reader in ("elf", "parquet"):
        [row] = uniques(
            spark, str(tmp_path / "lake"), "sk", "users", "hour", reader=reader
        ).collect()
        assert abs(row["uniques"] - 2500) <= HLL_BOUND * 2500, (reader, row["uniques"])
        assert (row["epochs"], row["complete"]) == (2, True)
