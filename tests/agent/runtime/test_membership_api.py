"""Retiring origins and leaving over real sockets (agent/runtime/ops/membership_api.py): the peer
route a master answers, the operator's routes forwarding to the job's masters from an agent
that is not one, their 4xx on malformed or unknown input, and ``POST /api/v1/leave`` answering
202 before the agent stops. Against the real runtime: the origins retired are real agents
that read the job's input, and a retirement's effect is read back from the master (its
``membership`` status, the epochs that become partial)."""

from __future__ import annotations

import math
import time
from typing import Any

import aiohttp
import orjson
import pytest
from agent_helpers import lines, master_knowing_every_origin, running_agents, wait_for

from agent.errors import NotFound, Unavailable
from agent.runtime.host.agent import Agent
from agent.runtime.ops.membership_api import RETIRE_PATH, agent_outcome, job_outcome
from srt import DataPlaneError

JOB = "wc"


async def post(agent: Agent, path: str, body: Any, *, raw: bytes | None = None) -> tuple[int, Any]:
    headers = {"Authorization": f"Bearer {agent.config.api_token}"}
    data = raw if raw is not None else orjson.dumps(body)
    async with (
        aiohttp.ClientSession() as s,
        s.post(agent.api.url + path, headers=headers, data=data) as r,
    ):
        return r.status, orjson.loads(await r.read())


async def a_job_with_members(agents: list[Agent]) -> tuple[Agent, list[Agent]]:
    """Submit the job, feed it, and return (its master, the other agents) once the master
    knows every agent as an origin (each reads the job's ``ingest`` input and announces
    itself)."""
    await agents[0].submit({"name": JOB, "creator": "t", "job_class": "wordcount"})
    e = math.floor(time.time())
    for a in agents:
        await a.ingest("ingest", lines(e, ["a b"]))
    return await master_knowing_every_origin(agents, JOB)


async def crash_the_job_on(agent: Agent) -> int:
    """Stop ``agent``'s part of the job without a graceful leave (what a kill -9 leaves the
    master with: an origin that stops contributing and never says so); returns its id."""
    await agent.runtimes[JOB].stop(graceful=False)
    return agent.overlay.id


def retired(master: Agent) -> dict[str, dict[str, Any]]:
    return {r["origin"]: r for r in master.status()["jobs"][JOB]["membership"]["retired"]}


async def test_an_operator_retires_an_origin_through_an_agent_that_is_not_the_master() -> None:
    async with running_agents(3) as agents:
        master, (other, victim) = await a_job_with_members(agents)
        gone = await crash_the_job_on(victim)
        # an epoch after the crash: tentative, naming it (absent, not gone)
        lacking = await wait_for(
            lambda: lacking_epoch(master, gone), 30, "an epoch stored without the victim"
        )
        before = await master.results(JOB, lacking)
        assert before["state"] == "tentative" and before["lacking"] == [f"{gone:x}"]

        status, reply = await post(
            other, f"/api/v1/jobs/{JOB}/retire", {"origin": f"{gone:x}", "why": "disk died"}
        )
        assert status == 200, reply
        assert reply["job"] == JOB and reply["origin"] == f"{gone:040x}" and reply["complete"]
        assert [m["master"] for m in reply["masters"]] == [master.data_url]
        answer = reply["masters"][0]
        assert answer["status"] == 200 and answer["partial_epochs"] >= 1, answer
        assert answer["from_epoch"] > lacking
        entry = retired(master)[f"{gone:x}"]
        assert (entry["why"], entry["from_epoch"]) == ("disk died", answer["from_epoch"])
        # the epoch that lacked it is partial for good, naming it
        after = await master.results(JOB, lacking)
        assert (after["state"], after["partial"], after["tentative"]) == ("partial", True, False)
        assert after["lacking"] == [f"{gone:x}"] and after["version"] > before["version"]
        # later epochs no longer wait for it
        await wait_for(
            lambda: final_epoch_from(master, answer["from_epoch"]), 30, "a final epoch after it"
        )

        # every running job: the same master asked once more (already retired: nothing new);
        # "why" defaults to operator only for a new retirement
        status, reply = await post(master, "/api/v1/retire", {"agent": f"{gone:040x}"})
        assert status == 200, reply
        assert reply["retired"] == [JOB] and reply["complete"] and reply["failed"] == {}
        assert reply["jobs"][JOB]["masters"][0]["partial_epochs"] == 0
        assert retired(master)[f"{gone:x}"]["why"] == "disk died"

        # not a member: 404 from the job route and from the every-job route
        stranger = f"{gone ^ 1:x}"
        status, reply = await post(other, f"/api/v1/jobs/{JOB}/retire", {"origin": stranger})
        assert status == 404 and "not a member" in reply["error"]
        status, reply = await post(other, "/api/v1/retire", {"agent": stranger})
        assert status == 404 and "no running job" in reply["error"]
        status, reply = await post(other, "/api/v1/jobs/nope/retire", {"origin": stranger})
        assert status == 404 and "nope" in reply["error"]
        assert list(retired(master)) == [f"{gone:x}"]


async def lacking_epoch(master: Agent, origin: int) -> int | None:
    """The newest stored epoch if it lacks ``origin`` (None otherwise / none yet), once its
    barrier gave up waiting (a deadline's preview is not what a retirement turns partial)."""
    try:
        res = await master.results(JOB, None)
    except (NotFound, Unavailable):
        return None
    stored = f"{origin:x}" in res["lacking"] and not res.get("preview")
    return int(res["epoch"]) if stored else None


async def final_epoch_from(master: Agent, epoch: int) -> bool:
    try:
        res = await master.results(JOB, None)
    except (NotFound, Unavailable):
        return False
    return int(res["epoch"]) >= epoch and res["state"] == "final" and res["lacking"] == []


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        (f"/api/v1/jobs/{JOB}/retire", {"origin": "xyz"}, "origin"),
        (f"/api/v1/jobs/{JOB}/retire", {"origin": "a" * 41}, "origin"),
        (f"/api/v1/jobs/{JOB}/retire", {}, "origin"),
        (f"/api/v1/jobs/{JOB}/retire", {"origin": "ab", "extra": 1}, "extra"),
        (f"/api/v1/jobs/{JOB}/retire", {"origin": "ab", "why": "w" * 201}, "why"),
        ("/api/v1/retire", {"agent": 12}, "agent"),
        ("/api/v1/retire", ["ab"], None),
    ],
)
async def test_malformed_retirements_are_400_naming_the_field(
    path: str, body: Any, field: str | None
) -> None:
    async with running_agents(1) as (agent,):
        await agent.submit({"name": JOB, "creator": "t", "job_class": "wordcount"})
        status, reply = await post(agent, path, body)
        assert status == 400, reply
        assert reply.get("field") == field
        status, reply = await post(agent, path, None, raw=b"{not json")
        assert status == 400 and "JSON" in reply["error"]


async def test_the_peer_route_answers_as_master_and_refuses_the_rest() -> None:
    async with running_agents(3) as agents:
        master, (other, victim) = await a_job_with_members(agents)
        gone = await crash_the_job_on(victim)
        peer = other.client  # authenticated with the cluster secret, like every peer
        body = {"job": JOB, "origin": f"{gone:x}", "why": "test"}
        reply = await peer.post_json(master.data_url, RETIRE_PATH, body)
        assert set(reply) == {"origin", "from_epoch", "partial_epochs"}, reply
        assert int(reply["origin"], 16) == gone and reply["from_epoch"] > 0
        assert retired(master)[f"{gone:x}"]["from_epoch"] == reply["from_epoch"]
        refusals = [
            (other.data_url, body, 503, "not_master"),
            (master.data_url, dict(body, job="nope"), 404, "unknown_job"),
            (master.data_url, dict(body, origin=f"{gone ^ 1:x}"), 404, "not_a_member"),
            (master.data_url, dict(body, origin="zz"), 400, "bad_body"),
            (master.data_url, {"origin": "ab"}, 400, "bad_body"),
            (master.data_url, dict(body, why=5), 400, "bad_body"),
        ]
        for url, sent, code, reason in refusals:
            with pytest.raises(DataPlaneError) as caught:
                await peer.post_json(url, RETIRE_PATH, sent)
            assert (caught.value.status, caught.value.reason) == (code, reason), sent
        # without the cluster secret's signature the route is not reached
        async with (
            aiohttp.ClientSession() as s,
            s.post(master.data_url + RETIRE_PATH, data=orjson.dumps(body)) as r,
        ):
            assert r.status in (401, 403)


async def test_leave_answers_202_then_the_agent_stops() -> None:
    async with running_agents(2) as agents:
        leaver = agents[1]
        assert leaver.readiness()["started"]
        status, reply = await post(leaver, "/api/v1/leave", None, raw=b"")
        assert status == 202
        assert reply == {"leaving": True, "node_id": f"{leaver.overlay.id:040x}"}
        await wait_for(lambda: not leaver.readiness()["started"], 20, "the agent to stop")
        assert agents[0].readiness()["started"]  # the other logical agent keeps running


def test_a_job_retirement_is_complete_when_every_master_retired_it() -> None:
    done = {"master": "a", "status": 200, "from_epoch": 3, "partial_epochs": 1}
    refused = {"master": "b", "status": 503, "error": "gone"}
    assert job_outcome("j", 1, [done, done])["complete"]
    mixed = job_outcome("j", 1, [done, refused])
    assert not mixed["complete"] and mixed["masters"] == [done, refused]
    with pytest.raises(NotFound):
        job_outcome("j", 1, [{"master": "a", "status": 404, "error": "no"}])
    with pytest.raises(Unavailable):
        job_outcome("j", 1, [refused, {"master": "a", "status": 404, "error": "no"}])
    with pytest.raises(Unavailable):
        job_outcome("j", 1, [])


def test_an_agent_retirement_names_every_job() -> None:
    one = job_outcome("a", 1, [{"master": "m", "status": 200}])
    out = agent_outcome(1, {"a": one, "b": {"status": 404, "error": "no"}})
    assert (out["retired"], out["not_a_member"], out["failed"]) == (["a"], ["b"], {})
    assert out["complete"]
    failed = {"status": 503, "error": "down"}
    assert not agent_outcome(1, {"a": one, "c": failed})["complete"]
    with pytest.raises(NotFound):
        agent_outcome(1, {"b": {"status": 404, "error": "no"}})
    with pytest.raises(NotFound):
        agent_outcome(1, {})
    with pytest.raises(Unavailable):
        agent_outcome(1, {"c": failed})
