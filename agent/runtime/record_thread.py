"""Where an agent's per-record work runs: one dedicated thread, never the event loop.

Contract: :class:`RecordThread` is a single-thread executor. Everything that touches records or
a job's worker state — reading and parsing inputs, ``Job.map``, CBT inserts, closing epochs,
runtime changes that re-run ``setup()`` or swap a worker's job, control messages a worker
applies — is submitted to it, in order (FIFO), so that state is only ever touched by this one
thread and needs no lock. The event loop ``await``\\ s :meth:`RecordThread.run` and keeps
serving the API, heartbeats and the data plane meanwhile: while the thread computes in Python,
the interpreter hands the GIL back to the loop every switch interval (5 ms by default,
``sys.getswitchinterval``), so one slow record (a job's map busy for seconds) delays that
thread's queue, never the loop. (C code that holds the GIL for long — none of ours on bounded
lines — would.)

**Switch interval.** With CPython's default 5 ms interval the loop still lags 40–115 ms behind
a busy record thread (measured, tests/agent/server/test_hostile_loop.py): every time the loop
releases the GIL for a system call (a socket send, the selector) it waits up to a whole
interval to get it back — the GIL "convoy". Starting a record thread therefore lowers the
process's switch interval to :data:`SWITCH_INTERVAL` (1 ms: the same probe's lag is then
about 5–12 ms). The interval only matters while two threads want the GIL, so an idle loop or
an idle record thread costs nothing.

:class:`InlineRecords` runs the same calls in the caller's thread: a :class:`JobRuntime` built
without an agent (unit tests) uses it, with unchanged semantics.

Both satisfy :class:`~agent.runtime.services.RecordExecutor`.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import sys
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")

#: the interpreter's GIL switch interval (seconds) once an agent runs a record thread
SWITCH_INTERVAL = 0.001


class RecordThread:
    """One agent's record thread (see module contract)."""

    def __init__(self, name: str = "elf-records") -> None:
        if sys.getswitchinterval() > SWITCH_INTERVAL:  # process-wide; see module docstring
            sys.setswitchinterval(SWITCH_INTERVAL)
        self._pool = ThreadPoolExecutor(1, thread_name_prefix=name)
        self._ident: int | None = None
        self._pool.submit(self._note_ident).result()

    def _note_ident(self) -> None:
        self._ident = threading.get_ident()

    def in_thread(self) -> bool:
        """True when called from the record thread itself."""
        return threading.get_ident() == self._ident

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` on the record thread, after everything submitted before it; the
        caller's coroutine waits, the event loop does not. From the record thread itself it
        runs at once (no self-deadlock)."""
        if self.in_thread():
            return fn(*args)
        loop = asyncio.get_running_loop()
        # in the caller's context: log records name the agent and job (agent/runtime/ops/logs.py)
        call = functools.partial(contextvars.copy_context().run, fn, *args)
        return await loop.run_in_executor(self._pool, call)

    def run_blocking(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` on the record thread, blocking the caller until it is done: for
        tools and tests that must see its effect synchronously; the agent itself never calls
        it from the event loop."""
        if self.in_thread():
            return fn(*args)
        return self._pool.submit(fn, *args).result()

    def close(self) -> None:
        """Finish what was submitted, then end the thread."""
        self._pool.shutdown(wait=True)


class InlineRecords:
    """The record executor of a runtime without an agent: calls run in the caller's thread."""

    def in_thread(self) -> bool:
        return True

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        return fn(*args)

    def run_blocking(self, fn: Callable[..., T], *args: Any) -> T:
        return fn(*args)

    def close(self) -> None:
        return None
