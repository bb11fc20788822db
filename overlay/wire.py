"""Datagram framing: msgpack payload, HMAC-SHA256 over the whole datagram, anti-replay.

Byte layout of every datagram (all integers big-endian)::

    offset  size  field
    0       1     version (0x01)
    1       1     type: 0 = request, 1 = response
    2       8     timestamp: sender's clock, milliseconds since the Unix epoch (uint64)
    10      12    nonce: random
    22      n     payload: msgpack
    22+n    32    MAC: HMAC-SHA256(secret, bytes[0 : 22+n])

Request payload: ``[msg_id: bytes(8), rpc: str, sender: NodeInfo wire list, args: list]``.
Response payload: ``[msg_id: bytes(8), ok: bool, result]`` (``result`` is an error text when
``ok`` is false).

Contract: :meth:`Codec.encode` raises :class:`MessageTooLarge` instead of ever producing a
datagram over ``max_datagram`` bytes. :meth:`Codec.decode` returns a :class:`Frame` or raises
:class:`WireError` whose ``reason`` names the drop counter; the MAC is checked (in constant
time) before anything in the datagram is parsed, then the timestamp window, then the nonce
against the replay cache, then the payload shape. A nonce is remembered only once its MAC and
timestamp are good, for ``2 * max_skew`` of local time, which covers every moment its timestamp
could still pass the window.

:class:`InProcessCodec` is the simulator's variant (see :mod:`overlay.sim`): the same msgpack
payload, size limit and shape checks, but the "datagram" is an :class:`Envelope` object handed
from node to node in memory, so there is no header, HMAC, nonce or replay cache to pay for; its
``len()`` is the exact size the real datagram would have. The real framing is covered by the
UDP tests.
"""

from __future__ import annotations

import hmac
import os
import struct
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import msgpack

from overlay.errors import MessageTooLarge, OverlayError

VERSION = 1
REQUEST = 0
RESPONSE = 1
HEADER = struct.Struct(">BBQ12s")
HEADER_SIZE = HEADER.size  # 22
MAC_SIZE = 32
OVERHEAD = HEADER_SIZE + MAC_SIZE
MSG_ID_SIZE = 8
DEFAULT_MAX_DATAGRAM = 8192
MIN_SECRET = 16


class WireError(OverlayError):
    """A datagram was rejected; ``reason`` is the metrics drop reason. Raised by ``decode``
    only; the protocol counts it and drops the datagram, so it never reaches the API."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class Frame:
    """A decoded, authenticated datagram."""

    type: int
    timestamp_ms: int
    payload: list[Any]


class ReplayCache:
    """Nonces seen within the acceptance window. Expiry is in local receive time, so entries
    leave in arrival order and pruning is a deque pop."""

    def __init__(self, ttl: float) -> None:
        self.ttl = ttl
        self._seen: dict[bytes, float] = {}
        self._order: deque[tuple[float, bytes]] = deque()

    def check_and_add(self, nonce: bytes, now: float) -> bool:
        """True if ``nonce`` is fresh (and remember it); False if it is a replay."""
        order = self._order
        while order and order[0][0] <= now:
            _, old = order.popleft()
            self._seen.pop(old, None)
        if nonce in self._seen:
            return False
        expiry = now + self.ttl
        self._seen[nonce] = expiry
        order.append((expiry, nonce))
        return True

    def __len__(self) -> int:
        return len(self._seen)


class Codec:
    """Encodes and authenticates datagrams for one node.

    ``clock`` returns seconds since the Unix epoch (the simulator passes its virtual clock);
    ``nonce`` returns 12 random bytes."""

    def __init__(
        self,
        secret: bytes,
        *,
        max_datagram: int = DEFAULT_MAX_DATAGRAM,
        max_skew: float = 30.0,
        clock: Callable[[], float],
        nonce: Callable[[], bytes] | None = None,
    ) -> None:
        if not isinstance(secret, bytes) or len(secret) < MIN_SECRET:
            raise ValueError(f"the cluster secret must be at least {MIN_SECRET} bytes")
        if max_datagram < OVERHEAD + 16:
            raise ValueError("max_datagram too small")
        self._secret = secret
        self.max_datagram = max_datagram
        self.max_skew = max_skew
        self._clock = clock
        self._nonce = nonce or (lambda: os.urandom(12))
        self.replays = ReplayCache(2 * max_skew)

    def _mac(self, data: bytes) -> bytes:
        return hmac.digest(self._secret, data, "sha256")  # one-shot: the C fast path

    def encode(self, type_: int, payload: list[Any]) -> bytes:
        body = _pack(payload, self.max_datagram)
        ts = int(self._clock() * 1000)
        head = HEADER.pack(VERSION, type_, ts, self._nonce())
        signed = head + body
        return signed + self._mac(signed)

    def decode(self, data: bytes, now: float | None = None) -> Frame:
        if len(data) > self.max_datagram:
            raise WireError("too_large", f"{len(data)} bytes")
        if len(data) < OVERHEAD + 1:
            raise WireError("malformed", "shorter than header and MAC")
        signed, mac = data[:-MAC_SIZE], data[-MAC_SIZE:]
        if not hmac.compare_digest(mac, self._mac(signed)):
            raise WireError("bad_mac")
        version, type_, ts, nonce = HEADER.unpack_from(signed)
        if version != VERSION:
            raise WireError("bad_version", str(version))
        if type_ not in (REQUEST, RESPONSE):
            raise WireError("malformed", f"type {type_}")
        now = self._clock() if now is None else now
        if abs(now - ts / 1000.0) > self.max_skew:
            raise WireError("stale_timestamp", f"skew {now - ts / 1000.0:.1f}s")
        if not self.replays.check_and_add(nonce, now):
            raise WireError("replay")
        return Frame(type_, ts, _parse_payload(type_, signed[HEADER_SIZE:]))


def _pack(payload: list[Any], max_datagram: int) -> bytes:
    """msgpack ``payload``; raise :class:`MessageTooLarge` if the datagram would exceed the
    limit (header and MAC included)."""
    try:
        body = msgpack.packb(payload, use_bin_type=True)
    except (TypeError, ValueError, OverflowError) as exc:
        raise TypeError(f"message is not msgpack-encodable: {exc}") from exc
    size = OVERHEAD + len(body)
    if size > max_datagram:
        raise MessageTooLarge(
            f"datagram would be {size} bytes, limit is {max_datagram}; "
            "send bulk data over the data plane"
        )
    return body


def _parse_payload(type_: int, body: bytes) -> list[Any]:
    """Decode an authenticated payload and check its shape (request or response)."""
    try:
        payload = msgpack.unpackb(body, raw=False)
    except Exception as exc:  # msgpack raises several unrelated types on garbage
        raise WireError("malformed", f"msgpack: {exc}") from None
    if not isinstance(payload, list):
        raise WireError("malformed", "payload is not a list")
    if type_ == REQUEST:
        if len(payload) != 4 or not isinstance(payload[1], str) or not isinstance(payload[3], list):
            raise WireError("malformed", "bad request shape")
    elif len(payload) != 3 or not isinstance(payload[1], bool):
        raise WireError("malformed", "bad response shape")
    if not isinstance(payload[0], bytes) or len(payload[0]) != MSG_ID_SIZE:
        raise WireError("malformed", "bad message id")
    return payload


class Envelope:
    """A datagram of the in-memory network: type, msgpack body, the sender's timestamp and a
    tag derived from the cluster secret (a node with another secret drops it as ``bad_mac``).
    ``len()`` is the size of the equivalent real datagram."""

    __slots__ = ("body", "tag", "timestamp_ms", "type")

    def __init__(self, type_: int, body: bytes, timestamp_ms: int, tag: bytes) -> None:
        self.type = type_
        self.body = body
        self.timestamp_ms = timestamp_ms
        self.tag = tag

    def __len__(self) -> int:
        return OVERHEAD + len(self.body)


class InProcessCodec(Codec):
    """The simulator's codec: encodes to an :class:`Envelope` instead of authenticated bytes
    (same payload encoding, size limit and shape checks; no HMAC, nonce or replay cache: an
    in-memory datagram cannot be forged or replayed). Plain bytes handed to :meth:`decode`
    still go through every check of :class:`Codec`."""

    def __init__(self, secret: bytes, **kwargs: Any) -> None:
        super().__init__(secret, **kwargs)
        self._tag = self._mac(b"overlay in-process tag")

    def encode(self, type_: int, payload: list[Any]) -> Envelope:  # type: ignore[override]
        body = _pack(payload, self.max_datagram)
        return Envelope(type_, body, int(self._clock() * 1000), self._tag)

    def decode(self, data: Any, now: float | None = None) -> Frame:
        if type(data) is not Envelope:
            return super().decode(data, now)
        if OVERHEAD + len(data.body) > self.max_datagram:
            raise WireError("too_large", f"{len(data)} bytes")
        if data.tag != self._tag:
            raise WireError("bad_mac")
        return Frame(data.type, data.timestamp_ms, _parse_payload(data.type, data.body))
