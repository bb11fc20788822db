"""Hot replicas (agent/runtime/recovery/checkpoints.py): holder choice, the holder's bounded store
(hypothesis against a dict model), and the origin's sender against real loopback sockets."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent.runtime.recovery.checkpoints import (
    CheckpointSender,
    CheckpointStore,
    decode_epochs,
    pick_holders,
)
from cbt import CompressedBufferTree, Snapshot


@dataclass(frozen=True)
class Peer:
    id: int
    domain: str


peers_st = st.lists(
    st.builds(Peer, st.integers(0, 2**16), st.sampled_from(["a", "b", "c", "d"])),
    max_size=12,
    unique_by=lambda p: p.id,
)


@given(peers_st, st.integers(0, 2**16), st.sampled_from(["a", "b", "x"]), st.integers(0, 5))
def test_holders_are_the_closest_on_other_domains_first(
    peers: list[Peer], origin: int, domain: str, k: int
) -> None:
    chosen = pick_holders(origin, domain, peers, k)
    others = [p for p in peers if p.id != origin]
    assert len(chosen) == min(k, len(others))
    assert len({p.id for p in chosen}) == len(chosen) and origin not in {p.id for p in chosen}
    foreign = {p.domain for p in others} - {domain}
    chosen_domains = [p.domain for p in chosen]
    # as many distinct foreign domains as k and the cluster allow, each by its closest peer
    wanted = min(k, len(foreign))
    assert len(set(chosen_domains) - {domain}) >= wanted
    for p in chosen[:wanted]:
        closer = [q for q in others if q.domain == p.domain and q.id ^ origin < p.id ^ origin]
        assert not closer


ops = st.lists(
    st.tuples(
        st.integers(0, 3),  # origin
        st.one_of(st.none(), st.integers(0, 20)),  # committed
        st.dictionaries(st.integers(0, 25), st.binary(min_size=1, max_size=40), max_size=5),
    ),
    max_size=30,
)


@given(ops, st.integers(40, 400), st.lists(st.integers(0, 400), max_size=30))
def test_the_holder_store_keeps_what_a_model_keeps_within_its_bound(
    operations: list[tuple[int, int | None, dict[int, bytes]]], budget: int, limits: list[int]
) -> None:
    """Also when the agent's memory budget moves the bound between writes (``set_limit``:
    it sheds at once)."""
    store = CheckpointStore(max_bytes=budget)
    committed: dict[int, int] = {}
    for n, (origin, c, epochs) in enumerate(operations):
        if n < len(limits):
            budget = limits[n]
            store.set_limit(budget)
            assert store.bytes <= budget
        store.keep(origin, "job", 7, c, epochs)
        if c is not None:
            committed[origin] = max(committed.get(origin, -1), c)
        held = {o: store.fetch(o, "job", 7, None) for o in range(4)}
        assert store.bytes == sum(len(b) for h in held.values() for b in h.values())
        assert store.bytes <= budget
        for o, h in held.items():
            # never an epoch the origin has committed; what is held is what it sent
            assert all(e > committed.get(o, -1) for e in h)
    store.forget_job("job")
    assert store.bytes == 0 and store.fetch(0, "job", 7, None) == {}


def test_decode_epochs_refuses_malformed_bodies() -> None:
    assert decode_epochs({"3": "YWJj"}) == {3: b"abc"}
    for bad in ([], {"x": "YWJj"}, {"3": 5}, {"3": "!!"}, {str(i): "" for i in range(100)}):
        with pytest.raises(ValueError):
            decode_epochs(bad)


def snap(n: int) -> Snapshot:
    t = CompressedBufferTree(aggregator="sum")
    t.insert("k", n)
    return t.flush()


class Retained:
    def __init__(self, held: dict[tuple[int, int], Snapshot]) -> None:
        self.held = held

    def get(self, tree: int, epoch: int) -> Snapshot | None:
        return self.held.get((tree, epoch))

    def records(self, tree: int, epoch: int) -> int | None:
        return epoch * 10 if (tree, epoch) in self.held else None


class Client:
    """Records the checkpoint requests (what the holders' data-plane route receives)."""

    def __init__(self, down: set[str]) -> None:
        self.down = down
        self.posts: list[tuple[str, dict[str, Any]]] = []

    async def post_json(self, url: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
        if url in self.down:
            raise ConnectionRefusedError(url)
        self.posts.append((url, body))
        return {"held": len(body["epochs"])}


class Network:
    node_id = 0b1000
    domain = "a"

    def __init__(self, client: Client) -> None:
        self.client = client

    def neighbours(self) -> list[Peer]:
        return [Peer(0b1001, "a"), Peer(0b1010, "b"), Peer(0b1100, "c"), Peer(0b0001, "b")]

    async def data_url_of(self, node: Peer) -> str:
        return f"http://h{node.id}"


async def test_the_sender_sends_only_uncommitted_epochs_to_k_holders_on_other_domains() -> None:
    held = {(7, e): snap(e) for e in range(10, 14)}
    client = Client(down={"http://h12"})
    committed = {7: 11}
    sender = CheckpointSender(
        "job", Retained(held), Network(client), lambda: 2, committed.get, delay=0.01
    )
    task = asyncio.create_task(sender.run())
    for e in range(10, 14):
        sender.closed(7, e)
    for _ in range(200):
        if sender.sent_epochs and sender.failures:
            break
        await asyncio.sleep(0.01)
    sender.close()
    await asyncio.wait_for(task, 1)
    # holders: the closest on domains other than "a" - 0b1010 (b) then 0b1100 (c), down
    assert sender.holders == ["a", "c"]
    assert [u for u, _ in client.posts] == ["http://h10"]
    body = client.posts[0][1]
    assert sorted(int(e) for e in body["epochs"]) == [12, 13]  # 10, 11 were committed
    assert body["committed"] == 11 and body["origin"] == "8"
    assert body["records"] == {"12": 120, "13": 130}
    sent = decode_epochs(body["epochs"])
    assert {e: Snapshot.from_bytes(b).to_dict() for e, b in sent.items()} == {
        12: snap(12).to_dict(),
        13: snap(13).to_dict(),
    }
    # per holder: 10 and 11 skipped (committed) for both, one refused request to h12
    assert sender.skipped_committed == 4 and sender.failures == 1


async def test_the_checkpoint_routes_hold_and_answer_and_refuse_malformed_bodies() -> None:
    from agent_helpers import running_agents

    from srt.dataplane.client import DataPlaneError

    async with running_agents(1) as (agent,):
        url, client = agent.data_url, agent.client
        body = {"job": "wc", "tree": 7, "origin": "ab", "committed": 3,
                "epochs": {"3": "YQ==", "4": "Yg==", "5": "Yw=="}, "records": {"4": 9}}  # fmt: skip
        assert await client.post_json(url, "/agent/v1/checkpoint", body) == {"held": 2}
        got = await client.post_json(
            url, "/agent/v1/checkpoint/fetch", {"job": "wc", "tree": 7, "origin": "ab"}
        )
        assert got == {"epochs": {"4": "Yg==", "5": "Yw=="}, "records": {"4": 9}, "seen": None}
        # an origin that read records of epochs ahead of the clock says how far it read
        await client.post_json(url, "/agent/v1/checkpoint", {**body, "epochs": {}, "seen": 42})
        got = await client.post_json(
            url, "/agent/v1/checkpoint/fetch", {"job": "wc", "tree": 7, "origin": "ab"}
        )
        assert got["seen"] == 42 and got["epochs"] == {"4": "Yg==", "5": "Yw=="}
        assert agent.status()["checkpoints_held"]["epochs"] == 2
        bad = [
            {**body, "origin": "zz"},
            {**body, "origin": "1" + "0" * 40},  # not a 160-bit id
            {**body, "job": 5},
            {**body, "committed": "3"},
            {**body, "epochs": {"x": "YQ=="}},
            {**body, "epochs": {"4": "%%"}},
            {**body, "records": {"4": -1}},
            {**body, "records": [4]},
            {**body, "seen": "42"},
            {k: v for k, v in body.items() if k != "epochs"},
        ]
        for b in bad:
            try:
                await client.post_json(url, "/agent/v1/checkpoint", b)
            except DataPlaneError as exc:
                assert exc.status == 400, b
            else:
                raise AssertionError(f"accepted {b}")
        for b in [{"job": "wc", "tree": 7, "origin": "ab", "epochs": "all"}, {"job": "wc"}]:
            try:
                await client.post_json(url, "/agent/v1/checkpoint/fetch", b)
            except DataPlaneError as exc:
                assert exc.status == 400, b
            else:
                raise AssertionError(f"accepted {b}")
