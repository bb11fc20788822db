"""A job started on an input other jobs already read (issue 12: "a second job on an input
another job already reads misses part of its first epoch, flagged final"), in-process with
real sockets, against a Counter over the lines ingested.

* Submitted with an explicit start epoch whose records other jobs had already consumed on an
  agent, the new job's epochs up to what was read are reported **tentative, lacking that
  agent** (its partial share is not counted as if whole); later epochs are final and exact.
* Submitted without ``start_epoch`` ("from now on"), it starts with the first epoch that
  begins after the submission reached every agent: that epoch is whole.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from typing import Any

from agent_helpers import lines, running_agents, wait_for, word_counts

FIRST = ["a b b", "c"]
MORE = ["d d", "a"]
NEXT = ["e f", "f"]


def spec(name: str, **more: Any) -> dict[str, Any]:
    return {"name": name, "creator": "t", "job_class": "wordcount", "allowed_lateness": 1.0, **more}


async def answer(agent: Any, job: str, epoch: int) -> dict[str, Any] | None:
    try:
        return await agent.results(job, epoch)
    except Exception:
        return None


async def test_a_job_started_on_an_input_others_read_says_what_it_lacks() -> None:
    async with running_agents(2) as agents:
        e = math.floor(time.time()) + 3  # ahead of every clock while the test sets up
        await agents[0].submit(spec("first", start_epoch=e))
        for a in agents:
            await a.ingest("ingest", lines(e + 0.1, FIRST))
        await wait_for(
            lambda: all(a.runtimes["first"].clock.max_event_time >= e for a in agents),
            10,
            "the first job to read epoch e's records",
        )
        await agents[0].submit(spec("second", start_epoch=e))
        # checked at the job's first tick (its input is HTTP ingest: it cannot be re-read)
        await wait_for(
            lambda: all(a.runtimes["second"].recovery.incomplete_until == e for a in agents),
            10,
            "the second job's first tick on every agent",
        )
        for a in agents:
            await a.ingest("ingest", lines(e + 0.5, MORE) + lines(e + 1.2, NEXT))
        ids = sorted(f"{a.overlay.id:x}" for a in agents)

        async def first_done() -> bool:
            res = await answer(agents[0], "first", e)
            return res is not None and Counter(dict(res["rows"])) == word_counts(FIRST + MORE, 2)

        await wait_for(first_done, 15, "the first job's epoch e")
        res = await wait_for(lambda: answer(agents[1], "second", e), 15, "the second job's e")
        # both agents' shares of e were partly read by the first job before the second
        # existed: not counted as whole, and said so
        assert res["tentative"] and sorted(res["lacking"]) == ids and res["coverage"] == 0.0
        assert res["rows"] == []

        async def second_next() -> dict[str, Any] | None:
            res = await answer(agents[1], "second", e + 1)
            ok = res is not None and Counter(dict(res["rows"])) == word_counts(NEXT, 2)
            return res if ok else None

        res = await wait_for(second_next, 15, "the second job's epoch e + 1")
        assert not res["tentative"] and res["lacking"] == [] and res["coverage"] == 1.0


async def test_a_job_from_now_on_starts_with_a_whole_epoch() -> None:
    async with running_agents(2) as agents:
        await agents[0].submit(spec("first"))
        before = time.time()
        info = await agents[1].submit(spec("second"))
        start = agents[0].table.get("second").spec["start_epoch"]  # type: ignore[union-attr]
        assert start >= before + 0.5 and start == math.ceil(start)  # 1 s epochs
        assert info["agents_reached"] == 2
        assert all(a.runtimes["second"].recovery.incomplete_until is None for a in agents)
