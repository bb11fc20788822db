"""Product bundling: products liked or bought together, grouped into bundles per window.

Job class ``"product-bundling"`` over clickstream records (``apps.workload`` schema):

* worker: ``map(record)`` → ``[(group, product_id)]`` when ``record["action"]`` is in
  ``params.actions`` (default ``["like", "buy"]``); the group is ``[user_id, session_id]``
  (``params.group_by`` ``"session"``, the default) or ``user_id`` (``"user"``). Aggregator
  ``collect_set``: every agent pre-reduces each group's products to a set, the trees merge
  the sets, so the master gets each group's *basket* for the window. Records missing a string
  ``product_id``/``user_id`` (or ``session_id`` when grouping by session) yield nothing.
* execution model: asynchronous sliding windows (``mode`` window; the paper: 300 s every 30 s
  — :func:`bundling_spec`).
* master: for every epoch that ends a window, :func:`apps.bundles.compute_bundles` turns the
  baskets into bundles with the market-basket thresholds ``params.min_support`` (baskets,
  default 2), ``params.min_confidence`` (min(P(b|a), P(a|b)), default 0.25) and
  ``params.min_lift`` (default 2.0), bundles of at most ``params.max_bundle`` products
  (default 8), baskets of at most ``params.max_basket`` products (default 50). A bundle is
  *popular* when it has at least ``params.popular_size`` products (default 3). Every param
  can change at runtime (``POST /api/v1/jobs/{name}/change``): the next window uses it.
  ``spec.trees`` must be 1.
* queries (``route`` / ``POST /api/v1/jobs/{name}/query``): ``{"product": p}`` →
  ``{"product", "in_bundle", "bundle": its products (the first ``params.max_reply``, default
  20), "truncated", "size", "support", "popular", "epoch", "window"}``; ``{}`` →
  ``{"epoch", "window", "bundles": n, "largest": [size, ...] (up to 10), "baskets",
  "skipped_baskets", "pairs", "edges", "thresholds": {...}}``.
* results API rows (:meth:`ProductBundling.result_rows`): one row per bundle,
  ``{"bundle": smallest product, "size", "support", "products"}``.
"""

from __future__ import annotations

from typing import Any

from agent.api import Job, register_job
from apps.bundles import (
    MAX_BUNDLE,
    MIN_CONFIDENCE,
    MIN_LIFT,
    MIN_SUPPORT,
    BundleSet,
    compute_bundles,
)
from apps.params import MAX_BASKET, MAX_K, float_param, int_param, str_list_param, str_param
from cbt import Snapshot

GROUPS = ("session", "user")


def bundling_spec(
    name: str = "product-bundling",
    creator: str = "elf",
    *,
    epoch_seconds: float = 30.0,
    window_epochs: int = 10,
    slide_epochs: int = 1,
    min_support: int = MIN_SUPPORT,
    **overrides: Any,
) -> dict[str, Any]:
    """A job-spec dict with the paper's defaults (a 300 s window sliding every 30 s);
    ``overrides`` sets other spec fields; ``params`` given there are merged."""
    params = {"min_support": min_support, **overrides.pop("params", {})}
    return {
        "name": name,
        "creator": creator,
        "job_class": "product-bundling",
        "aggregator": "collect_set",
        "epoch_seconds": epoch_seconds,
        "mode": "window",
        "window_size": window_epochs,
        "window_slide": slide_epochs,
        **overrides,
        "params": params,
    }


@register_job("product-bundling")
class ProductBundling(Job):
    """Baskets per user session → "bought together" edges (support, confidence, lift) →
    bundles of bounded size."""

    default_aggregator = "collect_set"

    def setup(self) -> None:
        self.actions = frozenset(str_list_param(self.params, "actions", ["like", "buy"]) or ())
        self.group_by = str_param(self.params, "group_by", "session")
        if self.group_by not in GROUPS:
            raise ValueError(f"params.group_by: must be one of {GROUPS}, got {self.group_by!r}")
        self.min_support = int_param(self.params, "min_support", MIN_SUPPORT, low=1)
        self.min_confidence = float_param(
            self.params, "min_confidence", MIN_CONFIDENCE, low=0.0, high=1.0
        )
        self.min_lift = float_param(self.params, "min_lift", MIN_LIFT, low=0.0, high=1e9)
        self.max_bundle = int_param(self.params, "max_bundle", MAX_BUNDLE, low=2, high=MAX_K)
        self.max_basket = int_param(self.params, "max_basket", 50, low=2, high=MAX_BASKET)
        self.popular_size = int_param(self.params, "popular_size", 3, low=2, high=MAX_K)
        self.max_reply = int_param(self.params, "max_reply", 20, low=1, high=MAX_K)
        if self.spec.trees != 1:
            raise ValueError("trees: product-bundling needs 1 tree (its master sees every basket)")
        if self.spec.aggregator != "collect_set":
            raise ValueError("aggregator: product-bundling collects sets ('collect_set')")
        if not hasattr(self, "bundles"):
            self.bundles = BundleSet()
            self.epoch: int | None = None
            self.window: list[int] | None = None

    # ---- worker side ----------------------------------------------------------------------
    def map(self, record: dict[str, Any]) -> list[tuple[Any, str]]:
        if record.get("action") not in self.actions:
            return []
        product, user = record.get("product_id"), record.get("user_id")
        if not (isinstance(product, str) and product and isinstance(user, str) and user):
            return []
        if self.group_by == "user":
            return [(user, product)]
        session = record.get("session_id")
        if not isinstance(session, str) or not session:
            return []
        return [((user, session), product)]

    # ---- master side ----------------------------------------------------------------------
    def bundles_of(self, baskets: Any) -> BundleSet:
        """The bundles of ``baskets`` (an iterable of product collections) with this job's
        parameters."""
        return compute_bundles(baskets, max_basket=self.max_basket, **self.thresholds())

    def thresholds(self) -> dict[str, Any]:
        """The market-basket thresholds and the bundle cap in force."""
        return {
            "min_support": self.min_support,
            "min_confidence": self.min_confidence,
            "min_lift": self.min_lift,
            "max_bundle": self.max_bundle,
        }

    def on_epoch_result(self, epoch: int, snapshot: Snapshot) -> None:
        bounds = self.spec.window_bounds(epoch)
        if bounds is None:
            return  # no window ends at this epoch
        self.bundles = self.bundles_of(products for _, products in snapshot)
        self.epoch, self.window = epoch, list(bounds)

    def result_rows(self, pairs: list[Any]) -> list[dict[str, Any]]:
        found = self.bundles_of(products for _, products in pairs)
        return [
            {
                "bundle": b.products[0],
                "size": b.size,
                "support": b.support,
                "products": list(b.products),
            }
            for b in found.bundles
        ]

    def on_query(self, message: dict[str, Any]) -> dict[str, Any]:
        product = message.get("product")
        if product is None:
            found = self.bundles
            return {
                "epoch": self.epoch,
                "window": self.window,
                "bundles": len(found.bundles),
                "largest": [b.size for b in found.bundles[:10]],
                "baskets": found.baskets,
                "skipped_baskets": found.skipped_baskets,
                "pairs": found.pairs,
                "edges": found.edges,
                "thresholds": self.thresholds(),
            }
        if not isinstance(product, str) or not product:
            return {"error": "'product' must be a non-empty string", "status": 400}
        bundle = self.bundles.of(product)
        products = list(bundle.products) if bundle is not None else []
        return {
            "product": product,
            "in_bundle": bundle is not None,
            "bundle": products[: self.max_reply],
            "truncated": len(products) > self.max_reply,
            "size": len(products),
            "support": bundle.support if bundle is not None else 0,
            "popular": bundle is not None and bundle.size >= self.popular_size,
            "epoch": self.epoch,
            "window": self.window,
        }
