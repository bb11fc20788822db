"""Issue 13, finding 1: the event loop never waits on user code or user data.

Four real agents (in-process: real UDP overlay, HTTP data plane and API on loopback, one shared
event loop, so a blocked loop would stall all four and their failure detectors alike) run
three jobs on the ingest input: a job class whose map busy-loops 2 s on a marker record, the
issue's QL probe ``WHERE line RLIKE '(a+)+$'`` (which held Python's ``re`` for 6.6 s over four
``'a'*24+'b'`` lines), and wordcount as the job whose results must stay exact. The probe lines
go through the agent's HTTP ingest endpoint while :class:`StatusWatch` polls ``/status`` and a
sampler measures the loop's wake-up lag. Asserted: status answers within the suite's bound
throughout, the loop lag stays small, no agent left or re-joined a tree, wordcount's epoch
equals a Counter and the probe's count is exact (the all-``a`` lines match, the others not).

Measured on the 2-core dev box (shared with other test runs): loop lag max ≈ 10–30 ms during
the 2 s map (the GIL's 5 ms switch interval, several times over, plus the agents' own work),
status worst ≈ 50–150 ms.
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
from collections import Counter
from typing import Any

import pytest
from agent_helpers import complete_result, lines, running_agents, wait_for, word_counts
from hostile_helpers import StatusWatch

from agent.client import ApiClient, ApiError
from agent.jobs.job import Job, register_job
from agent.jobs.ql_job import spec_from_query
from agent.tunables import RuntimeTunables

SLOW_SECONDS = 2.0
MARKER = "SLOW-MARKER"
# The bound is 50 ms on a quiet host; four agents, a 2 s busy thread and other test
# processes share 2 cores here, so the test allows 250 ms (a blocked loop shows as seconds).
LAG_BOUND = 0.25


@register_job("test-slow-marker")
class SlowMarker(Job):
    """Counts lines; a marker line costs its map ``SLOW_SECONDS`` of busy CPU."""

    default_aggregator = "count"

    def map(self, record: dict[str, Any]) -> list[tuple[str, int]]:
        line = record.get("line")
        if line == MARKER:
            end = time.perf_counter() + SLOW_SECONDS
            while time.perf_counter() < end:  # busy: holds the GIL as long as the OS lets it
                pass
        return [(str(line), 1)]


@register_job("test-slow-master")
class SlowMaster(Job):
    """Counts lines; its master hook spends ``SLOW_SECONDS`` of busy CPU on every epoch."""

    default_aggregator = "count"

    def map(self, record: dict[str, Any]) -> list[tuple[str, int]]:
        return [(str(record.get("line")), 1)]

    slowed = False  # once per test run: a hook slower than every epoch would queue forever

    def on_epoch_result(self, epoch: int, result: Any) -> None:
        if SlowMaster.slowed or not len(result):
            return
        SlowMaster.slowed = True
        end = time.perf_counter() + SLOW_SECONDS
        while time.perf_counter() < end:  # a slow master hook: job-class code, not the agent's
            pass


@register_job("test-hanging-setup")
class HangingSetup(Job):
    """A job class whose ``setup()`` never returns (job-class code the operator installed)."""

    default_aggregator = "count"

    def setup(self) -> None:
        threading.Event().wait()  # forever: only the admission's timeout gets the answer back

    def map(self, record: dict[str, Any]) -> list[tuple[str, int]]:
        return []


class LagSampler:
    """How late the event loop wakes up (every 10 ms), while running."""

    def __init__(self) -> None:
        self.lags: list[float] = []
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        while True:
            asked = time.monotonic()
            await asyncio.sleep(0.01)
            self.lags.append(time.monotonic() - asked - 0.01)

    def __enter__(self) -> LagSampler:
        self._task = asyncio.get_running_loop().create_task(self._run())
        return self

    def __exit__(self, *exc: Any) -> None:
        assert self._task is not None
        self._task.cancel()

    @property
    def worst(self) -> float:
        return max(self.lags, default=0.0)


def tree_events(agents: list[Any]) -> list[dict[str, int]]:
    keys = ("rejoins", "pruned", "join_failures")
    return [{k: a.trees.stats()["events"].get(k, 0) for k in keys} for a in agents]


async def test_slow_map_and_pathological_regex_never_block_the_loop() -> None:
    async with running_agents(4) as agents:
        e = math.floor(time.time()) + 2
        base = {"start_epoch": e, "allowed_lateness": 0.5}
        await agents[0].submit({**base, "creator": "t", "name": "wc", "job_class": "wordcount"})
        slow = {**base, "creator": "t", "name": "slow", "job_class": "test-slow-marker"}
        await agents[0].submit(slow)
        probe = "SELECT line, count(*) AS n FROM ingest WHERE line RLIKE '(a+)+$' GROUP BY line"
        await agents[0].submit(spec_from_query("probe", "t", probe, **base))
        await wait_for(
            lambda: all({"wc", "slow", "probe"} <= set(a.runtimes) for a in agents),
            20,
            "every job on every agent",
        )
        await asyncio.sleep(0)
        texts = ["red blue", "blue green green"]  # no line ends in "a": the probe skips them
        hostile = ["a" * 24 + "b"] * 4 + ["a" * 30, MARKER]
        before = tree_events(agents)
        client = ApiClient(agents[0].api.url, agents[0].config.api_token, timeout=30.0)
        async with StatusWatch(agents[0].api.url, agents[0].config.api_token) as watch:
            with LagSampler() as lag:
                # the hostile lines reach agent 0 through its HTTP ingest endpoint (in a thread:
                # the client is synchronous and the agents share this loop)
                reply = await asyncio.to_thread(
                    client.ingest, "ingest", lines(e + 0.1, hostile + texts)
                )
                assert reply["accepted"] == len(hostile) + len(texts)
                for a in agents[1:]:
                    await a.ingest("ingest", lines(e + 0.2, texts))
                for a in agents:  # a record past the epoch and its lateness closes epoch e
                    await a.ingest("ingest", lines(e + 3.0, ["later"]))
                # every agent's texts, and agent 0's hostile lines as wordcount splits them
                want = word_counts(texts, 4) + Counter(
                    {"a" * 24 + "b": 4, "a" * 30: 1, "slow": 1, "marker": 1}
                )
                await wait_for(
                    lambda: _result_is(agents[1], "wc", e, want), 30, "wordcount's exact epoch"
                )
                await wait_for(
                    lambda: _result_is(agents[2], "probe", e, Counter({"a" * 30: 1})),
                    30,
                    "the RLIKE probe's exact count",
                )
                slow_want = Counter(
                    {t: 4 for t in texts} | {h: c for h, c in Counter(hostile).items()}
                )
                await wait_for(
                    lambda: _result_is(agents[3], "slow", e, slow_want), 30, "the slow job's epoch"
                )
        print(
            f"\nloop lag: worst {lag.worst * 1000:.1f} ms over {len(lag.lags)} samples; "
            f"agent 0's sampler max {agents[0].loop_lag.stats()['max_ms']} ms; "
            f"status worst {watch.worst * 1000:.1f} ms over {len(watch.latencies)} polls"
        )
        watch.assert_responsive()
        assert lag.worst < LAG_BOUND, f"the event loop was held {lag.worst:.3f} s"
        assert tree_events(agents) == before, (before, tree_events(agents))
        assert all(a.runtimes["slow"].pipeline.cpu_status()["backlog_records"] == 0 for a in agents)


async def test_a_slow_master_hook_never_blocks_the_loop() -> None:
    """Master-side job-class code (``on_epoch_result`` here; ``feedback_for``, ``on_query``,
    ``result_rows``, ``on_timer``, ``on_recv`` alike) runs on the record thread when it is a
    plain function: a slow one delays that job, never the agent's API or heartbeats."""
    SlowMaster.slowed = False
    async with running_agents(2) as agents:
        e = math.floor(time.time()) + 2
        spec = {"start_epoch": e, "allowed_lateness": 0.5, "creator": "t", "name": "sm"}
        await agents[0].submit({**spec, "job_class": "test-slow-master"})
        await wait_for(lambda: all("sm" in a.runtimes for a in agents), 20, "the job everywhere")
        texts = ["x", "y", "y"]
        before = tree_events(agents)
        async with StatusWatch(agents[0].api.url, agents[0].config.api_token) as watch:
            with LagSampler() as lag:
                for a in agents:
                    await a.ingest("ingest", lines(e + 0.1, texts))
                    await a.ingest("ingest", lines(e + 3.0, ["later"]))
                want = Counter({"x": 2, "y": 4})
                await wait_for(lambda: _result_is(agents[1], "sm", e, want), 30, "the exact epoch")
                # the hook of epoch e (the first with data) busy-loops while we keep sampling
                await wait_for(lambda: SlowMaster.slowed, 30, "the slow hook to start")
                deadline = time.monotonic() + SLOW_SECONDS + 0.5
                while time.monotonic() < deadline:
                    await asyncio.sleep(0.05)
        watch.assert_responsive()
        assert lag.worst < LAG_BOUND, f"the event loop was held {lag.worst:.3f} s"
        assert tree_events(agents) == before, (before, tree_events(agents))


async def test_a_setup_that_never_returns_is_refused_and_the_loop_goes_on() -> None:
    """Admission dry-runs the job class's ``setup()`` off the loop, within
    ``admission_timeout``: a class that hangs there gets a 400 naming ``spec``, reaches no
    agent, and the API answers throughout."""
    quick = RuntimeTunables(admission_timeout=1.0)
    async with running_agents(1, runtime=quick) as agents:
        client = ApiClient(agents[0].api.url, agents[0].config.api_token, timeout=30.0)
        spec = {"name": "hang", "creator": "t", "job_class": "test-hanging-setup"}
        async with StatusWatch(agents[0].api.url, agents[0].config.api_token) as watch:
            with (
                LagSampler() as lag,
                pytest.raises(ApiError) as info,
            ):
                await asyncio.to_thread(client.submit, spec)
        assert info.value.status == 400 and info.value.field == "spec"
        assert "did not finish" in info.value.message
        assert "hang" not in agents[0].runtimes and agents[0].table.get("hang") is None
        assert agents[0].counters.get("admission_timeouts") == 1
        watch.assert_responsive()
        assert lag.worst < LAG_BOUND, f"the event loop was held {lag.worst:.3f} s"


async def test_a_pattern_re2_cannot_run_is_a_400_at_submission() -> None:
    async with running_agents(1) as agents:
        client = ApiClient(agents[0].api.url, agents[0].config.api_token)
        query = r"SELECT count(*) AS n FROM ingest WHERE line RLIKE '(a+)\1'"
        with pytest.raises(ApiError) as info:
            spec = {
                "name": "backref",
                "creator": "t",
                "job_class": "ql",
                "params": {"query": query},
            }
            await asyncio.to_thread(client.submit, spec)
        assert info.value.status == 400
        assert "params.query" in info.value.message and "cannot run on RE2" in info.value.message
        assert "backref" not in agents[0].runtimes


async def _result_is(agent: Any, job: str, epoch: int, want: Counter) -> bool:
    got = await complete_result(agent, job, epoch)
    return got is not None and +got == want
