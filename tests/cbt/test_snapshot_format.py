"""Snapshot wire format: round trips for every aggregator, and every single-byte corruption and
every truncation of a small snapshot is rejected with SnapshotError (never garbage)."""

from __future__ import annotations

import struct
import zlib
from typing import Any

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cbt import (
    Aggregator,
    CompressedBufferTree,
    Snapshot,
    SnapshotError,
    aggregator_names,
    register_aggregator,
)


def tiny_hash(data: bytes) -> int:
    return len(data) & 1


def small_snapshot() -> Snapshot:
    t = CompressedBufferTree("avg", root_capacity=2)
    for k, v in [("a", 1), ("b", 2), (("t", 1), 3), (b"x", 4), ("a", 5), (7, 6)]:
        t.insert(k, v)
    return t.flush()


def test_round_trip_small() -> None:
    snap = small_snapshot()
    data = snap.to_bytes()
    back = Snapshot.from_bytes(data)
    assert back == snap
    assert (
        back.to_dict() == snap.to_dict() == {"a": 3.0, "b": 2.0, ("t", 1): 3.0, b"x": 4.0, 7: 6.0}
    )
    assert back.to_bytes() == data  # deterministic


def test_every_single_byte_corruption_is_rejected() -> None:
    data = small_snapshot().to_bytes()
    assert len(data) < 400
    for i in range(len(data)):
        for delta in range(1, 256):
            bad = bytearray(data)
            bad[i] = (bad[i] + delta) % 256
            with pytest.raises(SnapshotError):
                Snapshot.from_bytes(bytes(bad))


def test_every_truncation_is_rejected() -> None:
    data = small_snapshot().to_bytes()
    for n in range(len(data)):
        with pytest.raises(SnapshotError, match=r"truncated|magic"):
            Snapshot.from_bytes(data[:n])
    with pytest.raises(SnapshotError, match="unexpected bytes"):
        Snapshot.from_bytes(data + b"\0")


def test_error_messages_name_the_problem() -> None:
    data = bytearray(small_snapshot().to_bytes())
    with pytest.raises(SnapshotError, match="bad magic"):
        Snapshot.from_bytes(b"XXXXXXXX" + bytes(data[8:]))
    bad = bytearray(data)
    bad[8] = 9
    with pytest.raises(SnapshotError, match="unsupported snapshot version 9"):
        Snapshot.from_bytes(bytes(bad))
    bad = bytearray(data)
    bad[-10] ^= 1
    with pytest.raises(SnapshotError, match="checksum"):
        Snapshot.from_bytes(bytes(bad))
    with pytest.raises(SnapshotError, match="truncated"):
        Snapshot.from_bytes(bytes(data[:-1]))


def _reseal(body: bytes) -> bytes:
    """Re-checksum a hand-edited snapshot so parsing reaches the header and columns."""
    body = body[:12] + struct.pack("<Q", len(body) + 4) + body[20:]
    return body + struct.pack("<I", zlib.crc32(body))


def _rebuild(header: dict, cols: bytes) -> bytes:
    h = msgpack.packb(header, use_bin_type=True)
    fixed = struct.pack("<8sHHQI", b"CBTSNAP\x00", 1, 0, 0, len(h))
    return _reseal(fixed + h + cols)


def _split(data: bytes) -> tuple[dict, bytes]:
    hlen = struct.unpack_from("<I", data, 20)[0]
    header = msgpack.unpackb(data[24 : 24 + hlen], raw=False)
    return header, data[24 + hlen : -4]


def test_validated_contents_behind_a_valid_checksum() -> None:
    header, cols = _split(small_snapshot().to_bytes())
    with pytest.raises(SnapshotError, match="not registered"):
        Snapshot.from_bytes(_rebuild({**header, "aggregator": "nope"}, cols))
    with pytest.raises(SnapshotError, match="entry count"):
        Snapshot.from_bytes(_rebuild({**header, "count": -1}, cols))
    with pytest.raises(SnapshotError):
        Snapshot.from_bytes(_rebuild({**header, "count": header["count"] + 1}, cols))
    with pytest.raises(SnapshotError, match="column lengths"):
        Snapshot.from_bytes(_rebuild({**header, "columns": [[1, 2]]}, cols))
    with pytest.raises(SnapshotError, match="add up"):
        Snapshot.from_bytes(_rebuild(header, cols + b"\0"))
    with pytest.raises(SnapshotError, match="hash_function"):
        Snapshot.from_bytes(_rebuild({**header, "hash": "custom:other"}, cols))


def test_custom_hash_function_must_be_supplied() -> None:
    t = CompressedBufferTree("count", hash_function=tiny_hash)
    t.insert_many(["a", "bb", "ccc", "a"])
    data = t.flush().to_bytes()
    with pytest.raises(SnapshotError, match="hash_function"):
        Snapshot.from_bytes(data)
    back = Snapshot.from_bytes(data, hash_function=tiny_hash)
    assert back.to_dict() == {"a": 2, "bb": 1, "ccc": 1}
    assert back["a"] == 2


class BitOr(Aggregator):
    """A custom aggregator: bitwise OR of int flags."""

    name = "test_bitor"

    def lift(self, value: Any) -> int:
        return int(value)

    def merge(self, a: int, b: int) -> int:
        return a | b


def test_custom_aggregator_round_trips_once_registered() -> None:
    t = CompressedBufferTree(BitOr(), root_capacity=2)
    t.insert_many(["a", "b", "a", "c"], [1, 2, 4, 8])
    snap = t.flush()
    assert snap.to_dict() == {"a": 5, "b": 2, "c": 8}
    data = snap.to_bytes()
    with pytest.raises(SnapshotError, match="not registered"):
        Snapshot.from_bytes(data)
    register_aggregator("test_bitor", BitOr)
    assert Snapshot.from_bytes(data).to_dict() == {"a": 5, "b": 2, "c": 8}


VALUES = {
    "count": st.integers(1, 1000),
    "sum": st.one_of(st.integers(-(2**40), 2**40), st.floats(allow_nan=False, width=32)),
    "avg": st.integers(-100, 100),
    "min": st.floats(allow_nan=False, allow_infinity=False),
    "max": st.integers(-(2**62), 2**62),
    "topk": st.tuples(st.text(max_size=4), st.integers(0, 100)),
    "distinct": st.text(max_size=4),
    "collect_set": st.one_of(st.binary(max_size=3), st.integers(-(2**63), 2**64 - 1)),
    "approx_distinct": st.integers(-(2**63), 2**64 - 1),
    "hll": st.text(max_size=3),
    "approx_percentile": st.one_of(st.integers(-100, 100), st.floats(allow_nan=False)),
    "approx_top_k": st.one_of(st.text(max_size=3), st.integers(0, 9)),
}
KEYS = st.one_of(
    st.text(max_size=8),
    st.binary(max_size=8),
    st.integers(-(2**63), 2**64 - 1),
    st.tuples(st.text(max_size=3), st.integers(0, 9)),
)


def _same(a: object, b: object) -> bool:
    """Equal, NaN equal to NaN (also inside a list or tuple state)."""
    if isinstance(a, float) and isinstance(b, float) and a != a and b != b:
        return True
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return a == b


@pytest.mark.parametrize("name", aggregator_names())
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_round_trip_every_aggregator(name: str, data: st.DataObject) -> None:
    if name not in VALUES:
        pytest.skip("custom test aggregator")
    pairs = data.draw(st.lists(st.tuples(KEYS, VALUES[name]), max_size=40))
    t = CompressedBufferTree(name, root_capacity=4)
    for k, v in pairs:
        t.insert(k, v)
    snap = t.flush()
    back = Snapshot.from_bytes(snap.to_bytes())
    assert back == snap
    keys = snap.keys()
    assert back.keys() == keys
    # sketch states are DataSketches objects (no value equality): compare their binaries; a
    # sum of inf and -inf is NaN (IEEE), equal to nothing, itself included
    ser = snap.agg.serialize
    pairs = [(ser(back.state(k)), ser(snap.state(k))) for k in keys]
    assert all(_same(a, b) for a, b in pairs), pairs
    assert all(k in back for k in keys)


def _columns_for(hashes: list[int], encodings: list[bytes], counts: list[int]) -> tuple:
    """Hand-built (header columns, column bytes) of a count snapshot, for forged inputs."""
    import numpy as np
    import zstandard

    from cbt.aggregators import shuffle_bytes
    from cbt.buffers import encode_hashes

    raws = [
        encode_hashes(np.array(hashes, dtype=np.uint64)),
        shuffle_bytes(np.array([len(e) for e in encodings], dtype="<u4"), 4),
        b"".join(encodings),
        shuffle_bytes(np.array(counts, dtype="<i8")),
    ]
    c = zstandard.ZstdCompressor()
    cols = [c.compress(r) for r in raws]
    return [[len(z), len(r)] for z, r in zip(cols, raws, strict=True)], b"".join(cols)


def test_forged_columns_behind_a_valid_checksum_are_rejected() -> None:
    from cbt import xxh3_64

    header = {"aggregator": "count", "params": {}, "hash": "xxh3_64", "count": 1}
    good = msgpack.packb("a")
    lens, cols = _columns_for([xxh3_64(good)], [good], [3])
    assert Snapshot.from_bytes(_rebuild({**header, "columns": lens}, cols))["a"] == 3
    # a non-canonical encoding of "a" (str8 header) is not this key's encoding
    forged = b"\xd9\x01a"
    lens, cols = _columns_for([xxh3_64(forged)], [forged], [3])
    with pytest.raises(SnapshotError, match="encodings"):
        Snapshot.from_bytes(_rebuild({**header, "columns": lens}, cols))
    # a hash that is not the key's hash would break lookups and merges
    lens, cols = _columns_for([12345], [good], [3])
    with pytest.raises(SnapshotError, match="hashes do not match"):
        Snapshot.from_bytes(_rebuild({**header, "columns": lens}, cols))
    # two keys whose sizes split the key bytes at the wrong place
    b = msgpack.packb("bb")
    lens, cols = _columns_for(sorted([xxh3_64(good), xxh3_64(b)]), [good + b[:1], b[1:]], [1, 1])
    with pytest.raises(SnapshotError):
        Snapshot.from_bytes(_rebuild({**header, "count": 2, "columns": lens}, cols))
    # hashes out of order
    lens, cols = _columns_for([5, 3], [good, b], [1, 1])
    with pytest.raises(SnapshotError):
        Snapshot.from_bytes(_rebuild({**header, "count": 2, "columns": lens}, cols))
    # one key twice (a forger's way to have it merged twice), whole-column path or not
    for n in (2, 300):
        keys = [msgpack.packb(f"k{i}") for i in range(n - 1)]
        keys.append(keys[-1])
        order = sorted(range(n), key=lambda i: (xxh3_64(keys[i]), keys[i]))
        lens, cols = _columns_for(
            [xxh3_64(keys[i]) for i in order], [keys[i] for i in order], [1] * n
        )
        with pytest.raises(SnapshotError, match="twice"):
            Snapshot.from_bytes(_rebuild({**header, "count": n, "columns": lens}, cols))


def test_equal_hashes_must_be_in_key_order() -> None:
    """Two keys sharing a (custom) hash are stored in key-encoding order; the reverse order
    is refused, and so is one key twice."""
    t = CompressedBufferTree("count", hash_function=tiny_hash)
    t.insert_many(["a", "c"])  # both encode to 2 bytes: the same tiny hash
    snap = t.flush()
    again = Snapshot.from_bytes(snap.to_bytes(), hash_function=tiny_hash)
    assert dict(again) == {"a": 1, "c": 1}
    reverse = Snapshot(
        snap.agg, snap.hashes, snap.encoded_keys[[1, 0]], snap.values_column[[1, 0]], tiny_hash
    )
    with pytest.raises(SnapshotError, match="not in key order"):
        Snapshot.from_bytes(reverse.to_bytes(), hash_function=tiny_hash)
    twice = Snapshot(
        snap.agg, snap.hashes, snap.encoded_keys[[0, 0]], snap.values_column[[0, 0]], tiny_hash
    )
    with pytest.raises(SnapshotError, match="twice"):
        Snapshot.from_bytes(twice.to_bytes(), hash_function=tiny_hash)


@pytest.mark.parametrize("name", ["count", "sum", "avg", "min", "max"])
def test_empty_snapshots_decode_from_the_cache_as_from_the_bytes(name: str) -> None:
    """Empty encodings are kept (cbt/snapshot.py): the second encode and decode come from
    the cache and equal the first, and a damaged copy is still refused."""
    first = Snapshot.empty(name).to_bytes()
    assert Snapshot.empty(name).to_bytes() == first
    decoded = [Snapshot.from_bytes(first) for _ in range(2)]  # the second: from the cache
    for back in decoded:
        assert back == Snapshot.empty(name) and len(back) == 0
        assert back.agg.describe() == Snapshot.empty(name).agg.describe()
        assert back.to_bytes() == first
    for i in range(len(first)):
        bad = bytearray(first)
        bad[i] ^= 0x41
        with pytest.raises(SnapshotError):
            Snapshot.from_bytes(bytes(bad))


def test_a_cached_empty_snapshot_still_needs_its_hash_function() -> None:
    data = CompressedBufferTree("count", hash_function=tiny_hash).flush().to_bytes()
    for _ in range(2):  # the second decode may come from the cache: the same answers
        assert len(Snapshot.from_bytes(data, hash_function=tiny_hash)) == 0
        with pytest.raises(SnapshotError, match="hash_function"):
            Snapshot.from_bytes(data)
