"""Hostile datagrams over real UDP: all are dropped, counted by reason, never raise into the
event loop, never reach a handler — and the node keeps serving."""

from __future__ import annotations

import hashlib
import hmac
import os
import socket
import time

import msgpack
import pytest
from overlay_helpers import FAST, SECRET, start_cluster, stop_all, wait_for

from overlay import OverlayNode
from overlay.wire import HEADER, REQUEST, VERSION, Codec

pytestmark = pytest.mark.timeout(60)


def _frame(payload: bytes, secret: bytes = SECRET, ts: float | None = None) -> bytes:
    ts_ms = int((time.time() if ts is None else ts) * 1000)
    signed = HEADER.pack(VERSION, REQUEST, ts_ms, os.urandom(12)) + payload
    return signed + hmac.new(secret, signed, hashlib.sha256).digest()


async def test_bad_datagrams_are_dropped_and_counted() -> None:
    nodes = await start_cluster(3)
    target, other = nodes[0], nodes[1]
    stored_before = dict(target.protocol.storage.data)
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    addr = target.info.address
    sender = ["x" * 20, "127.0.0.1", 9, "d"]
    sender[0] = b"\x01" * 20
    good = Codec(SECRET, clock=time.time)
    try:
        rnd = __import__("random").Random(7)
        for _ in range(50):
            sock.sendto(bytes(rnd.randrange(256) for _ in range(rnd.randrange(0, 300))), addr)
        wrong = Codec(b"another-secret-0123456789abcdef!", clock=time.time)
        store = [b"\x00" * 8, "store", sender, [b"k" * 20, "evil"]]
        sock.sendto(wrong.encode(REQUEST, store), addr)  # bad MAC
        valid = good.encode(REQUEST, [b"\x00" * 8, "ping", sender, [[]]])
        sock.sendto(valid, addr)
        sock.sendto(valid, addr)  # replay
        sock.sendto(b"\x00" * 9000, addr)  # oversized
        for name in ("stun", "__init__", "rpc_store", "welcome_if_new"):  # not allow-listed
            sock.sendto(good.encode(REQUEST, [b"\x00" * 8, name, sender, []]), addr)
        sock.sendto(_frame(b"\xc1\xc1garbage"), addr)  # authentic but not msgpack
        sock.sendto(_frame(msgpack.packb({"not": "a list"})), addr)  # authentic, wrong shape
        stale = _frame(msgpack.packb([b"\x00" * 8, "ping", sender, [[]]]), ts=time.time() - 300)
        sock.sendto(stale, addr)
        bad_sender = [b"\x00" * 8, "ping", ["short-id", "h", 0, "d"], [[]]]
        sock.sendto(good.encode(REQUEST, bad_sender), addr)

        def drops() -> dict[str, int]:
            return target.stats()["drops"]

        await wait_for(
            lambda: (
                all(
                    drops().get(reason, 0) >= 1
                    for reason in (
                        "bad_mac",
                        "replay",
                        "too_large",
                        "malformed",
                        "unknown_rpc",
                        "stale_timestamp",
                    )
                )
                and drops().get("unknown_rpc", 0) >= 4
            ),
            5,
        )
        assert drops()["bad_mac"] >= 40  # random bytes almost all fail the MAC check
        assert "internal_error" not in drops()
        assert dict(target.protocol.storage.data) == stored_before
        # still serving
        other.handle("hi", lambda payload, sender: {"ok": True})
        assert await target.request(other.info, "hi", {}) == {"ok": True}
        key = target.info.id
        res = await other.route("test", key, {})
        assert res.node.id == target.info.id
    finally:
        sock.close()
        await stop_all(nodes)


async def test_nodes_with_another_secret_cannot_join() -> None:
    nodes = await start_cluster(2)
    intruder = OverlayNode(b"not-the-cluster-secret-000000000", tunables=FAST)
    try:
        await intruder.start([nodes[0].info.address])
        assert intruder.contacts() == []
        assert all(intruder.info.id not in {c.id for c in n.contacts()} for n in nodes)
        assert nodes[0].stats()["drops"]["bad_mac"] >= 1
    finally:
        await intruder.stop()
        await stop_all(nodes)


def test_secret_must_be_long_enough() -> None:
    with pytest.raises(ValueError):
        OverlayNode(b"short")
