"""Connection guard: per-connection timeouts and a pre-authentication cap for aiohttp servers.

Contract: :class:`GuardedHttpServer` serves an ``aiohttp.web.Application`` on ``host:port``
like ``AppRunner`` + ``TCPSite`` do, but every connection is a :class:`_GuardedHandler` that
enforces the :class:`ConnectionLimits` of its :class:`ConnectionGuard`:

* **head timeout** — a request's head (request line and headers) must arrive completely within
  ``head_timeout`` seconds of its first byte; the first request of a connection is timed from
  the connection's opening, so a connection that never sends a byte is closed too;
* **body timeout** — the body must arrive completely within ``body_timeout`` seconds of the
  head;
* **idle timeout** — between requests a keep-alive connection may stay silent for
  ``idle_timeout`` seconds (aiohttp's own ``keepalive_timeout``);
* **pre-authentication cap** — at most ``max_preauth`` connections may be open that have not
  yet completed an authenticated request (the server calls :meth:`ConnectionGuard.authenticated`
  once a request's credentials check out). A connection opened at the cap evicts
  the *oldest* pre-authentication connection. A legitimate client authenticates within one
  round trip of connecting, so it is pushed out only if ``max_preauth`` more connections arrive
  within that round trip, while connections held open by a slow-loris are soon the oldest and
  are the ones evicted (refusing newcomers instead would let an attacker who re-opens
  ``max_preauth`` connections per second lock every client out);
* **line and header sizes** — a request line over ``max_line_size`` bytes is answered 414
  (``uri_too_long``), a header line over ``max_field_size`` bytes or more than ``max_headers``
  headers 400; every malformed request gets a JSON ``{"error", "reason"}`` answer and one
  WARNING line, never an ERROR traceback.

Every connection closed by the guard is counted by reason in :meth:`ConnectionGuard.stats`
(``head_timeout``, ``body_timeout``, ``preauth_evicted``, ``uri_too_long``, ``bad_request``)
and logged at WARNING with the peer's address. A body-timeout closes the connection (a handler
reading the body then sees ``ConnectionResetError``, which both servers answer as a client
error). The guard never touches requests that are being handled: a slow handler is the
server's business, not the client's.

It lives in ``srt.dataplane`` because the data plane is the lowest layer serving HTTP; the
agent's user API (``agent.runtime.ops.http_api``) imports it from here (``srt`` may not import
``agent``).
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections import Counter, OrderedDict
from dataclasses import dataclass, fields
from typing import Any

import orjson
from aiohttp import web
from aiohttp.http_exceptions import LineTooLong
from aiohttp.web_protocol import RequestHandler

from overlay.logbudget import LogBudget

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    """Per-connection timeouts (seconds) and sizes of one HTTP server (module contract)."""

    head_timeout: float = 10.0  # first byte of a request (or connect) → its complete head
    body_timeout: float = 60.0  # complete head → complete body (64 MB at ~10 Mbit/s)
    idle_timeout: float = 60.0  # keep-alive silence between requests
    max_preauth: int = 128  # open connections without an authenticated request yet
    max_line_size: int = 8190  # request line (method, URL, version) in bytes → else 414
    max_field_size: int = 8190  # one header line in bytes → else 400
    max_headers: int = 128  # header lines per request → else 400

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ValueError(f"{f.name} must be a number, got {value!r}")
            if not math.isfinite(value) or value <= 0:
                raise ValueError(f"{f.name} must be positive and finite, got {value!r}")
            if f.type in ("int", int) and not isinstance(value, int):
                raise ValueError(f"{f.name} must be an integer, got {value!r}")


class ConnectionGuard:
    """The accounting of one server's connections: the pre-authentication queue (oldest
    first) and the counters of what the guard closed or refused."""

    def __init__(self, limits: ConnectionLimits, *, name: str) -> None:
        self.limits = limits
        self.name = name
        self._open: set[_GuardedHandler] = set()
        self._preauth: OrderedDict[_GuardedHandler, None] = OrderedDict()
        self._opened_total = 0
        self.closed: Counter[str] = Counter()
        self._log = LogBudget(log)  # a flood of bad connections must not flood the log

    def authenticated(self, request: web.BaseRequest) -> None:
        """Mark the request's connection as authenticated: it leaves the pre-auth queue."""
        handler = request.protocol
        if isinstance(handler, _GuardedHandler):
            self._preauth.pop(handler, None)

    def stats(self) -> dict[str, Any]:
        return {
            "open": len(self._open),
            "preauth": len(self._preauth),
            "opened_total": self._opened_total,
            "closed": dict(self.closed),
        }

    def handler_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of aiohttp's ``RequestHandler`` that carry these limits."""
        lim = self.limits
        return {
            "keepalive_timeout": lim.idle_timeout,
            "max_line_size": lim.max_line_size,
            "max_field_size": lim.max_field_size,
            "max_headers": lim.max_headers,
            "access_log": None,
        }

    # ---- called by the handlers -------------------------------------------------------
    def _opened(self, handler: _GuardedHandler) -> None:
        self._opened_total += 1
        self._open.add(handler)
        cap = self.limits.max_preauth
        while len(self._preauth) >= cap:
            # Evict the oldest connection still sending its request (a slow-loris one sits
            # there); one whose complete request is being handled is about to authenticate,
            # so it goes only when every pre-auth connection is being handled.
            victim = next(
                (h for h in self._preauth if h._phase != "busy"), next(iter(self._preauth))
            )
            del self._preauth[victim]
            victim._close_for("preauth_evicted", f"over {cap} pre-auth connections")
        self._preauth[handler] = None

    def _closed(self, handler: _GuardedHandler) -> None:
        self._open.discard(handler)
        self._preauth.pop(handler, None)

    def _count(self, reason: str, peer: Any, detail: str) -> None:
        self.closed[reason] += 1
        self._log.warning(
            reason, "%s: closing connection from %s: %s (%s)", self.name, peer, reason, detail
        )


class _GuardedHandler(RequestHandler):
    """aiohttp's per-connection protocol with the guard's timers (phase: ``head`` → ``body``
    → ``busy`` (handler running) → ``idle`` (keep-alive) → ``head``...)."""

    def __init__(self, manager: web.Server, *, guard: ConnectionGuard, **kwargs: Any) -> None:
        super().__init__(manager, **kwargs)
        self._guard = guard
        self._phase = "head"
        self._timer: asyncio.TimerHandle | None = None
        self._payload: Any = None
        self._line_seen = False  # the current head's request line ended
        self._line_len = 0  # bytes of the current head's request line so far (414 vs 400)
        self._heads = 0  # complete heads received
        self._finished = 0  # responses finished
        self._peer: Any = None

    # ---- lifecycle --------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self._peer = transport.get_extra_info("peername")
        self._guard._opened(self)
        self._arm(self._guard.limits.head_timeout, "head_timeout")

    def connection_lost(self, exc: BaseException | None) -> None:
        self._disarm()
        self._guard._closed(self)
        super().connection_lost(exc)

    def _close_for(self, reason: str, detail: str) -> None:
        self._guard._count(reason, self._peer, detail)
        self._disarm()
        self.force_close()

    # ---- timers -----------------------------------------------------------------------
    def _arm(self, seconds: float, reason: str) -> None:
        self._disarm()
        self._timer = self._loop.call_later(seconds, self._expired, reason, seconds)

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _expired(self, reason: str, seconds: float) -> None:
        self._timer = None
        if self.transport is not None:
            self._close_for(reason, f"{self._phase} not complete after {seconds:g} s")

    # ---- byte stream ------------------------------------------------------------------
    def data_received(self, data: bytes) -> None:
        if self._phase == "idle" and data:
            self._phase, self._line_seen, self._line_len = "head", False, 0
            self._arm(self._guard.limits.head_timeout, "head_timeout")
        if self._phase == "head" and not self._line_seen:
            end = data.find(b"\n")
            self._line_len += len(data) if end < 0 else end
            self._line_seen = end >= 0
        before = len(self._messages)
        super().data_received(data)
        new = len(self._messages) - before
        if new > 0 and self._phase == "head":
            self._heads += new
            self._payload = self._messages[-1][1]
            self._phase = "body"
            self._arm(self._guard.limits.body_timeout, "body_timeout")
        if self._phase == "body" and self._payload is not None and self._payload.is_eof():
            self._payload = None
            self._disarm()
            self._phase = "busy" if self._finished < self._heads else "idle"

    async def finish_response(self, request: Any, resp: Any, start_time: Any) -> Any:
        result = await super().finish_response(request, resp, start_time)
        self._finished += 1
        if self._phase == "busy" and self._finished >= self._heads:
            self._phase = "idle"  # aiohttp's keep-alive timer (idle_timeout) runs from here
        return result

    # ---- malformed requests -----------------------------------------------------------
    def handle_error(
        self,
        request: Any,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        if status >= 500:
            return super().handle_error(request, status, exc, message)
        if isinstance(exc, LineTooLong) and self._line_len > self._guard.limits.max_line_size:
            status, reason = 414, "uri_too_long"
            text = f"request line longer than {self._guard.limits.max_line_size} bytes"
        else:
            reason = "bad_request"
            text = str(getattr(exc, "message", None) or message or exc or "malformed request")
        text = text[:200]
        self._guard._count(reason, self._peer, f"{status} {text}")
        resp = web.Response(
            status=status,
            body=orjson.dumps({"error": text, "reason": reason}),
            content_type="application/json",
        )
        resp.force_close()
        return resp


class GuardedHttpServer:
    """An aiohttp application served on ``host:port`` (0 = any free port) through a
    :class:`ConnectionGuard`; ``start`` returns the bound port, ``stop`` closes every
    connection."""

    def __init__(
        self, app: web.Application, guard: ConnectionGuard, *, host: str, port: int
    ) -> None:
        self.app = app
        self.guard = guard
        self.host = host
        self.port = port
        self._runner: web.AppRunner | None = None
        self._listener: asyncio.Server | None = None

    async def start(self) -> int:
        if self._runner is not None:
            raise RuntimeError("server already started")
        runner = web.AppRunner(self.app, access_log=None, handle_signals=False)
        await runner.setup()
        server = runner.server
        assert server is not None
        loop = asyncio.get_running_loop()
        kwargs = self.guard.handler_kwargs()
        guard = self.guard

        def protocol() -> _GuardedHandler:
            return _GuardedHandler(server, loop=loop, guard=guard, **kwargs)

        try:
            self._listener = await loop.create_server(protocol, self.host, self.port)
        except BaseException:
            await runner.cleanup()
            raise
        self._runner = runner
        self.port = self._listener.sockets[0].getsockname()[1]
        return self.port

    async def stop(self) -> None:
        listener, self._listener = self._listener, None
        runner, self._runner = self._runner, None
        if listener is not None:
            listener.close()  # stop accepting; the runner closes the open connections
        if runner is not None:
            await runner.cleanup()
