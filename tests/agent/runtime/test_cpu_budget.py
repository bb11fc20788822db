"""The per-job CPU budget (agent/runtime/epochs/cpu_budget.py, JobRuntime.work): a job over its
budget
processes no new records — they wait in order in its backlog, nothing dropped — and is
reported (counter, status, a WARNING naming it); back under budget, the backlog is processed
and the result is exact against a Counter. The sliding window forgets old charges."""

from __future__ import annotations

import logging
from collections import Counter

import pytest
from test_services import FakeAgent

from agent.jobs.spec import JobSpec
from agent.jobs.table import RUNNING, JobEntry
from agent.runtime.epochs.cpu_budget import CpuBudget
from agent.runtime.host.agent import load_job_classes
from agent.runtime.job.runtime import JobRuntime
from agent.tunables import RuntimeTunables


def test_budget_window_slides() -> None:
    now = [0.0]
    budget = CpuBudget(0.5, 10.0, clock=lambda: now[0])
    budget.charge(4.0)
    assert not budget.over()
    now[0] = 3.0
    budget.charge(1.5)
    assert budget.over() and budget.stats()["share_used"] == 0.55
    now[0] = 10.5  # the first charge left the window
    assert not budget.over() and budget.used() == 1.5
    now[0] = 100.0
    assert budget.used() == 0.0
    with pytest.raises(ValueError):
        CpuBudget(0, 10)


async def test_a_job_over_budget_waits_then_catches_up_exactly(
    caplog: pytest.LogCaptureFixture,
) -> None:
    load_job_classes()
    fake = FakeAgent()
    body = {"name": "wcb", "creator": "t", "job_class": "wordcount", "start_epoch": 100}
    entry = JobEntry("wcb", JobSpec.from_dict(body).to_dict(), RUNNING, 1)
    rt = JobRuntime(
        entry,
        network=fake,
        job_table=fake,
        inputs=fake,
        tasks=fake,
        tunables=RuntimeTunables(max_backlog_records=5),
    )
    now = [0.0]
    rt.pipeline.cpu = CpuBudget(0.5, 10.0, clock=lambda: now[0])
    rt.pipeline.cpu.charge(6.0)  # as if the job had just used 60 % of a core for 10 s
    first = [{"ts": 105.1, "line": "a b a"}, {"ts": 105.2, "line": "c"}]
    second = [{"ts": 105.3, "line": "b b"} for _ in range(4)]
    with caplog.at_level(logging.WARNING, logger="agent.runtime.job.pipeline"):
        assert rt.work({"web": first}) == []
        assert rt.work({"web": second}) == []
    assert rt.worker is not None and rt.worker.counters["records_in"] == 0  # nothing processed
    cpu = rt.pipeline.cpu_status()
    assert cpu["throttled"] and cpu["backlog_records"] == 6
    assert rt.counters["cpu_throttled"] == 2 and cpu["throttle_episodes"] == 1
    assert rt.backlog_full()  # the agent stops polling the job's inputs: they back up there
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "job wcb: over its CPU budget" in warnings[0]
    now[0] = 20.0  # the window moved on: back within budget
    rt.work({"web": []})
    assert rt.worker.counters["records_in"] == 6 and not rt.pipeline.cpu_status()["throttled"]
    assert not rt.backlog_full()
    snaps = rt.worker.finish()
    got = Counter({k: v for _, snap in snaps for k, v in snap})
    assert got == Counter(["a", "b", "a", "c"] + ["b", "b"] * 4)
    await fake.client.close()
