"""Snapshot datagrams over real UDP and HTTP on loopback: a small snapshot reaches the parent's
handler as one authenticated overlay request, a large one (or one nobody answers) by HTTP, a
refusal reads as the HTTP door's, and hostile datagrams get 400 without reaching a handler."""

from __future__ import annotations

import dataclasses
from contextlib import asynccontextmanager
from types import SimpleNamespace
from typing import Any

import pytest
from dataplane_helpers import OTHER_SECRET, SECRET, Recorder, name, snap_of, wait_for
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from overlay import OverlayNode
from overlay import Tunables as OverlayTunables
from srt.config import Tunables
from srt.dataplane import DataPlaneClient, DataPlaneServer
from srt.dataplane.datagram import (
    DATAGRAM_KIND,
    SnapshotDatagrams,
    parse_request,
    request_of,
)
from srt.dataplane.name import POSITION_SNAPSHOT_PATH, REPLICA_SNAPSHOT_PATH, SNAPSHOT_PATH
from srt.dataplane.upstream import UpstreamSender
from srt.errors import DataPlaneError, Reject, SnapshotNameError

FAST = OverlayTunables(request_timeout=0.25, request_retries=1)


@asynccontextmanager
async def pair(*, handler: Any = None, serve_datagrams: bool = True, child_secret: bytes = SECRET):
    """A parent (overlay node + data-plane server with a Recorder) and a child overlay node
    with a data-plane client, all on loopback."""
    parent = OverlayNode(SECRET, tunables=FAST)
    child = OverlayNode(child_secret, tunables=FAST)
    server = DataPlaneServer(SECRET)
    rec = Recorder()
    server.on_snapshot(handler or rec)
    if serve_datagrams:
        parent.handle(DATAGRAM_KIND, server.serve_datagram)
    url = await server.start()
    await parent.start([])
    await child.start([])
    client = DataPlaneClient(SECRET)
    try:
        yield SimpleNamespace(
            parent=parent, child=child, server=server, rec=rec, client=client, url=url
        )
    finally:
        await client.close()
        await child.stop()
        await parent.stop()
        await server.stop()


def shortcut_of(child: OverlayNode, limit: int = 4096, timeout: float = 0.3) -> SnapshotDatagrams:
    return SnapshotDatagrams(
        lambda node, kind, payload, t: child.request(node, kind, payload, timeout=t, retries=0),
        limit=limit,
        timeout=timeout,
    )


def sender_of(client: DataPlaneClient, shortcut: SnapshotDatagrams, **kw) -> UpstreamSender:
    return UpstreamSender(
        client,
        job="wordcount",
        tree=0xABC,
        sender=7,
        tunables=Tunables(upstream_backoff=0.01, upstream_max_backoff=0.05),
        shortcut=shortcut,
        **kw,
    )


async def test_small_snapshots_go_by_datagram_and_large_ones_by_http() -> None:
    async with pair() as p:
        shortcut = shortcut_of(p.child, limit=1024)
        sender = sender_of(p.client, shortcut)
        try:
            sender.set_parent(p.url, via=p.parent.info)
            small = snap_of(["a", "b", "a"])
            large = snap_of([f"word-{i}" for i in range(2000)])
            assert len(small.to_bytes()) <= 1024 < len(large.to_bytes())
            sender.enqueue(0, small)
            sender.enqueue(1, large)
            sender.enqueue(2, snap_of([]))  # an empty epoch: the case this exists for
            assert await sender.flush(timeout=10)
            assert p.rec.merged[name(0)].to_dict() == {"a": 2, "b": 1}
            assert p.rec.merged[name(1)].to_dict() == {f"word-{i}": 1 for i in range(2000)}
            assert p.rec.merged[name(2)].to_dict() == {}
            counters = sender.pending()["counters"]
            assert counters["by_datagram"] == 2 and counters["merged"] == 3
            assert p.client.stats()["requests"] == 1  # only the large one was posted
            assert shortcut.counters["acknowledged"] == 2
            # the server counts the datagrams like posts
            assert p.server.stats()["results"] == {"merged": 3}
            # the same name again by datagram: a duplicate, merged once
            again = await shortcut.send(p.parent.info, name(0), small.to_bytes(), SNAPSHOT_PATH)
            assert again == "duplicate" and p.rec.calls == 4
        finally:
            await sender.close()


async def test_without_the_parents_node_every_snapshot_is_posted() -> None:
    async with pair() as p:
        shortcut = shortcut_of(p.child)
        sender = sender_of(p.client, shortcut, parent_url=p.url)  # no via: HTTP only
        try:
            sender.enqueue(0, snap_of(["x"]))
            assert await sender.flush(timeout=5)
            assert p.rec.merged[name(0)].to_dict() == {"x": 1}
            assert shortcut.counters["sent"] == 0 and p.client.stats()["requests"] == 1
        finally:
            await sender.close()


async def test_a_parent_without_the_handler_gets_the_snapshot_by_http() -> None:
    """A peer of an older version (no handler: the overlay answers an error) or a datagram
    lost on the way: no reply means the same attempt posts it."""
    async with pair(serve_datagrams=False) as p:
        shortcut = shortcut_of(p.child)
        sender = sender_of(p.client, shortcut)
        try:
            sender.set_parent(p.url, via=p.parent.info)
            sender.enqueue(0, snap_of(["x"]))
            assert await sender.flush(timeout=5)
            assert p.rec.merged[name(0)].to_dict() == {"x": 1}
            counters = sender.pending()["counters"]
            assert counters["datagram_unanswered"] == 1 and "by_datagram" not in counters
            assert shortcut.counters["no_reply"] == 1
        finally:
            await sender.close()


async def test_a_datagram_of_another_cluster_is_dropped_and_the_post_is_refused() -> None:
    """Authentication holds on both ways: the overlay drops the datagram unanswered (the MAC
    fails), and the fallback post fails its signature check (401), which is not retried."""
    async with pair(child_secret=OTHER_SECRET) as p:
        stranger = DataPlaneClient(OTHER_SECRET)
        try:
            shortcut = shortcut_of(p.child)
            assert await shortcut.send(p.parent.info, name(0), b"x", SNAPSHOT_PATH) is None
            assert p.parent.stats()["drops"].get("bad_mac", 0) >= 1
            with pytest.raises(DataPlaneError) as ei:
                await stranger.send_snapshot(p.url, name(0), snap_of(["x"]).to_bytes())
            assert ei.value.status == 401
            assert p.rec.calls == 0
        finally:
            await stranger.close()


async def test_a_refusal_reads_as_the_http_doors_refusal() -> None:
    async def refuse(n, body):
        raise Reject(409, "incompatible", "aggregate sum, expected count")

    async with pair(handler=refuse) as p:
        shortcut = shortcut_of(p.child)
        with pytest.raises(DataPlaneError) as by_datagram:
            await shortcut.send(p.parent.info, name(0), snap_of(["x"]).to_bytes(), SNAPSHOT_PATH)
        with pytest.raises(DataPlaneError) as by_post:
            await p.client.send_snapshot(p.url, name(0), snap_of(["x"]).to_bytes(), attempts=1)
        for e in (by_datagram.value, by_post.value):
            assert (e.status, e.reason, e.transient) == (409, "incompatible", False)
        assert p.server.stats()["rejected"] == {"incompatible": 2}


async def test_the_replica_door_gets_its_position_by_datagram() -> None:
    async with pair() as p:
        p.server.on_snapshot(p.rec, path=REPLICA_SNAPSHOT_PATH)
        shortcut = shortcut_of(p.child)
        body = snap_of(["r"]).to_bytes()
        path = f"{REPLICA_SNAPSHOT_PATH}?position=abc"
        assert await shortcut.send(p.parent.info, name(5), body, path) == "merged"
        assert p.rec.position == 0xABC


async def test_hostile_datagrams_get_400_and_never_reach_a_handler() -> None:
    async with pair() as p:
        good = request_of(name(0), SNAPSHOT_PATH, snap_of(["x"]).to_bytes())
        hostile: list[Any] = [
            {**good, "path": "/srt/v1/../admin"},
            {**good, "path": f"{REPLICA_SNAPSHOT_PATH}?position=00ab"},
            {**good, "path": f"{SNAPSHOT_PATH}?evil=1"},
            {**good, "body": "text, not bytes"},
            {**good, "name": ["wordcount", "0abc", "0", "7"]},  # a leading zero
            {**good, "name": ["wordcount", "abc", "0"]},
            {**good, "name": ["word%20count%", "abc", "0", "7"]},
            {"name": good["name"], "body": good["body"]},
        ]
        for payload in hostile:
            reply = await p.child.request(p.parent.info, DATAGRAM_KIND, payload)
            assert reply["status"] == 400 and reply["error"] == "bad_name", payload
        assert p.rec.calls == 0
        assert (await p.child.request(p.parent.info, DATAGRAM_KIND, good))["result"] == "merged"
        # a body that is no snapshot is the HTTP door's 422 (the sender resends at once)
        with pytest.raises(DataPlaneError) as corrupt:
            await shortcut_of(p.child).send(
                p.parent.info, name(1), b"not a snapshot", SNAPSHOT_PATH
            )
        assert (corrupt.value.status, corrupt.value.reason) == (422, "corrupt")


values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=30) | st.binary(max_size=30),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=20,
)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(
    payload=values
    | st.fixed_dictionaries(
        {
            "name": st.lists(st.text(max_size=45), min_size=4, max_size=4),
            "path": st.sampled_from([SNAPSHOT_PATH, POSITION_SNAPSHOT_PATH, "/x"]) | st.text(),
            "body": st.binary(max_size=50),
        }
    )
)
def test_any_payload_parses_or_is_a_bad_name(payload: Any) -> None:
    """The receiver's parse never raises anything but SnapshotNameError (the 400), and what
    it accepts has a canonical name whose wire form parses back to the same request."""
    try:
        door, position, n, body = parse_request(payload)
    except SnapshotNameError:
        return
    assert parse_request(request_of(n, door, body))[2:] == (n, body)
    assert position is None or door == REPLICA_SNAPSHOT_PATH


def test_limits_are_checked() -> None:
    with pytest.raises(ValueError):
        SnapshotDatagrams(lambda *a: None, limit=-1, timeout=1)  # type: ignore[arg-type,return-value]
    off = SnapshotDatagrams(lambda *a: None, limit=0, timeout=1)  # type: ignore[arg-type,return-value]
    assert not off.fits(1) and not off.fits(0)
    with pytest.raises(ValueError):
        dataclasses.replace(Tunables(), snapshot_datagram_bytes=-1)
    with pytest.raises(ValueError):
        dataclasses.replace(Tunables(), snapshot_datagram_timeout=0)


async def test_unanswered_datagrams_wait_no_longer_than_the_timeout() -> None:
    """A stopped parent node: the datagram waits its timeout, then the post goes at once."""
    async with pair() as p:
        shortcut = shortcut_of(p.child, timeout=0.2)
        sender = sender_of(p.client, shortcut)
        info = p.parent.info
        await p.parent.stop()
        try:
            sender.set_parent(p.url, via=info)
            sender.enqueue(0, snap_of(["late"]))
            await wait_for(lambda: name(0) in p.rec.merged, 5)
            assert shortcut.counters["no_reply"] == 1
        finally:
            await sender.close()
