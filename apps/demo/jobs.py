"""The jobs the demo runs, and their specs, built by the apps' own spec builders.

Contract: :func:`job_specs` returns the five demo jobs' specs — micro-promotion,
product-bundling, page-latency and spam-campaign (the *data jobs*, :data:`DATA_JOBS`)
starting at ``start_epoch`` with epochs of ``epoch_seconds`` and the paper's windows of
:data:`WINDOW_EPOCHS` epochs sliding by one, then the master-only sale-prediction — each
from its app module's builder (``promotion_spec``, ``bundling_spec``, ``spam_spec``,
``prediction_spec``) or, for page-latency, the ELF QL query :func:`latency_query` (p50 and
p99 of ``request_time`` per "Video Games" product page, the directory micro-promotion
promotes, over the same window), so the demo never re-declares what an app's spec looks
like; it only picks the parameters it shows (:data:`BUNDLING_PARAMS`: the market-basket
thresholds, docs/apps.md). :data:`ZOOM` is the runtime change applied to spam-campaign.
"""

from __future__ import annotations

from typing import Any

from agent.api import spec_from_query
from apps.micro_promotion import DEFAULT_DIRECTORY, promotion_spec
from apps.product_bundling import bundling_spec
from apps.sale_prediction import prediction_spec
from apps.spam_campaign import spam_spec

PROMOTION, BUNDLING, LATENCY, PREDICTION, SPAM = (
    "micro-promotion",
    "product-bundling",
    "page-latency",
    "sale-prediction",
    "spam-campaign",
)
DATA_JOBS = (PROMOTION, LATENCY, BUNDLING, SPAM)
JOBS = (PROMOTION, LATENCY, BUNDLING, SPAM, PREDICTION)
CREATOR = "demo"
WINDOW_EPOCHS = 10  # the paper's windows are 10 epochs (300 s every 30 s)
PAPER_EPOCH_SECONDS = 30.0
ZOOM = {"locations": [None], "max_followers": 30}  # tweets with no location, ≤ 30 followers
ZOOM_TEXT = "location none, followers <= 30"
#: product-bundling's market-basket thresholds in the demo (a 10-epoch window of the feed
#: holds about 1,100 baskets: apps/bundles.py, docs/apps.md)
BUNDLING_PARAMS = {
    "group_by": "session",
    "popular_size": 3,
    "min_support": 3,
    "min_confidence": 0.25,
    "min_lift": 2.0,
    "max_bundle": 8,
}
PERCENTILES = (0.5, 0.99)


def latency_query(epoch_seconds: float) -> str:
    """page-latency's ELF QL: p50 and p99 of each "Video Games" product page's
    ``request_time`` (and its requests) over the demo's window, busiest pages first."""
    e = round(epoch_seconds * 1000)  # QL windows are whole milliseconds
    ps = ", ".join(f"{p:g}" for p in PERCENTILES)
    return (
        f"SELECT product_id AS page, approx_percentile(request_time, ARRAY[{ps}]) AS latency, "
        f"count(*) AS requests FROM clicks WHERE directory = '{DEFAULT_DIRECTORY}' "
        f"GROUP BY product_id ORDER BY requests DESC WINDOW {WINDOW_EPOCHS * e} ms EVERY {e} ms"
    )


def job_specs(epoch_seconds: float, start_epoch: int) -> list[dict[str, Any]]:
    """The five demo jobs' specs (the apps' paper defaults, windows in epochs)."""
    common: dict[str, Any] = {
        "epoch_seconds": epoch_seconds,
        "start_epoch": start_epoch,
        "allowed_lateness": min(1.0, epoch_seconds / 2),
    }
    window = {"window_epochs": WINDOW_EPOCHS, "slide_epochs": 1}
    return [
        promotion_spec(
            PROMOTION,
            CREATOR,
            k=10,
            directory=DEFAULT_DIRECTORY,
            synchronous=True,
            inputs=["clicks"],
            **window,
            **common,
        ),
        spec_from_query(LATENCY, CREATOR, latency_query(epoch_seconds), **common),
        bundling_spec(
            BUNDLING,
            CREATOR,
            inputs=["clicks"],
            params=BUNDLING_PARAMS,
            **window,
            **common,
        ),
        spam_spec(SPAM, CREATOR, k=10, inputs=["tweets"], **common),
        # master-only: no agent has its input, so no worker runs
        prediction_spec(PREDICTION, CREATOR, promotion_job=PROMOTION, bundling_job=BUNDLING),
    ]
