"""SRT data plane over real loopback HTTP: round trip, authentication, replay, integrity
(422 + resend), size limit, duplicates, extra routes - every rejection counted, the server
still serving afterwards."""

from __future__ import annotations

import json
import random
import time
from collections import Counter

import aiohttp
import pytest
from aiohttp import web
from dataplane_helpers import OTHER_SECRET, SECRET, name, server_and_client, snap_of
from yarl import URL

from cbt import Snapshot
from srt.config import Tunables
from srt.dataplane import SNAPSHOT_PATH, DataPlaneClient, DataPlaneServer, SnapshotName
from srt.dataplane.auth import RequestAuth
from srt.errors import DataPlaneError, Reject, RetryLater

WORDS = ["a", "b", "a", "c", "a", "b"]


def signed_headers(
    n,
    body: bytes,
    secret: bytes = SECRET,
    *,
    digest_of: bytes | None = None,
    clock=time.time,
    path: str = SNAPSHOT_PATH,
) -> dict[str, str]:
    auth = RequestAuth(secret, clock=clock)
    fields = tuple(n.to_headers().values()) if n is not None else ("", "", "", "")
    headers = auth.sign_request("POST", path, fields, body if digest_of is None else digest_of)
    if n is not None:
        headers.update(n.to_headers())
    return headers


async def raw_post(url: str, headers: dict[str, str], body: bytes, path: str = SNAPSHOT_PATH):
    async with aiohttp.ClientSession() as s, s.post(url + path, headers=headers, data=body) as r:
        return r.status, await r.json(content_type=None)


async def test_round_trip_and_duplicate() -> None:
    async with server_and_client() as (server, client, rec, url):
        snap = snap_of(WORDS)
        assert await client.send_snapshot(url, name(3), snap.to_bytes()) == "merged"
        assert rec.merged[name(3)] == snap
        assert rec.merged[name(3)].to_dict() == Counter(WORDS)
        # the same name again: acknowledged as a duplicate, merged once
        assert await client.send_snapshot(url, name(3), snap.to_bytes()) == "duplicate"
        assert len(rec.merged) == 1
        # a unicode job name and 160-bit ids survive the headers
        n = name(2**62, sender=2**160 - 1, job="wörd count/β", tree=2**159 + 5)
        assert await client.send_snapshot(url, n, snap.to_bytes()) == "merged"
        assert n in rec.merged
        m = server.stats()
        assert m["results"] == {"merged": 2, "duplicate": 1}
        assert m["rejected_total"] == 0
        assert client.stats()["merged"] == 2


async def test_wrong_secret_stale_timestamp_and_replay_are_401_and_counted() -> None:
    async with server_and_client() as (server, client, rec, url):
        body = snap_of(WORDS).to_bytes()
        bad = DataPlaneClient(OTHER_SECRET, tunables=Tunables(send_backoff=0.01))
        with pytest.raises(DataPlaneError) as ei:
            await bad.send_snapshot(url, name(0), body)
        await bad.close()
        assert (ei.value.status, ei.value.reason) == (401, "bad_mac")
        assert bad.stats()["requests"] == 1  # permanent: not retried

        late = DataPlaneClient(SECRET, clock=lambda: time.time() - 120)
        with pytest.raises(DataPlaneError) as ei:
            await late.send_snapshot(url, name(0), body)
        await late.close()
        assert (ei.value.status, ei.value.reason) == (401, "stale_timestamp")

        headers = signed_headers(name(1), body)
        assert await raw_post(url, headers, body) == (200, {"result": "merged"})
        status, reply = await raw_post(url, headers, body)
        assert (status, reply["error"]) == (401, "replay")

        status, reply = await raw_post(url, name(5).to_headers(), body)  # no auth at all
        assert (status, reply["error"]) == (401, "unauthenticated")
        # a tampered name field breaks the MAC
        headers = signed_headers(name(6), body)
        headers["X-Elf-Epoch"] = "7"
        status, reply = await raw_post(url, headers, body)
        assert (status, reply["error"]) == (401, "bad_mac")

        assert server.stats()["rejected"] == {
            "bad_mac": 2,
            "stale_timestamp": 1,
            "replay": 1,
            "unauthenticated": 1,
        }
        assert set(rec.merged) == {name(1)}
        # still serving
        assert await client.send_snapshot(url, name(9), body) == "merged"


@pytest.mark.parametrize(
    "field,value",
    [
        ("X-Elf-Epoch", "-1"),
        ("X-Elf-Epoch", "01"),
        ("X-Elf-Epoch", "99999999999999999999"),
        ("X-Elf-Epoch", "1e3"),
        ("X-Elf-Tree", "0x12"),
        ("X-Elf-Tree", "ABC"),
        ("X-Elf-Tree", "f" * 41),
        ("X-Elf-Sender", ""),
        ("X-Elf-Job", "a b"),
        ("X-Elf-Job", "%ff%fe"),
        ("X-Elf-Job", "%0A"),
        ("X-Elf-Job", "x" * 5000),
    ],
)
async def test_malformed_names_are_400_and_counted(field: str, value: str) -> None:
    async with server_and_client() as (server, client, _rec, url):
        body = snap_of(WORDS).to_bytes()
        headers = signed_headers(name(1), body)
        headers[field] = value
        status, reply = await raw_post(url, headers, body)
        assert (status, reply["error"]) == (400, "bad_name")
        assert server.stats()["rejected"] == {"bad_name": 1}
        assert await client.send_snapshot(url, name(1), body) == "merged"


async def test_corrupt_body_is_422_and_the_client_resends() -> None:
    async with server_and_client() as (server, client, rec, url):
        snap = snap_of(WORDS * 50 + [f"k{i}" for i in range(300)])
        body = snap.to_bytes()
        # flipped in transit: the signed digest no longer matches
        flipped = bytearray(body)
        flipped[len(body) // 2] ^= 0x40
        status, reply = await raw_post(
            url, signed_headers(name(1), body, digest_of=body), bytes(flipped)
        )
        assert (status, reply["error"]) == (422, "corrupt")
        # signed as sent but not a snapshot (the sender's bytes are bad): the CRC check -> 422
        status, reply = await raw_post(url, signed_headers(name(1), bytes(flipped)), bytes(flipped))
        assert (status, reply["error"]) == (422, "corrupt")
        assert "checksum" in reply["detail"]
        assert rec.merged == {}

        class FlakyLink(DataPlaneClient):
            """Damages the first two bodies it transmits."""

            damaged = 0

            async def _transmit(self, method, url, headers, body):
                if self.damaged < 2:
                    self.damaged += 1
                    b = bytearray(body)
                    b[7 * self.damaged] ^= 0xFF
                    body = bytes(b)
                return await super()._transmit(method, url, headers, body)

        flaky = FlakyLink(SECRET, tunables=Tunables(send_backoff=0.001))
        assert await flaky.send_snapshot(url, name(2), body) == "merged"
        await flaky.close()
        assert flaky.stats()["resends"] == 2
        assert rec.merged[name(2)] == snap
        assert server.stats()["rejected"] == {"corrupt": 4}

        # a sender whose bytes are always bad gives up after its attempts
        with pytest.raises(DataPlaneError) as ei:
            await client.send_snapshot(url, name(3), bytes(flipped), attempts=2)
        assert ei.value.status == 422
        assert client.stats()["resends"] == 2


async def test_size_limit_is_413_and_not_retried() -> None:
    async with server_and_client(max_body=2000) as (server, client, _rec, url):
        big = snap_of([f"key-{i}" for i in range(3000)]).to_bytes()
        assert len(big) > 2000
        with pytest.raises(DataPlaneError) as ei:
            await client.send_snapshot(url, name(1), big)
        assert (ei.value.status, ei.value.reason) == (413, "too_large")
        assert client.stats()["requests"] == 1
        small = snap_of(WORDS).to_bytes()
        assert await client.send_snapshot(url, name(1), small) == "merged"
        assert server.stats()["rejected"] == {"too_large": 1}


async def test_handler_failures_answer_without_crashing() -> None:
    async with server_and_client() as (server, client, rec, url):
        body = snap_of(WORDS).to_bytes()
        calls: Counter[int] = Counter()

        async def handler(n, data):
            calls[n.epoch] += 1
            if n.epoch == 1:
                raise RuntimeError("boom")
            if n.epoch == 2 and calls[2] <= 2:
                raise RetryLater("unknown_tree", "not joined yet")
            if n.epoch == 3:
                raise Reject(409, "not_child")
            if n.epoch == 4:
                return "bogus"
            return await rec(n, data)

        server.on_snapshot(handler)
        with pytest.raises(DataPlaneError) as ei:
            await client.send_snapshot(url, name(1), body, attempts=2)
        assert (ei.value.status, ei.value.reason) == (500, "handler_error")
        assert await client.send_snapshot(url, name(2), body) == "merged"  # after 503s
        with pytest.raises(DataPlaneError) as ei:
            await client.send_snapshot(url, name(3), body)
        assert (ei.value.status, ei.value.reason) == (409, "not_child")
        with pytest.raises(DataPlaneError) as ei:
            await client.send_snapshot(url, name(4), body, attempts=1)
        assert ei.value.status == 500
        rejected = server.stats()["rejected"]
        assert rejected == {"handler_error": 3, "unknown_tree": 2, "not_child": 1}
        assert set(rec.merged) == {name(2)}


async def test_routes_and_post_json() -> None:
    async with server_and_client() as (server, client, _rec, url):
        seen = []

        async def echo(request: web.Request):
            body = await request.json()
            seen.append(body)
            if body.get("fail"):
                raise Reject(400, "bad_request", "told to fail")
            return {"echo": body, "path": request.path}

        server.route("POST", "/srt/v1/echo", echo)
        assert await client.post_json(url, "/srt/v1/echo", {"x": [1, 2]}) == {
            "echo": {"x": [1, 2]},
            "path": "/srt/v1/echo",
        }
        with pytest.raises(DataPlaneError) as ei:
            await client.post_json(url, "/srt/v1/echo", {"fail": True})
        assert (ei.value.status, ei.value.reason, ei.value.detail) == (
            400,
            "bad_request",
            "told to fail",
        )
        with pytest.raises(DataPlaneError) as ei:
            await client.post_json(url, "/srt/v1/nowhere", {})
        assert ei.value.status == 404
        status, reply = await raw_post(url, {}, b"{}", path="/srt/v1/echo")
        assert (status, reply["error"]) == (401, "unauthenticated")
        status, reply = await raw_post(
            url,
            signed_headers(None, b"{}", OTHER_SECRET, path="/srt/v1/echo"),
            b"{}",
            path="/srt/v1/echo",
        )
        assert (status, reply["error"]) == (401, "bad_mac")
        assert len(seen) == 2
        assert server.stats()["rejected"] == {
            "bad_request": 1,
            "not_found": 1,
            "unauthenticated": 1,
            "bad_mac": 1,
        }


async def test_unsigned_replies_and_dead_servers_are_not_acknowledgements() -> None:
    async def forged(request):
        return web.json_response({"result": "merged"})

    app = web.Application()
    app.router.add_post(SNAPSHOT_PATH, forged)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    client = DataPlaneClient(SECRET, tunables=Tunables(send_backoff=0.001, send_attempts=2))
    try:
        with pytest.raises(DataPlaneError) as ei:
            await client.send_snapshot(f"http://127.0.0.1:{port}", name(1), b"x")
        assert ei.value.reason == "unauthenticated_reply"
    finally:
        await runner.cleanup()
    with pytest.raises(DataPlaneError) as ei:  # nobody listens there any more
        await client.send_snapshot(f"http://127.0.0.1:{port}", name(1), b"x")
    assert (ei.value.status, ei.value.reason) == (0, "refused")  # nothing listens: refused
    await client.close()
    with pytest.raises(RuntimeError):
        await client.send_snapshot(f"http://127.0.0.1:{port}", name(1), b"x")


async def test_server_lifecycle_and_config_errors() -> None:
    with pytest.raises(ValueError):
        DataPlaneServer(b"short")
    server = DataPlaneServer(SECRET)
    with pytest.raises(ValueError):
        server.route("POST", SNAPSHOT_PATH, None)  # type: ignore[arg-type]
    url = await server.start()
    assert URL(url).port == server.port > 0
    with pytest.raises(RuntimeError):
        await server.start()
    client = DataPlaneClient(SECRET, tunables=Tunables(send_attempts=1))
    with pytest.raises(DataPlaneError) as ei:  # no handler registered yet: retryable 503
        await client.send_snapshot(url, name(1), snap_of(WORDS).to_bytes())
    assert (ei.value.status, ei.value.reason) == (503, "no_handler")
    await client.close()
    await server.stop()
    await server.stop()  # idempotent
    assert Snapshot.from_bytes(snap_of(WORDS).to_bytes()).to_dict() == Counter(WORDS)


async def test_random_garbage_requests_are_refused_and_the_server_keeps_serving() -> None:
    rng = random.Random(4)
    header_names = [
        "X-Elf-Job",
        "X-Elf-Tree",
        "X-Elf-Epoch",
        "X-Elf-Sender",
        "X-Elf-Timestamp",
        "X-Elf-Nonce",
        "X-Elf-Content-Sha256",
        "X-Elf-Signature",
    ]
    alphabet = "0123456789abcdefXYZ%-_ ./"
    async with server_and_client() as (server, client, rec, url):
        body = snap_of(WORDS).to_bytes()
        statuses = Counter()
        async with aiohttp.ClientSession() as s:
            for i in range(60):
                headers = signed_headers(name(i), body) if rng.random() < 0.5 else {}
                for h in rng.sample(header_names, rng.randint(1, 4)):
                    headers[h] = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 70)))
                headers = {k: v.strip() for k, v in headers.items()}
                data = bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 64)))
                method = rng.choice(["POST", "POST", "PUT", "GET"])
                async with s.request(method, url + SNAPSHOT_PATH, headers=headers, data=data) as r:
                    statuses[r.status] += 1
                    assert r.status in (400, 401, 405), await r.text()
        m = server.stats()
        assert m["rejected_total"] == m["requests"] == 60 == sum(statuses.values())
        assert rec.calls == 0
        assert await client.send_snapshot(url, name(1), body) == "merged"


async def test_query_strings_are_signed_and_routes_can_be_added_after_start() -> None:
    async with server_and_client() as (server, client, _rec, url):

        async def q(request: web.Request):
            return {"q": request.query.get("x"), "body": await request.json()}

        server.route("POST", "/srt/v1/q", q)

        async def named(request: web.Request):
            n = SnapshotName.from_headers(request.headers)  # bad name headers -> 400
            return {"epoch": n.epoch, "keys": len(Snapshot.from_bytes(await request.read()))}

        server.route("POST", "/srt/v1/named", named)
        status, data = await client.request(
            "POST", url, "/srt/v1/named", snap_of(WORDS).to_bytes(), name=name(4)
        )
        assert (status, json.loads(data)) == (200, {"epoch": 4, "keys": 3})
        status, data = await client.request("POST", url, "/srt/v1/named", b"junk", name=name(4))
        assert (status, json.loads(data)["error"]) == (422, "corrupt")
        status, data = await client.request("POST", url, "/srt/v1/named", b"junk")
        assert (status, json.loads(data)["error"]) == (400, "bad_name")
        assert await client.post_json(url, "/srt/v1/q?x=a%20b", {"n": 1}) == {
            "q": "a b",
            "body": {"n": 1},
        }
        # the query is covered by the MAC: changing it in transit breaks authentication
        headers = signed_headers(None, b"{}", path="/srt/v1/q?x=1")
        status, reply = await raw_post(url, headers, b"{}", path="/srt/v1/q?x=2")
        assert (status, reply["error"]) == (401, "bad_mac")


async def test_the_client_keeps_its_connection_alive() -> None:
    async with server_and_client() as (server, client, _rec, url):
        peers = set()

        async def who(request: web.Request):
            peers.add(request.transport.get_extra_info("peername"))
            return {}

        server.route("POST", "/srt/v1/who", who)
        for _ in range(10):
            await client.post_json(url, "/srt/v1/who", {})
        assert len(peers) == 1
