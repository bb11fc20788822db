"""``agent/ingest/file_watch.py`` on real files and a real inotify descriptor: a change in a
watched file's directory (append, rotation, truncation, re-creation) calls its subscribers on
the event loop; subscribers of one loop share one descriptor and one watch per directory; a
closed subscription is called no more; a watch whose directory goes away turns inactive (the
subscriber polls); without a running loop there is no watch."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import pytest

from agent.ingest import file_watch
from agent.ingest.file_watch import watch_file

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="inotify is Linux's")


async def called_within(calls: list[int], before: int, timeout: float = 5.0) -> None:
    async with asyncio.timeout(timeout):
        while len(calls) == before:
            await asyncio.sleep(0.01)


async def test_changes_of_a_watched_file_call_its_subscriber(tmp_path: Path) -> None:
    log = tmp_path / "access.log"
    log.write_text("")
    calls: list[int] = []
    watch = watch_file(str(log), lambda: calls.append(1))
    assert watch is not None and watch.active
    try:
        for change in (
            lambda: log.open("a").write("line\n"),  # an append
            lambda: log.rename(tmp_path / "access.log.1"),  # rotation: moved away...
            lambda: log.write_text("new\n"),  # ... and re-created
            lambda: os.truncate(log, 0),  # truncation
        ):
            before = len(calls)
            change()
            await called_within(calls, before)
    finally:
        watch.close()
    assert not watch.active


async def test_subscribers_share_one_descriptor_and_a_closed_one_is_not_called(
    tmp_path: Path,
) -> None:
    log = tmp_path / "a.log"
    log.write_text("")
    first: list[int] = []
    second: list[int] = []
    w1 = watch_file(str(log), lambda: first.append(1))
    w2 = watch_file(str(tmp_path / "b.log"), lambda: second.append(1))
    assert w1 is not None and w2 is not None
    watcher = file_watch._BY_LOOP[asyncio.get_running_loop()]
    assert len(watcher.wd_of) == 1  # one kernel watch for the directory
    w1.close()
    log.open("a").write("x\n")
    await called_within(second, 0)
    assert first == []
    w2.close()
    assert watcher.wd_of == {} and not watcher.reading


async def test_a_watch_whose_directory_goes_away_turns_inactive(tmp_path: Path) -> None:
    folder = tmp_path / "logs"
    folder.mkdir()
    calls: list[int] = []
    watch = watch_file(str(folder / "x.log"), lambda: calls.append(1))
    assert watch is not None
    folder.rmdir()
    await called_within(calls, 0)
    async with asyncio.timeout(5):
        while watch.active:
            await asyncio.sleep(0.01)


def test_no_running_loop_means_no_watch(tmp_path: Path) -> None:
    assert watch_file(str(tmp_path / "x.log"), lambda: None) is None


async def test_a_missing_directory_is_polled(tmp_path: Path) -> None:
    assert watch_file(str(tmp_path / "nowhere" / "x.log"), lambda: None) is None
