"""Deterministic in-memory network for running thousands of overlay nodes in one process.

Contract: the *unchanged* :class:`overlay.node.OverlayNode` code (protocol, HMAC framing,
routing, membership, kademlia crawls) runs over :class:`SimNetwork` instead of UDP, on a
:class:`VirtualTimeLoop` — an asyncio event loop whose clock jumps straight to the next
scheduled callback instead of waiting — so ten thousand nodes and minutes of protocol time run
in one process as fast as the CPU allows. Given the same seed and the same driver code, a run
is repeatable: latency, loss and partitions come from one seeded RNG, per-node randomness from
``seed_for``, and the node code iterates only over insertion-ordered containers. (Nonces and
message ids are still random bytes; they are only used as lookup keys and never influence
ordering.)

Latency of a datagram = a per-pair base in ``[latency_min, latency_max]`` (a deterministic hash
of seed and the two addresses, so the "topology" is fixed) + uniform jitter up to ``jitter``.
A datagram is lost with probability ``loss``, and always between different sides of a
partition. A node that is stopped simply vanishes (its datagrams go nowhere), like a crash.
"""

from __future__ import annotations

import asyncio
import heapq
import random
import selectors
import zlib
from collections.abc import Callable, Coroutine, Iterable, Mapping
from typing import Any

from overlay.errors import OverlayError
from overlay.wire import Envelope, InProcessCodec

Address = tuple[str, int]


class SimulationStalled(OverlayError, RuntimeError):
    """The virtual loop has nothing left to run but the awaited coroutine is not done (still a
    ``RuntimeError``, as asyncio's own "loop stopped" errors are)."""


class _VirtualSelector(selectors.BaseSelector):
    """A selector with no I/O (the simulation has none); never waited on."""

    def __init__(self) -> None:
        self._keys: dict[Any, selectors.SelectorKey] = {}

    def register(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        fd = fileobj if isinstance(fileobj, int) else fileobj.fileno()
        key = selectors.SelectorKey(fileobj, fd, events, data)
        self._keys[fd] = key
        return key

    def unregister(self, fileobj: Any) -> selectors.SelectorKey:
        fd = fileobj if isinstance(fileobj, int) else fileobj.fileno()
        return self._keys.pop(fd)

    def select(self, timeout: float | None = None) -> list[Any]:
        return []

    def get_map(self) -> Mapping[Any, selectors.SelectorKey]:
        return self._keys

    def close(self) -> None:
        self._keys.clear()


_PURGE_MIN = 100  # like asyncio: purge cancelled timers once they are half of ≥ 100 entries


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    """An asyncio loop on virtual time: sleeps and timeouts cost no wall-clock time.

    Each iteration runs the ready callbacks; when there are none, the clock jumps to the
    earliest scheduled entry. Timers (``call_at``/``call_later``, hence sleeps and timeouts)
    and bare callbacks posted with :meth:`post_at` (the simulated network's datagram
    deliveries: no handle, no context copy) share one heap of ``(when, seq, ...)`` tuples —
    compared in C, ties in scheduling order — instead of asyncio's heap of ``TimerHandle``
    objects compared by a Python ``__lt__``. Same semantics as asyncio's ``_run_once``:
    callbacks made ready by this iteration's callbacks run in the next one."""

    def __init__(self) -> None:
        self._now = 0.0
        self._heap: list[tuple[Any, ...]] = []
        self._seq = 0
        super().__init__(selector=_VirtualSelector())

    def time(self) -> float:
        return self._now

    def call_at(
        self, when: float, callback: Callable[..., Any], *args: Any, context: Any = None
    ) -> asyncio.TimerHandle:
        if self._closed:
            raise RuntimeError("Event loop is closed")
        timer = asyncio.TimerHandle(when, callback, args, self, context)
        self._seq += 1
        heapq.heappush(self._heap, (when, self._seq, timer))
        timer._scheduled = True
        return timer

    def call_later(
        self, delay: float, callback: Callable[..., Any], *args: Any, context: Any = None
    ) -> asyncio.TimerHandle:
        if delay is None:
            raise TypeError("delay must not be None")
        return self.call_at(self._now + delay, callback, *args, context=context)

    def post_at(self, when: float, callback: Callable[..., Any], *args: Any) -> None:
        """Run ``callback(*args)`` at virtual time ``when``; cannot be cancelled."""
        self._seq += 1
        heapq.heappush(self._heap, (when, self._seq, None, callback, args))

    def _purge_cancelled(self) -> None:
        kept = []
        for entry in self._heap:
            timer = entry[2]
            if timer is not None and timer.cancelled():
                timer._scheduled = False
            else:
                kept.append(entry)
        heapq.heapify(kept)
        self._heap = kept
        self._timer_cancelled_count = 0

    def _run_once(self) -> None:
        heap = self._heap
        if len(heap) > _PURGE_MIN and 2 * self._timer_cancelled_count > len(heap):
            self._purge_cancelled()
            heap = self._heap
        ready = self._ready
        pop = heapq.heappop
        if not ready and not self._stopping:
            while heap and heap[0][2] is not None and heap[0][2].cancelled():
                pop(heap)[2]._scheduled = False
                self._timer_cancelled_count -= 1
            if not heap:
                raise SimulationStalled("no callbacks scheduled; the simulation cannot progress")
            if heap[0][0] > self._now:
                self._now = heap[0][0]
        end = self._now + self._clock_resolution
        while heap and heap[0][0] < end:
            entry = pop(heap)
            timer = entry[2]
            if timer is None:
                ready.append(entry)
            else:
                timer._scheduled = False
                if timer.cancelled():
                    self._timer_cancelled_count -= 1
                else:
                    ready.append(timer)
        popleft = ready.popleft
        for _ in range(len(ready)):
            handle = popleft()
            if type(handle) is tuple:
                try:
                    handle[3](*handle[4])
                except (SystemExit, KeyboardInterrupt):
                    raise
                except BaseException as exc:
                    self.call_exception_handler(
                        {"message": f"Exception in callback {handle[3]!r}", "exception": exc}
                    )
            elif not handle.cancelled():
                handle._run()
        handle = None  # break cycles when an exception occurs

    def close(self) -> None:
        super().close()
        self._heap.clear()


def run(main: Coroutine[Any, Any, Any]) -> Any:
    """Run ``main`` on a fresh :class:`VirtualTimeLoop` (like ``asyncio.run``)."""
    loop = VirtualTimeLoop()
    try:
        asyncio.set_event_loop(loop)
        return loop.run_until_complete(main)
    finally:
        try:
            for task in asyncio.all_tasks(loop):
                task.cancel()
            loop.run_until_complete(asyncio.sleep(0))
        finally:
            asyncio.set_event_loop(None)
            loop.close()


class SimTransport(asyncio.DatagramTransport):
    """The datagram transport handed to a node's protocol inside the simulation."""

    def __init__(self, network: SimNetwork, address: Address) -> None:
        super().__init__()
        self._network = network
        self.address = address
        self._closing = False

    def sendto(self, data: Any, addr: Any = None) -> None:  # type: ignore[override]
        if not self._closing:
            if type(data) is not Envelope:
                data = bytes(data)
            self._network.send(self.address, data, (addr[0], addr[1]))

    def close(self) -> None:
        if not self._closing:
            self._closing = True
            self._network.close(self)

    def is_closing(self) -> bool:
        return self._closing

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self.address if name == "sockname" else default


class SimNetwork:
    """A seeded in-memory datagram network; pass it as ``OverlayNode(network=...)``.

    Nodes on it encode datagrams as :class:`overlay.wire.Envelope` objects
    (:class:`overlay.wire.InProcessCodec`: msgpack payload and size limit as on the wire, no
    HMAC); raw bytes sent on it are delivered as bytes and fully checked by the receiver."""

    codec_class = InProcessCodec

    def __init__(
        self,
        seed: int = 0,
        *,
        latency_min: float = 0.001,
        latency_max: float = 0.020,
        jitter: float = 0.002,
        loss: float = 0.0,
        epoch: float = 1_700_000_000.0,
    ) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.latency_min = latency_min
        self.latency_max = latency_max
        self.jitter = jitter
        self.loss = loss
        self.epoch = epoch
        self._endpoints: dict[Address, Any] = {}
        self._next_port: dict[str, int] = {}
        self._side: dict[Address, int] = {}
        self.delivered = 0
        self.dropped = 0
        self.sent_bytes = 0
        # crc32 of "seed|src|" and the bytes of "dst" per address: the per-pair latency hash
        # without formatting a string per datagram (crc32 is incremental).
        self._src_crc: dict[Address, int] = {}
        self._dst_text: dict[Address, bytes] = {}
        self._loop: Any = None
        self._post: Callable[..., Any] | None = None

    # -- the network interface used by OverlayNode -----------------------------------------

    async def open(
        self, host: str, port: int, make_protocol: Callable[[Address], asyncio.BaseProtocol]
    ) -> SimTransport:
        if port == 0:
            port = self._next_port.get(host, 10000)
            while (host, port) in self._endpoints:
                port += 1
            self._next_port[host] = port + 1
        address = (host, port)
        if address in self._endpoints:
            raise OSError(f"address {address} already in use")
        protocol = make_protocol(address)
        transport = SimTransport(self, address)
        self._endpoints[address] = protocol
        protocol.connection_made(transport)
        return transport

    def close(self, transport: SimTransport) -> None:
        self._endpoints.pop(transport.address, None)
        transport._closing = True

    def wall_clock(self) -> float:
        return self.epoch + asyncio.get_running_loop().time()

    def seed_for(self, node_id: int) -> int:
        return (self.seed * 0x9E3779B97F4A7C15) ^ node_id

    # -- fault injection -------------------------------------------------------------------

    def partition(self, *groups: Iterable[Address]) -> None:
        """Only nodes in the same group (or in none) can talk until :meth:`heal`."""
        self._side = {}
        for index, group in enumerate(groups):
            for addr in group:
                self._side[(addr[0], addr[1])] = index

    def heal(self) -> None:
        self._side = {}

    # -- delivery --------------------------------------------------------------------------

    def _base_latency(self, src: Address, dst: Address) -> float:
        # == crc32(f"{seed}|{src[0]}:{src[1]}|{dst[0]}:{dst[1]}".encode())
        crc = self._src_crc.get(src)
        if crc is None:
            crc = self._src_crc[src] = zlib.crc32(f"{self.seed}|{src[0]}:{src[1]}|".encode())
        text = self._dst_text.get(dst)
        if text is None:
            text = self._dst_text[dst] = f"{dst[0]}:{dst[1]}".encode()
        h = zlib.crc32(text, crc)
        return self.latency_min + (h / 0xFFFFFFFF) * (self.latency_max - self.latency_min)

    def send(self, src: Address, data: Any, dst: Address) -> None:
        self.sent_bytes += len(data)
        side = self._side
        if side and side.get(src, -1) != side.get(dst, -1):
            self.dropped += 1
            return
        if self.loss and self.rng.random() < self.loss:
            self.dropped += 1
            return
        # uniform(0, jitter) == jitter * random(), without the call
        delay = self._base_latency(src, dst) + self.jitter * self.rng.random()
        loop = asyncio.get_running_loop()
        if loop is not self._loop:
            self._loop = loop
            self._post = loop.post_at if isinstance(loop, VirtualTimeLoop) else None
        if self._post is not None:
            self._post(loop._now + delay, self._deliver, src, dst, data)
        else:
            loop.call_later(delay, self._deliver, src, dst, data)

    def _deliver(self, src: Address, dst: Address, data: Any) -> None:
        protocol = self._endpoints.get(dst)
        if protocol is None:
            self.dropped += 1
            return
        self.delivered += 1
        protocol.datagram_received(data, src)

    def addresses(self) -> list[Address]:
        return list(self._endpoints)


async def start_cluster(
    network: SimNetwork,
    n: int,
    secret: bytes,
    *,
    tunables: Any = None,
    batch: int = 50,
    node_factory: Callable[..., Any] | None = None,
) -> list[Any]:
    """Start ``n`` nodes on ``network``: one seed, then batches of ``batch`` nodes joining
    concurrently, each through a random already-joined node (seeded by the network)."""
    from overlay.node import OverlayNode  # the node depends on nothing here; avoid a cycle

    factory = node_factory or OverlayNode

    def make(i: int) -> Any:
        host = f"10.{(i >> 16) & 255}.{(i >> 8) & 255}.{i & 255}"
        return factory(secret, host=host, port=7000, tunables=tunables, network=network)

    seed = make(0)
    await seed.start()
    nodes = [seed]
    while len(nodes) < n:
        new = [make(i) for i in range(len(nodes), min(n, len(nodes) + batch))]
        boots = [network.rng.choice(nodes).info.address for _ in new]
        await asyncio.gather(*(node.start([b]) for node, b in zip(new, boots, strict=True)))
        nodes.extend(new)
    return nodes


def route_chain(nodes_by_id: Mapping[int, Any], origin: Any, key: int) -> list[Any] | None:
    """Follow ``next_hop`` decisions (local tables only, no messages) from ``origin``; the
    path ends at the node that believes it is the root. ``None`` if a hop names a node that
    is not live (its tables are stale)."""
    path = [origin]
    cur = origin
    while (nh := cur.next_hop(key)) is not None:
        cur = nodes_by_id.get(nh.id)
        if cur is None or not cur.running:
            return None
        path.append(cur)
    return path


def agreement(nodes: Iterable[Any], keys: Iterable[int]) -> float:
    """Fraction of (live node, key) pairs whose next-hop chain ends at the true root (the live
    node XOR-closest to the key) without touching a dead node."""
    live = [n for n in nodes if n.running]
    by_id = {n.id: n for n in live}
    good = total = 0
    for key in keys:
        root = min(live, key=lambda n: n.id ^ key)
        for node in live:
            path = route_chain(by_id, node, key)
            total += 1
            good += path is not None and path[-1] is root
    return good / total if total else 1.0
