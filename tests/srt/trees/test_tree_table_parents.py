"""The tree table's parent bookkeeping as a state machine (pure: a recording effects stub, no
network): whatever sequence of attaches, re-joins (a silent, failed or refusing parent) and
promotions to root a node goes through, every parent it had that may still count it as a
child is told ``moved`` by the time the node attaches elsewhere or becomes the root.

Why it matters: a parent paused past the child timeout (SIGSTOP) loses its children to a
re-join; when it resumes, its own child timeout is widened by the pause it just measured as
event-loop lag, so without the notice its barrier waits seconds for children that went (and
its own parent waits for it): ``docs/fault-tolerance.md``, "Adaptive redundancy: the running
policy".
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from overlay import NodeInfo
from srt.config import Tunables
from srt.trees.state import TreeState
from srt.trees.table import TreeTable
from srt.trees.types import MEMBER

TREE = 0
ME = NodeInfo(1 << 150, "127.0.0.1", 1)  # farther from TREE than every candidate parent
PARENTS = [NodeInfo(i, "127.0.0.1", 100 + i) for i in range(1, 5)]


class Host:
    """The table's owner, reduced to what the table reads."""

    def __init__(self) -> None:
        self.events: Counter[str] = Counter()
        self.bad_input: Counter[str] = Counter()
        self.data_url = "http://127.0.0.1:1"
        self.tunables = Tunables()
        self.me = ME
        self.accepting = True

    def view(self, tree_id: int) -> Any:
        return None

    def spawn(self, coro: Any, what: str) -> None:
        coro.close()


class Effects:
    """Records the network actions the table asks for."""

    def __init__(self) -> None:
        self.leaves: list[tuple[int, str]] = []

    def spawn_attempt(self, tree: TreeState) -> None:
        pass

    def spawn_leave(self, target: NodeInfo, tree_id: int, reason: str) -> None:
        self.leaves.append((target.id, reason))

    def spawn_demotion(self, tree: TreeState) -> None:
        pass

    def spawn_heartbeat(self, parent: NodeInfo, trees: list[TreeState]) -> None:
        pass

    def spawn_drop(self, tree: TreeState) -> None:
        pass


ops = st.lists(
    st.one_of(
        st.tuples(st.just("attach"), st.sampled_from(PARENTS)),
        st.tuples(st.just("rejoin"), st.sampled_from(["parent silent", "parent failed"])),
        st.tuples(st.just("root"), st.none()),
    ),
    max_size=30,
)


@settings(max_examples=200, deadline=None)
@given(ops)
def test_every_parent_left_behind_is_told_moved(steps: list[tuple[str, Any]]) -> None:
    async def run() -> None:
        effects = Effects()
        table = TreeTable(Host(), effects)
        tree = table.add(TREE, "job", True)
        counting: set[int] = set()  # parents that may still count this node as a child
        for op, arg in steps:
            before = len(effects.leaves)
            if op == "attach":
                table.set_parent(tree, arg, None)
                counting.add(arg.id)
            elif op == "rejoin":
                table.rejoin(tree, arg)
            else:
                table.become_root(tree)
            # (a leave to the parent just attached to would drop this node: counting != {it})
            for target, reason in effects.leaves[before:]:
                assert reason == "moved"
                counting.discard(target)
            if op == "attach":
                assert tree.state == MEMBER and counting == {arg.id}, (steps, effects.leaves)
            elif op == "root":
                assert counting == set(), (steps, effects.leaves)

    asyncio.run(run())


def test_a_rejoin_that_lands_on_the_same_parent_tells_it_nothing() -> None:
    async def run() -> list[tuple[int, str]]:
        effects = Effects()
        table = TreeTable(Host(), effects)
        tree = table.add(TREE, "job", True)
        table.set_parent(tree, PARENTS[0], None)
        table.rejoin(tree, "parent silent")
        table.set_parent(tree, PARENTS[0], None)  # it answered after all
        table.rejoin(tree, "parent silent")
        table.set_parent(tree, PARENTS[1], None)  # a new parent: the old one is told
        return effects.leaves

    assert asyncio.run(run()) == [(PARENTS[0].id, "moved")]
