"""Roots per agent: how evenly trees' masters spread over the agents (the paper's Fig. 12c).

Contract: ``roots_per_agent(node_ids, tree_ids)`` assigns every tree id to its root — the node
id XOR-closest to it, exactly as the overlay routes — and returns the distribution of the
number of roots per agent as a plain, JSON-ready dict (see :func:`roots_per_agent`). It needs
no network: the overlay's routing agrees on this root once tables are stable, which the SRT
tests check separately. ``closest_node`` is the O(160 · log N) lookup it uses.

``two_choice_tree_ids(node_ids, app_ids, choices)`` models the placement agents use: each job,
in submission order, takes the placement salt (``srt.ids.placement_id``) whose root currently
holds the fewest roots ("power of two choices", Byers et al.: the maximum load drops from
O(log N / log log N) to O(log log N)).
"""

from __future__ import annotations

from bisect import bisect_left
from collections import Counter
from collections.abc import Sequence

from srt.ids import placement_id

ID_BITS = 160


def closest_node(sorted_ids: Sequence[int], key: int) -> int:
    """The id in ``sorted_ids`` (ascending, non-empty, distinct) XOR-closest to ``key``.

    Walks the implicit binary trie of the sorted ids: at each bit the ids sharing the prefix
    chosen so far form a contiguous run, split in two by that bit; keep the half whose bit
    equals the key's, or the other half if it is empty."""
    if not sorted_ids:
        raise ValueError("no node ids")
    lo, hi = 0, len(sorted_ids)
    prefix = 0
    for bit in range(ID_BITS - 1, -1, -1):
        if hi - lo == 1:
            break
        split = bisect_left(sorted_ids, prefix | (1 << bit), lo, hi)
        want = (key >> bit) & 1
        if want:
            if split < hi:
                lo, prefix = split, prefix | (1 << bit)
            else:
                hi = split
        elif split > lo:
            hi = split
        else:
            lo, prefix = split, prefix | (1 << bit)
    return sorted_ids[lo]


def roots(node_ids: Sequence[int], tree_ids: Sequence[int]) -> dict[int, int]:
    """tree id -> the node id rooting it."""
    ordered = sorted(set(node_ids))
    return {t: closest_node(ordered, t) for t in tree_ids}


def roots_per_agent(node_ids: list[int], tree_ids: list[int]) -> dict:
    """Distribution of roots per agent.

    Returns ``agents``, ``trees``, ``max``, ``mean``, ``histogram`` (number of roots → number
    of agents, every agent counted, zeros included; keys are strings for JSON),
    ``pct_below`` (for k = 1…10: % of agents rooting fewer than k trees), and the paper's
    three checks as ``paper``: % of agents with < 3 roots (goal ≥ 99.5 at 500 trees), < 5
    (goal ≥ 99.5 at 1,000 and ≥ 95 at 2,000)."""
    agents = sorted(set(node_ids))
    if not agents:
        raise ValueError("no agents")
    per = Counter(roots(agents, tree_ids).values())
    counts = [per.get(a, 0) for a in agents]
    hist = Counter(counts)
    n = len(agents)

    def pct_below(k: int) -> float:
        return round(100.0 * sum(1 for c in counts if c < k) / n, 3)

    return {
        "agents": n,
        "trees": len(tree_ids),
        "max": max(counts),
        "mean": round(len(tree_ids) / n, 4),
        "histogram": {str(k): hist[k] for k in sorted(hist)},
        "pct_below": {str(k): pct_below(k) for k in range(1, 11)},
        "paper": {"pct_below_3": pct_below(3), "pct_below_5": pct_below(5)},
    }


def two_choice_tree_ids(
    node_ids: Sequence[int], app_ids: Sequence[int], choices: int = 2
) -> list[int]:
    """Tree-0 ids of jobs placed one after another, each on the least-loaded of ``choices``
    candidate roots (ties: the lower salt). ``choices=1`` is plain rendezvous on the appId."""
    if choices < 1:
        raise ValueError("choices must be >= 1")
    ordered = sorted(set(node_ids))
    load: Counter[int] = Counter()
    out = []
    for app in app_ids:
        candidates = [placement_id(app, salt) for salt in range(choices)]
        best = min(candidates, key=lambda t: load[closest_node(ordered, t)])
        load[closest_node(ordered, best)] += 1
        out.append(best)
    return out
