"""A hypothesis fuzzer over the user HTTP API of a real in-process agent.

One agent (real overlay, data plane and API on loopback) runs in a background thread's event
loop with a WordCount job ``fz``. Every endpoint of ``agent/runtime/ops/http_api.py`` is called with
a valid token and hostile input — random JSON of any shape, wrong types, huge and non-finite
numbers, deep nesting, invalid UTF-8, random names and query strings in the path — over raw
``http.client`` (so any bytes can be sent). The contract checked on every answer: never a 5xx;
every error is a 4xx whose JSON body carries a non-empty ``"error"`` message; and the agent
still answers ``/status`` afterwards.
"""

from __future__ import annotations

import http.client
import json
import urllib.parse
from collections import Counter
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from live_agent import LiveAgent

JOB = "fz"
pytestmark = pytest.mark.timeout(300)
FUZZ = settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


async def submit_job(agent: Any) -> None:
    await agent.submit({"name": JOB, "creator": "fuzz", "job_class": "wordcount"})


class AgentThread(LiveAgent):
    """An in-process agent on its own event loop, reachable over loopback HTTP."""

    def call(self, method: str, path: str, body: bytes | None = None) -> tuple[int, bytes]:
        api = self.agent.api
        conn = http.client.HTTPConnection(api.host, api.port, timeout=30)
        try:
            headers = {"Authorization": f"Bearer {self.token}"}
            if body is not None:
                headers["Content-Type"] = "application/json"
            conn.request(method, path, body=body, headers=headers)
            resp = conn.getresponse()
            return resp.status, resp.read()
        finally:
            conn.close()


@pytest.fixture(scope="module")
def agent() -> Iterator[AgentThread]:
    with AgentThread(submit_job, name="fuzz-agent") as runner:
        yield runner


SEEN: Counter[tuple[str, int]] = Counter()  # (endpoint, status): the fuzz reached past parsing


def check(status: int, body: bytes, what: str) -> None:
    """The API's error contract for one answer."""
    SEEN[(what.split(" ")[0], status)] += 1
    assert status < 500, f"{what}: {status} {body[:300]!r}"
    if status >= 400:
        answer = orjson.loads(body)
        assert isinstance(answer, dict), f"{what}: error body {answer!r}"
        assert isinstance(answer.get("error"), str) and answer["error"], f"{what}: {answer!r}"


# ---- strategies --------------------------------------------------------------------------

numbers = st.one_of(
    st.integers(),
    st.integers(min_value=2**63 - 2, max_value=2**200),
    st.integers(max_value=-(2**63) + 2, min_value=-(2**200)),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from([0, -1, 1e-300, 1e308, -1e308, 2**64, 10**30]),
)
scalars = st.one_of(st.none(), st.booleans(), numbers, st.text(max_size=40))
json_values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=5), st.dictionaries(st.text(max_size=12), inner, max_size=5)
    ),
    max_leaves=25,
)

SPEC_FIELDS = [
    "name",
    "creator",
    "job_class",
    "inputs",
    "epoch_seconds",
    "params",
    "query",
    "trees",
    "start_epoch",
    "allowed_lateness",
    "aggregator",
    "aggregator_params",
    "placement",
    "top_k",
    "batch",
    "model",
    "windows",
    "iterative",
    "idle_advance",
]
CHANGE_FIELDS = ["params", "query", "top_k", "epoch_seconds", "empty", "batch", "filter"]


def shaped(keys: list[str]) -> st.SearchStrategy[dict[str, Any]]:
    """Objects with the endpoint's own field names but values of any type."""
    return st.dictionaries(st.sampled_from(keys), json_values, min_size=1, max_size=6)


@st.composite
def near_valid_specs(draw: st.DrawFn) -> dict[str, Any]:
    """A valid WordCount spec with a few fields replaced by values of any type."""
    spec: dict[str, Any] = {
        "name": f"fz-{draw(st.integers(0, 10**6))}",
        "creator": "fuzz",
        "job_class": "wordcount",
    }
    spec.update(draw(st.dictionaries(st.sampled_from(SPEC_FIELDS[3:]), json_values, max_size=2)))
    return spec


def _dumps(value: Any) -> bytes:
    # json, not orjson: it writes integers of any size and NaN/Infinity literals
    return json.dumps(value, allow_nan=True).encode()


def deep(depth: int) -> bytes:
    return b'{"a":' * depth + b"1" + b"}" * depth


bodies = st.one_of(
    json_values.map(_dumps),
    shaped(SPEC_FIELDS).map(_dumps),
    near_valid_specs().map(_dumps),
    shaped(CHANGE_FIELDS).map(_dumps),
    st.binary(max_size=200),  # mostly invalid UTF-8 / not JSON
    st.integers(min_value=1, max_value=5000).map(deep),
    st.integers(min_value=1, max_value=5000).map(lambda n: b"[" * n),
    st.sampled_from([b"", b"null", b"NaN", b'{"a": Infinity}', b"\xff\xfe{}", b'{"\xc3":1}']),
)
names = st.one_of(st.just(JOB), st.text(min_size=1, max_size=30))
query_values = st.one_of(st.text(max_size=30), numbers.map(str))


def name_path(name: str) -> str:
    return urllib.parse.quote(name, safe="")


def qs(params: dict[str, str]) -> str:
    return "?" + urllib.parse.urlencode(params) if params else ""


# ---- the endpoints -----------------------------------------------------------------------


@FUZZ
@given(body=bodies)
def test_submit(agent: AgentThread, body: bytes) -> None:
    status, answer = agent.call("POST", "/api/v1/jobs", body)
    check(status, answer, f"submit {body[:80]!r}")
    if status == 201:  # a random spec that happens to be valid: do not let it run on
        name = json.loads(body)["name"]
        check(*agent.call("DELETE", f"/api/v1/jobs/{name_path(name)}"), "cleanup")


@FUZZ
@given(name=names, body=bodies)
# Random bodies pass the change schema only now and then (a CI run drew none that did): these
# always reach the handlers, an unknown job's and the fuzzed job's.
@example(name="no-such-job", body=b'{"top_k": 3}')
@example(name=JOB, body=b'{"epoch_seconds": 2}')
def test_change(agent: AgentThread, name: str, body: bytes) -> None:
    status, answer = agent.call("POST", f"/api/v1/jobs/{name_path(name)}/change", body)
    check(status, answer, f"change {name!r} {body[:80]!r}")


@FUZZ
@given(name=names, body=bodies)
def test_query(agent: AgentThread, name: str, body: bytes) -> None:
    status, answer = agent.call("POST", f"/api/v1/jobs/{name_path(name)}/query", body)
    check(status, answer, f"query {name!r} {body[:80]!r}")


@FUZZ
@given(name=st.text(min_size=1, max_size=30).filter(lambda n: n != JOB))
def test_stop_unknown(agent: AgentThread, name: str) -> None:
    status, answer = agent.call("DELETE", f"/api/v1/jobs/{name_path(name)}")
    check(status, answer, f"DELETE {name!r}")


@FUZZ
@given(
    name=names,
    endpoint=st.sampled_from(["results", "local", "timings"]),
    params=st.dictionaries(st.sampled_from(["epoch", "k", "key", "word", ""]), query_values),
)
def test_reads(agent: AgentThread, name: str, endpoint: str, params: dict[str, str]) -> None:
    path = f"/api/v1/jobs/{name_path(name)}/{endpoint}{qs(params)}"
    status, answer = agent.call("GET", path)
    check(status, answer, f"GET {path}")


@FUZZ
@given(name=st.one_of(st.just("ingest"), st.text(min_size=1, max_size=20)), body=bodies)
def test_ingest(agent: AgentThread, name: str, body: bytes) -> None:
    status, answer = agent.call("POST", f"/api/v1/ingest/{name_path(name)}", body)
    check(status, answer, f"ingest {name!r} {body[:80]!r}")


@FUZZ
@given(
    method=st.sampled_from(["GET", "POST", "PUT", "DELETE", "PATCH"]),
    path=st.lists(st.text(max_size=12), min_size=1, max_size=5),
    body=st.one_of(st.none(), bodies),
)
def test_any_method_any_path(
    agent: AgentThread, method: str, path: list[str], body: bytes | None
) -> None:
    url = "/" + "/".join(name_path(part) for part in path)
    for prefix in ("", "/api/v1", "/api/v1/jobs"):
        status, answer = agent.call(method, prefix + url, body)
        check(status, answer, f"{method} {prefix + url}")


def test_the_agent_survived_the_fuzzing(agent: AgentThread) -> None:
    """After everything above: status answers, the fuzzed job still runs, and the fuzz got
    past the JSON parser and the schema (some submissions were valid, some changes reached the
    handlers)."""
    status, body = agent.call("GET", "/api/v1/status")
    assert status == 200 and JOB in orjson.loads(body)["jobs"]
    if SEEN:  # (this test run alone has nothing to look at)
        assert SEEN[("submit", 201)] > 0 and SEEN[("submit", 400)] > 0, SEEN
        # Changes are checked against the OpenAPI document first (a bad body is a 400 even
        # for an unknown job); some got past it to the handlers (404 unknown job, 409 a
        # fixed field at the master, 200 applied).
        changes = {s for (what, s) in SEEN if what == "change"}
        assert 400 in changes and changes & {200, 404, 409}, SEEN
