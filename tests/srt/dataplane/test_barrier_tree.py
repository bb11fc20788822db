"""A 3-level tree of EpochCombiners wired with real DataPlaneServers and UpstreamSenders in one
process: every epoch's result at the root equals a Counter over all inputs (group-by and an
exact top-k of sums), epochs reach the root in order although inputs arrive shuffled and
duplicated, and children delivering out of order over HTTP still come out in order."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from dataplane_helpers import SECRET, snap_of, wait_for

from srt.config import Tunables
from srt.dataplane import DataPlaneClient, DataPlaneServer, SnapshotName
from srt.dataplane.barrier import EpochCombiner, snapshot_handler
from srt.dataplane.operators import GroupByOperator, LevelOperator, TopKOperator
from srt.dataplane.upstream import UpstreamSender

JOB, TREE = "wordcount", 0x5EED
# node id -> parent id (None: the root / master); every node has local input
TOPOLOGY = {1: None, 2: 1, 3: 1, 4: 2, 5: 2, 6: 3, 7: 3, 8: 3}
EPOCHS = 5
VOCAB = [f"w{i}" for i in range(40)]


class Node:
    def __init__(self, nid: int, operator: LevelOperator, results: list) -> None:
        self.nid = nid
        self.operator = operator
        self.results = results
        self.server = DataPlaneServer(SECRET)
        self.client = DataPlaneClient(SECRET, tunables=Tunables(send_backoff=0.01))
        self.url = ""
        self.comb: EpochCombiner | None = None
        self.sender: UpstreamSender | None = None

    async def start(self) -> None:
        self.url = await self.server.start()

    def wire(self, parent: Node | None, children: list[int]) -> None:
        if parent is not None:
            self.sender = UpstreamSender(
                self.client,
                job=JOB,
                tree=TREE,
                sender=self.nid,
                parent_url=parent.url,
                tunables=Tunables(upstream_backoff=0.01, upstream_max_backoff=0.05),
            )
        self.comb = EpochCombiner(
            job=JOB,
            tree=TREE,
            expect_local=True,
            children=children,
            emit=self.emit,
            operator=self.operator,
        )
        comb = self.comb
        self.server.on_snapshot(
            snapshot_handler(lambda n: comb if (n.job, n.tree) == (JOB, TREE) else None)
        )

    def emit(self, epoch, snap) -> None:
        if self.sender is None:
            self.results.append((epoch, self.operator.result(snap)))
        else:
            self.sender.enqueue(epoch, snap)

    async def stop(self) -> None:
        if self.sender is not None:
            await self.sender.close()
        await self.client.close()
        await self.server.stop()


async def run_tree(operator: LevelOperator, seed: int):
    rng = random.Random(seed)
    results: list = []
    nodes = {nid: Node(nid, operator, results) for nid in TOPOLOGY}
    try:
        for n in nodes.values():
            await n.start()
        for nid, parent in TOPOLOGY.items():
            kids = [c for c, p in TOPOLOGY.items() if p == nid]
            nodes[nid].wire(nodes[parent] if parent else None, kids)
        inputs = {
            (nid, e): [rng.choice(VOCAB[: 10 + 5 * nid]) for _ in range(rng.randint(0, 60))]
            for nid in TOPOLOGY
            for e in range(EPOCHS)
        }
        offers = list(inputs) + rng.sample(list(inputs), 6)  # some local snapshots twice
        rng.shuffle(offers)
        for nid, e in offers:
            nodes[nid].comb.offer_local(e, snap_of(inputs[(nid, e)]))
        await wait_for(lambda: len(results) == EPOCHS, timeout=15)
        expected = {e: Counter() for e in range(EPOCHS)}
        for (_, e), words in inputs.items():
            expected[e].update(words)
        stats = {nid: n.server.stats() for nid, n in nodes.items()}
        return results, expected, stats
    finally:
        for n in nodes.values():
            await n.stop()


@pytest.mark.parametrize("seed", [1, 2])
async def test_three_level_tree_rolls_up_every_epoch_exactly(seed: int) -> None:
    results, expected, stats = await run_tree(GroupByOperator(), seed)
    assert [e for e, _ in results] == list(range(EPOCHS))
    for e, snap in results:
        assert Counter(snap.to_dict()) == expected[e]
    # each inner node merged each child's epoch once; nothing rejected anywhere
    for nid in TOPOLOGY:
        kids = sum(1 for p in TOPOLOGY.values() if p == nid)
        assert stats[nid]["results"].get("merged", 0) == kids * EPOCHS
        assert stats[nid]["rejected_total"] == 0


async def test_top_k_of_sums_through_the_tree_is_exact() -> None:
    k = 5
    results, expected, _ = await run_tree(TopKOperator(k), seed=3)
    assert [e for e, _ in results] == list(range(EPOCHS))
    for e, top in results:
        ref = expected[e]
        assert [v for _, v in top] == sorted(ref.values(), reverse=True)[:k]
        assert all(ref[key] == v for key, v in top)
        assert len({key for key, _ in top}) == len(top)


async def test_children_delivering_out_of_order_over_http_emit_in_order() -> None:
    out: list[tuple[int, dict]] = []
    comb = EpochCombiner(
        job=JOB,
        tree=TREE,
        expect_local=False,
        children=[11, 12],
        emit=lambda e, s: out.append((e, s.to_dict())),
    )
    server = DataPlaneServer(SECRET)
    server.on_snapshot(snapshot_handler(lambda n: comb))
    url = await server.start()
    client = DataPlaneClient(SECRET)
    try:
        for child, epochs in ((11, [3, 1, 2, 0]), (12, [2, 3, 0])):
            for e in epochs:
                r = await client.send_snapshot(
                    url, SnapshotName(JOB, TREE, e, child), snap_of([f"c{child}"]).to_bytes()
                )
                assert r == "merged"
        assert [e for e, _ in out] == [0]  # 0 is complete; 1 waits for child 12
        assert comb.pending()["open"][1]["waiting_for"] == [12]
        await client.send_snapshot(url, SnapshotName(JOB, TREE, 1, 12), snap_of(["c12"]).to_bytes())
        assert [e for e, _ in out] == [0, 1, 2, 3]
        assert all(d == {"c11": 1, "c12": 1} for _, d in out)
        r = await client.send_snapshot(url, SnapshotName(JOB, TREE, 1, 12), b"not even a snapshot")
        assert r == "stale"
    finally:
        await client.close()
        await server.stop()
