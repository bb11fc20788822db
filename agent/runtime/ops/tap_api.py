"""``GET /api/v1/jobs/{name}/tap``: a live sample of the records a job sees on this agent.

Contract: :class:`TapRoutes` serves, on the token-authenticated API (its middlewares
authenticate and validate first), ``GET /api/v1/jobs/{name}/tap?limit=N&timeout=S``: it opens
a tap on the job here (``runtime_of(name).taps``, the :class:`TapPoint` protocol), waits until
``N`` records (default :data:`DEFAULT_LIMIT`, 1 ≤ N ≤
:data:`~agent.runtime.job.tap.MAX_LIMIT`, 1000) were captured from now
on or ``S`` seconds passed (default :data:`DEFAULT_TIMEOUT`, 0 < S ≤ :data:`MAX_TIMEOUT`),
closes the tap and answers one JSON object::

    {"job", "node_id", "complete": bool, "seen": int, "dropped": int, "seconds": float,
     "records": [{"input", "origin", "epoch", "record"}, ...]}

``records`` in the order the job saw them (at most N); ``origin`` is this agent's node id (the
origin the job's results count them under), ``input`` the input they came from, ``epoch`` the
event-time epoch of their timestamp (None without a usable one). ``complete``: N were
captured; ``seen``: records the job processed while the tap was open, ``dropped``: those not
kept (the tap was full). Errors: 404 for a job not running here (the user API's lookup), 400
for a bad ``limit`` or ``timeout``, 429 when the job already has its most taps open here
(:mod:`agent.runtime.job.tap`). The request waits on an event, never on the record thread;
the reply is built from at most N records.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Protocol

import orjson
from aiohttp import web

from agent.errors import BadRequest
from agent.jsonable import jsonable
from agent.runtime.job.tap import MAX_LIMIT

#: records a tap returns when the request names no limit
DEFAULT_LIMIT = 10
#: seconds a request waits when it names no timeout, and the most it may ask for
DEFAULT_TIMEOUT = 10.0
MAX_TIMEOUT = 60.0


class OpenTap(Protocol):
    """One open tap (:class:`agent.runtime.job.tap.Tap`)."""

    records: list[tuple[str, int | None, dict[str, Any]]]
    seen: int

    @property
    def dropped(self) -> int: ...

    async def wait(self, timeout: float) -> bool: ...


class TapPoint(Protocol):
    """A job's taps on this agent (:class:`agent.runtime.job.tap.JobTaps`)."""

    def open(self, limit: int) -> Any: ...
    def close(self, tap: Any) -> None: ...


class TappedRuntime(Protocol):
    """What the route uses of a job's runtime (``JobRuntime.taps``)."""

    taps: TapPoint


class Routed(Protocol):
    """The API's aiohttp application holder (:class:`agent.runtime.ops.http_api.HttpApi`)."""

    app: web.Application


def parse_limit(text: str | None) -> int:
    """``?limit=``: an integer in 1..MAX_LIMIT (default DEFAULT_LIMIT)."""
    if text is None:
        return DEFAULT_LIMIT
    try:
        limit = int(text)
    except ValueError:
        limit = 0
    if not 1 <= limit <= MAX_LIMIT:
        raise BadRequest(f"limit must be an integer from 1 to {MAX_LIMIT}", field="limit")
    return limit


def parse_timeout(text: str | None) -> float:
    """``?timeout=``: seconds, more than 0 and at most MAX_TIMEOUT (default DEFAULT_TIMEOUT)."""
    if text is None:
        return DEFAULT_TIMEOUT
    try:
        timeout = float(text)
    except ValueError:
        timeout = -1.0
    if not 0 < timeout <= MAX_TIMEOUT:  # also refuses NaN
        raise BadRequest(
            f"timeout must be a number of seconds above 0 and at most {MAX_TIMEOUT:g}",
            field="timeout",
        )
    return timeout


class TapRoutes:
    """The tap route of the module contract, over one agent's jobs."""

    def __init__(
        self, runtime_of: Callable[[str], TappedRuntime], node_id: Callable[[], int]
    ) -> None:
        self._runtime_of = runtime_of  # the user API's lookup: 404 for an unknown job
        self._node_id = node_id

    def install(self, api: Routed) -> None:
        """Add the route to ``api`` (authenticated and validated by its middlewares)."""
        api.app.router.add_get("/api/v1/jobs/{name}/tap", self._tap)

    async def _tap(self, request: web.Request) -> web.Response:
        limit = parse_limit(request.query.get("limit"))
        timeout = parse_timeout(request.query.get("timeout"))
        name = request.match_info["name"]
        return _json(await self.tap(name, limit, timeout))

    async def tap(self, name: str, limit: int, timeout: float) -> dict[str, Any]:
        """Open a tap on job ``name``, wait, close it: the reply of the module contract."""
        taps = self._runtime_of(name).taps
        tap: OpenTap = taps.open(limit)
        started = time.monotonic()
        try:
            complete = await tap.wait(timeout)
        finally:
            taps.close(tap)  # also when the client went away and the request was cancelled
        origin = f"{self._node_id():040x}"
        # a copy: a batch the record thread was offering as the tap closed may still append
        # to the tap's list (never past the limit)
        kept = tap.records[:limit]
        return {
            "job": name,
            "node_id": origin,
            "complete": complete,
            "seen": tap.seen,
            "dropped": max(0, tap.seen - len(kept)),
            "seconds": round(time.monotonic() - started, 3),
            "records": [
                {"input": src, "origin": origin, "epoch": epoch, "record": jsonable(rec)}
                for src, epoch, rec in kept
            ],
        }


def _json(data: Any) -> web.Response:
    # default=str: a record value orjson cannot encode (a parser's own type) prints as text
    body = orjson.dumps(data, default=str)
    return web.Response(body=body, content_type="application/json")
