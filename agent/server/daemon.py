"""Run one agent process: one or several logical agents until SIGTERM/SIGINT.

Contract: :func:`run` starts ``config.logical_agents`` agents (the first bootstraps from the
configured peers, the others from the first as well, so one process is one small cluster or
part of a big one), prints one line ``ELF-READY <json>`` on stdout describing them (node id,
overlay address, data-plane and API URLs) — launchers wait for that line — and on SIGTERM or
SIGINT stops them gracefully (each leaves the overlay and hands its tree roles over) before
returning. A second signal during shutdown exits at once. ``POST /api/v1/leave`` on any of its
agents takes the same path as SIGTERM: the process's agents stop gracefully and it exits.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import gc
import json
import logging
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from agent.config import AgentConfig
from agent.ingest.columnar.allocator import keep_chunk_memory
from agent.ingest.columnar.pandas_probe import answer_pandas_probe
from agent.runtime.host.agent import Agent
from agent.runtime.host.cpu_limits import apply_cpu_limits

READY_PREFIX = "ELF-READY "
log = logging.getLogger(__name__)


async def start_agents(
    config: AgentConfig, on_leave: Callable[[], None] | None = None
) -> list[Agent]:
    """Start the logical agents of ``config``; stop the started ones if one fails.
    ``on_leave``: what each agent's ``POST /api/v1/leave`` calls (None: it stops itself)."""
    agents: list[Agent] = []
    try:
        for index in range(config.logical_agents):
            cfg = config.for_logical(index)
            if index and not cfg.bootstrap:
                cfg = _with_bootstrap(cfg, agents[0].overlay.info.address)
            agent = Agent(cfg)
            agent.on_leave = on_leave
            await agent.start()
            agents.append(agent)
    except BaseException:
        await stop_agents(agents)
        raise
    return agents


def freeze_heap() -> None:
    """Collect once, then move every surviving object out of the cyclic collector's reach
    (``gc.freeze``). What an agent builds at start-up (overlay tables, servers, trees) lives as
    long as the process; with many logical agents a full collection scanning it paused the
    loop for ~90 ms, which showed as multicast and change-latency spikes. Call it once the
    agents are up (the daemon does); objects created later are collected as usual."""
    gc.collect()
    gc.freeze()


def _with_bootstrap(cfg: AgentConfig, address: tuple[str, int]) -> AgentConfig:
    return dataclasses.replace(cfg, bootstrap=(address,))


#: after ``stop_agents``' budget, the agents still running are stopped at once, all together,
#: within this many seconds more
LAST_STOP_SECONDS = 10.0


async def stop_agents(agents: list[Agent], timeout: float = 15.0) -> None:
    """Stop agents gracefully, newest first, one at a time within ``timeout`` seconds; the
    ones still running then are stopped all together, within :data:`LAST_STOP_SECONDS` more.

    No agent is left running: a running agent's loops would keep the process's event loop
    busy after its caller returned (``asyncio.run`` then waited for ever on a task whose
    cancellation Python 3.11's ``wait_for`` swallowed: a 128-agent benchmark never ended)."""

    async def stop_one(agent: Agent) -> None:
        try:
            await agent.stop()
        except Exception:  # one agent's failure must not keep the others running
            log.exception("stopping agent %s failed", agent)

    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    for agent in reversed(agents):
        left = deadline - loop.time()
        if left <= 0:
            break
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop_one(agent), left)
    rest = [agent for agent in agents if agent.running()]
    if rest:
        log.warning(
            "%d of %d agents still running after %.0f s: stopping them together",
            len(rest),
            len(agents),
            timeout,
        )
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(
                asyncio.gather(*(stop_one(agent) for agent in rest)), LAST_STOP_SECONDS
            )


def describe(agents: list[Agent]) -> list[dict[str, Any]]:
    return [a.describe() for a in agents]


async def run(config: AgentConfig, out: TextIO = sys.stdout) -> None:
    """Run until SIGTERM/SIGINT (see the module contract)."""
    loop = asyncio.get_running_loop()
    stopping = asyncio.Event()

    def on_signal() -> None:
        if stopping.is_set():
            raise SystemExit(1)
        stopping.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal)
    # before any thread starts: the record thread and the loop inherit the CPU cap
    limits = apply_cpu_limits(config.runtime.max_cores, config.runtime.nice)
    keep_chunk_memory()  # before the first chunk: its buffers are reused, not faulted in anew
    answer_pandas_probe()  # pyarrow's probe for pandas loads no pandas (40 MB)
    if config.runtime.max_cores or config.runtime.nice:
        log.info("CPU cap: cores %s, niceness %s", limits["cores"], limits["nice"])
    # POST /api/v1/leave takes the first SIGTERM's path (a repeated leave is harmless)
    agents = await start_agents(config, on_leave=stopping.set)
    freeze_heap()
    try:
        info = describe(agents)
        if config.data_dir:
            Path(config.data_dir).mkdir(parents=True, exist_ok=True)
            (Path(config.data_dir) / "agents.json").write_text(json.dumps(info, indent=2))
        out.write(READY_PREFIX + json.dumps(info) + "\n")
        out.flush()
        await stopping.wait()
    finally:
        await stop_agents(agents)
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
