"""The agent's clock while it runs no job (issue "A lightweight agent"): the tick loop
(``agent/runtime/host/ticks.py``) ticks every ``IDLE_TICK_SECONDS``, not every
``tick_seconds``, and a job's ``tick_now`` brings the full pace back at once. The record
thread is replaced by an inline runner that counts the ticks (the inputs are the agent's
real ones: its ``ingest`` queue)."""

from __future__ import annotations

import asyncio
from typing import Any

from agent.config import AgentConfig
from agent.runtime.host.ticks import IDLE_TICK_SECONDS, Ticks


class CountingRecords:
    """Runs the record thread's part inline, counting the ticks and the runtimes they saw."""

    def __init__(self) -> None:
        self.ticks: list[int] = []

    async def run(self, fn: Any, only: Any, runtimes: list[Any]) -> Any:
        self.ticks.append(len(runtimes))
        return fn(only, runtimes)


class Offsets:
    def resume_state(self, name: str) -> None:
        return None

    def observe(self, *args: Any) -> None:
        pass


class Runtime:
    """A job that reads no input here (the tick still visits it)."""

    inputs: tuple[str, ...] = ()
    spec = None
    clock = None

    def backlog_full(self) -> bool:
        return False

    def work(self, batches: dict[str, Any]) -> list[Any]:
        return []

    def deliver(self, closed: Any, now: float) -> None:
        pass


async def test_an_agent_without_jobs_ticks_slowly_until_a_job_asks() -> None:
    records = CountingRecords()
    runtimes: dict[str, Any] = {}
    running = True
    ticks = Ticks(
        AgentConfig(secret=b"s" * 32),
        runtimes,
        Offsets(),  # type: ignore[arg-type]
        records=lambda: records,  # type: ignore[arg-type,return-value]
        count=lambda *a: None,
        running=lambda: running,
    )
    ticks.join_inputs = lambda runtime, readers: []  # type: ignore[method-assign]
    loop = asyncio.create_task(ticks.tick_loop())
    try:
        window = 2.5 * IDLE_TICK_SECONDS
        await asyncio.sleep(window)  # the observation window (a rate), not a synchronization
        idle = len(records.ticks)
        tick = ticks.tunables.tick_seconds
        assert 1 <= idle <= window / IDLE_TICK_SECONDS + 1 < window / tick / 2, records.ticks
        runtimes["job"] = Runtime()
        ticks.tick_now([])  # what a starting job does (JobRuntime.start)
        async with asyncio.timeout(IDLE_TICK_SECONDS / 2):
            while not any(records.ticks[idle:]):
                await asyncio.sleep(0.01)
        busy_from = len(records.ticks)
        await asyncio.sleep(window)
        assert len(records.ticks) - busy_from >= window / tick / 2, records.ticks
    finally:
        running = False
        ticks.event.set()
        await asyncio.wait_for(loop, 5)
