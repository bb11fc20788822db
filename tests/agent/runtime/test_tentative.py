"""Previews (agent/runtime/results/previews.py) over a real EpochCombiner and ResultStore:
an epoch still held at its deadline is previewed (tentative, lacking the late member), an
epoch emitted in time never is, the barrier's result replaces the preview, a late fold
refreshes it, no deadline means no preview, and the timeline records each step."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable

from agent_helpers import wait_for

from agent.runtime.results.previews import Previews
from agent.runtime.results.store import ResultStore
from cbt import CompressedBufferTree, Snapshot
from srt.dataplane.barrier import EpochCombiner

T = 7
A, B = 0xA, 0xB  # A: the root's own input; B: its child


def snap(words: str) -> Snapshot:
    tree = CompressedBufferTree("count")
    for w in words.split():
        tree.insert(w, 1)
    return tree.flush()


def setup(
    deadline: float | None, closes_at: Callable[[int], float] = lambda epoch: time.time()
) -> tuple[EpochCombiner, ResultStore, Previews]:
    store = ResultStore()
    comb: EpochCombiner

    def emit(epoch: int, s: Snapshot) -> None:
        store.put(T, epoch, s, 0.0, origins=comb.lineage_of(epoch), expected=frozenset({A, B}))
        previews.stored(T, epoch)

    comb = EpochCombiner(job="j", tree=T, expect_local=True, children=[B], emit=emit, origin=A)
    previews = Previews(
        "j",
        store,
        combiner=lambda tid: comb if tid == T else None,
        is_root=lambda tid: True,
        deadline_for=lambda epoch: deadline,
        closes_at=closes_at,
        seconds_of=lambda epoch: 1.0,
        expected=lambda epoch: (frozenset({A, B}), False),
        on_stored=lambda tid, epoch, result: None,
    )
    return comb, store, previews


async def test_a_held_epoch_is_previewed_and_an_emitted_one_is_not() -> None:
    comb, store, previews = setup(0.05)
    comb.offer_local(0, snap("a"))
    comb.offer_child(B, 0, snap("b"), frozenset({B}))  # complete at once: the steady state
    comb.offer_local(1, snap("a a"))  # the child is late for epoch 1
    previews.watch(T)
    await wait_for(lambda: store.peek(T, 1) is not None, 5, "the preview of epoch 1")
    assert store.peek(T, 0) is not None and not store.peek(T, 0).preview
    preview = store.peek(T, 1)
    assert preview is not None and preview.preview and preview.tentative
    assert preview.lacking == (f"{B:x}",) and preview.coverage == 0.5
    assert Counter(dict(preview.snapshot.to_dict())) == Counter(a=2)
    assert previews.stats()["previews"] == 1
    # a late contribution for epoch 1 folded meanwhile: held, and the preview refreshed
    store.add_late(T, 1, 0xC, snap("c"), 1.0, origins=frozenset({0xC}))
    previews.refresh(T, 1)
    assert store.peek(T, 1).version == 2
    assert Counter(dict(store.peek(T, 1).snapshot.to_dict())) == Counter(a=2, c=1)
    # the child comes: the barrier's result replaces the preview, final
    comb.offer_child(B, 1, snap("b"), frozenset({B}))
    final = store.peek(T, 1)
    assert not final.preview and not final.tentative and final.version == 3
    assert Counter(dict(final.snapshot.to_dict())) == Counter(a=2, b=1, c=1)
    timeline = {t["epoch"]: t for t in previews.timeline()}
    assert "preview_at" not in timeline[0] and "final_at" in timeline[0]
    assert timeline[1]["preview_at"] <= timeline[1]["final_at"]
    previews.close()


async def test_no_deadline_no_preview() -> None:
    comb, store, previews = setup(None)
    comb.offer_local(0, snap("a"))
    previews.watch(T)
    await asyncio.sleep(0.1)  # absence: nothing to wait for but time past any deadline
    assert store.peek(T, 0) is None and previews.stats()["armed"] == 0


async def test_a_replayed_epoch_is_not_previewed() -> None:
    # event time an hour behind the wall clock: the epoch closed long ago, nothing is "on time"
    comb, store, previews = setup(0.05, closes_at=lambda epoch: time.time() - 3600)
    comb.offer_local(0, snap("a"))
    previews.watch(T)
    await asyncio.sleep(0.2)  # absence: past the deadline, still nothing
    assert store.peek(T, 0) is None and previews.stats()["previews"] == 0
