"""Sale prediction: joins micro-promotion and product-bundling answers for one product.

Job class ``"sale-prediction"``: a master-side job. Its ``map`` yields nothing; submit it
with an input no agent has (:func:`prediction_spec` uses ``inputs: ["none"]``) so no agent
runs a worker for it — a query still reaches its master, the agent closest to its id.

Query (``route`` / ``POST /api/v1/jobs/{name}/query``) ``{"product": p}``: the job routes
``{"product": p}`` to the masters of ``params.promotion_job`` (default
``"micro-promotion"``) and ``params.bundling_job`` (default ``"product-bundling"``), both
submitted by ``params.creator`` (default: this job's creator), with
``context.route(agent.api.app_id(name, creator), message)``, concurrently, and answers::

    {"product", "promoted", "rank", "epoch": promotion epoch,
     "in_bundle", "bundle_size", "popular_bundle", "bundle_epoch",
     "prediction": "high" | "medium" | "low"}

``prediction`` is ``high`` when the product is promoted *and* in a popular bundle, ``medium``
when exactly one holds, ``low`` otherwise. A job that cannot be asked (not running, master
unreachable, error reply) makes the reply ``{"error": "<job>: <why>", "status": 503}``: no
partial join is passed off as an answer. A query without a string ``product`` gets status 400.
"""

from __future__ import annotations

import asyncio
from typing import Any

from agent.api import Job, app_id, register_job
from apps.params import str_param

NO_INPUT = "none"


def prediction_spec(
    name: str = "sale-prediction",
    creator: str = "elf",
    *,
    promotion_job: str = "micro-promotion",
    bundling_job: str = "product-bundling",
    **overrides: Any,
) -> dict[str, Any]:
    """A job-spec dict for a master-only sale-prediction job (no worker anywhere)."""
    params = {
        "promotion_job": promotion_job,
        "bundling_job": bundling_job,
        **overrides.pop("params", {}),
    }
    return {
        "name": name,
        "creator": creator,
        "job_class": "sale-prediction",
        "inputs": [NO_INPUT],
        **overrides,
        "params": params,
    }


def predict(promoted: bool, popular_bundle: bool) -> str:
    """``high`` (both), ``medium`` (one) or ``low`` (neither)."""
    return ("low", "medium", "high")[int(promoted) + int(popular_bundle)]


@register_job("sale-prediction")
class SalePrediction(Job):
    """Routes a product query to the promotion and bundling masters and joins the replies."""

    def setup(self) -> None:
        self.promotion_job = str_param(self.params, "promotion_job", "micro-promotion")
        self.bundling_job = str_param(self.params, "bundling_job", "product-bundling")
        self.creator = str_param(self.params, "creator", self.spec.creator)

    def map(self, record: dict[str, Any]) -> list[Any]:
        return []

    async def _ask(self, job: str, message: dict[str, Any]) -> dict[str, Any]:
        assert self.context is not None
        try:
            return await self.context.route(app_id(job, self.creator), message)
        except Exception as exc:
            return {"error": f"{job}: {exc}", "status": 503}

    def join(self, product: str, promo: dict[str, Any], bundle: dict[str, Any]) -> dict[str, Any]:
        """The joined answer for ``product`` from the two jobs' replies."""
        promoted = bool(promo.get("promoted"))
        popular = bool(bundle.get("popular"))
        return {
            "product": product,
            "promoted": promoted,
            "rank": promo.get("rank"),
            "epoch": promo.get("epoch"),
            "in_bundle": bool(bundle.get("in_bundle")),
            "bundle_size": int(bundle.get("size") or 0),
            "popular_bundle": popular,
            "bundle_epoch": bundle.get("epoch"),
            "prediction": predict(promoted, popular),
        }

    async def on_query(self, message: dict[str, Any]) -> dict[str, Any]:
        product = message.get("product")
        if not isinstance(product, str) or not product:
            return {"error": "query needs a non-empty string 'product'", "status": 400}
        if self.context is None:
            return {"error": "the job is not bound to an agent", "status": 503}
        ask = {"product": product}
        promo, bundle = await asyncio.gather(
            self._ask(self.promotion_job, ask), self._ask(self.bundling_job, ask)
        )
        for job, reply in ((self.promotion_job, promo), (self.bundling_job, bundle)):
            if "error" in reply:
                text = str(reply["error"])
                return {"error": text if text.startswith(job) else f"{job}: {text}", "status": 503}
        return self.join(product, promo, bundle)
