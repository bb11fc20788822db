"""Retiring origins and leaving the cluster, over HTTP (docs/http-api.md, "Origins").

Contract: :class:`MembershipRoutes` serves

* what the **peer route** ``POST /agent/v1/retire`` ``{"job", "origin", "why"}`` does, served
  with every other ``/agent/v1`` route by ``agent/runtime/host/peer_api.py``: this agent, as a
  master of the job, retires ``origin`` now (:func:`retire_here`,
  ``JobRuntime.recovery.retire_origin``) and answers ``{"origin", "from_epoch",
  "partial_epochs"}``. 400 ``bad_body`` for a malformed body, 404 ``unknown_job`` when the job
  does not run here, 404 ``not_a_member`` when the origin is no member of it, 503 ``not_master``
  when this agent masters none of its trees (the convention of every "not the master here (any
  more)" answer: the caller asks the master again);
* the **operator's routes** on the token-authenticated API:
  ``POST /api/v1/jobs/{name}/retire`` ``{"origin", "why"?}`` retires an origin of one job,
  ``POST /api/v1/retire`` ``{"agent", "why"?}`` retires an agent from every running job it
  reads for. The receiving agent asks each of the job's masters (``master_urls()``; itself
  directly, the others through the peer route) and answers what each said; see
  :func:`job_outcome` and :func:`agent_outcome` for the statuses;
* ``POST /api/v1/leave``: 202 ``{"leaving": true, "node_id"}`` is written to the client first,
  then ``leave()`` is called, which stops the agent exactly as SIGTERM does (a graceful stop
  declares each of its origins' end to the masters).

Nothing here reads the agent whole: it is given the user API's job lookup (404 for a job that
does not run here), a peer poster, its own data URL and node id, and the leave callback (narrow
:class:`Protocol`\\ s).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from aiohttp import web

from agent.errors import BadRequest, NotFound, StatusError, Unavailable
from agent.jsonable import jsonable
from srt.errors import DataPlaneError

RETIRE_PATH = "/agent/v1/retire"
MAX_WHY = 200  # characters of an operator's reason kept (it reaches logs and status)
DEFAULT_WHY = "operator"


class RetiringRuntime(Protocol):
    """What the routes use of a job's fault tolerance (``JobRuntime.recovery``,
    :class:`agent.runtime.recovery.recovery.Recovery`)."""

    def retire_origin(self, origin: int, why: str) -> dict[str, Any]: ...

    async def master_urls(self) -> list[str]: ...


class PeerPoster(Protocol):
    """The data-plane client (:class:`srt.DataPlaneClient`)."""

    async def post_json(self, url: str, path: str, body: dict) -> dict: ...


class Guarded(Protocol):
    """The operator API's aiohttp application holder
    (:class:`agent.runtime.ops.http_api.HttpApi`)."""

    app: web.Application


def parse_origin(value: Any, what: str = "origin") -> int:
    """A node id given as 1–40 hex digits (results name origins without leading zeros)."""
    if not isinstance(value, str) or not 1 <= len(value) <= 40:
        raise BadRequest(f"{what} must be a node id of 1-40 hex digits", field=what)
    try:
        return int(value, 16)
    except ValueError:
        raise BadRequest(f"{what} must be a node id of 1-40 hex digits", field=what) from None


def parse_why(body: dict[str, Any]) -> str:
    why = body.get("why", DEFAULT_WHY)
    if not isinstance(why, str) or len(why) > MAX_WHY:
        raise BadRequest(f"why must be a string of at most {MAX_WHY} characters", field="why")
    return why or DEFAULT_WHY


def retire_here(recovery: RetiringRuntime, origin: int, why: str) -> dict[str, Any]:
    """``recovery.retire_origin`` with its errors as answers: KeyError → 404 (not a member),
    LookupError → 503 (not a master here)."""
    try:
        return dict(recovery.retire_origin(origin, why))
    except KeyError as exc:
        raise NotFound(f"origin {origin:x} is not a member of the job: {exc}") from None
    except LookupError as exc:
        raise Unavailable(f"not the master of the job here (any more): {exc}") from None


async def master_urls(recovery: RetiringRuntime) -> list[str]:
    """The job's masters' data-plane URLs, each once (one agent may master several trees)."""
    return list(dict.fromkeys(await recovery.master_urls()))


def job_outcome(job: str, origin: int, answers: list[dict[str, Any]]) -> dict[str, Any]:
    """One job's retirement as answered by each master (``{"master", "status", ...}``):
    ``complete`` when every master retired it. Raises when none did: 404 when a master said the
    origin is not a member (and none failed otherwise), else 503."""
    retired = [a for a in answers if a["status"] == 200]
    if not retired:
        statuses = {a["status"] for a in answers}
        detail = "; ".join(f"{a['master']}: {a.get('error')}" for a in answers) or "no master"
        if statuses == {404}:
            raise NotFound(f"job {job!r}: origin {origin:x} is not a member ({detail})")
        raise Unavailable(f"job {job!r}: no master retired origin {origin:x} ({detail})")
    return {
        "job": job,
        "origin": f"{origin:040x}",
        "complete": len(retired) == len(answers),
        "masters": answers,
    }


def agent_outcome(agent: int, per_job: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The retirement of ``agent`` from every running job (each value: a :func:`job_outcome`,
    or ``{"status", "error"}``). 404 when it is an origin of no running job; 503 when no job
    retired it and some could not answer; else 200 naming the jobs in each case."""
    retired = sorted(j for j, o in per_job.items() if "masters" in o)
    absent = sorted(j for j, o in per_job.items() if o.get("status") == 404)
    failed = {j: o for j, o in per_job.items() if "masters" not in o and o.get("status") != 404}
    if not retired and not failed:
        raise NotFound(f"agent {agent:x} is an origin of no running job")
    if not retired:
        detail = "; ".join(f"{j}: {o['error']}" for j, o in sorted(failed.items()))
        raise Unavailable(f"no job retired agent {agent:x} ({detail})")
    return {
        "agent": f"{agent:040x}",
        "retired": retired,
        "not_a_member": absent,
        "failed": failed,
        "complete": not failed and all(per_job[j]["complete"] for j in retired),
        "jobs": {j: per_job[j] for j in retired},
    }


class MembershipRoutes:
    """The routes of the module contract, over one agent's jobs."""

    def __init__(
        self,
        runtime_of: Callable[[str], RetiringRuntime],
        names: Callable[[], list[str]],
        peers: PeerPoster,
        self_url: Callable[[], str],
        node_id: Callable[[], int],
        leave: Callable[[], None],
        *,
        timeout: float = 10.0,
    ) -> None:
        self._runtime_of = runtime_of  # the user API's lookup: 404 for an unknown job
        self._names = names
        self._peers = peers
        self._self_url = self_url
        self._node_id = node_id
        self._leave = leave
        self.timeout = timeout  # per master asked

    def install(self, api: Guarded) -> None:
        """Add the operator's routes to ``api`` (authenticated and validated by its
        middlewares)."""
        r = api.app.router
        r.add_post("/api/v1/jobs/{name}/retire", self._retire_job)
        r.add_post("/api/v1/retire", self._retire_agent)
        r.add_post("/api/v1/leave", self._leave_now)

    # ---- the operator's routes -------------------------------------------------------------

    async def _retire_job(self, request: web.Request) -> web.Response:
        body = await _object(request)
        origin, why = parse_origin(body.get("origin")), parse_why(body)
        name = request.match_info["name"]
        runtime = self._runtime_of(name)
        return _json(await self.retire_in(name, runtime, origin, why))

    async def _retire_agent(self, request: web.Request) -> web.Response:
        body = await _object(request)
        agent, why = parse_origin(body.get("agent"), "agent"), parse_why(body)
        names = self._names()
        replies = await asyncio.gather(
            *(self._retire_or_error(n, agent, why) for n in names), return_exceptions=False
        )
        return _json(agent_outcome(agent, dict(zip(names, replies, strict=True))))

    async def _retire_or_error(self, name: str, origin: int, why: str) -> dict[str, Any]:
        try:
            return await self.retire_in(name, self._runtime_of(name), origin, why)
        except StatusError as exc:
            return {"status": exc.status, "error": str(exc)}

    async def retire_in(self, name: str, runtime: Any, origin: int, why: str) -> dict[str, Any]:
        """Ask each master of the job to retire ``origin``; :func:`job_outcome` of the answers."""
        urls = await master_urls(runtime.recovery)
        answers = await asyncio.gather(
            *(self._ask(url, name, runtime, origin, why) for url in urls)
        )
        return job_outcome(name, origin, list(answers))

    async def _ask(
        self, url: str, name: str, runtime: Any, origin: int, why: str
    ) -> dict[str, Any]:
        try:
            if url == self._self_url():
                reply = jsonable(retire_here(runtime.recovery, origin, why), hex_ids=True)
            else:
                body = {"job": name, "origin": f"{origin:040x}", "why": why}
                reply = await _within(self._peers.post_json(url, RETIRE_PATH, body), self.timeout)
        except StatusError as exc:
            return {"master": url, "status": exc.status, "error": str(exc)}
        except DataPlaneError as exc:
            status = exc.status if exc.status in (400, 404, 409) else 503
            return {"master": url, "status": status, "error": str(exc)}
        return {"master": url, "status": 200, **reply}

    async def _leave_now(self, request: web.Request) -> web.StreamResponse:
        """202 first, written out, then the stop (module contract)."""
        resp = _json({"leaving": True, "node_id": f"{self._node_id():040x}"}, 202)
        await resp.prepare(request)
        await resp.write_eof()
        self._leave()
        return resp


async def _within(call: Awaitable[dict], seconds: float) -> dict:
    try:
        return await asyncio.wait_for(call, seconds)
    except TimeoutError:
        raise DataPlaneError(0, "timeout", f"no answer within {seconds:g} s") from None


async def _object(request: web.Request) -> dict[str, Any]:
    """The request's JSON object (the validation middleware has checked its shape; this
    holds without it too)."""
    try:
        body = await request.json()
    except (ValueError, RecursionError):
        raise BadRequest("request body is not valid JSON") from None
    if not isinstance(body, dict):
        raise BadRequest("request body must be a JSON object")
    return body


def _json(data: Any, status: int = 200) -> web.Response:
    return web.json_response(jsonable(data, hex_ids=True), status=status)
