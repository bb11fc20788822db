"""Runnable Spark jobs over the rollup lake: ``python -m spark_sink.jobs.<module>`` or
``elf spark <NAME>``.

* ``hourly`` / ``daily`` (:mod:`spark_sink.jobs.rollup`): a job's epochs aggregated per
  hour / day, written back as Parquet.
* ``promotion-lift`` (:mod:`spark_sink.jobs.promotion_lift`): micro-promotion's per-epoch top
  products joined with a product catalogue and past sales, promotions ranked by lift.
* ``percentiles`` / ``uniques`` (:mod:`spark_sink.jobs.sketch_rollup`): a job's KLL / HLL
  sketches merged per hour / day / week / month, exact-or-flagged.
* ``sales-table`` (:mod:`spark_sink.jobs.sales`): a deterministic past-sales table for a
  catalogue (demo input).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence

JOBS: dict[str, tuple[str, tuple[str, ...]]] = {
    "hourly": ("spark_sink.jobs.rollup", ("--granularity", "hour")),
    "daily": ("spark_sink.jobs.rollup", ("--granularity", "day")),
    "rollup": ("spark_sink.jobs.rollup", ()),
    "promotion-lift": ("spark_sink.jobs.promotion_lift", ()),
    "sales-table": ("spark_sink.jobs.sales", ()),
    "percentiles": ("spark_sink.jobs.sketch_rollup", ("percentiles",)),
    "uniques": ("spark_sink.jobs.sketch_rollup", ("uniques",)),
}


def job_main(name: str) -> Callable[[Sequence[str]], int]:
    """The ``main(argv)`` of a named job with its fixed arguments prepended; KeyError names
    the known jobs."""
    if name not in JOBS:
        raise KeyError(f"unknown Spark job {name!r}; known: {', '.join(sorted(JOBS))}")
    module, fixed = JOBS[name]
    main = importlib.import_module(module).main
    return lambda argv: main([*fixed, *argv])
