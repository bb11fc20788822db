"""The seams of the agent runtime without an Agent: a JobRuntime built from fake services
(agent/runtime/services.py) picks its inputs, resumes its spec and reports its trees' outflow
for the offset keeper; the agent's background tasks count and log failures and are cancelled
together."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Sequence
from types import SimpleNamespace
from typing import Any

import pytest

import srt
from agent.config import load_config
from agent.jobs.spec import JobSpec
from agent.jobs.table import RUNNING, JobEntry
from agent.runtime.host.agent import Agent, load_job_classes
from agent.runtime.job.runtime import JobRuntime
from agent.runtime.recovery.offsets import TreeOutflow, acknowledged_epoch
from agent.tunables import RuntimeTunables
from srt import DataPlaneClient

SECRET = "s" * 32


class FakeTrees:
    def __init__(self) -> None:
        self.roots: set[int] = set()

    def view(self, tree_id: int) -> Any:
        return SimpleNamespace(is_root=tree_id in self.roots, parent_url=None, children={})


class FakeAgent:
    """NetworkService, JobTableService and InputService, recording what the runtime asks."""

    def __init__(self) -> None:
        self.node_id = 7
        self.trees = FakeTrees()
        self.data_url = "http://127.0.0.1:1"
        self.client = DataPlaneClient(SECRET.encode())
        self.srt_tunables = srt.Tunables()
        self.snapshot_datagrams = None  # every snapshot by HTTP
        self.recorded: list[JobEntry] = []
        self.ticked: list[list[str]] = []
        self.spawned: list[str] = []
        self.gone: list[int] = []

    # NetworkService
    def neighbours(self) -> list[Any]:
        return []

    async def data_url_of(self, node: Any) -> str:
        return self.data_url

    def peer_gone(self, node_id: int) -> None:
        self.gone.append(node_id)

    domain = "default"

    def routable(self, node_id: int) -> bool:
        return node_id not in self.gone

    def near(self, key: int, count: int) -> list[Any]:
        return []

    # JobTableService
    async def publish_spec(self, spec: JobSpec, *, base_version: int) -> int:
        return base_version + 1

    async def announce_entry(self, name: str) -> None:
        return None

    def record_entry(self, entry: JobEntry) -> None:
        self.recorded.append(entry)

    def master_tree(self, app: int) -> int:
        return app

    # InputService
    def input_names(self) -> set[str]:
        return {"web", "ingest"}

    def timestamp_field(self, input_name: str) -> str:
        return "ts"

    def tick_now(self, inputs: Sequence[str]) -> None:
        self.ticked.append(list(inputs))

    def resume_spec(self, spec: JobSpec) -> JobSpec:
        return spec.with_changes(start_epoch=(spec.start_epoch or 0) + 5)

    # Spawner
    def spawn(self, coro: Awaitable[Any], what: str = "task") -> None:
        self.spawned.append(what)
        if asyncio.iscoroutine(coro):
            coro.close()


def runtime(fake: FakeAgent, **spec: Any) -> JobRuntime:
    load_job_classes()  # wordcount
    body = {"name": "wc", "creator": "t", "job_class": "wordcount", "start_epoch": 100, **spec}
    entry = JobEntry("wc", JobSpec.from_dict(body).to_dict(), RUNNING, 1)
    return JobRuntime(
        entry,
        network=fake,
        job_table=fake,
        inputs=fake,
        tasks=fake,
        tunables=RuntimeTunables(late_attempts=1),
    )


async def test_a_runtime_needs_only_its_services() -> None:
    fake = FakeAgent()
    rt = runtime(fake, inputs=["web", "elsewhere"], trees=2)
    assert rt.spec.start_epoch == 105  # the input service resumed it
    assert rt.inputs == ["web"] and rt.worker is not None and rt.lake is None
    assert rt.tunables.late_attempts == 1
    assert rt.outflow() is None  # no barrier yet
    for tid in rt.tree_list:
        rt.ensure_tree(tid)
    assert rt.outflow() == [TreeOutflow(105, None, False)] * 2
    assert rt.clock is rt.worker.clock and acknowledged_epoch(rt) is None  # nothing committed
    for tid in rt.tree_list:  # the masters' commit multicasts
        await rt.control.on_multicast(tid, {"kind": "commit", "epoch": 110})
    assert acknowledged_epoch(rt) == 104  # emitted here up to 104, committed up to 110
    fake.trees.roots.add(rt.tree_list[0])
    assert [t.is_root for t in rt.outflow() or []] == [True, False]
    assert rt.is_master and rt.roles() == ["worker", "master"]
    assert runtime(FakeAgent(), inputs=["elsewhere"]).clock is None  # not a worker here
    await fake.client.close()


async def test_agent_background_tasks_count_failures_and_cancel_on_stop(
    caplog: pytest.LogCaptureFixture,
) -> None:
    agent = Agent(load_config(env={"ELF_SECRET": SECRET}))

    async def fail() -> None:
        raise RuntimeError("boom")

    forever = asyncio.Event()
    with caplog.at_level(logging.WARNING, logger="agent.runtime.host.agent"):
        agent.spawn(fail(), "doomed")
        agent.spawn(forever.wait(), "waiting")
        for _ in range(5):
            await asyncio.sleep(0)
    assert agent.counters == {"task_failed:doomed": 1}
    assert "doomed failed: RuntimeError('boom')" in caplog.text
    (waiting,) = list(agent.tasks)
    agent.tasks.cancel_all()  # what stop() does
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert len(agent.tasks) == 0 and agent.counters == {"task_failed:doomed": 1}
    await agent.client.close()
