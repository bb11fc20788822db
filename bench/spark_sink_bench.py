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
* **Monthly uniques from daily sketches** (issue 26): a month (``--quick``: a week) of daily
  epochs of ``SELECT page, approx_distinct(user) AS users FROM * GROUP BY page`` written by
  the product's path (CBT → ResultStore → LakeSink → lake), and the same raw lines as one
  Parquet and one JSON-lines file per day. Timed (median of ``--runs`` after a warm-up, one
  Spark session): monthly uniques per page by :func:`spark_sink.jobs.sketch_rollup.uniques`
  (``hll_union_agg`` over the daily sketches through ``format("elf")``) against the baseline
  ``count(DISTINCT user)`` re-scanning the raw lines (Parquet and JSON, schema given); the
  roll-up both through ``format("elf")`` and with ``reader="parquet"``, and a bare
  ``hll_union_agg`` SQL over the lake's Parquet (no reader rule, no flags: the floor).
  Reported: times, ratios, both answers per page with the relative error against 3 × the
  HLL's relative standard error, and the sketch bytes per (epoch, group) in the lake.

    python bench/spark_sink_bench.py [--quick] [--part all|write|visibility|uniques]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import random
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
# the product path from an ELF QL job to the lake without agents (shared with the tests)
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "spark_sink"))

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


UNIQUES_QUERY = "SELECT page, approx_distinct(user) AS users FROM * GROUP BY page"
DAY = 86_400
PAGES = [f"/page/{i}" for i in range(8)]


def day_lines(day: int, n: int, users: int) -> list[dict[str, Any]]:
    """One day's raw lines: ``users`` active users a day out of a pool that drifts by a
    tenth a day (so a month has several times a day's uniques), Zipf-ish pages."""
    rng = random.Random(f"uniques:{day}")
    lo = day * users // 10
    return [
        {
            "ts": day * DAY + i * DAY // n,
            "page": PAGES[min(len(PAGES) - 1, int(rng.expovariate(0.5)))],
            "user": f"u{lo + rng.randrange(users)}",
        }
        for i in range(n)
    ]


def write_uniques_data(work: Path, days: int, per_day: int, users: int) -> dict[str, Any]:
    """The lake (product path) and the raw lines (Parquet and JSON lines, a file a day);
    returns their locations and the exact monthly uniques per page."""
    from ql_lake import QLLake  # tests/spark_sink: the agent's modules only for this part

    lake = Lake(str(work / "lake"))
    feed = QLLake(UNIQUES_QUERY, lake, work / "buf", name="uniq", epoch_seconds=DAY, tree=1)
    (work / "raw_parquet").mkdir()
    (work / "raw_json").mkdir()
    exact: dict[str, set[str]] = {p: set() for p in PAGES}
    # from 2026-11-01 (November: 30 days), so a month (or a week) is one calendar month
    first = int(dt.datetime(2026, 11, 1, tzinfo=dt.UTC).timestamp()) // DAY
    started = time.perf_counter()
    for day in range(first, first + days):
        lines = day_lines(day, per_day, users)
        for r in lines:
            exact[r["page"]].add(r["user"])
        feed.epoch(day, lines)
        table = pa.Table.from_pylist(lines)
        pq.write_table(table, work / "raw_parquet" / f"{day}.parquet")
        with open(work / "raw_json" / f"{day}.jsonl", "w") as fh:
            fh.writelines(json.dumps(r) + "\n" for r in lines)
    feed.close(600)
    return {
        "lake": str(work / "lake"),
        "raw_parquet": str(work / "raw_parquet"),
        "raw_json": str(work / "raw_json"),
        "exact": {p: len(u) for p, u in exact.items() if u},
        "generate_s": round(time.perf_counter() - started, 1),
    }


def _dir_bytes(path: str) -> int:
    return sum(f.stat().st_size for f in Path(path).rglob("*") if f.is_file())


def sketch_bytes(lake_dir: str) -> dict[str, Any]:
    """Bytes of the ``users_sketch`` binaries per (epoch, page) row of the lake, and the
    Parquet bytes of the lake against its rows."""
    lake = Lake(lake_dir)
    from spark_sink.lake import read_table

    table = read_table(lake, lake.files("uniq"))
    sizes = sorted(len(b) for b in table.column("users_sketch").to_pylist() if b)
    return {
        "groups": len(sizes),
        "sketch_bytes_per_group_median": sizes[len(sizes) // 2],
        "sketch_bytes_per_group_max": sizes[-1],
        "sketch_bytes_per_group_min": sizes[0],
        "lake_parquet_bytes_per_group": round(_dir_bytes(lake_dir) / len(sizes)),
    }


def _median_s(run: Any, runs: int) -> tuple[float, Any]:
    answer = run()  # warm-up: JVM code paths, Python workers, file listings
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        answer = run()
        times.append(time.perf_counter() - started)
    return round(statistics.median(times), 3), answer


def monthly_uniques(spark: Any, days: int, per_day: int, users: int, runs: int) -> dict[str, Any]:
    """Monthly uniques per page: sketches vs a re-scan of the raw lines (module docstring)."""
    from pyspark.sql import functions as F

    from cbt.sketches import hll_rse
    from spark_sink.jobs.sketch_rollup import uniques

    work = Path(tempfile.mkdtemp(prefix="elf-bench-uniques-"))
    data = write_uniques_data(work, days, per_day, users)

    def by_sketch(reader: str) -> Any:
        def run() -> dict[str, float]:
            df = uniques(spark, data["lake"], "uniq", "users", "month", keys=["page"],
                         reader=reader)  # fmt: skip
            rows = df.collect()
            assert all(r["complete"] for r in rows) and len(rows) == len(PAGES)  # one month
            return {r["page"]: r["uniques"] for r in rows}

        return run

    def by_sketch_parquet() -> dict[str, float]:
        df = spark.read.parquet(data["lake"]).where(F.col("job") == "uniq")
        rows = df.groupBy("page").agg(
            F.expr("hll_sketch_estimate(hll_union_agg(users_sketch))").alias("u")
        )
        return {r["page"]: r["u"] for r in rows.collect()}

    def by_rescan(fmt: str) -> Any:
        def run() -> dict[str, int]:
            if fmt == "parquet":
                df = spark.read.parquet(data["raw_parquet"])
            else:
                df = spark.read.schema("ts long, page string, user string").json(data["raw_json"])
            rows = df.groupBy("page").agg(F.countDistinct("user").alias("u")).collect()
            return {r["page"]: r["u"] for r in rows}

        return run

    sketch_s, sketch_answer = _median_s(by_sketch("elf"), runs)
    rollup_pq_s, rollup_pq_answer = _median_s(by_sketch("parquet"), runs)
    assert rollup_pq_answer == sketch_answer  # HLL unions are deterministic
    sketch_pq_s, _ = _median_s(by_sketch_parquet, runs)
    parquet_s, parquet_answer = _median_s(by_rescan("parquet"), runs)
    json_s, json_answer = _median_s(by_rescan("json"), runs)
    exact = data["exact"]
    assert parquet_answer == exact and json_answer == exact  # the baselines are exact
    bound = 3 * hll_rse(12)
    answers = {
        page: {
            "exact": exact[page],
            "sketch": round(sketch_answer[page], 1),
            "rel_err": round(abs(sketch_answer[page] - exact[page]) / exact[page], 5),
        }
        for page in sorted(exact)
    }
    worst = max(a["rel_err"] for a in answers.values())
    return {
        "days": days,
        "lines_per_day": per_day,
        "lines": days * per_day,
        "active_users_per_day": users,
        "generate_s": data["generate_s"],
        "runs": runs,
        "sketch_rollup_s": sketch_s,
        "sketch_rollup_parquet_reader_s": rollup_pq_s,
        "sketch_bare_sql_parquet_s": sketch_pq_s,
        "rescan_parquet_s": parquet_s,
        "rescan_json_s": json_s,
        "rollup_speedup_vs_parquet": round(parquet_s / sketch_s, 2),
        "rollup_speedup_vs_json": round(json_s / sketch_s, 2),
        "rollup_parquet_reader_speedup_vs_parquet": round(parquet_s / rollup_pq_s, 2),
        "rollup_parquet_reader_speedup_vs_json": round(json_s / rollup_pq_s, 2),
        "bare_sql_speedup_vs_parquet": round(parquet_s / sketch_pq_s, 2),
        "bare_sql_speedup_vs_json": round(json_s / sketch_pq_s, 2),
        "max_rel_err": worst,
        "bound_3rse": round(bound, 5),
        "within_bound": worst <= bound,
        "answers": answers,
        "raw_parquet_bytes": _dir_bytes(data["raw_parquet"]),
        "raw_json_bytes": _dir_bytes(data["raw_json"]),
        "lake_bytes": _dir_bytes(data["lake"]),
        **sketch_bytes(data["lake"]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="few epochs, small rollups")
    parser.add_argument("--epochs", type=int, default=None)
    parser.add_argument("--rows", type=int, default=1000, help="keys per epoch (visibility)")
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between epochs")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--part", choices=("all", "write", "visibility", "uniques"), default="all")
    parser.add_argument("--days", type=int, default=None, help="uniques: days (30; quick 7)")
    parser.add_argument("--lines", type=int, default=None, help="uniques: lines a day")
    parser.add_argument("--runs", type=int, default=None, help="uniques: timed runs (median)")
    args = parser.parse_args()
    epochs = args.epochs or (8 if args.quick else 30)
    from spark_sink.session import get_session

    out: dict[str, Any] = {
        "bench": "spark_sink",
        "quick": args.quick,
        "host": {"cpus": os.cpu_count(), "python": platform.python_version()},
    }
    if args.part in ("all", "write"):
        rates = [(200, 100), (20, 10_000)] if args.quick else [(1000, 100), (100, 10_000)]
        out["write_rate"] = [write_rate(n, r) for n, r in rates]
    if args.part == "write":
        print(json.dumps(out, indent=2))
        return
    spark = get_session(
        args.master, app_name="elf-bench", conf={"spark.sql.shuffle.partitions": "2"}
    )
    out["spark_version"] = spark.version
    if args.part in ("all", "visibility"):
        out["visibility"] = [
            visibility(spark, reader, epochs, args.rows, args.interval)
            for reader in ("elf", "parquet")
        ]
    if args.part in ("all", "uniques"):
        days = args.days or (7 if args.quick else 30)
        per_day = args.lines or (20_000 if args.quick else 100_000)
        runs = args.runs or (3 if args.quick else 5)
        out["monthly_uniques"] = monthly_uniques(spark, days, per_day, per_day // 4, runs)
    spark.stop()
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
