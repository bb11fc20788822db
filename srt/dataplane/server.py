"""DataPlaneServer: the authenticated aiohttp endpoint of one agent's data plane.

Contract: every request passes, in order, route lookup (404/405), snapshot-name validation on
the snapshot route (400 ``bad_name``), header authentication (401 ``unauthenticated`` /
``bad_mac`` / ``stale_timestamp``), the body size limit (413 ``too_large``), the signed body
digest (422 ``corrupt``: damaged in transit, the client resends) and the replay cache (401
``replay``) before any handler runs. A snapshot handler returns ``"merged"``, ``"duplicate"``,
``"overlap"`` or ``"stale"``; raising :class:`cbt.SnapshotError` answers 422 ``corrupt`` (the
client resends), :class:`srt.errors.Reject` answers its status, anything else 500
``handler_error``. Every rejection is counted in :meth:`DataPlaneServer.stats` by reason; no
request can stop the server. Routes can be added before or after :meth:`start`.

Connections go through :mod:`srt.dataplane.guard`: a request's head must arrive within
``head_timeout`` and its body within ``body_timeout``, a keep-alive connection may idle for
``idle_timeout``, and at most ``max_preauth`` connections may be open before their first
authenticated request (the oldest is evicted); a request line over 8190 bytes is answered 414,
other malformed heads 400, each counted under ``stats()["connections"]`` and logged at WARNING
without a traceback.
"""

from __future__ import annotations

import functools
import json
import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from cbt.errors import SnapshotError
from srt.config import DEFAULT_TUNABLES, Tunables
from srt.dataplane.auth import AuthError, RequestAuth, body_digest
from srt.dataplane.datagram import parse_request
from srt.dataplane.guard import ConnectionGuard, ConnectionLimits, GuardedHttpServer
from srt.dataplane.name import (
    ACK_RESULTS,
    POSITION_QUERY,
    REPLICA_SNAPSHOT_PATH,
    SNAPSHOT_PATH,
    SNAPSHOT_PATHS,
    SnapshotName,
    name_fields,
    parse_position,
)
from srt.errors import Reject, SnapshotNameError

log = logging.getLogger(__name__)

#: (name, body) → result; the replica door's handler also takes ``position=`` (see on_snapshot)
SnapshotHandler = Callable[..., Awaitable[str]]
RouteHandler = Callable[[web.Request], Awaitable[Any]]


def _json(status: int, obj: Any) -> web.Response:
    return web.Response(
        status=status, body=json.dumps(obj).encode(), content_type="application/json"
    )


class DataPlaneServer:
    """One agent's data-plane HTTP server (see the module docstring for the contract).

    From ``tunables`` (:class:`srt.Tunables`): ``max_body`` bounds a request body in bytes,
    ``max_skew`` the accepted clock difference, ``head_timeout``, ``body_timeout``,
    ``idle_timeout`` and ``max_preauth`` the connections (module docstring). ``clock``
    (seconds since the Unix epoch) is injectable for tests."""

    def __init__(
        self,
        secret: bytes,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        tunables: Tunables = DEFAULT_TUNABLES,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._auth = RequestAuth(secret, max_skew=tunables.max_skew, clock=clock)
        self.host = host
        self.port = port
        self.max_body = tunables.max_body
        self._snapshot_handlers: dict[str, SnapshotHandler | None] = dict.fromkeys(SNAPSHOT_PATHS)
        self._routes: dict[tuple[str, str], RouteHandler | None] = {
            ("POST", path): None for path in SNAPSHOT_PATHS
        }
        self.guard = ConnectionGuard(
            ConnectionLimits(
                head_timeout=tunables.head_timeout,
                body_timeout=tunables.body_timeout,
                idle_timeout=tunables.idle_timeout,
                max_preauth=tunables.max_preauth,
            ),
            name="data plane",
        )
        self._server: GuardedHttpServer | None = None
        self.url: str | None = None
        self._requests = 0
        self._datagrams = 0  # of the requests, those that came as overlay datagrams
        self._bytes_in = 0
        self._rejected: Counter[str] = Counter()
        self._results: Counter[str] = Counter()

    # ---- configuration ------------------------------------------------------------------
    def on_snapshot(self, handler: SnapshotHandler, path: str = SNAPSHOT_PATH) -> None:
        """Set the handler of ``POST /srt/v1/snapshot`` (name, body) → merged|duplicate|stale;
        ``path`` :data:`~srt.dataplane.name.REPLICA_SNAPSHOT_PATH`: of snapshots sent to a
        replica of the parent's position (same checks, same answers; the handler gets a
        third argument, the position's holder named by the ``position`` query parameter, or
        None - a malformed one is 400 ``bad_name``);
        :data:`~srt.dataplane.name.POSITION_SNAPSHOT_PATH`: of a replicated inner position's
        epochs, sent by a replica of it as the holder."""
        if path not in self._snapshot_handlers:
            raise ValueError(f"not a snapshot path: {path!r}")
        self._snapshot_handlers[path] = handler

    def route(self, method: str, path: str, handler: RouteHandler) -> None:
        """Add an authenticated endpoint. ``handler(request)`` runs only for authenticated,
        fresh, intact requests (``await request.read()``/``request.json()`` give the verified
        body) and returns a ``web.Response`` or a JSON-able value (sent as 200 JSON).
        Responses are signed. Raise :class:`srt.errors.Reject` for a 4xx/5xx answer;
        ``SnapshotNameError`` answers 400 ``bad_name``, ``SnapshotError`` 422 ``corrupt``."""
        if not path.startswith("/") or path in SNAPSHOT_PATHS:
            raise ValueError(f"bad or reserved path {path!r}")
        self._routes[(method.upper(), path)] = handler

    # ---- lifecycle ----------------------------------------------------------------------
    async def start(self) -> str:
        """Listen; returns the base URL ``http://host:port``."""
        if self._server is not None:
            raise RuntimeError("server already started")
        app = web.Application(client_max_size=self.max_body)
        app.router.add_route("*", "/{tail:.*}", self._dispatch)
        server = GuardedHttpServer(app, self.guard, host=self.host, port=self.port)
        self.port = await server.start()
        self._server = server
        host = f"[{self.host}]" if ":" in self.host else self.host
        self.url = f"http://{host}:{self.port}"
        return self.url

    async def stop(self) -> None:
        if self._server is not None:
            server, self._server = self._server, None
            await server.stop()

    def stats(self) -> dict:
        """Counters: requests, bytes received, results by kind, rejections by reason, and the
        connection guard's (open, pre-auth, closed by reason)."""
        return {
            "requests": self._requests,
            "datagrams": self._datagrams,
            "bytes_in": self._bytes_in,
            "results": dict(self._results),
            "rejected": dict(self._rejected),
            "rejected_total": sum(self._rejected.values()),
            "replay_cache": len(self._auth.replays),
            "connections": self.guard.stats(),
        }

    # ---- request path -------------------------------------------------------------------
    def _reject(self, status: int, reason: str, detail: str = "", nonce: str | None = None):
        resp = _json(*self._refusal(status, reason, detail))
        if nonce is not None:
            self._sign(resp, nonce)
        return resp

    def _sign(self, resp: web.StreamResponse, nonce: str) -> web.StreamResponse:
        if isinstance(resp, web.Response):
            body = resp.body
            if body is None or isinstance(body, bytes | bytearray):
                sig = self._auth.sign_response(resp.status, nonce, bytes(body or b""))
                resp.headers["X-Elf-Signature"] = sig
        return resp

    async def _dispatch(self, request: web.Request) -> web.StreamResponse:
        self._requests += 1
        method, path = request.method, request.path
        key = (method, path)
        if key not in self._routes:
            if any(p == path for _, p in self._routes):
                return self._reject(405, "method_not_allowed", f"{method} {path}")
            return self._reject(404, "not_found", path)
        is_snapshot = path in self._snapshot_handlers
        headers = request.headers
        name = None
        position: int | None = None
        if is_snapshot:
            try:
                name = SnapshotName.from_headers(headers)
                if path == REPLICA_SNAPSHOT_PATH:
                    position = parse_position(request.query.get(POSITION_QUERY))
            except SnapshotNameError as e:
                return self._reject(400, "bad_name", str(e))
        try:
            nonce, digest = self._auth.verify_headers(
                method, request.raw_path, name_fields(headers), headers
            )
        except AuthError as e:
            return self._reject(401, e.reason, e.detail)
        length = request.content_length
        if length is not None and length > self.max_body:
            return self._reject(413, "too_large", f"{length} > {self.max_body} bytes", nonce)
        try:
            body = await request.read()
        except web.HTTPRequestEntityTooLarge:
            return self._reject(413, "too_large", f"body over {self.max_body} bytes", nonce)
        except Exception as e:  # client went away mid-body, bad chunking, ...
            return self._reject(400, "read_error", f"{type(e).__name__}: {e}", nonce)
        self._bytes_in += len(body)
        if body_digest(body) != digest:
            return self._reject(422, "corrupt", "body does not match its signed digest", nonce)
        try:
            self._auth.check_replay(nonce)
        except AuthError as e:
            return self._reject(401, e.reason, e.detail)
        self.guard.authenticated(request)  # signed, fresh, intact: no longer pre-auth
        if is_snapshot:
            assert name is not None
            status, reply = await self._run_snapshot(self._door(path, position), name, body)
            return self._sign(_json(status, reply), nonce)
        return self._sign(await self._run_route(self._routes[key], request, nonce), nonce)

    async def serve_datagram(self, payload: Any, sender: Any = None) -> dict[str, Any]:
        """The overlay handler of a snapshot datagram (:mod:`srt.dataplane.datagram`; the
        overlay authenticated it): checked as strictly as the door's headers (400
        ``bad_name``), then through the door's handler as if it were posted there, counted
        the same way. Replies ``{"status": s, "result": ...}`` or ``{"status": s, "error":
        ..., "detail": ...}``."""
        self._requests += 1
        self._datagrams += 1
        try:
            door, position, name, body = parse_request(payload)
        except SnapshotNameError as e:
            status, reply = self._refusal(400, "bad_name", str(e)[:300])
        else:
            self._bytes_in += len(body)
            status, reply = await self._run_snapshot(self._door(door, position), name, body)
        return {"status": status, **reply}

    def _door(self, path: str, position: int | None) -> SnapshotHandler | None:
        """The handler of snapshot door ``path`` (the replica door's with its position)."""
        handler = self._snapshot_handlers[path]
        if path == REPLICA_SNAPSHOT_PATH and handler is not None:
            handler = functools.partial(handler, position=position)
        return handler

    def _refusal(self, status: int, reason: str, detail: str) -> tuple[int, dict[str, str]]:
        self._rejected[reason] += 1
        log.debug("data plane rejects: %s %s %s", status, reason, detail)
        return status, {"error": reason, "detail": detail}

    async def _run_snapshot(
        self, handler: SnapshotHandler | None, name: SnapshotName, body: bytes
    ) -> tuple[int, dict[str, str]]:
        if handler is None:
            return self._refusal(503, "no_handler", "no snapshot handler registered")
        try:
            result = await handler(name, body)
        except SnapshotError as e:
            return self._refusal(422, "corrupt", str(e))
        except Reject as e:
            return self._refusal(e.status, e.reason, e.detail)
        except Exception as e:
            log.exception("snapshot handler failed for %s", name)
            return self._refusal(500, "handler_error", f"{type(e).__name__}: {e}")
        if result not in ACK_RESULTS:
            log.error("snapshot handler returned %r for %s", result, name)
            return self._refusal(500, "handler_error", f"handler returned {result!r}")
        self._results[result] += 1
        return 200, {"result": result}

    async def _run_route(
        self, handler: RouteHandler | None, request: web.Request, nonce: str
    ) -> web.StreamResponse:
        assert handler is not None
        try:
            out = await handler(request)
        except Reject as e:
            return self._reject(e.status, e.reason, e.detail, nonce)
        except SnapshotNameError as e:
            return self._reject(400, "bad_name", str(e), nonce)
        except SnapshotError as e:
            return self._reject(422, "corrupt", str(e), nonce)
        except web.HTTPException as e:
            self._rejected[f"http_{e.status}"] += 1
            return _json(e.status, {"error": e.reason, "detail": e.text or ""})
        except Exception as e:
            log.exception("data plane route %s %s failed", request.method, request.path)
            return self._reject(500, "handler_error", f"{type(e).__name__}: {e}", nonce)
        self._results["route"] += 1
        if isinstance(out, web.StreamResponse):
            return out
        try:
            return _json(200, out)
        except (TypeError, ValueError) as e:
            return self._reject(500, "handler_error", f"reply is not JSON: {e}", nonce)
