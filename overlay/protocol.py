"""The datagram protocol: the ``kademlia`` protocol class, hardened.

Contract: :class:`OverlayProtocol` subclasses ``kademlia.protocol.KademliaProtocol`` (plugged in
through ``Server.protocol_class``) so the package's routing table, bootstrap crawl, refresh and
get/set run unchanged on top of it, but it replaces the whole ``rpcudp`` datagram layer:

* every datagram is authenticated by :class:`overlay.wire.Codec` (HMAC-SHA256, timestamp
  window, nonce replay cache, size limit) before anything in it is parsed; bad datagrams are
  counted by reason and dropped, and no exception ever escapes into the event loop;
* only the RPC names in :attr:`OverlayProtocol.allowed` are dispatched, through an explicit
  table — never ``getattr(self, "rpc_" + name)`` on a name from the network — and an unknown
  name gets an error reply (the caller fails fast instead of timing out);
* a handler that raises is logged, counted and answered with an error reply;
* ``rpcudp``'s ``__getattr__`` magic is disabled: a misspelt method is an ``AttributeError``,
  not a silent remote call;
* a missed reply is reported to the failure detector instead of evicting the contact;
* encoding uses msgpack (never pickle or umsgpack); oversized messages raise
  :class:`overlay.errors.MessageTooLarge` before anything is sent.

The other changes to the package (crawl heap, server) are in :mod:`overlay.kademlia_compat`.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import os
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from kademlia.node import Node
from kademlia.protocol import KademliaProtocol

from overlay import ids
from overlay.errors import NotRunning
from overlay.metrics import Metrics
from overlay.nodeinfo import NodeInfo
from overlay.tasks import BackgroundTasks
from overlay.wire import MSG_ID_SIZE, REQUEST, RESPONSE, Codec, WireError

log = logging.getLogger(__name__)

OK = "ok"
ERROR = "error"
TIMEOUT = "timeout"
DHT_VALUE_TYPES = (int, float, bool, str, bytes)
# Timed-out requests remembered per node, so a reply that comes after its timeout counts as a
# late reply (overlay/health.py): at most this many, for at most this long (seconds).
EXPIRED_KEPT = 256
EXPIRED_TTL = 30.0

Address = tuple[str, int]

Handler = Callable[..., Any]


class ProtocolHost(Protocol):
    """What the protocol needs from the node that owns it."""

    def on_request_from(self, sender: NodeInfo) -> None: ...
    def on_reply_from(self, node_id: int) -> None: ...
    def on_missed_reply(self, node_id: int) -> None: ...
    def on_late_reply(self, address: tuple[str, int]) -> None: ...
    def on_learned(self, infos: list[NodeInfo]) -> None: ...
    def neighbours_of(self, key: int, exclude: int) -> list[NodeInfo]: ...


class OverlayProtocol(KademliaProtocol):
    """Authenticated, allow-listed RPC over datagrams; see the module docstring."""

    def __init__(
        self,
        source_node: Node,
        storage: Any,
        ksize: int,
        *,
        info: NodeInfo,
        codec: Codec,
        metrics: Metrics,
        host: ProtocolHost,
        handlers: dict[str, Handler],
        request_timeout: float,
    ) -> None:
        super().__init__(source_node, storage, ksize)
        self.info = info
        self._info_wire = info.to_wire()
        self.codec = codec
        self.metrics = metrics
        self.host = host
        self._wait_timeout = request_timeout
        self._outstanding: dict[
            bytes, tuple[asyncio.Future[Any], asyncio.TimerHandle | None, str, Address]
        ] = {}
        # Requests that timed out lately, by message id: (address asked, when it expired). A
        # reply to one of them is a late reply (overlay/health.py): its peer is alive and our
        # timeouts are too short. Bounded in size and age.
        self._expired: OrderedDict[bytes, tuple[Address, float]] = OrderedDict()
        self._rpcs: dict[str, Handler] = {
            "find_node": self._serve_find_node,
            "find_value": self._serve_find_value,
            "store": self._serve_store,
            **handlers,
        }
        self.allowed = frozenset(self._rpcs)
        # Coroutine handlers still running; their failures are answered as error replies in
        # _serve, so the helper needs no error hook. close() cancels them.
        self._tasks = BackgroundTasks()
        self.closed = False

    # rpcudp turns any unknown attribute into a remote call; make it an ordinary error.
    def __getattr__(self, name: str) -> Any:
        raise AttributeError(f"{type(self).__name__!s} has no attribute {name!r}")

    # ---- receiving -------------------------------------------------------------------------

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:  # type: ignore[override]
        try:
            self._receive(data, addr)
        except Exception:  # last line of defence: nothing escapes into the event loop
            self.metrics.drop("internal_error")
            log.exception("unexpected error handling a datagram from %s", addr)

    def error_received(self, exc: Exception) -> None:
        self.metrics.drop("socket_error")

    def _receive(self, data: bytes, addr: tuple[str, int]) -> None:
        if self.closed:
            return
        try:
            frame = self.codec.decode(data)
        except WireError as exc:
            self.metrics.drop(exc.reason)
            return
        if frame.type == RESPONSE:
            self._accept_reply(frame.payload, len(data), addr)
            return
        msg_id, name, sender_raw, args = frame.payload
        try:
            sender = NodeInfo.from_wire(sender_raw)
        except ValueError:
            self.metrics.drop("malformed")
            return
        handler = self._rpcs.get(name)
        if handler is None:
            self.metrics.drop("unknown_rpc")
            self._reply(msg_id, False, f"unknown rpc {name[:40]!r}", addr, "error")
            return
        self.metrics.received(name, len(data))
        self.host.on_request_from(sender)
        # Synchronous handlers (ping, find_node, route, ...) are answered at once; only a
        # coroutine handler gets a task. Saves a task per datagram (matters at 10,000 sim nodes).
        try:
            result = handler(sender, *args)
        except Exception as exc:
            self._handler_failed(msg_id, name, sender, exc, addr)
            return
        if inspect.isawaitable(result):
            self._tasks.spawn(self._serve(msg_id, name, result, sender, addr), "rpc " + name)
        else:
            self._reply(msg_id, True, result, addr, name)

    def _handler_failed(
        self, msg_id: bytes, name: str, sender: NodeInfo, exc: Exception, addr: tuple[str, int]
    ) -> None:
        self.metrics.drop("handler_error")
        log.warning("rpc %s from %s failed: %r", name, sender, exc)
        self._reply(msg_id, False, f"{type(exc).__name__}: {exc}", addr, name)

    async def _serve(
        self,
        msg_id: bytes,
        name: str,
        pending: Awaitable[Any],
        sender: NodeInfo,
        addr: tuple[str, int],
    ) -> None:
        try:
            result = await pending
        except Exception as exc:
            self._handler_failed(msg_id, name, sender, exc, addr)
            return
        self._reply(msg_id, True, result, addr, name)

    def _reply(self, msg_id: bytes, ok: bool, result: Any, addr: tuple[str, int], name: str):
        if self.closed or self.transport is None:
            return
        try:
            data = self.codec.encode(RESPONSE, [msg_id, ok, result])
        except Exception as exc:  # too large or not encodable: tell the caller why
            self.metrics.drop("reply_unencodable")
            data = self.codec.encode(RESPONSE, [msg_id, False, f"reply not sent: {exc}"])
        self.transport.sendto(data, addr)
        self.metrics.sent(name + ".reply", len(data))

    def _accept_reply(self, payload: list[Any], size: int, addr: Address) -> None:
        msg_id, ok, result = payload
        entry = self._outstanding.pop(msg_id, None)
        if entry is None:
            expired = self._expired.pop(msg_id, None) if type(msg_id) is bytes else None
            if expired is not None and expired[0] == addr:
                self.metrics.event("late_replies")
                self.host.on_late_reply(addr)
            else:
                self.metrics.drop("unexpected_reply")  # never asked, or too late to remember
            return
        future, timer, name, _ = entry
        if timer is not None:
            timer.cancel()
        self.metrics.received(name + ".reply", size)
        if not future.done():
            future.set_result((OK, result) if ok else (ERROR, str(result)))

    # ---- sending ---------------------------------------------------------------------------

    def call(
        self, address: tuple[str, int], name: str, args: list[Any], timeout: float
    ) -> asyncio.Future[tuple[str, Any]]:
        """Send one request; the future resolves to ``(OK, result)``, ``(ERROR, text)`` or
        ``(TIMEOUT, None)``. Raises ``MessageTooLarge``/``TypeError`` before sending."""
        if self.closed or self.transport is None:
            raise NotRunning("the node is not running")
        msg_id = os.urandom(MSG_ID_SIZE)
        data = self.codec.encode(REQUEST, [msg_id, name, self._info_wire, args])
        loop = asyncio.get_running_loop()
        future: asyncio.Future[tuple[str, Any]] = loop.create_future()
        post_at = getattr(loop, "post_at", None)
        if post_at is None:
            timer: asyncio.TimerHandle | None = loop.call_later(timeout, self._expire, msg_id)
        else:  # the simulator's loop: an uncancellable callback is cheaper than a timer, and
            post_at(loop.time() + timeout, self._expire, msg_id)  # _expire is a no-op once
            timer = None  # the reply has come (the entry is gone)
        self._outstanding[msg_id] = (future, timer, name, address)
        self.transport.sendto(data, address)
        self.metrics.sent(name, len(data))
        return future

    def _expire(self, msg_id: bytes) -> None:
        entry = self._outstanding.pop(msg_id, None)
        if entry is not None:
            self.metrics.event("timeouts." + entry[2])
            self._remember_expired(msg_id, entry[3])
            if not entry[0].done():
                entry[0].set_result((TIMEOUT, None))

    def _remember_expired(self, msg_id: bytes, address: Address) -> None:
        now = asyncio.get_running_loop().time()
        expired = self._expired
        expired[msg_id] = (address, now)
        while expired:
            oldest = next(iter(expired.values()))
            if len(expired) <= EXPIRED_KEPT and now - oldest[1] <= EXPIRED_TTL:
                break
            expired.popitem(last=False)

    def close(self) -> None:
        """Stop serving: pending calls time out at once, running handlers are cancelled."""
        self.closed = True
        for future, timer, _, _ in self._outstanding.values():
            if timer is not None:
                timer.cancel()
            if not future.done():
                future.set_result((TIMEOUT, None))
        self._outstanding.clear()
        self._expired.clear()
        self._tasks.cancel_all()

    # ---- the Kademlia RPCs (served) ----------------------------------------------------------

    def _serve_find_node(self, sender: NodeInfo, key: bytes) -> list[list[Any]]:
        target = ids.from_bytes(key)
        return [n.to_wire() for n in self.host.neighbours_of(target, sender.id)]

    def _serve_find_value(self, sender: NodeInfo, key: bytes) -> Any:
        ids.from_bytes(key)  # validates
        value = self.storage.get(key, None)
        if value is None:
            return self._serve_find_node(sender, key)
        return {"value": value}

    def _serve_store(self, sender: NodeInfo, key: bytes, value: Any) -> bool:
        ids.from_bytes(key)
        if type(value) not in DHT_VALUE_TYPES:
            raise TypeError("DHT values are int, float, bool, str or bytes")
        self.storage[key] = value
        return True

    # ---- the Kademlia RPCs (called by kademlia's crawler, bootstrap and refresh) -------------

    async def _kad_call(self, node: Node, name: str, args: list[Any]) -> tuple[bool, Any]:
        status, result = await self.call((node.ip, node.port), name, args, self._wait_timeout)
        if status == TIMEOUT:
            self.host.on_missed_reply(node.long_id)
            return (False, None)
        self.host.on_reply_from(node.long_id)
        if status == ERROR:
            return (False, None)
        return (True, result)

    def _node_list(self, result: Any) -> list[tuple[bytes, str, int]]:
        """Validate a find_node reply, learn its NodeInfos, and hand kademlia's crawler the
        ``(id, ip, port)`` triples it expects."""
        infos: list[NodeInfo] = []
        if isinstance(result, list):
            for item in result[: 4 * self.router.ksize]:
                try:
                    infos.append(NodeInfo.from_wire(item))
                except ValueError:
                    self.metrics.drop("malformed_contact")
        self.host.on_learned(infos)
        me = self.info.id
        return [(ids.to_bytes(i.id), i.host, i.port) for i in infos if i.id != me]

    async def call_find_node(self, node_to_ask: Node, node_to_find: Node) -> tuple[bool, Any]:
        ok, result = await self._kad_call(node_to_ask, "find_node", [node_to_find.id])
        return (True, self._node_list(result)) if ok else (False, None)

    async def call_find_value(self, node_to_ask: Node, node_to_find: Node) -> tuple[bool, Any]:
        ok, result = await self._kad_call(node_to_ask, "find_value", [node_to_find.id])
        if not ok:
            return (False, None)
        if isinstance(result, dict):
            return (True, result)
        return (True, self._node_list(result))

    async def call_ping(self, node_to_ask: Node) -> tuple[bool, Any]:
        return await self._kad_call(node_to_ask, "ping", [[]])

    async def call_store(self, node_to_ask: Node, key: bytes, value: Any) -> tuple[bool, Any]:
        return await self._kad_call(node_to_ask, "store", [key, value])

    def handle_call_response(self, result: Any, node: Node) -> Any:
        # Liveness is tracked by the failure detector (see _kad_call); one miss is not a death.
        return result
