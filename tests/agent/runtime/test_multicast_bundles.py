"""A master's per-epoch multicasts (agent/runtime/job/control.py): an ``empty`` waits for the
``commit`` and the two go down as one bundle; a commit never waits; other kinds go after what
waits; every message goes exactly once, in the order it was asked for. The job's tree is a
recording stand-in for the tree layer (the real one is exercised by test_runtime.py)."""

from __future__ import annotations

import asyncio
import dataclasses
from types import SimpleNamespace
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from agent.runtime.job.control import BUNDLE, MAX_BUNDLE, JobControl
from agent.tunables import RuntimeTunables
from overlay.tasks import BackgroundTasks

TREE = 0xABC


class RecordingTrees:
    """The tree layer's multicast, recording each send (what went down, and when)."""

    def __init__(self) -> None:
        self.sent: list[list[dict[str, Any]]] = []

    async def multicast(self, tid: int, message: dict[str, Any], *, timeout: float) -> Any:
        inner = message["messages"] if message.get("kind") == BUNDLE else [message]
        self.sent.append([{k: v for k, v in m.items() if k != "sent_at"} for m in inner])
        await asyncio.sleep(0)
        return SimpleNamespace(reached=3, elapsed_s=0.001)


def control_with(wait: float) -> tuple[JobControl, RecordingTrees, BackgroundTasks]:
    trees = RecordingTrees()
    tasks = BackgroundTasks()
    counters: dict[str, int] = {}
    host = SimpleNamespace(
        name="job",
        tunables=dataclasses.replace(RuntimeTunables(), multicast_bundle_wait=wait),
        network=SimpleNamespace(trees=trees),
        observer=SimpleNamespace(multicast_done=lambda *a: None),
        tasks=tasks,
        count=lambda what, n=1: counters.__setitem__(what, counters.get(what, 0) + n),
    )
    return JobControl(host), trees, tasks  # type: ignore[arg-type]


def empty(epoch: int) -> dict[str, Any]:
    return {"kind": "empty", "epoch": epoch}


def commit(epoch: int) -> dict[str, Any]:
    return {"kind": "commit", "epoch": epoch, "term": 1, "held": {}}


async def settle(tasks: list[asyncio.Task], timeout: float = 5.0) -> None:
    await asyncio.wait_for(asyncio.gather(*tasks), timeout)


async def test_an_empty_waits_for_its_commit_and_both_go_as_one() -> None:
    control, trees, _ = control_with(5.0)
    first = asyncio.create_task(control.multicast(TREE, empty(7)))
    await asyncio.sleep(0.01)
    assert trees.sent == []  # parked
    second = asyncio.create_task(control.multicast(TREE, commit(7)))
    await settle([first, second])
    assert trees.sent == [[empty(7), commit(7)]]
    assert first.result().reached == second.result().reached == 3
    sent = {s["kind"]: s["sent_at"] for s in control.multicast_stats}
    assert sent["empty"] == sent["commit"]  # one send


async def test_a_commit_never_waits_and_a_lonely_empty_goes_after_the_wait() -> None:
    control, trees, _ = control_with(0.05)
    await control.multicast(TREE, commit(7))
    assert trees.sent == [[commit(7)]]
    await control.multicast(TREE, empty(7))  # no commit comes: alone, after the wait
    assert trees.sent == [[commit(7)], [empty(7)]]


async def test_other_kinds_go_after_what_waits_and_a_zero_wait_sends_at_once() -> None:
    control, trees, _ = control_with(5.0)
    parked = asyncio.create_task(control.multicast(TREE, empty(1)))
    await asyncio.sleep(0.01)
    await control.multicast(TREE, {"kind": "change", "version": 2})
    await settle([parked])
    assert trees.sent == [[empty(1)], [{"kind": "change", "version": 2}]]

    control, trees, _ = control_with(0.0)
    await control.multicast(TREE, empty(1))
    await control.multicast(TREE, commit(1))
    assert trees.sent == [[empty(1)], [commit(1)]]


async def test_a_full_bundle_goes_at_once_and_release_drops_what_waits() -> None:
    control, trees, _ = control_with(5.0)
    calls = [asyncio.create_task(control.multicast(TREE, empty(e))) for e in range(MAX_BUNDLE)]
    await asyncio.sleep(0.05)
    assert trees.sent == [[empty(e) for e in range(MAX_BUNDLE - 1)]]  # room kept for a commit
    control.release()
    done, pending = await asyncio.wait(calls, timeout=1)
    assert not pending
    assert trees.sent == [[empty(e) for e in range(MAX_BUNDLE - 1)]]  # the last one: dropped
    assert sum(t.cancelled() for t in done) == 1


@settings(max_examples=60, deadline=None)
@given(
    steps=st.lists(
        st.tuples(st.sampled_from(["empty", "commit", "change"]), st.sampled_from([0, 0, 0.02])),
        min_size=1,
        max_size=12,
    )
)
def test_every_message_goes_once_in_the_order_asked(steps: list[tuple[str, float]]) -> None:
    """Whatever the kinds and their spacing, the sends concatenated are the calls in order,
    no bundle exceeds MAX_BUNDLE, and only an empty ever shares a send with a commit."""

    async def run() -> list[list[dict[str, Any]]]:
        control, trees, _ = control_with(0.01)
        calls = []
        for i, (kind, pause) in enumerate(steps):
            message = {"kind": kind, "epoch": i}
            calls.append(asyncio.create_task(control.multicast(TREE, message)))
            await asyncio.sleep(pause)
        await settle(calls)
        return trees.sent

    sent = asyncio.run(run())
    assert [m for send in sent for m in send] == [
        {"kind": k, "epoch": i} for i, (k, _) in enumerate(steps)
    ]
    for send in sent:
        assert 1 <= len(send) <= MAX_BUNDLE
        if len(send) > 1:
            assert all(m["kind"] == "empty" for m in send[:-1])
            assert send[-1]["kind"] in ("empty", "commit")
