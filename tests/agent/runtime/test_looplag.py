"""The loop-lag sampler (``agent/runtime/ops/looplag.py``): the logical agents of one
process share one sampling task per event loop, each sees every sample, a held loop shows in
all of them, and the sampler ends with the last agent."""

from __future__ import annotations

import asyncio
import time

from agent.runtime.ops.looplag import LoopLag


def samplers() -> list[asyncio.Task]:
    return [t for t in asyncio.all_tasks() if t.get_name() == "elf-loop-lag" and not t.done()]


async def wait_until(predicate, timeout: float = 5.0) -> None:  # type: ignore[no-untyped-def]
    async with asyncio.timeout(timeout):
        while not predicate():
            await asyncio.sleep(0.01)


async def test_agents_of_one_loop_share_one_sampler() -> None:
    lags = [LoopLag(interval=0.02) for _ in range(3)]
    runs = [asyncio.create_task(lag.run()) for lag in lags]
    await wait_until(lambda: all(lag.samples >= 3 for lag in lags))
    assert len(samplers()) == 1
    time.sleep(0.2)  # the hostile part: a callback holding the loop (not a synchronization)
    await wait_until(lambda: all(lag.max_s >= 0.15 for lag in lags))
    runs[0].cancel()
    before = lags[1].samples
    await wait_until(lambda: lags[1].samples >= before + 3)  # the others go on sampling
    assert len(samplers()) == 1
    for run in runs[1:]:
        run.cancel()
    await asyncio.gather(*runs, return_exceptions=True)
    await wait_until(lambda: not samplers())
    # a new agent in the same loop starts a sampler again
    again = LoopLag(interval=0.02)
    task = asyncio.create_task(again.run())
    await wait_until(lambda: again.samples >= 2)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    await wait_until(lambda: not samplers())
