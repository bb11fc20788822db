"""The dashboard's HTTP routes on the agent's user API (``agent.runtime.ops.http_api``).

Contract: :func:`install` adds to the API's aiohttp application

=======  ==============================  ==================================================
GET      /dashboard/ (and its files)     the page: static HTML/JS/CSS shipped in the package,
                                         uPlot vendored (no CDN); no token needed, no data
GET      /api/v1/dashboard/cluster       the cluster picture as one JSON document
GET      /api/v1/dashboard/events        the same as Server-Sent Events: ``cluster`` (agents,
                                         timeline), ``job`` (one job, sent only when its
                                         newest epoch, version, tree or applied state
                                         changed: at most one per epoch), ``gone`` (a job
                                         stopped)
POST     /api/v1/dashboard/query         ``{name, query, epoch_seconds?, fault_tolerance?}``:
                                         an ELF QL query submitted as a ``ql`` job (400
                                         naming the field)
=======  ==============================  ==================================================

The ``/api/v1/dashboard/*`` routes need the API token like every other API route (the
browser sends it in the ``Authorization`` header with ``fetch``, never in a URL). Bounds: at
most ``max_streams`` event streams per agent (``[runtime] dashboard_streams``, default
:data:`MAX_STREAMS`; more: 503), a stream's writes never wait on
more than one snapshot refresh (shared by every viewer), and a comment line every
:data:`KEEPALIVE` seconds keeps proxies from closing a quiet stream. Streams end when the API
stops (``on_shutdown``), so a viewer never delays an agent's shutdown.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
from pathlib import Path
from typing import Any, Protocol

import orjson
from aiohttp import web

from agent.errors import BadRequest, Unavailable
from agent.jobs.ql_job import spec_from_query
from agent.jsonable import jsonable
from agent.ql import QLError
from agent.runtime.ops.dashboard.cluster import ClusterPicture

STATIC = Path(__file__).with_name("static")
MAX_STREAMS = 8
KEEPALIVE = 15.0
MAX_QUERY_CHARS = 4096
_TYPES = {
    ".html": "text/html",
    ".js": "text/javascript",
    ".css": "text/css",
    ".svg": "image/svg+xml",
    ".png": "image/png",
}
_HEADERS = {
    # the page runs only its own files and talks only to its own agent
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
        "img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


class Submitter(Protocol):
    """What the query route needs from the agent."""

    async def submit(self, spec: dict[str, Any]) -> dict[str, Any]: ...


def _encode(data: Any) -> bytes:
    return orjson.dumps(jsonable(data, hex_ids=True), default=str)


def _digest(job: dict[str, Any]) -> str:
    """What makes a job's event worth sending again."""
    shape = sorted(
        (n["tree"], n["node"], n["parent"] or "", n["state"], n["lag"] or 0, n.get("standby"))
        for n in job["nodes"]
    )
    key = (
        job["newest_epoch"],
        job["version"],
        job["applied_everywhere"],
        shape,
        sorted(job["versions"].items()),
        (job.get("result") or {}).get("epoch"),
    )
    return hashlib.blake2b(repr(key).encode(), digest_size=12).hexdigest()


class DashboardRoutes:
    """The routes above over one :class:`ClusterPicture` (see the module contract)."""

    def __init__(
        self, picture: ClusterPicture, agent: Submitter, *, max_streams: int = MAX_STREAMS
    ) -> None:
        self.picture = picture
        self.agent = agent
        self.max_streams = max_streams
        self.streams = 0
        self.streams_refused = 0
        self._closing = asyncio.Event()
        self._files = {
            p.name: (p.read_bytes(), _TYPES[p.suffix])
            for p in sorted(STATIC.iterdir())
            if p.suffix in _TYPES
        }
        # the licence of the vendored chart library ships next to it
        self._files["uPlot.LICENSE"] = ((STATIC / "uPlot.LICENSE").read_bytes(), "text/plain")

    def install(self, app: web.Application) -> None:
        r = app.router
        r.add_get("/dashboard", self._redirect)
        r.add_get("/dashboard/", self._index)
        r.add_get("/dashboard/{file}", self._file)
        r.add_get("/api/v1/dashboard/cluster", self._cluster)
        r.add_get("/api/v1/dashboard/events", self._events)
        r.add_post("/api/v1/dashboard/query", self._query)
        app.on_shutdown.append(self._shutdown)

    async def _shutdown(self, app: web.Application) -> None:
        self._closing.set()

    def stats(self) -> dict[str, Any]:
        return {
            "streams": self.streams,
            "streams_refused": self.streams_refused,
            "refreshes": self.picture.refreshes,
            "summaries_refused": self.picture.refused,
        }

    # ---- the page ----------------------------------------------------------------------

    async def _redirect(self, request: web.Request) -> web.Response:
        raise web.HTTPFound("/dashboard/")

    async def _index(self, request: web.Request) -> web.Response:
        return self._serve("index.html")

    async def _file(self, request: web.Request) -> web.Response:
        return self._serve(request.match_info["file"])

    def _serve(self, name: str) -> web.Response:
        found = self._files.get(name)  # an allow-list: no path ever reaches the file system
        if found is None:
            raise web.HTTPNotFound(reason=f"no dashboard file {name[:80]!r}")
        body, ctype = found
        return web.Response(body=body, content_type=ctype, headers=_HEADERS)

    # ---- data --------------------------------------------------------------------------

    async def _cluster(self, request: web.Request) -> web.Response:
        snap = await self.picture.snapshot()
        return web.Response(body=_encode(snap), content_type="application/json")

    async def _events(self, request: web.Request) -> web.StreamResponse:
        if self.streams >= self.max_streams:
            self.streams_refused += 1
            raise Unavailable(
                f"at most {self.max_streams} dashboard event streams per agent; close one or use "
                "GET /api/v1/dashboard/cluster"
            )
        self.streams += 1
        try:
            return await self._stream(request)
        finally:
            self.streams -= 1

    async def _stream(self, request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(
            headers={
                "Content-Type": "text/event-stream",
                "Cache-Control": "no-cache",
                "X-Accel-Buffering": "no",
            }
        )
        await resp.prepare(request)
        sent: dict[str, str] = {}
        seq = -1
        quiet = 0.0
        with contextlib.suppress(ConnectionError):
            while not self._closing.is_set():
                snap = await self.picture.snapshot()
                if self.picture.seq != seq:
                    seq = self.picture.seq
                    await resp.write(self._frames(snap, sent))
                    quiet = 0.0
                elif quiet >= KEEPALIVE:
                    await resp.write(b": keep-alive\n\n")
                    quiet = 0.0
                wait = max(0.2, self.picture.next_due())
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._closing.wait(), wait)
                quiet += wait
        return resp

    @staticmethod
    def _frames(snap: dict[str, Any], sent: dict[str, str]) -> bytes:
        jobs = snap["jobs"]
        head = {k: v for k, v in snap.items() if k != "jobs"}
        head["job_names"] = sorted(jobs)
        out = [b"event: cluster\ndata: " + _encode(head) + b"\n\n"]
        for name, job in sorted(jobs.items()):
            digest = _digest(job)
            if sent.get(name) != digest:
                sent[name] = digest
                out.append(b"event: job\ndata: " + _encode(job) + b"\n\n")
        for name in sorted(set(sent) - set(jobs)):
            del sent[name]
            out.append(b"event: gone\ndata: " + _encode({"name": name}) + b"\n\n")
        return b"".join(out)

    # ---- actions -----------------------------------------------------------------------

    async def _query(self, request: web.Request) -> web.Response:
        try:
            body = orjson.loads(await request.read())
        except orjson.JSONDecodeError as exc:
            raise BadRequest(f"request body is not valid JSON: {exc}") from None
        if not isinstance(body, dict):
            raise BadRequest("request body must be a JSON object")
        unknown = set(body) - {"name", "query", "epoch_seconds", "fault_tolerance"}
        if unknown:
            raise BadRequest(f"unknown field {sorted(unknown)[0]!r}", field=sorted(unknown)[0])
        name, text = body.get("name"), body.get("query")
        if not isinstance(name, str) or not name:
            raise BadRequest("name must be a non-empty string", field="name")
        if not isinstance(text, str) or not text.strip():
            raise BadRequest("query must be a non-empty string", field="query")
        if len(text) > MAX_QUERY_CHARS:
            raise BadRequest(f"query is longer than {MAX_QUERY_CHARS} characters", field="query")
        overrides: dict[str, Any] = {}
        seconds = body.get("epoch_seconds")
        if seconds is not None:
            if type(seconds) not in (int, float):
                raise BadRequest("epoch_seconds must be a number", field="epoch_seconds")
            overrides["epoch_seconds"] = float(seconds)
        if body.get("fault_tolerance") is not None:  # validated with the spec (400 naming it)
            overrides["fault_tolerance"] = body["fault_tolerance"]
        try:
            spec = spec_from_query(name, "dashboard", text, **overrides)
        except QLError as exc:
            raise BadRequest(f"query: {exc}", field="query") from None
        reply = await self.agent.submit(spec)
        return web.Response(body=_encode(reply), status=201, content_type="application/json")
