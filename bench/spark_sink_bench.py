"""Rollups into Spark: visibility latency and a master's write rate (prints JSON).

Measured in one run:

* **Visibility**: a master hands one epoch's rollup (``--rows`` keys) to the lake writer every
  ``--interval`` seconds (time t0); a Spark query polls the lake in a loop
  (``max(epoch)``) and the epoch is *visible* at the end of the first query that started
  after the file was in place and returns it. Reported: t0 → file written (the writer alone),
  and t0 → visible to Spark through ``format("elf")`` and, side by side in a second phase,
  through Spark's own Parquet reader (baseline), p50 / p99 in ms. The figure includes the
  duration of the polling query itself, which bounds what any reader can see.
* **Write rate**: rollup rows/s a single master's :class:`~spark_sink.buffer.LakeWriter`
  sustains (pairs → Arrow → Parquet → atomic rename), for small and large rollups, against
  the baseline of ``pyarrow.parquet.write_table`` of the same rows as a ready-made table.

    python bench/spark_sink_bench.py [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pyarrow as pa
import pyarrow.parquet as pq

from spark_sink.buffer import LakeWriter
from spark_sink.lake import Lake, Rollup


def pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))], 1)


def rows_for(epoch: int, n: int) -> list[tuple[str, int]]:
    return [(f"word-{(epoch * 7 + i) % (n * 3)}", i + 1) for i in range(n)]


def visibility(spark: Any, reader: str, epochs: int, rows: int, interval: float) -> dict[str, Any]:
    from pyspark.sql import functions as F

    from spark_sink.datasource import read_parquet

    work = tempfile.mkdtemp(prefix=f"elf-bench-{reader}-")
    lake_dir = f"{work}/lake"
    lake = Lake(lake_dir)
    written: dict[int, float] = {}
    submitted: dict[int, float] = {}
    seen: dict[int, float] = {}
    writer = LakeWriter(
        lake,
        f"{work}/buffer",
        on_written=lambda r, _p: written.__setitem__(r.epoch, time.time()),
    )
    base = 1_795_300_000
    # one epoch in place first, so the schema is known and the query compiles the same way
    writer.submit(Rollup("bench", 0, 1, base - 1, 1.0, rows_for(0, rows)))
    writer.flush(30)
    stop = threading.Event()
    queries: list[float] = []

    def query() -> int:
        if reader == "elf":
            df = spark.read.format("elf").option("job", "bench").load(lake_dir)
        else:
            df = read_parquet(spark, lake_dir, "bench")
        return int(df.agg(F.max("epoch")).collect()[0][0])

    for _ in range(3):  # warm up: Python workers, JIT, file listing caches
        query()

    def poll() -> None:
        while not stop.is_set():
            started = time.time()
            top = query()
            ended = time.time()
            queries.append((ended - started) * 1000)
            for e, w in list(written.items()):
                if e not in seen and e <= top and w <= started:
                    seen[e] = ended

    poller = threading.Thread(target=poll, daemon=True)
    poller.start()
    for i in range(epochs):
        epoch = base + i
        submitted[epoch] = time.time()
        writer.submit(Rollup("bench", 0, 1, epoch, 1.0, rows_for(epoch, rows)))
        time.sleep(interval)  # the epoch cadence being simulated, not synchronisation
    deadline = time.time() + 60
    while len(seen) < epochs and time.time() < deadline:
        time.sleep(0.05)
    stop.set()
    poller.join(60)
    writer.close()
    write_ms = [(written[e] - submitted[e]) * 1000 for e in submitted if e in written]
    vis_ms = [(seen[e] - submitted[e]) * 1000 for e in submitted if e in seen]
    return {
        "reader": reader,
        "epochs": epochs,
        "rows_per_epoch": rows,
        "visible": len(vis_ms),
        "write_ms_p50": pct(write_ms, 0.5),
        "write_ms_p99": pct(write_ms, 0.99),
        "visible_ms_p50": pct(vis_ms, 0.5),
        "visible_ms_p99": pct(vis_ms, 0.99),
        "poll_query_ms_p50": pct(queries, 0.5),
    }


def write_rate(rollups: int, rows: int) -> dict[str, Any]:
    work = tempfile.mkdtemp(prefix="elf-bench-rate-")
    lake = Lake(f"{work}/lake")
    writer = LakeWriter(lake, f"{work}/buffer")
    batches = [rows_for(i, rows) for i in range(rollups)]
    started = time.perf_counter()
    for i, pairs in enumerate(batches):
        writer.submit(Rollup("rate", 0, 1, 1_795_300_000 + i, 1.0, pairs))
    writer.flush(600)
    elapsed = time.perf_counter() - started
    writer.close()
    # baseline: the same rows as ready-made tables, written straight with pyarrow
    tables = [pa.table({"key": [k for k, _ in p], "value": [v for _, v in p]}) for p in batches]
    base_dir = Path(work) / "baseline"
    base_dir.mkdir()
    started = time.perf_counter()
    for i, t in enumerate(tables):
        pq.write_table(t, base_dir / f"{i}.parquet")
    base_elapsed = time.perf_counter() - started
    total = rollups * rows
    return {
        "rollups": rollups,
        "rows_per_rollup": rows,
        "lake_writer_rows_per_s": round(total / elapsed),
        "lake_writer_rollups_per_s": round(rollups / elapsed, 1),
        "baseline_pyarrow_rows_per_s": round(total / base_elapsed),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="few epochs, small rollups")
    parser.add_argument("--epochs", type=int, default=None)
    parser.add_argument("--rows", type=int, default=1000, help="keys per epoch (visibility)")
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between epochs")
    parser.add_argument("--master", default="local[2]")
    args = parser.parse_args()
    epochs = args.epochs or (8 if args.quick else 30)
    from spark_sink.session import get_session

    out: dict[str, Any] = {
        "bench": "spark_sink",
        "quick": args.quick,
        "host": {"cpus": os.cpu_count(), "python": platform.python_version()},
    }
    rates = [(200, 100), (20, 10_000)] if args.quick else [(1000, 100), (100, 10_000)]
    out["write_rate"] = [write_rate(n, r) for n, r in rates]
    spark = get_session(
        args.master, app_name="elf-bench", conf={"spark.sql.shuffle.partitions": "2"}
    )
    out["spark_version"] = spark.version
    out["visibility"] = [
        visibility(spark, reader, epochs, args.rows, args.interval) for reader in ("elf", "parquet")
    ]
    spark.stop()
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
