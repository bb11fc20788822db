"""OverlayNode: the public face of the overlay — one per agent.

Contract:

* ``await start(bootstrap)`` binds, then joins through the ``kademlia`` bootstrap crawl;
* ``await route(app, key, message)`` forwards hop by hop (see :mod:`overlay.routing`) with a
  ``forward`` upcall at every node the message passes through (the origin included) and a
  ``deliver`` upcall at the root; each hop is acknowledged and retried, and a hop that stays
  silent is skipped (the next best contact is used), so routes survive failures;
* ``await request(target, kind, payload)`` is a direct request/response with timeout and
  retries (at-least-once: a retried request may run twice);
* membership: probes, suspicion after several misses, failure after ``fail_timeout``,
  ``on_node_joined``/``on_node_failed`` callbacks, failure rumours, graceful ``leave``.

The same code runs over real UDP (:class:`overlay.transport.UdpNetwork`) and over the
in-memory :class:`overlay.sim.SimNetwork`.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import os
import random
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any

from kademlia.crawling import NodeSpiderCrawl
from kademlia.network import Server
from kademlia.node import Node

from overlay import ids
from overlay.config import Tunables
from overlay.errors import (
    NotRunning,
    OverlayError,
    RemoteError,
    RequestTimeout,
    RouteError,
)
from overlay.leafset import LeafSet
from overlay.membership import FAILED, LEFT, Membership
from overlay.metrics import Metrics
from overlay.nodeinfo import NodeInfo
from overlay.protocol import ERROR, OK, OverlayProtocol
from overlay.routing import PrefixTable
from overlay.transport import UdpNetwork
from overlay.wire import Codec

log = logging.getLogger(__name__)

DELIVERED = "delivered"
STOPPED = "stopped"
MAINTENANCE_TYPES = ("ping", "ping.reply", "find_node", "find_node.reply", "leave", "leave.reply")
# (find_node also serves joins and lookups; in a steady state it is the leaf-set refresh)


class RoutingApplication:
    """Upcalls for routed messages of one application (subclass it).

    ``forward`` runs at every node a message passes through, before it is sent on to
    ``next_hop``: return the (possibly changed) message to continue, or ``None`` to stop it
    here. If ``next_hop`` turns out to be dead, ``forward`` is called again with the
    replacement. To record who sent a message (e.g. a tree child), write your node's info into
    the message in ``forward``; the next node reads it. ``deliver`` runs once at the root (the
    live node XOR-closest to the key). Either may be a coroutine function."""

    def forward(self, key: int, message: dict[str, Any], next_hop: NodeInfo) -> Any:
        return message

    def deliver(self, key: int, message: dict[str, Any]) -> Any:
        return None


@dataclass(frozen=True, slots=True)
class RouteResult:
    """Outcome of a routed message: ``status`` is ``"delivered"`` (at the root) or
    ``"stopped"`` (a ``forward`` upcall returned ``None``), at ``node`` after ``hops`` hops."""

    status: str
    node: NodeInfo
    hops: int


RequestHandler = Callable[[dict[str, Any], NodeInfo], Any]


class _DhtServer(Server):
    """The ``kademlia`` Server with our protocol, a refresh loop that keeps its interval (the
    package resets it to 3600 s after the first run) and no pickle-based state files."""

    protocol_class = OverlayProtocol

    def __init__(self, node: OverlayNode, tunables: Tunables, node_id: bytes) -> None:
        super().__init__(ksize=tunables.ksize, alpha=tunables.alpha, node_id=node_id)
        self._overlay = node

    def _create_protocol(self) -> OverlayProtocol:
        return self._overlay._make_protocol(self)

    def refresh_table(self, interval: float | None = None) -> None:  # type: ignore[override]
        interval = interval or self._overlay.tunables.kademlia_refresh_interval
        self._overlay._spawn(self._refresh_table())
        loop = asyncio.get_running_loop()
        self.refresh_loop = loop.call_later(interval, self.refresh_table, interval)

    async def bootstrap_node(self, addr: tuple[str, int]) -> Node | None:
        info = await self._overlay._ping_address(addr)
        if info is None:
            return None
        return Node(ids.to_bytes(info.id), info.host, info.port)

    def save_state(self, fname: str) -> None:
        raise NotImplementedError("state files would use pickle; bootstrap from peers instead")

    def save_state_regularly(self, fname: str, frequency: int = 600) -> None:
        raise NotImplementedError("state files would use pickle; bootstrap from peers instead")

    @classmethod
    async def load_state(cls, fname: str, port: int, interface: str = "0.0.0.0") -> Server:
        raise NotImplementedError("state files would use pickle; bootstrap from peers instead")


class OverlayNode:
    """One overlay node; see the module docstring for the contract.

    ``secret`` is the cluster secret (≥ 16 bytes) authenticating every datagram. ``node_id``
    defaults to SHA-1 of ``"host:port"`` (the port as bound). ``domain`` is the failure-domain
    label (e.g. a rack) carried in this node's :class:`NodeInfo`. ``network`` defaults to real
    UDP; pass an :class:`overlay.sim.SimNetwork` to run in the simulator."""

    def __init__(
        self,
        secret: bytes,
        host: str = "127.0.0.1",
        port: int = 0,
        node_id: int | None = None,
        domain: str = "default",
        tunables: Tunables | None = None,
        network: Any = None,
    ) -> None:
        if node_id is not None:
            ids.check_id(node_id)
        self.tunables = tunables or Tunables()
        self._secret = secret
        self._host = host
        self._port = port
        self._node_id = node_id
        self._domain = domain
        self._net = network or UdpNetwork()
        self.metrics_ = Metrics()
        self._apps: dict[str, RoutingApplication] = {}
        self._handlers: dict[str, RequestHandler] = {}
        self._joined_cbs: list[Callable[[NodeInfo], Any]] = []
        self._failed_cbs: list[Callable[[NodeInfo], Any]] = []
        self._routes: dict[bytes, asyncio.Future[RouteResult]] = {}
        self._seen_routes: OrderedDict[tuple[bytes, int], None] = OrderedDict()
        self._tasks: dict[asyncio.Task[Any], None] = {}  # dict: deterministic order (sim)
        self._probe_queue: list[int] = []
        # Failed nodes, re-pinged now and then: after a partition heals each side finds the
        # other again this way (tombstones stop second-hand news of them meanwhile).
        self._graveyard: OrderedDict[int, tuple[NodeInfo, float]] = OrderedDict()
        self._bootstrap: list[tuple[str, int]] = []
        self._running = False
        self._info: NodeInfo | None = None
        # The simulator passes datagrams in memory (overlay.wire.InProcessCodec).
        codec_class = getattr(self._net, "codec_class", Codec)
        self.codec = codec_class(
            secret,
            max_datagram=self.tunables.max_datagram,
            max_skew=self.tunables.max_skew,
            clock=self._net.wall_clock,
        )

    # ---- life cycle --------------------------------------------------------------------------

    @property
    def info(self) -> NodeInfo:
        if self._info is None:
            raise NotRunning("start() the node first")
        return self._info

    @property
    def id(self) -> int:
        return self.info.id

    @property
    def running(self) -> bool:
        return self._running

    def _make_protocol(self, server: _DhtServer) -> OverlayProtocol:
        return OverlayProtocol(
            server.node,
            server.storage,
            server.ksize,
            info=self.info,
            codec=self.codec,
            metrics=self.metrics_,
            host=self,
            handlers={
                "ping": self._serve_ping,
                "route": self._serve_route,
                "route_done": self._serve_route_done,
                "request": self._serve_request,
                "leave": self._serve_leave,
            },
            request_timeout=self.tunables.request_timeout,
        )

    async def start(self, bootstrap: Iterable[tuple[str, int]] = ()) -> None:
        """Bind, then join the overlay through ``bootstrap`` addresses (none: first node)."""
        if self._running:
            raise OverlayError("already started")
        t = self.tunables

        def make_protocol(addr: tuple[str, int]) -> OverlayProtocol:
            host, port = addr
            node_id = self._node_id if self._node_id is not None else ids.node_id_for(host, port)
            self._info = NodeInfo(node_id, host, port, self._domain)
            self.server = _DhtServer(self, t, ids.to_bytes(node_id))
            self.protocol = self.server._create_protocol()
            self.server.protocol = self.protocol
            return self.protocol

        self.transport = await self._net.open(self._host, self._port, make_protocol)
        self.server.transport = self.transport
        me = self.info.id
        self._rng = random.Random(self._net.seed_for(me))
        self.membership = Membership(me, t)
        self.table = PrefixTable(me, t.slot_capacity)
        self.leaves = LeafSet(me, t.leaf_set_size)
        self._running = True
        addrs = [(a[0], a[1]) for a in bootstrap if (a[0], a[1]) != self.info.address]
        self._bootstrap = addrs
        if addrs:
            await self.server.bootstrap(addrs)
            await self._fill_slots()
            await self._announce()
        self.server.refresh_table(t.kademlia_refresh_interval)
        self._spawn(self._maintenance())

    async def stop(self) -> None:
        """Stop abruptly (as a crash looks to others): no goodbye, transport closed."""
        if not self._running:
            return
        self._running = False
        self.protocol.close()
        self.server.stop()
        for task in list(self._tasks):
            task.cancel()
        self._net.close(self.transport)
        for fut in self._routes.values():
            if not fut.done():
                fut.set_exception(NotRunning("node stopped"))

    async def leave(self) -> None:
        """Graceful leave: tell the leaf set and routing contacts, then stop."""
        if not self._running:
            return
        targets = {n.id: n for n in self.leaves.members()}
        for n in self.table.designated():
            targets.setdefault(n.id, n)
        calls = []
        for n in targets.values():
            with contextlib.suppress(OverlayError):
                calls.append(
                    self.protocol.call(n.address, "leave", [], self.tunables.request_timeout)
                )
        if calls:
            await asyncio.gather(*calls, return_exceptions=True)
        await self.stop()

    # ---- registration ------------------------------------------------------------------------

    def register(self, app_name: str, app: RoutingApplication) -> None:
        self._apps[app_name] = app

    def handle(self, kind: str, handler: RequestHandler) -> None:
        """Serve direct requests of ``kind``: ``handler(payload, sender) -> dict`` (may be a
        coroutine function). Its exceptions reach the caller as :class:`RemoteError`."""
        self._handlers[kind] = handler

    def on_node_joined(self, callback: Callable[[NodeInfo], Any]) -> None:
        """``callback(info)`` when a node enters this node's view."""
        self._joined_cbs.append(callback)

    def on_node_failed(self, callback: Callable[[NodeInfo], Any]) -> None:
        """``callback(info)`` when a known node is declared failed or leaves."""
        self._failed_cbs.append(callback)

    # ---- views -------------------------------------------------------------------------------

    def leaf_set(self) -> list[NodeInfo]:
        """The live nodes XOR-closest to this node's id, nearest first."""
        return self.leaves.members()

    def contacts(self) -> list[NodeInfo]:
        """All live contacts: routing table plus leaf set."""
        out = self.table.by_id()
        for n in self.leaves.members():
            out.setdefault(n.id, n)
        return list(out.values())

    def next_hop(self, key: int, exclude: Iterable[int] = ()) -> NodeInfo | None:
        """Where this node would send a message for ``key``; ``None`` means it is the root."""
        return self.table.next_hop(key, exclude, self.leaves.members())

    def metrics(self) -> dict[str, Any]:
        snap = self.metrics_.snapshot()
        snap["maintenance_msgs_sent"] = sum(
            snap["sent_msgs"].get(k, 0) for k in MAINTENANCE_TYPES
        )
        snap["contacts"] = len(self.table)
        snap["suspected"] = len(self.membership.suspected()) if self._running else 0
        return snap

    # ---- DHT (kademlia get/set reused) ---------------------------------------------------------

    async def get(self, key: str | bytes) -> Any:
        return await self.server.get(key)

    async def set(self, key: str | bytes, value: Any) -> bool:
        return bool(await self.server.set(key, value))

    # ---- direct messages -----------------------------------------------------------------------

    async def request(
        self,
        target: NodeInfo | tuple[str, int] | int,
        kind: str,
        payload: dict[str, Any],
        timeout: float | None = None,
        retries: int | None = None,
    ) -> Any:
        """Send ``payload`` to ``target`` (a NodeInfo, an address, or a node id to look up)
        and return the handler's reply. Raises :class:`MessageTooLarge` (nothing sent),
        :class:`RemoteError` (no handler / handler raised) or :class:`RequestTimeout`."""
        if not self._running:
            raise NotRunning("the node is not running")
        if not isinstance(payload, dict):
            raise TypeError("payload must be a dict")
        if isinstance(target, int):
            target = await self._locate(target)
        address = target.address if isinstance(target, NodeInfo) else (target[0], target[1])
        node_id = target.id if isinstance(target, NodeInfo) else None
        timeout = self.tunables.request_timeout if timeout is None else timeout
        retries = self.tunables.request_retries if retries is None else retries
        for _ in range(retries + 1):
            status, result = await self.protocol.call(address, "request", [kind, payload], timeout)
            if status == OK:
                if node_id is not None:
                    self.on_reply_from(node_id)
                return result
            if status == ERROR:
                raise RemoteError(result)
            if node_id is not None:
                self.on_missed_reply(node_id)
        raise RequestTimeout(f"no reply from {address} to {kind!r} after {retries + 1} tries")

    def request_now(
        self, target: NodeInfo, kind: str, payload: dict[str, Any], timeout: float | None = None
    ) -> Awaitable[Any]:
        """Like :meth:`request` with no retries, but the datagram leaves before this returns:
        a caller fanning out to many nodes sends them all before it yields to the loop (and
        before any local work it does next). Await the result for the reply."""
        if not self._running:
            raise NotRunning("the node is not running")
        if not isinstance(payload, dict):
            raise TypeError("payload must be a dict")
        timeout = self.tunables.request_timeout if timeout is None else timeout
        future = self.protocol.call(target.address, "request", [kind, payload], timeout)
        return self._reply_of(future, target, kind)

    async def _reply_of(
        self, future: Awaitable[tuple[str, Any]], target: NodeInfo, kind: str
    ) -> Any:
        status, result = await future
        if status == OK:
            self.on_reply_from(target.id)
            return result
        if status == ERROR:
            raise RemoteError(result)
        self.on_missed_reply(target.id)
        raise RequestTimeout(f"no reply from {target.address} to {kind!r}")

    async def _locate(self, node_id: int) -> NodeInfo:
        known = self.table.get(node_id)
        if known is not None:
            return known
        for n in self.leaves.members():
            if n.id == node_id:
                return n
        target = Node(ids.to_bytes(node_id))
        nearest = self.protocol.router.find_neighbors(target, self.tunables.alpha)
        spider = NodeSpiderCrawl(
            self.protocol, target, nearest, self.tunables.ksize, self.tunables.alpha
        )
        await spider.find()
        found = self.table.get(node_id)
        if found is None:
            raise OverlayError(f"node {ids.short(node_id)} not found")
        return found

    async def _serve_request(self, sender: NodeInfo, kind: str, payload: Any) -> Any:
        handler = self._handlers.get(kind)
        if handler is None:
            raise LookupError(f"no handler for kind {kind!r}")
        result = handler(payload, sender)
        if inspect.isawaitable(result):
            result = await result
        return result

    # ---- routing -------------------------------------------------------------------------------

    async def route(
        self,
        app_name: str,
        key: int,
        message: dict[str, Any],
        *,
        report: bool = True,
        timeout: float | None = None,
    ) -> RouteResult | None:
        """Route ``message`` toward the root of ``key``. With ``report`` (default) wait for the
        final node's report and return a :class:`RouteResult` (raises :class:`RouteError` if
        none arrives in ``timeout``); otherwise return once the first hop has accepted it."""
        if not self._running:
            raise NotRunning("the node is not running")
        ids.check_id(key)
        if not isinstance(message, dict):
            raise TypeError("message must be a dict")
        rid = os.urandom(8)
        future: asyncio.Future[RouteResult] | None = None
        if report:
            future = asyncio.get_running_loop().create_future()
            self._routes[rid] = future
        try:
            await self._route_step(app_name, key, message, self.info, rid, 0, report)
            if future is None:
                return None
            wait = self.tunables.route_timeout if timeout is None else timeout
            try:
                return await asyncio.wait_for(asyncio.shield(future), wait)
            except TimeoutError:
                raise RouteError(f"no delivery report for key {ids.short(key)}") from None
        finally:
            self._routes.pop(rid, None)

    async def _route_step(
        self,
        app_name: str,
        key: int,
        message: dict[str, Any],
        origin: NodeInfo,
        rid: bytes,
        hops: int,
        report: bool,
    ) -> None:
        app = self._apps.get(app_name)
        tried: list[int] = []
        while self._running:
            nh = self.next_hop(key, tried)
            if nh is None:
                if app is None:
                    self.metrics_.drop("route_no_app")
                    await self._report(origin, rid, "no_app", hops, report)
                    return
                try:
                    await _maybe_await(app.deliver(key, message))
                except Exception as exc:
                    await self._upcall_failed(origin, rid, hops, report, "deliver", exc)
                    return
                self.metrics_.event("routes_delivered")
                await self._report(origin, rid, DELIVERED, hops, report)
                return
            if hops >= self.tunables.max_hops:
                self.metrics_.drop("hop_limit")
                await self._report(origin, rid, "hop_limit", hops, report)
                return
            out = message
            if app is not None:
                try:
                    out = await _maybe_await(app.forward(key, message, nh))
                except Exception as exc:
                    await self._upcall_failed(origin, rid, hops, report, "forward", exc)
                    return
                if out is None:
                    await self._report(origin, rid, STOPPED, hops, report)
                    return
            args = [app_name, ids.to_bytes(key), out, origin.to_wire(), rid, hops + 1, report]
            if await self._send_reliably(nh, "route", args):
                self.metrics_.event("routes_forwarded")
                return
            tried.append(nh.id)
            self.metrics_.event("route_reroutes")

    async def _upcall_failed(
        self, origin: NodeInfo, rid: bytes, hops: int, report: bool, which: str, exc: Exception
    ) -> None:
        """An application upcall raised: count it and tell the origin (which then raises
        RouteError) instead of letting it wait for a report that never comes."""
        self.metrics_.drop("upcall_error")
        log.warning("%s upcall failed: %r", which, exc)
        if origin.id == self.info.id:
            raise exc
        await self._report(origin, rid, f"{which} raised {type(exc).__name__}", hops, report)

    async def _send_reliably(self, target: NodeInfo, name: str, args: list[Any]) -> bool:
        t = self.tunables
        for _ in range(t.request_retries + 1):
            if not self._running:
                return False
            status, _result = await self.protocol.call(
                target.address, name, args, t.request_timeout
            )
            if status == OK:
                self.on_reply_from(target.id)
                return True
            if status == ERROR:
                self.on_reply_from(target.id)
                return False
            self.on_missed_reply(target.id)
        return False

    async def _report(
        self, origin: NodeInfo, rid: bytes, status: str, hops: int, report: bool
    ) -> None:
        if not report:
            return
        if origin.id == self.info.id:
            self._finish_route(rid, status, self.info, hops)
            return
        args = [rid, status, self.info.to_wire(), hops]
        self._spawn(self._send_reliably(origin, "route_done", args))

    def _finish_route(self, rid: bytes, status: str, at: NodeInfo, hops: int) -> None:
        future = self._routes.get(rid)
        if future is None or future.done():
            return
        if status in (DELIVERED, STOPPED):
            future.set_result(RouteResult(status, at, hops))
        else:
            future.set_exception(RouteError(f"route failed at {at}: {status}"))

    def _serve_route(
        self,
        sender: NodeInfo,
        app_name: str,
        key_raw: bytes,
        message: Any,
        origin_raw: Any,
        rid: bytes,
        hops: int,
        report: bool,
    ) -> bool:
        if not isinstance(app_name, str) or not isinstance(message, dict):
            raise TypeError("bad route message")
        if not isinstance(rid, bytes) or not isinstance(hops, int) or hops < 0:
            raise TypeError("bad route header")
        key = ids.from_bytes(key_raw)
        origin = NodeInfo.from_wire(origin_raw)
        seen = (rid, hops)
        if seen in self._seen_routes:  # our ack was lost and the sender retried
            return True
        self._seen_routes[seen] = None
        if len(self._seen_routes) > 4096:
            self._seen_routes.popitem(last=False)
        self._spawn(self._route_step(app_name, key, message, origin, rid, hops, bool(report)))
        return True

    def _serve_route_done(
        self, sender: NodeInfo, rid: bytes, status: str, at_raw: Any, hops: int
    ) -> bool:
        self._finish_route(rid, str(status), NodeInfo.from_wire(at_raw), int(hops))
        return True

    # ---- membership ----------------------------------------------------------------------------

    def _now(self) -> float:
        return asyncio.get_running_loop().time()

    def _learn(self, info: NodeInfo, direct: bool) -> None:
        if not self._running:
            return
        if not direct and info.id in self.membership.peers:
            return  # second-hand news of a known peer changes nothing (Membership.learn)
        if self.membership.get(info.id) is None and not self._wanted(info, direct):
            return  # would not enter any table: not worth tracking
        change = self.membership.learn(info, self._now(), direct)
        if change is None:
            return
        self._admit(info)
        if change == "new" and info.id in self.membership.peers:
            self.metrics_.event("nodes_joined")
            for cb in self._joined_cbs:
                self._notify(cb, info)

    def _wanted(self, info: NodeInfo, direct: bool) -> bool:
        me = self.info.id
        if info.id == me or (not direct and info.id in self.membership.tombstones):
            return False
        members = self.leaves.members()
        if len(members) < self.leaves.size or (info.id ^ me) < (members[-1].id ^ me):
            return True
        return self.table.would_accept(info)

    def _admit(self, info: NodeInfo) -> None:
        accepted, evicted = self.table.add(info)
        in_leaves = self.leaves.offer(info) or info.id in self.leaves
        if evicted is not None and evicted.id not in self.leaves:
            self._forget(evicted)
        if accepted or in_leaves:
            self.protocol.welcome_if_new(_kad_node(info))
            self._probe_queue.clear()  # the monitored set changed
        else:
            self._forget(info)

    def _forget(self, info: NodeInfo) -> None:
        self.membership.peers.pop(info.id, None)
        self.protocol.router.remove_contact(_kad_node(info))

    def _retire(self, info: NodeInfo) -> None:
        """Take a suspected or failed node out of routing (kept in membership if suspected)."""
        self.table.remove(info.id)
        if self.leaves.remove(info.id):
            pool = list(self.table)
            pool.extend(self.leaves.members())
            self.leaves.rebuild(pool)

    def _declare_failed(self, node_id: int, kind: str) -> None:
        if self.membership.get(node_id) is None:
            return
        state = self.membership.remove(node_id, self._now(), kind)
        assert state is not None
        info = state.info
        self._retire(info)
        self.protocol.router.remove_contact(_kad_node(info))
        self._probe_queue.clear()
        if kind == FAILED:
            self._bury(info)
        self.metrics_.event("nodes_failed" if kind == FAILED else "nodes_left")
        for cb in self._failed_cbs:
            self._notify(cb, info)

    # ProtocolHost interface -------------------------------------------------------------------

    def on_request_from(self, sender: NodeInfo) -> None:
        self._learn(sender, direct=True)

    def on_reply_from(self, node_id: int) -> None:
        state = self.membership.get(node_id)
        if state is not None and self.membership.heard(node_id, self._now()):
            self.metrics_.event("nodes_revived")
            self._admit(state.info)

    def on_missed_reply(self, node_id: int) -> None:
        if self.membership.missed(node_id, self._now()):
            state = self.membership.get(node_id)
            if state is not None:
                self.metrics_.event("nodes_suspected")
                self._retire(state.info)
                self._probe_queue.clear()

    def on_learned(self, infos: list[NodeInfo]) -> None:
        for info in infos:
            self._learn(info, direct=False)

    def neighbours_of(self, key: int, exclude: int) -> list[NodeInfo]:
        pool = [n for n in self.contacts() if n.id != exclude]
        pool.sort(key=lambda n: n.id ^ key)
        return pool[: self.tunables.ksize]

    # ---- probing and gossip --------------------------------------------------------------------

    async def _ping_address(self, addr: tuple[str, int]) -> NodeInfo | None:
        """Bootstrap ping: learn who listens at ``addr``."""
        for _ in range(self.tunables.request_retries + 1):
            status, result = await self.protocol.call(
                addr, "ping", [self.membership.take_rumours()], self.tunables.request_timeout
            )
            if status == OK:
                try:
                    info = NodeInfo.from_wire(result[0])
                except (ValueError, TypeError, IndexError):
                    self.metrics_.drop("malformed_reply")
                    return None
                self._learn(info, direct=True)
                self._apply_rumours(result[1] if len(result) > 1 else [])
                return info
        return None

    def _serve_ping(self, sender: NodeInfo, rumours: Any) -> list[Any]:
        self._apply_rumours(rumours)
        return [self.info.to_wire(), self.membership.take_rumours()]

    def _serve_leave(self, sender: NodeInfo) -> bool:
        self._declare_failed(sender.id, LEFT)
        return True

    def _apply_rumours(self, rumours: Any) -> None:
        if not isinstance(rumours, list):
            return
        now = self._now()
        for item in rumours[:32]:
            try:
                kind, raw = item
                node_id = ids.from_bytes(raw)
            except (TypeError, ValueError):
                self.metrics_.drop("malformed_rumour")
                continue
            if kind not in (FAILED, LEFT):
                continue
            state = self.membership.get(node_id)
            if self.membership.accept_rumour(kind, node_id, now) and state is not None:
                self.metrics_.event("rumours_applied")
                self._retire(state.info)
                self.protocol.router.remove_contact(_kad_node(state.info))
                self._probe_queue.clear()
                if kind == FAILED:
                    self._bury(state.info)
                for cb in self._failed_cbs:
                    self._notify(cb, state.info)

    def _bury(self, info: NodeInfo) -> None:
        self._graveyard.pop(info.id, None)
        self._graveyard[info.id] = (info, self._now())
        while len(self._graveyard) > self.tunables.graveyard_size:
            self._graveyard.popitem(last=False)

    async def _rejoin(self) -> None:
        """Re-ping a few failed nodes (and the bootstrap addresses if we know nobody); any
        answer revives the node directly and we ask it for our neighbourhood."""
        t = self.tunables
        now = self._now()
        for node_id in [i for i, (_, at) in self._graveyard.items() if now - at > t.graveyard_ttl]:
            del self._graveyard[node_id]
        targets = [info.address for info, _ in self._graveyard.values()]
        if not self.contacts():
            targets.extend(self._bootstrap)
        if not targets:
            return
        picks = self._rng.sample(targets, min(t.rejoin_batch, len(targets)))
        for addr in picks:
            status, result = await self.protocol.call(
                addr, "ping", [self.membership.take_rumours()], t.probe_timeout
            )
            if status != OK:
                continue
            try:
                info = NodeInfo.from_wire(result[0])
            except (ValueError, TypeError, IndexError):
                continue
            self._graveyard.pop(info.id, None)
            self._learn(info, direct=True)
            self.metrics_.event("rejoined")
            if info.id in self.membership.peers:
                await self.protocol.call_find_node(
                    _kad_node(info), Node(ids.to_bytes(self.info.id))
                )

    async def _probe(self, info: NodeInfo) -> None:
        """Probe until a reply or until the peer is suspected (misses are consecutive)."""
        t = self.tunables
        for _ in range(t.misses_before_suspect):
            if not self._running or self.membership.get(info.id) is None:
                return
            status, result = await self.protocol.call(
                info.address, "ping", [self.membership.take_rumours()], t.probe_timeout
            )
            if status != "timeout":
                self.on_reply_from(info.id)
                if status == OK and isinstance(result, list) and len(result) == 2:
                    self._apply_rumours(result[1])
                return
            self.on_missed_reply(info.id)
            if self.membership.is_suspected(info.id):
                return

    def _monitored(self) -> list[int]:
        chosen = {n.id: None for n in self.leaves.members()}
        for n in self.table.designated():
            chosen.setdefault(n.id, None)
        order = list(chosen)
        self._rng.shuffle(order)
        return order

    async def _maintenance(self) -> None:
        t = self.tunables
        # Random phase so nodes started together do not probe in lockstep.
        await asyncio.sleep(self._rng.uniform(0, t.probe_interval))
        next_leaf_refresh = self._now() + self._rng.uniform(0, t.leaf_refresh_interval)
        next_rejoin = self._now() + self._rng.uniform(0, t.rejoin_interval)
        next_slot = self._now() + self._rng.uniform(0, t.slot_refresh_interval)
        while self._running:
            try:
                self._maintenance_tick()
                if self._now() >= next_leaf_refresh:
                    next_leaf_refresh = self._now() + t.leaf_refresh_interval
                    self._spawn(self._refresh_leaves())
                if self._now() >= next_slot:
                    next_slot = self._now() + t.slot_refresh_interval
                    self._spawn(self._refresh_slot())
                if self._now() >= next_rejoin:
                    next_rejoin = self._now() + t.rejoin_interval
                    self._spawn(self._rejoin())
            except Exception:  # maintenance must survive anything
                log.exception("maintenance tick failed")
            await asyncio.sleep(t.probe_interval)

    def _maintenance_tick(self) -> None:
        now = self._now()
        for node_id in self.membership.due_failures(now):
            self._declare_failed(node_id, FAILED)
        for info in self.membership.suspected():
            self._spawn(self._probe(info))
        if not self._probe_queue:
            self._probe_queue = self._monitored()
        while self._probe_queue:
            node_id = self._probe_queue.pop()
            state = self.membership.get(node_id)
            if state is not None and state.suspected_since is None:
                self._spawn(self._probe(state.info))
                break
        if self._rng.random() < 0.05:
            self.membership.prune_tombstones(now)

    def _slot_target(self, row: int, col: int) -> int:
        """A random id in this node's routing-table slot ``(row, col)``."""
        shift = ids.ID_BITS - ids.DIGIT_BITS * (row + 1)
        prefix = (self.info.id >> (shift + ids.DIGIT_BITS)) << ids.DIGIT_BITS | col
        return (prefix << shift) | self._rng.getrandbits(shift)

    def size_estimate(self) -> int:
        """Network size estimated from the leaf set's spread: k nodes within XOR distance d
        means about k·2¹⁶⁰/d nodes in all."""
        members = self.leaves.members()
        if not members:
            return 1
        spread = max(members[-1].id ^ self.info.id, 1)
        return max(len(members) + 1, (len(members) << ids.ID_BITS) // spread)

    def _depth(self) -> int:
        """Rows worth filling: those whose slots expect at least ¼ node (16^(row+1) ≤ 4N).
        Deeper slots are covered by the leaf set."""
        n4 = 4 * self.size_estimate()
        rows = 1
        while rows < ids.DIGITS and 16 ** (rows + 1) <= n4:
            rows += 1
        return rows

    async def _lookup_slot(self, row: int, col: int) -> None:
        """One find_node for a random id of an empty slot, asked of the contact closest to it
        (a single RPC, not a full crawl): this is how slots get (re)filled."""
        target = self._slot_target(row, col)
        pool = self.contacts()
        if not pool:
            return
        peer = min(pool, key=lambda n: n.id ^ target)
        await self.protocol.call_find_node(_kad_node(peer), Node(ids.to_bytes(target)))

    def _empty_slots(self) -> list[tuple[int, int]]:
        me = self.info.id
        filled = self.table.filled_slots()  # == slots of all contacts (table ∪ leaf set)
        filled.update(self.table.slot_of(n.id) for n in self.leaves.members())
        empty = []
        for row in range(self._depth()):
            mine = ids.digit(me, row)
            empty.extend(
                (row, col) for col in range(16) if col != mine and (row, col) not in filled
            )
        return empty

    async def _fill_slots(self) -> None:
        """After the join crawl: look up every empty slot once (Pastry fills its table from
        the nodes on its join route; this is the Kademlia way to the same end)."""
        empty = self._empty_slots()
        if empty:
            await asyncio.gather(*(self._lookup_slot(r, c) for r, c in empty))

    async def _announce(self) -> None:
        """Ping every contact once so nodes that should route to us learn us directly."""
        t = self.tunables
        calls = []
        for n in self.contacts():
            with contextlib.suppress(OverlayError):
                calls.append(self.protocol.call(n.address, "ping", [[]], t.probe_timeout))
        if calls:
            await asyncio.gather(*calls)

    async def _refresh_slot(self) -> None:
        """Periodic table upkeep: an empty slot if any (new nodes may have appeared there),
        else a random filled one (finds closer designated entries)."""
        empty = self._empty_slots()
        if empty:
            row, col = self._rng.choice(empty)
        else:
            filled = self.table.designated_slots()
            if not filled:
                return
            row, col = self._rng.choice(filled)
        await self._lookup_slot(row, col)

    async def _refresh_leaves(self) -> None:
        """Ask one leaf-set member for the nodes closest to us: learns joins next to us and
        refills the leaf set after failures."""
        members = self.leaves.members() or self.contacts()
        if not members:
            return
        peer = self._rng.choice(members)
        await self.protocol.call_find_node(_kad_node(peer), Node(ids.to_bytes(self.info.id)))

    def _notify(self, cb: Callable[[NodeInfo], Any], info: NodeInfo) -> None:
        try:
            result = cb(info)
            if inspect.isawaitable(result):
                self._spawn(result)
        except Exception:
            log.exception("membership callback failed")

    def _spawn(self, coro: Awaitable[Any]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks[task] = None
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.pop(task, None)
        if not task.cancelled() and task.exception() is not None:
            exc = task.exception()
            if not isinstance(exc, NotRunning):
                self.metrics_.event("task_errors")
                log.warning("overlay task failed: %r", exc)


def _kad_node(info: NodeInfo) -> Node:
    return Node(ids.to_bytes(info.id), info.host, info.port)


async def _maybe_await(value: Any) -> Any:
    if inspect.isawaitable(value):
        return await value
    return value
