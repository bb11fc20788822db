"""Where datagrams go: real UDP sockets, or (see :mod:`overlay.sim`) an in-memory network.

Contract: a *network* offers ``open(host, port, make_protocol)``: it binds (``port=0`` picks a
free port), calls ``make_protocol((host, bound_port))`` — the node id is derived from the bound
address, so the protocol can only be built after binding — and returns the transport;
``close(transport)``, ``wall_clock()`` (seconds since the Unix epoch, used for datagram
timestamps) and ``seed_for(node_id)`` for per-node randomness; optionally ``codec_class`` (the
simulator's :class:`overlay.wire.InProcessCodec`, default :class:`overlay.wire.Codec`) and
``socket_stats(transport)`` (what the kernel says about the socket; the simulator has none).
The node code above it is the same for both networks.

Kernel drops: datagrams the kernel discards because the socket's receive buffer is full never
reach the protocol, so no counter above this layer can see them. :func:`kernel_drops` reads the
socket's own drop counter (``sk_drops``): ``getsockopt(SO_MEMINFO)`` (Linux ≥ 4.6; one
syscall, exact, no parsing), else the ``drops`` column of ``/proc/net/udp`` / ``udp6`` for the
socket's inode; elsewhere ``None`` ("unknown", never 0). ``SO_RXQ_OVFL`` was not used: it
delivers the same counter as ancillary data of ``recvmsg``, but asyncio's datagram transport
reads with ``recvfrom`` and would have to be replaced by a hand-written reader, and it only
reports drops when a later datagram arrives. ``UdpNetwork(recv_buffer=...)`` asks for a larger
receive buffer (``SO_RCVBUF``; the kernel caps it at ``net.core.rmem_max`` and doubles it for
bookkeeping; ``socket_stats`` reports what it granted).
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import socket
import struct
import time
from collections.abc import Callable, Iterable
from typing import Any

log = logging.getLogger(__name__)

SO_MEMINFO = getattr(socket, "SO_MEMINFO", 55)  # Linux <asm-generic/socket.h>
SK_MEMINFO_DROPS = 8  # index of sk_drops in the u32 array SO_MEMINFO returns
PROC_UDP = ("/proc/net/udp", "/proc/net/udp6")


def kernel_drops(sock: Any) -> int | None:
    """Datagrams the kernel dropped for this socket (receive buffer full, or a bad checksum),
    or ``None`` if the platform does not say. ``sock`` is a socket or asyncio's
    ``TransportSocket``."""
    try:
        raw = sock.getsockopt(socket.SOL_SOCKET, SO_MEMINFO, 4 * (SK_MEMINFO_DROPS + 1))
        if len(raw) >= 4 * (SK_MEMINFO_DROPS + 1):
            return struct.unpack_from("I", raw, 4 * SK_MEMINFO_DROPS)[0]
    except OSError:
        pass
    try:
        inode = os.fstat(sock.fileno()).st_ino
    except OSError:
        return None
    return proc_udp_drops(inode)


def proc_udp_drops(inode: int, paths: Iterable[str] = PROC_UDP) -> int | None:
    """The ``drops`` column (the last) of the ``/proc/net/udp*`` line of socket ``inode``."""
    for path in paths:
        try:
            with open(path) as f:
                next(f, None)  # the header
                for line in f:
                    cols = line.split()
                    if len(cols) >= 13 and cols[9] == str(inode):
                        return int(cols[-1])
        except (OSError, ValueError):
            continue
    return None


class UdpNetwork:
    """Real UDP over the OS (IPv4 or IPv6 by the host's form). ``recv_buffer`` > 0 asks the
    kernel for that many bytes of socket receive buffer (``SO_RCVBUF``); 0 keeps its
    default."""

    def __init__(self, recv_buffer: int = 0) -> None:
        self.recv_buffer = recv_buffer

    async def open(
        self,
        host: str,
        port: int,
        make_protocol: Callable[[tuple[str, int]], asyncio.DatagramProtocol],
    ) -> Any:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_DGRAM)
        try:
            if self.recv_buffer > 0:
                try:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self.recv_buffer)
                except OSError as exc:  # the kernel's default buffer still works
                    log.warning("SO_RCVBUF %d refused: %s", self.recv_buffer, exc)
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

    def socket_stats(self, transport: Any) -> dict[str, Any]:
        """``rcvbuf``: the receive buffer the kernel granted (bytes); ``kernel_drops``: see
        :func:`kernel_drops`. Empty once the socket is closed."""
        sock = transport.get_extra_info("socket")
        if transport.is_closing() or sock is None or sock.fileno() < 0:
            return {}
        try:
            rcvbuf = sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF)
        except OSError:
            return {}
        return {"rcvbuf": rcvbuf, "kernel_drops": kernel_drops(sock)}

    def wall_clock(self) -> float:
        return time.time()

    def seed_for(self, node_id: int) -> int:
        return random.SystemRandom().getrandbits(64) ^ node_id
