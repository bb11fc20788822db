"""Stragglers never hold a job back, and results come on time (issue 14), in-process with real
sockets: three agents run WordCount with 1 s epochs; one child's upward sender is held (its
snapshots queue up, as a stopped or very slow agent's do) for three epochs, then let go.

* Steady state (before the hold): no epoch is previewed, none leapt.
* The held epochs get a tentative preview at the master on time (the job's tentative deadline
  after they closed), lacking the held child; its parent leaps over it once a sibling is
  ``straggler_epochs`` (2) ahead; the leap is recorded with its detected -> emitted time.
* Once let go, its snapshots arrive "stale" and are folded in at the master: every epoch
  ends final and exact against a Counter, the preview replaced by newer versions.
* The same when the straggler is the master's own worker (its local snapshots held): the
  barrier leaps over "local" and the late local snapshots are folded in, not dropped.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import Counter
from typing import Any

import aiohttp
from agent_helpers import lines, running_agents, wait_for, word_counts
from prometheus_client.parser import text_string_to_metric_families

TEXTS = ["a a b", "c d d d", "b e"]
EPOCHS = 7
HELD = (2, 3, 4)  # epochs (from the first) the straggler's snapshots are held


async def _until(t: float) -> None:
    await asyncio.sleep(max(0.0, t - time.time()))


async def _job(agents: list[Any]) -> tuple[int, Any]:
    """Submit WordCount from three epochs ahead; (the first epoch the test feeds, the master
    once it has both other agents as children). On a loaded machine the tree may form after
    the job's first epoch began: the test then starts two epochs after it formed (the epochs
    before get no input and are not checked)."""
    e = math.floor(time.time()) + 3
    spec = {"name": "wc", "creator": "t", "job_class": "wordcount", "start_epoch": e,
            "allowed_lateness": 0.2}  # fmt: skip
    await agents[0].submit(spec)

    def master_with_two_children() -> Any:
        for a in agents:
            rt = a.runtimes.get("wc")
            if rt is not None and rt.is_master:
                view = rt.network.trees.view(rt.tree_list[0])
                if view is not None and len(view.children) == 2:
                    return a
        return None

    master = await wait_for(master_with_two_children, 60, "a master with two children")
    return max(e, math.floor(time.time()) + 2), master


def _feed(agents: list[Any], e: int, fed: Counter) -> asyncio.Future:
    """A live log on every agent: a batch every 0.1 s, event time = now, for EPOCHS epochs;
    ``fed[epoch]`` counts the batches each agent took in."""

    async def feed() -> None:
        while (now := time.time()) < e + EPOCHS:
            if now >= e:
                for a in agents:
                    await a.ingest("ingest", lines(now, TEXTS))
                fed[math.floor(now)] += 1
            await asyncio.sleep(0.1)

    return asyncio.ensure_future(feed())


async def _final_and_exact(agents: list[Any], e: int, fed: Counter) -> None:
    async def final(epoch: int) -> dict[str, Any] | None:
        try:
            res = await agents[0].results("wc", epoch)
        except Exception:
            return None
        return res if not res["tentative"] else None

    for i in range(EPOCHS):
        res = await wait_for(lambda x=e + i: final(x), 20, f"epoch {i} final")
        want = Counter({k: v * fed[e + i] for k, v in word_counts(TEXTS, 3).items()})
        assert Counter(dict(res["rows"])) == want, i
        assert not res["preview"]


async def test_a_held_up_child_is_previewed_on_time_leapt_then_folded_in_exact() -> None:
    async with running_agents(3) as agents:
        e, master = await _job(agents)
        mrt = master.runtimes["wc"]
        (tid,) = mrt.tree_list
        straggler = next(a for a in agents if a is not master)
        srt = straggler.runtimes["wc"]
        fed: Counter = Counter()
        feeder = _feed(agents, e, fed)
        # epoch x closes at x + 1 + lateness (0.2 s): hold from after HELD[0] - 1 went up to
        # after HELD[-1] closed (three epochs), then let go
        await _until(e + HELD[0] + 0.5)
        srt.senders[tid].set_parent(None)  # held: its snapshots queue up
        await _until(e + HELD[-1] + 1.8)
        srt.parent_changed(tid)  # let go: the queue goes to the parent
        await feeder

        await _final_and_exact(agents, e, fed)

        timeline = {t["epoch"]: t for t in mrt.report.timings()["epochs"]}
        for i in range(HELD[0]):  # steady state: no preview, stored well before the deadline
            assert "preview_at" not in timeline[e + i], timeline[e + i]
        for i in HELD:
            t = timeline[e + i]
            assert "preview_at" in t, t  # tentative on time ...
            to_tentative = t["preview_at"] - t["closes_at"]
            to_final = t["final_at"] - t["closes_at"]
            assert 0 < to_tentative < to_final, t  # ... and final later
            assert to_tentative < 1.0, t  # the 0.3 s deadline, with a generous margin
        assert mrt.counters.get("tentative_previews", 0) >= len(HELD)
        assert mrt.store.peek(tid, e + HELD[0]).version >= 2  # the preview, then newer ones

        comb = mrt.combiners[tid]
        leaps = [leap for leap in comb.leaps if leap.member == straggler.overlay.id]
        assert leaps and leaps[0].epoch == e + HELD[0], list(comb.leaps)
        assert all(0 <= leap.emitted_at - leap.detected_at < 1.0 for leap in leaps)
        assert comb.counters["stale_leapt"] >= 1  # its late snapshot arrived stale
        status = mrt.status()["stragglers"]
        assert status["leapt"] >= 1 and status["recent_leaps"]
        # ... and as metrics, read back over the agent's /metrics route
        headers = {"Authorization": f"Bearer {master.config.api_token}"}
        url = master.api.url + "/metrics"
        async with aiohttp.ClientSession() as session, session.get(url, headers=headers) as r:
            text = await r.text()
        samples = {
            (s.name, s.labels.get("job")): s.value
            for family in text_string_to_metric_families(text)
            for s in family.samples
        }
        assert samples[("elf_stragglers_leapt_total", "wc")] == status["leapt"]
        assert samples[("elf_tentative_previews_total", "wc")] >= len(HELD)


async def test_a_master_whose_own_worker_falls_behind_folds_its_records_in() -> None:
    """The master's barrier leaps over its *own* input (its worker held, as a CPU-throttled
    one is): those local snapshots then arrive stale and are folded in by lineage - they were
    dropped before, leaving the epochs short of the master's records for good."""
    async with running_agents(3) as agents:
        e, master = await _job(agents)
        mrt = master.runtimes["wc"]
        held: list[tuple[list[Any], float]] = []
        deliver = mrt.deliver

        def slow_deliver(closed: list[Any], now: float) -> None:
            if e + HELD[0] <= time.time() < e + HELD[-1] + 1.5:
                held.append((closed, now))  # the worker's closed epochs wait
                return
            while held:
                deliver(*held.pop(0))
            deliver(closed, now)

        mrt.deliver = slow_deliver
        fed: Counter = Counter()
        await _feed(agents, e, fed)
        await _final_and_exact(agents, e, fed)
        (tid,) = mrt.tree_list
        comb = mrt.combiners[tid]
        assert any(leap.member == "local" for leap in comb.leaps), list(comb.leaps)
        assert mrt.counters.get("late_local", 0) >= 1
