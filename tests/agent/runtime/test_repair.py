"""Tentative results and repair by pull, in-process with real sockets (docs/fault-tolerance.md).

* An origin the master expects but that never contributes (it crashed) makes every epoch
  tentative: the results API says so, names it and gives the coverage; the master's repair
  loop asks it (and fails: it is gone); nothing is committed past a repairable epoch, so
  every live origin keeps its own snapshots.
* A live origin's contribution lost on the way (its parent died after acknowledging: here
  the master's stored result is rolled back to exactly that state) is pulled from the origin
  by the repair loop: the epoch equals the reference again, a new version, and only the dead
  origin is still lacking.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from typing import Any

from agent_helpers import lines, running_agents, wait_for, word_counts

from agent.runtime.recovery.retained_epochs import RetainedEpochs
from agent.tunables import RuntimeTunables
from cbt import CompressedBufferTree

GONE = 0xDEAD << 140  # an origin id no agent has: "crashed, never came back"
TEXTS = ["a a b", "c d d d", "b e"]


def next_epoch() -> int:
    return math.floor(time.time()) + 1


async def test_a_lost_contribution_is_pulled_from_its_origin() -> None:
    runtime = RuntimeTunables(repair_interval=0.2)
    async with running_agents(3, runtime=runtime) as agents:
        e = next_epoch()
        spec = {"name": "wc", "creator": "t", "job_class": "wordcount", "start_epoch": e,
                "allowed_lateness": 0.5}  # fmt: skip
        await agents[0].submit(spec)
        master = next(a for a in agents if "master" in a.runtimes["wc"].roles())
        mrt = master.runtimes["wc"]
        (tid,) = mrt.tree_list
        # a phantom origin the master expects from the start: every epoch lacks it
        mrt.recovery.membership.observe(e, frozenset({GONE}), now=time.time())
        for a in agents:
            await a.ingest("ingest", lines(e + 0.1, TEXTS) + lines(e + 1.1, TEXTS))
        want = word_counts(TEXTS, 3)

        async def stored(epoch: int) -> dict[str, Any] | None:
            try:
                res = await agents[1].results("wc", epoch)
            except Exception:
                return None
            return res if Counter(dict(res["rows"])) == want else None

        res = await wait_for(lambda: stored(e), 15, "epoch e")
        assert res["tentative"] and res["lacking"] == [f"{GONE:x}"]
        assert res["coverage"] == 0.75 and res["version"] == 1
        await wait_for(lambda: mrt.counters.get("repair_unreachable", 0) > 0, 10, "a repair try")
        assert mrt.recovery.committed.get(tid) is None  # nothing final: nothing committed

        # The contribution of one live origin is lost after its parent acknowledged it: the
        # master holds the epoch without that origin's records (and says so).
        victim = next(a for a in agents if a is not master)
        vrt = victim.runtimes["wc"]
        own = vrt.recovery.retained.get(tid, e)
        assert own is not None  # uncommitted: the origin still holds its snapshot
        held = mrt.store._trees[tid][e]  # test-only surgery: the state a parent's death leaves
        assert held.snapshot is not None and held.origins is not None
        held.snapshot = held.snapshot.subtract(own)
        held.origins = held.origins - {victim.overlay.id}
        before = mrt.counters.get("repaired", 0)
        mrt.recovery.schedule_repair(tid)

        async def repaired() -> dict[str, Any] | None:
            res = await stored(e)
            return res if res is not None and res["version"] == 2 else None

        res = await wait_for(repaired, 15, "the pulled contribution")
        assert Counter(dict(res["rows"])) == want  # exact again
        assert res["lacking"] == [f"{GONE:x}"]  # only the dead origin is still missing
        assert mrt.counters.get("repaired", 0) == before + 1


def test_retained_epochs_are_bounded_and_dropped_on_commit() -> None:
    t = CompressedBufferTree(aggregator="count")
    t.insert_many(["x", "y"])
    snap = t.flush()
    kept = RetainedEpochs("j", max_bytes=3 * snap.memory_bytes())
    for e in range(5):
        kept.keep(1, e, snap)
    assert kept.stats()["epochs"] == 3 and kept.dropped == 2  # oldest dropped, said so
    assert kept.get(1, 0) is None and kept.get(1, 4) is snap
    kept.commit(1, 3)
    assert kept.stats()["epochs"] == 1 and kept.get(1, 3) is None
    kept.keep(1, 2, snap)  # already committed: not kept again
    assert kept.stats()["epochs"] == 1 and kept.bytes == snap.memory_bytes()
    # the agent's memory budget lowers the bound: the oldest are shed at once, counted
    for e in (5, 6):
        kept.keep(1, e, snap)
    kept.set_limit(snap.memory_bytes())
    assert kept.held(1) == [6] and kept.dropped == 4
