"""A job that joins a file input other jobs already read (issue 12: "a job submitted while
others run gets every record of its inputs from its start epoch on"): it re-reads what they
read of its start epoch (``agent/ingest/replay.py``), so that epoch is final and exact -
against a Counter over the lines written - instead of flagged. What cannot be re-read is
still flagged, never counted as whole."""

from __future__ import annotations

import json
import math
import os
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from agent_helpers import running_agents, wait_for

from agent.config import InputConfig
from agent.ingest.replay import ReplayError, replay_range


def append(path: Path, ts: float, texts: list[str]) -> None:
    with open(path, "a") as f:
        f.write("".join(json.dumps({"ts": ts, "line": t}) + "\n" for t in texts))


def words(texts: list[str], agents: int) -> Counter:
    c: Counter = Counter()
    for t in texts:
        c.update(t.split())
    return Counter({k: v * agents for k, v in c.items()})


def spec(name: str, start: int) -> dict[str, Any]:
    return {"name": name, "creator": "t", "job_class": "wordcount", "start_epoch": start,
            "allowed_lateness": 1.0, "inputs": ["f"]}  # fmt: skip


async def result(agent: Any, job: str, epoch: int) -> dict[str, Any] | None:
    try:
        return await agent.results(job, epoch)
    except Exception:
        return None


async def test_a_job_joining_an_input_others_read_re_reads_its_first_epoch(tmp_path: Path):
    log = tmp_path / "events.jsonl"
    log.touch()
    data = tmp_path / "data"
    async with running_agents(2, data_dir=str(data), inputs=(f"f={log}",)) as agents:
        e = math.floor(time.time()) + 2  # the first job's start; the second's is e + 1
        await agents[0].submit(spec("first", e))
        await wait_for(lambda: all("first" in a.runtimes for a in agents), 10, "the job")
        append(log, e + 0.1, ["before"])  # epoch e - 1 for the second job: not its own
        await wait_for(
            lambda: all(a.runtimes["first"].clock.max_event_time >= e for a in agents),
            10,
            "the first job to read epoch e's records on every agent",
        )
        e += 1
        early = [f"alpha w{i} common" for i in range(30)]
        append(log, e + 0.1, early)
        await wait_for(
            lambda: all(a.runtimes["first"].clock.max_event_time >= e for a in agents),
            10,
            "the first job to read epoch e + 1's records on every agent",
        )
        await agents[1].submit(spec("second", e))  # epoch e + 1 is under way: half read
        await wait_for(lambda: all("second" in a.runtimes for a in agents), 10, "second job")
        more = [f"beta v{i} common" for i in range(30)]
        append(log, e + 0.6, more)
        append(log, e + 2.5, ["later"])  # closes epoch e

        async def final(job: str) -> dict[str, Any] | None:
            res = await result(agents[0], job, e)
            return res if res is not None and not res["tentative"] else None

        first = await wait_for(lambda: final("first"), 20, "the first job's epoch e, final")
        second = await wait_for(lambda: final("second"), 20, "the second job's epoch e, final")
        want = words(early + more, 2)
        assert Counter(dict(first["rows"])) == want
        assert Counter(dict(second["rows"])) == want  # not a record missed, none twice
        assert second["lacking"] == [] and second["coverage"] == 1.0
        assert all(a.runtimes["second"].recovery.incomplete_until is None for a in agents)
        assert all(a.status()["counters"].get("replays") == 1 for a in agents)


def test_a_range_that_cannot_be_re_read_exactly_is_refused(tmp_path: Path) -> None:
    log = tmp_path / "f.jsonl"
    append(log, 1.0, ["a b", "c"])
    cfg = InputConfig(name="f", path=str(log))
    start = {"path": str(log), "inode": os.stat(log).st_ino, "offset": 0, "line_no": 0}
    size = log.stat().st_size
    got = [r for batch in replay_range(cfg, start, size, max_bytes=1 << 20) for r in batch]
    assert [r["line"] for r in got] == ["a b", "c"]
    first_line = len(log.read_bytes().split(b"\n")[0]) + 1
    got = [r for b in replay_range(cfg, start, first_line, max_bytes=1 << 20) for r in b]
    assert [r["line"] for r in got] == ["a b"]  # never past the stop
    with pytest.raises(ReplayError, match="more than"):
        list(replay_range(cfg, start, size, max_bytes=size - 1))
    with pytest.raises(ReplayError, match="rotated"):
        list(replay_range(cfg, {**start, "inode": start["inode"] + 1}, size, max_bytes=1 << 20))
    with pytest.raises(ReplayError, match="ends before"):
        list(replay_range(cfg, start, size + 100, max_bytes=1 << 20))
    with pytest.raises(ReplayError, match="not a file"):
        list(replay_range(InputConfig(name="i", type="ingest"), start, size, max_bytes=9))


def test_a_position_from_before_a_restart_is_a_start_for_epochs_after_those_acknowledged(
    tmp_path: Path,
) -> None:
    """The offset keeper's committed position, loaded after a restart, may start a re-read
    for epochs after the highest epoch acknowledged with it (every record before it belongs
    to an acknowledged epoch), not for earlier ones."""
    from agent.runtime.recovery.offsets import STATE_FILE, OffsetKeeper

    position = {"path": "/x", "inode": 7, "offset": 120, "line_no": 3}
    doc = {"version": 1, "inputs": {"f": position},
           "jobs": {"wc": {"creator": "t", "start_epoch": 90, "acked": 100},
                    "ql": {"creator": "t", "start_epoch": 90, "acked": 98}}}  # fmt: skip
    (tmp_path / STATE_FILE).write_text(json.dumps(doc))
    keeper = OffsetKeeper(tmp_path)
    assert keeper.replay_from("f", 101) == position
    assert keeper.replay_from("f", 100) is None  # epoch 100's records may precede it
    assert keeper.replay_from("g", 101) is None  # an input with no position


async def test_a_job_joining_in_the_inputs_first_epoch_re_reads_it_too(tmp_path: Path):
    """The other job's first epoch is the newcomer's too (two jobs submitted together, the
    second installed a tick later): the tail's own starting point is where the re-read
    begins."""
    log = tmp_path / "events.jsonl"
    log.touch()
    async with running_agents(1, data_dir=str(tmp_path / "data"), inputs=(f"f={log}",)) as (a,):
        e = math.floor(time.time()) + 2
        early = [f"alpha w{i} common" for i in range(30)]
        append(log, e + 0.1, early)
        await a.submit(spec("first", e))
        await wait_for(lambda: a.runtimes["first"].clock.max_event_time >= e, 10, "first read")
        await a.submit(spec("second", e))
        more = [f"beta v{i} common" for i in range(30)]
        append(log, e + 0.6, more)
        append(log, e + 2.5, ["later"])

        async def final(job: str) -> dict[str, Any] | None:
            res = await result(a, job, e)
            return res if res is not None and not res["tentative"] else None

        second = await wait_for(lambda: final("second"), 20, "the second job's epoch e, final")
        assert Counter(dict(second["rows"])) == words(early + more, 1)
