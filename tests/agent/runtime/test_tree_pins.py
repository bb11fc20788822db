"""TreeLinks' pins (agent/runtime/job/trees.py): a member pinned as a child beyond the tree
layer's list stays among the barrier's children while pinned, a later pin extends it, an
unpin ends it at once, and when the pin runs out the barrier stops waiting for it - the
loop watching the pins re-evaluates the children when any pin ends."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from agent.runtime.job.trees import TreeLinks
from srt import EpochCombiner

TREE, CHILD, DEAD = 0xABC, 0x10, 0x20


class Tasks:
    def __init__(self) -> None:
        self.running: list[asyncio.Task] = []

    def spawn(self, coro: Any, name: str) -> None:
        self.running.append(asyncio.get_running_loop().create_task(coro, name=name))


def links() -> tuple[TreeLinks, EpochCombiner, Tasks]:
    barrier = EpochCombiner(
        job="wc", tree=TREE, expect_local=False, children=(CHILD,), emit=lambda e, s: None,
        first_epoch=0,
    )  # fmt: skip
    view = SimpleNamespace(children={CHILD: None})
    tasks = Tasks()
    host = SimpleNamespace(
        combiners={TREE: barrier},
        network=SimpleNamespace(trees=SimpleNamespace(view=lambda tid: view)),
        tasks=tasks,
        stopped=False,
        name="wc",
    )
    return TreeLinks(host, lambda *a: None), barrier, tasks  # type: ignore[arg-type]


async def test_a_pin_keeps_a_child_until_it_runs_out() -> None:
    trees, barrier, tasks = links()
    trees.pin_children(TREE, [DEAD], 0.2)
    assert barrier.children == {CHILD, DEAD}
    trees.pin_children(TREE, [DEAD], 0.4)  # extends it
    await asyncio.wait_for(asyncio.gather(*tasks.running), 5)  # the watch ends with the pins
    assert barrier.children == {CHILD}


async def test_an_unpin_ends_it_at_once() -> None:
    trees, barrier, tasks = links()
    trees.pin_children(TREE, [DEAD], 30.0)
    trees.unpin_child(TREE, DEAD)
    assert barrier.children == {CHILD}
    for task in tasks.running:
        task.cancel()
