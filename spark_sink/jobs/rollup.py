"""Hourly and daily roll-ups of one job's epochs: Spark aggregation over the lake, written
back as Parquet.

Contract: :func:`roll_up` groups a job's rows by period (``date_trunc`` of ``epoch_start``,
UTC) and key columns (the footer's ``elf.key_columns``; ``key_json`` when the key has no
typed column) and aggregates every numeric value column with ``--agg`` (``sum`` default —
right for counts and sums; ``min`` / ``max`` / ``avg`` otherwise). Output columns: ``job``,
``granularity``, ``period_start``, the key columns, the aggregated value columns, ``epochs``
(distinct epochs in the period that had the key) and ``date``; :func:`main` writes it to
``--out`` (default ``<lake>/_rollups/<job>/<granularity>``; Spark and the lake's listing skip
``_`` directories) as Parquet partitioned by ``date``, replacing earlier output.

    python -m spark_sink.jobs.rollup --lake /var/lib/elf/lake --job wc --granularity hour
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

from spark_sink.jobs.common import base_parser, column_roles
from spark_sink.lake import Lake

GRANULARITIES = ("hour", "day")
AGGS = ("sum", "min", "max", "avg")


def roll_up(spark: Any, lake: str, job: str, granularity: str = "hour", agg: str = "sum") -> Any:
    """The roll-up DataFrame (module contract)."""
    from pyspark.sql import functions as F

    if granularity not in GRANULARITIES:
        raise ValueError(f"granularity must be one of {GRANULARITIES}, got {granularity!r}")
    if agg not in AGGS:
        raise ValueError(f"agg must be one of {AGGS}, got {agg!r}")
    keys, values = column_roles(Lake(lake), job)
    df = spark.read.format("elf").option("job", job).load(lake)
    present = set(df.columns)
    keys = [k for k in keys if k in present] or ["key_json"]
    numeric = {"bigint", "int", "double", "float", "smallint", "tinyint"}
    types = dict(df.dtypes)
    values = [v for v in values if v in present and types[v] in numeric]
    fn = {"sum": F.sum, "min": F.min, "max": F.max, "avg": F.avg}[agg]
    period = F.date_trunc(granularity, F.col("epoch_start")).alias("period_start")
    out = (
        df.groupBy(period, *keys)
        .agg(*(fn(v).alias(v) for v in values), F.countDistinct("epoch").alias("epochs"))
        .select(
            F.lit(job).alias("job"),
            F.lit(granularity).alias("granularity"),
            "period_start",
            *keys,
            *values,
            "epochs",
            F.to_date("period_start").alias("date"),
        )
    )
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = base_parser("Hourly / daily roll-ups of one job's epochs, written as Parquet.")
    parser.add_argument("--job", required=True, help="The ELF job whose epochs to roll up.")
    parser.add_argument("--granularity", choices=GRANULARITIES, default="hour")
    parser.add_argument("--agg", choices=AGGS, default="sum")
    parser.add_argument("--out", help="Output directory (default <lake>/_rollups/JOB/GRAN).")
    args = parser.parse_args(argv)
    from spark_sink.session import get_session

    spark = get_session(args.master, app_name=f"elf-{args.granularity}ly-{args.job}")
    out = args.out or f"{args.lake.rstrip('/')}/_rollups/{args.job}/{args.granularity}"
    df = roll_up(spark, args.lake, args.job, args.granularity, args.agg)
    df.write.mode("overwrite").partitionBy("date").parquet(out)
    rows = spark.read.parquet(out).count()
    print(f"{args.granularity}ly roll-up of {args.job}: {rows} rows written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
