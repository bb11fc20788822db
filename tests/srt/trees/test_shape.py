"""The predicted tree (srt/trees/shape.py) against independent references: the root is the
XOR-closest id (the trie walk of ``srt.trees.balance.closest_node``), every hop gets strictly
closer, and the tree the unchanged TreeManager builds on the simulated overlay (virtual time)
with the same node ids is the predicted one."""

from __future__ import annotations

import asyncio
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from overlay.sim import SimNetwork, run
from srt.sim import SimTreeNode
from srt.trees.balance import closest_node
from srt.trees.shape import children_of, predicted_parents

SECRET = b"shape-test-secret-0123456789abcdef"
IDS = st.integers(min_value=0, max_value=(1 << 160) - 1)


@settings(max_examples=60, deadline=None)
@given(st.lists(IDS, min_size=1, max_size=24, unique=True), IDS)
def test_one_root_the_closest_and_every_hop_closer(node_ids: list[int], tree: int) -> None:
    parents = predicted_parents(node_ids, tree)
    assert [v for v, p in parents.items() if p is None] == [closest_node(sorted(node_ids), tree)]
    for v, p in parents.items():
        assert p is None or (p ^ tree) < (v ^ tree)  # so no loops, and every chain ends
    kids = children_of(parents)
    assert sum(len(c) for c in kids.values()) == len(node_ids) - 1


def simulated_parents(node_ids: list[int], tree: int) -> dict[int, int | None]:
    """The tree the simulated nodes (these ids) build once every one joined ``tree``."""

    async def main() -> dict[int, int | None]:
        net = SimNetwork(seed=1)
        nodes = [
            SimTreeNode(SECRET, host=f"10.0.0.{i + 1}", port=7000, node_id=v, network=net)
            for i, v in enumerate(node_ids)
        ]
        await nodes[0].start()
        for n in nodes[1:]:
            await n.start([nodes[0].info.address])
        await asyncio.sleep(10.0)  # virtual seconds: every table complete
        await asyncio.gather(*(n.trees.join(tree, job="shape") for n in nodes))
        await asyncio.sleep(5.0)  # virtual: joins confirmed by heartbeats
        out: dict[int, int | None] = {}
        for n in nodes:
            view = n.trees.view(tree)
            assert view is not None
            out[n.id] = None if view.is_root else view.parent.id  # type: ignore[union-attr]
        for n in nodes:
            await n.stop()
            await n.trees.stop()
        return out

    return run(main())


def near(rng: random.Random, tree: int, digits: int) -> int:
    """A random id sharing at least the first ``digits`` hex digits with ``tree``."""
    low = 160 - 4 * digits
    return (tree >> low << low) | rng.getrandbits(low)


def test_the_simulated_overlay_builds_the_predicted_tree() -> None:
    rng = random.Random(7)
    for size, close in ((6, 0), (12, 0), (12, 6), (20, 10)):
        tree = rng.getrandbits(160)
        # ids sharing a first digit with the tree make inner nodes (random ids rarely do)
        node_ids = [near(rng, tree, 1 if i < close else 0) for i in range(size)]
        want = predicted_parents(node_ids, tree)
        assert simulated_parents(node_ids, tree) == want, (size, close)
        if close:
            assert any(p is not None and want[p] is not None for p in want.values())
