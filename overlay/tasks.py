"""Background tasks owned by one component: started, tracked, failures reported, cancelled.

Contract: :class:`BackgroundTasks` keeps a strong reference to every task it starts (asyncio
only keeps weak ones, so an untracked task can be collected mid-flight) until the task ends.
A task that ends with an exception is reported once to ``on_error(what, exc)`` — the owner logs
and counts it in its own terms — unless the exception is one of ``quiet`` (expected endings
such as the owner's own "not running" error); cancellation is never reported.
:meth:`cancel_all` cancels every task still running (the owner's ``stop``). Tasks are kept in
start order (a dict, not a set) so the deterministic simulator sees the same order each run.

It lives in ``overlay`` because that is the lowest layer that runs background tasks; ``srt``
and ``agent`` use the same helper rather than a copy of it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

ErrorHook = Callable[[str, BaseException], None]


class BackgroundTasks:
    """The background tasks of one owner (a node, a protocol, a tree manager, an agent)."""

    def __init__(
        self, on_error: ErrorHook | None = None, *, quiet: tuple[type[BaseException], ...] = ()
    ) -> None:
        self._tasks: dict[asyncio.Future[Any], str] = {}
        self._on_error = on_error
        self._quiet = quiet

    def spawn(self, coro: Awaitable[Any], what: str = "task") -> asyncio.Future[Any]:
        """Run ``coro`` in the background; ``what`` names it in error reports."""
        task = asyncio.ensure_future(coro)
        self._tasks[task] = what
        task.add_done_callback(self._done)
        return task

    def cancel_all(self) -> None:
        """Cancel every task still running (they end at their next await)."""
        for task in list(self._tasks):
            task.cancel()

    def __len__(self) -> int:
        return len(self._tasks)

    def __iter__(self) -> Iterator[asyncio.Future[Any]]:
        return iter(list(self._tasks))

    def _done(self, task: asyncio.Future[Any]) -> None:
        what = self._tasks.pop(task, "task")
        if task.cancelled():
            return
        exc = task.exception()
        if exc is None or isinstance(exc, self._quiet) or self._on_error is None:
            return
        self._on_error(what, exc)
