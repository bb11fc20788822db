"""The operator's routes of the agent's HTTP API: metrics, health, readiness, the contract.

Contract: :func:`install` adds to an :class:`~agent.runtime.ops.http_api.HttpApi`

* ``GET /metrics`` — the agent's Prometheus registry (:mod:`agent.runtime.ops.metrics`) in the
  text format. It needs the API token unless the operator set ``metrics_public = true``:
  metric labels name the jobs and inputs.
* ``GET /healthz`` — liveness: 200 ``{"status": "ok"}`` while the event loop answers.
* ``GET /readyz`` — readiness: 200 when the agent has joined the overlay (or is alone by
  configuration), is attached to the jobs tree and has synced the job table once; else 503.
  The body is ``{"ready": bool, "checks": {name: bool}}`` — booleans only.
* ``GET /api/v1/openapi.json`` — the API's OpenAPI document (:mod:`agent.runtime.ops.openapi`).

``/healthz``, ``/readyz`` and the document are unauthenticated and reveal nothing about the
cluster: no job names, ids, addresses or counts. It also installs the middleware that
validates every request against the document (after authentication).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Protocol

import orjson
from aiohttp import web

from agent.runtime.ops.http_api import HttpApi
from agent.runtime.ops.metrics import CONTENT_TYPE_PLAIN_0_0_4
from agent.runtime.ops.openapi import DOCUMENT_BYTES, RequestValidator

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class OpsSource(Protocol):
    """What the operator's routes read of the agent."""

    def readiness(self) -> dict[str, bool]: ...


class MetricsExposition(Protocol):
    """The agent's metrics registry (:class:`agent.runtime.ops.metrics.AgentMetrics`)."""

    async def exposition_async(self) -> bytes: ...


def _json(data: object, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps(data), status=status, content_type="application/json")


def install(
    api: HttpApi,
    source: OpsSource,
    metrics: MetricsExposition,
    *,
    metrics_public: bool = False,
    validator: RequestValidator | None = None,
) -> None:
    """Add the operator's routes and the request validation to ``api`` (module contract)."""
    validator = validator or RequestValidator.shared()

    async def healthz(request: web.Request) -> web.Response:
        return _json({"status": "ok"})

    async def readyz(request: web.Request) -> web.Response:
        checks = source.readiness()
        ready = all(checks.values())
        return _json({"ready": ready, "checks": checks}, 200 if ready else 503)

    async def scrape(request: web.Request) -> web.Response:
        resp = web.Response(body=await metrics.exposition_async())
        resp.headers["Content-Type"] = CONTENT_TYPE_PLAIN_0_0_4
        return resp

    async def openapi(request: web.Request) -> web.Response:
        return web.Response(body=DOCUMENT_BYTES, content_type="application/json")

    @web.middleware
    async def validate(request: web.Request, handler: Handler) -> web.StreamResponse:
        body = await api.read_body(request) if validator.takes_json(request) else None
        await validator.check(request, body)
        return await handler(request)

    r = api.app.router
    r.add_get("/healthz", healthz)
    r.add_get("/readyz", readyz)
    r.add_get("/metrics", scrape)
    r.add_get("/api/v1/openapi.json", openapi)
    api.public_paths |= {"/healthz", "/readyz", "/api/v1/openapi.json"}
    if metrics_public:
        api.public_paths.add("/metrics")
    api.app.middlewares.append(validate)
