"""TreeManager: Scribe-style shared reducer trees over an overlay node (the facade).

Contract (one manager per agent; details and the loop-freedom argument in docs/srt-trees.md):

* **Formation.** ``join(tree_id)`` routes a JOIN toward ``tree_id`` on the overlay (routing
  application ``"srt"``). Every node the JOIN passes through writes its own ``NodeInfo`` into
  it (``prev``) and takes the next hop as its parent; the next node adopts ``prev`` as a child
  and, if it was already on the tree, stops the JOIN there. The node where the JOIN is
  delivered (the live node XOR-closest to ``tree_id``) is the root: the job's master.
* **Invariant (loop freedom).** A node's parent is always strictly XOR-closer to the tree id
  than the node itself. Every route hop is strictly closer, and every adoption checks it
  (``LoopRefused`` otherwise), so the parent relation can never close a cycle — whatever the
  timing, churn or stale state. A JOIN whose path already contains the node is refused too.
* **Maintenance.** Every ``heartbeat_interval`` a child sends one ``srt.hb`` per parent node
  (covering all trees it has with that parent); the reply carries the parent's data URL, the
  trees in which the parent no longer counts it as a child, and the root it knows. No good
  reply for ``parent_timeout`` seconds, a "lost" answer, or ``overlay.on_node_failed`` for the
  parent → re-join (children are kept). A parent drops a child silent for ``child_timeout``.
  A root whose ``next_hop(tree_id)`` is no longer ``None`` (a closer node exists), or through
  which a JOIN is forwarded, hands the master role over by joining toward the closer node;
  the new root fires ``tree_root_changed(t, True, None)``, the old one
  ``tree_root_changed(t, False, new_root)``. A non-subscriber with no children prunes itself.
* **Leaving.** ``leave(t)`` unsubscribes (the node stays a forwarder while it has children);
  ``stop()`` hands every tree over: children are moved to this node's parent (or, at a root,
  to the closest other node, told to take over) and the parent is told the node left.
* Network input is validated (``srt.trees.wire``); malformed messages are counted in
  ``stats()["bad_input"]`` and answered with an error, never crash the node.
* Timings and bounds come from :class:`srt.Tunables` (``tunables``, read at each use).

The work is done by parts, each in its own module and each given only the narrow
:class:`~srt.trees.host.TreeHost` view of this manager: :mod:`srt.trees.table` (the trees and
their state changes), :mod:`srt.trees.formation` (JOINs), :mod:`srt.trees.maintenance`
(heartbeats and timeouts), :mod:`srt.trees.handoff` (leaving and take-over),
:mod:`srt.trees.multicast` and :mod:`srt.trees.query`. This module wires them and keeps the
public API and the life cycle.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections import Counter
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from overlay import NodeInfo, RoutingApplication
from overlay.tasks import BackgroundTasks
from srt.config import DEFAULT_TUNABLES, Tunables
from srt.trees import wire as w
from srt.trees.formation import Formation
from srt.trees.handoff import Handoff
from srt.trees.host import TreeNetwork, ensure_accepting
from srt.trees.maintenance import Maintenance
from srt.trees.multicast import Multicaster
from srt.trees.query import QueryService
from srt.trees.state import TreeState, view_of
from srt.trees.table import TreeTable, now
from srt.trees.types import (
    JOINING,
    BadTreeMessage,
    JoinTimeout,
    MulticastResult,
    TreeError,
    TreeListener,
    TreeView,
)

log = logging.getLogger(__name__)


class _SrtApp(RoutingApplication):
    """The ``"srt"`` routing application: hands routed messages to the manager."""

    def __init__(self, manager: TreeManager) -> None:
        self.m = manager

    def forward(self, key: int, message: dict[str, Any], next_hop: NodeInfo) -> Any:
        return self.m._on_forward(key, message, next_hop)

    def deliver(self, key: int, message: dict[str, Any]) -> Any:
        return self.m._on_deliver(key, message)


class _Effects:
    """:class:`~srt.trees.host.TreeEffects` of one manager: each action runs as one of its
    background tasks, in the part that owns it."""

    def __init__(self, manager: TreeManager) -> None:
        self.m = manager

    def spawn_attempt(self, tree: TreeState) -> None:
        self.m.spawn(self.m._formation.attempt(tree), "join attempt")

    def spawn_leave(self, target: NodeInfo, tree_id: int, reason: str) -> None:
        self.m.spawn(self.m._handoff.tell_leave(target, tree_id, reason), "leave notice")

    def spawn_demotion(self, tree: TreeState) -> None:
        self.m.spawn(self.m._formation.announce_demotion(tree), "demotion")

    def spawn_heartbeat(self, parent: NodeInfo, trees: list[TreeState]) -> None:
        self.m.spawn(self.m._maint.heartbeat(parent, trees), "heartbeat")

    def spawn_drop(self, tree: TreeState) -> None:
        self.m.spawn(self.m._handoff.drop_tree(tree), "prune")


class TreeManager:
    """Builds and maintains this agent's trees; see the module docstring for the contract.

    ``data_url`` is this agent's data-plane base URL (sent to parents and children);
    ``tunables`` its timings (``join`` gives up after ``tunables.join_timeout``). Both may be
    replaced while the manager runs: they are read at each use. ``events`` and ``bad_input``
    are the raw counters behind :meth:`stats`."""

    def __init__(
        self, overlay: TreeNetwork, *, data_url: str, tunables: Tunables = DEFAULT_TUNABLES
    ) -> None:
        if len(data_url) > w.MAX_URL:
            raise ValueError(f"data_url longer than {w.MAX_URL} characters")
        self.overlay = overlay
        self.data_url = data_url
        self.tunables = tunables
        self.events: Counter[str] = Counter()
        self.bad_input: Counter[str] = Counter()
        self._tasks = BackgroundTasks(self._task_failed)
        self._loop_task: asyncio.Task[Any] | None = None
        self._running = False
        self._stopping = False
        effects = _Effects(self)
        rng = random.Random()
        self._table = TreeTable(self, effects)
        self._formation = Formation(self, self._table, overlay, effects, rng)
        self._maint = Maintenance(self, self._table, overlay, effects, rng)
        self._handoff = Handoff(self, self._table, overlay)
        self._mc = Multicaster(self, overlay)
        self._query = QueryService(self, overlay)

    # ---- life cycle ------------------------------------------------------------------------

    @property
    def me(self) -> NodeInfo:
        return self.overlay.info

    @property
    def running(self) -> bool:
        return self._running

    @property
    def accepting(self) -> bool:
        """True while started and not stopping: the tree layer takes new work."""
        return self._running and not self._stopping

    async def start(self) -> None:
        """Register with the overlay and start maintenance. May (and preferably should) be
        called *before* ``overlay.start()``: then no routed tree message can ever reach this
        node before its tree layer is there to handle it."""
        if self._running:
            raise TreeError("already started")
        ov = self.overlay
        ov.register(w.APP, _SrtApp(self))
        ov.handle(w.HB, self._guard(w.HB, self._maint.serve_hb))
        ov.handle(w.LEAVE, self._guard(w.LEAVE, self._handoff.serve_leave))
        ov.handle(w.MOVED, self._guard(w.MOVED, self._handoff.serve_moved))
        ov.handle(w.ADOPT, self._guard(w.ADOPT, self._handoff.serve_adopt))
        ov.handle(w.TAKEOVER, self._guard(w.TAKEOVER, self._handoff.serve_takeover))
        ov.handle(w.MC, self._guard(w.MC, self._mc.serve))
        ov.handle(w.QR, self._guard(w.QR, self._query.serve_reply))
        ov.on_node_failed(self._maint.node_failed)
        self._running = True
        self._stopping = False
        self._loop_task = asyncio.ensure_future(self._maint.run())

    async def stop(self) -> None:
        """Graceful: hand every tree over (children to our parent or a successor root; tell
        the parent we left), then stop maintenance. The overlay node keeps running."""
        if not self._running:
            return
        self._stopping = True
        if self._loop_task is not None:
            self._loop_task.cancel()
        trees = list(self._table.trees.values())
        if trees and self.overlay.running:
            await asyncio.gather(
                *(self._handoff.hand_off(t) for t in trees), return_exceptions=True
            )
        self._table.trees.clear()
        self._running = False
        self._tasks.cancel_all()
        self._query.close()

    # ---- public API ------------------------------------------------------------------------

    async def join(self, tree_id: int, *, job: str, subscriber: bool = True) -> TreeView:
        """Join ``tree_id`` (or update ``subscriber`` if already on it) and return the view
        once attached (as root or below a parent). Raises :class:`JoinTimeout` after
        ``tunables.join_timeout`` (the tree stays registered and the manager keeps retrying)."""
        ensure_accepting(self)
        if not isinstance(tree_id, int) or isinstance(tree_id, bool) or not 0 <= tree_id < 2**160:
            raise ValueError(f"tree id must be a 160-bit int, got {tree_id!r}")
        if not isinstance(job, str) or len(job) > w.MAX_JOB:
            raise ValueError(f"job must be a string of at most {w.MAX_JOB} characters")
        table = self._table
        tree = table.get(tree_id)
        if tree is None:
            tree = table.add(tree_id, job, subscriber)
        else:
            tree.subscriber = tree.subscriber or subscriber
            tree.job = tree.job or job
        join_timeout = self.tunables.join_timeout
        deadline = now() + join_timeout
        while tree.state == JOINING:
            if now() >= deadline or not table.current(tree):
                raise JoinTimeout(
                    f"tree {tree_id:040x} not joined within {join_timeout}s; retrying"
                )
            if not tree.joining:
                await self._formation.attempt(tree)
            else:
                await asyncio.sleep(min(0.05, self.tunables.heartbeat_interval / 4))
            if tree.state == JOINING:
                await asyncio.sleep(min(tree.backoff, max(0.0, deadline - now())))
        return view_of(tree, self.me)

    async def leave(self, tree_id: int) -> None:
        """Unsubscribe. A node with children stays on as a forwarder (Scribe); a childless
        one leaves the tree at once (its parent is told)."""
        tree = self._table.get(tree_id)
        if tree is None:
            return
        tree.subscriber = False
        if not tree.children:
            await self._handoff.drop_tree(tree)

    def view(self, tree_id: int) -> TreeView | None:
        tree = self._table.get(tree_id)
        return None if tree is None else view_of(tree, self.me)

    def views(self) -> list[TreeView]:
        return [view_of(t, self.me) for t in self._table.trees.values()]

    def add_listener(self, listener: TreeListener) -> None:
        self._table.listeners.append(listener)

    def on_multicast(self, handler: Callable[[int, dict], Awaitable[None] | None]) -> None:
        """``handler(tree_id, message)`` runs at every member a multicast reaches."""
        self._mc.handlers.append(handler)

    async def multicast(
        self, tree_id: int, message: dict, *, timeout: float | None = None
    ) -> MulticastResult:
        """Master only: send ``message`` down the tree; see :mod:`srt.trees.multicast`.
        ``timeout`` defaults to ``tunables.multicast_timeout``."""
        return await self._mc.multicast(tree_id, message, timeout=timeout)

    def on_query(self, handler: Callable[[int, dict], Awaitable[dict] | dict]) -> None:
        """``handler(tree_id, message) -> dict`` answers queries routed to this node as root."""
        self._query.handler = handler

    async def query(self, tree_id: int, message: dict, *, timeout: float | None = None) -> dict:
        """Route ``message`` to the root of ``tree_id``; return its handler's reply.
        ``timeout`` defaults to ``tunables.query_timeout``."""
        return await self._query.query(tree_id, message, timeout=timeout)

    async def locate_root(self, tree_id: int, tries: int | None = None) -> NodeInfo | None:
        """The node a message for ``tree_id`` is delivered to now (one routed message per
        try, ``tunables.locate_root_tries`` by default; a failed try is repeated after a
        heartbeat interval). None if not found."""
        return await self._formation.locate_root(tree_id, tries)

    def stats(self) -> dict[str, Any]:
        """Counts of trees by state and of children, the loop lag, events and bad input."""
        return {
            **self._table.counts(),
            "loop_lag_s": round(self._maint.lag, 4),
            "events": dict(self.events),
            "bad_input": dict(self.bad_input),
        }

    def spawn(self, coro: Coroutine[Any, Any, Any], what: str) -> None:
        """Run ``coro`` as a background task of the tree layer (cancelled by :meth:`stop`;
        a failure is counted in ``events["task_errors"]`` and logged)."""
        self._tasks.spawn(coro, what)

    # ---- glue ------------------------------------------------------------------------------

    def _task_failed(self, what: str, exc: BaseException) -> None:
        self.events["task_errors"] += 1
        log.warning("tree task failed (%s): %r", what, exc)

    def _guard(self, kind: str, fn: Callable[[Any, NodeInfo], Any]) -> Callable[..., Any]:
        """Wrap a request handler: malformed input is counted and answered with an error."""

        async def handler(payload: Any, sender: NodeInfo) -> Any:
            try:
                result = fn(payload, sender)
                if asyncio.iscoroutine(result):
                    result = await result
                return result
            except BadTreeMessage as exc:
                self.bad_input[kind] += 1
                log.info("rejected %s from %s: %s", kind, sender, exc)
                raise

        return handler

    def _reject_route(self, kind: Any) -> BadTreeMessage:
        self.bad_input["route"] += 1
        return BadTreeMessage(f"unknown routed message kind {kind!r}")

    def _on_forward(self, key: int, message: Any, next_hop: NodeInfo) -> Any:
        kind = message.get("k") if isinstance(message, dict) else None
        if kind == "join":
            return self._formation.forward_join(key, message, next_hop)
        if kind in ("q", "where"):
            return message
        raise self._reject_route(kind)

    def _on_deliver(self, key: int, message: Any) -> Any:
        kind = message.get("k") if isinstance(message, dict) else None
        if kind == "join":
            return self._formation.deliver_join(key, message)
        if kind == "where":
            return None
        if kind == "q":
            return self._query.deliver(key, message)
        raise self._reject_route(kind)
