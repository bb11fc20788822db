"""The jobs the demo runs, and their specs, built by the apps' own spec builders.

Contract: :func:`job_specs` returns the four demo jobs' specs — micro-promotion,
product-bundling and spam-campaign (the *data jobs*, :data:`DATA_JOBS`) starting at
``start_epoch`` with epochs of ``epoch_seconds`` and the paper's windows of
:data:`WINDOW_EPOCHS` epochs sliding by one, then the master-only sale-prediction — each
from its app module's builder (``promotion_spec``, ``bundling_spec``, ``spam_spec``,
``prediction_spec``), so the demo never re-declares what an app's spec looks like; it only
picks the parameters it shows. :data:`ZOOM` is the runtime change applied to spam-campaign.
"""

from __future__ import annotations

from typing import Any

from apps.micro_promotion import DEFAULT_DIRECTORY, promotion_spec
from apps.product_bundling import bundling_spec
from apps.sale_prediction import prediction_spec
from apps.spam_campaign import spam_spec

PROMOTION, BUNDLING, PREDICTION, SPAM = (
    "micro-promotion",
    "product-bundling",
    "sale-prediction",
    "spam-campaign",
)
DATA_JOBS = (PROMOTION, BUNDLING, SPAM)
JOBS = (PROMOTION, BUNDLING, SPAM, PREDICTION)
CREATOR = "demo"
WINDOW_EPOCHS = 10  # the paper's windows are 10 epochs (300 s every 30 s)
PAPER_EPOCH_SECONDS = 30.0
ZOOM = {"locations": [None], "max_followers": 30}  # tweets with no location, ≤ 30 followers
ZOOM_TEXT = "location none, followers <= 30"


def job_specs(epoch_seconds: float, start_epoch: int) -> list[dict[str, Any]]:
    """The four demo jobs' specs (the apps' paper defaults, windows in epochs)."""
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
        bundling_spec(
            BUNDLING,
            CREATOR,
            min_support=3,
            inputs=["clicks"],
            params={"group_by": "session", "popular_size": 3},
            **window,
            **common,
        ),
        spam_spec(SPAM, CREATOR, k=10, inputs=["tweets"], **common),
        # master-only: no agent has its input, so no worker runs
        prediction_spec(PREDICTION, CREATOR, promotion_job=PROMOTION, bundling_job=BUNDLING),
    ]
