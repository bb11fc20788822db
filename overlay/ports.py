"""The narrow interfaces through which the node's parts reach the network and each other.

:class:`overlay.node.OverlayNode` wires its parts together (router, failure detector, table
upkeep, the kademlia server); none of them gets the node itself. Each receives only the
callables and small protocols below, so its dependencies are visible in its constructor and a
test can drive it with fakes.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from overlay.nodeinfo import NodeInfo

Address = tuple[str, int]

Call = Callable[[Address, str, list[Any], float], Awaitable[tuple[str, Any]]]
"""``call(address, rpc_name, args, timeout)``: one RPC, resolving to ``(status, result)`` with
status ``"ok"``, ``"error"`` or ``"timeout"`` (:meth:`overlay.protocol.OverlayProtocol.call`)."""

Spawn = Callable[[Awaitable[Any], str], Any]
"""``spawn(coro, what)``: run ``coro`` as a background task of the node (cancelled when it
stops; a failure is counted as ``task_errors``)."""


class Liveness(Protocol):
    """Where a part reports whether a peer answered (the failure detector)."""

    def on_reply_from(self, node_id: int) -> None: ...
    def on_missed_reply(self, node_id: int) -> None: ...
    def routable(self, node_id: int) -> bool:
        """Whether ``node_id`` is still worth a retry (a member, not suspected: a failure
        proven meanwhile - a refused connection elsewhere - ends the retries at once)."""
        ...


class Contacts(Protocol):
    """kademlia's side of the contacts (its k-buckets and ``find_node``), in NodeInfo terms;
    implemented by :class:`overlay.kademlia_compat.KademliaContacts`."""

    def welcome(self, info: NodeInfo) -> None: ...
    def remove(self, info: NodeInfo) -> None: ...
    def find_node(self, peer: NodeInfo, target: int) -> Awaitable[Any]: ...
