"""EMIT FINAL / EMIT CHANGES over real sockets: three in-process agents on loopback, a QL job
whose epochs turn tentative while one agent's part of the job is crashed, then partial when
it is retired, then final again.

Under ``EMIT FINAL`` the results API (no epoch: the newest final one; ``?epoch=E`` of a
tentative epoch: 409 naming its state) and the results stream never show a tentative version,
and the stream shows the epochs that lacked the crashed agent once they are partial; under
``emit=changes`` the stream shows every version, the tentative ones flagged with what they
lack, then their partial versions. Every event matches the document's Results schema, the
streams end with an ``end`` event when the job stops, and ``elf results --follow`` (a real
process) prints one JSON line per version and exits 0 then. The stream's bounds and 4xx.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import aiohttp
import jsonschema
import orjson
import pytest
from agent_helpers import lines, master_knowing_every_origin, running_agents, wait_for

from agent.errors import NotFound, Unavailable
from agent.jobs.ql_job import spec_from_query
from agent.runtime.host.agent import Agent
from agent.runtime.ops import results_stream

JOB = "emitted"
QUERY = "SELECT line, count(*) AS n FROM * GROUP BY line EMIT FINAL"
OPENAPI = Path(__file__).parents[3] / "agent" / "runtime" / "ops" / "openapi.json"
ROOT = Path(__file__).parents[3]


def check_contract(result: dict[str, Any]) -> None:
    doc = json.loads(OPENAPI.read_text())
    schema = {**doc["components"]["schemas"]["Results"], "components": doc["components"]}
    jsonschema.validate({k: v for k, v in result.items() if k not in ("event", "cursor")}, schema)


async def get(agent: Agent, path: str, token: str | None = None) -> tuple[int, Any]:
    headers = {"Authorization": f"Bearer {token or agent.config.api_token}"}
    async with aiohttp.ClientSession() as s, s.get(agent.api.url + path, headers=headers) as r:
        return r.status, orjson.loads(await r.read())


async def post(agent: Agent, path: str, body: Any) -> tuple[int, Any]:
    headers = {"Authorization": f"Bearer {agent.config.api_token}"}
    async with (
        aiohttp.ClientSession() as s,
        s.post(agent.api.url + path, headers=headers, data=orjson.dumps(body)) as r,
    ):
        return r.status, orjson.loads(await r.read())


class Feeder:
    """Every live agent ingests a line named after it every 0.1 s, event time now; ``sent``
    is the independent reference: epoch → Counter of the lines sent into it."""

    def __init__(self, agents: list[Agent]) -> None:
        self.live = {i: a for i, a in enumerate(agents)}
        self.sent: dict[int, Counter[str]] = {}
        self.task = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        while True:
            for i, a in list(self.live.items()):
                ts = time.time()
                await a.ingest("ingest", lines(ts, [f"agent{i}"]))
                self.sent.setdefault(int(ts), Counter())[f"agent{i}"] += 1
            await asyncio.sleep(0.1)  # the input's pace, not a synchronisation

    async def stop(self) -> None:
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task


class Stream:
    """A results stream read in the background: its events, in order."""

    def __init__(self, agent: Agent, query: str = "") -> None:
        self.events: list[dict[str, Any]] = []
        self.status = 0
        self.task = asyncio.ensure_future(self._read(agent, query))

    async def _read(self, agent: Agent, query: str) -> None:
        headers = {"Authorization": f"Bearer {agent.config.api_token}"}
        url = f"{agent.api.url}/api/v1/jobs/{JOB}/results/stream{query}"
        async with aiohttp.ClientSession() as s, s.get(url, headers=headers) as r:
            self.status = r.status
            assert r.headers["Content-Type"].startswith("application/x-ndjson")
            async for line in r.content:
                if line.strip():
                    self.events.append(orjson.loads(line))

    def results(self) -> list[dict[str, Any]]:
        return [e for e in self.events if e["event"] == "result"]


async def newest(agent: Agent, emit: str | None = None) -> dict[str, Any] | None:
    """The results API's newest epoch (None while there is none)."""
    try:
        return await agent.results(JOB, None, emit)
    except (NotFound, Unavailable):
        return None


async def lacking_epoch(agent: Agent, origin: int) -> int | None:
    """The newest epoch (emit=changes) if it lacks ``origin``."""
    res = await newest(agent, "changes")
    return int(res["epoch"]) if res is not None and f"{origin:x}" in res["lacking"] else None


async def test_final_never_shows_a_tentative_version_and_changes_shows_each_flagged() -> None:
    async with running_agents(3) as agents:
        await agents[0].submit(spec_from_query(JOB, "t", QUERY))
        await wait_for(lambda: all(JOB in a.runtimes for a in agents), 10, "the job everywhere")
        feeder = Feeder(agents)
        master, (other, victim) = await master_knowing_every_origin(agents, JOB)
        # the job's emit is the query's: the results API answers final epochs only
        first = await wait_for(lambda: newest(master), 20, "a final epoch")
        assert first["emit"] == "final" and first["state"] == "final"
        final_stream, changes_stream = Stream(other), Stream(other, "?emit=changes")
        await wait_for(lambda: final_stream.results(), 20, "the final stream's first event")

        victim_index = agents.index(victim)
        del feeder.live[victim_index]
        await victim.runtimes[JOB].stop(graceful=False)  # a kill -9 of its part of the job
        gone = victim.overlay.id
        lacking = await wait_for(lambda: lacking_epoch(master, gone), 30, "a tentative epoch")
        # FINAL: no epoch is the newest final one, older than the tentative one
        for _ in range(5):
            status, body = await get(other, f"/api/v1/jobs/{JOB}/results")
            assert status == 200 and body["state"] != "tentative" and body["epoch"] < lacking
        status, body = await get(other, f"/api/v1/jobs/{JOB}/results?epoch={lacking}")
        assert status == 409 and body["state"] == "tentative" and body["epoch"] == lacking
        assert body["lacking"] == [f"{gone:x}"] and "not final" in body["error"]
        status, body = await get(other, f"/api/v1/jobs/{JOB}/results?epoch={lacking}&emit=changes")
        assert status == 200 and body["state"] == "tentative" and body["emit"] == "changes"
        await wait_for(
            lambda: any(
                r["epoch"] == lacking and r["state"] == "tentative"
                for r in changes_stream.results()
            ),
            20,
            "the tentative version on the changes stream",
        )

        status, reply = await post(other, f"/api/v1/jobs/{JOB}/retire", {"origin": f"{gone:x}"})
        assert status == 200 and reply["complete"], reply
        from_epoch = reply["masters"][0]["from_epoch"]
        # the epochs that lacked it are partial (their last version), later ones final again
        await wait_for(
            lambda: any(
                r["epoch"] == lacking and r["state"] == "partial" for r in final_stream.results()
            ),
            20,
            "the partial epoch on the final stream",
        )
        await wait_for(
            lambda: any(
                r["epoch"] >= from_epoch and r["state"] == "final" for r in final_stream.results()
            ),
            30,
            "a final epoch after the retirement on the final stream",
        )
        await wait_for(
            lambda: any(
                r["epoch"] == lacking and r["state"] == "partial" for r in changes_stream.results()
            ),
            20,
            "the partial version on the changes stream",
        )

        # elf results --follow, a real process, follows until the job stops
        env = {**os.environ, "ELF_TOKEN": other.config.api_token, "PYTHONPATH": str(ROOT)}
        cli = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "agent.cli", "results", JOB, "--follow", "--emit", "changes",
            "--api", other.api.url, env=env, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        assert cli.stdout is not None
        first_line = await asyncio.wait_for(cli.stdout.readline(), 30)
        printed = json.loads(first_line)
        assert printed["event"] == "result" and printed["cursor"].startswith(f"{printed['epoch']}:")

        status, _ = await get(other, f"/api/v1/jobs/{JOB}/results/stream?after=x:1")
        assert status == 400
        await feeder.stop()
        await agents[0].stop_job(JOB)
        await asyncio.wait_for(asyncio.gather(final_stream.task, changes_stream.task), 20)
        out, err = await asyncio.wait_for(cli.communicate(), 30)
        assert cli.returncode == 0, err.decode()
        assert "stream ended" in err.decode() and "epoch" in err.decode()
        assert all(json.loads(x)["event"] == "result" for x in out.splitlines() if x.strip())

    for stream in (final_stream, changes_stream):
        assert stream.status == 200
        assert stream.events[-1]["event"] == "end"
        for r in stream.results():
            check_contract(r)
            assert r["cursor"] == f"{r['epoch']}:{r['revision']}"
            resume_epoch, _, resume_revision = r["resume"].partition(":")
            assert int(resume_epoch) <= r["epoch"] and int(resume_revision) >= 0
    finals = final_stream.results()
    # exact or flagged: a final version holds exactly the lines sent into its epoch, a partial
    # one exactly those of the origins it covers (the crashed agent was fed no more)
    exact = 0
    for r in finals:
        got = Counter({row["line"]: row["n"] for row in r["rows"]})
        want = feeder.sent.get(r["epoch"], Counter())
        if r["state"] == "partial":  # lacking the crashed agent: every line but its own
            want = Counter({k: v for k, v in want.items() if k != f"agent{victim_index}"})
        assert got == want, (r["epoch"], r["state"], got, want)
        exact += got.total() > 0
    assert exact >= 2
    assert all(r["state"] != "tentative" for r in finals), "FINAL showed a tentative version"
    assert all(r["emit"] == "final" for r in finals)
    changes = changes_stream.results()
    of_lacking = [r for r in changes if r["epoch"] == lacking]
    assert of_lacking[0]["state"] == "tentative"
    assert of_lacking[-1]["state"] == "partial"
    assert all(r["lacking"] == [f"{gone:x}"] for r in of_lacking)
    assert [r["revision"] for r in of_lacking] == sorted({r["revision"] for r in of_lacking})
    # each epoch's versions come once each, in order; epochs in order within a stream's view
    for events in (finals, changes):
        seen: dict[int, int] = {}
        for r in events:
            assert r["revision"] > seen.get(r["epoch"], 0)
            seen[r["epoch"]] = r["revision"]


async def test_the_stream_is_bounded_and_refuses_bad_requests(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(results_stream, "KEEPALIVE", 0.5)  # seconds of quiet, not 15
    async with running_agents(1) as agents:
        (agent,) = agents
        await agent.submit(spec_from_query(JOB, "t", "SELECT count(*) AS n FROM *"))
        await wait_for(lambda: JOB in agent.runtimes, 10, "the job")
        agent.result_streams.max_streams = 1
        held = Stream(agent)
        await wait_for(lambda: held.status == 200, 10, "the first stream")
        await wait_for(
            lambda: {"event": "keepalive"} in held.events, 10, "a keepalive on a quiet stream"
        )
        status, body = await get(agent, f"/api/v1/jobs/{JOB}/results/stream")
        assert status == 503 and "at most 1 results streams" in body["error"]
        assert agent.result_streams.stats() == {"streams": 1, "refused": 1}
        for query, field in (("?emit=sometimes", "emit"), ("?after=1:x", "after")):
            status, body = await get(agent, f"/api/v1/jobs/{JOB}/results/stream{query}")
            assert status == 400 and body.get("field") == field, body
        for query in ("", "?emit=final"):
            status, body = await get(agent, f"/api/v1/jobs/nope/results/stream{query}")
            assert status == 404 and "no running job named 'nope'" in body["error"]
        status, body = await get(agent, f"/api/v1/jobs/{JOB}/results/stream", token="wrong")
        assert status == 401
        # the job's emit changes at runtime: the results API follows it
        status, body = await post(agent, f"/api/v1/jobs/{JOB}/change", {"emit": "final"})
        assert status == 200, body
        await wait_for(lambda: agent.runtimes[JOB].queries.emit == "final", 10, "emit=final")
        status, body = await get(agent, f"/api/v1/jobs/{JOB}/results")
        assert status == 404 or body["emit"] == "final", body
        # and back with elf change --emit (a real process)
        env = {**os.environ, "ELF_TOKEN": agent.config.api_token, "PYTHONPATH": str(ROOT)}
        cli = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "agent.cli", "change", JOB, "--emit", "changes",
            "--api", agent.api.url, env=env, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        changed, err = await asyncio.wait_for(cli.communicate(), 30)
        assert cli.returncode == 0, err.decode()
        assert json.loads(changed)["job"] == JOB
        assert agent.runtimes[JOB].queries.emit == "changes"  # applied everywhere when it returns
        await agent.stop_job(JOB)
        await asyncio.wait_for(held.task, 20)
        assert held.events[-1] == {
            "event": "end",
            "reason": f"job {JOB!r} is not running here any more",
        }


async def test_final_over_two_trees_shows_each_epoch_whole_and_exact() -> None:
    """PARTITIONS 2: an epoch is shown once both trees' masters hold it final; its rows are
    the whole epoch (both key ranges), exact against the lines sent."""
    text = "SELECT line, count(*) AS n FROM * GROUP BY line PARTITIONS 2 EMIT FINAL"
    async with running_agents(3) as agents:
        await agents[0].submit(spec_from_query(JOB, "t", text))
        await wait_for(lambda: all(JOB in a.runtimes for a in agents), 10, "the job everywhere")
        feeder = Feeder(agents)
        stream = Stream(agents[1])
        await wait_for(lambda: len(stream.results()) >= 4, 30, "four final epochs")
        await feeder.stop()
        await agents[0].stop_job(JOB)
        await asyncio.wait_for(stream.task, 20)
    events = stream.results()
    assert stream.events[-1]["event"] == "end"
    assert [r["epoch"] for r in events] == sorted({r["epoch"] for r in events})
    for r in events:
        check_contract(r)
        assert r["state"] == "final" and r["complete"] and r["emit"] == "final"
        assert r["revision"] >= 2  # one version (at least) of each tree's part
    # the first event may be an epoch the feeder only began; every later one is whole
    for r in events[1:]:
        got = Counter({row["line"]: row["n"] for row in r["rows"]})
        assert got == feeder.sent.get(r["epoch"], Counter()), r["epoch"]
