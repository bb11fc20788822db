"""Hop benchmark: the CPU one multicast hop and one snapshot hop cost, from the real code paths.
Prints one JSON document on stdout.

    python bench/hop_bench.py            # 5 rounds; snapshots of 10, 1,000 and 10,000 keys
    python bench/hop_bench.py --quick    # 3 rounds, fewer iterations (well under a minute)
    python bench/hop_bench.py --profile  # no JSON: cProfile tops of each hop, as text

A *hop* is one tree edge, parent → child for a multicast, child → parent for a snapshot; its
CPU is everything both ends spend on that edge. Every figure is measured two ways, the median
of several rounds:

* ``compute``: the pure computation of one hop, calling the real functions in a loop (CPU of
  this thread, ``time.thread_time``), each part in its own loop so its share is visible.
* ``end_to_end``: real nodes in this process over loopback sockets, N multicasts or N
  snapshots; the process's CPU (``time.process_time``) over the run, minus the idle CPU of the
  same nodes over the same wall time measured right after (heartbeats, probes), divided by the
  hops made. The heap is frozen once the nodes are up, as the daemon does.

**Multicast hop** (goal ≤ 40 µs of CPU, the issue "A lightweight agent"). What one edge of
``TreeManager.multicast`` costs: the parent signs the ``srt.mc`` copy for the child
(``overlay.wire.Codec.encode``: msgpack + HMAC-SHA256, as ``OverlayNode.request_now`` sends
it); the child verifies and decodes it (``Codec.decode``: MAC, timestamp, replay cache,
msgpack, shape), validates the sender and the message (``NodeInfo.from_wire``,
``srt.trees.wire``) and looks up its children (``srt.trees.state.view_of``, what
``TreeManager.view`` returns); it signs its confirmation and the parent verifies and decodes
it. The message is the one a master multicasts every epoch (``{"kind": "empty", "epoch",
"sent_at"}``). Baseline in the same run: the same four encodes/decodes with the simulator's
``overlay.wire.InProcessCodec`` (same msgpack payloads and shape checks; no header, HMAC, nonce
or replay cache) and, alone, ``hmac.digest`` of the four datagrams - the share authentication
takes. ``end_to_end``: ``nodes`` real ``OverlayNode``\\s over UDP with a ``TreeManager`` each
(production tunables) on one tree; the root multicasts, and every multicast makes
``nodes - 1`` hops (the root's own per-multicast work is spread over them).

**Snapshot hop** (goal ≤ 150 µs of CPU for a 1,000-key snapshot). What one edge of the
roll-up costs: the child encodes its epoch's snapshot with its lineage
(``Snapshot.to_bytes``, ``srt.dataplane.lineage.encode``) and signs the request
(``RequestAuth.sign_request``: SHA-256 of the body + HMAC); the parent verifies it
(``SnapshotName.from_headers``, ``verify_headers``, ``body_digest``, ``check_replay``),
decodes it (``lineage.decode``, ``Snapshot.from_bytes``), merges it with its own epoch
snapshot in its barrier (``EpochCombiner.offer_child``: admission, ``Snapshot.merge``, the
level step, the emit) and signs its acknowledgement, which the child verifies. A node with a
child does this once per epoch and child, then encodes and sends its merged epoch up: the next
hop. Count aggregator, string keys, the child's and the parent's snapshots over the same keys
(the merge has as many keys as each). ``next_hop_encode_us`` (not in the sum: it is the next
hop's encode) is the parent encoding the epochs it merged, with the round's snapshots still
alive: the same work as ``child_encode`` on a grown heap; ``minor_page_faults_per_hop`` shows
what differs. Baseline in the same run: the same hop with 10 and 10,000 keys, so the fixed
cost per hop (``fixed_us``) and the cost per key (``per_key_us``) are visible.
``end_to_end``: a leaf, an inner node and a root (real ``DataPlaneServer``\\s,
``DataPlaneClient``\\s, ``UpstreamSender``\\s and ``EpochCombiner``\\s on aiohttp over
loopback TCP, wired as an agent wires them): N epochs leave the leaf, each is merged and sent
on by the inner node and merged by the root - two hops per epoch.

What stands between the figures and the goals is the business of ``--profile``; the earlier
whole-agent figures (212-245 µs of CPU per agent per multicast, ~0.8 ms per snapshot hop) are
in ``docs/agent-runtime.md`` and ``bench/srt_bench.py`` (``multicast_cpu``).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import functools
import gc
import hmac
import io
import json
import os
import platform
import pstats
import random
import resource
import statistics
import sys
import time
from collections.abc import Callable, Collection
from typing import Any

from cbt import CompressedBufferTree, Snapshot
from overlay import NodeInfo, OverlayNode, Tunables, node_id_for
from overlay.wire import REQUEST, RESPONSE, Codec, InProcessCodec
from srt import (
    DataPlaneClient,
    DataPlaneServer,
    EpochCombiner,
    GroupByOperator,
    SnapshotName,
    TreeManager,
    UpstreamSender,
    app_id,
    snapshot_handler,
)
from srt import Tunables as SrtTunables
from srt.dataplane import SNAPSHOT_PATH, name_fields
from srt.dataplane import lineage as lin
from srt.dataplane.auth import RequestAuth, body_digest
from srt.dataplane.compat import Expectation
from srt.trees import wire as tw
from srt.trees.state import TreeState, view_of
from srt.trees.types import MEMBER

SECRET = b"hop-bench-secret-0123456789abcdef"
MULTICAST_GOAL_US = 40.0
SNAPSHOT_GOAL_US = 150.0
GOAL_KEYS = 1000
JOB = "bench"
TREE = app_id(JOB, "bench")


def us(seconds: float, n: int) -> float:
    return round(seconds * 1e6 / n, 2)


def ratio(figure: float, goal: float) -> float:
    return round(figure / goal, 2)


SETTLE = [gc.collect]  # before each timed loop (emptied by --profile: not the hop's cost)


def settle() -> None:
    for step in SETTLE:
        step()


FAULTS: dict[str, int] = {}  # minor page faults of the last timed loop of each name


def timed(fn: Callable[[], Any]) -> float:
    """CPU seconds of this thread that ``fn()`` takes (after a collection, so rounds start
    alike); its minor page faults go to ``FAULTS[fn.__name__]``."""
    settle()
    f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    t0 = time.thread_time()
    fn()
    cpu = time.thread_time() - t0
    FAULTS[fn.__name__] = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0
    return cpu


def medians(rounds: list[dict[str, float]]) -> dict[str, float]:
    return {k: round(statistics.median(r[k] for r in rounds), 2) for k in rounds[0]}


# ---- multicast hop: compute ------------------------------------------------------------------


def mc_message(epoch: int) -> dict[str, Any]:
    """The multicast a master sends every epoch (agent/runtime/job/pipeline.py + control.py)."""
    return {"kind": "empty", "epoch": epoch, "sent_at": time.time()}


def mc_request(mid: bytes, info_wire: list[Any], epoch: int) -> list[Any]:
    """The ``request`` RPC payload carrying one ``srt.mc`` copy, as ``Multicaster`` builds it
    and ``OverlayNode.request_now`` frames it."""
    payload = {"t": tw.id_bytes(TREE), "mid": mid, "msg": mc_message(epoch), "budget": 4.0}
    return [os.urandom(8), "request", info_wire, [tw.MC, payload]]


def mc_parts(codec_class: type[Codec], n: int, tunables: Tunables) -> dict[str, float]:
    """One round: µs per hop of each part, ``n`` hops, with ``codec_class`` at both ends."""

    def make() -> Codec:
        return codec_class(
            SECRET,
            max_datagram=tunables.max_datagram,
            max_skew=tunables.max_skew,
            clock=time.time,
        )

    parent, child = make(), make()
    me = NodeInfo(node_id_for("127.0.0.1", 7401), "127.0.0.1", 7401)
    kids = [NodeInfo(node_id_for("127.0.0.1", p), "127.0.0.1", p) for p in (7402, 7403)]
    state = TreeState(TREE, JOB, True, MEMBER, parent=me, parent_url="http://127.0.0.1:1")
    state.children = {k.id: k for k in kids}
    info_wire = me.to_wire()
    mid = os.urandom(8)
    reply_body = {"reached": 1, "missing": []}
    requests: list[Any] = []
    replies: list[Any] = []

    def encode_requests() -> None:
        for i in range(n):
            requests.append(parent.encode(REQUEST, mc_request(mid, info_wire, i)))

    def decode_requests() -> None:
        for data in requests:
            msg_id, _rpc, sender_raw, args = child.decode(data).payload
            NodeInfo.from_wire(sender_raw)
            payload = tw.want_dict(args[1], "multicast")
            tw.tree_id(payload.get("t"))
            tw.token(payload.get("mid"), "multicast mid")
            tw.want_dict(payload.get("msg"), "multicast msg")
            float(payload["budget"])
            view = view_of(state, me)  # TreeManager.view(tid): the children to copy to
            list(view.children.values())
            replies.append(msg_id)

    def encode_replies() -> None:
        for i, msg_id in enumerate(replies):
            replies[i] = child.encode(RESPONSE, [msg_id, True, reply_body])

    def decode_replies() -> None:
        for data in replies:
            reply = tw.want_dict(parent.decode(data).payload[2], "multicast reply")
            if not isinstance(reply.get("reached"), int) or not isinstance(
                reply.get("missing"), list
            ):
                raise AssertionError("bad reply")

    out = {
        "request_encode_sign": timed(encode_requests),
        "request_verify_decode_route": timed(decode_requests),
        "reply_encode_sign": timed(encode_replies),
        "reply_verify_decode": timed(decode_replies),
    }
    sizes = {"request_bytes": len(requests[0]), "reply_bytes": len(replies[0])}
    if codec_class is Codec:
        datagrams = [requests[0], replies[0]]

        def hmacs() -> None:
            for _ in range(n):
                for d in datagrams:
                    hmac.digest(SECRET, d, "sha256")  # signing
                    hmac.digest(SECRET, d, "sha256")  # verifying

        out["hmac_sha256_alone"] = timed(hmacs)
    result = {k: us(v, n) for k, v in out.items()}
    result.update(sizes)
    return result


def multicast_compute(rounds: int, n: int) -> dict[str, Any]:
    tunables = Tunables()
    signed = medians([mc_parts(Codec, n, tunables) for _ in range(rounds)])
    plain = medians([mc_parts(InProcessCodec, n, tunables) for _ in range(rounds)])
    parts = ("request_encode_sign", "request_verify_decode_route", "reply_encode_sign")
    parts = (*parts, "reply_verify_decode")
    per_hop = round(sum(signed[p] for p in parts), 2)
    unauth = round(sum(plain[p] for p in parts), 2)
    return {
        "per_hop_us": per_hop,
        "goal_us": MULTICAST_GOAL_US,
        "ratio_to_goal": ratio(per_hop, MULTICAST_GOAL_US),
        "parts_us": {p: signed[p] for p in parts},
        "datagram_bytes": {
            "request": int(signed["request_bytes"]),
            "reply": int(signed["reply_bytes"]),
        },
        "baseline_unauthenticated": {
            "per_hop_us": unauth,
            "ratio_to_goal": ratio(unauth, MULTICAST_GOAL_US),
            "parts_us": {p: plain[p] for p in parts},
        },
        "authentication_us": round(per_hop - unauth, 2),
        "hmac_sha256_alone_us": signed["hmac_sha256_alone"],
        "hops_per_round": n,
        "rounds": rounds,
    }


# ---- multicast hop: end to end ---------------------------------------------------------------


def process_cpu() -> float:
    return time.process_time()


async def busy_then_idle(run: Callable[[], Any]) -> tuple[float, float, float]:
    """(busy CPU, idle CPU over the same wall time, wall) of ``await run()``."""
    settle()
    c0, w0 = process_cpu(), time.perf_counter()
    await run()
    busy, wall = process_cpu() - c0, time.perf_counter() - w0
    c1 = process_cpu()
    await asyncio.sleep(wall)
    return busy, process_cpu() - c1, wall


def tree_shape(mgrs: list[TreeManager]) -> dict[str, Any] | None:
    """Depth and fan-out of the bench tree once every manager is attached, else None."""
    views = {m.overlay.id: m.view(TREE) for m in mgrs}
    if any(v is None or v.state not in ("root", "member") for v in views.values()):
        return None
    roots = [i for i, v in views.items() if v.is_root]  # type: ignore[union-attr]
    edges = sum(len(v.children) for v in views.values())  # type: ignore[union-attr]
    if len(roots) != 1 or edges != len(mgrs) - 1:
        return None
    depth = 0
    for i in views:
        d, cur = 0, i
        while not views[cur].is_root and d <= len(views):  # type: ignore[union-attr]
            cur = views[cur].parent.id  # type: ignore[union-attr]
            d += 1
        depth = max(depth, d)
    fan_out = max(len(v.children) for v in views.values())  # type: ignore[union-attr]
    return {"root": roots[0], "depth": depth, "max_fan_out": fan_out}


async def multicast_nodes(n_nodes: int) -> tuple[list[OverlayNode], list[TreeManager], dict]:
    nodes: list[OverlayNode] = []
    mgrs: list[TreeManager] = []
    for _ in range(n_nodes):
        node = OverlayNode(SECRET, tunables=Tunables())
        mgr = TreeManager(node, data_url="http://127.0.0.1:1", tunables=SrtTunables())
        await mgr.start()
        await node.start([nodes[0].info.address] if nodes else [])
        nodes.append(node)
        mgrs.append(mgr)
    await asyncio.sleep(1.0)  # let the tables fill
    await asyncio.gather(*(m.join(TREE, job=JOB) for m in mgrs))
    deadline = time.monotonic() + 30
    while (shape := tree_shape(mgrs)) is None:
        if time.monotonic() > deadline:
            raise RuntimeError("the bench tree did not form in 30 s")
        await asyncio.sleep(0.1)
    return nodes, mgrs, shape


async def multicast_end_to_end(rounds: int, count: int, n_nodes: int) -> dict[str, Any]:
    nodes, mgrs, shape = await multicast_nodes(n_nodes)
    root = next(m for m in mgrs if m.overlay.id == shape["root"])
    hops = n_nodes - 1
    epoch = 0

    async def send() -> None:
        nonlocal epoch
        for _ in range(count):
            epoch += 1
            result = await root.multicast(TREE, mc_message(epoch), timeout=5.0)
            if result.reached != n_nodes:
                raise RuntimeError(f"multicast reached {result.reached} of {n_nodes}")

    try:
        for _ in range(max(1, count // 10)):  # warm up
            await root.multicast(TREE, mc_message(0), timeout=5.0)
        gc.collect()
        gc.freeze()  # as the daemon does once its agents are up
        per_hop, idle, wall = [], [], []
        for _ in range(rounds):
            b, i, w = await busy_then_idle(send)
            per_hop.append(1e6 * max(0.0, b - i) / (count * hops))
            idle.append(100 * i / w)
            wall.append(1e3 * w / count)
    finally:
        for m in mgrs:
            await m.stop()
        for node in nodes:
            await node.stop()
        gc.unfreeze()
    figure = round(statistics.median(per_hop), 2)
    return {
        "per_hop_us": figure,
        "goal_us": MULTICAST_GOAL_US,
        "ratio_to_goal": ratio(figure, MULTICAST_GOAL_US),
        "rounds_us": [round(x, 2) for x in per_hop],
        "nodes": n_nodes,
        "hops_per_multicast": hops,
        "tree_depth": shape["depth"],
        "tree_max_fan_out": shape["max_fan_out"],
        "multicasts_per_round": count,
        "wall_ms_per_multicast": round(statistics.median(wall), 3),
        "idle_cpu_pct": round(statistics.median(idle), 2),
    }


# ---- snapshot hop: shared -------------------------------------------------------------------


class Ids:
    leaf = node_id_for("127.0.0.1", 7501)
    inner = node_id_for("127.0.0.1", 7502)
    root = node_id_for("127.0.0.1", 7503)


def epoch_snapshot(keys: int, seed: int) -> tuple[Snapshot, int]:
    """An epoch's snapshot of ``keys`` words (count aggregator, as WordCount's), flushed from
    a CBT, and the records it folded."""
    rng = random.Random(seed)
    counts = [rng.randint(1, 1000) for _ in range(keys)]
    tree = CompressedBufferTree("count")
    tree.merge_states([f"word{i:07d}" for i in range(keys)], counts)
    return tree.flush(), sum(counts)


def combiner(
    me: int, child: int, snap: Snapshot, emit: Callable[[int, Snapshot], Any]
) -> EpochCombiner:
    """A barrier as an agent builds it (TreeLinks.new_barrier): local input and one child,
    lineage, the job's expectation."""
    expectation = Expectation(snap.agg)
    return EpochCombiner(
        job=JOB,
        tree=TREE,
        expect_local=True,
        children=[child],
        emit=emit,
        operator=GroupByOperator(),
        first_epoch=0,
        expect=lambda epoch: expectation,
        origin=me,
    )


def send_up_payload(comb: EpochCombiner, epoch: int, snap: Snapshot) -> bytes:
    """What a node sends its parent for an emitted epoch (JobPipeline.send_up)."""
    lineage = comb.lineage_of(epoch)
    payload = snap.to_bytes()
    return payload if lineage is None else lin.encode(lineage, payload)


# ---- snapshot hop: compute -------------------------------------------------------------------


def snapshot_parts(keys: int, n: int) -> dict[str, float]:
    """One round: µs per hop of each part, ``n`` hops of ``keys``-key snapshots."""
    child_snap, child_records = epoch_snapshot(keys, 1)
    own_snap, own_records = epoch_snapshot(keys, 2)
    child_lineage = lin.Counted({Ids.leaf}, {Ids.leaf: child_records})
    client = RequestAuth(SECRET)
    server = RequestAuth(SECRET)
    emitted: list[tuple[int, Snapshot, Any]] = []

    def emit(epoch: int, snap: Snapshot) -> None:
        emitted.append((epoch, snap, comb.lineage_of(epoch)))

    comb = combiner(Ids.inner, Ids.leaf, own_snap, emit)
    for epoch in range(n):  # the node's own epochs are in: each child's snapshot completes one
        comb.offer_local(epoch, own_snap, records=own_records)
    bodies: list[bytes] = []
    requests: list[tuple[dict[str, str], bytes]] = []
    verified: list[tuple[str, SnapshotName, bytes]] = []
    decoded: list[tuple[SnapshotName, Any, Snapshot]] = []
    results: list[str] = []

    def child_encode() -> None:  # JobPipeline.send_up, as at the parent below
        for _ in range(n):
            bodies.append(lin.encode(child_lineage, child_snap.to_bytes()))

    def child_sign() -> None:  # DataPlaneClient.request
        for epoch, body in enumerate(bodies):
            name = SnapshotName(JOB, TREE, epoch, Ids.leaf)
            fields = tuple(name.to_headers().values())
            headers = client.sign_request("POST", SNAPSHOT_PATH, fields, body)  # type: ignore[arg-type]
            headers.update(name.to_headers())
            requests.append((headers, body))

    def parent_verify() -> None:  # DataPlaneServer's checks before any handler runs
        for headers, body in requests:
            name = SnapshotName.from_headers(headers)
            nonce, digest = server.verify_headers(
                "POST", SNAPSHOT_PATH, name_fields(headers), headers
            )
            if body_digest(body) != digest:
                raise AssertionError("digest")
            server.check_replay(nonce)
            verified.append((nonce, name, body))

    def parent_decode() -> None:  # srt.snapshot_handler (and the agent's on_snapshot)
        for _nonce, name, body in verified:
            origins, rest = lin.decode(body)
            decoded.append((name, origins, Snapshot.from_bytes(rest)))

    def parent_merge() -> None:  # ... then the barrier: merged, and the epoch emitted
        for name, origins, snap in decoded:
            results.append(comb.offer_child(name.sender, name.epoch, snap, origins))

    def ack_sign_verify() -> None:  # the signed acknowledgement and its check at the child
        for (nonce, _name, _body), result in zip(verified, results, strict=True):
            body = json.dumps({"result": result}).encode()
            sig = server.sign_response(200, nonce, body)
            if not client.verify_response(200, nonce, body, sig):
                raise AssertionError("ack")
            if json.loads(body)["result"] != "merged":
                raise AssertionError(result)

    def next_hop_encode() -> None:
        for _epoch, snap, lineage in emitted:
            lin.encode(lineage, snap.to_bytes())

    out = {
        "child_encode": timed(child_encode),
        "child_sign": timed(child_sign),
        "parent_verify": timed(parent_verify),
        "parent_decode": timed(parent_decode),
        "parent_merge": timed(parent_merge),
        "ack_sign_verify": timed(ack_sign_verify),
    }
    if len(emitted) != n or len(emitted[-1][1]) != keys:
        raise AssertionError(f"{len(emitted)} of {n} epochs emitted")
    # not part of this hop (it is the next one's child_encode): the parent's merged epoch
    out["next_hop_encode"] = timed(next_hop_encode)
    result = {k: us(v, n) for k, v in out.items()}
    result.update({f"faults.{k}": FAULTS[k] / n for k in out})
    result["body_bytes"] = len(bodies[0])
    return result


HOP_PARTS = (
    "child_encode",
    "child_sign",
    "parent_verify",
    "parent_decode",
    "parent_merge",
    "ack_sign_verify",
)


def snapshot_compute(rounds: int, iterations: dict[int, int]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for keys, n in iterations.items():
        parts = medians([snapshot_parts(keys, n) for _ in range(rounds)])
        per_hop = round(sum(parts[p] for p in HOP_PARTS), 2)
        out[str(keys)] = {
            "per_hop_us": per_hop,
            "ratio_to_goal": ratio(per_hop, SNAPSHOT_GOAL_US),
            "parts_us": {p: parts[p] for p in HOP_PARTS},
            "next_hop_encode_us": parts["next_hop_encode"],
            "minor_page_faults_per_hop": {
                p: parts[f"faults.{p}"] for p in (*HOP_PARTS, "next_hop_encode")
            },
            "body_bytes": int(parts["body_bytes"]),
            "hops_per_round": n,
        }
    out.update(per_key_fit(out, iterations))
    out["rounds"] = rounds
    return out


def per_key_fit(out: dict[str, Any], sizes: Collection[int]) -> dict[str, Any]:
    """The line through the smallest and the largest snapshot's ``per_hop_us``: the cost
    per key and the fixed cost per hop, with the goal beside them."""
    lo, hi = min(sizes), max(sizes)
    per_key = (out[str(hi)]["per_hop_us"] - out[str(lo)]["per_hop_us"]) / (hi - lo)
    return {
        "per_key_us": round(per_key, 4),
        "fixed_us": round(out[str(lo)]["per_hop_us"] - lo * per_key, 2),
        "goal_us": SNAPSHOT_GOAL_US,
        "goal_keys": GOAL_KEYS,
    }


# ---- snapshot hop: end to end ----------------------------------------------------------------


class Chain:
    """Leaf → inner node → root over real data-plane servers and clients on loopback."""

    def __init__(self, keys: int) -> None:
        self.keys = keys
        self.leaf_snap, self.leaf_records = epoch_snapshot(keys, 1)
        self.inner_snap, self.inner_records = epoch_snapshot(keys, 2)
        self.root_snap, self.root_records = epoch_snapshot(keys, 3)
        self.lineage = lin.Counted({Ids.leaf}, {Ids.leaf: self.leaf_records})
        self.done = asyncio.Event()
        self.last = -1
        self.inner = combiner(Ids.inner, Ids.leaf, self.inner_snap, self.inner_emit)
        self.root = combiner(Ids.root, Ids.inner, self.root_snap, self.root_emit)
        self.next_epoch = 0

    async def start(self) -> None:
        tunables = SrtTunables()
        self.root_server = DataPlaneServer(SECRET, tunables=tunables)
        self.inner_server = DataPlaneServer(SECRET, tunables=tunables)
        self.root_server.on_snapshot(snapshot_handler(lambda name: self.root))
        self.inner_server.on_snapshot(snapshot_handler(lambda name: self.inner))
        root_url = await self.root_server.start()
        inner_url = await self.inner_server.start()
        self.leaf_client = DataPlaneClient(SECRET, tunables=tunables)
        self.inner_client = DataPlaneClient(SECRET, tunables=tunables)
        self.leaf_sender = UpstreamSender(
            self.leaf_client, job=JOB, tree=TREE, sender=Ids.leaf, parent_url=inner_url
        )
        self.inner_sender = UpstreamSender(
            self.inner_client, job=JOB, tree=TREE, sender=Ids.inner, parent_url=root_url
        )

    async def stop(self) -> None:
        for sender in (self.leaf_sender, self.inner_sender):
            await sender.close()
        for client in (self.leaf_client, self.inner_client):
            await client.close()
        for server in (self.inner_server, self.root_server):
            await server.stop()

    def inner_emit(self, epoch: int, snap: Snapshot) -> None:
        self.inner_sender.enqueue(epoch, send_up_payload(self.inner, epoch, snap))

    def root_emit(self, epoch: int, snap: Snapshot) -> None:
        self.last = epoch
        if epoch >= self.target:
            self.done.set()

    def prepare(self, count: int) -> range:
        """The next ``count`` epochs, with the inner node's and the root's own snapshots in."""
        epochs = range(self.next_epoch, self.next_epoch + count)
        self.next_epoch += count
        for epoch in epochs:
            self.inner.offer_local(epoch, self.inner_snap, records=self.inner_records)
            self.root.offer_local(epoch, self.root_snap, records=self.root_records)
        self.target = epochs[-1]
        self.done.clear()
        return epochs

    async def run(self, epochs: range) -> None:
        """The leaf emits ``epochs``; returns when the root has merged the last."""
        for epoch in epochs:
            body = self.leaf_snap.to_bytes()
            self.leaf_sender.enqueue(epoch, lin.encode(self.lineage, body))
        await asyncio.wait_for(self.done.wait(), 120)


async def snapshot_end_to_end(rounds: int, counts: dict[int, int]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for keys, count in counts.items():
        chain = Chain(keys)
        await chain.start()
        try:
            await chain.run(chain.prepare(max(2, count // 10)))  # warm up the connections
            gc.collect()
            gc.freeze()
            per_hop, idle, wall = [], [], []
            for _ in range(rounds):
                epochs = chain.prepare(count)
                b, i, w = await busy_then_idle(functools.partial(chain.run, epochs))
                per_hop.append(1e6 * max(0.0, b - i) / (count * 2))
                idle.append(100 * i / w)
                wall.append(1e3 * w / count)
            rejected = chain.inner_server.stats()["rejected_total"]
            rejected += chain.root_server.stats()["rejected_total"]
        finally:
            await chain.stop()
            gc.unfreeze()
        figure = round(statistics.median(per_hop), 2)
        out[str(keys)] = {
            "per_hop_us": figure,
            "ratio_to_goal": ratio(figure, SNAPSHOT_GOAL_US),
            "rounds_us": [round(x, 2) for x in per_hop],
            "epochs_per_round": count,
            "wall_ms_per_epoch": round(statistics.median(wall), 3),
            "idle_cpu_pct": round(statistics.median(idle), 2),
            "rejected": rejected,
        }
    out.update(per_key_fit(out, counts))
    out["hops_per_epoch"] = 2
    out["rounds"] = rounds
    return out


# ---- profile ---------------------------------------------------------------------------------


def profile(label: str, fn: Callable[[], Any], top: int) -> None:
    """``top`` functions of ``fn()`` by own and by cumulative time (wall clock: a CPU-time
    timer is a system call per event and distorts more; in the end-to-end runs the loop's
    waits, idle baseline included, show as ``select.epoll.poll``)."""
    prof = cProfile.Profile()
    prof.enable()
    fn()
    prof.disable()
    for key in ("tottime", "cumulative"):
        buf = io.StringIO()
        pstats.Stats(prof, stream=buf).sort_stats(key).print_stats(top)
        lines = [ln for ln in buf.getvalue().splitlines() if ln.strip()]
        start = next(i for i, ln in enumerate(lines) if ln.lstrip().startswith("ncalls"))
        print(f"== {label}: top {top} by {key}")
        print("\n".join(lines[start:]))
        print()


def run_profiles(top: int) -> None:
    SETTLE.clear()
    profile("multicast compute (2,000 hops)", lambda: mc_parts(Codec, 2000, Tunables()), top)
    profile("snapshot compute (1,000 keys, 300 hops)", lambda: snapshot_parts(1000, 300), top)
    profile(
        "multicast end to end (5 nodes, 300 multicasts)",
        lambda: asyncio.run(multicast_end_to_end(1, 300, 5)),
        top,
    )
    profile(
        "snapshot end to end (1,000 keys, 200 epochs)",
        lambda: asyncio.run(snapshot_end_to_end(1, {10: 20, 1000: 200})),
        top,
    )


# ---- main ------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 rounds, fewer iterations")
    parser.add_argument(
        "--profile", action="store_true", help="print cProfile tops of each hop (no JSON)"
    )
    parser.add_argument("--top", type=int, default=15, help="functions per --profile table")
    args = parser.parse_args()
    if args.profile:
        run_profiles(args.top)
        return
    quick = args.quick
    rounds = 3 if quick else 5
    scale = 4 if quick else 1
    wall0, cpu0 = time.perf_counter(), time.process_time()
    out: dict[str, Any] = {
        "benchmark": "hops",
        "quick": quick,
        "python": platform.python_version(),
        "cores": os.cpu_count(),
        "multicast_hop": {},
        "snapshot_hop": {},
    }
    stage = "compute"
    print(f"multicast {stage} ...", file=sys.stderr, flush=True)
    out["multicast_hop"]["compute"] = multicast_compute(rounds, 4000 // scale)
    print(f"snapshot {stage} ...", file=sys.stderr, flush=True)
    iterations = {10: 2000 // scale, 1000: 400 // scale, 10_000: 60 // scale}
    out["snapshot_hop"]["compute"] = snapshot_compute(rounds, iterations)
    print("multicast end to end ...", file=sys.stderr, flush=True)
    out["multicast_hop"]["end_to_end"] = asyncio.run(multicast_end_to_end(rounds, 1000 // scale, 5))
    print("snapshot end to end ...", file=sys.stderr, flush=True)
    counts = {10: 400 // scale, 1000: 200 // scale, 10_000: 40 // scale}
    out["snapshot_hop"]["end_to_end"] = asyncio.run(snapshot_end_to_end(rounds, counts))
    out["wall_s"] = round(time.perf_counter() - wall0, 1)
    out["cpu_s"] = round(time.process_time() - cpu0, 1)
    json.dump(out, sys.stdout, indent=2)
    print()


if __name__ == "__main__":
    main()
