"""What the tree layer's parts need from their owner, from each other and from the overlay.

Contract: :class:`TreeHost` is the narrow view of a :class:`~srt.trees.manager.TreeManager`
that its parts (multicast, queries, maintenance, hand-off, formation) are given instead of the
manager itself, so no part reaches into another module's privates and no part imports the
manager (which imports all of them). :class:`TreeEffects` lists the background actions one
part asks of another (re-join, tell a parent we left, heartbeat now, ...), so the parts never
import each other either; the manager wires them. :class:`TreeNetwork` is the part of an
:class:`overlay.OverlayNode` the tree layer uses (an ``OverlayNode`` satisfies it as is; the
simulator's nodes do too). All three are structural: nothing needs to inherit from them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from typing import Any, Protocol

from overlay import NodeInfo, RouteResult, RoutingApplication
from overlay import Tunables as OverlayTunables
from srt.config import Tunables
from srt.trees.state import TreeState
from srt.trees.types import TreeError, TreeView


class TreeHost(Protocol):
    """The owner of the tree layer's parts (one per agent).

    ``events`` and ``bad_input`` are the shared counters (``stats()["events"]`` and
    ``stats()["bad_input"]``); ``tunables`` and ``data_url`` are read at each use (the owner
    may replace them). ``accepting`` is False before start and from the moment stop begins:
    no new work (joins, multicasts, queries, re-joins) is taken then. ``spawn`` runs a
    coroutine as one of the owner's background tasks (cancelled at stop; a failure is counted
    in ``events["task_errors"]`` and logged, never raised)."""

    events: Counter[str]
    bad_input: Counter[str]
    data_url: str

    @property
    def tunables(self) -> Tunables: ...

    @property
    def me(self) -> NodeInfo: ...

    @property
    def accepting(self) -> bool: ...

    def view(self, tree_id: int) -> TreeView | None: ...

    def spawn(self, coro: Coroutine[Any, Any, Any], what: str) -> None: ...


class TreeEffects(Protocol):
    """Network actions one part of the tree layer asks of another (the owner wires them);
    each starts a background task (:meth:`TreeHost.spawn`) and returns at once."""

    def spawn_attempt(self, tree: TreeState) -> None:
        """Route a JOIN for ``tree`` (formation)."""

    def spawn_leave(self, target: NodeInfo, tree_id: int, reason: str) -> None:
        """Tell ``target`` this node is no longer its child, ``"moved"`` or ``"left"``."""

    def spawn_demotion(self, tree: TreeState) -> None:
        """Find the new master of ``tree``; tell the listeners this node lost the role."""

    def spawn_heartbeat(self, parent: NodeInfo, trees: list[TreeState]) -> None:
        """Heartbeat ``parent`` for ``trees`` now (maintenance)."""

    def spawn_drop(self, tree: TreeState) -> None:
        """Leave ``tree`` altogether: forget it and tell the parent (hand-off)."""


def ensure_accepting(host: TreeHost) -> None:
    """Raise :class:`TreeError` unless ``host`` takes new work (started, not stopping)."""
    if not host.accepting:
        raise TreeError("the tree manager is not running")


class TreeNetwork(Protocol):
    """The overlay node under the tree layer (the subset of :class:`overlay.OverlayNode`)."""

    @property
    def info(self) -> NodeInfo: ...

    @property
    def id(self) -> int: ...

    @property
    def running(self) -> bool: ...

    @property
    def tunables(self) -> OverlayTunables: ...

    def register(self, app_name: str, app: RoutingApplication) -> None: ...

    def handle(self, kind: str, handler: Callable[[Any, NodeInfo], Any]) -> None: ...

    def on_node_failed(self, callback: Callable[[NodeInfo], Any]) -> None: ...

    def contacts(self) -> list[NodeInfo]: ...

    def next_hop(self, key: int, exclude: Iterable[int] = ()) -> NodeInfo | None: ...

    async def request(
        self,
        target: NodeInfo,
        kind: str,
        payload: dict[str, Any],
        timeout: float | None = None,
        retries: int | None = None,
    ) -> Any: ...

    def request_now(
        self, target: NodeInfo, kind: str, payload: dict[str, Any], timeout: float | None = None
    ) -> Awaitable[Any]: ...

    async def route(
        self,
        app_name: str,
        key: int,
        message: dict[str, Any],
        *,
        report: bool = True,
        timeout: float | None = None,
    ) -> RouteResult | None: ...
