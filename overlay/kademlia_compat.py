"""Where the overlay plugs into the ``kademlia`` package (2.2.3) and changes its behaviour.

Contract:

* :func:`install` replaces ``kademlia.crawling.NodeHeap`` with :class:`IndexedNodeHeap` (same
  order and results, without the quadratic membership scan). Importing this module changes
  nothing; :meth:`overlay.node.OverlayNode.start` calls :func:`install`, which is idempotent
  (a second call, from any node, is a no-op). The swap is process-wide, as kademlia's crawler
  looks the class up in its module globals.
* :class:`DhtServer` is kademlia's ``Server`` with :class:`overlay.protocol.OverlayProtocol`,
  a refresh loop that keeps its interval (the package resets it to 3600 s after the first run),
  a bootstrap ping through the overlay's own ``ping`` and no pickle-based state files.
* :func:`crawl` runs kademlia's iterative ``find_node`` toward an id (``request`` to a bare
  node id uses it to find the node);
* :class:`KademliaContacts` gives the rest of the overlay kademlia's k-buckets and
  ``find_node`` in :class:`NodeInfo` terms; :func:`kad_node` converts one.
"""

from __future__ import annotations

import asyncio
import heapq
from collections.abc import Awaitable, Callable
from typing import Any

import kademlia.crawling
from kademlia.crawling import NodeSpiderCrawl
from kademlia.network import Server
from kademlia.node import Node, NodeHeap

from overlay import ids
from overlay.nodeinfo import NodeInfo
from overlay.ports import Address, Spawn
from overlay.protocol import OverlayProtocol


def kad_node(info: NodeInfo) -> Node:
    """The kademlia ``Node`` (raw id, host, port) of ``info``."""
    return Node(ids.to_bytes(info.id), info.host, info.port)


async def crawl(protocol: OverlayProtocol, target: int, *, ksize: int, alpha: int) -> None:
    """Kademlia's iterative lookup of ``target``, starting from the ``alpha`` nearest contacts
    in the k-buckets; every reply is learnt through the protocol's host."""
    node = Node(ids.to_bytes(target))
    nearest = protocol.router.find_neighbors(node, alpha)
    await NodeSpiderCrawl(protocol, node, nearest, ksize, alpha).find()


class KademliaContacts:
    """kademlia's contacts of one node, through its protocol: ``welcome`` a new contact into
    the k-buckets (kademlia also hands it the keys it should store), ``remove`` a departed
    one, ``find_node`` asks ``peer`` once for the nodes closest to ``target`` (the answer is
    learnt through the protocol's host, like every ``find_node`` reply)."""

    def __init__(self, protocol: OverlayProtocol) -> None:
        self._protocol = protocol

    def welcome(self, info: NodeInfo) -> None:
        self._protocol.welcome_if_new(kad_node(info))

    def remove(self, info: NodeInfo) -> None:
        self._protocol.router.remove_contact(kad_node(info))

    async def find_node(self, peer: NodeInfo, target: int) -> Any:
        return await self._protocol.call_find_node(kad_node(peer), Node(ids.to_bytes(target)))


class IndexedNodeHeap(NodeHeap):
    """kademlia's crawl heap with an id set beside it: the package's ``__contains__`` is a
    linear scan of the heap, so every crawl was quadratic in the candidates it saw (the main
    cost of a join at thousands of nodes). Same order, same results. :func:`install` puts it
    in place of ``kademlia.crawling.NodeHeap``."""

    def __init__(self, node: Node, maxsize: int) -> None:
        super().__init__(node, maxsize)
        self._ids: set[bytes] = set()

    def remove(self, peers: Any) -> None:
        super().remove(peers)
        self._ids = {node.id for _, node in self.heap}

    def popleft(self) -> Node | None:
        node = super().popleft()
        if node is not None:
            self._ids.discard(node.id)
        return node

    def push(self, nodes: Any) -> None:
        if not isinstance(nodes, list):
            nodes = [nodes]
        for node in nodes:
            if node.id not in self._ids:
                self._ids.add(node.id)
                heapq.heappush(self.heap, (self.node.distance_to(node), node))

    def __contains__(self, node: Any) -> bool:
        return node.id in self._ids


def install() -> None:
    """Make kademlia's crawler use :class:`IndexedNodeHeap`. Idempotent."""
    if kademlia.crawling.NodeHeap is not IndexedNodeHeap:
        kademlia.crawling.NodeHeap = IndexedNodeHeap  # type: ignore[misc]


class DhtServer(Server):
    """The ``kademlia`` Server as the overlay runs it (see the module docstring).

    It takes what it needs of its node as plain callables: ``make_protocol(server)`` builds the
    node's protocol, ``spawn(coro, what)`` runs a background task owned by the node (so ``stop``
    cancels it), ``ping(address)`` is the node's bootstrap ping (``None``: no answer) and
    ``refresh_interval`` the default period of the bucket refresh."""

    protocol_class = OverlayProtocol

    def __init__(
        self,
        *,
        ksize: int,
        alpha: int,
        node_id: bytes,
        make_protocol: Callable[[DhtServer], OverlayProtocol],
        spawn: Spawn,
        ping: Callable[[Address], Awaitable[NodeInfo | None]],
        refresh_interval: float,
    ) -> None:
        super().__init__(ksize=ksize, alpha=alpha, node_id=node_id)
        self._make_protocol = make_protocol
        self._spawn = spawn
        self._ping = ping
        self._refresh_interval = refresh_interval

    def _create_protocol(self) -> OverlayProtocol:
        return self._make_protocol(self)

    def refresh_table(self, interval: float | None = None) -> None:  # type: ignore[override]
        interval = interval or self._refresh_interval
        self._spawn(self._refresh_table(), "kademlia refresh")
        loop = asyncio.get_running_loop()
        self.refresh_loop = loop.call_later(interval, self.refresh_table, interval)

    async def bootstrap_node(self, addr: Address) -> Node | None:
        info = await self._ping(addr)
        if info is None:
            return None
        return kad_node(info)

    def save_state(self, fname: str) -> None:
        raise NotImplementedError("state files would use pickle; bootstrap from peers instead")

    def save_state_regularly(self, fname: str, frequency: int = 600) -> None:
        raise NotImplementedError("state files would use pickle; bootstrap from peers instead")

    @classmethod
    async def load_state(cls, fname: str, port: int, interface: str = "0.0.0.0") -> Server:
        raise NotImplementedError("state files would use pickle; bootstrap from peers instead")
