"""BackgroundTasks (overlay/tasks.py): tracking, one error report per failed task, quiet
exceptions, cancellation never reported, cancel_all — on a real asyncio loop.

No test sleeps to synchronise: a test waits for the tasks themselves (``asyncio.wait``) and
relies on asyncio running a finished task's done callbacks in the order they were added, so
the helper's bookkeeping (added at spawn) has run before the waiter (added later) resumes."""

from __future__ import annotations

import asyncio

import pytest

from overlay.tasks import BackgroundTasks


class Recorder:
    def __init__(self) -> None:
        self.reports: list[tuple[str, BaseException]] = []

    def __call__(self, what: str, exc: BaseException) -> None:
        self.reports.append((what, exc))


async def _wait_on(event: asyncio.Event) -> str:
    await event.wait()
    return "done"


async def _raise(exc: BaseException) -> None:
    raise exc


async def test_tracks_tasks_in_start_order_until_they_end() -> None:
    tasks = BackgroundTasks()
    first, second = asyncio.Event(), asyncio.Event()
    a = tasks.spawn(_wait_on(first), "a")
    b = tasks.spawn(_wait_on(second), "b")
    fut: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    c = tasks.spawn(fut, "a plain future")  # any awaitable, not only coroutines
    assert len(tasks) == 3
    assert list(tasks) == [a, b, c]

    second.set()
    await asyncio.wait([b])
    assert b.result() == "done"
    assert list(tasks) == [a, c]

    fut.set_result(7)
    first.set()
    await asyncio.wait([a, c])
    assert len(tasks) == 0
    assert list(tasks) == []


async def test_iterating_is_safe_while_tasks_end() -> None:
    tasks = BackgroundTasks()
    events = [asyncio.Event() for _ in range(3)]
    spawned = [tasks.spawn(_wait_on(e)) for e in events]
    for task in tasks:  # a snapshot: ending tasks while iterating does not break it
        events[spawned.index(task)].set()
        await asyncio.wait([task])
    assert len(tasks) == 0


async def test_a_failure_is_reported_once_with_its_name() -> None:
    errors = Recorder()
    tasks = BackgroundTasks(errors)
    boom = ValueError("boom")
    task = tasks.spawn(_raise(boom), "probe")
    await asyncio.wait([task])
    assert errors.reports == [("probe", boom)]
    assert len(tasks) == 0
    ok = tasks.spawn(_wait_on(_set(asyncio.Event())), "fine")
    await asyncio.wait([ok])
    assert errors.reports == [("probe", boom)]  # a success adds nothing


async def test_quiet_exceptions_and_their_subclasses_are_not_reported() -> None:
    class Expected(Exception):
        pass

    class MoreSpecific(Expected):
        pass

    errors = Recorder()
    tasks = BackgroundTasks(errors, quiet=(Expected,))
    quiet = [tasks.spawn(_raise(Expected())), tasks.spawn(_raise(MoreSpecific()))]
    loud_exc = RuntimeError("not expected")
    loud = tasks.spawn(_raise(loud_exc), "loud")
    await asyncio.wait([*quiet, loud])
    assert errors.reports == [("loud", loud_exc)]
    assert len(tasks) == 0


async def test_cancellation_is_not_reported() -> None:
    errors = Recorder()
    tasks = BackgroundTasks(errors)
    task = tasks.spawn(_wait_on(asyncio.Event()), "waiter")
    task.cancel()
    await asyncio.wait([task])
    assert task.cancelled()
    assert errors.reports == []
    assert len(tasks) == 0


async def test_cancel_all_cancels_running_tasks_only() -> None:
    errors = Recorder()
    tasks = BackgroundTasks(errors)
    finished = tasks.spawn(_wait_on(_set(asyncio.Event())), "finished")
    await asyncio.wait([finished])
    running = [tasks.spawn(_wait_on(asyncio.Event()), f"t{i}") for i in range(3)]
    assert len(tasks) == 3

    tasks.cancel_all()
    await asyncio.wait(running)
    assert all(t.cancelled() for t in running)
    assert finished.result() == "done"
    assert errors.reports == []
    assert len(tasks) == 0
    tasks.cancel_all()  # nothing left: a no-op


async def test_without_a_hook_failures_are_dropped_silently() -> None:
    tasks = BackgroundTasks()
    task = tasks.spawn(_raise(ValueError("ignored")))
    await asyncio.wait([task])
    with pytest.raises(ValueError):
        task.result()  # the task keeps its outcome for whoever holds it
    assert len(tasks) == 0


def _set(event: asyncio.Event) -> asyncio.Event:
    event.set()
    return event
