"""Helpers of the app tests: polling other processes' state, writing events, and the
independent references (pandas / Counter / breadth-first search) the apps are checked against.
"""

from __future__ import annotations

from collections import Counter, defaultdict, deque
from collections.abc import Callable, Iterable
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
    """Bundles by explicit pair counting and breadth-first components (not the app's
    union-find), in the app's documented order."""
    support: Counter = Counter()
    for basket in baskets:
        items = sorted(set(basket))
        for i, a in enumerate(items):
            for b in items[i + 1 :]:
                support[(a, b)] += 1
    graph: dict[str, set[str]] = defaultdict(set)
    for (a, b), n in support.items():
        if n >= min_support:
            graph[a].add(b)
            graph[b].add(a)
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
        weight = sum(n for (a, _), n in support.items() if n >= min_support and a in comp)
        products = sorted(comp)
        out.append(
            {"bundle": products[0], "size": len(products), "support": weight, "products": products}
        )
    out.sort(key=lambda b: (-b["size"], b["bundle"]))
    return out


def ref_baskets(df: pd.DataFrame, window: Any, by: tuple[str, ...] = ("user_id", "session_id")):
    """The products each group liked or bought in the window (pandas)."""
    w = in_window(df, window)
    w = w[w["action"].isin(["like", "buy"])]
    return list(w.groupby(list(by))["product_id"].agg(lambda s: sorted(set(s))))


def ref_bundles(df: pd.DataFrame, window: Any, min_support: int) -> list[dict[str, Any]]:
    return ref_components(ref_baskets(df, window), min_support)


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
