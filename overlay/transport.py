"""Where datagrams go: real UDP sockets, or (see :mod:`overlay.sim`) an in-memory network.

Contract: a *network* offers ``open(host, port, make_protocol)``: it binds (``port=0`` picks a
free port), calls ``make_protocol((host, bound_port))`` — the node id is derived from the bound
address, so the protocol can only be built after binding — and returns the transport;
``close(transport)``, ``wall_clock()`` (seconds since the Unix epoch, used for datagram
timestamps) and ``seed_for(node_id)`` for per-node randomness; optionally ``codec_class`` (the
simulator's :class:`overlay.wire.InProcessCodec`, default :class:`overlay.wire.Codec`). The
node code above it is the same for both networks.
"""

from __future__ import annotations

import asyncio
import random
import socket
import time
from collections.abc import Callable
from typing import Any


class UdpNetwork:
    """Real UDP over the OS (IPv4 or IPv6 by the host's form)."""

    async def open(
        self,
        host: str,
        port: int,
        make_protocol: Callable[[tuple[str, int]], asyncio.DatagramProtocol],
    ) -> Any:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_DGRAM)
        try:
            sock.bind((host, port))
            sock.setblocking(False)
            bound = sock.getsockname()[1]
            loop = asyncio.get_running_loop()
            transport, _ = await loop.create_datagram_endpoint(
                lambda: make_protocol((host, bound)), sock=sock
            )
        except BaseException:
            sock.close()
            raise
        return transport

    def close(self, transport: Any) -> None:
        transport.close()

    def wall_clock(self) -> float:
        return time.time()

    def seed_for(self, node_id: int) -> int:
        return random.SystemRandom().getrandbits(64) ^ node_id
