"""Key encoding and stable 64-bit key hashing.

Contract: a key is a ``str``, ``bytes``, ``int`` (64-bit range) or a (nested) tuple of those.
Keys are encoded with msgpack (never pickle) and hashed with ``xxh3_64`` over the encoding, so
a key has the same hash in every process and on every machine: snapshots travel. Equal hashes
never imply equal keys; every consumer compares full keys on a hash tie.

``bool`` and ``float`` keys are rejected: Python considers ``True == 1 == 1.0`` while their
encodings differ, which would make the tree disagree with a ``dict`` about identity.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import msgpack
import xxhash

Key = Any
HashFunction = Callable[[bytes], int]

KEY_TYPES = (str, bytes, int, tuple)
_KEY_TYPE_SET = frozenset(KEY_TYPES)
_MASK64 = (1 << 64) - 1


def xxh3_64(data: bytes) -> int:
    """The default hash: unsigned 64-bit xxh3 of ``data`` (stable across processes)."""
    return xxhash.xxh3_64_intdigest(data)


def hash_name(fn: HashFunction) -> str:
    """A short name identifying a hash function in snapshot headers."""
    if fn is xxh3_64:
        return "xxh3_64"
    return "custom:" + getattr(fn, "__qualname__", getattr(fn, "__name__", "anonymous"))


def encode_key(key: Key) -> bytes:
    """msgpack encoding of a validated key."""
    check_key(key)
    return msgpack.packb(key, use_bin_type=True)


def decode_keys(blob: bytes) -> tuple:
    """Decode a msgpack array of keys (tuples come back as tuples, not lists)."""
    return msgpack.unpackb(blob, use_list=False, raw=False, strict_map_key=False)


def check_key(key: Key) -> None:
    """Raise ``TypeError`` unless ``key`` is a supported key."""
    t = type(key)
    if t is tuple:
        for part in key:
            check_key(part)
    elif t not in _KEY_TYPE_SET:
        raise TypeError(f"unsupported key type {t.__name__}: keys are str, bytes, int or tuples")
    elif t is int and not (-(1 << 63) <= key <= _MASK64):
        raise TypeError(f"int key {key} out of the 64-bit range msgpack can encode")


def check_keys(keys: Iterable[Key]) -> None:
    """Validate many keys; the common all-``str`` case costs one C-level pass."""
    keys = keys if isinstance(keys, list) else list(keys)
    types = set(map(type, keys))
    if types <= {str, bytes}:
        return
    for key in keys:
        check_key(key)
