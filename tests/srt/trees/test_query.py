"""Cross-job queries: route to the root of a tree id, its handler's reply comes back; no
handler / handler errors / timeouts raise clear errors."""

from __future__ import annotations

import asyncio

import pytest
from srt_helpers import Cluster, start_cluster

from srt.ids import app_id
from srt.trees.types import QueryError, QueryTimeout

N = 12


@pytest.fixture
async def cluster():
    c = await start_cluster(N)
    yield c
    await c.close()


async def test_query_returns_the_masters_reply(cluster: Cluster) -> None:
    sales = app_id("sales", "kim")
    await cluster.converge([sales])
    master = cluster.true_root(sales)
    await master.join(sales, job="sales")
    for m in cluster.live():
        m.on_query(
            lambda tree_id, msg, me=m.overlay.id: {
                "answer": msg["x"] * 2,
                "by": me.to_bytes(20, "big"),
            }
        )
    asker = next(m for m in cluster.live() if m is not master)
    reply = await asker.query(sales, {"x": 21}, timeout=3.0)
    assert reply["answer"] == 42
    assert int.from_bytes(reply["by"], "big") == master.overlay.id
    # the master may query its own job too (delivered locally)
    assert (await master.query(sales, {"x": 1}))["answer"] == 2

    async def slow_async(tree_id: int, msg: dict) -> dict:
        await asyncio.sleep(0.01)
        return {"tree": tree_id.to_bytes(20, "big")}

    master.on_query(slow_async)
    assert (await asker.query(sales, {}))["tree"] == sales.to_bytes(20, "big")


async def test_query_errors_and_timeouts_are_clear(cluster: Cluster) -> None:
    key = app_id("inventory", "lee")
    await cluster.converge([key])
    master = cluster.true_root(key)
    asker = next(m for m in cluster.live() if m is not master)
    with pytest.raises(QueryError, match="no query handler"):
        await asker.query(key, {"q": 1}, timeout=3.0)

    def broken(tree_id: int, msg: dict) -> dict:
        raise KeyError("missing")

    master.on_query(broken)
    with pytest.raises(QueryError, match="KeyError"):
        await asker.query(key, {"q": 1}, timeout=3.0)
    master.on_query(lambda t, m: [1, 2])  # not a dict
    with pytest.raises(QueryError, match="not dict"):
        await asker.query(key, {"q": 1}, timeout=3.0)

    gate = asyncio.Event()

    async def stuck(tree_id: int, msg: dict) -> dict:
        await gate.wait()
        return {}

    master.on_query(stuck)
    with pytest.raises(QueryTimeout, match=r"timed out after 0.3s waiting for the reply"):
        await asker.query(key, {"q": 1}, timeout=0.3)
    gate.set()
    with pytest.raises(TypeError):
        await asker.query(key, ["not", "a", "dict"])  # type: ignore[arg-type]
