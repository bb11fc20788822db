"""The connection guard (srt/dataplane/guard.py) over real loopback sockets: idle and drip-fed
connections are closed by the head/body/idle timeouts, the pre-authentication cap evicts the
oldest unauthenticated connection (never an authenticated one), a handler that is slow is left
alone, and malformed heads (a 10 KB URL, a huge header) get a JSON 414/400 with a WARNING and no
ERROR traceback — on a bare application and on the real DataPlaneServer."""

from __future__ import annotations

import asyncio
import logging
import time

import orjson
import pytest
from aiohttp import web

from srt.config import Tunables
from srt.dataplane import DataPlaneServer
from srt.dataplane.guard import ConnectionGuard, ConnectionLimits, GuardedHttpServer

# Short limits so the tests are quick; every "closed within" bound below is several times the
# limit (a loaded 2-core CI host delays timers by tens of ms, not seconds).
LIMITS = ConnectionLimits(head_timeout=0.4, body_timeout=0.4, idle_timeout=1.2, max_preauth=4)
SLACK = 3.0


async def app_server(limits: ConnectionLimits = LIMITS):
    guard = ConnectionGuard(limits, name="test")

    async def echo(request: web.Request) -> web.Response:
        if request.headers.get("X-Auth") == "ok":
            guard.authenticated(request)
        body = await request.read()
        return web.Response(body=b"got %d" % len(body))

    async def slow(request: web.Request) -> web.Response:
        await asyncio.sleep(float(request.query["s"]))
        return web.Response(text="slow done")

    app = web.Application()
    app.router.add_route("*", "/echo", echo)
    app.router.add_get("/slow", slow)
    server = GuardedHttpServer(app, guard, host="127.0.0.1", port=0)
    await server.start()
    return server, guard


async def closed_within(reader: asyncio.StreamReader, seconds: float) -> bytes:
    """Everything the server sent until it closed the connection (fails if it stays open)."""
    return await asyncio.wait_for(reader.read(), seconds)


def request(path: str = "/echo", body: bytes = b"", auth: bool = False) -> bytes:
    head = f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n"
    if auth:
        head += "X-Auth: ok\r\n"
    return head.encode() + b"\r\n" + body


async def read_response(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    status_line = await reader.readline()
    length = 0
    while (line := await reader.readline()) not in (b"\r\n", b""):
        name, _, value = line.decode().partition(":")
        if name.lower() == "content-length":
            length = int(value)
    return int(status_line.split()[1]), await reader.readexactly(length)


async def test_a_silent_connection_is_closed_after_the_head_timeout() -> None:
    server, guard = await app_server()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        t0 = time.monotonic()
        assert await closed_within(reader, LIMITS.head_timeout * SLACK) == b""
        assert time.monotonic() - t0 >= LIMITS.head_timeout * 0.9
        writer.close()
        assert guard.stats()["closed"] == {"head_timeout": 1}
    finally:
        await server.stop()


async def test_a_drip_fed_head_is_closed_although_bytes_keep_arriving() -> None:
    server, guard = await app_server()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        head = request()[:-2]  # never the final blank line

        async def drip() -> None:
            for byte in head:
                writer.write(bytes([byte]))
                await asyncio.sleep(0.05)

        dripper = asyncio.create_task(drip())
        assert await closed_within(reader, LIMITS.head_timeout * SLACK) == b""
        dripper.cancel()
        writer.close()
        assert guard.stats()["closed"] == {"head_timeout": 1}
    finally:
        await server.stop()


async def test_a_drip_fed_body_is_closed_after_the_body_timeout() -> None:
    server, guard = await app_server()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(request(body=b"x" * 1000)[:-1000])  # the head, promising 1000 bytes

        async def drip() -> None:
            while True:
                writer.write(b"x")
                await asyncio.sleep(0.05)

        dripper = asyncio.create_task(drip())
        await closed_within(reader, LIMITS.body_timeout * SLACK)
        dripper.cancel()
        writer.close()
        assert guard.stats()["closed"] == {"body_timeout": 1}
    finally:
        await server.stop()


async def test_keep_alive_idles_for_the_idle_timeout_then_closes() -> None:
    server, guard = await app_server()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(request(body=b"abc", auth=True))
        assert await read_response(reader) == (200, b"got 3")
        # past the head timeout the idle connection is still usable ...
        await asyncio.sleep(LIMITS.head_timeout * 1.5)
        writer.write(request(body=b"abcd", auth=True))
        assert await read_response(reader) == (200, b"got 4")
        # ... and is closed once idle for the idle timeout
        t0 = time.monotonic()
        assert await closed_within(reader, LIMITS.idle_timeout * SLACK) == b""
        assert time.monotonic() - t0 >= LIMITS.idle_timeout * 0.9
        writer.close()
        assert guard.stats()["closed"] == {}  # an idle keep-alive close is no refusal
    finally:
        await server.stop()


async def test_a_slow_handler_is_not_cut_off() -> None:
    server, guard = await app_server()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        seconds = LIMITS.head_timeout + LIMITS.body_timeout + 0.2
        writer.write(f"GET /slow?s={seconds} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        assert await read_response(reader) == (200, b"slow done")
        writer.close()
        assert guard.stats()["closed"] == {}
    finally:
        await server.stop()


async def test_the_preauth_cap_evicts_the_oldest_unauthenticated_connection() -> None:
    server, guard = await app_server()
    try:
        authed_r, authed_w = await asyncio.open_connection("127.0.0.1", server.port)
        authed_w.write(request(auth=True))
        assert await read_response(authed_r) == (200, b"got 0")
        idle = [await asyncio.open_connection("127.0.0.1", server.port) for _ in range(10)]
        # the six oldest idle ones were evicted at once; the four newest wait for their timeout
        for reader, _ in idle[:6]:
            assert await closed_within(reader, 1.0) == b""
        stats = guard.stats()
        assert stats["closed"] == {"preauth_evicted": 6}
        assert stats["preauth"] == 4
        # the authenticated connection was never a candidate
        authed_w.write(request(body=b"z", auth=True))
        assert await read_response(authed_r) == (200, b"got 1")
        for _, writer in [*idle, (authed_r, authed_w)]:
            writer.close()
    finally:
        await server.stop()


@pytest.mark.parametrize(
    ("head", "status", "reason"),
    [
        (b"GET /" + b"a" * 10_000 + b" HTTP/1.1\r\nHost: x\r\n\r\n", 414, "uri_too_long"),
        (b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + b"b" * 10_000 + b"\r\n\r\n", 400, "bad_request"),
        (b"GET / HTTP/1.1\r\n" + b"X: y\r\n" * 200 + b"\r\n", 400, "bad_request"),
        (b"\x16\x03\x01 not http at all\r\n\r\n", 400, "bad_request"),
    ],
    ids=["10KB-url", "10KB-header", "200-headers", "garbage"],
)
async def test_malformed_heads_get_json_4xx_without_a_traceback(
    head: bytes, status: int, reason: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    server, guard = await app_server()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(head)
        got_status, body = await read_response(reader)
        writer.close()
        assert got_status == status
        answer = orjson.loads(body)
        assert answer["reason"] == reason and answer["error"]
        assert guard.stats()["closed"] == {reason: 1}
    finally:
        await server.stop()
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]
    assert any(r.levelno == logging.WARNING and reason in r.getMessage() for r in caplog.records)


async def test_the_data_plane_server_is_guarded(caplog: pytest.LogCaptureFixture) -> None:
    """The real DataPlaneServer: its srt.Tunables reach the guard, a 10 KB URL is a clean 414,
    an idle connection is closed and counted in stats()."""
    caplog.set_level(logging.DEBUG)
    tunables = Tunables(head_timeout=0.4, body_timeout=0.4, idle_timeout=1.0, max_preauth=8)
    server = DataPlaneServer(b"s" * 32, tunables=tunables)
    await server.start()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(b"POST /srt/v1/" + b"a" * 10_000 + b" HTTP/1.1\r\nHost: x\r\n\r\n")
        status, body = await read_response(reader)
        assert status == 414 and orjson.loads(body)["reason"] == "uri_too_long"
        writer.close()
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        assert await closed_within(reader, 0.4 * SLACK) == b""
        writer.close()
        conns = server.stats()["connections"]
        assert conns["closed"] == {"uri_too_long": 1, "head_timeout": 1}
    finally:
        await server.stop()
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]


def test_limits_are_validated() -> None:
    with pytest.raises(ValueError, match="head_timeout"):
        ConnectionLimits(head_timeout=0)
    with pytest.raises(ValueError, match="max_preauth"):
        ConnectionLimits(max_preauth=2.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="idle_timeout"):
        Tunables(idle_timeout=-1)


def test_a_flood_of_bad_connections_is_counted_in_full_and_logged_within_a_budget(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Every closed connection is counted; the log gets at most a burst per reason per
    minute (overlay.logbudget), so a flood of bad requests cannot flood the disk."""
    guard = ConnectionGuard(ConnectionLimits(), name="api")
    with caplog.at_level(logging.WARNING):
        for i in range(50):
            guard._count("head_timeout", ("10.0.0.1", i), "no head")
        guard._count("uri_too_long", ("10.0.0.2", 1), "10 KB")
    assert guard.closed["head_timeout"] == 50 and guard.closed["uri_too_long"] == 1
    lines = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert sum("head_timeout" in m for m in lines) == guard._log.burst
    assert sum("uri_too_long" in m for m in lines) == 1  # another reason has its own budget
