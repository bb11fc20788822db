"""Identifiers: 160-bit integers, their base-16 digits and the XOR metric.

Contract: every id and routing key is an ``int`` in ``[0, 2**160)``. Digit ``i`` is the
``i``-th hex digit from the most significant end (``0 <= i < 40``). The XOR metric of Kademlia
and the hex-prefix metric of Pastry are consistent: a node sharing a longer hex prefix with a
key is strictly XOR-closer to it, so correcting one digit per hop never moves away from the key.
"""

from __future__ import annotations

import hashlib

ID_BITS = 160
ID_BYTES = ID_BITS // 8
DIGIT_BITS = 4
DIGITS = ID_BITS // DIGIT_BITS  # 40 hex digits
MAX_ID = (1 << ID_BITS) - 1


def key_for(text: str | bytes) -> int:
    """The routing key of ``text``: SHA-1 as a 160-bit int (how appIds and nodeIds are made)."""
    if isinstance(text, str):
        text = text.encode("utf-8")
    return int.from_bytes(hashlib.sha1(text).digest(), "big")


def node_id_for(host: str, port: int) -> int:
    """The default nodeId: SHA-1 of the advertised ``host:port`` (the ELF paper hashes the
    address)."""
    return key_for(f"{host}:{port}")


def check_id(value: int) -> int:
    """Return ``value`` if it is a valid 160-bit id, else raise ``ValueError``."""
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= MAX_ID:
        raise ValueError(f"id must be an int in [0, 2**160), got {value!r}")
    return value


def to_bytes(value: int) -> bytes:
    """Big-endian 20-byte form (what travels on the wire; msgpack has no 160-bit ints)."""
    return value.to_bytes(ID_BYTES, "big")


def from_bytes(data: bytes) -> int:
    """Inverse of :func:`to_bytes`; raises ``ValueError`` unless ``data`` is 20 bytes."""
    if not isinstance(data, bytes) or len(data) != ID_BYTES:
        raise ValueError("an id on the wire is exactly 20 bytes")
    return int.from_bytes(data, "big")


def digit(value: int, i: int) -> int:
    """Hex digit ``i`` of ``value`` counted from the most significant end."""
    return (value >> (ID_BITS - DIGIT_BITS * (i + 1))) & 0xF


def shared_prefix_digits(a: int, b: int) -> int:
    """Number of leading hex digits ``a`` and ``b`` have in common (40 if equal)."""
    x = a ^ b
    if x == 0:
        return DIGITS
    return (ID_BITS - x.bit_length()) // DIGIT_BITS


def distance(a: int, b: int) -> int:
    """The XOR metric."""
    return a ^ b


def short(value: int) -> str:
    """First 8 hex digits, for logs."""
    return f"{value:040x}"[:8]
