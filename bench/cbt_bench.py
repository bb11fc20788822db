"""WordCount benchmark: CompressedBufferTree against collections.Counter and a plain dict.

The stream is Zipf(1.1)-distributed over realistic keys (URL paths and product names, 20-60
bytes). For every key-space size all contenders consume the same stream, in the same batches,
in the same run; timings are medians over ``--repeats`` runs. Memory is measured the same way
for every side: ``sys.getsizeof`` over the container and every distinct object it keeps alive
(key strings, int values outside CPython's small-int cache), which for the tree is what
``CompressedBufferTree.memory_bytes()`` reports. A tracemalloc cross-check is included.

Prints one JSON document on stdout (progress goes to stderr).

    python bench/cbt_bench.py            # 1e7 inserts over 1e4, 1e5 and 1e6 unique keys
    python bench/cbt_bench.py --quick    # 1e6 inserts over the same key spaces
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import statistics
import sys
import time
import tracemalloc
from collections import Counter
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cbt import CompressedBufferTree

ZIPF_S = 1.1
BATCH = 100_000

_CATEGORIES = {
    "electronics": ["laptops", "phones", "tablets", "cameras", "headphones", "monitors"],
    "video-games": ["consoles", "accessories", "pc-games", "retro", "vr"],
    "books": ["fiction", "history", "science", "children", "comics"],
    "home-garden": ["kitchen", "furniture", "lighting", "tools", "bedding"],
    "sports": ["cycling", "running", "fitness", "camping", "golf"],
    "toys": ["lego", "puzzles", "dolls", "board-games"],
}
_BRANDS = ["Acme", "Globex", "Initech", "Umbrella", "Soylent", "Hooli", "Stark", "Wayne"]
_ADJ = ["Ultra", "Pro", "Mini", "Max", "Classic", "Deluxe", "Smart", "Eco"]
_NOUN = ["Laptop", "Headset", "Blender", "Backpack", "Controller", "Lamp", "Drone", "Watch"]


def make_keys(n: int, rng: np.random.Generator) -> list[str]:
    """``n`` distinct realistic keys: 2/3 URL paths, 1/3 product names, 20-60 bytes."""
    cats = list(_CATEGORIES)
    keys = []
    for i in range(n):
        r = int(rng.integers(0, 1 << 30))
        if i % 3:
            cat = cats[r % len(cats)]
            sub = _CATEGORIES[cat][(r >> 4) % len(_CATEGORIES[cat])]
            keys.append(f"/products/{cat}/{sub}/item-{i:07d}")
        else:
            keys.append(
                f"{_BRANDS[r % 8]} {_ADJ[(r >> 3) % 8]} {_NOUN[(r >> 6) % 8]} "
                f"{(r >> 9) % 100:02d}-{i:07d}"
            )
    return keys


def make_stream(keys: list[str], inserts: int, rng: np.random.Generator) -> list[str]:
    """Zipf(1.1) draws over ``keys`` (popularity unrelated to key order)."""
    n = len(keys)
    weights = 1.0 / np.arange(1, n + 1, dtype=np.float64) ** ZIPF_S
    cdf = np.cumsum(weights)
    cdf /= cdf[-1]
    popularity = rng.permutation(n)
    stream: list[str] = []
    get = keys.__getitem__
    for lo in range(0, inserts, 1_000_000):
        m = min(1_000_000, inserts - lo)
        ranks = np.searchsorted(cdf, rng.random(m), side="right")
        ranks = np.minimum(ranks, n - 1)
        stream.extend(map(get, popularity[ranks].tolist()))
    return stream


def counter_bytes(d: dict) -> int:
    """Container plus every key and non-cached int value it keeps alive."""
    size = sys.getsizeof(d) + sum(map(sys.getsizeof, d))
    size += sum(sys.getsizeof(v) for v in d.values() if not -5 <= v <= 256)
    return size


def run_counter(stream: list[str]) -> tuple[float, float, Counter]:
    gc.collect()
    c0 = time.process_time()
    t0 = time.perf_counter()
    c: Counter = Counter()
    for lo in range(0, len(stream), BATCH):
        c.update(stream[lo : lo + BATCH])
    return time.perf_counter() - t0, time.process_time() - c0, c


def run_dict(stream: list[str]) -> tuple[float, float, dict]:
    gc.collect()
    c0 = time.process_time()
    t0 = time.perf_counter()
    d: dict = {}
    get = d.get
    for lo in range(0, len(stream), BATCH):
        for k in stream[lo : lo + BATCH]:
            d[k] = get(k, 0) + 1
    return time.perf_counter() - t0, time.process_time() - c0, d


#: tree configurations measured side by side: the default, and a root twice as large (fewer
#: spills, so faster inserts, for more uncompressed memory between flushes)
CBT_CONFIGS: dict[str, dict] = {"cbt": {}, "cbt_root131072": {"root_capacity": 131072}}


def run_cbt(stream: list[str], **config: int) -> tuple[float, float, CompressedBufferTree]:
    gc.collect()
    c0 = time.process_time()
    t0 = time.perf_counter()
    t = CompressedBufferTree("count", **config)
    for lo in range(0, len(stream), BATCH):
        t.insert_many(stream[lo : lo + BATCH])
    return time.perf_counter() - t0, time.process_time() - c0, t


def traced_bytes(build) -> int:
    """Bytes allocated (and still held) by ``build()``, measured by tracemalloc."""
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    obj = build()
    gc.collect()
    size = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    del obj
    return size


def bench_one(unique: int, inserts: int, repeats: int, seed: int) -> dict:
    rng = np.random.default_rng(seed + unique)
    keys = make_keys(unique, rng)
    stream = make_stream(keys, inserts, rng)
    lengths = [len(k.encode()) for k in keys]
    del keys
    timings: dict[str, list[float]] = {"counter": [], "dict": []}
    cpu: dict[str, list[float]] = {"counter": [], "dict": []}
    flushes: dict[str, list[float]] = {}
    trees: dict[str, CompressedBufferTree] = {}
    before_flush: dict[str, int] = {}
    for name in CBT_CONFIGS:
        timings[name], cpu[name], flushes[name] = [], [], []
    for rep in range(repeats):
        print(f"  n_unique={unique} repeat {rep + 1}/{repeats}", file=sys.stderr, flush=True)
        # contenders alternate inside every repeat, so machine noise hits all of them alike
        dt, ct, c = run_counter(stream)
        timings["counter"].append(dt)
        cpu["counter"].append(ct)
        if rep < repeats - 1:
            del c
        dt, ct, d = run_dict(stream)
        timings["dict"].append(dt)
        cpu["dict"].append(ct)
        del d
        for name, config in CBT_CONFIGS.items():
            trees.pop(name, None)
            dt, ct, t = run_cbt(stream, **config)
            timings[name].append(dt)
            cpu[name].append(ct)
            before_flush[name] = t.memory_bytes()
            gc.collect()
            t0 = time.perf_counter()
            snap = t.flush()
            flushes[name].append(time.perf_counter() - t0)
            if rep == repeats - 1:
                # correctness spot check against the Counter
                n_keys = len(c)
                sample = list(c)[:: max(1, n_keys // 2000)]
                assert len(snap) == n_keys and all(snap[k] == c[k] for k in sample), name
            del snap
            trees[name] = t
    n_keys = len(c)
    cnt_bytes = counter_bytes(c)
    gc.collect()

    # tracemalloc cross-check: the Counter's keys were allocated before tracing began, so
    # their size is added; the tree allocates everything it keeps (its root is empty after flush)
    def build_counter() -> Counter:
        return run_counter(stream)[2]

    def build_cbt() -> CompressedBufferTree:
        tree = run_cbt(stream)[2]
        tree.flush()
        return tree

    traced_counter = traced_bytes(build_counter) + sum(map(sys.getsizeof, c))
    traced_cbt = traced_bytes(build_cbt)
    del c
    med = {k: statistics.median(v) for k, v in timings.items()}
    kps = {k: inserts / v for k, v in med.items()}
    out = {
        "unique_keys_drawn": n_keys,
        "key_space": unique,
        "inserts": inserts,
        "mean_key_bytes": round(sum(lengths) / len(lengths), 1),
        "insert_keys_per_s": {k: round(v) for k, v in kps.items()},
        "insert_seconds_all": {k: [round(x, 4) for x in v] for k, v in timings.items()},
        # CPU time of this process: less sensitive to other processes on a shared machine
        "insert_cpu_seconds_all": {k: [round(x, 4) for x in v] for k, v in cpu.items()},
        "counter_bytes_per_key": round(cnt_bytes / n_keys, 1),
        "counter_tracemalloc_bytes_per_key": round(traced_counter / n_keys, 1),
        "dict_insert_throughput_ratio": round(kps["dict"] / kps["counter"], 3),
    }
    for name, config in CBT_CONFIGS.items():
        t = trees[name]
        after = t.memory_bytes()
        stats = t.stats()
        entry = {
            "config": config,
            "insert_throughput_ratio": round(kps[name] / kps["counter"], 3),
            "insert_throughput_ratio_cpu_time": round(
                statistics.median(cpu["counter"]) / statistics.median(cpu[name]), 3
            ),
            "flush_seconds_median": round(statistics.median(flushes[name]), 4),
            "flush_seconds_all": [round(x, 4) for x in flushes[name]],
            "bytes_per_key_after_flush": round(after / n_keys, 1),
            "bytes_per_key_before_flush": round(before_flush[name] / n_keys, 1),
            "memory_ratio_after_flush": round(after / cnt_bytes, 3),
            "memory_ratio_before_flush": round(before_flush[name] / cnt_bytes, 3),
            "memory_bytes": after,
            "stats": {
                k: stats[k]
                for k in (
                    "root_spills",
                    "node_flushes",
                    "leaf_compactions",
                    "leaf_splits",
                    "height",
                    "leaves",
                    "compression_ratio",
                )
            },
        }
        if name == "cbt":
            entry["bytes_per_key_tracemalloc"] = round(traced_cbt / n_keys, 1)
            entry["memory_ratio_tracemalloc"] = round(traced_cbt / traced_counter, 3)
            entry["snapshot_wire_bytes_per_key"] = round(len(t.flush().to_bytes()) / n_keys, 1)
        out[name] = entry
    del trees
    return out


def _targets(result: dict, name: str) -> dict:
    r = result[name]
    return {
        "memory_ratio_after_flush": r["memory_ratio_after_flush"],
        "memory_ratio_before_flush": r["memory_ratio_before_flush"],
        "memory_met_after_flush": r["memory_ratio_after_flush"] <= 0.25,
        "memory_met_before_flush": r["memory_ratio_before_flush"] <= 0.25,
        "insert_throughput_ratio": r["insert_throughput_ratio"],
        "throughput_met": r["insert_throughput_ratio"] >= 0.5,
        "insert_throughput_ratio_cpu_time": r["insert_throughput_ratio_cpu_time"],
        "flush_seconds": r["flush_seconds_median"],
        "flush_met": r["flush_seconds_median"] < 1.0,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="1e6 inserts instead of 1e7")
    ap.add_argument("--inserts", type=int, help="stream length (default 1e7, quick 1e6)")
    ap.add_argument("--unique", type=int, nargs="+", help="key-space sizes")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--seed", type=int, default=42)
    args = ap.parse_args(argv)
    inserts = args.inserts or (1_000_000 if args.quick else 10_000_000)
    uniques = args.unique or [10_000, 100_000, 1_000_000]
    t0 = time.perf_counter()
    results = [bench_one(u, inserts, args.repeats, args.seed) for u in uniques]
    last = results[-1]
    out = {
        "benchmark": "cbt_wordcount",
        "mode": "quick" if args.quick else "full",
        "zipf_s": ZIPF_S,
        "batch": BATCH,
        "repeats": args.repeats,
        "python": platform.python_version(),
        "results": results,
        "targets": {
            "limits": {"memory_ratio_max": 0.25, "throughput_ratio_min": 0.5, "flush_s_max": 1},
            "measured_at_key_space": last["key_space"],
            "measured_at_inserts": inserts,
            "note": "targets are defined for 1e7 inserts over 1e6 keys (full mode); quick "
            "mode's 1e6 inserts leave most keys unseen, so its ratios are indicative only"
            if args.quick or inserts != 10_000_000
            else "full configuration",
            **{name: _targets(last, name) for name in CBT_CONFIGS},
        },
        "wall_seconds": round(time.perf_counter() - t0, 1),
    }
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
