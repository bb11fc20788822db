"""Tunables of the SRT layer (trees and data plane), with defaults for production clusters.

Contract: a frozen dataclass, validated on construction (``ValueError`` for a non-positive
timing, count or bound, or a parent timeout not above the heartbeat interval); tests and the
agent pass other values via the constructor or ``dataclasses.replace``. It holds what an
operator may reasonably tune; wire-format limits (``srt.trees.wire.MAX_JOB``, ``MAX_URL``, ...)
are not tunables and stay constants next to the format they bound.

Tree timings: a child heartbeats its parent every ``heartbeat_interval`` and re-joins when the
parent has not confirmed it for ``parent_timeout`` (by default 3.5 heartbeat intervals, so
three consecutive heartbeats may be lost); a parent drops a child silent for ``child_timeout``
(by default the parent timeout). Both timeouts widen by ``lag_slack`` times the recent
event-loop lag, so an overloaded host does not re-join every tree at once.
"""

from __future__ import annotations

from dataclasses import dataclass

PARENT_TIMEOUT_HEARTBEATS = 3.5  # the default parent timeout, in heartbeat intervals


@dataclass(frozen=True, slots=True)
class Tunables:
    """Timings (seconds), retry counts and bounds of one agent's SRT layer."""

    # ---- trees (srt.trees) -------------------------------------------------------------
    heartbeat_interval: float = 1.0
    parent_timeout: float | None = None  # None: PARENT_TIMEOUT_HEARTBEATS × heartbeat_interval
    child_timeout: float | None = None  # None: the parent timeout
    join_timeout: float = 10.0  # TreeManager.join gives up (and retries in the background)
    lag_slack: float = 3.0  # timeouts widen by this many times the recent event-loop lag
    locate_root_tries: int = 3  # routed "where" messages before locate_root gives up
    multicast_timeout: float = 5.0  # default time budget of TreeManager.multicast
    multicast_max_budget: float = 120.0  # largest budget a multicast may ask for (or accept)
    multicast_shrink: float = 0.8  # a child's budget is this fraction of its parent's
    query_timeout: float = 5.0  # default timeout of TreeManager.query
    # ---- data plane (srt.dataplane) ----------------------------------------------------
    request_timeout: float = 5.0  # one data-plane attempt: connect + send + reply
    send_attempts: int = 4  # DataPlaneClient.send_snapshot attempts before it raises
    send_backoff: float = 0.05  # first delay between attempts (doubles, ±25 % jitter)
    send_max_backoff: float = 1.0
    connections_per_host: int = 4  # keep-alive connections per parent
    upstream_backoff: float = 0.05  # UpstreamSender's first retry delay (doubles)
    upstream_max_backoff: float = 2.0
    max_skew: float = 30.0  # accepted clock difference of signed requests
    max_body: int = 64 << 20  # largest request body the data-plane server reads (bytes)
    # a snapshot body up to this many bytes goes to the parent as one overlay datagram
    # (srt.dataplane.datagram; 0: always HTTP), answered within the timeout or posted over HTTP
    snapshot_datagram_bytes: int = 4096
    snapshot_datagram_timeout: float = 0.5
    # connections of the data-plane server (srt.dataplane.guard; docs/srt-dataplane.md)
    head_timeout: float = 10.0  # a request's head must arrive within this of its first byte
    body_timeout: float = 60.0  # ... and its body within this of the head (64 MB ≈ 10 Mbit/s)
    idle_timeout: float = 60.0  # a keep-alive connection may be silent this long (> client's 15)
    max_preauth: int = 128  # open connections without an authenticated request (oldest evicted)

    def __post_init__(self) -> None:
        timings = {
            "heartbeat_interval": self.heartbeat_interval,
            "join_timeout": self.join_timeout,
            "multicast_timeout": self.multicast_timeout,
            "multicast_max_budget": self.multicast_max_budget,
            "query_timeout": self.query_timeout,
            "request_timeout": self.request_timeout,
            "send_backoff": self.send_backoff,
            "send_max_backoff": self.send_max_backoff,
            "upstream_backoff": self.upstream_backoff,
            "upstream_max_backoff": self.upstream_max_backoff,
            "max_skew": self.max_skew,
            "head_timeout": self.head_timeout,
            "body_timeout": self.body_timeout,
            "idle_timeout": self.idle_timeout,
            "snapshot_datagram_timeout": self.snapshot_datagram_timeout,
        }
        for name, value in timings.items():
            if not value > 0:
                raise ValueError(f"{name} must be positive, got {value!r}")
        counts = {
            "locate_root_tries": self.locate_root_tries,
            "send_attempts": self.send_attempts,
            "connections_per_host": self.connections_per_host,
            "max_body": self.max_body,
            "max_preauth": self.max_preauth,
        }
        for name, value in counts.items():
            if value < 1:
                raise ValueError(f"{name} must be >= 1, got {value!r}")
        if self.snapshot_datagram_bytes < 0:
            raise ValueError("snapshot_datagram_bytes must be >= 0")
        if self.lag_slack < 0:
            raise ValueError("lag_slack must be >= 0")
        if not 0 < self.multicast_shrink < 1:
            raise ValueError("multicast_shrink must be in (0, 1)")
        if self.tree_parent_timeout <= self.heartbeat_interval:
            raise ValueError("need 0 < heartbeat_interval < parent_timeout")
        if self.tree_child_timeout <= 0:
            raise ValueError("child_timeout must be positive")

    @property
    def tree_parent_timeout(self) -> float:
        """The parent timeout in effect (``parent_timeout``, or its default)."""
        if self.parent_timeout is None:
            return PARENT_TIMEOUT_HEARTBEATS * self.heartbeat_interval
        return self.parent_timeout

    @property
    def tree_child_timeout(self) -> float:
        """The child timeout in effect (``child_timeout``, or the parent timeout)."""
        return self.tree_parent_timeout if self.child_timeout is None else self.child_timeout


DEFAULT_TUNABLES = Tunables()  # the shared default (frozen, so sharing it is safe)
