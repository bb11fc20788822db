"""``GET /api/v1/jobs/{name}/results/stream``: a job's results as they change, one JSON per line.

Contract: :class:`ResultStreams` serves, on the token-authenticated API (its middlewares
authenticate and validate first), ``GET /api/v1/jobs/{name}/results/stream[?emit=final|changes]
[&after=E:R]``, an ``application/x-ndjson`` response of events, one JSON object per line:

* ``{"event": "result", "cursor": "E:R", "resume": "E:R", ...}``: one version of an epoch's
  result (``cursor``: its epoch and revision; ``resume``: where a reader that got every event
  so far reconnects, :meth:`~agent.runtime.results.emission.EmissionFilter.resume`), the body
  ``GET /api/v1/jobs/{name}/results?epoch=E`` answers (``state``, ``version``, ``revision``,
  ``coverage``, ``lacking``, ``rows``, ``emit``, ...). Under ``emit=changes`` (the default for
  a job whose spec says so) every version the stream sees, tentative ones included, each
  flagged by its ``state``; under ``emit=final`` only final and partial versions (a partial
  epoch is the last version it gets, flagged), never a tentative one. Which versions, and
  where a stream without ``after`` starts: :mod:`agent.runtime.results.emission`.
* ``{"event": "gone", "epoch": E, "error": ...}``: an epoch a bound dropped before the stream
  read it (the lake has it).
* ``{"event": "keepalive"}`` after :data:`KEEPALIVE` seconds without an event.
* ``{"event": "end", "reason": ...}``, the last line: the job stopped (or is not running here
  any more) or the agent is stopping. A client that reconnects with ``after=<the last
  resume>`` misses no version of an epoch not settled then (at least once).

The stream polls the job's masters every :data:`POLL` seconds (one listing per tree: epochs,
versions, states; then the results of the epochs with something to emit, at most
:data:`MAX_READS` per poll), so versions that live shorter than a poll are coalesced - the
``version`` numbers show the gap - as a Kafka Streams KTable's cache coalesces updates per
commit interval. ``emit`` is the job's at connection time unless the request names one.
Bounds: at most ``max_streams`` (default :data:`MAX_STREAMS`) streams per agent (more: 503);
no queue - a slow reader slows its own poll (writes wait on the socket), and one that reads
nothing for :data:`WRITE_TIMEOUT` seconds is disconnected; errors before the first line are the
API's usual 4xx (400 for a bad ``emit`` or ``after``, 404 for a job not running).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any, Protocol

import orjson
from aiohttp import web

from agent.errors import BadRequest, Gone, NotFound, StatusError, Unavailable
from agent.jsonable import jsonable
from agent.runtime.results.emission import EMITS, Cursor, EmissionFilter, Seen, parse_cursor

MAX_STREAMS = 16
POLL = 0.25
KEEPALIVE = 15.0
WRITE_TIMEOUT = 30.0
MAX_READS = 32
log = logging.getLogger(__name__)


class ResultSource(Protocol):
    """What the stream asks of the agent (:class:`agent.runtime.host.ports.UserApi`)."""

    def job_emit(self, name: str) -> str: ...
    async def result_versions(self, name: str) -> list[Seen]: ...
    async def results(
        self, name: str, epoch: int | None, emit: str | None = None
    ) -> dict[str, Any]: ...


class Routed(Protocol):
    """The API's aiohttp application holder (:class:`agent.runtime.ops.http_api.HttpApi`)."""

    app: web.Application


def _line(data: dict[str, Any]) -> bytes:
    return orjson.dumps(jsonable(data, hex_ids=True), default=str) + b"\n"


class ResultStreams:
    """The results stream route of the module contract, over one agent's jobs."""

    def __init__(self, source: ResultSource, *, max_streams: int = MAX_STREAMS) -> None:
        self.source = source
        self.max_streams = max_streams
        self.streams = 0
        self.refused = 0
        self._closing = asyncio.Event()

    def install(self, api: Routed) -> None:
        """Add the route to ``api`` (authenticated and validated by its middlewares)."""
        api.app.router.add_get("/api/v1/jobs/{name}/results/stream", self._stream)
        api.app.on_shutdown.append(self._shutdown)

    async def _shutdown(self, app: web.Application) -> None:
        self._closing.set()

    def stats(self) -> dict[str, int]:
        return {"streams": self.streams, "refused": self.refused}

    async def _stream(self, request: web.Request) -> web.StreamResponse:
        name = request.match_info["name"]
        job_emit = self.source.job_emit(name)  # 404 for a job not running here, before any line
        emit = request.query.get("emit") or job_emit
        if emit not in EMITS:
            raise BadRequest(f"emit must be one of {', '.join(EMITS)}, got {emit!r}", field="emit")
        after: Cursor | None = None
        if "after" in request.query:
            try:
                after = parse_cursor(request.query["after"])
            except ValueError as exc:
                raise BadRequest(f"after: {exc}", field="after") from None
        if self.streams >= self.max_streams:
            self.refused += 1
            raise Unavailable(
                f"at most {self.max_streams} results streams per agent; close one or poll "
                f"GET /api/v1/jobs/{name}/results"
            )
        self.streams += 1
        try:
            resp = web.StreamResponse(
                headers={
                    "Content-Type": "application/x-ndjson",
                    "Cache-Control": "no-cache",
                    "X-Accel-Buffering": "no",
                }
            )
            await resp.prepare(request)
            try:
                reason = await self._follow(resp, name, EmissionFilter(emit, after))
            except (ConnectionError, TimeoutError):  # gone, or reads nothing: let it go
                if request.transport is not None:
                    request.transport.close()
                return resp
            except Exception:  # a bug: logged, and the stream ends saying so (no 500 now)
                log.exception("results stream of %s failed", name)
                reason = "internal error (logged by the agent)"
            with contextlib.suppress(ConnectionError, TimeoutError):
                await self._write(resp, {"event": "end", "reason": reason})
            return resp
        finally:
            self.streams -= 1

    async def _write(self, resp: web.StreamResponse, event: dict[str, Any]) -> None:
        await asyncio.wait_for(resp.write(_line(event)), WRITE_TIMEOUT)

    async def _follow(self, resp: web.StreamResponse, name: str, filt: EmissionFilter) -> str:
        """Poll and write until the job stops or the agent does; returns why it ended."""
        read: dict[int, Seen] = {}  # epoch → the listing's version last read (not re-read)
        quiet = 0.0
        while not self._closing.is_set():
            try:
                seen = await self.source.result_versions(name)
            except NotFound:
                return f"job {name!r} is not running here any more"
            except StatusError as exc:  # a master did not answer: try again next poll
                log.debug("results stream of %s: %s", name, exc)
                seen = []
            wanted = [s for s in filt.select(seen) if read.get(s.epoch) != s]
            for s in wanted[:MAX_READS]:
                read[s.epoch] = s
                event = await self._read(name, s.epoch, filt)
                if event is not None:
                    event["resume"] = str(filt.resume(seen))
                    await self._write(resp, event)
                    quiet = 0.0
            held = {s.epoch for s in seen}
            for epoch in [e for e in read if e not in held]:
                del read[epoch]  # bounded by what the masters hold
            if quiet >= KEEPALIVE:
                await self._write(resp, {"event": "keepalive"})
                quiet = 0.0
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._closing.wait(), POLL)
            quiet += POLL
        return "the agent is stopping"

    async def _read(self, name: str, epoch: int, filt: EmissionFilter) -> dict[str, Any] | None:
        """The event for ``epoch`` if its result, as read now, is one ``filt`` emits."""
        try:
            got = await self.source.results(name, epoch, "changes")
        except Gone as exc:
            filt.emitted(Seen(epoch, 2**62, "final"))  # never again
            return {"event": "gone", "epoch": epoch, "error": str(exc)}
        except StatusError as exc:  # vanished meanwhile, or a master did not answer
            log.debug("results stream of %s, epoch %d: %s", name, epoch, exc)
            return None
        seen = Seen(epoch, int(got.get("revision", got.get("version", 1))), str(got["state"]))
        if not filt.wants(seen):  # e.g. tentative again: emit=final never shows it
            return None
        filt.emitted(seen)
        return {"event": "result", "cursor": f"{epoch}:{seen.revision}", **got, "emit": filt.emit}
