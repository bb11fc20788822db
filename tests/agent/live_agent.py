"""One in-process agent serving on loopback from its own event loop in a thread, for tests
whose client calls synchronously (the ``elf`` CLI, schemathesis, an HTTP fuzzer) the way a
user's would, from another thread than the agent's.

Contract: ``with LiveAgent(setup) as live`` starts the agent (``running_agents(1)``), runs
``setup(agent)`` on its loop (submit jobs, ingest lines) and returns once both are done (60 s
at most; an exception from either is raised here); leaving the block stops the agent and joins
its thread. ``live.agent`` is the agent (read it from the test thread only where the agent's
own thread does not change it), ``live.url`` / ``live.token`` its API, and
:meth:`LiveAgent.run_coroutine` runs a coroutine on its loop.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from agent_helpers import running_agents

Setup = Callable[[Any], Awaitable[None]]


class LiveAgent:
    """One agent on its own loop in a thread (module contract)."""

    def __init__(self, setup: Setup | None = None, *, name: str = "live-agent") -> None:
        self.agent: Any = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self._setup = setup
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    @property
    def url(self) -> str:
        return str(self.agent.api.url)

    @property
    def token(self) -> str:
        return str(self.agent.config.api_token)

    def _run(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as exc:  # raised by __enter__
            self._error = exc
            self._ready.set()

    async def _main(self) -> None:
        self.loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
        async with running_agents(1) as (agent,):
            if self._setup is not None:
                await self._setup(agent)
            self.agent = agent
            self._ready.set()
            await self._stop.wait()

    def __enter__(self) -> LiveAgent:
        self._thread.start()
        assert self._ready.wait(60), "the agent did not start in 60 s"
        if self._error is not None:
            raise self._error
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.loop is not None and self._stop is not None:
            self.loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(60)

    def run_coroutine(self, coro: Coroutine[Any, Any, Any], timeout: float = 30) -> Any:
        """Run ``coro`` on the agent's loop and return its result (``timeout`` seconds at most)."""
        assert self.loop is not None
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)
