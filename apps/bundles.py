"""Product bundles: market-basket association between products, grouped into bounded bundles.

Contract (:func:`compute_bundles`): a *basket* is the set of products one group (a user's
session, or a user) liked or bought in the window. Baskets with more than ``max_basket``
products are skipped and counted (``skipped_baskets``: one pathological basket must not cost
quadratic time; raise the limit to include them); the others are the window's ``baskets``
(N). For products a and b:

* ``count(a)``: the baskets holding a; ``support(a, b)``: the baskets holding both;
* ``confidence(a, b) = support / max(count(a), count(b))`` = min(P(b|a), P(a|b)) — the
  weaker of the two association rules a → b and b → a ("all-confidence": a bundle's
  products imply each other, so a niche product often bought beside a best-seller does not
  tie it to the best-seller);
* ``lift(a, b) = support · N / (count(a) · count(b))`` — how much more often the two are
  bought together than if baskets picked them independently (1: no association).

A pair is an *edge* when ``support >= min_support``, ``confidence >= min_confidence`` and
``lift >= min_lift`` (compared exactly, in integers: no rounding decides a threshold).
Bundles are grown from the edges strongest first — ordered by confidence, then lift, then
support (all descending), then the pair — by uniting the two products' bundles unless the
union would hold more than ``max_bundle`` products (size-capped single linkage, Kruskal's
order). So a bundle has 2..``max_bundle`` products, every bundle is connected by its edges,
and an edge left between two bundles joins two that together exceed the cap. With no cap
reached the bundles are exactly the connected components of the edges. Bundles come sorted
by size descending, then by their smallest product; each lists its products sorted and its
``support`` (the sum of the supports of the edges inside it).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from fractions import Fraction
from itertools import combinations
from typing import Any

#: the defaults of :func:`compute_bundles` (and of the product-bundling job's params)
MIN_SUPPORT, MIN_CONFIDENCE, MIN_LIFT, MAX_BUNDLE = 2, 0.25, 2.0, 8


@dataclass(frozen=True)
class Bundle:
    """One bundle: products bought together (see the module contract)."""

    products: tuple[str, ...]
    support: int

    @property
    def size(self) -> int:
        return len(self.products)


@dataclass(frozen=True)
class Edge:
    """One pair of products that passed the thresholds, with its measures."""

    a: str
    b: str
    support: int
    confidence: float
    lift: float


@dataclass
class BundleSet:
    """The bundles of one window, with a product → bundle index."""

    bundles: list[Bundle] = field(default_factory=list)
    edges: int = 0
    skipped_baskets: int = 0
    _index: dict[str, int] = field(default_factory=dict)
    baskets: int = 0
    pairs: int = 0  # co-occurring pairs before the thresholds

    def of(self, product: str) -> Bundle | None:
        """The bundle holding ``product`` (None: it is in none)."""
        i = self._index.get(product)
        return None if i is None else self.bundles[i]


def basket_counts(
    baskets: Iterable[Iterable[Any]], max_basket: int
) -> tuple[Counter, Counter, int, int]:
    """``(support of every co-occurring pair (a, b) with a < b, count of every product,
    baskets counted, baskets skipped for holding more than max_basket products)``."""
    support: Counter[tuple[str, str]] = Counter()
    count: Counter[str] = Counter()
    n = skipped = 0
    for basket in baskets:
        items = sorted({str(p) for p in basket})
        if len(items) > max_basket:
            skipped += 1
            continue
        n += 1
        count.update(items)
        support.update(combinations(items, 2))
    return support, count, n, skipped


def kept_edges(
    support: Counter,
    count: Counter,
    n: int,
    *,
    min_support: int,
    min_confidence: float,
    min_lift: float,
) -> list[Edge]:
    """The pairs passing the three thresholds, strongest first (the module's order)."""
    conf, lift = Fraction(min_confidence), Fraction(min_lift)
    out = []
    for (a, b), s in support.items():
        ca, cb = count[a], count[b]
        high = max(ca, cb)
        # exact: s / high >= conf and s·n / (ca·cb) >= lift, in integers
        if (
            s >= min_support
            and s * conf.denominator >= conf.numerator * high
            and s * n * lift.denominator >= lift.numerator * ca * cb
        ):
            out.append(Edge(a, b, s, s / high, s * n / (ca * cb)))
    out.sort(key=lambda e: (-e.confidence, -e.lift, -e.support, e.a, e.b))
    return out


def compute_bundles(
    baskets: Iterable[Iterable[Any]],
    *,
    min_support: int = MIN_SUPPORT,
    min_confidence: float = MIN_CONFIDENCE,
    min_lift: float = MIN_LIFT,
    max_bundle: int = MAX_BUNDLE,
    max_basket: int = 50,
) -> BundleSet:
    """The bundles of ``baskets`` (see module contract)."""
    support, count, n, skipped = basket_counts(baskets, max_basket)
    edges = kept_edges(
        support,
        count,
        n,
        min_support=min_support,
        min_confidence=min_confidence,
        min_lift=min_lift,
    )
    root: dict[str, str] = {}
    members: dict[str, list[str]] = {}

    def find(x: str) -> str:
        return root.setdefault(x, x)

    for e in edges:  # strongest first; a union never exceeds the cap
        ra, rb = find(e.a), find(e.b)
        if ra == rb:
            continue
        ma, mb = members.get(ra, [ra]), members.get(rb, [rb])
        if len(ma) + len(mb) > max_bundle:
            continue
        if len(ma) < len(mb):
            ra, rb, ma, mb = rb, ra, mb, ma
        ma.extend(mb)  # the smaller joins the larger: O(n log n) relabels in all
        members[ra] = ma
        members.pop(rb, None)
        for p in mb:
            root[p] = ra
    weight: Counter[str] = Counter()
    for e in edges:
        if root.get(e.a, e.a) == root.get(e.b, e.b):
            weight[root[e.a]] += e.support
    bundles = [Bundle(tuple(sorted(ps)), weight[r]) for r, ps in members.items()]
    bundles.sort(key=lambda b: (-b.size, b.products[0]))
    index = {p: i for i, b in enumerate(bundles) for p in b.products}
    return BundleSet(bundles, len(edges), skipped, index, n, len(support))
