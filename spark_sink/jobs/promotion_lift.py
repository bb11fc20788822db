"""Rank micro-promotion's promoted products by lift: the lake's per-epoch top products joined
with a product catalogue and past sales.

Contract (:func:`promotion_lift`), per product that appears in the promotion job's rollups
(optionally only epochs in ``[since, until]``, epoch numbers):

* ``promo_clicks`` = Σ clicks over its epochs; ``promo_days`` = distinct UTC dates of those
  epochs; ``promo_epochs`` = distinct epochs;
* ``baseline_units_per_day`` = Σ units / distinct sale dates in the past-sales table (null
  when the product has no past sales);
* ``lift`` = (promo_clicks / promo_days) / baseline_units_per_day — promotion interest per
  day relative to normal demand (null without a baseline);
* catalogue columns ``name``, ``directory``, ``price`` (left join);
* ``rank`` 1.. by lift descending (nulls last), then promo_clicks descending, then product.

Inputs: the product column of the lake is ``product`` (named rows) else the key column
``key``; clicks are ``clicks`` else ``value``. Catalogue: ``product`` or ``product_id``,
``name``, ``directory``, ``price``. Sales: ``product`` (or ``product_id``), ``date``,
``units``. Side tables are Parquet, CSV or JSON lines (by suffix).

    python -m spark_sink.jobs.promotion_lift --lake L --catalogue cat.jsonl --sales sales.parquet
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

from spark_sink.jobs.common import base_parser, read_side_table

OUTPUT = (
    "rank",
    "product",
    "name",
    "directory",
    "price",
    "promo_clicks",
    "promo_days",
    "promo_epochs",
    "baseline_units_per_day",
    "lift",
)


def _with_product(df: Any) -> Any:
    if "product" not in df.columns and "product_id" in df.columns:
        return df.withColumnRenamed("product_id", "product")
    return df


def promotion_lift(
    spark: Any,
    lake: str,
    catalogue: Any,
    sales: Any,
    *,
    job: str = "micro-promotion",
    since: int | None = None,
    until: int | None = None,
) -> Any:
    """The ranking DataFrame (module contract), columns :data:`OUTPUT`."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    promos = spark.read.format("elf").option("job", job).load(lake)
    cols = set(promos.columns)
    product = "product" if "product" in cols else "key"
    clicks = "clicks" if "clicks" in cols else "value"
    if product not in cols or clicks not in cols:
        raise ValueError(
            f"job {job!r} in {lake}: needs a product column (product or key) and a clicks "
            f"column (clicks or value); the lake has {sorted(cols)}"
        )
    if since is not None:
        promos = promos.where(F.col("epoch") >= since)
    if until is not None:
        promos = promos.where(F.col("epoch") <= until)
    promo = (
        promos.where(F.col(product).isNotNull())
        .groupBy(F.col(product).cast("string").alias("product"))
        .agg(
            F.sum(clicks).cast("double").alias("promo_clicks"),
            F.countDistinct(F.to_date("epoch_start")).alias("promo_days"),
            F.countDistinct("epoch").alias("promo_epochs"),
        )
    )
    sales = _with_product(sales)
    baseline = sales.groupBy(F.col("product").cast("string").alias("product")).agg(
        (F.sum("units") / F.countDistinct("date")).cast("double").alias("baseline_units_per_day")
    )
    cat = _with_product(catalogue).select(
        F.col("product").cast("string").alias("product"),
        "name",
        "directory",
        F.col("price").cast("double").alias("price"),
    )
    joined = (
        promo.join(cat, "product", "left")
        .join(baseline, "product", "left")
        .withColumn(
            "lift",
            (F.col("promo_clicks") / F.col("promo_days")) / F.col("baseline_units_per_day"),
        )
    )
    order = Window.orderBy(
        F.col("lift").desc_nulls_last(), F.col("promo_clicks").desc(), F.col("product").asc()
    )
    return joined.withColumn("rank", F.row_number().over(order)).select(*OUTPUT).orderBy("rank")


def main(argv: Sequence[str] | None = None) -> int:
    parser = base_parser("Rank micro-promotion's promoted products by lift over past sales.")
    parser.add_argument("--job", default="micro-promotion", help="The promotion job's name.")
    parser.add_argument("--catalogue", required=True, help="Catalogue (Parquet/CSV/JSON lines).")
    parser.add_argument("--sales", required=True, help="Past sales (Parquet/CSV/JSON lines).")
    parser.add_argument("--since", type=int, help="First epoch to include.")
    parser.add_argument("--until", type=int, help="Last epoch to include.")
    parser.add_argument("--out", help="Write the ranking here as Parquet (default: print).")
    parser.add_argument("--top", type=int, default=20, help="Rows to print.")
    args = parser.parse_args(argv)
    from spark_sink.session import get_session

    spark = get_session(args.master, app_name="elf-promotion-lift")
    ranking = promotion_lift(
        spark,
        args.lake,
        read_side_table(spark, args.catalogue),
        read_side_table(spark, args.sales),
        job=args.job,
        since=args.since,
        until=args.until,
    )
    if args.out:
        ranking.write.mode("overwrite").parquet(args.out)
        print(f"promotion lift ranking written to {args.out}")
    ranking.show(args.top, truncate=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
