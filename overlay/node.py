"""OverlayNode: the public face of the overlay — one per agent.

Contract:

* ``await start(bootstrap)`` binds, then joins through the ``kademlia`` bootstrap crawl;
* ``await route(app, key, message)`` forwards hop by hop (see :mod:`overlay.router`) with a
  ``forward`` upcall at every node the message passes through (the origin included) and a
  ``deliver`` upcall at the root; each hop is acknowledged and retried, and a hop that stays
  silent is skipped (the next best contact is used), so routes survive failures;
* ``await request(target, kind, payload)`` is a direct request/response with timeout and
  retries (at-least-once: a retried request may run twice);
* membership (see :mod:`overlay.detector`): probes, suspicion after several misses, failure
  after ``fail_timeout``, ``on_node_joined``/``on_node_failed`` callbacks, failure rumours,
  graceful ``leave``;
* ``stop``/``leave`` cancel every background task of the node; a task that fails is counted
  as ``task_errors`` and logged (a task ending with :class:`NotRunning` is an expected end).

The node is a facade: it owns the life cycle, direct requests and the public API, and wires
its parts, each given only what it needs (:mod:`overlay.ports`) — the
:class:`~overlay.router.Router` (routes in flight), the
:class:`~overlay.detector.FailureDetector` (who is alive), the
:class:`~overlay.neighbourhood.Neighbourhood` (routing table and leaf set, sans-IO), the
:class:`~overlay.upkeep.TableUpkeep` (lookups that fill them), the datagram protocol
(:mod:`overlay.protocol`) and kademlia's server (:mod:`overlay.kademlia_compat`). The same code
runs over real UDP (:class:`overlay.transport.UdpNetwork`) and over the in-memory
:class:`overlay.sim.SimNetwork`.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import random
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from overlay import ids, kademlia_compat
from overlay.config import Tunables
from overlay.detector import FailureDetector
from overlay.errors import (
    NotRunning,
    OverlayError,
    RemoteError,
    RequestTimeout,
)
from overlay.kademlia_compat import DhtServer, KademliaContacts
from overlay.membership import Membership
from overlay.metrics import Metrics
from overlay.neighbourhood import Neighbourhood
from overlay.nodeinfo import NodeInfo
from overlay.ports import Address
from overlay.protocol import ERROR, OK, OverlayProtocol
from overlay.router import Router, RouteResult, RoutingApplication
from overlay.tasks import BackgroundTasks
from overlay.transport import UdpNetwork
from overlay.trickle import Trickle
from overlay.upkeep import TableUpkeep
from overlay.wire import Codec

log = logging.getLogger(__name__)

MAINTENANCE_TYPES = ("ping", "ping.reply", "find_node", "find_node.reply", "leave", "leave.reply")
# (find_node also serves joins and lookups; in a steady state it is the leaf-set refresh)

RequestHandler = Callable[[dict[str, Any], NodeInfo], Any]


class OverlayNode:
    """One overlay node; see the module docstring for the contract.

    ``secret`` is the cluster secret (≥ 16 bytes) authenticating every datagram. ``node_id``
    defaults to SHA-1 of ``"host:port"`` (the port as bound). ``domain`` is the failure-domain
    label (e.g. a rack) carried in this node's :class:`NodeInfo`. ``network`` defaults to real
    UDP; pass an :class:`overlay.sim.SimNetwork` to run in the simulator."""

    # Built by start() (the node id, and so all of these, is known only once bound).
    server: DhtServer
    protocol: OverlayProtocol
    transport: Any
    _hood: Neighbourhood
    _detector: FailureDetector
    _upkeep: TableUpkeep
    _rng: random.Random

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
        self._net = network or UdpNetwork(recv_buffer=self.tunables.recv_buffer)
        self._metrics = Metrics()
        self._tasks = BackgroundTasks(self._task_failed, quiet=(NotRunning,))
        self._handlers: dict[str, RequestHandler] = {}
        self._joined_cbs: list[Callable[[NodeInfo], Any]] = []
        self._failed_cbs: list[Callable[[NodeInfo], Any]] = []
        self._running = False
        self._kernel_drops_seen = 0  # the kernel's drop counter at the last WARNING
        self._info: NodeInfo | None = None
        # Built now, not in start(): applications may register before the node starts.
        self._router = Router(
            self.tunables,
            self._metrics,
            me=lambda: self.info,
            running=lambda: self._running,
            next_hop=self.next_hop,
            call=self._call,
            spawn=self._tasks.spawn,
            liveness=self,
        )
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

    @property
    def membership(self) -> Membership:
        """The failure detector's view of the peers (read it, don't change it)."""
        return self._detector.membership

    def _make_protocol(self, server: DhtServer) -> OverlayProtocol:
        return OverlayProtocol(
            server.node,
            server.storage,
            server.ksize,
            info=self.info,
            codec=self.codec,
            metrics=self._metrics,
            host=self,
            handlers={
                "ping": self._serve_ping,
                "route": self._router.serve_route,
                "route_done": self._router.serve_route_done,
                "request": self._serve_request,
                "leave": self._serve_leave,
            },
            request_timeout=self.tunables.request_timeout,
        )

    async def start(self, bootstrap: Iterable[tuple[str, int]] = ()) -> None:
        """Bind, then join the overlay through ``bootstrap`` addresses (none: first node)."""
        if self._running:
            raise OverlayError("already started")
        kademlia_compat.install()
        t = self.tunables

        def make_protocol(addr: tuple[str, int]) -> OverlayProtocol:
            host, port = addr
            node_id = self._node_id if self._node_id is not None else ids.node_id_for(host, port)
            self._info = NodeInfo(node_id, host, port, self._domain)
            self.server = DhtServer(
                ksize=t.ksize,
                alpha=t.alpha,
                node_id=ids.to_bytes(node_id),
                make_protocol=self._make_protocol,
                spawn=self._tasks.spawn,
                ping=self._ping_address,
                refresh_interval=t.kademlia_refresh_interval,
            )
            self.protocol = self._make_protocol(self.server)  # what the server would build
            self.server.protocol = self.protocol
            return self.protocol

        self.transport = await self._net.open(self._host, self._port, make_protocol)
        self.server.transport = self.transport
        socket_stats = getattr(self._net, "socket_stats", None)
        if socket_stats is not None:
            transport = self.transport
            self._metrics.sample_socket_with(lambda: socket_stats(transport))
        me = self.info
        addrs = [(a[0], a[1]) for a in bootstrap if (a[0], a[1]) != me.address]
        self._rng = random.Random(self._net.seed_for(me.id))
        self._hood = Neighbourhood(me.id, t.slot_capacity, t.leaf_set_size)
        contacts = KademliaContacts(self.protocol)
        self._detector = FailureDetector(
            me,
            t,
            self._metrics,
            self._hood,
            contacts,
            call=self.protocol.call,
            running=lambda: self._running,
            spawn=self._tasks.spawn,
            joined=self._node_joined,
            failed=self._node_failed,
            rng=self._rng,
            bootstrap=addrs,
        )
        self._upkeep = TableUpkeep(
            me.id, t, self._hood, contacts, call=self.protocol.call, rng=self._rng
        )
        self._running = True
        if addrs:
            await self.server.bootstrap(addrs)
            await self._upkeep.fill_slots()
            await self._upkeep.announce()
        self.server.refresh_table(t.kademlia_refresh_interval)
        self._tasks.spawn(self._maintenance(), "maintenance")

    async def stop(self) -> None:
        """Stop abruptly (as a crash looks to others): no goodbye, transport closed."""
        if not self._running:
            return
        self._running = False
        self.protocol.close()
        self.server.stop()
        self._tasks.cancel_all()
        self._net.close(self.transport)
        self._router.close()

    async def leave(self) -> None:
        """Graceful leave: tell the leaf set and routing contacts, then stop."""
        if not self._running:
            return
        calls = []
        for n in self._hood.watched():
            with contextlib.suppress(OverlayError):
                calls.append(
                    asyncio.ensure_future(
                        self.protocol.call(n.address, "leave", [], self.tunables.request_timeout)
                    )
                )
        if calls:
            # bounded by leave_wait, not request_timeout: one silent contact must not hold up
            # the stop (a process stopping 640 logical agents one by one spent ~1 s on each)
            _, late = await asyncio.wait(calls, timeout=self.tunables.leave_wait)
            for call in late:
                call.cancel()
            await asyncio.gather(*calls, return_exceptions=True)
        await self.stop()

    async def _maintenance(self) -> None:
        """The node's periodic work: a detection tick every ``probe_interval``, table and
        leaf-set refreshes and re-pings of failed nodes at their own intervals."""
        t = self.tunables
        # Random phase so nodes started together do not probe in lockstep.
        await asyncio.sleep(self._rng.uniform(0, t.probe_interval))
        next_rejoin = _now() + self._rng.uniform(0, t.rejoin_interval)
        next_socket = _now() + t.socket_stats_interval
        # Lookups stretch while the neighbourhood is quiet (overlay/trickle.py): each one a
        # change did not follow finds nothing new either.
        changes = self._hood.changes
        leaf_refresh = Trickle(
            t.leaf_refresh_interval,
            t.leaf_refresh_max_interval,
            _now() + self._rng.uniform(0, t.leaf_refresh_interval),
            changes,
        )
        slot_refresh = Trickle(
            t.slot_refresh_interval,
            t.slot_refresh_max_interval,
            _now() + self._rng.uniform(0, t.slot_refresh_interval),
            changes,
        )
        while self._running:
            try:
                self._detector.tick()
                if leaf_refresh.due(_now(), self._hood.changes):
                    self._tasks.spawn(self._upkeep.refresh_leaves(), "leaf refresh")
                if slot_refresh.due(_now(), self._hood.changes):
                    self._tasks.spawn(self._upkeep.refresh_slot(), "slot refresh")
                if _now() >= next_rejoin:
                    next_rejoin = _now() + t.rejoin_interval
                    self._tasks.spawn(self._detector.rejoin(), "rejoin")
                if _now() >= next_socket:
                    next_socket = _now() + t.socket_stats_interval
                    self._warn_kernel_drops()
            except Exception:  # maintenance must survive anything
                log.exception("maintenance tick failed")
            # An overloaded node probes less often, as Lifeguard does: the same local health
            # that stretches its timeouts stretches its detection tick, so the load it adds
            # falls while it is behind instead of feeding the overload (overlay/health.py).
            await asyncio.sleep(self._detector.timeout(t.probe_interval))

    def _warn_kernel_drops(self) -> None:
        """Datagrams the kernel dropped (receive buffer full) since the last sample: WARNING."""
        sock = self._metrics.socket()
        drops = sock.get("kernel_drops")
        if drops is not None and drops > self._kernel_drops_seen:
            log.warning(
                "overlay %s: the kernel dropped %d datagrams (UDP receive buffer of %s bytes "
                "full; raise tunables.recv_buffer and net.core.rmem_max)",
                self.info.address,
                drops - self._kernel_drops_seen,
                sock.get("rcvbuf"),
            )
            self._kernel_drops_seen = drops

    def _task_failed(self, what: str, exc: BaseException) -> None:
        self._metrics.event("task_errors")
        log.warning("overlay task %s failed: %r", what, exc)

    # ---- registration ------------------------------------------------------------------------

    def register(self, app_name: str, app: RoutingApplication) -> None:
        self._router.register(app_name, app)

    def handle(self, kind: str, handler: RequestHandler) -> None:
        """Serve direct requests of ``kind``: ``handler(payload, sender) -> dict`` (may be a
        coroutine function). Its exceptions reach the caller as :class:`RemoteError`."""
        self._handlers[kind] = handler

    def on_node_joined(self, callback: Callable[[NodeInfo], Any]) -> None:
        """``callback(info)`` when a node enters this node's view."""
        self._joined_cbs.append(callback)

    def report_gone(self, node_id: int) -> bool:
        """Evidence from another layer that ``node_id``'s process is gone (e.g. its data-plane
        port refuses connections): declare it failed now (``on_node_failed`` fires, routing
        avoids it, the rumour spreads). A later reply from it revives it. True if it was a
        known member."""
        if not self._running or node_id == self.id:
            return False
        return self._detector.declare_failed(node_id)

    def on_node_failed(self, callback: Callable[[NodeInfo], Any]) -> None:
        """``callback(info)`` when a known node is declared failed or leaves."""
        self._failed_cbs.append(callback)

    def _node_joined(self, info: NodeInfo) -> None:
        for cb in self._joined_cbs:
            self._notify(cb, info)

    def _node_failed(self, info: NodeInfo) -> None:
        for cb in self._failed_cbs:
            self._notify(cb, info)

    def _notify(self, cb: Callable[[NodeInfo], Any], info: NodeInfo) -> None:
        try:
            result = cb(info)
            if inspect.isawaitable(result):
                self._tasks.spawn(result, "membership callback")
        except Exception:
            log.exception("membership callback failed")

    # ---- views -------------------------------------------------------------------------------

    def leaf_set(self) -> list[NodeInfo]:
        """The live nodes XOR-closest to this node's id, nearest first."""
        return self._hood.leaves.members()

    def contacts(self) -> list[NodeInfo]:
        """All live contacts: routing table plus leaf set."""
        return self._hood.contacts()

    def next_hop(self, key: int, exclude: Iterable[int] = ()) -> NodeInfo | None:
        """Where this node would send a message for ``key``; ``None`` means it is the root."""
        return self._hood.next_hop(key, exclude)

    def size_estimate(self) -> int:
        """Network size estimated from the leaf set's spread: k nodes within XOR distance d
        means about k·2¹⁶⁰/d nodes in all."""
        return self._hood.size_estimate()

    def stats(self) -> dict[str, Any]:
        """This node's counters (see "Metrics" in docs/overlay.md): plain, JSON-encodable."""
        snap: dict[str, Any] = self._metrics.snapshot()
        snap["maintenance_msgs_sent"] = sum(snap["sent_msgs"].get(k, 0) for k in MAINTENANCE_TYPES)
        snap["contacts"] = len(self._hood.table)
        snap["suspected"] = self._detector.suspected_count() if self._running else 0
        # the timeout multiplier late replies raised (overlay/health.py); 1 = timeouts as set
        snap["timeout_multiplier"] = self._detector.health.multiplier
        return snap

    # ---- DHT (kademlia get/set reused) ---------------------------------------------------------

    async def get(self, key: str | bytes) -> Any:
        return await self.server.get(key)

    async def set(self, key: str | bytes, value: Any) -> bool:
        return bool(await self.server.set(key, value))

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
        return await self._router.route(app_name, key, message, report=report, timeout=timeout)

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
        known = self._hood.get(node_id)
        if known is not None:
            return known
        t = self.tunables
        await kademlia_compat.crawl(self.protocol, node_id, ksize=t.ksize, alpha=t.alpha)
        found = self._hood.table.get(node_id)
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

    def _call(
        self, address: Address, name: str, args: list[Any], timeout: float
    ) -> Awaitable[tuple[str, Any]]:
        # The router is built before the protocol exists, so it calls through here.
        return self.protocol.call(address, name, args, timeout)

    # ---- served for the failure detector (built after the protocol, so reached through here) -

    def _serve_ping(self, sender: NodeInfo, rumours: Any) -> list[Any]:
        return self._detector.serve_ping(sender, rumours)

    def _serve_leave(self, sender: NodeInfo) -> bool:
        return self._detector.serve_leave(sender)

    def _ping_address(self, addr: Address) -> Awaitable[NodeInfo | None]:
        return self._detector.ping_address(addr)

    # ProtocolHost interface (also the router's Liveness) ---------------------------------------

    def on_request_from(self, sender: NodeInfo) -> None:
        if self._running:
            self._detector.learn(sender, direct=True)

    def on_reply_from(self, node_id: int) -> None:
        self._detector.on_reply_from(node_id)

    def on_missed_reply(self, node_id: int) -> None:
        self._detector.on_missed_reply(node_id)

    def on_late_reply(self, address: Address) -> None:
        self._detector.on_late_reply(address)

    def routable(self, node_id: int) -> bool:
        return self._detector.routable(node_id)

    def on_learned(self, infos: list[NodeInfo]) -> None:
        if not self._running:
            return
        for info in infos:
            self._detector.learn(info, direct=False)

    def neighbours_of(self, key: int, exclude: int) -> list[NodeInfo]:
        return self._hood.neighbours_of(key, exclude, self.tunables.ksize)


def _now() -> float:
    """The event loop's clock (virtual in the simulator)."""
    return asyncio.get_running_loop().time()
