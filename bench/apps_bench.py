"""Apps benchmark: what the paper's applications cost an agent, each beside a baseline.

Over generated events (``apps.workload``, dicts as the worker gets them), in one process:

* ``micro_promotion``: ``Worker.process`` ns/record of the job class (``map_keys``) beside the
  same filter and key as an ELF QL job (the declarative baseline), interleaved in chunks so
  both see the same background load; each side's best of ``--repeats`` runs.
* ``spam_campaign``: the same for the class (word filter on tweets) beside ``wordcount`` over
  the same text (the simplest tokenizing job).
* ``product_bundling``: the per-agent pre-reduction — bytes of one agent's window snapshot
  (``collect_set`` baskets, as sent up the tree) beside the raw mapped ``(group, product)``
  pairs as JSON lines and beside the co-occurrence edges if an agent shipped those; and the
  master's ``compute_bundles`` time for the window.

    python bench/apps_bench.py            # 400 000 clicks / tweets
    python bench/apps_bench.py --quick    # 80 000

Prints one JSON document on stdout.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from itertools import combinations
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import apps.micro_promotion
import apps.product_bundling
import apps.spam_campaign
import apps.wordcount
from agent.jobs.job import create_job, parse_spec
from agent.jobs.ql_job import spec_from_query
from agent.runtime.epochs.worker import Worker
from apps.bundles import compute_bundles
from apps.workload import ClickstreamGenerator, TweetGenerator

START = 1_700_000_000
CHUNK = 5_000
QL_PROMOTION = """
SELECT product_id, count(*) AS clicks
FROM clicks
WHERE directory = 'Video Games' AND action = 'click'
GROUP BY product_id
"""


def worker_for(spec: dict[str, Any]) -> Worker:
    return Worker(create_job(parse_spec(spec)), wall_clock=lambda: START + 10**6)


def side_by_side(records: list[dict[str, Any]], make_a: Any, make_b: Any, repeats: int) -> dict:
    """ns/record of two worker factories over the same records, chunks interleaved."""
    best = [float("inf"), float("inf")]
    for _ in range(repeats):
        workers = [make_a(), make_b()]
        spent = [0.0, 0.0]
        for i in range(0, len(records), CHUNK):
            chunk = records[i : i + CHUNK]
            for side, w in enumerate(workers):
                t0 = time.perf_counter()
                w.process(chunk)
                spent[side] += time.perf_counter() - t0
        for side, w in enumerate(workers):
            t0 = time.perf_counter()
            w.finish()
            spent[side] += time.perf_counter() - t0
            best[side] = min(best[side], spent[side] / len(records) * 1e9)
    return {
        "app_ns_per_record": round(best[0], 1),
        "baseline_ns_per_record": round(best[1], 1),
        "ratio": round(best[0] / best[1], 2),
    }


def bundling(clicks: list[dict[str, Any]]) -> dict[str, Any]:
    window = len(clicks)  # the whole stream is one window of one agent
    spec = apps.product_bundling.bundling_spec("pb", "bench", epoch_seconds=3600.0, window_epochs=1)
    worker = worker_for(spec)
    worker.process(clicks)
    ((_, snap),) = [(e, s) for e, s in worker.finish() if len(s)]
    job = worker.job
    pairs = [p for rec in clicks for p in job.map(rec)]
    raw = sum(len(orjson.dumps([list(k), v])) + 1 for k, v in pairs)
    baskets = [sorted(products) for _, products in snap]
    edges = sum(len(orjson.dumps([a, b])) + 1 for b in baskets for a, b in combinations(b, 2))
    t0 = time.perf_counter()
    found = compute_bundles(baskets)
    ms = (time.perf_counter() - t0) * 1000
    return {
        "records": window,
        "mapped_pairs": len(pairs),
        "baskets": len(baskets),
        "snapshot_bytes": len(snap.to_bytes()),
        "raw_pairs_json_bytes": raw,
        "edges_json_bytes": edges,
        "compute_bundles_ms": round(ms, 2),
        "bundles": len(found.bundles),
        "largest_bundle": found.bundles[0].size if found.bundles else 0,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--records", type=int)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    n = args.records or (80_000 if args.quick else 400_000)
    clicks = ClickstreamGenerator(seed=1, users=5000, products=2000, rate=2000, start=START)
    click_events = clicks.take(n)
    tweets = TweetGenerator(seed=1, users=5000, rate=2000, start=START).take(n)

    promo = apps.micro_promotion.promotion_spec("mp", "bench", epoch_seconds=1.0)
    ql = spec_from_query("mpql", "bench", QL_PROMOTION, epoch_seconds=1.0)
    spam = apps.spam_campaign.spam_spec("spam", "bench", epoch_seconds=1.0)
    wc = {"name": "wc", "creator": "bench", "job_class": "wordcount", "epoch_seconds": 1.0}
    out = {
        "python": platform.python_version(),
        "records": n,
        "micro_promotion_vs_ql": side_by_side(
            click_events, lambda: worker_for(promo), lambda: worker_for(ql), args.repeats
        ),
        "spam_campaign_vs_wordcount": side_by_side(
            tweets, lambda: worker_for(spam), lambda: worker_for(wc), args.repeats
        ),
        "product_bundling_prereduction": bundling(click_events),
    }
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
