"""UpstreamSender over real loopback HTTP: ordered, acknowledged delivery; a parent that is down
for a while; a parent change (re-targeting the unacknowledged snapshots); status."""

from __future__ import annotations

import pytest
from dataplane_helpers import SECRET, Recorder, name, snap_of, wait_for

from srt.config import Tunables
from srt.dataplane import REPLICA_SNAPSHOT_PATH, DataPlaneClient, DataPlaneServer
from srt.dataplane.upstream import UpstreamSender


async def start_parent(port: int = 0) -> tuple[DataPlaneServer, Recorder, list, str]:
    server = DataPlaneServer(SECRET, port=port)
    rec = Recorder()
    order: list[int] = []

    async def handler(n, body):
        order.append(n.epoch)
        return await rec(n, body)

    server.on_snapshot(handler)
    url = await server.start()
    return server, rec, order, url


def new_sender(client, url=None, **kw) -> UpstreamSender:
    return UpstreamSender(
        client,
        job="wordcount",
        tree=0xABC,
        sender=7,
        parent_url=url,
        tunables=Tunables(upstream_backoff=0.01, upstream_max_backoff=0.05),
        **kw,
    )


async def test_delivers_in_order_and_forgets_only_after_ack() -> None:
    server, rec, order, url = await start_parent()
    client = DataPlaneClient(SECRET)
    sender = new_sender(client, url)
    try:
        for e in (2, 0, 1):
            sender.enqueue(e, snap_of([f"w{e}"]))
        sender.enqueue(0, snap_of(["ignored"]))  # a queued name is sent once
        assert await sender.flush(timeout=5)
        assert set(rec.merged) == {name(0), name(1), name(2)}
        assert rec.merged[name(0)].to_dict() == {"w0": 1}
        assert order == sorted(order)
        p = sender.pending()
        assert p["queued"] == [] and p["in_flight"] is None and p["counters"]["merged"] == 3
        with pytest.raises(ValueError):
            sender.enqueue(-1, b"")
    finally:
        await sender.close()
        await client.close()
        await server.stop()


async def test_survives_a_parent_that_is_down_for_a_while() -> None:
    server, rec, order, url = await start_parent()
    port = server.port
    await server.stop()  # the parent goes down
    client = DataPlaneClient(SECRET, tunables=Tunables(request_timeout=1.0))
    sender = new_sender(client, url)
    try:
        for e in range(4):
            sender.enqueue(e, snap_of(["x"] * (e + 1)))
        await wait_for(lambda: sender.counters["failed_attempts"] >= 3)
        p = sender.pending()
        assert p["queued"] == [0, 1, 2, 3]
        assert p["last_error"] and "refused" in p["last_error"]  # nothing listens there
        assert not await sender.flush(timeout=0.05)
        server, rec, order, url2 = await start_parent(port)  # back on the same address
        assert url2 == url
        assert await sender.flush(timeout=5)
        assert order == [0, 1, 2, 3]
        assert {n.epoch: s["x"] for n, s in rec.merged.items()} == {0: 1, 1: 2, 2: 3, 3: 4}
        assert sender.pending()["last_error"] is None
    finally:
        await sender.close()
        await client.close()
        await server.stop()


async def test_parent_change_retargets_unacknowledged_snapshots() -> None:
    old, old_rec, _, old_url = await start_parent()
    new, new_rec, new_order, new_url = await start_parent()
    client = DataPlaneClient(SECRET, tunables=Tunables(request_timeout=1.0))
    sender = new_sender(client, old_url)
    try:
        sender.enqueue(0, snap_of(["a"]))
        assert await sender.flush(timeout=5)
        await old.stop()  # the old parent fails
        for e in (1, 2, 3):
            sender.enqueue(e, snap_of(["b"]))
        await wait_for(lambda: sender.counters["failed_attempts"] >= 1)
        sender.set_parent(None)  # re-joining: hold everything
        assert sender.pending()["parent"] is None
        sender.set_parent(new_url)
        assert await sender.flush(timeout=5)
        assert set(old_rec.merged) == {name(0)}
        assert set(new_rec.merged) == {name(1), name(2), name(3)}
        assert new_order == [1, 2, 3]
        assert sender.counters["retargets"] == 2
    finally:
        await sender.close()
        await client.close()
        await new.stop()
    with pytest.raises(RuntimeError):
        sender.enqueue(9, b"x")
    assert sender.pending()["queued"] == []


async def test_bad_parent_urls_are_refused_up_front() -> None:
    client = DataPlaneClient(SECRET)
    with pytest.raises(ValueError):
        new_sender(client, "not a url")
    sender = new_sender(client)
    with pytest.raises(ValueError):
        sender.set_parent("ftp://example.org/")
    sender.enqueue(0, b"held")  # no parent: held, not sent
    assert not await sender.flush(timeout=0.02)
    assert sender.pending()["queued"] == [0] and sender.pending()["in_flight"] is None
    await sender.close()
    await client.close()


async def test_send_with_full_names_sets_and_checks_the_sender() -> None:
    server, rec, _order, url = await start_parent()
    client = DataPlaneClient(SECRET)
    sender = UpstreamSender(client, job="wordcount", tree=0xABC, parent_url=url)
    try:
        with pytest.raises(ValueError):
            sender.enqueue(0, b"x")  # no sender id yet
        sender.send(name(0), snap_of(["a"]))
        assert sender.sender == 7
        with pytest.raises(ValueError):
            sender.send(name(1, sender=8), b"x")
        with pytest.raises(ValueError):
            sender.send(name(1, tree=0xABD), b"x")
        sender.enqueue(1, snap_of(["b"]))
        assert await sender.flush(timeout=5)
        assert set(rec.merged) == {name(0), name(1)}
    finally:
        await sender.close()
        await client.close()
        await server.stop()


async def test_a_replica_sender_uses_the_replica_path_and_keeps_at_most_its_bound() -> None:
    """A sender to a replica of the parent's position posts to the replica snapshot path (the
    parent's own handler never sees it) and, while the replica is down, keeps only the newest
    ``max_queued`` epochs, counting the ones it dropped."""
    server = DataPlaneServer(SECRET)
    primary, replica = Recorder(), Recorder()
    server.on_snapshot(primary)
    server.on_snapshot(replica, path=REPLICA_SNAPSHOT_PATH)
    url = await server.start()
    port = server.port
    await server.stop()  # the replica is down while epochs 0..5 are queued
    client = DataPlaneClient(SECRET, tunables=Tunables(request_timeout=1.0))
    sender = new_sender(client, url, path=REPLICA_SNAPSHOT_PATH, max_queued=3)
    try:
        for e in range(6):
            sender.enqueue(e, snap_of([f"w{e}"]))
        queued = sender.pending()["queued"]
        assert len(queued) <= 3 and queued[-2:] == [4, 5], queued
        assert sender.counters["dropped"] == 6 - len(queued)
        server = DataPlaneServer(SECRET, port=port)
        server.on_snapshot(primary)
        server.on_snapshot(replica, path=REPLICA_SNAPSHOT_PATH)
        assert await server.start() == url
        assert await sender.flush(timeout=5)
        assert {n.epoch for n in replica.merged} == set(queued)
        assert not primary.merged
        with pytest.raises(ValueError):
            server.on_snapshot(primary, path="/srt/v1/other")
        with pytest.raises(ValueError):
            server.route("POST", REPLICA_SNAPSHOT_PATH, primary)
    finally:
        await sender.close()
        await client.close()
        await server.stop()


async def test_take_queued_up_to_an_epoch_keeps_the_later_ones_for_the_parent() -> None:
    """``take_queued(upto)`` removes the epochs ``<= upto`` (oldest first) and keeps the
    rest, which the next parent gets; ``take_queued()`` takes everything."""
    server, _rec, order, url = await start_parent()
    client = DataPlaneClient(SECRET)
    sender = new_sender(client)  # no parent yet: everything stays queued
    try:
        for e in (3, 4, 5, 6):
            sender.enqueue(e, snap_of([f"w{e}"]))
        assert [e for e, _ in sender.take_queued(4)] == [3, 4]
        assert sender.take_queued(2) == []
        assert sender.pending()["queued"] == [5, 6]
        sender.set_parent(url)
        assert await sender.flush(timeout=5)
        assert order == [5, 6]
        sender.enqueue(7, snap_of(["w7"]))
        sender.set_parent(None)
        assert [e for e, _ in sender.take_queued()] == [7]
        assert sender.counters["taken"] == 3
    finally:
        await sender.close()
        await client.close()
        await server.stop()
