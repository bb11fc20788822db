"""TreeManager: Scribe-style shared reducer trees over an :class:`overlay.OverlayNode`.

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

Multicast (:mod:`srt.trees.multicast`) and cross-job queries (:mod:`srt.trees.query`) are parts of
the
manager's API, implemented in their own modules.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
from collections import Counter, deque
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

import msgpack

from overlay import NodeInfo, OverlayError, OverlayNode, RemoteError, RoutingApplication
from srt.trees import wire as w
from srt.trees.multicast import Multicaster
from srt.trees.query import QueryService
from srt.trees.types import (
    JOINING,
    MEMBER,
    ROOT,
    BadTreeMessage,
    JoinTimeout,
    LoopRefused,
    MulticastResult,
    TreeError,
    TreeListener,
    TreeView,
)

LAG_SLACK = 3.0  # timeouts widen by this many times the recent event-loop lag
log = logging.getLogger(__name__)

HB_REPLY_MARGIN = 256  # datagram header, MAC and response framing around a heartbeat reply


@dataclass(eq=False)
class _Tree:
    """Mutable per-tree state (internal; callers get :class:`TreeView` snapshots)."""

    tree_id: int
    job: str
    subscriber: bool
    state: str = JOINING
    parent: NodeInfo | None = None
    parent_url: str | None = None
    parent_ok: float = 0.0  # last time the parent confirmed us (attach or heartbeat reply)
    parent_since: float = 0.0  # when we took the current parent
    announced_parent: int | None = None  # parent last reported to listeners
    announced_root: bool = False  # listeners were told we are the root (and not since told not)
    root: NodeInfo | None = None
    children: dict[int, NodeInfo] = field(default_factory=dict)
    child_urls: dict[int, str] = field(default_factory=dict)
    child_seen: dict[int, float] = field(default_factory=dict)
    own_jid: bytes | None = None  # the JOIN this node originated and still waits for
    old_jids: deque[bytes] = field(default_factory=lambda: deque(maxlen=4))  # superseded ones
    via_jid: bytes | None = None  # the JOIN through which this node took its parent
    joining: bool = False  # an attempt is running
    next_attempt: float = 0.0
    backoff: float = 0.0
    touched: float = 0.0  # created / made root: not pruned for a while after this


class _SrtApp(RoutingApplication):
    """The ``"srt"`` routing application: hands routed messages to the manager."""

    def __init__(self, manager: TreeManager) -> None:
        self.m = manager

    def forward(self, key: int, message: dict[str, Any], next_hop: NodeInfo) -> Any:
        return self.m._on_forward(key, message, next_hop)

    def deliver(self, key: int, message: dict[str, Any]) -> Any:
        return self.m._on_deliver(key, message)


class TreeManager:
    """Builds and maintains this agent's trees; see the module docstring for the contract.

    ``data_url`` is this agent's data-plane base URL (sent to parents and children).
    ``child_timeout`` defaults to ``parent_timeout``; ``join_timeout`` bounds ``join``."""

    def __init__(
        self,
        overlay: OverlayNode,
        *,
        data_url: str,
        heartbeat_interval: float = 1.0,
        parent_timeout: float = 3.5,
        child_timeout: float | None = None,
        join_timeout: float = 10.0,
    ) -> None:
        if heartbeat_interval <= 0 or parent_timeout <= heartbeat_interval:
            raise ValueError("need 0 < heartbeat_interval < parent_timeout")
        if len(data_url) > w.MAX_URL:
            raise ValueError(f"data_url longer than {w.MAX_URL} characters")
        self.overlay = overlay
        self.data_url = data_url
        self.heartbeat_interval = heartbeat_interval
        self.parent_timeout = parent_timeout
        self.child_timeout = parent_timeout if child_timeout is None else child_timeout
        self.join_timeout = join_timeout
        self._trees: dict[int, _Tree] = {}
        self._listeners: list[TreeListener] = []
        self._tasks: set[asyncio.Task[Any]] = set()
        self._departed: dict[int, float] = {}  # nodes that told us they are leaving -> when
        self._loop_task: asyncio.Task[Any] | None = None
        self._running = False
        self._stopping = False
        self._rng = random.Random()
        self._lag = 0.0  # recent event-loop lag (s), widens heartbeat timeouts
        self.events: Counter[str] = Counter()
        self.bad_input: Counter[str] = Counter()
        self._mc = Multicaster(self)
        self._query = QueryService(self)

    # ---- life cycle ------------------------------------------------------------------------

    @property
    def me(self) -> NodeInfo:
        return self.overlay.info

    @property
    def running(self) -> bool:
        return self._running

    async def start(self) -> None:
        """Register with the overlay and start maintenance. May (and preferably should) be
        called *before* ``overlay.start()``: then no routed tree message can ever reach this
        node before its tree layer is there to handle it."""
        if self._running:
            raise TreeError("already started")
        ov = self.overlay
        ov.register(w.APP, _SrtApp(self))
        ov.handle(w.HB, self._guard(w.HB, self._serve_hb))
        ov.handle(w.LEAVE, self._guard(w.LEAVE, self._serve_leave))
        ov.handle(w.MOVED, self._guard(w.MOVED, self._serve_moved))
        ov.handle(w.ADOPT, self._guard(w.ADOPT, self._serve_adopt))
        ov.handle(w.TAKEOVER, self._guard(w.TAKEOVER, self._serve_takeover))
        ov.handle(w.MC, self._guard(w.MC, self._mc.serve))
        ov.handle(w.QR, self._guard(w.QR, self._query.serve_reply))
        ov.on_node_failed(self._node_failed)
        self._running = True
        self._stopping = False
        self._loop_task = asyncio.ensure_future(self._maintenance())

    async def stop(self) -> None:
        """Graceful: hand every tree over (children to our parent or a successor root; tell
        the parent we left), then stop maintenance. The overlay node keeps running."""
        if not self._running:
            return
        self._stopping = True
        if self._loop_task is not None:
            self._loop_task.cancel()
        trees = list(self._trees.values())
        if trees and self.overlay.running:
            await asyncio.gather(*(self._hand_off(t) for t in trees), return_exceptions=True)
        self._trees.clear()
        self._running = False
        for task in list(self._tasks):
            task.cancel()
        self._query.close()

    # ---- public API ------------------------------------------------------------------------

    async def join(self, tree_id: int, *, job: str, subscriber: bool = True) -> TreeView:
        """Join ``tree_id`` (or update ``subscriber`` if already on it) and return the view
        once attached (as root or below a parent). Raises :class:`JoinTimeout` after
        ``join_timeout`` (the tree stays registered and the manager keeps retrying)."""
        self._check_running()
        if not isinstance(tree_id, int) or isinstance(tree_id, bool) or not 0 <= tree_id < 2**160:
            raise ValueError(f"tree id must be a 160-bit int, got {tree_id!r}")
        if not isinstance(job, str) or len(job) > w.MAX_JOB:
            raise ValueError(f"job must be a string of at most {w.MAX_JOB} characters")
        tree = self._trees.get(tree_id)
        if tree is None:
            tree = self._trees[tree_id] = self._new_tree(tree_id, job, subscriber)
        else:
            tree.subscriber = tree.subscriber or subscriber
            tree.job = tree.job or job
        deadline = self._now() + self.join_timeout
        while tree.state == JOINING:
            if self._now() >= deadline or self._trees.get(tree_id) is not tree:
                raise JoinTimeout(
                    f"tree {tree_id:040x} not joined within {self.join_timeout}s; retrying"
                )
            if not tree.joining:
                await self._attempt(tree)
            else:
                await asyncio.sleep(min(0.05, self.heartbeat_interval / 4))
            if tree.state == JOINING:
                await asyncio.sleep(min(tree.backoff, max(0.0, deadline - self._now())))
        return self._view(tree)

    async def leave(self, tree_id: int) -> None:
        """Unsubscribe. A node with children stays on as a forwarder (Scribe); a childless
        one leaves the tree at once (its parent is told)."""
        tree = self._trees.get(tree_id)
        if tree is None:
            return
        tree.subscriber = False
        if not tree.children:
            await self._drop_tree(tree)

    def view(self, tree_id: int) -> TreeView | None:
        tree = self._trees.get(tree_id)
        return None if tree is None else self._view(tree)

    def views(self) -> list[TreeView]:
        return [self._view(t) for t in self._trees.values()]

    def add_listener(self, listener: TreeListener) -> None:
        self._listeners.append(listener)

    def on_multicast(self, handler: Callable[[int, dict], Awaitable[None] | None]) -> None:
        """``handler(tree_id, message)`` runs at every member a multicast reaches."""
        self._mc.handlers.append(handler)

    async def multicast(
        self, tree_id: int, message: dict, *, timeout: float = 5.0
    ) -> MulticastResult:
        """Master only: send ``message`` down the tree; see :mod:`srt.trees.multicast`."""
        return await self._mc.multicast(tree_id, message, timeout=timeout)

    def on_query(self, handler: Callable[[int, dict], Awaitable[dict] | dict]) -> None:
        """``handler(tree_id, message) -> dict`` answers queries routed to this node as root."""
        self._query.handler = handler

    async def query(self, tree_id: int, message: dict, *, timeout: float = 5.0) -> dict:
        """Route ``message`` to the root of ``tree_id``; return its handler's reply."""
        return await self._query.query(tree_id, message, timeout=timeout)

    def stats(self) -> dict[str, Any]:
        states = Counter(t.state for t in self._trees.values())
        return {
            "trees": len(self._trees),
            "roots": states[ROOT],
            "members": states[MEMBER],
            "joining": states[JOINING],
            "children": sum(len(t.children) for t in self._trees.values()),
            "loop_lag_s": round(self._lag, 4),
            "events": dict(self.events),
            "bad_input": dict(self.bad_input),
        }

    # ---- helpers -------------------------------------------------------------------------

    def _check_running(self) -> None:
        if not self._running or self._stopping:
            raise TreeError("the tree manager is not running")

    def _now(self) -> float:
        return asyncio.get_running_loop().time()

    def _dist(self, node_id: int, tree_id: int) -> int:
        return node_id ^ tree_id

    def _view(self, t: _Tree) -> TreeView:
        return TreeView(
            tree_id=t.tree_id,
            job=t.job,
            parent=t.parent,
            parent_url=t.parent_url,
            children=dict(t.children),
            child_urls=dict(t.child_urls),
            subscriber=t.subscriber,
            state=t.state,
            root=self.me if t.state == ROOT else t.root,
        )

    def _spawn(self, coro: Coroutine[Any, Any, Any]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            self.events["task_errors"] += 1
            log.warning("tree task failed: %r", task.exception())

    def _fire(self, method: str, *args: Any) -> None:
        for listener in list(self._listeners):
            fn = getattr(listener, method, None)
            if fn is None:
                continue
            try:
                fn(*args)
            except Exception:
                self.events["listener_errors"] += 1
                log.exception("tree listener %s failed", method)

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

    def _reject(self, kind: str, exc: BadTreeMessage) -> BadTreeMessage:
        self.bad_input[kind] += 1
        return exc

    # ---- tree state changes ------------------------------------------------------------------

    def _new_tree(self, tree_id: int, job: str, subscriber: bool) -> _Tree:
        return _Tree(tree_id, job, subscriber, touched=self._now())

    def _note_departure(self, node_id: int) -> None:
        """``node_id`` told us it is leaving (stop hand-off): a root ignores it as a "closer
        node" for a while, so the successor it named does not hand the role straight back."""
        self._departed[node_id] = self._now()

    def _departed_ids(self, now: float) -> list[int]:
        horizon = 4 * self.parent_timeout
        for node_id in [i for i, at in self._departed.items() if now - at > horizon]:
            del self._departed[node_id]
        return list(self._departed)

    def _check_child(self, tree_id: int, child: NodeInfo) -> None:
        """The invariant: a child is strictly farther from the tree id than its parent (so a
        node can never adopt itself or any of its ancestors)."""
        me = self.me.id
        if child.id == me or self._dist(child.id, tree_id) <= self._dist(me, tree_id):
            self.events["loops_refused"] += 1
            raise LoopRefused(
                f"refusing child {child} for tree {tree_id:040x}: it is not farther from the "
                "tree id than this node (parents must be strictly closer)"
            )

    def _adopt(self, tree: _Tree, child: NodeInfo, url: str) -> None:
        self._check_child(tree.tree_id, child)
        known = child.id in tree.children
        tree.children[child.id] = child
        if url:
            tree.child_urls[child.id] = url
        tree.child_seen[child.id] = self._now()
        if not known:
            self.events["children_added"] += 1
            self._fire("tree_child_added", tree.tree_id, child)

    def _remove_child(self, tree: _Tree, child_id: int, reason: str) -> None:
        if tree.children.pop(child_id, None) is None:
            return
        tree.child_urls.pop(child_id, None)
        tree.child_seen.pop(child_id, None)
        self.events[f"children_{reason}"] += 1
        self._fire("tree_child_removed", tree.tree_id, child_id, reason)

    def _set_parent(self, tree: _Tree, parent: NodeInfo, jid: bytes | None) -> None:
        """Take ``parent`` (strictly closer, by the invariant) as this node's parent."""
        if self._dist(parent.id, tree.tree_id) >= self._dist(self.me.id, tree.tree_id):
            self.events["loops_refused"] += 1
            raise LoopRefused(f"next hop {parent} is not closer to the tree id")
        if parent.id in tree.children:  # cannot happen with the invariant; belt and braces
            self._remove_child(tree, parent.id, "moved")
        if tree.parent is not None and tree.parent.id != parent.id:
            # a replacement next hop, or a hand-off: the old parent may count us, tell it
            self._spawn(self._tell_leave(tree.parent, tree.tree_id, "moved"))
        if tree.parent is None or tree.parent.id != parent.id:
            tree.parent_url = None
        tree.parent = parent
        tree.state = MEMBER
        tree.via_jid = jid
        tree.parent_ok = tree.parent_since = self._now()
        if tree.announced_root:  # we were the master: a closer node has the role now
            tree.announced_root = False
            self._spawn(self._announce_demotion(tree))

    def _parent_confirmed(self, tree: _Tree, url: str, root: NodeInfo | None) -> None:
        tree.parent_ok = self._now()
        if url:
            tree.parent_url = url
        if root is not None:
            tree.root = root
        assert tree.parent is not None
        if tree.announced_parent != tree.parent.id:
            tree.announced_parent = tree.parent.id
            self._fire("tree_parent_changed", tree.tree_id, tree.parent)

    def _lose_parent(self, tree: _Tree) -> None:
        tree.parent = None
        tree.parent_url = None
        tree.via_jid = None
        if tree.announced_parent is not None:
            tree.announced_parent = None
            self._fire("tree_parent_changed", tree.tree_id, None)

    def _become_root(self, tree: _Tree) -> None:
        if tree.state == ROOT:
            return
        old = tree.parent
        self._lose_parent(tree)
        tree.state = ROOT
        tree.root = self.me
        tree.touched = self._now()
        tree.own_jid = None
        tree.backoff = 0.0
        self.events["became_root"] += 1
        tree.announced_root = True
        if old is not None:  # we were attached below someone: tell them we moved
            self._spawn(self._tell_leave(old, tree.tree_id, "moved"))
        self._fire("tree_root_changed", tree.tree_id, True, None)

    def _rejoin(self, tree: _Tree, why: str) -> None:
        """Lose the parent and join again (children are kept)."""
        if self._trees.get(tree.tree_id) is not tree or self._stopping:
            return
        self.events["rejoins"] += 1
        log.debug("re-joining tree %x: %s", tree.tree_id, why)
        self._lose_parent(tree)
        tree.state = JOINING
        if tree.own_jid is not None:  # an attempt in flight is superseded
            tree.old_jids.append(tree.own_jid)
        tree.own_jid = None
        tree.next_attempt = self._now()
        if not tree.joining:
            self._spawn(self._attempt(tree))

    async def _drop_tree(self, tree: _Tree) -> None:
        if self._trees.get(tree.tree_id) is tree:
            del self._trees[tree.tree_id]
        if tree.parent is not None and tree.state == MEMBER:
            await self._tell_leave(tree.parent, tree.tree_id, "left")

    async def _tell_leave(self, target: NodeInfo, tree_id: int, reason: str) -> None:
        with contextlib.suppress(OverlayError):
            await self.overlay.request(
                target, w.LEAVE, {"t": w.id_bytes(tree_id), "reason": reason}
            )

    # ---- joining ---------------------------------------------------------------------------

    async def _attempt(self, tree: _Tree) -> bool:
        """Route one JOIN for ``tree``; True once attached (as member or root)."""
        if tree.joining or self._stopping:
            return False
        tree.joining = True
        jid = os.urandom(w.TOKEN_BYTES)
        if tree.own_jid is not None:
            tree.old_jids.append(tree.own_jid)
        tree.own_jid = jid
        self.events["join_attempts"] += 1
        try:
            await self.overlay.route(w.APP, tree.tree_id, w.join_message(tree.job, jid))
        except (OverlayError, TreeError) as exc:
            self.events["join_failures"] += 1
            log.info("JOIN for tree %x failed: %s", tree.tree_id, exc)
            if tree.own_jid == jid and tree.state != ROOT:
                if tree.parent is not None:  # it may have adopted us before the route failed
                    self._spawn(self._tell_leave(tree.parent, tree.tree_id, "moved"))
                self._lose_parent(tree)
                tree.state = JOINING
                tree.own_jid = None
            tree.backoff = min(
                max(tree.backoff * 2, self.heartbeat_interval / 2), 4 * self.heartbeat_interval
            )
            tree.next_attempt = self._now() + tree.backoff * (0.5 + self._rng.random())
            return False
        finally:
            tree.joining = False
        if tree.own_jid != jid:  # superseded (re-join) or made root meanwhile
            return tree.state != JOINING
        tree.own_jid = None
        tree.backoff = 0.0
        if tree.state == MEMBER and tree.parent is not None:
            self._spawn(self._heartbeat(tree.parent, [tree]))
        return tree.state != JOINING

    async def _announce_demotion(self, tree: _Tree) -> None:
        self.events["handovers"] += 1
        new_root = await self.locate_root(tree.tree_id)
        if new_root is not None and new_root.id == self.me.id:
            new_root = None
        if new_root is not None:
            tree.root = new_root
        self._fire("tree_root_changed", tree.tree_id, False, new_root)

    async def locate_root(self, tree_id: int, tries: int = 3) -> NodeInfo | None:
        """The node a message for ``tree_id`` is delivered to now (one routed message per
        try; a failed try is repeated after a heartbeat interval). None if not found."""
        for attempt in range(tries):
            if attempt:
                await asyncio.sleep(self.heartbeat_interval)
            try:
                result = await self.overlay.route(w.APP, tree_id, {"k": "where"})
            except OverlayError:
                continue
            if result is not None and result.status == "delivered":
                return result.node
        return None

    def _on_forward(self, key: int, message: Any, next_hop: NodeInfo) -> Any:
        kind = message.get("k") if isinstance(message, dict) else None
        if kind == "join":
            return self._forward_join(key, message, next_hop)
        if kind in ("q", "where"):
            return message
        raise self._reject("route", BadTreeMessage(f"unknown routed message kind {kind!r}"))

    def _accept_join(self, message: dict[str, Any]) -> w.Join:
        """Parse a routed JOIN (malformed: counted and rejected) while this layer runs."""
        try:
            j = w.parse_join(message)
        except BadTreeMessage as exc:
            raise self._reject("join", exc) from None
        if self._stopping or not self._running:
            raise TreeError("this node is leaving the tree layer")
        return j

    def _forward_join(self, key: int, message: dict[str, Any], next_hop: NodeInfo) -> Any:
        j = self._accept_join(message)
        me = self.me
        if me.id in j.path:
            self.events["loops_refused"] += 1
            raise LoopRefused(f"JOIN for {key:040x} already passed through {me}")
        tree = self._trees.get(key)
        if j.prev is None:  # our own JOIN, leaving the origin
            self._check_own(tree, j)
            self._set_parent(tree, next_hop, j.jid)
            return self._relay(message, j)
        self._check_child(key, j.prev)
        if tree is not None and tree.via_jid == j.jid and tree.state == MEMBER:
            self._set_parent(tree, next_hop, j.jid)  # the first next hop was dead
            return self._relay(message, j)
        if tree is None:  # not on the tree: become a forwarder and pass the JOIN on
            tree = self._trees[key] = self._new_tree(key, j.job, False)
            self._adopt(tree, j.prev, j.url)
            self._set_parent(tree, next_hop, j.jid)
            self.events["forwarders_created"] += 1
            return self._relay(message, j)
        self._adopt(tree, j.prev, j.url)
        if tree.state == ROOT:  # a closer node exists: hand the master role over
            self._set_parent(tree, next_hop, j.jid)
            return self._relay(message, j)
        self.events["joins_stopped"] += 1
        return None  # already on the tree (member or re-joining): stop here (Scribe)

    def _check_own(self, tree: _Tree | None, j: w.Join) -> None:
        """A JOIN without a sender must be the one this node is waiting for. One of our
        superseded attempts (re-routed after we had already re-joined) is stopped quietly;
        anything else is malformed."""
        if tree is not None and tree.own_jid == j.jid:
            return
        if tree is not None and j.jid in tree.old_jids:
            self.events["stale_joins"] += 1
            raise TreeError("superseded JOIN attempt dropped")
        raise self._reject("join", BadTreeMessage("JOIN without a sender"))

    def _relay(self, message: dict[str, Any], j: w.Join) -> dict[str, Any]:
        out = dict(message)
        out["prev"] = self.me.to_wire()
        out["url"] = self.data_url
        out["path"] = [*message["path"], w.id_bytes(self.me.id)]
        return out

    def _on_deliver(self, key: int, message: Any) -> Any:
        kind = message.get("k") if isinstance(message, dict) else None
        if kind == "join":
            return self._deliver_join(key, message)
        if kind == "where":
            return None
        if kind == "q":
            return self._query.deliver(key, message)
        raise self._reject("route", BadTreeMessage(f"unknown routed message kind {kind!r}"))

    def _deliver_join(self, key: int, message: dict[str, Any]) -> None:
        j = self._accept_join(message)
        tree = self._trees.get(key)
        if j.prev is None:  # our own JOIN: nobody is closer, we are the root
            self._check_own(tree, j)
        else:
            if self.me.id in j.path:
                self.events["loops_refused"] += 1
                raise LoopRefused(f"JOIN for {key:040x} already passed through {self.me}")
            self._check_child(key, j.prev)
            if tree is None:
                tree = self._trees[key] = self._new_tree(key, j.job, False)
            self._adopt(tree, j.prev, j.url)
        self._become_root(tree)

    # ---- maintenance -------------------------------------------------------------------------

    async def _maintenance(self) -> None:
        while not self.overlay.running and not self._stopping:
            await asyncio.sleep(self.heartbeat_interval)
        self._rng = random.Random(self.overlay.id)
        await asyncio.sleep(self._rng.uniform(0, self.heartbeat_interval))
        while self._running and not self._stopping:
            try:
                self._tick()
            except Exception:
                self.events["tick_errors"] += 1
                log.exception("tree maintenance tick failed")
            pause = self.heartbeat_interval * self._rng.uniform(0.9, 1.1)
            started = self._now()
            await asyncio.sleep(pause)
            # Event-loop lag (an overloaded host) delays our heartbeats and their replies as
            # much as a dead peer would: widen the timeouts by it instead of re-joining every
            # tree at once, which would only add load. Decays ~10 % per interval.
            lag = max(0.0, self._now() - started - pause)
            self._lag = max(lag, self._lag * 0.9)

    def _tick(self) -> None:
        if not self.overlay.running:
            return
        now = self._now()
        departed = self._departed_ids(now)
        by_parent: dict[int, tuple[NodeInfo, list[_Tree]]] = {}
        slack = LAG_SLACK * self._lag
        for tree in list(self._trees.values()):
            for cid, seen in list(tree.child_seen.items()):
                if now - seen > self.child_timeout + slack:
                    self._remove_child(tree, cid, "failed")
            idle = now - tree.touched > self.parent_timeout  # (children may be on their way)
            if not tree.subscriber and not tree.children and not tree.joining and idle:
                self.events["pruned"] += 1
                self._spawn(self._drop_tree(tree))
                continue
            if tree.state == MEMBER and tree.parent is not None:
                if now - tree.parent_ok > self.parent_timeout + slack:
                    self._rejoin(tree, "parent silent")
                    continue
                if not tree.joining:  # our JOIN may still be on its way to the parent
                    by_parent.setdefault(tree.parent.id, (tree.parent, []))[1].append(tree)
            elif tree.state == ROOT:
                closer = self.overlay.next_hop(tree.tree_id, departed)
                if not tree.joining and closer is not None:
                    self._spawn(self._attempt(tree))  # a closer node exists: hand over
            elif tree.state == JOINING and not tree.joining and now >= tree.next_attempt:
                self._spawn(self._attempt(tree))
        for parent, trees in by_parent.values():
            for i in range(0, len(trees), w.MAX_HB_TREES):
                self._spawn(self._heartbeat(parent, trees[i : i + w.MAX_HB_TREES]))

    async def _heartbeat(self, parent: NodeInfo, trees: list[_Tree]) -> None:
        payload = {"url": self.data_url, "trees": [w.id_bytes(t.tree_id) for t in trees]}
        self.events["hb_sent"] += 1
        try:
            raw = await self.overlay.request(
                parent, w.HB, payload, timeout=self.heartbeat_interval, retries=0
            )
            reply = w.parse_hb_reply(raw, len(trees))
        except RemoteError as exc:  # the parent has no tree layer / rejects us: re-join
            self.events["hb_rejected"] += 1
            log.info("heartbeat to %s rejected: %s", parent, exc)
            for t in trees:
                if t.parent is not None and t.parent.id == parent.id:
                    self._rejoin(t, "parent rejected heartbeat")
            return
        except OverlayError:
            self.events["hb_missed"] += 1
            return
        except BadTreeMessage as exc:
            self.bad_input["hb_reply"] += 1
            log.info("bad heartbeat reply from %s: %s", parent, exc)
            return
        for t, root in zip(trees, reply.roots, strict=True):
            current = self._trees.get(t.tree_id) is t and t.parent is not None
            if not current or t.parent is None or t.parent.id != parent.id:
                # we moved while the heartbeat was on its way, and it (re-)adopted us
                if t.tree_id not in reply.lost:
                    reason = "moved" if self._trees.get(t.tree_id) is t else "left"
                    self._spawn(self._tell_leave(parent, t.tree_id, reason))
                continue
            if t.tree_id in reply.lost:
                if self._now() - t.parent_since < self.heartbeat_interval:
                    # the heartbeat may have overtaken the JOIN that makes us its child
                    self.events["hb_lost_early"] += 1
                    continue
                self._rejoin(t, "parent does not count us as a child")
            else:
                self._parent_confirmed(t, reply.url, root)

    def _node_failed(self, info: NodeInfo) -> None:
        if not self._running or self._stopping:
            return
        for tree in list(self._trees.values()):
            if info.id in tree.children:
                self._remove_child(tree, info.id, "failed")
            if tree.parent is not None and tree.parent.id == info.id:
                self._rejoin(tree, "parent failed")

    # ---- request handlers ------------------------------------------------------------------

    def _serve_hb(self, payload: Any, sender: NodeInfo) -> dict[str, Any]:
        hb = w.parse_hb(payload)
        lost: list[bytes] = []
        roots: list[Any] = []
        for tid in hb.trees:
            tree = self._trees.get(tid)
            ok = tree is not None  # (while stopping too: the children are about to be moved)
            if ok:
                assert tree is not None
                try:
                    self._adopt(tree, sender, hb.url)  # re-adopts a child we had dropped
                except LoopRefused:
                    ok = False
            if ok:
                assert tree is not None
                roots.append(w.wire(self.me if tree.state == ROOT else tree.root))
            else:
                lost.append(w.id_bytes(tid))
                roots.append(None)
        reply = {"url": self.data_url, "lost": lost, "roots": roots}
        if len(msgpack.packb(reply)) > self.overlay.tunables.max_datagram - HB_REPLY_MARGIN:
            reply["roots"] = [None] * len(roots)  # the roots are a hint; the rest must fit
        return reply

    def _serve_leave(self, payload: Any, sender: NodeInfo) -> dict[str, Any]:
        tid, reason = w.parse_tree_reason(payload, "leave")
        if reason == "left":
            self._note_departure(sender.id)
        tree = self._trees.get(tid)
        if tree is not None:
            self._remove_child(tree, sender.id, reason)
        return {"ok": True}

    async def _serve_moved(self, payload: Any, sender: NodeInfo) -> dict[str, Any]:
        """Our parent is leaving: attach to the node it names (or re-join by routing)."""
        tid, new_parent = w.parse_moved(payload)
        tree = self._trees.get(tid)
        if tree is None or tree.parent is None or tree.parent.id != sender.id:
            return {"ok": False}
        self.events["moved"] += 1
        self._note_departure(sender.id)
        if new_parent is None or new_parent.id == self.me.id:
            if new_parent is None:
                self._rejoin(tree, "parent left")
                tree.next_attempt = self._now() + self.heartbeat_interval
            return {"ok": True}
        try:
            self._check_parent_candidate(tree, new_parent)
            reply = await self.overlay.request(
                new_parent,
                w.ADOPT,
                {"t": w.id_bytes(tid), "job": tree.job, "url": self.data_url},
            )
            if not isinstance(reply, dict) or reply.get("ok") is not True:
                raise TreeError(f"{new_parent} refused to adopt: {reply!r}")
            url = w.text(reply.get("url", ""), "adopt reply url", w.MAX_URL)
            root = w.opt_node(reply.get("root"), "adopt reply root")
        except (OverlayError, TreeError) as exc:
            log.info("moving to %s failed (%s); re-joining", new_parent, exc)
            self._rejoin(tree, "adoption by the new parent failed")
            return {"ok": False}
        if tree.parent is None or tree.parent.id != sender.id:
            return {"ok": False}  # something else happened meanwhile
        self._set_parent(tree, new_parent, None)
        self._parent_confirmed(tree, url, root)
        return {"ok": True}

    def _check_parent_candidate(self, tree: _Tree, parent: NodeInfo) -> None:
        if self._dist(parent.id, tree.tree_id) >= self._dist(self.me.id, tree.tree_id):
            self.events["loops_refused"] += 1
            raise LoopRefused(f"{parent} is not closer to the tree id than this node")

    def _serve_adopt(self, payload: Any, sender: NodeInfo) -> dict[str, Any]:
        tid, _job, url = w.parse_adopt(payload)
        tree = self._trees.get(tid)
        if tree is None or self._stopping:
            return {"ok": False, "reason": "not on the tree"}
        try:
            self._adopt(tree, sender, url)
        except LoopRefused as exc:
            return {"ok": False, "reason": str(exc)}
        root = self.me if tree.state == ROOT else tree.root
        return {"ok": True, "url": self.data_url, "root": w.wire(root)}

    def _serve_takeover(self, payload: Any, sender: NodeInfo) -> dict[str, Any]:
        """The root is leaving and names us its successor."""
        tid, job = w.parse_takeover(payload)
        if self._stopping:
            return {"ok": False}
        self._note_departure(sender.id)
        tree = self._trees.get(tid)
        if tree is None:
            tree = self._trees[tid] = self._new_tree(tid, job, False)
        if tree.parent is not None and tree.parent.id == sender.id:
            self._lose_parent(tree)  # no goodbye needed: the sender is leaving
        self._remove_child(tree, sender.id, "left")
        self._become_root(tree)
        return {"ok": True}

    # ---- graceful hand-off -------------------------------------------------------------------

    async def _hand_off(self, tree: _Tree) -> None:
        """Graceful exit from one tree: move the children to our parent (or, at the root, to
        a successor told to take over), then tell our parent we left."""
        new_parent: NodeInfo | None = None
        if tree.state == ROOT and tree.children:
            new_parent = await self._pick_successor(tree)
        elif tree.state == MEMBER:
            new_parent = tree.parent
        if tree.announced_root:
            tree.announced_root = False
            self._fire("tree_root_changed", tree.tree_id, False, new_parent)
        payload = {"t": w.id_bytes(tree.tree_id), "parent": w.wire(new_parent)}
        moves = [
            self.overlay.request(child, w.MOVED, payload)
            for child in tree.children.values()
            if new_parent is None or child.id != new_parent.id
        ]
        if moves:
            await asyncio.gather(*moves, return_exceptions=True)
        if tree.state == MEMBER and tree.parent is not None:
            await self._tell_leave(tree.parent, tree.tree_id, "left")

    async def _pick_successor(self, tree: _Tree) -> NodeInfo | None:
        """The closest other node we know, told to take the master role over."""
        tid = tree.tree_id
        candidates = sorted(self.overlay.contacts(), key=lambda n: n.id ^ tid)
        for cand in candidates[:3]:
            try:
                reply = await self.overlay.request(
                    cand, w.TAKEOVER, {"t": w.id_bytes(tid), "job": tree.job}
                )
            except OverlayError:
                continue
            if isinstance(reply, dict) and reply.get("ok") is True:
                return cand
        return None
