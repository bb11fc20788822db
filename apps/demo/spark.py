"""The demo's last step: the promotion-lift historical join in Spark over the rollup lake.

Contract: :func:`run_spark` writes the demo's catalogue (``<workdir>/catalogue.jsonl``) and a
generated past-sales table (28 days, ``<workdir>/sales.parquet``), then — when Java is
present — runs :func:`spark_sink.jobs.promotion_lift.promotion_lift` on a local Spark
session over micro-promotion's epochs in the lake and puts the top 10 rows and a note in the
state (``spark_rows``, ``spark_note``). The JVM's log goes to ``<workdir>/spark.log``, not
the screen. Missing Java is a warning (returns True); any other failure is an error note and
returns False. :func:`lake_files` counts the lake's Parquet files per job. pyspark, pyarrow
and ``spark_sink`` are imported only when called.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from apps.demo.jobs import PROMOTION
from apps.demo.state import DemoState
from apps.workload import json_line

SPARK_CONF = {"spark.log.level": "ERROR", "spark.ui.showConsoleProgress": "false"}


def lake_files(lake_dir: Path) -> dict[str, int]:
    """Parquet files per job in the lake."""
    from spark_sink.lake import Lake

    if not lake_dir.exists():
        return {}
    lake = Lake(str(lake_dir))
    return {job: len(lake.files(job)) for job in lake.jobs()}


def run_spark(st: DemoState, catalogue: list[dict[str, Any]]) -> bool:
    """The promotion-lift join over the lake; False only on an unexpected failure."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from spark_sink.jobs.promotion_lift import promotion_lift
    from spark_sink.jobs.sales import make_sales
    from spark_sink.session import JavaMissing, check_java, get_session

    workdir, lake_dir = st.workdir, st.lake_dir
    catalogue_path = workdir / "catalogue.jsonl"
    catalogue_path.write_text("".join(json_line(p) + "\n" for p in catalogue))
    sales_path = workdir / "sales.parquet"
    schema = pa.schema([("product", pa.string()), ("date", pa.date32()), ("units", pa.int64())])
    rows = make_sales(catalogue, 28, seed=st.config.seed)
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), sales_path)
    try:
        check_java()
    except JavaMissing as exc:
        st.spark_note = f"WARNING: Spark step skipped: {exc}"
        return True
    spark = None
    log_path = workdir / "spark.log"
    try:
        with _stderr_to(log_path):  # the JVM inherits it: its log4j chatter goes there
            spark = get_session("local[2]", app_name="elf-demo", conf=SPARK_CONF)
        cat = spark.read.json(str(catalogue_path))
        sales = spark.read.parquet(str(sales_path))
        ranking = promotion_lift(spark, str(lake_dir), cat, sales, job=PROMOTION)
        st.spark_rows = [r.asDict() for r in ranking.limit(10).collect()]
        st.spark_note = (
            f"Spark: promotion lift = micro-promotion's clicks per day (lake, "
            f"{lake_files(lake_dir).get(PROMOTION, 0)} epoch files) / past units sold per day "
            f"(28 days of sales) joined with the catalogue"
        )
        return True
    except Exception as exc:
        st.spark_note = f"ERROR: the Spark join failed: {exc} (JVM log: {log_path})"
        return False
    finally:
        if spark is not None:
            with contextlib.suppress(Exception):
                spark.stop()


@contextlib.contextmanager
def _stderr_to(path: Path) -> Iterator[None]:
    """Point file descriptor 2 at ``path`` (children started meanwhile keep it)."""
    sys.stderr.flush()
    saved = os.dup(2)
    with open(path, "ab") as f:
        os.dup2(f.fileno(), 2)
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
