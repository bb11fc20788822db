"""Datagrams the kernel drops (receive buffer full) show in the node's metrics.

A real node with a tiny receive buffer gets a burst of datagrams it cannot drain in time (the
burst is sent without yielding to the event loop); afterwards every datagram is accounted for:
the ones the node read are counted under their drop reason (they are junk), the rest under
``drops["kernel_rcvbuf"]`` — the two add up to what was sent (loopback loses nothing else)."""

from __future__ import annotations

import dataclasses
import logging
import os
import random
import socket

import pytest
from overlay_helpers import FAST, SECRET, wait_for

from overlay import OverlayNode
from overlay.transport import UdpNetwork, kernel_drops, proc_udp_drops

pytestmark = pytest.mark.timeout(60)

BURST = 20_000


def _burst(addr: tuple[str, int], n: int) -> None:
    rnd = random.Random(3)
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        for _ in range(n):
            sock.sendto(bytes(rnd.randrange(256) for _ in range(64)), addr)
    finally:
        sock.close()


async def test_a_burst_at_a_tiny_receive_buffer_shows_kernel_drops(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="overlay.node")
    tunables = dataclasses.replace(FAST, recv_buffer=1024, socket_stats_interval=0.2)
    node = OverlayNode(SECRET, tunables=tunables)
    await node.start([])
    try:
        granted = node.stats()["socket"]["rcvbuf"]
        assert granted <= 8192  # the kernel's minimum, nowhere near its 200 KB default
        _burst(node.info.address, BURST)  # blocking: the node's loop cannot drain meanwhile

        def accounted() -> bool:
            drops = node.stats()["drops"]
            return sum(drops.values()) == BURST

        await wait_for(accounted, 20)  # every datagram counted: in-node or kernel drop
        drops = node.stats()["drops"]
        assert drops["kernel_rcvbuf"] > 0
        assert node.stats()["socket"]["kernel_drops"] == drops["kernel_rcvbuf"]
        # the periodic sample reports the overflow at WARNING
        await wait_for(lambda: any("kernel dropped" in r.getMessage() for r in caplog.records), 10)
    finally:
        await node.stop()


async def test_the_requested_receive_buffer_is_applied() -> None:
    small = OverlayNode(SECRET, tunables=dataclasses.replace(FAST, recv_buffer=4096))
    default = OverlayNode(SECRET, tunables=dataclasses.replace(FAST, recv_buffer=0))
    await small.start([])
    await default.start([])
    try:
        assert small.stats()["socket"]["rcvbuf"] < default.stats()["socket"]["rcvbuf"]
        assert small.stats()["socket"]["kernel_drops"] == 0
        assert "kernel_rcvbuf" not in small.stats()["drops"]
    finally:
        await small.stop()
        await default.stop()


def test_so_meminfo_and_proc_net_udp_agree() -> None:
    """Both ways of reading the counter give the same number (the /proc one is the fallback
    where SO_MEMINFO is missing)."""
    recv = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    recv.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1024)
    recv.bind(("127.0.0.1", 0))
    try:
        _burst(recv.getsockname(), 500)
        via_meminfo = kernel_drops(recv)
        via_proc = proc_udp_drops(os.fstat(recv.fileno()).st_ino)
        assert via_meminfo is not None and via_meminfo > 0
        assert via_proc == via_meminfo
        assert proc_udp_drops(os.fstat(recv.fileno()).st_ino, paths=["/nonexistent"]) is None
    finally:
        recv.close()


async def test_a_closed_socket_reports_nothing() -> None:
    net = UdpNetwork()
    node = OverlayNode(SECRET, tunables=FAST, network=net)
    await node.start([])
    await node.stop()
    assert node.stats()["socket"] == {}
