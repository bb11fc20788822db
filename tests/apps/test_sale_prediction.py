"""sale-prediction: routes a product query to the micro-promotion and product-bundling
masters and joins the answers — with a fake context in-process, and on the shared cluster
against pandas references for the windows the two masters report."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from app_helpers import AGENTS, DATA_EPOCHS, WINDOW, frame, ref_bundles, ref_top, wait_until

from agent.errors import Unavailable
from agent.jobs.job import create_job, job_class, parse_spec
from apps.sale_prediction import SalePrediction, predict, prediction_spec
from srt.ids import app_id


def make(**overrides: Any) -> SalePrediction:
    job = create_job(parse_spec(prediction_spec("sp", "alice", **overrides)))
    assert isinstance(job, SalePrediction)
    return job


class Routes:
    """A context whose ``route`` answers from a table keyed by app id."""

    def __init__(self, replies: dict[int, Any]) -> None:
        self.replies = replies
        self.asked: list[tuple[int, dict[str, Any]]] = []

    async def route(self, app: int, message: dict[str, Any]) -> dict[str, Any]:
        self.asked.append((app, message))
        reply = self.replies[app]
        if isinstance(reply, Exception):
            raise reply
        return reply


def test_registered_master_only_and_predicts_from_both_answers() -> None:
    assert job_class("sale-prediction") is SalePrediction
    spec = parse_spec(prediction_spec())
    assert spec.inputs == ("none",)
    job = make()
    assert job.map({"ts": 1, "product_id": "P1"}) == []
    assert [predict(a, b) for a in (False, True) for b in (False, True)] == [
        "low",
        "medium",
        "medium",
        "high",
    ]


def test_query_routes_to_both_masters_and_joins() -> None:
    job = make(params={"creator": "bob"}, promotion_job="promo", bundling_job="bund")
    promo = {"product": "P1", "promoted": True, "rank": 4, "clicks": 9, "epoch": 70}
    bund = {"product": "P1", "in_bundle": True, "size": 5, "popular": True, "epoch": 69}
    ctx = Routes({app_id("promo", "bob"): promo, app_id("bund", "bob"): bund})
    job.bind(ctx)  # type: ignore[arg-type]
    reply = asyncio.run(job.on_query({"product": "P1"}))
    assert reply == {
        "product": "P1",
        "promoted": True,
        "rank": 4,
        "epoch": 70,
        "in_bundle": True,
        "bundle_size": 5,
        "popular_bundle": True,
        "bundle_epoch": 69,
        "prediction": "high",
    }
    assert sorted(ctx.asked) == sorted(
        [(app_id("promo", "bob"), {"product": "P1"}), (app_id("bund", "bob"), {"product": "P1"})]
    )
    ctx.replies[app_id("bund", "bob")] = Unavailable("no reply from the master")
    failed = asyncio.run(job.on_query({"product": "P1"}))
    assert failed["status"] == 503 and failed["error"].startswith("bund: ")
    assert asyncio.run(job.on_query({"product": 3}))["status"] == 400


@pytest.mark.parametrize("params", [{"promotion_job": ""}, {"creator": 5}])
def test_bad_params_are_refused(params: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match=r"params\."):
        make(params=params)


# ---- on the shared cluster ------------------------------------------------------------------


def test_cluster_joins_promotion_and_bundles_like_pandas(shop: Any) -> None:
    df = frame(shop.events)
    last = shop.base + DATA_EPOCHS - 1
    top = ref_top(df, [shop.base, last], shop.k)
    bundles = ref_bundles(df, [shop.base, last], shop.min_support)
    bundled = {p for b in bundles for p in b["products"]}
    promoted = [p for p, _ in top]
    candidates = [
        next(p for p in promoted if p in bundled),  # promoted and bundled
        next((p for p in promoted if p not in bundled), promoted[-1]),
        next(p for p in sorted(bundled) if p not in promoted),
        "P999999",  # neither
    ]
    for i, product in enumerate(candidates):
        client = shop.cluster.client(i % AGENTS)
        reply = wait_until(
            lambda c=client, p=product: (
                (r := c.query(shop.prediction, {"product": p}))["epoch"] is not None
                and r["bundle_epoch"] is not None
                and r["epoch"] >= last
                and r["bundle_epoch"] >= last
                and r
            ),
            30,
            f"a prediction for {product}",
        )
        want_top = [p for p, _ in ref_top(df, [reply["epoch"] - WINDOW + 1, reply["epoch"]], 10)]
        window = [reply["bundle_epoch"] - WINDOW + 1, reply["bundle_epoch"]]
        mine = [b for b in ref_bundles(df, window, shop.min_support) if product in b["products"]]
        size = mine[0]["size"] if mine else 0
        assert reply["promoted"] == (product in want_top)
        assert reply["rank"] == (want_top.index(product) + 1 if product in want_top else None)
        assert (reply["in_bundle"], reply["bundle_size"]) == (bool(mine), size)
        assert reply["popular_bundle"] == (size >= 3)
        assert reply["prediction"] == predict(reply["promoted"], size >= 3)
    # master-only: no agent runs a worker (or joins a tree) for it
    for i in range(AGENTS):
        assert shop.cluster.client(i).status()["jobs"][shop.prediction]["roles"] == []
