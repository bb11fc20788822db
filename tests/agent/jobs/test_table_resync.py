"""Job-table anti-entropy through the jobs tree (``Supervisor.resync``), on in-process agents
(real sockets): a member pulls the table from its parent, not from the root after a routed
query, and a change only the root holds still reaches every agent."""

from __future__ import annotations

import math
import time

from agent_helpers import running_agents, wait_for

from agent.jobs.table import RUNNING, JobEntry
from agent.runtime.host.agent import JOBS_TREE
from agent.tunables import RuntimeTunables

FAST_RESYNC = RuntimeTunables(resync_seconds=0.25)


async def test_members_pull_the_table_from_their_parents_not_the_root() -> None:
    async with running_agents(6, runtime=FAST_RESYNC) as agents:
        spec = {"name": "wc", "creator": "t", "job_class": "wordcount",
                "start_epoch": math.floor(time.time()) + 1}  # fmt: skip
        await agents[0].submit(spec)
        await wait_for(lambda: all("wc" in a.table for a in agents), 10, "wc everywhere")
        root = next(a for a in agents if a.trees.view(JOBS_TREE).is_root)
        assert all(a.trees.view(JOBS_TREE).parent_url for a in agents if a is not root)
        answered = root.trees.stats()["events"].get("queries_answered", 0)
        first = root.table.get("wc")
        assert first is not None
        # a newer version only the root holds (its multicast lost, say)
        root.supervisor.apply_entry(JobEntry("wc", first.spec, RUNNING, first.version + 1))
        await wait_for(
            lambda: all(a.table.get("wc").version == first.version + 1 for a in agents),
            15,
            "the root's change pulled down the tree",
        )
        # members asked no routed "where" of the root on the way: each pulled from its parent
        # (with the root asked, the 5 members made ~4 queries a second between them)
        assert root.trees.stats()["events"].get("queries_answered", 0) - answered <= 1
