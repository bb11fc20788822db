"""Stopped jobs are garbage-collected on every agent (issue 13, finding 7), on in-process
agents (real sockets) with a short ``stopped_job_ttl``: the entry leaves every table, the
anti-entropy exchange over the data plane cannot bring it back from an agent that still runs
it, and a new job of the same name runs afterwards with exact results (Counter reference)."""

from __future__ import annotations

import math
import time
from collections import Counter

from agent_helpers import complete_result, lines, running_agents, wait_for, word_counts

from agent.jobs.table import RUNNING, JobEntry, JobTable
from agent.tunables import RuntimeTunables

TTL = 1.0
FAST_GC = RuntimeTunables(stopped_job_ttl=TTL, resync_seconds=0.5, tombstone_seconds=600.0)
TEXTS = ["a bb ccc", "bb ccc dddd"]


async def _exact(agent, job: str, epoch: int, want: Counter) -> bool:  # type: ignore[no-untyped-def]
    return await complete_result(agent, job, epoch) == want


async def test_a_stopped_job_leaves_every_table_and_its_name_can_run_again() -> None:
    async with running_agents(3, runtime=FAST_GC) as agents:
        e = math.floor(time.time()) + 1
        spec = {"name": "wc", "creator": "t", "job_class": "wordcount", "start_epoch": e,
                "allowed_lateness": 0.5}  # fmt: skip
        await agents[0].submit(spec)
        await wait_for(lambda: all("wc" in a.runtimes for a in agents), 10, "wc everywhere")
        first = agents[0].table.get("wc")
        assert first is not None
        stopped = await agents[1].stop_job("wc")
        assert stopped["state"] == "stopped"
        # a repeated stop (within the TTL) changes nothing: no new version, no new stamp that
        # would put off the collection
        again = await agents[2].stop_job("wc")
        assert (again["state"], again["version"]) == ("stopped", stopped["version"])
        await wait_for(
            lambda: all("wc" not in a.table and a.table.tombstone("wc") for a in agents),
            10 * TTL + 10,
            "the stopped job collected on every agent",
        )
        assert all("wc" not in a.runtimes for a in agents)
        assert all(a.status()["job_table"]["tombstones"] == 1 for a in agents)
        version = stopped["version"]

        # agent 2 was cut off: it still runs the job at its first version, without tombstone
        stale = agents[2]
        stale.table = JobTable(stopped_ttl=TTL, tombstone_seconds=600.0)
        entry = JobEntry("wc", first.spec, RUNNING, first.version)
        stale.supervisor.apply_entry(entry)
        assert "wc" in stale.runtimes
        # the others pull its table (anti-entropy over the data plane): nothing comes back
        for a in agents[:2]:
            await a.merge_table_from(stale.data_url)
            assert "wc" not in a.table and "wc" not in a.runtimes
        # and it learns the tombstone from them: its stale job stops
        await stale.merge_table_from(agents[0].data_url)
        assert "wc" not in stale.table and "wc" not in stale.runtimes
        assert stale.table.tombstone("wc").version == version  # type: ignore[union-attr]

        # the name is free again: a new job runs everywhere, exactly
        e2 = math.floor(time.time()) + 1
        reply = await agents[2].submit({**spec, "start_epoch": e2})
        assert reply["version"] == version + 1 and reply["agents_reached"] == 3
        await wait_for(lambda: all("wc" in a.runtimes for a in agents), 10, "the new wc")
        for a in agents:
            await a.ingest("ingest", lines(e2 + 0.1, TEXTS))
        want = word_counts(TEXTS, 3)
        await wait_for(lambda: _exact(agents[1], "wc", e2, want), 20, "the new job's epoch")
