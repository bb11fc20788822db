"""Counters of messages and bytes per message type and of dropped datagrams per reason.

Contract: counting never raises and costs a dict update; :meth:`Metrics.snapshot` returns plain
dicts (JSON-encodable) so tests and the benchmark can diff them.
"""

from __future__ import annotations

from collections import Counter


class Metrics:
    """Per-node counters. Types are RPC names (``ping``, ``route``...) with ``.reply`` appended
    for responses; drop reasons are ``bad_mac``, ``replay``, ``too_large``, ``malformed``,
    ``stale_timestamp``, ``bad_version``, ``unknown_rpc``, ``handler_error``..."""

    def __init__(self) -> None:
        self.sent_msgs: Counter[str] = Counter()
        self.sent_bytes: Counter[str] = Counter()
        self.recv_msgs: Counter[str] = Counter()
        self.recv_bytes: Counter[str] = Counter()
        self.drops: Counter[str] = Counter()
        self.events: Counter[str] = Counter()

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

    def snapshot(self) -> dict[str, dict[str, int]]:
        return {
            "sent_msgs": dict(self.sent_msgs),
            "sent_bytes": dict(self.sent_bytes),
            "recv_msgs": dict(self.recv_msgs),
            "recv_bytes": dict(self.recv_bytes),
            "drops": dict(self.drops),
            "events": dict(self.events),
        }
