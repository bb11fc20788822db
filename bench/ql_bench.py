"""ELF QL benchmark: the per-record cost of compiled queries against hand-written Python.

Records are generated click events (dicts already parsed from JSON, as the worker gets them):
directory, action, product (Zipf-like), price, qty, url, user.location. For each query the
compiled ``map(record)`` and a hand-written function with the same filter, key and value run
over the same records in the same process, interleaved in chunks of 5 000 records (so both
see the same background load on a shared machine), ``--repeats`` times: ns/record is each
side's fastest run, the ratio the median of the per-run ratios. Both must produce identical
pairs (checked first). Also measured: the whole worker path (``Worker.process``: map, epoch
assignment, CBT insert) for the compiled job (a counting query: keys only) and for hand-written
job classes (``map`` pairs, and ``map_keys``), which is what an agent pays per record.

    python bench/ql_bench.py            # 1e6 records
    python bench/ql_bench.py --quick    # 2e5 records
    python bench/ql_bench.py --quick --only percentile   # the DuckDB comparison alone

Also ``approx_percentile(request_time, [0.5, 0.99])`` per path over an nginx file, ELF's
columnar path against DuckDB's ``approx_quantile`` (threads=1) in the same run
(:mod:`ql_percentile`; lines/s on one core; goal: ELF >= 0.8x DuckDB).

Prints one JSON document on stdout.
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import re
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ql_percentile import compare as percentile_compare  # bench/

from agent.jobs.job import Job, create_job, parse_spec, register_job
from agent.jobs.ql_job import spec_from_query
from agent.ql import compile_query
from agent.runtime.epochs.worker import Worker

MICRO = """
SELECT product, count(*) AS clicks
FROM clicks
WHERE directory = 'Video Games' AND action = 'click'
GROUP BY product
ORDER BY clicks DESC LIMIT 10
"""

RICH = """
SELECT lower(user.location) AS loc, count(*) AS n, sum(price * qty) AS revenue
FROM clicks
WHERE url LIKE '/video-games/%' AND url RLIKE 'id=[0-9]+$' AND price * qty > 20
GROUP BY lower(user.location)
"""

DIRECTORIES = ["Video Games", "Books", "Electronics", "Toys", "Garden"]
ACTIONS = ["click", "click", "click", "view", "add_to_cart"]
LOCATIONS = ["DE", "fr", "US", "uk", "Jp", None]


def make_records(n: int, seed: int = 1) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    products = [f"product-{i:05d}" for i in range(20_000)]
    out = []
    for i in range(n):
        d = rng.choice(DIRECTORIES)
        slug = d.lower().replace(" ", "-")
        loc = rng.choice(LOCATIONS)
        url = f"/{slug}/item?id={rng.randrange(10**6)}" if rng.random() < 0.9 else f"/{slug}/"
        out.append(
            {
                "ts": 1_700_000_000 + i * 0.001,
                "directory": d,
                "action": rng.choice(ACTIONS),
                "product": products[min(int(rng.paretovariate(1.1)) - 1, len(products) - 1)],
                "price": rng.choice([5, 10, 20, 60, 250]),
                "qty": rng.choice([1, 1, 1, 2, 3]),
                "url": url,
                "user": {"id": rng.randrange(10**6), "location": loc},
            }
        )
    return out


# ---- hand-written equivalents --------------------------------------------------------------
def hand_micro(r: dict[str, Any]) -> list[tuple[Any, Any]]:
    if r.get("directory") == "Video Games" and r.get("action") == "click":
        return [(r.get("product"), 1)]
    return []


_ID = re.compile(r"id=[0-9]+$")


def hand_rich(r: dict[str, Any]) -> list[tuple[Any, Any]]:
    url = r.get("url")
    if not (type(url) is str and url.startswith("/video-games/") and _ID.search(url)):
        return []
    price, qty = r.get("price"), r.get("qty")
    if type(price) not in (int, float) or type(qty) not in (int, float) or price * qty <= 20:
        return []
    user = r.get("user")
    loc = user.get("location") if type(user) is dict else None
    key = loc.lower() if type(loc) is str else (0, 0)  # NULL group, as the QL keys encode it
    return [(key, (1, price * qty))]


@register_job("bench-hand-micro")
class HandMicro(Job):
    """The hand-written micro-promotion job (for the worker-path comparison)."""

    def map(self, record: dict[str, Any]) -> list[tuple[Any, Any]]:
        return hand_micro(record)


@register_job("bench-hand-micro-keys")
class HandMicroKeys(Job):
    """The same, through the keys-only fast path (``map_keys``)."""

    def map_keys(self, record: dict[str, Any]) -> list[Any]:
        if record.get("directory") == "Video Games" and record.get("action") == "click":
            return [record.get("product")]
        return []


# ---- timing --------------------------------------------------------------------------------
def time_pair(
    first: Callable[[dict[str, Any]], Any],
    second: Callable[[dict[str, Any]], Any],
    records: list[dict[str, Any]],
    chunk: int = 5_000,
) -> tuple[float, float]:
    """Total seconds of each function over ``records``, interleaved chunk by chunk (the order
    alternating), so that both sides see the same background load."""
    ta = tb = 0.0
    perf = time.perf_counter
    for i, lo in enumerate(range(0, len(records), chunk)):
        part = records[lo : lo + chunk]
        for fn in (first, second) if i % 2 == 0 else (second, first):
            t0 = perf()
            for r in part:
                fn(r)
            dt = perf() - t0
            if fn is first:
                ta += dt
            else:
                tb += dt
    return ta, tb


def compare_maps(
    name: str,
    compiled: Callable[[dict[str, Any]], Any],
    hand: Callable[[dict[str, Any]], Any],
    records: list[dict[str, Any]],
    repeats: int,
) -> dict[str, Any]:
    mismatches = sum(compiled(r) != hand(r) for r in records[:20_000])
    if mismatches:
        raise SystemExit(f"{name}: compiled and hand-written maps disagree on {mismatches} records")
    runs = [time_pair(compiled, hand, records) for _ in range(repeats)]
    c, h = min(t[0] for t in runs), min(t[1] for t in runs)
    n = len(records)
    return {
        "records": n,
        "selected": sum(1 for r in records[:100_000] if hand(r)) / min(n, 100_000),
        "compiled_ns_per_record": round(c / n * 1e9, 1),
        "hand_ns_per_record": round(h / n * 1e9, 1),
        "compiled_records_per_s": round(n / c),
        "hand_records_per_s": round(n / h),
        "ratio_compiled_over_hand": round(statistics.median(a / b for a, b in runs), 3),
        "ratio_min_over_min": round(c / h, 3),
    }


def compare_workers(records: list[dict[str, Any]], repeats: int) -> dict[str, Any]:
    ql_spec = spec_from_query("bench-ql", "bench", MICRO + "WINDOW 1 h")
    sides = {
        "compiled": ql_spec,
        "hand_map": {**ql_spec, "name": "h1", "job_class": "bench-hand-micro", "params": {}},
        "hand_map_keys": {
            **ql_spec,
            "name": "h2",
            "job_class": "bench-hand-micro-keys",
            "params": {},
        },
    }
    times: dict[str, list[float]] = {k: [] for k in sides}
    for _ in range(repeats):
        for side, spec in sides.items():
            job = create_job(parse_spec(spec))
            worker = Worker(job, wall_clock=lambda: 1_700_000_000.0)
            t0 = time.perf_counter()
            worker.process(records)
            worker.finish()
            times[side].append(time.perf_counter() - t0)
    n = len(records)
    best = {side: min(ts) for side, ts in times.items()}
    return {
        "records": n,
        "compiled_job_class": type(create_job(parse_spec(ql_spec))).__name__,
        **{f"{side}_ns_per_record": round(t / n * 1e9, 1) for side, t in best.items()},
        "ratio_compiled_over_hand_map": round(best["compiled"] / best["hand_map"], 3),
        "ratio_compiled_over_hand_map_keys": round(best["compiled"] / best["hand_map_keys"], 3),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="2e5 records instead of 1e6")
    ap.add_argument("--records", type=int, help="number of records")
    ap.add_argument("--repeats", type=int, default=5, help="timed runs per side (median)")
    ap.add_argument("--only", choices=("maps", "percentile"), help="run one part (default: both)")
    args = ap.parse_args(argv)
    pct_lines = args.records or (200_000 if args.quick else 1_000_000)
    if args.only == "percentile":
        out = {
            "benchmark": "ql",
            "mode": "quick" if args.quick else "full",
            "python": platform.python_version(),
            "machine": platform.machine(),
            "approx_percentile_per_path_vs_duckdb": percentile_compare(pct_lines, 3),
        }
        print(json.dumps(out, indent=2))
        return 0
    n = args.records or (200_000 if args.quick else 1_000_000)
    print(f"generating {n} records", file=sys.stderr)
    records = make_records(n)
    t0 = time.perf_counter()
    micro = compile_query(MICRO)
    rich = compile_query(RICH)
    compile_ms = (time.perf_counter() - t0) / 2 * 1000
    out = {
        "benchmark": "ql",
        "mode": "quick" if args.quick else "full",
        "python": platform.python_version(),
        "machine": platform.machine(),
        "repeats": args.repeats,
        "compile_ms_per_query": round(compile_ms, 3),
        "micro_promotion_map": compare_maps("micro", micro.map, hand_micro, records, args.repeats),
        "like_regexp_arithmetic_map": compare_maps(
            "rich", rich.map, hand_rich, records, args.repeats
        ),
        "micro_promotion_worker": compare_workers(records, max(1, args.repeats // 2)),
        "target": "compiled map within 1.5x of the hand-written function",
    }
    if args.only != "maps":
        out["approx_percentile_per_path_vs_duckdb"] = percentile_compare(pct_lines, 3)
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
