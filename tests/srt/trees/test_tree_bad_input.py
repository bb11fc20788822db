"""Malformed tree messages from the network are counted and rejected with a clear error; the
node keeps working."""

from __future__ import annotations

import asyncio

import pytest
from srt_helpers import Cluster, check_tree, start_cluster, wait_clean

from overlay import RemoteError, RouteError
from srt.ids import app_id
from srt.trees.types import BadTreeMessage, LoopRefused, TreeError

N = 6
ID = b"\x01" * 20


@pytest.fixture
async def cluster():
    c = await start_cluster(N)
    yield c
    await c.close()


BAD_REQUESTS = [
    ("srt.hb", {"trees": "nope"}, "heartbeat trees"),
    ("srt.hb", {"trees": [b"short"]}, "tree id must be 20 bytes"),
    ("srt.hb", {"trees": [ID] * 65}, "heartbeat trees"),
    ("srt.hb", {"trees": [ID], "url": 7}, "heartbeat url"),
    ("srt.leave", {"t": ID, "reason": "bored"}, "reason"),
    ("srt.moved", {"t": ID, "parent": [1, 2]}, "moved parent"),
    ("srt.adopt", {"t": 5}, "tree id"),
    ("srt.takeover", {"t": ID, "job": "x" * 300}, "takeover job"),
    ("srt.mc", {"t": ID, "mid": b"12345678", "msg": {}, "budget": float("nan")}, "budget"),
    ("srt.mc", {"t": ID, "mid": b"1", "msg": {}, "budget": 1.0}, "mid"),
    ("srt.mc", {"t": ID, "mid": b"12345678", "msg": [], "budget": 1.0}, "msg"),
    ("srt.qr", {"qid": b"12345678", "ok": "yes"}, "ok must be"),
    ("srt.qr", {"qid": b"12345678", "ok": True, "reply": 3}, "reply body"),
]


async def test_malformed_requests_are_rejected_and_counted(cluster: Cluster) -> None:
    a, b = cluster.mgrs[0], cluster.mgrs[1]
    for kind, payload, text in BAD_REQUESTS:
        before = b.bad_input[kind]
        with pytest.raises(RemoteError, match=text):
            await a.overlay.request(b.overlay.info, kind, payload)
        assert b.bad_input[kind] == before + 1, kind
    assert b.stats()["bad_input"]["srt.hb"] == 4


BAD_JOINS = [
    ({"k": "join", "job": "j", "jid": b"1", "prev": None, "url": "", "path": []}, "jid"),
    ({"k": "join", "job": "j", "jid": b"12345678", "path": []}, "without a sender"),
    ({"k": "join", "job": 3, "jid": b"12345678", "path": []}, "job"),
    ({"k": "join", "job": "j", "jid": b"12345678", "path": "x"}, "path"),
    ({"k": "join", "job": "j", "jid": b"12345678", "prev": ["x"], "path": []}, "prev"),
    ({"k": "what"}, "unknown routed message kind"),
]


async def test_malformed_routed_messages_fail_the_route_clearly(cluster: Cluster) -> None:
    tid = app_id("bad-joins", "mo")
    await cluster.converge([tid])
    root = cluster.true_root(tid)
    sender = next(m for m in cluster.mgrs if m is not root)
    for message, text in BAD_JOINS:
        # sent from a raw overlay node's point of view: the first tree node to see it objects
        with pytest.raises((RouteError, Exception), match=text):
            await sender.overlay.route("srt", tid, message)
    assert sum(m.stats()["bad_input"].get("join", 0) for m in cluster.mgrs) >= 5
    # a JOIN whose path already contains the receiving node is refused (loop rule), at the
    # root (deliver) and at a forwarder (forward)
    far = max(cluster.mgrs, key=lambda m: m.overlay.id ^ tid)
    forged = {
        "k": "join",
        "job": "j",
        "jid": b"12345678",
        "prev": far.overlay.info.to_wire(),
        "url": "",
        "path": [root.overlay.id.to_bytes(20, "big")],
    }
    with pytest.raises(LoopRefused, match="already passed through"):
        root._on_deliver(tid, forged)
    forged["path"] = [sender.overlay.id.to_bytes(20, "big")]
    with pytest.raises(LoopRefused, match="already passed through"):
        sender._on_forward(tid, forged, root.overlay.info)
    # a JOIN claiming to come from a node closer to the tree id than the receiver is refused
    forged["path"], forged["prev"] = [], root.overlay.info.to_wire()
    with pytest.raises(LoopRefused, match="not farther"):
        far._on_forward(tid, forged, sender.overlay.info)
    assert all(m.view(tid) is None for m in cluster.mgrs)  # nothing was created
    # the tree layer still works
    await asyncio.gather(*(m.join(tid, job="ok") for m in cluster.mgrs))
    members = {m.overlay.id for m in cluster.mgrs}
    await wait_clean(lambda: check_tree(cluster, tid, members), 10)


async def test_forged_child_closer_than_parent_is_refused(cluster: Cluster) -> None:
    tid = app_id("forged-child", "ned")
    await cluster.converge([tid])
    await asyncio.gather(*(m.join(tid, job="f") for m in cluster.mgrs))
    members = {m.overlay.id for m in cluster.mgrs}
    await wait_clean(lambda: check_tree(cluster, tid, members), 10)
    root = cluster.true_root(tid)
    far = max(cluster.mgrs, key=lambda m: m.overlay.id ^ tid)
    # the root asks a far node to adopt it: refused (would make the root a descendant)
    reply = await root.overlay.request(
        far.overlay.info, "srt.adopt", {"t": tid.to_bytes(20, "big"), "job": "f", "url": ""}
    )
    assert reply["ok"] is False and "not farther" in reply["reason"]
    # a heartbeat from the root to a far node claiming it as parent is answered "lost"
    reply = await root.overlay.request(
        far.overlay.info, "srt.hb", {"trees": [tid.to_bytes(20, "big")], "url": ""}
    )
    assert reply["lost"] == [tid.to_bytes(20, "big")]
    assert far.events["loops_refused"] >= 2
    assert check_tree(cluster, tid, members) == []


async def test_superseded_own_join_is_dropped_quietly(cluster: Cluster) -> None:
    tid = app_id("stale-join", "rae")
    await cluster.converge([tid])
    await asyncio.gather(*(m.join(tid, job="s") for m in cluster.mgrs))
    m = next(x for x in cluster.mgrs if not x.view(tid).is_root)
    m._table.trees[tid].old_jids.append(b"oldjoin!")  # an attempt we re-joined past
    stale = {"k": "join", "job": "s", "jid": b"oldjoin!", "prev": None, "url": "", "path": []}
    before = dict(m.bad_input)
    with pytest.raises(TreeError, match="superseded"):
        m._on_forward(tid, stale, m.view(tid).parent)
    assert dict(m.bad_input) == before and m.events["stale_joins"] == 1
    stale["jid"] = b"unknown!"
    with pytest.raises(BadTreeMessage, match="without a sender"):
        m._on_forward(tid, stale, m.view(tid).parent)
