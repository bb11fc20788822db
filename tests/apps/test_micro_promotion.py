"""micro-promotion: per-window top-k clicked "Video Games" products, checked against pandas
over the same clickstream — in-process through workers, and on the shared 4-agent cluster,
where every agent must answer "is P promoted now?" from its own state."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from app_helpers import AGENTS, DATA_EPOCHS, frame, ref_clicks, ref_top, wait_until

from agent.client import ApiError
from agent.jobs.job import create_job, job_class, parse_spec
from agent.runtime.epochs.worker import Worker
from apps.micro_promotion import MicroPromotion, promotion_spec
from apps.workload import ClickstreamGenerator
from cbt import CompressedBufferTree, Snapshot


def snapshot(agg: str, pairs: dict[Any, Any]) -> Snapshot:
    tree = CompressedBufferTree(agg)
    tree.insert_many(list(pairs), list(pairs.values()))
    return tree.flush()


def make(**overrides: Any) -> MicroPromotion:
    job = create_job(parse_spec(promotion_spec("mp", "t", **overrides)))
    assert isinstance(job, MicroPromotion)
    return job


def test_registered_with_the_papers_defaults() -> None:
    assert job_class("micro-promotion") is MicroPromotion
    spec = parse_spec(promotion_spec())  # synchronous: batch epochs, windowed at the master
    assert (spec.epoch_seconds, spec.mode) == (30.0, "batch")
    assert spec.params == {
        "k": 10,
        "directory": "Video Games",
        "window_epochs": 10,
        "slide_epochs": 1,
    }
    spec = parse_spec(promotion_spec(synchronous=False))  # workers window
    assert (spec.mode, spec.window_size, spec.window_slide) == ("window", 10, 1)
    assert "window_epochs" not in spec.params


def test_map_keeps_clicks_of_the_directory_only() -> None:
    job = make()
    click = {"ts": 1, "product_id": "P1", "directory": "Video Games", "action": "click"}
    assert job.map_keys(click) == ["P1"]
    assert list(job.map(click)) == [("P1", 1)]
    assert job.map_keys({**click, "action": "view"}) == []
    assert job.map_keys({**click, "directory": "Books"}) == []
    assert job.map_keys({**click, "product_id": 7}) == []
    assert job.map_keys({"ts": 1}) == []
    books = make(directory="Books", params={"actions": ["click", "buy"]})
    assert books.map_keys({**click, "directory": "Books", "action": "buy"}) == ["P1"]


@pytest.mark.parametrize(
    "overrides",
    [
        {"k": 0},
        {"directory": ""},
        {"params": {"actions": []}},
        {"trees": 2},
        {"window_epochs": 2, "slide_epochs": 3},
        {"mode": "iterative"},
    ],
)
def test_bad_params_are_refused(overrides: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match=r"params\.|trees|mode"):
        make(**overrides)


@pytest.mark.parametrize("synchronous", [True, False])
def test_windows_through_two_workers_equal_pandas(synchronous: bool) -> None:
    start = 1_700_000_000
    events = ClickstreamGenerator(seed=5, users=30, products=200, rate=400, start=start).take(6000)
    kw = {"epoch_seconds": 1.0, "window_epochs": 5, "slide_epochs": 2, "k": 5}
    job = make(synchronous=synchronous, **kw)
    clock = lambda: start + 10_000.0  # noqa: E731 - a wall clock far past the data
    workers = [Worker(make(synchronous=synchronous, **kw), wall_clock=clock) for _ in range(2)]
    for i, w in enumerate(workers):
        w.process(events[i::2])
    outs = [dict(w.finish()) for w in workers]
    df = frame(events)
    first = min(outs[0])
    checked = 0
    for epoch in sorted(set(outs[0]) & set(outs[1])):
        merged: Snapshot = outs[0][epoch].merge(outs[1][epoch])
        if synchronous:  # each epoch's own clicks reach the master
            assert dict(merged.to_dict()) == dict(ref_clicks(df, [epoch, epoch]))
        message = job.promotion(epoch, merged)
        if (epoch + 1) % 2:
            assert message is None
            continue
        assert message is not None
        # the synchronous master's window starts at the first epoch it saw
        window = [max(epoch - 4, first) if synchronous else epoch - 4, epoch]
        assert message["window"] == window
        if not synchronous:
            assert dict(merged.to_dict()) == dict(ref_clicks(df, window))
        assert message["top"] == ref_top(df, window, 5)
        checked += 1
    assert checked >= 5


def test_the_synchronous_master_restarts_its_window_after_a_gap() -> None:
    job = make(epoch_seconds=1.0, window_epochs=3, slide_epochs=1, k=3)
    for epoch, counts in [(10, {"P1": 1}), (11, {"P2": 2}), (12, {"P1": 2})]:
        message = job.promotion(epoch, snapshot("count", counts))
    assert message == {
        "kind": "promote",
        "epoch": 12,
        "window": [10, 12],
        "top": [["P1", 3], ["P2", 2]],
    }
    assert job.promotion(12, snapshot("count", {"P9": 9})) is None  # a repeat: ignored
    message = job.promotion(15, snapshot("count", {"P3": 1}))  # a gap (new master)
    assert message is not None
    assert (message["window"], message["top"]) == ([15, 15], [["P3", 1]])


def test_every_agent_keeps_the_newest_promotion_and_answers_locally() -> None:
    job = make(k=3)
    assert job.local_query({"product": "P1"})["promoted"] is False
    assert job.local_query({}) == {"epoch": None, "window": None, "top": []}
    message = {"kind": "promote", "epoch": 12, "window": [3, 12], "top": [["P9", 8], ["P1", 5]]}
    job.on_multicast(message)
    assert job.local_query({"product": "P1"}) == {
        "product": "P1",
        "promoted": True,
        "rank": 2,
        "clicks": 5,
        "epoch": 12,
        "window": [3, 12],
    }
    job.on_multicast({**message, "epoch": 11, "top": [["P2", 1]]})  # older: ignored
    job.on_multicast({"kind": "promote", "epoch": "x", "top": None})  # malformed: ignored
    job.on_multicast({"kind": "other"})
    assert job.local_query({"product": "P1"})["rank"] == 2
    assert job.on_query({"product": "P2"})["promoted"] is False
    assert "error" in job.local_query({"product": ""})


class FakeContext:
    """The part of JobContext the master uses."""

    def __init__(self, master: bool) -> None:
        self.is_master = master
        self.sent: list[dict[str, Any]] = []

    async def multicast(self, message: dict[str, Any]) -> None:
        self.sent.append(message)


def test_the_master_multicasts_each_window_it_ends() -> None:
    job = make(epoch_seconds=1.0, window_epochs=4, slide_epochs=2, k=2, synchronous=False)
    ctx = FakeContext(master=True)
    job.bind(ctx)  # type: ignore[arg-type]
    counts = snapshot("count", {"P1": 3, "P2": 7, "P3": 3})
    asyncio.run(job.on_epoch_result(10, counts))  # (10 + 1) % 2: no window ends
    asyncio.run(job.on_epoch_result(11, counts))
    assert ctx.sent == [
        {"kind": "promote", "epoch": 11, "window": [8, 11], "top": [["P2", 7], ["P1", 3]]}
    ]
    assert job.local_query({"product": "P2"})["rank"] == 1
    follower = make(epoch_seconds=1.0, window_epochs=4, slide_epochs=2, synchronous=False)
    follower.bind(FakeContext(master=False))  # type: ignore[arg-type]
    asyncio.run(follower.on_epoch_result(11, counts))
    assert follower.context.sent == []  # type: ignore[union-attr]


# ---- on the shared cluster ------------------------------------------------------------------


def test_cluster_results_and_every_agents_local_answers_equal_pandas(shop: Any) -> None:
    df = frame(shop.events)
    client = shop.cluster.client(1)
    last = shop.base + DATA_EPOCHS - 1

    for epoch in range(shop.base, last + 1):  # synchronous: each epoch's own clicks

        def epoch_counts(epoch: int = epoch) -> bool:
            res = client.results(shop.promotion, epoch)
            return res["complete"] and dict(res["rows"]) == dict(ref_clicks(df, [epoch, epoch]))

        wait_until(epoch_counts, 45, f"the clicks of epoch {epoch} at the master")
    want_all = ref_top(df, [shop.base, last], shop.k)
    assert len(want_all) == shop.k

    for i in range(AGENTS):
        agent = shop.cluster.client(i)
        seen: dict[str, Any] = {}

        def promoted_here(agent: Any = agent, seen: dict[str, Any] = seen) -> bool:
            reply = agent.local(shop.promotion)
            seen.update(reply)
            return (
                reply["epoch"] is not None
                and reply["epoch"] >= last
                and reply["top"] == (ref_top(df, reply["window"], shop.k))
            )

        wait_until(promoted_here, 30, f"agent {i}'s promoted set")
        third = seen["top"][2][0]
        reply = agent.local(shop.promotion, product=third)
        assert reply["epoch"] >= seen["epoch"]
        want = ref_top(df, reply["window"], shop.k)
        assert reply["promoted"] == (third in [p for p, _ in want])
        if reply["epoch"] == seen["epoch"]:
            assert (reply["rank"], reply["clicks"]) == (3, seen["top"][2][1])
        assert agent.local(shop.promotion, product="P999999")["promoted"] is False

    # the master answers cross-job queries from the same state
    product = want_all[0][0]
    master = client.query(shop.promotion, {"product": product})
    want = [p for p, _ in ref_top(df, master["window"], shop.k)]
    assert master["promoted"] == (product in want)
    assert master["rank"] == (want.index(product) + 1 if product in want else None)
    with pytest.raises(ApiError) as err:
        client.local(shop.bundling, product="P1")  # a job without local_query
    assert err.value.status == 404
    with pytest.raises(ApiError) as err:
        client.local("no-such-job")
    assert err.value.status == 404
    with pytest.raises(ApiError) as err:
        client.local(shop.promotion, product="")
    assert err.value.status == 400
