"""Counters of messages and bytes per message type and of dropped datagrams per reason.

Contract: counting never raises and costs a dict update; :meth:`Metrics.snapshot` returns plain
dicts (JSON-encodable) so tests and the benchmark can diff them. Drops the kernel made before
a datagram reached the node (receive buffer full) are not counted here but sampled from the
socket when a snapshot is taken (:meth:`Metrics.sample_socket_with`): they appear as
``drops["kernel_rcvbuf"]`` and under ``socket`` (``rcvbuf``, ``kernel_drops``; ``None`` where
the platform does not report them).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any


class Metrics:
    """Per-node counters. Types are RPC names (``ping``, ``route``...) with ``.reply`` appended
    for responses; drop reasons are ``bad_mac``, ``replay``, ``too_large``, ``malformed``,
    ``stale_timestamp``, ``bad_version``, ``unknown_rpc``, ``handler_error``... and
    ``kernel_rcvbuf`` (sampled from the socket, see the module contract)."""

    def __init__(self) -> None:
        self.sent_msgs: Counter[str] = Counter()
        self.sent_bytes: Counter[str] = Counter()
        self.recv_msgs: Counter[str] = Counter()
        self.recv_bytes: Counter[str] = Counter()
        self.drops: Counter[str] = Counter()
        self.events: Counter[str] = Counter()
        self._socket_stats: Callable[[], dict[str, Any]] | None = None

    def sample_socket_with(self, stats: Callable[[], dict[str, Any]] | None) -> None:
        """Where :meth:`snapshot` reads the socket's kernel counters (``None``: nowhere)."""
        self._socket_stats = stats

    def socket(self) -> dict[str, Any]:
        """The socket's kernel counters now (``{}`` without a socket); never raises."""
        if self._socket_stats is None:
            return {}
        try:
            return self._socket_stats()
        except Exception:  # a closed or odd socket: no sample, not a failed snapshot
            return {}

    def sent(self, kind: str, size: int) -> None:
        self.sent_msgs[kind] += 1
        self.sent_bytes[kind] += size

    def received(self, kind: str, size: int) -> None:
        self.recv_msgs[kind] += 1
        self.recv_bytes[kind] += size

    def drop(self, reason: str) -> None:
        self.drops[reason] += 1

    def event(self, name: str, n: int = 1) -> None:
        self.events[name] += n

    def snapshot(self) -> dict[str, dict[str, Any]]:
        drops = dict(self.drops)
        sock = self.socket()
        if sock.get("kernel_drops"):
            drops["kernel_rcvbuf"] = sock["kernel_drops"]
        return {
            "sent_msgs": dict(self.sent_msgs),
            "sent_bytes": dict(self.sent_bytes),
            "recv_msgs": dict(self.recv_msgs),
            "recv_bytes": dict(self.recv_bytes),
            "drops": drops,
            "events": dict(self.events),
            "socket": sock,
        }
