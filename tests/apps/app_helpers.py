"""Helpers of the app tests: polling other processes' state, writing events, and the
independent references (pandas / Counter / exact fractions / breadth-first search) the apps
are checked against.
"""

from __future__ import annotations

from collections import Counter, defaultdict, deque
from collections.abc import Callable, Iterable
from fractions import Fraction
from pathlib import Path
from typing import Any

import pandas as pd
from agent_helpers import wait_until as wait_until  # re-exported for the apps tests

from apps.workload import json_line

AGENTS = 4  # agent processes of the shared cluster
WINDOW = 60  # epochs of 1 s: every window ending within a minute of the data holds all of it
DATA_EPOCHS = 8  # the shop's clickstream spans this many 1 s epochs


def append_events(path: Path, events: Iterable[dict[str, Any]]) -> None:
    with path.open("a") as f:
        f.write("".join(json_line(e) + "\n" for e in events))


def frame(events: list[dict[str, Any]]) -> pd.DataFrame:
    df = pd.DataFrame(events)
    df["epoch"] = df["ts"].astype(float).floordiv(1).astype(int)
    return df


def in_window(df: pd.DataFrame, window: list[int] | tuple[int, int]) -> pd.DataFrame:
    first, last = window
    return df[(df["epoch"] >= first) & (df["epoch"] <= last)]


# ---- micro-promotion -----------------------------------------------------------------------


def ref_clicks(df: pd.DataFrame, window: Any, directory: str = "Video Games") -> Counter:
    w = in_window(df, window)
    w = w[(w["directory"] == directory) & (w["action"] == "click")]
    return Counter(w["product_id"].value_counts().to_dict())


def ref_top(df: pd.DataFrame, window: Any, k: int) -> list[list[Any]]:
    counts = ref_clicks(df, window)
    return [[p, c] for p, c in sorted(counts.items(), key=lambda pc: (-pc[1], pc[0]))[:k]]


# ---- product-bundling ----------------------------------------------------------------------


def ref_components(baskets: Iterable[Iterable[str]], min_support: int) -> list[dict[str, Any]]:
    """Connected components of the pairs with support >= min_support, by explicit pair
    counting and breadth-first search (the rule product-bundling used before issue 26: on
    real baskets it makes one giant component)."""
    support: Counter = Counter()
    for basket in baskets:
        items = sorted(set(basket))
        for i, a in enumerate(items):
            for b in items[i + 1 :]:
                support[(a, b)] += 1
    edges = [(a, b) for (a, b), n in support.items() if n >= min_support]
    return [
        _row(comp, sum(support[e] for e in edges if e[0] in comp))
        for comp in _components(edges, set())
    ]


def _row(products: Iterable[str], support: int) -> dict[str, Any]:
    ps = sorted(products)
    return {"bundle": ps[0], "size": len(ps), "support": support, "products": ps}


def _components(edges: list[tuple[str, str]], nodes: set[str]) -> list[set[str]]:
    """Breadth-first connected components of ``edges`` (plus isolated ``nodes``), in the
    app's order: size descending, then smallest product."""
    graph: dict[str, set[str]] = defaultdict(set)
    for a, b in edges:
        graph[a].add(b)
        graph[b].add(a)
    for v in nodes:
        graph.setdefault(v, set())
    seen: set[str] = set()
    out = []
    for start in sorted(graph):
        if start in seen:
            continue
        comp, queue = {start}, deque([start])
        while queue:
            for nxt in graph[queue.popleft()]:
                if nxt not in comp:
                    comp.add(nxt)
                    queue.append(nxt)
        seen |= comp
        out.append(comp)
    out.sort(key=lambda c: (-len(c), min(c)))
    return out


def ref_measures(
    baskets: Iterable[Iterable[str]], max_basket: int = 50
) -> dict[tuple[str, str], tuple[int, Fraction, Fraction]]:
    """Every co-occurring pair's (support, all-confidence, lift) as exact fractions, by brute
    force: each pair of known products checked against each basket."""
    kept = [set(b) for b in baskets if len(set(b)) <= max_basket]
    n = len(kept)
    products = sorted(set().union(*kept)) if kept else []
    count = {p: sum(1 for b in kept if p in b) for p in products}
    out = {}
    for i, a in enumerate(products):
        for b in products[i + 1 :]:
            s = sum(1 for basket in kept if a in basket and b in basket)
            if s:
                conf = Fraction(s, max(count[a], count[b]))  # min(P(b|a), P(a|b))
                out[(a, b)] = (s, conf, Fraction(s * n, count[a] * count[b]))
    return out


def ref_market_bundles(
    baskets: Iterable[Iterable[str]],
    *,
    min_support: int,
    min_confidence: float,
    min_lift: float,
    max_bundle: int,
    max_basket: int = 50,
) -> list[dict[str, Any]]:
    """product-bundling's documented rule by brute force: the pairs passing the three
    thresholds (exact fractions), taken strongest first (confidence, lift, support, pair),
    each joining its two products' groups — recomputed by breadth-first search after every
    step — unless the joined group would exceed ``max_bundle``."""
    measures = ref_measures(baskets, max_basket)
    edges = [
        (pair, m)
        for pair, m in measures.items()
        if m[0] >= min_support and m[1] >= Fraction(min_confidence) and m[2] >= Fraction(min_lift)
    ]
    edges.sort(key=lambda e: (-e[1][1], -e[1][2], -e[1][0], e[0]))
    accepted: list[tuple[str, str]] = []
    nodes = {p for pair, _ in edges for p in pair}
    for (a, b), _ in edges:
        groups = _components(accepted, nodes)
        ga = next(g for g in groups if a in g)
        gb = next(g for g in groups if b in g)
        if ga is not gb and len(ga) + len(gb) <= max_bundle:
            accepted.append((a, b))
    return [
        _row(comp, sum(m[0] for (a, b), m in edges if a in comp and b in comp))
        for comp in _components(accepted, set())
    ]


def ref_baskets(df: pd.DataFrame, window: Any, by: tuple[str, ...] = ("user_id", "session_id")):
    """The products each group liked or bought in the window (pandas)."""
    w = in_window(df, window)
    w = w[w["action"].isin(["like", "buy"])]
    return list(w.groupby(list(by))["product_id"].agg(lambda s: sorted(set(s))))


def ref_bundles(df: pd.DataFrame, window: Any, min_support: int) -> list[dict[str, Any]]:
    """The window's bundles with the job's default thresholds (``apps.bundles``)."""
    from apps.bundles import MAX_BUNDLE, MIN_CONFIDENCE, MIN_LIFT

    return ref_market_bundles(
        ref_baskets(df, window),
        min_support=min_support,
        min_confidence=MIN_CONFIDENCE,
        min_lift=MIN_LIFT,
        max_bundle=MAX_BUNDLE,
    )


# ---- spam-campaign -------------------------------------------------------------------------


def ref_spam(
    tweets: list[dict[str, Any]],
    words: Iterable[str],
    k: int,
    min_count: int,
    keep: Callable[[dict[str, Any]], bool] = lambda t: True,
) -> list[dict[str, Any]]:
    wanted = {w.lower() for w in words}
    counts: Counter = Counter()
    for t in tweets:
        text = "".join(c if c.isalnum() else " " for c in t["text"].lower())
        if keep(t) and wanted.intersection(text.split()):
            counts[t["user_id"]] += 1
    ranked = sorted(
        ((u, c) for u, c in counts.items() if c >= min_count), key=lambda x: (-x[1], x[0])
    )
    return [{"user": u, "tweets": c} for u, c in ranked[:k]]
