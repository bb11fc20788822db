"""A hypothesis fuzzer over the dashboard's routes on a real in-process agent (the harness of
``test_http_api_fuzz.py``): the query action with bodies of any shape near and far from valid,
and the static files with any name. The contract on every answer: never a 5xx, every error a
4xx with a non-empty ``"error"``; a body the route accepts is a submitted ``ql`` job (201);
the agent still answers ``/status`` afterwards."""

from __future__ import annotations

import urllib.parse
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_http_api_fuzz import FUZZ, SEEN, AgentThread, _dumps, check, json_values, submit_job

pytestmark = pytest.mark.timeout(300)
QUERY_FIELDS = ["name", "query", "epoch_seconds"]
QUERIES = [
    "SELECT line, count(*) AS n FROM ingest GROUP BY line",
    "SELECT count(*) AS n FROM ingest WHERE line LIKE 'a%'",
    "SELECT line FROM",
    "",
]


@pytest.fixture(scope="module")
def agent() -> Iterator[AgentThread]:
    with AgentThread(submit_job, name="dashboard-fuzz-agent") as runner:
        yield runner


@st.composite
def query_bodies(draw: st.DrawFn) -> dict[str, Any]:
    body: dict[str, Any] = {
        "name": f"dq-{draw(st.integers(0, 10**9))}",
        "query": draw(st.sampled_from(QUERIES) | st.text(max_size=60)),
    }
    if draw(st.booleans()):
        body["epoch_seconds"] = draw(st.sampled_from([1, 2.5, 0, -1, 1e-9, 1e9, "1"]) | json_values)
    body.update(
        draw(st.dictionaries(st.sampled_from([*QUERY_FIELDS, "extra"]), json_values, max_size=1))
    )
    return body


bodies = st.one_of(
    query_bodies().map(_dumps),
    json_values.map(_dumps),
    st.binary(max_size=100),
)


@FUZZ
@given(body=bodies)
def test_query_action_answers_4xx_or_submits(agent: AgentThread, body: bytes) -> None:
    status, answer = agent.call("POST", "/api/v1/dashboard/query", body)
    check(status, answer, f"query {body[:80]!r}")
    if status == 201:
        assert orjson.loads(answer)["state"] == "running"
    else:
        assert status in (400, 409), (status, answer[:200])


@FUZZ
@given(name=st.text(min_size=1, max_size=40))
def test_static_files_only_from_the_allow_list(agent: AgentThread, name: str) -> None:
    status, answer = agent.call("GET", "/dashboard/" + urllib.parse.quote(name, safe=""))
    allowed = {
        "index.html",
        "dashboard.js",
        "dashboard.css",
        "uPlot.iife.min.js",
        "uPlot.min.css",
        "uPlot.LICENSE",
    }
    if name in allowed:
        assert status == 200
    else:
        check(status, answer, f"static {name!r}")
        assert status in (401, 404), (name, status)


def test_agent_still_answers_and_the_fuzz_reached_both_outcomes(agent: AgentThread) -> None:
    status, _ = agent.call("GET", "/api/v1/status")
    assert status == 200
    assert SEEN[("query", 201)] and SEEN[("query", 400)], dict(SEEN)
