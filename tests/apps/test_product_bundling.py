"""product-bundling: baskets → "bought together" edges → connected components, checked
against an independent reference (pandas baskets, pair counting, breadth-first search) —
property-tested, in-process through window workers, and on the shared 4-agent cluster."""

from __future__ import annotations

from typing import Any

import pytest
from app_helpers import (
    DATA_EPOCHS,
    WINDOW,
    frame,
    ref_baskets,
    ref_bundles,
    ref_components,
    wait_until,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.jobs.job import create_job, job_class, parse_spec
from agent.jsonable import jsonable
from agent.runtime.epochs.worker import Worker
from apps.bundles import compute_bundles
from apps.product_bundling import ProductBundling, bundling_spec
from apps.workload import ClickstreamGenerator


def make(**overrides: Any) -> ProductBundling:
    job = create_job(parse_spec(bundling_spec("pb", "t", **overrides)))
    assert isinstance(job, ProductBundling)
    return job


def as_rows(bundles: Any) -> list[dict[str, Any]]:
    return [
        dict(bundle=b.products[0], size=b.size, support=b.support, products=list(b.products))
        for b in bundles.bundles
    ]


def test_registered_with_the_papers_defaults() -> None:
    assert job_class("product-bundling") is ProductBundling
    spec = parse_spec(bundling_spec())
    assert (spec.aggregator, spec.mode, spec.epoch_seconds) == ("collect_set", "window", 30.0)
    assert (spec.window_size, spec.window_slide) == (10, 1)


def test_map_groups_likes_and_buys_by_session_or_user() -> None:
    job = make()
    like = {"ts": 1, "user_id": "u1", "session_id": "s1", "product_id": "P1", "action": "like"}
    assert job.map(like) == [(("u1", "s1"), "P1")]
    assert job.map({**like, "action": "buy"}) == [(("u1", "s1"), "P1")]
    assert job.map({**like, "action": "view"}) == []
    assert job.map({**like, "session_id": None}) == []
    assert job.map({**like, "product_id": 3}) == []
    assert make(params={"group_by": "user"}).map(like) == [("u1", "P1")]


@pytest.mark.parametrize(
    "params",
    [{"group_by": "day"}, {"min_support": 0}, {"max_basket": 1}, {"actions": "buy"}],
)
def test_bad_params_are_refused(params: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match=r"params\."):
        make(params=params)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.sets(st.sampled_from([f"P{i}" for i in range(12)]), max_size=6), max_size=25),
    st.integers(min_value=1, max_value=3),
)
def test_components_equal_breadth_first_reference(baskets: list[set[str]], support: int) -> None:
    found = compute_bundles(baskets, min_support=support)
    assert as_rows(found) == ref_components(baskets, support)
    for row in as_rows(found):
        for p in row["products"]:
            assert found.of(p) is not None and found.of(p).products[0] == row["bundle"]
    assert found.of("P99") is None


def test_oversized_baskets_are_skipped_and_counted() -> None:
    baskets = [{"a", "b"}, {"a", "b"}, {"a", "b", "c", "d"}]
    found = compute_bundles(baskets, min_support=2, max_basket=3)
    assert found.skipped_baskets == 1
    assert as_rows(found) == ref_components(baskets[:2], 2)


def test_window_workers_and_the_master_equal_pandas() -> None:
    start = 1_700_000_000
    gen = ClickstreamGenerator(seed=8, users=300, products=150, rate=500, start=start)
    events = gen.take(8000)
    kw = {"epoch_seconds": 1.0, "window_epochs": 6, "slide_epochs": 3}
    clock = lambda: start + 10_000.0  # noqa: E731 - a wall clock far past the data
    workers = [Worker(make(**kw), wall_clock=clock) for _ in range(3)]
    for i, w in enumerate(workers):
        w.process(events[i::3])
    outs = [dict(w.finish()) for w in workers]
    df = frame(events)
    master = make(**kw)
    checked = 0
    for epoch in sorted(set.intersection(*(set(o) for o in outs))):
        merged = outs[0][epoch].merge(outs[1][epoch]).merge(outs[2][epoch])
        master.on_epoch_result(epoch, merged)
        if (epoch + 1) % 3:
            assert len(merged) == 0
            continue
        window = [epoch - 5, epoch]
        assert sorted(sorted(v) for _, v in merged) == sorted(ref_baskets(df, window))
        want = ref_bundles(df, window, 2)
        pairs = [[jsonable(k), jsonable(v)] for k, v in merged]
        assert master.result_rows(pairs) == want
        assert master.window == window
        if want:
            top = want[0]
            reply = master.on_query({"product": top["products"][-1]})
            assert reply["in_bundle"] and reply["size"] == top["size"]
            assert reply["bundle"] == top["products"][:20]
            assert reply["popular"] == (top["size"] >= 3)
            checked += 1
    assert checked >= 3
    assert master.on_query({"product": "P999999"})["in_bundle"] is False
    assert master.on_query({})["bundles"] == len(master.bundles.bundles)
    assert "error" in master.on_query({"product": 5})


# ---- on the shared cluster ------------------------------------------------------------------


def test_cluster_bundles_and_queries_equal_pandas(shop: Any) -> None:
    df = frame(shop.events)
    last = shop.base + DATA_EPOCHS - 1
    want = ref_bundles(df, [last - WINDOW + 1, last], shop.min_support)
    assert want and want[0]["size"] > 20  # the data makes a big bundle (truncated replies)
    client = shop.cluster.client(2)

    def rows() -> Any:
        res = client.results(shop.bundling, last)
        return res["complete"] and res["rows"] == want

    wait_until(rows, 45, "the window's bundles at the master")
    big = want[0]["products"]
    reply = wait_until(
        lambda: (r := client.query(shop.bundling, {"product": big[-1]}))["epoch"] is not None and r,
        20,
        "a bundling answer",
    )
    window_want = ref_bundles(df, reply["window"], shop.min_support)
    (mine,) = [b for b in window_want if big[-1] in b["products"]]
    assert reply["bundle"] == mine["products"][:20]
    assert (reply["size"], reply["support"]) == (mine["size"], mine["support"])
    assert reply["truncated"] is (mine["size"] > 20)
    assert reply["popular"] is (mine["size"] >= 3)
    alone = client.query(shop.bundling, {"product": "P999999"})
    assert (alone["in_bundle"], alone["size"], alone["popular"]) == (False, 0, False)
