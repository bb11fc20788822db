"""The peer-to-peer overlay: a Kademlia DHT with Pastry-style key-based routing.

Every agent is one node. This package gives nodes an identity (SHA-1 of the advertised
address), hop-by-hop routing of a message toward the live node closest to a key (one base-16
digit per hop, with forward/deliver upcalls), authenticated direct request/response messages,
a leaf set of neighbours, membership with failure detection, and an in-memory simulated network
for running thousands of nodes deterministically. It knows nothing of jobs or trees.
"""

from overlay.config import Tunables
from overlay.errors import (
    MessageTooLarge,
    NotRunning,
    OverlayError,
    RemoteError,
    RequestTimeout,
    RouteError,
)
from overlay.ids import key_for, node_id_for
from overlay.node import OverlayNode
from overlay.nodeinfo import NodeInfo
from overlay.router import RouteResult, RoutingApplication

__all__ = [
    "MessageTooLarge",
    "NodeInfo",
    "NotRunning",
    "OverlayError",
    "OverlayNode",
    "RemoteError",
    "RequestTimeout",
    "RouteError",
    "RouteResult",
    "RoutingApplication",
    "Tunables",
    "key_for",
    "node_id_for",
]
