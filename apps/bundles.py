"""Product bundles: "bought together" edges from baskets, then connected components.

Contract (:func:`compute_bundles`): a *basket* is the set of products one group (a user's
session, or a user) liked or bought in the window. Every unordered pair of distinct products
in a basket is an edge whose *support* is the number of baskets holding both. Baskets with
more than ``max_basket`` products are skipped and counted (``skipped_baskets``: one pathological
basket must not cost quadratic time; raise the limit to include them). Edges with support
``>= min_support`` are kept; a *bundle* is a connected component (union-find) of the kept
edges, so it has at least 2 products. Bundles come sorted by size descending, then by their
smallest product; each lists its products sorted and its ``support`` (the sum of its kept
edges' supports).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from itertools import combinations
from typing import Any


@dataclass(frozen=True)
class Bundle:
    """One connected component of the kept "bought together" edges."""

    products: tuple[str, ...]
    support: int

    @property
    def size(self) -> int:
        return len(self.products)


@dataclass
class BundleSet:
    """The bundles of one window, with a product → bundle index."""

    bundles: list[Bundle] = field(default_factory=list)
    edges: int = 0
    skipped_baskets: int = 0
    _index: dict[str, int] = field(default_factory=dict)

    def of(self, product: str) -> Bundle | None:
        """The bundle holding ``product`` (None: it is in none)."""
        i = self._index.get(product)
        return None if i is None else self.bundles[i]


class _UnionFind:
    def __init__(self) -> None:
        self.parent: dict[str, str] = {}

    def find(self, x: str) -> str:
        parent = self.parent
        root = x
        while parent.setdefault(root, root) != root:
            root = parent[root]
        while parent[x] != root:  # path compression
            parent[x], x = root, parent[x]
        return root

    def union(self, a: str, b: str) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            if rb < ra:
                ra, rb = rb, ra
            self.parent[rb] = ra


def basket_edges(baskets: Iterable[Iterable[Any]], max_basket: int) -> tuple[Counter, int]:
    """Support of every co-occurring product pair ``(a, b)``, ``a < b``; and how many baskets
    were skipped for holding more than ``max_basket`` products."""
    support: Counter[tuple[str, str]] = Counter()
    skipped = 0
    for basket in baskets:
        items = sorted({str(p) for p in basket})
        if len(items) > max_basket:
            skipped += 1
            continue
        support.update(combinations(items, 2))
    return support, skipped


def compute_bundles(
    baskets: Iterable[Iterable[Any]], *, min_support: int = 2, max_basket: int = 50
) -> BundleSet:
    """The bundles of ``baskets`` (see module contract)."""
    support, skipped = basket_edges(baskets, max_basket)
    kept = [(pair, w) for pair, w in support.items() if w >= min_support]
    uf = _UnionFind()
    for (a, b), _ in kept:
        uf.union(a, b)
    members: dict[str, list[str]] = {}
    weight: Counter[str] = Counter()
    for (a, _b), w in kept:
        weight[uf.find(a)] += w
    for product in uf.parent:
        members.setdefault(uf.find(product), []).append(product)
    bundles = [Bundle(tuple(sorted(ps)), weight[root]) for root, ps in members.items()]
    bundles.sort(key=lambda b: (-b.size, b.products[0]))
    index = {p: i for i, b in enumerate(bundles) for p in b.products}
    return BundleSet(bundles, len(kept), skipped, index)
