"""One real 4-process cluster shared by the app tests (session scope: started once), plus
the "shop" workload: micro-promotion, product-bundling and sale-prediction running over the
same generated clickstream.

Every agent process has three file inputs: ``clicks_p`` (read by micro-promotion),
``clicks_b`` (product-bundling; the same lines: each job reads its own file so neither can
consume lines before the other is running) and ``tweets`` (spam-campaign). Events are split
round-robin among the agents. The shop's events lie a few seconds in the future: the jobs are
submitted with ``start_epoch`` at their first epoch, and the events are written once every
job tree spans all agents (so no epoch is completed by a partial tree, and the master-side
state of the first epochs is exact); the events themselves then advance every worker's
watermark, so no real time has to pass for their epochs to close.
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))
# tests/agent's shared helpers (running_agents: in-process agents), for test_workload's posting
sys.path.append(str(Path(__file__).parents[1] / "agent"))

from app_helpers import AGENTS, DATA_EPOCHS, WINDOW, append_events, wait_until

from agent.runtime.host.agent import spans_one_tree
from agent.server.cluster import LocalCluster
from apps.micro_promotion import promotion_spec
from apps.product_bundling import bundling_spec
from apps.sale_prediction import prediction_spec
from apps.workload import ClickstreamGenerator, make_catalogue, plant_bundles

CREATOR = "tests"
INPUTS = ("clicks_p", "clicks_b", "tweets")
LEAD_SECONDS = 6  # the shop's first epoch starts this far ahead: time to build the job trees


@dataclass
class AppCluster:
    """The shared cluster and its agents' input files."""

    local: LocalCluster
    files: dict[int, dict[str, Path]]

    def client(self, i: int = 0) -> Any:
        return self.local.client(i)

    def write(self, input_name: str, events: list[dict[str, Any]]) -> None:
        """Append ``events`` round-robin to every agent's ``input_name`` file."""
        for i in range(AGENTS):
            append_events(self.files[i][input_name], events[i::AGENTS])


@dataclass
class Shop:
    """The clickstream jobs and the events they read."""

    cluster: AppCluster
    events: list[dict[str, Any]]
    base: int
    promotion: str = "promo"
    bundling: str = "bundles"
    prediction: str = "predict"
    k: int = 10
    min_support: int = 2
    max_reply: int = 3  # products per bundling reply: the planted bundles of 4 are truncated


@pytest.fixture(scope="session")
def app_cluster(tmp_path_factory: pytest.TempPathFactory) -> Any:
    root = tmp_path_factory.mktemp("apps-cluster")
    files = {i: {name: root / f"{name}-{i}.jsonl" for name in INPUTS} for i in range(AGENTS)}
    for per_agent in files.values():
        for path in per_agent.values():
            path.touch()
    inputs = {i: {name: str(p) for name, p in per_agent.items()} for i, per_agent in files.items()}
    local = LocalCluster(AGENTS, root, inputs=inputs, extra_args=["--log-level", "WARNING"])
    local.start(timeout=90)
    try:
        local.wait_settled(60)
        yield AppCluster(local, files)
    finally:
        local.stop()


@pytest.fixture(scope="session")
def shop(app_cluster: AppCluster) -> Shop:
    base = math.floor(time.time()) + LEAD_SECONDS
    catalogue = make_catalogue(300, seed=11)
    gen = ClickstreamGenerator(
        seed=11,
        users=400,
        rate=800.0,
        start=base,
        catalogue=catalogue,
        bundles=plant_bundles(catalogue, seed=11),  # "bought together" groups to find
    )
    events = []
    for event in gen:
        if event["ts"] >= base + DATA_EPOCHS:
            break
        events.append(event)
    shop = Shop(app_cluster, events, base)
    client = app_cluster.client(0)
    common = {"creator": CREATOR, "epoch_seconds": 1.0, "window_epochs": WINDOW}
    extra = {"start_epoch": base, "allowed_lateness": 0.5}
    client.submit(promotion_spec(shop.promotion, k=shop.k, inputs=["clicks_p"], **common, **extra))
    client.submit(
        bundling_spec(
            shop.bundling,
            min_support=shop.min_support,
            inputs=["clicks_b"],
            params={"max_reply": shop.max_reply},
            **common,
            **extra,
        )
    )
    client.submit(
        prediction_spec(
            shop.prediction,
            CREATOR,
            promotion_job=shop.promotion,
            bundling_job=shop.bundling,
        )
    )
    for i in range(AGENTS):
        wait_until(
            lambda i=i: (
                {shop.promotion, shop.bundling, shop.prediction}
                <= set(app_cluster.client(i).status()["jobs"])
            ),
            30,
            f"the shop jobs on agent {i}",
        )
    for job in (shop.promotion, shop.bundling):
        wait_until(lambda job=job: tree_spans_all(app_cluster, job), 30, f"{job}'s tree")
    assert time.time() < base + 1, "the job trees took too long: the first epoch closed empty"
    # one record per agent past the last data epoch (a view: no job maps it) closes that
    # epoch at once instead of when the wall clock passes it
    closer = {"ts": base + DATA_EPOCHS + 0.6, "user_id": "u-close", "session_id": "s-close"}
    closer |= {"product_id": "P-close", "directory": "-", "action": "view"}
    for name in ("clicks_p", "clicks_b"):
        app_cluster.write(name, events)
        app_cluster.write(name, [closer] * AGENTS)
    return shop


def tree_spans_all(app_cluster: AppCluster, job: str) -> bool:
    """Whether the job's tree 0 holds every agent, with one root."""
    views = []
    for i in range(AGENTS):
        info = app_cluster.client(i).status()["jobs"][job]
        tid = info["tree_ids"][0]
        views.append(next((v for v in info["trees"] if v["tree_id"] == tid), None))
    return spans_one_tree(views)
