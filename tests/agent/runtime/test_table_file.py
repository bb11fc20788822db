"""The job table on disk (``agent/runtime/host/table_file.py``): a restarted agent runs its jobs
before it reads a line, without waiting for a peer to tell it; a damaged file is logged and
read as empty; the file is written only when the table changed."""

from __future__ import annotations

import logging
import math
import os
import time
from pathlib import Path

import pytest
from agent_helpers import complete_result, lines, running_agents, wait_for, word_counts

from agent.jobs.table import RUNNING, JobEntry, JobTable
from agent.runtime.host.table_file import FILE_NAME, JobTableFile


def spec(name: str) -> dict:
    return {"name": name, "creator": "t", "job_class": "wordcount"}


def test_round_trip_keeps_entries_and_tombstones(tmp_path: Path) -> None:
    table = JobTable()
    table.apply(JobEntry("a", spec("a"), RUNNING, 1))
    table.apply(JobEntry("b", spec("b"), RUNNING, 1))
    table.merge_removed([{"name": "b", "version": 2, "stopped_at": 1.0e12}])
    f = JobTableFile(tmp_path)
    assert f.save(table.snapshot(), table.removed())
    assert not f.save(table.snapshot(), table.removed())  # unchanged: not written again
    assert os.stat(tmp_path / FILE_NAME).st_mode & 0o777 == 0o600
    again = JobTable()
    jobs, removed = JobTableFile(tmp_path).load()
    again.merge_removed(removed)
    again.merge(jobs)
    assert again.snapshot() == table.snapshot() and again.removed() == table.removed()
    assert [e.name for e in again.running()] == ["a"]


@pytest.mark.parametrize("content", [b"{not json", b'{"jobs": 1, "removed": []}', b"[]"])
def test_a_damaged_file_is_logged_and_read_as_empty(
    tmp_path: Path, content: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / FILE_NAME).write_bytes(content)
    with caplog.at_level(logging.WARNING, "agent.runtime.host.table_file"):
        assert JobTableFile(tmp_path).load() == ([], [])
    assert "malformed" in caplog.text


def test_a_missing_file_is_an_empty_table(tmp_path: Path) -> None:
    assert JobTableFile(tmp_path).load() == ([], [])


async def test_a_restarted_agent_runs_its_jobs_before_any_peer_tells_it(tmp_path: Path) -> None:
    async with running_agents(2, data_dir=str(tmp_path)) as agents:
        await agents[0].submit(spec("wc"))
        await agents[0].submit(spec("gone"))
        await agents[1].stop_job("gone")
        path = tmp_path / "agent-0" / FILE_NAME

        def saved() -> bool:
            jobs, _ = JobTableFile(path.parent).load()
            states = {j["name"]: j["state"] for j in jobs}
            return states == {"wc": "running", "gone": "stopped"}

        await wait_for(saved, 10, "agent 0 to write its job table")
    # alone now (its peer is gone too): nobody can tell it its jobs, the file does
    async with running_agents(1, data_dir=str(tmp_path)) as (alone,):
        assert sorted(alone.runtimes) == ["wc"]  # at start, the stopped job not run
        assert alone.status()["counters"]["jobs_restored"] == 2
        # and it runs: it reads its input and counts every line (against a Counter)
        # ahead of what the first run already passed on (its idle clock closed epochs up to
        # about now, and a restarted job resumes after those)
        e = math.floor(time.time()) + 3
        texts = ["a b b", "c a"]
        await alone.ingest("ingest", lines(e + 0.1, texts) + lines(e + 1.5, ["later"]))
        got = await wait_for(lambda: complete_result(alone, "wc", e), 15, "epoch e counted")
        assert got == word_counts(texts, 1)
