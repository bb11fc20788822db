"""Ingest benchmark: one agent host, end to end from a log file to the epoch snapshots, against
Spark (a warmed batch job and Structured Streaming) on the same lines and the same query.

For each format (JSON lines, nginx combined access logs) N click events from
:class:`~apps.workload.ClickstreamGenerator` are written to a temp dir (event times span
250 s from a multiple of 300 s, so the 300-s window ending at the last 30-s epoch holds every
line and its top-10 is the whole file's). Measured, in the same run:

* ``elf_fast`` — the product path with the ingest fast path: :class:`~agent.ingest.tail.FileTail`
  (1 MiB reads, chunk scan) with the prefilter and the projected access-log parser the runtime
  installs (:mod:`agent.ingest.fastpath`, :mod:`agent.ingest.projection`) → parser →
  ``Worker.process``
  (epoch clock, compiled QL map, CBT) → ``poll``/``finish`` (every epoch's window snapshot).
* ``elf_fast_2proc`` — the same fast path using both cores (:mod:`agent.runtime.parallel`): chunks
  are prefiltered, parsed and mapped on 2 worker processes; the epoch clock and the CBT run
  here in line order (identical results). The pool is started before timing.
* ``elf_slow`` — the same without the prefilter (every line parsed).
* ``read_split_floor`` — only reading the file and splitting it into lines (what any path
  pays in Python).
* ``spark_batch`` — ``local[2]``, explicit schema (JSON) / ``spark.read.text`` + regex
  (nginx), filter, group, count, order, limit 10; run once to warm, then timed (best of
  ``--repeats``).
* ``spark_streaming`` — Structured Streaming, ``local[2]``, file source over the same lines
  split into ``--stream-files`` files, ``maxFilesPerTrigger=1`` (one micro-batch per file),
  ``trigger(availableNow=True)``, complete-mode aggregation into a memory sink; timed from
  ``start()`` to the end of the last micro-batch.

Queries (ELF QL; Spark runs the same filter/group/count/order/limit): JSON lines —
``WHERE directory = 'Video Games' AND action = 'click' GROUP BY product_id``; nginx lines carry
the click's fields as query parameters, the directory as a URL slug
(``/product?id=..&dir=video-games&action=click..``), so
``WHERE query.dir = 'video-games' AND query.action = 'click' GROUP BY query.id``. Both
``ORDER BY clicks DESC LIMIT 10 WINDOW 300 s EVERY 30 s`` (no ``MODE SYNC``: a sliding window
runs in window mode). Every engine's top-10 is checked against a Counter over the generated
events (counts equal; ties at the cut may order differently).

    python bench/ingest_bench.py            # 2e6 lines per format
    python bench/ingest_bench.py --quick    # 2e5 lines per format (~2 min with Spark)
    python bench/ingest_bench.py --no-spark

Prints one JSON document on stdout (lines/s per engine and format, and the ratios).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import agent.jobs.ql_job  # noqa: F401  (registers the "ql" job class)
from agent.ingest.fastpath import prefilter_for
from agent.ingest.formats import make_parser
from agent.ingest.projection import projected_parser
from agent.ingest.tail import FileTail
from agent.jobs.job import create_job, parse_spec
from agent.jobs.ql_job import spec_from_query
from agent.runtime.parallel import ParallelFileIngest
from agent.runtime.worker import Worker
from apps.workload import ClickstreamGenerator, access_line, json_line

START = 1_699_999_800.0  # a multiple of 300 s: one window holds the 250 s of data
SPAN = 250.0
QUERIES = {
    "json": (
        "SELECT product_id AS product, count(*) AS clicks FROM clicks "
        "WHERE directory = 'Video Games' AND action = 'click' "
        "GROUP BY product_id ORDER BY clicks DESC LIMIT 10 WINDOW 300 s EVERY 30 s"
    ),
    "nginx": (
        "SELECT query.id AS product, count(*) AS clicks FROM clicks "
        "WHERE query.dir = 'video-games' AND query.action = 'click' "
        "GROUP BY query.id ORDER BY clicks DESC LIMIT 10 WINDOW 300 s EVERY 30 s"
    ),
}
WINDOW_EPOCH = int(START // 30) + 8  # the last epoch with data: its window holds all of it


# ---- CPU time (the machine is shared: lines per CPU-second is the steadier figure) --------
_TICK = os.sysconf("SC_CLK_TCK")


def proc_cpu(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` (all its threads), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICK


def spark_cpu(spark: Any) -> float:
    """CPU seconds so far of the Spark JVM (driver + local executors) and of this process."""
    proc = getattr(spark.sparkContext._gateway, "proc", None)
    jvm = proc_cpu(proc.pid) if proc is not None else 0.0
    return jvm + time.process_time()


# ---- data -------------------------------------------------------------------------------------
def generate(n: int, out: Path, stream_files: int) -> dict[str, Any]:
    """Write both formats (one file each, plus the same lines split for streaming); return the
    paths and the reference Counters."""
    events = ClickstreamGenerator(seed=1, start=START, rate=n / SPAN).take(n)
    ref = {
        "json": Counter(
            e["product_id"]
            for e in events
            if e["directory"] == "Video Games" and e["action"] == "click"
        ),
        "nginx": Counter(
            e["product_id"]
            for e in events
            if e["directory"] == "Video Games" and e["action"] == "click"
        ),
    }
    paths: dict[str, Any] = {}
    for fmt, render in (("json", json_line), ("nginx", access_line)):
        lines = [render(e) + "\n" for e in events]
        path = out / f"clicks.{fmt}"
        path.write_text("".join(lines))
        sdir = out / f"stream-{fmt}"
        sdir.mkdir()
        per = -(-len(lines) // stream_files)
        for i in range(stream_files):
            (sdir / f"part-{i:04d}.{fmt}").write_text("".join(lines[i * per : (i + 1) * per]))
        paths[fmt] = {"file": path, "stream_dir": sdir, "bytes": path.stat().st_size}
    return {"paths": paths, "ref": ref}


def top10(counter: Counter[str]) -> list[tuple[str, int]]:
    return sorted(counter.items(), key=lambda kv: (-kv[1], kv[0]))[:10]


def agrees(rows: list[tuple[str, int]], ref: Counter[str]) -> bool:
    """Same top-10 counts as the reference, and each row's count is its product's."""
    want = [c for _, c in top10(ref)]
    return [c for _, c in rows] == want and all(ref[p] == c for p, c in rows)


# ---- ELF --------------------------------------------------------------------------------------
def elf_run(path: Path, fmt: str, fast: bool) -> tuple[float, list[tuple[str, int]], dict]:
    """One end-to-end run: seconds, the window's top-10, the worker's and tail's counters and
    the CPU seconds."""
    spec = parse_spec(spec_from_query("micro", "bench", QUERIES[fmt]))
    job = create_job(spec)
    worker = Worker(job, wall_clock=lambda: START)
    c0, t0 = time.process_time(), time.perf_counter()
    tail = FileTail(path, parser=make_parser(fmt))
    if fast:  # what Agent._tick installs (agent.ingest.fastpath.install_prefilters)
        tail.prefilter = prefilter_for([job], fmt)
        assert tail.prefilter is not None
        tail.parser = projected_parser([job], fmt) or tail.parser
    snaps = []
    while True:
        batch = tail.poll()
        if not batch and not batch.skipped:
            break
        worker.process(batch, skipped=batch.skipped)
        snaps.extend(worker.poll())
    snaps.extend(worker.finish())
    elapsed, cpu = time.perf_counter() - t0, time.process_time() - c0
    tail.close()
    window = dict(snaps)[WINDOW_EPOCH]
    rows = [(r["product"], r["clicks"]) for r in job.result_rows(window.items())]
    return elapsed, rows, {"worker": worker.counters, "tail": tail.counters, "cpu": cpu}


def elf_parallel(
    path: Path, fmt: str, processes: int
) -> tuple[float, list[tuple[str, int]], dict[str, Any]]:
    """The fast path on ``processes`` worker processes (agent.runtime.parallel): parse and map
    there,
    clock and CBT here in line order. The pool is started and warmed before timing (an agent
    keeps its processes); its start-up time is reported apart."""
    spec = parse_spec(spec_from_query("micro", "bench", QUERIES[fmt]))
    job = create_job(spec)
    worker = Worker(job, wall_clock=lambda: START)
    t0 = time.perf_counter()
    ingest = ParallelFileIngest(path, worker, fmt, processes=processes)
    try:
        ingest.warm()
        started = time.perf_counter() - t0
        snaps: list[Any] = []
        c0, t0 = time.process_time(), time.perf_counter()
        ingest.run(snaps.extend)
        snaps.extend(worker.finish())
        elapsed = time.perf_counter() - t0
        main_cpu = time.process_time() - c0
    finally:
        ingest.close()
    window = dict(snaps)[WINDOW_EPOCH]
    rows = [(r["product"], r["clicks"]) for r in job.result_rows(window.items())]
    return elapsed, rows, {"pool_start_s": started, "main_cpu": main_cpu, **ingest.counters}


def read_split_floor(path: Path) -> tuple[float, float]:
    c0, t0 = time.process_time(), time.perf_counter()
    n = 0
    with open(path, "rb") as f:
        rest = b""
        while data := f.read(1 << 20):
            buf = rest + data
            cut = buf.rfind(b"\n")
            n += len(buf[:cut].split(b"\n"))
            rest = buf[cut + 1 :]
    return time.perf_counter() - t0, time.process_time() - c0


# ---- Spark ------------------------------------------------------------------------------------
NGINX_TARGET = r'^\S+ \S+ \S+ \[[^\]]*\] "\S+ (\S+)'


def spark_frame(spark: Any, fmt: str, source: str, streaming: bool) -> Any:
    """The query over ``source`` (a file, or a directory when streaming) as a DataFrame
    before ordering: (product, clicks)."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import DoubleType, StringType, StructField, StructType

    reader = spark.readStream.option("maxFilesPerTrigger", 1) if streaming else spark.read
    if fmt == "json":
        schema = StructType(
            [
                StructField("ts", DoubleType()),
                StructField("product_id", StringType()),
                StructField("directory", StringType()),
                StructField("action", StringType()),
            ]
        )
        df = reader.schema(schema).json(source)
        df = df.where((F.col("directory") == "Video Games") & (F.col("action") == "click"))
        return df.groupBy(F.col("product_id").alias("product")).agg(F.count("*").alias("clicks"))
    df = reader.text(source)
    target = F.regexp_extract("value", NGINX_TARGET, 1)
    df = df.select(
        F.regexp_extract(target, r"[?&]dir=([^&]*)", 1).alias("dir"),
        F.regexp_extract(target, r"[?&]action=([^&]*)", 1).alias("action"),
        F.regexp_extract(target, r"[?&]id=([^&]*)", 1).alias("product"),
    )
    df = df.where((F.col("dir") == "video-games") & (F.col("action") == "click"))
    return df.groupBy("product").agg(F.count("*").alias("clicks"))


def spark_batch(spark: Any, fmt: str, path: Path, repeats: int) -> tuple[float, list, float, float]:
    """(best seconds, top-10 rows, warm-up seconds, CPU seconds of the best run)."""
    from pyspark.sql import functions as F

    def run() -> tuple[float, list, float]:
        c0, t0 = spark_cpu(spark), time.perf_counter()
        df = spark_frame(spark, fmt, str(path), streaming=False)
        rows = df.orderBy(F.desc("clicks"), "product").limit(10).collect()
        elapsed, cpu = time.perf_counter() - t0, spark_cpu(spark) - c0
        return elapsed, [(r["product"], r["clicks"]) for r in rows], cpu

    warm = run()[0]
    best, rows, cpu = min((run() for _ in range(repeats)), key=lambda r: r[0])
    return best, rows, warm, cpu


def spark_streaming(spark: Any, fmt: str, sdir: Path, work: Path) -> tuple[float, list, int, float]:
    """(seconds from start() to the end of the last micro-batch, top-10, micro-batches, CPU
    seconds)."""
    name = f"elf_bench_{fmt}_{int(time.time() * 1000)}"
    df = spark_frame(spark, fmt, str(sdir), streaming=True)
    c0, t0 = spark_cpu(spark), time.perf_counter()
    q = (
        df.writeStream.outputMode("complete")
        .format("memory")
        .queryName(name)
        .option("checkpointLocation", str(work / f"ckpt-{name}"))
        .trigger(availableNow=True)
        .start()
    )
    q.awaitTermination()
    elapsed, cpu = time.perf_counter() - t0, spark_cpu(spark) - c0
    batches = len([p for p in q.recentProgress if p.get("numInputRows", 0) > 0])
    rows = spark.sql(f"SELECT * FROM {name} ORDER BY clicks DESC, product LIMIT 10").collect()
    return elapsed, [(r["product"], r["clicks"]) for r in rows], batches, cpu


# ---- main -------------------------------------------------------------------------------------
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="2e5 lines per format")
    ap.add_argument("--lines", type=int, default=None)
    ap.add_argument("--repeats", type=int, default=None)
    ap.add_argument("--stream-files", type=int, default=10)
    ap.add_argument("--no-spark", action="store_true")
    args = ap.parse_args()
    n = args.lines or (200_000 if args.quick else 2_000_000)
    repeats = args.repeats or (2 if args.quick else 3)
    report: dict[str, Any] = {
        "benchmark": "ingest",
        "lines_per_format": n,
        "repeats": repeats,
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "queries": QUERIES,
        "formats": {},
    }
    with tempfile.TemporaryDirectory(prefix="elf-ingest-") as tmp:
        work = Path(tmp)
        t0 = time.perf_counter()
        data = generate(n, work, args.stream_files)
        report["generate_s"] = round(time.perf_counter() - t0, 2)
        spark = None
        if not args.no_spark:
            from spark_sink.session import get_session

            t0 = time.perf_counter()
            spark = get_session(
                "local[2]",
                app_name="elf-ingest-bench",
                conf={"spark.sql.shuffle.partitions": "2"},
            )
            spark.sparkContext.setLogLevel("ERROR")
            report["spark_startup_s"] = round(time.perf_counter() - t0, 2)
        try:
            for fmt in ("json", "nginx"):
                report["formats"][fmt] = bench_format(fmt, data, n, repeats, spark, work)
        finally:
            if spark is not None:
                spark.stop()
    print(json.dumps(report, indent=2))


def bench_format(
    fmt: str, data: dict[str, Any], n: int, repeats: int, spark: Any, work: Path
) -> dict[str, Any]:
    paths, ref = data["paths"][fmt], data["ref"][fmt]
    out: dict[str, Any] = {"file_bytes": paths["bytes"], "matching_lines": sum(ref.values())}
    fast = [elf_run(paths["file"], fmt, fast=True) for _ in range(repeats)]
    slow = [elf_run(paths["file"], fmt, fast=False) for _ in range(max(1, repeats - 1))]
    floor_s, floor_cpu = min(read_split_floor(paths["file"]) for _ in range(repeats))
    f_s, f_rows, f_counters = min(fast, key=lambda r: r[0])
    s_s, s_rows, s_counters = min(slow, key=lambda r: r[0])
    engines: dict[str, Any] = {
        "elf_fast": {
            **_rates(n, f_s, f_counters["cpu"]),
            "top10_agrees": agrees(f_rows, ref),
            "prefiltered_lines": f_counters["tail"]["prefiltered"],
            "parsed_lines": f_counters["tail"]["records"],
        },
        "elf_slow": {**_rates(n, s_s, s_counters["cpu"]), "top10_agrees": agrees(s_rows, ref)},
        "read_split_floor": _rates(n, floor_s, floor_cpu),
    }
    par = [elf_parallel(paths["file"], fmt, 2) for _ in range(repeats)]
    p_s, p_rows, p_info = min(par, key=lambda r: r[0])
    engines["elf_fast_2proc"] = {
        "seconds": round(p_s, 3),
        "lines_per_s": round(n / p_s),
        "main_process_cpu_s": round(p_info["main_cpu"], 3),
        "pool_start_s": round(p_info["pool_start_s"], 2),
        "top10_agrees": agrees(p_rows, ref),
    }
    out["fast_equals_slow"] = f_rows == s_rows == p_rows
    out["top10"] = [f"{p}={c}" for p, c in f_rows]
    ratios: dict[str, Any] = {"elf_fast_vs_elf_slow": round(s_s / f_s, 2)}
    if spark is not None:
        b_s, b_rows, warm, b_cpu = spark_batch(spark, fmt, paths["file"], repeats)
        engines["spark_batch"] = {
            **_rates(n, b_s, b_cpu),
            "warmup_s": round(warm, 3),
            "top10_agrees": agrees(b_rows, ref),
        }
        st_s, st_rows, batches, st_cpu = spark_streaming(spark, fmt, paths["stream_dir"], work)
        engines["spark_streaming"] = {
            **_rates(n, st_s, st_cpu),
            "micro_batches": batches,
            "top10_agrees": agrees(st_rows, ref),
        }
        for name, (other_s, other_cpu) in {
            "spark_batch": (b_s, b_cpu),
            "spark_streaming": (st_s, st_cpu),
        }.items():
            ratios[f"elf_fast_vs_{name}"] = round(other_s / f_s, 2)
            ratios[f"elf_fast_2proc_vs_{name}"] = round(other_s / p_s, 2)
            ratios[f"elf_fast_vs_{name}_per_cpu_s"] = round(other_cpu / f_counters["cpu"], 2)
            ratios[f"elf_slow_vs_{name}"] = round(other_s / s_s, 2)
    out["ratios"] = ratios
    out["engines"] = engines
    ratios["elf_fast_2proc_vs_elf_fast"] = round(f_s / p_s, 2)
    out["best_elf_lines_per_s"] = round(n / min(f_s, p_s))
    out["goal_1m_lines_per_s_met"] = n / min(f_s, p_s) >= 1_000_000
    return out


def _rates(n: int, seconds: float, cpu: float) -> dict[str, Any]:
    return {
        "seconds": round(seconds, 3),
        "lines_per_s": round(n / seconds),
        "cpu_s": round(cpu, 3),
        "lines_per_cpu_s": round(n / cpu) if cpu > 0 else None,
    }


if __name__ == "__main__":
    main()
