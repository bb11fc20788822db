"""The Spark jobs against pandas over the same inputs: promotion lift (lake × catalogue ×
past sales) and hourly / daily roll-ups written back as Parquet."""

from __future__ import annotations

import datetime as dt
import math
from pathlib import Path

import pandas as pd
import pytest

from spark_sink.jobs import job_main
from spark_sink.jobs.sales import make_sales
from spark_sink.lake import Lake, Rollup, read_table

pytest.importorskip("pyspark")

DAY0 = 1_795_219_200  # 2026-11-21 00:00:00 UTC
EPOCH_S = 600.0  # ten-minute epochs


def promo_lake(path: Path) -> None:
    lake = Lake(str(path))
    for i, start in enumerate([DAY0 + 3600, DAY0 + 7200, DAY0 + 86400 + 60]):
        epoch = int(start // EPOCH_S)
        top = [(f"P{j:06d}", 50 - 7 * j + i) for j in range(1, 5 + i)]
        named = [{"product": p, "clicks": c} for p, c in top]
        lake.write(Rollup("micro-promotion", 0, 1, epoch, EPOCH_S, top, named_rows=named))


def test_promotion_lift_equals_pandas(spark, tmp_path: Path) -> None:
    from spark_sink.jobs.promotion_lift import OUTPUT, promotion_lift

    promo_lake(tmp_path / "lake")
    catalogue = [
        {"product_id": f"P{j:06d}", "name": f"item {j}", "directory": "Books", "price": 5.0 + j}
        for j in range(1, 8)
    ]
    sales = [
        r for r in make_sales(catalogue, 5, end=dt.date(2026, 11, 20)) if r["product"] != "P000003"
    ]
    got = promotion_lift(
        spark,
        str(tmp_path / "lake"),
        spark.createDataFrame(pd.DataFrame(catalogue)),
        spark.createDataFrame(pd.DataFrame(sales)),
    ).toPandas()
    # pandas over the same inputs
    rows = read_table(
        Lake(str(tmp_path / "lake")), Lake(str(tmp_path / "lake")).files()
    ).to_pandas()
    rows["day"] = rows["epoch_start"].dt.date
    promo = rows.groupby("product").agg(
        promo_clicks=("clicks", "sum"),
        promo_days=("day", "nunique"),
        promo_epochs=("epoch", "nunique"),
    )
    s = pd.DataFrame(sales)
    base = s.groupby("product").agg(units=("units", "sum"), days=("date", "nunique"))
    promo["baseline_units_per_day"] = base["units"] / base["days"]
    promo["lift"] = promo["promo_clicks"] / promo["promo_days"] / promo["baseline_units_per_day"]
    cat = pd.DataFrame(catalogue).set_index("product_id")
    want = promo.join(cat).reset_index(names="product")
    want = want.sort_values(
        ["lift", "promo_clicks", "product"], ascending=[False, False, True], na_position="last"
    )
    want["rank"] = range(1, len(want) + 1)
    assert list(got.columns) == list(OUTPUT)
    assert list(got["product"]) == list(want["product"])
    for col in ("promo_clicks", "promo_days", "promo_epochs", "price"):
        assert list(got[col].astype(float)) == list(want[col].astype(float))
    for a, b in zip(got["lift"], want["lift"], strict=True):
        assert (pd.isna(a) and pd.isna(b)) or math.isclose(a, b, rel_tol=1e-12)
    assert pd.isna(got.set_index("product").loc["P000003", "lift"])  # no past sales: last


def test_hourly_and_daily_rollups_equal_pandas(spark, tmp_path: Path) -> None:
    lake = Lake(str(tmp_path / "lake"))
    for k in range(8):  # 8 epochs over 2 days, 2 trees
        start = DAY0 + k * 3 * 3600 + (k % 2) * 600
        for t in range(2):
            rows = [(f"w{(k + t + i) % 5}", k + i + 1) for i in range(3)]
            lake.write(Rollup("wc", t, 2, int(start // EPOCH_S), EPOCH_S, rows))
    frame = read_table(lake, lake.files("wc")).to_pandas()
    for name, freq in (("hourly", "h"), ("daily", "D")):
        out = tmp_path / name
        assert (
            job_main(name)(["--lake", str(tmp_path / "lake"), "--job", "wc", "--out", str(out)])
            == 0
        )
        got = spark.read.parquet(str(out)).toPandas()
        want = (
            frame.assign(period=frame["epoch_start"].dt.floor(freq))
            .groupby(["period", "key"])
            .agg(value=("value", "sum"), epochs=("epoch", "nunique"))
        )
        got_idx = got.assign(
            period=pd.to_datetime(got["period_start"]).dt.tz_localize(None)
        ).set_index(["period", "key"])[["value", "epochs"]]
        want.index = want.index.set_levels(want.index.levels[0].tz_localize(None), level=0)
        pd.testing.assert_frame_equal(
            got_idx.sort_index().astype("int64"), want.sort_index().astype("int64")
        )


def test_unknown_job_name_lists_the_known_ones() -> None:
    with pytest.raises(KeyError, match="promotion-lift"):
        job_main("nope")
