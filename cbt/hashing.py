"""Key encoding and stable 64-bit key hashing.

Contract: a key is a ``str``, ``bytes``, ``int`` (64-bit range) or a (nested) tuple of those.
Keys are encoded with msgpack (never pickle) and hashed with ``xxh3_64`` over the encoding, so
a key has the same hash in every process and on every machine: snapshots travel. Equal hashes
never imply equal keys; every consumer compares full keys on a hash tie.

``bool`` and ``float`` keys are rejected: Python considers ``True == 1 == 1.0`` while their
encodings differ, which would make the tree disagree with a ``dict`` about identity.

Whole-column helpers for snapshots: ``hash_encodings`` hashes many encodings into a ``uint64``
array, exactly as applying the hash function to each one (the built-in hash in a single C-level
pass); ``pack_keys``/``decode_key_stream`` encode and decode many keys in one msgpack call;
``scalar_encoding_sizes`` reads the sizes of int, str and bytes encodings off their headers.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import msgpack
import numpy as np
import xxhash

Key = Any
HashFunction = Callable[[bytes], int]

KEY_TYPES = (str, bytes, int, tuple)
_KEY_TYPE_SET = frozenset(KEY_TYPES)
_MASK64 = (1 << 64) - 1


def xxh3_64(data: bytes) -> int:
    """The default hash: unsigned 64-bit xxh3 of ``data`` (stable across processes)."""
    return xxhash.xxh3_64_intdigest(data)


def hash_encodings(encodings: Sequence[bytes], fn: HashFunction = xxh3_64) -> np.ndarray:
    """The ``uint64`` hashes of ``encodings`` under ``fn`` (any int ``fn`` returns is taken
    modulo 2**64), element ``i`` equal to ``fn(encodings[i])``."""
    n = len(encodings)
    if fn is xxh3_64:
        return np.fromiter(map(xxhash.xxh3_64_intdigest, encodings), np.uint64, n)
    return np.fromiter((int(fn(e)) & _MASK64 for e in encodings), np.uint64, n)


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


def array_head(n: int) -> bytes:
    """The msgpack header of an array of ``n`` items."""
    if n < 16:
        return bytes([0x90 | n])
    if n < 1 << 16:
        return b"\xdc" + struct.pack(">H", n)
    return b"\xdd" + struct.pack(">I", n)


def decode_key_stream(blob: bytes, n: int) -> tuple:
    """Decode ``n`` msgpack key encodings stored back to back (one C call); raises if ``blob``
    does not hold exactly ``n`` encodings."""
    return decode_keys(array_head(n) + blob)


def pack_keys(keys: Sequence[Key]) -> bytes:
    """The keys' encodings back to back, behind their array header (one C call): what
    ``array_head(len(keys))`` followed by each ``encode_key`` gives, unvalidated."""
    return msgpack.packb(keys, use_bin_type=True)


# By a msgpack head byte: the size of the whole encoding when the head alone gives it (ints,
# fixstr), -1 when it is 2 + the next byte (str8, bin8), 0 for every other kind (arrays - tuple
# keys -, longer strs and bytes, invalid key types).
_HEAD_SIZES = np.zeros(256, dtype=np.int64)
_HEAD_SIZES[0x00:0x80] = 1  # positive fixint
_HEAD_SIZES[0xE0:0x100] = 1  # negative fixint
_HEAD_SIZES[0xA0:0xC0] = 1 + np.arange(32)  # fixstr
_HEAD_SIZES[[0xCC, 0xCD, 0xCE, 0xCF, 0xD0, 0xD1, 0xD2, 0xD3]] = [2, 3, 5, 9, 2, 3, 5, 9]
_HEAD_SIZES[[0xD9, 0xC4]] = -1  # str8, bin8


def scalar_encoding_sizes(rows: np.ndarray) -> np.ndarray | None:
    """For ``rows`` (2-D ``uint8``, one zero-padded row per encoding), the size of the msgpack
    encoding each row starts with, as its header gives it; None unless every row starts with
    an int, or a str or bytes of under 256 bytes (other kinds - tuples - need their parts
    read). Whatever such an encoding decodes to is a valid key."""
    n, width = rows.shape
    sizes = _HEAD_SIZES[rows[:, 0]] if n else np.zeros(0, dtype=np.int64)
    if not bool(sizes.all()):
        return None
    var8 = sizes == -1
    if var8.any():
        if width < 2:
            return None
        sizes[var8] = 2 + rows[var8, 1].astype(np.int64)
    return sizes


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
