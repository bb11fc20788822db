"""Hop-by-hop routing of messages toward the root of a key, with forward/deliver upcalls.

Contract:

* :meth:`Router.route` sends a message from this node toward the live node XOR-closest to a
  key. At every node it passes through (the origin included) the application's ``forward``
  upcall runs before the message goes on; at the root ``deliver`` runs once. The next hop comes
  from the node's ``next_hop`` (:mod:`overlay.routing`), so every hop strictly approaches the
  key and a route cannot loop; ``max_hops`` is a second safety net.
* Each hop is acknowledged (the ``route`` RPC's reply) and retried ``request_retries`` times;
  a hop that stays silent counts as missed replies for the failure detector and the message is
  re-routed to the next best contact, so routes survive failures before they are declared.
* A receiving node de-duplicates hops by ``(route id, hop count)``: a retried hop whose ack was
  lost is acknowledged again but not routed twice.
* With ``report`` the final node sends ``route_done`` back to the origin, whose
  :meth:`Router.route` returns a :class:`RouteResult` — or raises :class:`RouteError` if the
  route ended badly (no application, hop limit, an upcall raised) or no report came in time.
  :meth:`Router.close` fails every route still waiting with :class:`NotRunning`.

The router owns the registered applications and the state of routes in flight (pending
reports, recently seen hops). It reaches the network only through the callables it is given.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import os
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from overlay import ids
from overlay.config import Tunables
from overlay.errors import NotRunning, RouteError
from overlay.metrics import Metrics
from overlay.nodeinfo import NodeInfo
from overlay.ports import Call, Liveness, Spawn
from overlay.protocol import ERROR, OK

log = logging.getLogger(__name__)

DELIVERED = "delivered"
STOPPED = "stopped"
SEEN_HOPS = 4096  # remembered (route id, hop) pairs: covers any retry window many times over

NextHop = Callable[[int, Iterable[int]], NodeInfo | None]


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


class Router:
    """Routes of one node; see the module docstring for the contract.

    What it needs of its node comes as callables, resolved at each use (the node's identity
    and protocol exist only once it has started): ``me()`` is this node's info, ``running()``
    whether it runs, ``next_hop(key, exclude)`` its routing decision, ``call(address, name,
    args, timeout)`` one RPC (resolving to ``(status, result)``), ``spawn(coro, what)`` a
    background task the node owns; ``liveness`` hears about answered and silent hops."""

    def __init__(
        self,
        tunables: Tunables,
        metrics: Metrics,
        *,
        me: Callable[[], NodeInfo],
        running: Callable[[], bool],
        next_hop: NextHop,
        call: Call,
        spawn: Spawn,
        liveness: Liveness,
    ) -> None:
        self._t = tunables
        self._metrics = metrics
        self._me = me
        self._running = running
        self._next_hop = next_hop
        self._call = call
        self._spawn = spawn
        self._liveness = liveness
        self.apps: dict[str, RoutingApplication] = {}
        self._routes: dict[bytes, asyncio.Future[RouteResult]] = {}
        self._seen: OrderedDict[tuple[bytes, int], None] = OrderedDict()

    def register(self, app_name: str, app: RoutingApplication) -> None:
        self.apps[app_name] = app

    async def route(
        self,
        app_name: str,
        key: int,
        message: dict[str, Any],
        *,
        report: bool = True,
        timeout: float | None = None,
    ) -> RouteResult | None:
        """See :meth:`overlay.node.OverlayNode.route`."""
        if not self._running():
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
            await self._step(app_name, key, message, self._me(), rid, 0, report)
            if future is None:
                return None
            wait = self._t.route_timeout if timeout is None else timeout
            try:
                return await asyncio.wait_for(asyncio.shield(future), wait)
            except TimeoutError:
                raise RouteError(f"no delivery report for key {ids.short(key)}") from None
        finally:
            self._routes.pop(rid, None)

    def close(self) -> None:
        """The node stopped: every route waiting for its report fails with NotRunning."""
        for fut in self._routes.values():
            if not fut.done():
                fut.set_exception(NotRunning("node stopped"))

    # ---- one hop -------------------------------------------------------------------------------

    async def _step(
        self,
        app_name: str,
        key: int,
        message: dict[str, Any],
        origin: NodeInfo,
        rid: bytes,
        hops: int,
        report: bool,
    ) -> None:
        app = self.apps.get(app_name)
        tried: list[int] = []
        while self._running():
            nh = self._next_hop(key, tried)
            if nh is None:
                if app is None:
                    self._metrics.drop("route_no_app")
                    await self._report(origin, rid, "no_app", hops, report)
                    return
                try:
                    await _maybe_await(app.deliver(key, message))
                except Exception as exc:
                    await self._upcall_failed(origin, rid, hops, report, "deliver", exc)
                    return
                self._metrics.event("routes_delivered")
                await self._report(origin, rid, DELIVERED, hops, report)
                return
            if hops >= self._t.max_hops:
                self._metrics.drop("hop_limit")
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
                self._metrics.event("routes_forwarded")
                return
            tried.append(nh.id)
            self._metrics.event("route_reroutes")

    async def _upcall_failed(
        self, origin: NodeInfo, rid: bytes, hops: int, report: bool, which: str, exc: Exception
    ) -> None:
        """An application upcall raised: count it and tell the origin (which then raises
        RouteError) instead of letting it wait for a report that never comes."""
        self._metrics.drop("upcall_error")
        log.warning("%s upcall failed: %r", which, exc)
        if origin.id == self._me().id:
            raise exc
        await self._report(origin, rid, f"{which} raised {type(exc).__name__}", hops, report)

    async def _send_reliably(self, target: NodeInfo, name: str, args: list[Any]) -> bool:
        """Send until acknowledged (True) or refused/silent after the retries (False)."""
        t = self._t
        for _ in range(t.request_retries + 1):
            if not self._running():
                return False
            status, _result = await self._call(target.address, name, args, t.request_timeout)
            if status == OK:
                self._liveness.on_reply_from(target.id)
                return True
            if status == ERROR:
                self._liveness.on_reply_from(target.id)
                return False
            self._liveness.on_missed_reply(target.id)
            if not self._liveness.routable(target.id):
                return False  # failed meanwhile (e.g. a proof arrived): reroute now
        return False

    # ---- delivery reports ----------------------------------------------------------------------

    async def _report(
        self, origin: NodeInfo, rid: bytes, status: str, hops: int, report: bool
    ) -> None:
        if not report:
            return
        me = self._me()
        if origin.id == me.id:
            self._finish(rid, status, me, hops)
            return
        args = [rid, status, me.to_wire(), hops]
        self._spawn(self._send_reliably(origin, "route_done", args), "route_done")

    def _finish(self, rid: bytes, status: str, at: NodeInfo, hops: int) -> None:
        future = self._routes.get(rid)
        if future is None or future.done():
            return
        if status in (DELIVERED, STOPPED):
            future.set_result(RouteResult(status, at, hops))
        else:
            future.set_exception(RouteError(f"route failed at {at}: {status}"))

    # ---- served RPCs -----------------------------------------------------------------------------

    def serve_route(
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
        """The ``route`` RPC: acknowledge the hop at once, route it on in the background."""
        if not isinstance(app_name, str) or not isinstance(message, dict):
            raise TypeError("bad route message")
        if not isinstance(rid, bytes) or not isinstance(hops, int) or hops < 0:
            raise TypeError("bad route header")
        key = ids.from_bytes(key_raw)
        origin = NodeInfo.from_wire(origin_raw)
        seen = (rid, hops)
        if seen in self._seen:  # our ack was lost and the sender retried
            return True
        self._seen[seen] = None
        if len(self._seen) > SEEN_HOPS:
            self._seen.popitem(last=False)
        self._spawn(self._step(app_name, key, message, origin, rid, hops, bool(report)), "route")
        return True

    def serve_route_done(
        self, sender: NodeInfo, rid: bytes, status: str, at_raw: Any, hops: int
    ) -> bool:
        """The ``route_done`` RPC: the final node's report for a route this node started."""
        self._finish(rid, str(status), NodeInfo.from_wire(at_raw), int(hops))
        return True


async def _maybe_await(value: Any) -> Any:
    if inspect.isawaitable(value):
        return await value
    return value
