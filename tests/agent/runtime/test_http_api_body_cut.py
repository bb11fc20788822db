"""A request body cut off by the connection guard's ``body_timeout`` is the client's fault: the
API counts it as a 400 and logs nothing at ERROR (CI once saw aiohttp's bare
``RuntimeError("Connection closed.")`` escape as an internal error with a traceback)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from aiohttp import web

from agent.runtime.ops.http_api import HttpApi
from srt.dataplane.guard import ConnectionLimits

TOKEN = "t0ken"


class NoAgent:
    """The API's agent facade; a cut-off submit must never reach it."""

    def __init__(self) -> None:
        self.submitted: list[dict[str, Any]] = []

    async def submit(self, spec: dict[str, Any]) -> dict[str, Any]:
        self.submitted.append(spec)
        return {}

    async def ingest(self, input_name: str, lines: list[bytes]) -> dict[str, Any]:
        raise AssertionError("a cut-off ingest body reached the agent")


@pytest.mark.parametrize("late", [False, True], ids=["reading", "busy_loop"])
@pytest.mark.parametrize("path", ["/api/v1/jobs", "/api/v1/ingest/web"])
async def test_body_cut_off_by_the_guard_is_a_client_error(
    path: str, late: bool, caplog: pytest.LogCaptureFixture
) -> None:
    agent = NoAgent()
    api = HttpApi(agent, TOKEN, limits=ConnectionLimits(body_timeout=0.3))  # type: ignore[arg-type]
    if late:
        # The guard's timer fires in the same loop iteration in which the handler starts
        # reading: the transport is gone but connection_lost has not run yet, and aiohttp's
        # request.read() raises a bare RuntimeError("Connection closed.").
        @web.middleware
        async def expire_first(request: web.Request, handler: Any) -> web.StreamResponse:
            request.protocol._expired("body_timeout", 0.3)  # type: ignore[attr-defined]
            return await handler(request)

        api.app.middlewares.append(expire_first)
    await api.start()
    try:
        with caplog.at_level(logging.INFO):
            for _ in range(5):  # the race (guard close vs. handler read) has several outcomes
                reader, writer = await asyncio.open_connection("127.0.0.1", api.port)
                head = (
                    f"POST {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n"
                    'Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"a": '
                )
                writer.write(head.encode())
                await writer.drain()
                # the guard closes the connection; nothing else ends this read
                rest = await asyncio.wait_for(reader.read(), 10)
                assert b"HTTP/1.1 5" not in rest
                writer.close()
        assert agent.submitted == []
        assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text
        assert "internal_error" not in api.stats()["rejected"]
        assert api.guard.stats()["closed"].get("body_timeout", 0) == 5
    finally:
        await api.stop()
