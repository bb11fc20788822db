"""Shared helpers for overlay tests: condition waits (never sleeps as synchronisation),
short tunables, and clusters on loopback with OS-chosen ports."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable
from typing import Any

from overlay import OverlayNode, RoutingApplication, Tunables
from overlay.transport import UdpNetwork

SECRET = b"test-cluster-secret-0123456789ab"

FAST = Tunables(
    request_timeout=0.25,
    request_retries=2,
    probe_interval=0.05,
    probe_timeout=0.15,
    misses_before_suspect=3,
    fail_timeout=0.4,
    leaf_refresh_interval=0.5,
    rejoin_interval=0.2,
    rejoin_batch=4,
    tombstone_ttl=2.0,
    route_timeout=5.0,
)


async def wait_for(predicate: Callable[[], bool], timeout: float, step: float = 0.02) -> None:
    """Poll ``predicate`` until true; fail the test after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        await asyncio.sleep(step)


class Recorder(RoutingApplication):
    """Records deliveries and the nodes a message was forwarded through."""

    def __init__(self) -> None:
        self.delivered: list[tuple[int, dict[str, Any]]] = []
        self.forwarded: list[tuple[int, int]] = []

    def forward(self, key: int, message: dict[str, Any], next_hop: Any) -> dict[str, Any]:
        self.forwarded.append((key, next_hop.id))
        return message

    def deliver(self, key: int, message: dict[str, Any]) -> None:
        self.delivered.append((key, message))


class FilteredUdp(UdpNetwork):
    """Real UDP whose senders can be told to drop datagrams to some ports (partitions)."""

    def __init__(self) -> None:
        super().__init__()
        self.blocked: set[tuple[int, int]] = set()

    async def open(self, host: str, port: int, make_protocol: Any) -> Any:
        transport = await super().open(host, port, make_protocol)
        own = transport.get_extra_info("sockname")[1]
        real_sendto = transport.sendto
        blocked = self.blocked

        def sendto(data: bytes, addr: Any = None) -> None:
            if (own, addr[1]) not in blocked:
                real_sendto(data, addr)

        transport.sendto = sendto
        return transport

    def partition(self, a: Iterable[int], b: Iterable[int]) -> None:
        b = list(b)
        for x in a:
            for y in b:
                self.blocked.add((x, y))
                self.blocked.add((y, x))

    def heal(self) -> None:
        self.blocked.clear()


async def start_cluster(
    n: int, tunables: Tunables = FAST, network: Any = None, app: str = "test"
) -> list[OverlayNode]:
    seed = OverlayNode(SECRET, tunables=tunables, network=network)
    await seed.start()
    nodes = [seed]
    for _ in range(n - 1):
        node = OverlayNode(SECRET, tunables=tunables, network=network)
        await node.start([seed.info.address])
        nodes.append(node)
    for node in nodes:
        node.register(app, Recorder())
    return nodes


async def stop_all(nodes: Iterable[OverlayNode]) -> None:
    for node in nodes:
        await node.stop()


def true_root(nodes: Iterable[OverlayNode], key: int) -> OverlayNode:
    return min((n for n in nodes if n.running), key=lambda n: n.id ^ key)
