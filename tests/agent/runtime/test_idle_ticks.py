"""The agent's clock when there is nothing to poll (issue "A lightweight agent"): the tick
loop (``agent/runtime/host/ticks.py``) ticks every ``IDLE_TICK_SECONDS`` while it runs no
job; a job's ``tick_now`` brings its first tick at once; jobs that read only pushed input
(``ingest``) are ticked when due (their ``tick_due``: an epoch to close, a timer), not every
``tick_seconds``; a job reading a file tail has its file checked every ``tick_seconds`` on
the loop, and the record thread ticks when the file grew, when the job is due, and at least
every ``IDLE_TICK_SECONDS``. The record thread is
replaced by an inline runner that counts the ticks (the inputs are the agent's real ones: its
``ingest`` queue and, where a test configures one, a file tail)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import math
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from agent.config import AgentConfig, InputConfig
from agent.runtime.host.ticks import IDLE_TICK_SECONDS, Ticks
from agent.tunables import RuntimeTunables


class CountingRecords:
    """Runs the record thread's part inline, counting the ticks (the runtimes each saw, and
    when it came)."""

    def __init__(self) -> None:
        self.ticks: list[int] = []
        self.at: list[float] = []

    async def run(self, fn: Any, only: Any, runtimes: list[Any]) -> Any:
        self.ticks.append(len(runtimes))
        self.at.append(time.time())
        return fn(only, runtimes)


class Offsets:
    def resume_state(self, name: str) -> None:
        return None

    def observe(self, *args: Any) -> None:
        pass


class Runtime:
    """A job reading ``inputs`` (none: it reads nothing here, but the tick still visits it),
    due for a tick at ``due`` (wall clock)."""

    spec = None
    clock = None

    def __init__(self, inputs: tuple[str, ...] = (), due: float = math.inf) -> None:
        self.inputs = inputs
        self.due = due
        self.read: list[Any] = []  # the records its ticks fed it

    def backlog_full(self) -> bool:
        return False

    def tick_due(self, now: float) -> float:
        return self.due

    def work(self, batches: dict[str, Any]) -> list[Any]:
        self.read.extend(r for batch in batches.values() for r in batch)
        return []

    def deliver(self, closed: Any, now: float) -> None:
        pass


RUNNING: set[int] = set()  # the Ticks whose loop runs (ids)


def make_ticks(
    records: CountingRecords,
    runtimes: dict[str, Any],
    counted: Counter[str] | None = None,
    **config: Any,
) -> Ticks:
    counted = Counter() if counted is None else counted
    ticks: Ticks = Ticks(
        AgentConfig(secret=b"s" * 32, **config),
        runtimes,
        Offsets(),  # type: ignore[arg-type]
        records=lambda: records,  # type: ignore[arg-type,return-value]
        count=lambda what, n=1: counted.update({what: n}),
        running=lambda: id(ticks) in RUNNING,
    )
    RUNNING.add(id(ticks))
    ticks.join_inputs = lambda runtime, readers: []  # type: ignore[method-assign]
    ticks.open_inputs()
    return ticks


async def stop(ticks: Ticks, loop: asyncio.Task[None]) -> None:
    RUNNING.discard(id(ticks))
    ticks.event.set()
    await asyncio.wait_for(loop, 5)
    ticks.close()


async def ticks_within(records: CountingRecords, seconds: float) -> int:
    """How many ticks come in the next ``seconds`` (an observation window: a rate, not a
    synchronization)."""
    before = len(records.ticks)
    await asyncio.sleep(seconds)
    return len(records.ticks) - before


async def test_an_agent_without_jobs_ticks_slowly_until_a_job_asks() -> None:
    records = CountingRecords()
    runtimes: dict[str, Any] = {}
    ticks = make_ticks(records, runtimes)
    loop = asyncio.create_task(ticks.tick_loop())
    try:
        window = 2.5 * IDLE_TICK_SECONDS
        idle = await ticks_within(records, window)
        tick = ticks.tunables.tick_seconds
        assert 1 <= idle <= window / IDLE_TICK_SECONDS + 1 < window / tick / 2, records.ticks
        seen = len(records.ticks)
        runtimes["job"] = Runtime()
        ticks.tick_now([])  # what a starting job does (JobRuntime.start)
        async with asyncio.timeout(IDLE_TICK_SECONDS / 2):
            while not any(records.ticks[seen:]):
                await asyncio.sleep(0.01)
        # a job with nothing to poll and nothing due: the slow clock still
        assert await ticks_within(records, window) <= window / IDLE_TICK_SECONDS + 1
    finally:
        await stop(ticks, loop)


async def test_a_job_reading_pushed_input_is_ticked_when_due() -> None:
    records = CountingRecords()
    runtimes: dict[str, Any] = {"job": Runtime(("ingest",))}
    ticks = make_ticks(records, runtimes)
    loop = asyncio.create_task(ticks.tick_loop())
    try:
        await ticks_within(records, 0.2)  # the first tick, with nothing due
        # due in 0.4 s: a tick comes then, not at the next slow tick
        runtimes["job"].due = due = time.time() + 0.4
        ticks.tick_now(["ingest"])  # a push (its tick sees the new due time)
        async with asyncio.timeout(IDLE_TICK_SECONDS):
            while not any(t >= due for t in records.at):
                await asyncio.sleep(0.01)
        late = min(t for t in records.at if t >= due) - due
        assert late < IDLE_TICK_SECONDS / 2, late
        runtimes["job"].due = math.inf
        assert await ticks_within(records, 2.5) <= 2.5 / IDLE_TICK_SECONDS + 1
    finally:
        await stop(ticks, loop)


async def test_a_quiet_file_tail_wakes_the_record_thread_only_when_it_grows(
    tmp_path: Path,
) -> None:
    records = CountingRecords()
    # a job reading a file tail and the (empty) ingest queue, as a job naming no input does
    runtimes: dict[str, Any] = {"job": Runtime(("web", "ingest"))}
    path = tmp_path / "access.log"
    path.write_text("")
    ticks = make_ticks(records, runtimes, inputs=(InputConfig(name="web", path=str(path)),))
    loop = asyncio.create_task(ticks.tick_loop())
    tick = ticks.tunables.tick_seconds
    try:
        await ticks_within(records, 0.5)  # the job's first tick reads the empty file
        window = 2.5 * IDLE_TICK_SECONDS
        # checked every tick_seconds on the loop (a stat), but nothing to read: the record
        # thread ticks at the slow pace only (it used to tick every tick_seconds)
        quiet = await ticks_within(records, window)
        assert quiet <= window / IDLE_TICK_SECONDS + 1 < window / tick / 2, records.ticks
        with path.open("a") as f:
            f.write(json.dumps({"ts": time.time(), "word": "a"}) + "\n")
        async with asyncio.timeout(20 * tick):
            while not runtimes["job"].read:
                await asyncio.sleep(tick / 4)
        assert [r.get("word") for r in runtimes["job"].read] == ["a"]
        # due (an epoch to close): a tick comes although the file did not change
        seen = len(records.at)
        runtimes["job"].due = due = time.time() + 0.3
        ticks.tick_now(["web"])  # a tick that learns the new due time
        async with asyncio.timeout(IDLE_TICK_SECONDS):
            while not any(t >= due for t in records.at[seen:]):
                await asyncio.sleep(0.01)
    finally:
        await stop(ticks, loop)


async def wakes_within(records: CountingRecords, counted: Counter[str], seconds: float) -> int:
    """Loop wake-ups that looked at the inputs in the next ``seconds``: record-thread ticks
    plus quiet checks (a ``stat`` each)."""
    before = len(records.ticks) + counted["ticks_quiet"]
    await asyncio.sleep(seconds)
    return len(records.ticks) + counted["ticks_quiet"] - before


@pytest.mark.skipif(sys.platform != "linux", reason="inotify is Linux's")
async def test_a_watched_file_is_checked_once_a_second_and_read_when_it_changes(
    tmp_path: Path,
) -> None:
    path = tmp_path / "access.log"
    path.write_text("")
    inputs = (InputConfig(name="web", path=str(path)),)
    wakes = {}
    for watch in (True, False):
        records, counted = CountingRecords(), Counter[str]()
        runtimes: dict[str, Any] = {"job": Runtime(("web",))}
        runtime = dataclasses.replace(RuntimeTunables(), watch_files=watch)
        ticks = make_ticks(records, runtimes, counted, inputs=inputs, runtime=runtime)
        assert ("web" in ticks.watches) is watch
        loop = asyncio.create_task(ticks.tick_loop())
        tick = ticks.tunables.tick_seconds
        try:
            await ticks_within(records, 0.5)  # the first tick reads the empty file
            wakes[watch] = await wakes_within(records, counted, 2.5 * IDLE_TICK_SECONDS)
            if watch:
                word = f"w{len(runtimes['job'].read)}"
                for change in ("append", "rotate"):
                    if change == "rotate":  # moved away and re-created, as logrotate does
                        path.rename(tmp_path / "access.log.1")
                        word = "after-rotation"
                    with path.open("a") as f:
                        f.write(json.dumps({"ts": time.time(), "word": word}) + "\n")
                    async with asyncio.timeout(0.9 * IDLE_TICK_SECONDS):
                        while word not in [r.get("word") for r in runtimes["job"].read]:
                            await asyncio.sleep(tick / 4)
        finally:
            await stop(ticks, loop)
    # watched: the once-a-second safety check; polled: a stat every tick_seconds
    assert wakes[True] <= 2.5 + 2, wakes
    assert wakes[False] >= 2.5 / tick / 2, wakes


@pytest.mark.skipif(sys.platform != "linux", reason="inotify is Linux's")
async def test_a_trickle_lingers_and_every_line_is_still_read(tmp_path: Path) -> None:
    """A watched file that gets a line every 0.1 s (a quiet log): its lines are read in
    batches, about every LINGER seconds, not once per write and not twice per change (a tick
    that read the file to its end does not tick again at once); every line arrives."""
    from agent.runtime.host.ticks import LINGER

    path = tmp_path / "access.log"
    path.write_text("")
    records = CountingRecords()
    runtimes: dict[str, Any] = {"job": Runtime(("web",))}
    ticks = make_ticks(records, runtimes, inputs=(InputConfig(name="web", path=str(path)),))
    assert "web" in ticks.watches
    loop = asyncio.create_task(ticks.tick_loop())
    try:
        await ticks_within(records, 0.5)
        before, window, written = len(records.ticks), 2.0, 0
        started = time.monotonic()
        while time.monotonic() - started < window:
            with path.open("a") as f:
                f.write(json.dumps({"ts": time.time(), "n": written}) + "\n")
            written += 1
            await asyncio.sleep(0.1)
        ticked = len(records.ticks) - before
        async with asyncio.timeout(5):
            while len(runtimes["job"].read) < written:
                await asyncio.sleep(0.05)
        assert [r["n"] for r in runtimes["job"].read] == list(range(written))
        # one tick per LINGER (plus the safety tick), against one per write or two before
        assert ticked <= window / LINGER + 3 < written, (ticked, written)
    finally:
        await stop(ticks, loop)
