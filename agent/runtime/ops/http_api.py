"""The agent's user-facing HTTP API (aiohttp, JSON, bearer-token authenticated).

Contract: every endpoint except those in ``public_paths`` (``GET /api/v1/health`` and the
probes) needs ``Authorization: Bearer <token>``; a wrong or missing token is 401. Bodies are
JSON (``ingest`` takes JSON lines).
Invalid input gets a 4xx whose JSON body is ``{"error": "<what was wrong>"}`` (plus ``"field"``
naming the spec or change field at fault when there is one); the agent keeps running whatever
arrives. Connections go through :mod:`srt.dataplane.guard` (head, body and idle timeouts; a cap
on connections without an authenticated request; 414 for a request line over 8190 bytes, 400
for other malformed heads, never a traceback). The endpoints are listed in
``docs/http-api.md``:

=======  ==================================  ===============================================
POST     /api/v1/jobs                        submit a job spec → 201 job info
GET      /api/v1/jobs                        list jobs
DELETE   /api/v1/jobs/{name}                 stop a job
POST     /api/v1/jobs/{name}/change          a runtime change, applied by every agent
GET      /api/v1/jobs/{name}/timings         this agent's recent epoch and control timings
GET      /api/v1/jobs/{name}/results         latest complete epoch, or ``?epoch=E``;
                                             ``?emit=final|changes`` overrides the job's emit
GET      /api/v1/jobs/{name}/results/stream  NDJSON: every version (changes) or every final
                                             one (final), ``agent.runtime.ops.results_stream``
POST     /api/v1/jobs/{name}/query           cross-job query, answered by the job's master
GET      /api/v1/jobs/{name}/local           ``?k=v``: the job's instance on this agent answers
GET      /api/v1/status                      node id, neighbours, roles and trees per job
POST     /api/v1/jobs/{name}/retire          retire an origin of a job (``membership_api``)
POST     /api/v1/retire                      retire an agent from every running job (same)
POST     /api/v1/leave                       202, then stop as on SIGTERM (same)
POST     /api/v1/ingest/{input}              JSON lines into a named input
GET      /api/v1/health                      liveness (no token)
GET      /healthz, /readyz                   liveness, readiness (no token; ``ops_api``)
GET      /metrics                            Prometheus text (token unless metrics_public)
GET      /api/v1/openapi.json                the OpenAPI document (no token; ``ops_api``)
GET      /dashboard/, /api/v1/dashboard/...  the live dashboard (``agent.runtime.ops.dashboard``;
                                             the static page needs no token)
=======  ==================================  ===============================================

The operator's routes and the validation of requests against the OpenAPI document are added by
:func:`agent.runtime.ops.ops_api.install`, the retire and leave routes by
:class:`agent.runtime.ops.membership_api.MembershipRoutes`; ``public_paths`` are the paths served
without a token.
"""

from __future__ import annotations

import hmac
import logging
from typing import Any, Protocol

import orjson
from aiohttp import web
from aiohttp.web_protocol import RequestPayloadError

from agent.errors import BadRequest, StatusError, Unauthorized
from agent.jsonable import jsonable
from srt.dataplane.guard import ConnectionGuard, ConnectionLimits, GuardedHttpServer

MAX_BODY_BYTES = 8 * 1024 * 1024
log = logging.getLogger(__name__)


class AgentFacade(Protocol):
    """What the API needs from an agent (implemented by ``agent.runtime.host.ports.UserApi``)."""

    async def submit(self, spec: dict[str, Any]) -> dict[str, Any]: ...
    def jobs(self) -> list[dict[str, Any]]: ...
    async def stop_job(self, name: str) -> dict[str, Any]: ...
    async def change_job(self, name: str, change: Any) -> dict[str, Any]: ...
    def job_timings(self, name: str) -> dict[str, Any]: ...
    async def results(
        self, name: str, epoch: int | None, emit: str | None = None
    ) -> dict[str, Any]: ...
    async def query(self, name: str, message: dict[str, Any]) -> dict[str, Any]: ...
    async def local_query(self, name: str, params: dict[str, str]) -> dict[str, Any]: ...
    def status(self) -> dict[str, Any]: ...
    async def ingest(self, input_name: str, lines: list[bytes]) -> dict[str, Any]: ...


def _json(data: Any, status: int = 200) -> web.Response:
    body = orjson.dumps(jsonable(data, hex_ids=True), default=str)
    return web.Response(body=body, status=status, content_type="application/json")


class HttpApi:
    """An aiohttp application serving one agent's API on ``host:port`` (0 = any free port);
    ``limits`` bound its connections (default :class:`ConnectionLimits`)."""

    def __init__(
        self,
        agent: AgentFacade,
        token: str,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        limits: ConnectionLimits | None = None,
    ):
        self.agent = agent
        self._token = token.encode()
        self.host, self.port = host, port
        self.rejected: dict[str, int] = {}
        #: paths served without the token (agent/runtime/ops/ops_api.py adds the probes)
        self.public_paths: set[str] = {"/api/v1/health"}
        self.app = web.Application(middlewares=[self._errors], client_max_size=MAX_BODY_BYTES)
        r = self.app.router
        r.add_get("/api/v1/health", self._health)
        r.add_post("/api/v1/jobs", self._submit)
        r.add_get("/api/v1/jobs", self._jobs)
        r.add_delete("/api/v1/jobs/{name}", self._stop)
        r.add_post("/api/v1/jobs/{name}/change", self._change)
        r.add_get("/api/v1/jobs/{name}/timings", self._timings)
        r.add_get("/api/v1/jobs/{name}/results", self._results)
        r.add_post("/api/v1/jobs/{name}/query", self._query)
        r.add_get("/api/v1/jobs/{name}/local", self._local)
        r.add_get("/api/v1/status", self._status)
        r.add_post("/api/v1/ingest/{input}", self._ingest)
        self.guard = ConnectionGuard(limits or ConnectionLimits(), name="HTTP API")
        self._server: GuardedHttpServer | None = None
        self.url = ""

    async def start(self) -> str:
        server = GuardedHttpServer(self.app, self.guard, host=self.host, port=self.port)
        self.port = await server.start()
        self._server = server
        host = f"[{self.host}]" if ":" in self.host else self.host
        self.url = f"http://{host}:{self.port}"
        return self.url

    async def stop(self) -> None:
        if self._server is not None:
            server, self._server = self._server, None
            await server.stop()

    def stats(self) -> dict[str, Any]:
        """Requests refused by reason, and the connection guard's counters."""
        return {"rejected": dict(self.rejected), "connections": self.guard.stats()}

    def _count(self, reason: str) -> None:
        self.rejected[reason] = self.rejected.get(reason, 0) + 1

    @web.middleware
    async def _errors(self, request: web.Request, handler: Any) -> web.StreamResponse:
        try:
            if not self.public(request.path):
                self._authenticate(request)
                self.guard.authenticated(request)  # no longer counts as a pre-auth connection
            return await handler(request)
        except web.HTTPException as exc:
            if exc.status >= 400:
                self._count(f"http_{exc.status}")
                return _json({"error": exc.reason}, exc.status)
            raise
        except StatusError as exc:  # domain errors (no status) are bugs here: 500 below
            self._count(type(exc).__name__)
            body = {"error": str(exc)}
            if exc.field:
                body["field"] = exc.field
            body.update(getattr(exc, "details", None) or {})  # e.g. NotFinal's state
            return _json(body, exc.status)
        except Exception as exc:  # a bug must answer 500 with its name, not kill the agent
            self._count("internal_error")
            log.exception("API %s %s failed", request.method, request.path)
            return _json({"error": f"internal error: {type(exc).__name__}: {exc}"}, 500)

    def public(self, path: str) -> bool:
        """Paths served without the token: ``public_paths`` (liveness, the operator's probes
        and document), and the dashboard's static page (it holds no data; everything it shows
        comes from token-authenticated routes): ``/dashboard``, ``/dashboard/`` and one file
        name under it, never a deeper or dotted path."""
        if path in self.public_paths or path in ("/dashboard", "/dashboard/"):
            return True
        head, _, name = path.rpartition("/")
        return head == "/dashboard" and bool(name) and not name.startswith(".")

    def _authenticate(self, request: web.Request) -> None:
        header = request.headers.get("Authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme != "Bearer" or not hmac.compare_digest(token.encode(), self._token):
            raise Unauthorized("missing or wrong API token (Authorization: Bearer <token>)")

    @staticmethod
    async def _read(request: web.Request) -> bytes:
        """The request body; a body cut off (the client went away, or the connection guard
        closed it after ``body_timeout``) is the client's error, not the server's."""
        try:
            return await request.read()
        except (ConnectionError, RequestPayloadError) as exc:
            raise BadRequest(f"request body could not be read: {type(exc).__name__}") from None
        except RuntimeError:
            # aiohttp's payload stream raises a bare RuntimeError("Connection closed.") when the
            # transport closes mid-body (the guard's body_timeout does exactly that).
            transport = request.transport
            if transport is None or transport.is_closing():
                raise BadRequest("request body could not be read: connection closed") from None
            raise

    read_body = _read  # for the request-validation middleware (agent/runtime/ops/ops_api.py)

    @classmethod
    async def _body(cls, request: web.Request) -> dict[str, Any]:
        raw = await cls._read(request)
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise BadRequest(f"request body is not valid JSON: {exc}") from None
        if not isinstance(body, dict):
            raise BadRequest("request body must be a JSON object")
        return body

    async def _health(self, request: web.Request) -> web.Response:
        return _json({"ok": True})

    async def _submit(self, request: web.Request) -> web.Response:
        return _json(await self.agent.submit(await self._body(request)), 201)

    async def _jobs(self, request: web.Request) -> web.Response:
        return _json({"jobs": self.agent.jobs()})

    async def _stop(self, request: web.Request) -> web.Response:
        return _json(await self.agent.stop_job(request.match_info["name"]))

    async def _change(self, request: web.Request) -> web.Response:
        body = await self._body(request)
        return _json(await self.agent.change_job(request.match_info["name"], body))

    async def _timings(self, request: web.Request) -> web.Response:
        return _json(self.agent.job_timings(request.match_info["name"]))

    async def _results(self, request: web.Request) -> web.Response:
        text = request.query.get("epoch")
        epoch: int | None = None
        if text is not None:
            try:
                epoch = int(text)
            except ValueError:
                raise BadRequest(f"epoch must be an integer, got {text!r}") from None
        emit = request.query.get("emit")
        return _json(await self.agent.results(request.match_info["name"], epoch, emit))

    async def _query(self, request: web.Request) -> web.Response:
        body = await self._body(request)
        return _json(await self.agent.query(request.match_info["name"], body))

    async def _local(self, request: web.Request) -> web.Response:
        params = {key: request.query[key] for key in request.query}  # first value of each key
        return _json(await self.agent.local_query(request.match_info["name"], params))

    async def _status(self, request: web.Request) -> web.Response:
        return _json(self.agent.status())

    async def _ingest(self, request: web.Request) -> web.Response:
        raw = await self._read(request)
        # Lines stay bytes: the input's parser decodes each one, replacing invalid UTF-8 (one
        # bad byte costs no event, not even its own line: docs/inputs.md). Split on bytes, not
        # str.splitlines, which would also cut inside a JSON string at U+2028 or \x1c.
        lines = [line for line in raw.splitlines() if line.strip()]
        return _json(await self.agent.ingest(request.match_info["input"], lines))
