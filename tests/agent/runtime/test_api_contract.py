"""Property-based API test (schemathesis) against a live in-process agent on loopback.

Every operation of the OpenAPI document (``agent/runtime/openapi.json``) gets generated
requests, valid (positive) and invalid (negative) ones: the agent must never answer 5xx, every
answer must match the document (status code, content type, body schema), and a request that
violates the document must get a 4xx. Valid requests naming a job or an input are sent twice: as
generated and naming the job that runs (and the ``ingest`` input), so the handlers behind the
404 are exercised too. ``ELF_CONTRACT_EXAMPLES`` raises the bound and ``ELF_CONTRACT_RANDOM=1``
draws new requests (exploration, off CI). Bounded:
``MAX_EXAMPLES`` per operation and mode, well under a minute on two loaded cores.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Iterator
from typing import Any

import pytest
import requests
import schemathesis
from agent_helpers import lines
from hypothesis import HealthCheck, settings
from live_agent import LiveAgent
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_schema_conformance,
    status_code_conformance,
)

from agent.runtime.ops.openapi import DOCUMENT

MAX_EXAMPLES = int(os.environ.get("ELF_CONTRACT_EXAMPLES", "60"))
JOB = "contract"
VICTIM = "contract-stop"  # the job DELETE stops (JOB keeps running for the other routes)
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
    negative_data_rejection,
]

# ingest bodies are lines of text: sent as text/plain as they are (any value is a valid body)
schemathesis.serializer.alias("application/x-ndjson", "text/plain")
# the dashboard's event stream never ends by itself (tests/agent/runtime/test_dashboard.py
# reads it); leave stops the agent (tests/agent/runtime/test_membership_api.py checks it); a
# tap waits up to its timeout (60 s) for records: tests/agent/runtime/test_tap.py checks its
# replies against the document and its 400/401/404/429
schema = (
    schemathesis.openapi.from_dict(DOCUMENT)
    .exclude(path="/api/v1/dashboard/events")
    .exclude(path="/api/v1/leave")
    .exclude(path="/api/v1/jobs/{name}/tap")
)
schema.config.generation.update(
    modes=[GenerationMode.POSITIVE, GenerationMode.NEGATIVE],
    max_examples=MAX_EXAMPLES,
    deterministic=not os.environ.get(
        "ELF_CONTRACT_RANDOM"
    ),  # the same requests on every run: a CI failure reproduces locally
)


async def jobs_and_lines(agent: Any) -> None:
    """A running job (and the one DELETE stops) with some ingested lines."""
    e = math.floor(time.time())
    for name in (JOB, VICTIM):
        await agent.submit({"name": name, "creator": "t", "job_class": "wordcount"})
    await agent.ingest("ingest", lines(e, ["a b", "c"]))


@pytest.fixture(scope="module")
def live() -> Iterator[LiveAgent]:
    """One agent serving on loopback (schemathesis calls synchronously)."""
    with LiveAgent(jobs_and_lines) as agent:
        yield agent


@pytest.fixture(scope="module")
def session() -> Iterator[requests.Session]:
    with requests.Session() as s:
        yield s


@schema.parametrize()
@settings(
    max_examples=MAX_EXAMPLES,
    deadline=None,
    suppress_health_check=list(HealthCheck),
)
def test_the_api_keeps_its_contract(
    case: schemathesis.Case, live: LiveAgent, session: requests.Session
) -> None:
    headers = {"Authorization": f"Bearer {live.token}"}
    case.call_and_validate(
        base_url=live.url, session=session, headers=headers, checks=CHECKS, timeout=30
    )
    # the same request at the running job / the ingest input: past the 404, into the handlers
    params = case.path_parameters or {}
    known = {"name": VICTIM if case.method == "DELETE" else JOB, "input": "ingest"}
    mode = case.meta.generation.mode if case.meta is not None else None
    if mode == GenerationMode.POSITIVE and any(k in params for k in known):
        for key, name in known.items():
            if key in params:
                params[key] = name
        case.call_and_validate(
            base_url=live.url, session=session, headers=headers, checks=CHECKS, timeout=30
        )
