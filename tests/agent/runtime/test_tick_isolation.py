"""One job whose tick fails does not starve the jobs after it (issue 13: a failing job used
to skip every job behind it in the agent's tick): the others' epochs stay exact against a
Counter, and the failure is counted and logged with the job's name."""

from __future__ import annotations

import logging
import math
import time
from typing import Any

import pytest
from agent_helpers import complete_result, lines, running_agents, wait_for, word_counts


async def test_a_failing_job_does_not_starve_the_others(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="agent.runtime.host.agent")
    async with running_agents(1) as agents:
        agent = agents[0]
        e = math.floor(time.time()) + 2
        base = {"start_epoch": e, "allowed_lateness": 0.5, "creator": "t", "job_class": "wordcount"}
        # "aaa" sorts first: the agent ticks its jobs in table order, the broken one ahead
        await agent.submit({**base, "name": "aaa"})
        await agent.submit({**base, "name": "wc"})
        await wait_for(lambda: {"aaa", "wc"} <= set(agent.runtimes), 20, "both jobs")

        def broken(batches: dict[str, Any]) -> Any:
            raise RuntimeError("job state corrupted")

        agent.runtimes["aaa"].work = broken  # type: ignore[method-assign]
        texts = ["red blue", "blue green green"]
        await agent.ingest("ingest", lines(e + 0.1, texts))
        await agent.ingest("ingest", lines(e + 3.0, ["later"]))
        want = word_counts(texts, 1)

        async def exact() -> bool:
            got = await complete_result(agent, "wc", e)
            return got is not None and +got == want

        await wait_for(exact, 30, "wordcount's exact epoch despite the broken job")
        assert agent.runtimes["aaa"].counters.get("tick_errors", 0) >= 1
        assert any("job aaa: its tick failed" in r.getMessage() for r in caplog.records)
