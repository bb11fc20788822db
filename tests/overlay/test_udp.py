"""Real UDP on loopback (port 0): join, key-based routing, direct messages, failure
detection, partitions."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest
from overlay_helpers import FAST, SECRET, FilteredUdp, Recorder, start_cluster, stop_all, wait_for

from overlay import (
    MessageTooLarge,
    NodeInfo,
    OverlayNode,
    RemoteError,
    RequestTimeout,
    RouteError,
    key_for,
    node_id_for,
)
from overlay.ids import shared_prefix_digits

pytestmark = pytest.mark.timeout(60)


async def test_identity_is_sha1_of_address_and_overridable() -> None:
    a = OverlayNode(SECRET, domain="rack-7", tunables=FAST)
    b = OverlayNode(SECRET, node_id=12345, tunables=FAST)
    await a.start()
    await b.start()
    try:
        assert a.info.id == node_id_for("127.0.0.1", a.info.port)
        assert a.info.domain == "rack-7" and a.info.port > 0
        assert b.info.id == 12345
        assert hash(a.info) == hash(NodeInfo.from_wire(a.info.to_wire()))
    finally:
        await stop_all([a, b])


async def test_22_nodes_bootstrap_from_one_seed_and_agree_on_roots() -> None:
    nodes = await start_cluster(22)
    try:
        await wait_for(lambda: all(len(n.contacts()) >= 12 for n in nodes), 10)
        for text in ("job-a", "job-b", "wordcount@alice"):
            key = key_for(text)
            root = min(nodes, key=lambda n: n.id ^ key)
            results = await asyncio.gather(*(n.route("test", key, {"t": text}) for n in nodes))
            assert {r.node.id for r in results} == {root.id}
            assert all(r.status == "delivered" for r in results)
            assert max(r.hops for r in results) <= 3
            assert len(root._router.apps["test"].delivered) >= len(nodes)
            # Every node's local next-hop chain ends at the same root (used by tree builders).
            for n in nodes:
                cur, steps = n, 0
                while (nh := cur.next_hop(key)) is not None:
                    assert (nh.id ^ key) < (cur.id ^ key)  # strictly closer: no loops
                    cur = next(m for m in nodes if m.id == nh.id)
                    steps += 1
                assert cur is root and steps <= 3
        assert all(len(n.leaf_set()) == FAST.leaf_set_size for n in nodes)
    finally:
        await stop_all(nodes)


async def test_forward_upcall_can_change_and_stop_messages() -> None:
    nodes = await start_cluster(12)

    class Stopper(Recorder):
        def forward(self, key, message, next_hop):  # type: ignore[no-untyped-def]
            super().forward(key, message, next_hop)
            message = dict(message, path=[*message.get("path", []), next_hop.port])
            return None if message.get("stop_at_first") else message

    try:
        apps = {}
        for n in nodes:
            apps[n.id] = Stopper()
            n.register("s", apps[n.id])
        key = key_for("stop-test")
        root = min(nodes, key=lambda n: n.id ^ key)
        origin = max(nodes, key=lambda n: n.id ^ key)
        res = await origin.route("s", key, {"stop_at_first": True})
        assert res.status == "stopped" and res.node.id == origin.id and res.hops == 0
        res = await origin.route("s", key, {})
        assert res.status == "delivered" and res.node.id == root.id
        delivered = apps[root.id].delivered[-1][1]
        assert len(delivered["path"]) == res.hops and delivered["path"][-1] == root.info.port

        class Broken(Recorder):
            def deliver(self, key, message):  # type: ignore[no-untyped-def]
                raise RuntimeError("app bug")

        root.register("s", Broken())
        if res.hops:
            with pytest.raises(RouteError, match="deliver raised RuntimeError"):
                await origin.route("s", key, {}, timeout=3)
            assert root.stats()["drops"]["upcall_error"] == 1
    finally:
        await stop_all(nodes)


async def test_direct_requests_replies_errors_and_size_limit() -> None:
    nodes = await start_cluster(3)
    a, b, _ = nodes
    try:

        async def echo(payload, sender):  # type: ignore[no-untyped-def]
            return {"echo": payload["x"], "from": sender.port}

        def boom(payload, sender):  # type: ignore[no-untyped-def]
            raise ValueError("bad input")

        b.handle("echo", echo)
        a.handle("echo", echo)
        b.handle("boom", boom)
        assert await b.request(a.info, "echo", {"x": 1}) == {"echo": 1, "from": b.info.port}
        assert await a.request(b.info, "echo", {"x": 2}) == {"echo": 2, "from": a.info.port}
        assert (await a.request(b.info.address, "echo", {"x": 3}))["echo"] == 3
        assert (await a.request(b.info.id, "echo", {"x": 4}))["echo"] == 4
        with pytest.raises(RemoteError, match="no handler"):
            await a.request(b.info, "ehco", {})
        with pytest.raises(RemoteError, match="ValueError: bad input"):
            await a.request(b.info, "boom", {})
        with pytest.raises(MessageTooLarge):
            await a.request(b.info, "echo", {"x": b"z" * 9000})
        assert b.stats()["drops"].get("handler_error", 0) >= 2
        with pytest.raises(AttributeError):
            a.protocol.fnd_node  # noqa: B018 - rpcudp would have made this a remote call
        dead = OverlayNode(SECRET, tunables=FAST)
        await dead.start()
        addr = dead.info.address
        await dead.stop()
        with pytest.raises(RequestTimeout):
            await a.request(addr, "echo", {"x": 0}, timeout=0.1, retries=1)
        # kademlia's get/set keep working on top of the hardened protocol
        assert await a.set("greeting", "hello")
        assert await b.get("greeting") == "hello"
    finally:
        await stop_all(nodes)


async def test_killed_node_is_detected_and_routed_around() -> None:
    nodes = await start_cluster(20)
    failed: dict[int, list[int]] = {n.id: [] for n in nodes}
    for n in nodes:
        n.on_node_failed(lambda info, me=n.id: failed[me].append(info.id))
    try:
        await wait_for(lambda: all(len(n.contacts()) >= 12 for n in nodes), 10)
        key = key_for("victim-key")
        victim = min(nodes, key=lambda n: n.id ^ key)  # kill the root itself
        await victim.stop()
        alive = [n for n in nodes if n is not victim]
        # Routes are correct at once (the silent hop is skipped after its retries) ...
        res = await alive[0].route("test", key, {})
        new_root = min(alive, key=lambda n: n.id ^ key)
        assert res.node.id == new_root.id
        # ... and every node that knew the victim declares it failed and forgets it.
        knew = [n for n in alive if victim.id in n.membership.peers or victim.id in failed[n.id]]
        assert knew
        await wait_for(
            lambda: all(victim.id not in {c.id for c in n.contacts()} for n in alive), 10
        )
        await wait_for(lambda: all(victim.id in failed[n.id] for n in knew), 10)
        results = await asyncio.gather(*(n.route("test", key, {}) for n in alive))
        assert {r.node.id for r in results} == {new_root.id}
    finally:
        await stop_all(nodes)


async def test_graceful_leave_is_immediate() -> None:
    nodes = await start_cluster(8)
    try:
        await wait_for(lambda: all(len(n.contacts()) >= 6 for n in nodes), 10)
        leaver = nodes[3]
        await leaver.leave()
        rest = [n for n in nodes if n is not leaver]
        await wait_for(lambda: all(leaver.id not in {c.id for c in n.contacts()} for n in rest), 2)
        assert sum(n.stats()["events"].get("nodes_left", 0) for n in rest) >= 1
    finally:
        await stop_all(nodes)


async def test_a_leave_does_not_wait_on_a_contact_that_is_gone() -> None:
    """A contact that stopped silently (another logical agent of the same stopping process)
    never acknowledges the leave notice: the leave waits ``leave_wait`` for it, not the
    request timeout (60 s here), and the live contacts still drop the leaver."""
    slow_requests = dataclasses.replace(FAST, request_timeout=60.0, leave_wait=0.2)
    nodes = await start_cluster(6, tunables=slow_requests)
    try:
        await wait_for(lambda: all(len(n.contacts()) >= 4 for n in nodes), 10)
        gone, leaver = nodes[1], nodes[3]
        assert gone.id in {c.id for c in leaver.contacts()}
        await gone.stop()  # no leave notice: the others still list it
        await asyncio.wait_for(leaver.leave(), 10)
        rest = [n for n in nodes if n not in (gone, leaver)]
        await wait_for(lambda: all(leaver.id not in {c.id for c in n.contacts()} for n in rest), 5)
    finally:
        await stop_all(nodes)


async def test_partition_heals() -> None:
    net = FilteredUdp()
    nodes = await start_cluster(12, network=net)
    try:
        await wait_for(lambda: all(len(n.contacts()) >= 8 for n in nodes), 10)
        side_a, side_b = nodes[:6], nodes[6:]
        net.partition([n.info.port for n in side_a], [n.info.port for n in side_b])
        b_ids = {n.id for n in side_b}
        await wait_for(lambda: all(not ({c.id for c in n.contacts()} & b_ids) for n in side_a), 15)
        key = key_for("across")
        res = await side_a[0].route("test", key, {})
        assert res.node.id == min(side_a, key=lambda n: n.id ^ key).id
        net.heal()
        await wait_for(lambda: all(len(n.contacts()) >= 8 for n in nodes), 20)
        root = min(nodes, key=lambda n: n.id ^ key)
        # Contacts come back before every leaf set does; routing converges on the one true
        # root once maintenance has re-exchanged leaf sets across the healed cut.
        deadline = asyncio.get_running_loop().time() + 30
        while True:
            results = await asyncio.gather(*(n.route("test", key, {}) for n in nodes))
            roots = {r.node.id for r in results}
            if roots == {root.id} or asyncio.get_running_loop().time() > deadline:
                break
            await asyncio.sleep(0.2)
        assert roots == {root.id}
    finally:
        await stop_all(nodes)


def test_prefix_digits_match_xor_order() -> None:
    a, b = key_for("a"), key_for("b")
    assert shared_prefix_digits(a, a) == 40
    assert shared_prefix_digits(a, b) == 0 or f"{a:040x}"[0] == f"{b:040x}"[0]


async def test_on_node_joined_fires_for_newcomers() -> None:
    nodes = await start_cluster(4)
    seen: list[int] = []
    nodes[0].on_node_joined(lambda info: seen.append(info.id))
    newcomer = OverlayNode(SECRET, tunables=FAST, domain="rack-2")
    try:
        await newcomer.start([nodes[1].info.address])
        await wait_for(lambda: newcomer.info.id in seen, 5)
        assert {c.id for c in newcomer.contacts()} == {n.id for n in nodes}
        domains = {c.domain for c in nodes[0].contacts()}
        assert "rack-2" in domains  # failure-domain labels travel with NodeInfo
    finally:
        await newcomer.stop()
        await stop_all(nodes)
