"""Bundles benchmark: product-bundling's rule before and after issue 26 on the demo's feed.

Generates the clickstream ``elf demo`` writes (8 agents x 100 clicks/s, seed 0, the demo's
planted "bought together" groups; ``apps.demo.feed``), cuts it into the demo's 20 s windows
(10 epochs of 2 s) and, per window, groups likes and buys per (user, session) into baskets
as the job does, then runs side by side:

* ``before``: connected components of the pairs bought together in >= 3 baskets (the rule
  until issue 26, written out here: union-find over the pairs);
* ``after``: ``apps.bundles.compute_bundles`` with the demo's thresholds
  (``apps.demo.jobs.BUNDLING_PARAMS``: support >= 3, all-confidence >= 0.25, lift >= 2,
  at most 8 products per bundle);

reporting bundle counts and sizes, how many planted groups come out exactly as a bundle,
and each rule's master-side time per window (best of 5). The same windows without planted
groups (``unplanted``) show what each rule makes of noise alone.

    python bench/bundles_bench.py           # 60 s of feed: 3 windows
    python bench/bundles_bench.py --quick   # 20 s: 1 window

Prints one JSON document on stdout.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from collections.abc import Callable
from itertools import combinations
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from apps.bundles import compute_bundles
from apps.demo.feed import CLICK_USERS, demo_bundles, demo_catalogue
from apps.demo.jobs import BUNDLING_PARAMS
from apps.workload import ClickstreamGenerator

AGENTS, RATE, WINDOW = 8, 100.0, 20.0
START = 1_800_000_000.0


def windows(seconds: float, planted: bool) -> list[list[set[str]]]:
    """Each 20 s window's baskets of the demo feed."""
    catalogue = demo_catalogue(0)
    groups = demo_bundles(catalogue, 0) if planted else None
    per: list[dict[tuple[str, str], set[str]]] = [{} for _ in range(int(seconds // WINDOW))]
    for i in range(AGENTS):
        gen = ClickstreamGenerator(
            seed=i, users=CLICK_USERS, rate=RATE, start=START, catalogue=catalogue, bundles=groups
        )
        for e in gen:
            w = int((e["ts"] - START) // WINDOW)
            if w >= len(per):
                break
            if e["action"] in ("like", "buy"):
                per[w].setdefault((e["user_id"], e["session_id"]), set()).add(e["product_id"])
    return [list(w.values()) for w in per]


def before(baskets: list[set[str]], min_support: int = 3) -> list[list[str]]:
    """Connected components of the pairs with support >= min_support."""
    support: Counter[tuple[str, str]] = Counter()
    for b in baskets:
        support.update(combinations(sorted(b), 2))
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        while parent.setdefault(x, x) != x:
            x = parent[x]
        return x

    for (a, b), s in support.items():
        if s >= min_support:
            parent[find(a)] = find(b)
    comps: dict[str, list[str]] = {}
    for p in parent:
        comps.setdefault(find(p), []).append(p)
    return sorted((sorted(c) for c in comps.values()), key=lambda c: (-len(c), c))


def after(baskets: list[set[str]]) -> list[list[str]]:
    params = {k: v for k, v in BUNDLING_PARAMS.items() if k not in ("group_by", "popular_size")}
    return [list(b.products) for b in compute_bundles(baskets, **params).bundles]


def best_ms(fn: Callable[[], Any], repeats: int = 5) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return round(best * 1000, 2)


def report(seconds: float, planted: bool) -> list[dict[str, Any]]:
    groups = [sorted(g) for g in demo_bundles(demo_catalogue(0), 0)] if planted else []
    out = []
    for i, baskets in enumerate(windows(seconds, planted)):
        row: dict[str, Any] = {"window_s": [i * WINDOW, (i + 1) * WINDOW], "baskets": len(baskets)}
        for name, rule in (("before", before), ("after", after)):
            found = rule(baskets)
            row[name] = {
                "bundles": len(found),
                "sizes": [len(b) for b in found],
                "planted_found_exactly": sum(g in found for g in groups),
                "ms": best_ms(lambda rule=rule, baskets=baskets: rule(baskets)),
            }
        out.append(row)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="one 20 s window")
    ap.add_argument("--seconds", type=float, default=60.0)
    args = ap.parse_args()
    seconds = WINDOW if args.quick else args.seconds
    doc = {
        "feed": {"agents": AGENTS, "clicks_per_s_per_agent": RATE, "window_s": WINDOW},
        "planted_groups": demo_bundles(demo_catalogue(0), 0),
        "thresholds": BUNDLING_PARAMS,
        "planted": report(seconds, True),
        "unplanted": report(seconds, False),
    }
    print(json.dumps(doc, indent=1))


if __name__ == "__main__":
    main()
