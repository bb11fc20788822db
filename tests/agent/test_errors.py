"""The agent's error hierarchy: one root (``AgentError``); only ``StatusError``s are answers
with an HTTP status. The domain errors keep their built-in bases (existing ``except
ValueError``/``LookupError`` still catch them) and, escaping to the API, are answered like any
other bug: 500 ``internal error``, exactly as before they joined the hierarchy."""

from __future__ import annotations

from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from agent.errors import (
    AgentError,
    BadRequest,
    ConfigError,
    Conflict,
    NotFound,
    StatusError,
    Unauthorized,
    Unavailable,
)
from agent.ingest.records import RecordError
from agent.jobs.job import UnknownJobClass, job_class
from agent.jobs.spec import JobSpecError
from agent.ql import QLError, compile_query
from agent.runtime.ops.http_api import HttpApi

STATUS = {
    BadRequest: 400,
    Unauthorized: 401,
    NotFound: 404,
    Conflict: 409,
    Unavailable: 503,
    ConfigError: 400,
    StatusError: 500,
}
DOMAIN = {
    RecordError("bad_json", "not valid JSON"): ValueError,
    JobSpecError("trees", "must be an integer"): ValueError,
    UnknownJobClass("unknown job class 'x'"): LookupError,
    QLError(1, 2, "expected FROM, got end of query"): ValueError,
}


def test_status_errors_keep_their_statuses() -> None:
    for cls, status in STATUS.items():
        assert issubclass(cls, StatusError) and issubclass(cls, AgentError)
        assert cls.status == status
    assert issubclass(BadRequest, ValueError) and issubclass(NotFound, LookupError)


def test_domain_errors_share_the_root_and_keep_their_bases() -> None:
    for exc, base in DOMAIN.items():
        assert isinstance(exc, AgentError) and isinstance(exc, base)
        assert not isinstance(exc, StatusError) and not hasattr(exc, "status")
    with pytest.raises(LookupError):
        job_class("no-such-job-class")
    with pytest.raises(ValueError):
        compile_query("SELECT")


class _Raising:
    """An AgentFacade whose ``local_query`` raises the exception under test."""

    def __init__(self) -> None:
        self.exc: Exception = RuntimeError()

    async def local_query(self, name: str, params: dict[str, str]) -> dict[str, Any]:
        raise self.exc


async def test_the_api_maps_only_status_errors_to_their_status() -> None:
    agent = _Raising()
    api = HttpApi(agent, "token")  # type: ignore[arg-type]  # only local_query is called
    async with TestClient(TestServer(api.app)) as client:

        async def answer(exc: Exception) -> tuple[int, dict[str, Any]]:
            agent.exc = exc
            resp = await client.get(
                "/api/v1/jobs/j/local", headers={"Authorization": "Bearer token"}
            )
            return resp.status, await resp.json()

        for cls, status in STATUS.items():
            assert await answer(cls("what was wrong")) == (status, {"error": "what was wrong"})
        for exc in DOMAIN:
            want = {"error": f"internal error: {type(exc).__name__}: {exc}"}
            assert await answer(exc) == (500, want)
    assert api.rejected["internal_error"] == len(DOMAIN)
    assert api.rejected["BadRequest"] == 1
