"""The fast snapshot paths against the straightforward ones they replaced, kept here as the
reference: ``to_bytes`` (a pooled, reused zstandard compressor) writes the bytes a fresh
compressor writes, from any thread; ``from_bytes`` (its key checks whole-column, or key by key:
both are run on every input) accepts exactly the bytes the per-key reference decoder accepts,
gives the same snapshot, and refuses hostile bytes (tampered hashes, unsorted entries, bad
sizes, truncated columns) with ``SnapshotError``;
``merge``/``subtract`` (a two-way merge of the sorted columns) give exactly what sorting the
concatenated columns gives, for every aggregator, with colliding hashes."""

from __future__ import annotations

import contextlib
import struct
import threading
import zlib
from collections.abc import Iterator
from typing import Any

import msgpack
import numpy as np
import pytest
import zstandard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import cbt.snapshot
from cbt import CompressedBufferTree, Snapshot, SnapshotError, get_aggregator, xxh3_64
from cbt.aggregators import shuffle_bytes, unshuffle_bytes
from cbt.buffers import (
    EncodedKeys,
    Run,
    decode_hashes,
    encode_hashes,
    merge_two_runs,
    sort_and_aggregate,
)
from cbt.hashing import (
    array_head,
    check_keys,
    hash_name,
    pack_keys,
    scalar_encoding_sizes,
)

CHECKS = ["whole-column", "per-key"]


@contextlib.contextmanager
def key_checks(mode: str) -> Iterator[None]:
    """``from_bytes`` checks every key column whole-column first (however short), or never."""
    with pytest.MonkeyPatch.context() as mp:
        threshold = 0 if mode == "whole-column" else 1 << 62
        mp.setattr(cbt.snapshot, "WHOLE_COLUMN_CHECK_FROM", threshold)
        yield


FIXED = struct.Struct("<8sHHQI")
TRAILER = struct.Struct("<I")
MASK64 = (1 << 64) - 1


# ---- the reference implementations (as they were before the fast paths) ------------------


def ref_to_bytes(snap: Snapshot, level: int = 3) -> bytes:
    raws = (
        encode_hashes(snap.hashes),
        shuffle_bytes(snap.encoded_keys.lengths.astype("<u4"), 4),
        snap.encoded_keys.to_blob(),
        snap.agg.encode_column(snap.values_column),
    )
    c = zstandard.ZstdCompressor(level=level)
    cols = [c.compress(r) for r in raws]
    name, params = snap.agg.describe()
    header = msgpack.packb(
        {
            "aggregator": name,
            "params": params,
            "hash": snap.hash_name,
            "count": len(snap),
            "columns": [[len(cc), len(r)] for cc, r in zip(cols, raws, strict=True)],
        },
        use_bin_type=True,
    )
    total = FIXED.size + len(header) + sum(map(len, cols)) + TRAILER.size
    body = b"".join([FIXED.pack(b"CBTSNAP\x00", 1, 0, total, len(header)), header, *cols])
    return body + TRAILER.pack(zlib.crc32(body))


class Refused(Exception):
    """The reference decoder refuses the bytes."""


def ref_from_bytes(data: bytes, hash_function: Any = None) -> Snapshot:
    """The per-key decoder: every check ``from_bytes`` made, one key at a time."""
    size = len(data)
    if size < FIXED.size + TRAILER.size:
        raise Refused("short")
    magic, version, flags, total, hlen = FIXED.unpack_from(data)
    if magic != b"CBTSNAP\x00" or version != 1 or size != total or flags:
        raise Refused("fixed header")
    if zlib.crc32(data[: size - TRAILER.size]) != TRAILER.unpack_from(data, size - 4)[0]:
        raise Refused("crc")
    try:
        return _ref_decode(data, hlen, hash_function)
    except Refused:
        raise
    except Exception as e:
        raise Refused(repr(e)) from e


def _ref_decode(data: bytes, hlen: int, hash_function: Any) -> Snapshot:
    end, start = len(data) - TRAILER.size, FIXED.size
    if start + hlen > end:
        raise Refused("header length")
    header = msgpack.unpackb(data[start : start + hlen], raw=False, use_list=False)
    n, columns = header["count"], header["columns"]
    if not isinstance(n, int) or n < 0 or len(columns) != 4:
        raise Refused("header")
    if any(not isinstance(x, int) or x < 0 for c in columns for x in c):
        raise Refused("columns")
    agg = get_aggregator(header["aggregator"], header["params"])
    if hash_function is None:
        if header["hash"] != "xxh3_64":
            raise Refused("hash name")
        hash_function = xxh3_64
    pos = start + hlen
    if pos + sum(c[0] for c in columns) != end:
        raise Refused("column lengths")
    raws = []
    for clen, rlen in columns:
        raw = zstandard.ZstdDecompressor().decompress(data[pos : pos + clen], max_output_size=rlen)
        if len(raw) != rlen:
            raise Refused("raw length")
        raws.append(raw)
        pos += clen
    hashes = decode_hashes(raws[0], n)
    if len(raws[1]) != 4 * n:
        raise Refused("sizes")
    lengths = unshuffle_bytes(raws[1], n, "<u4", 4).astype(np.int64)
    encoded = EncodedKeys.from_blob(raws[2], lengths)
    if n > 1 and not bool(np.all(hashes[1:] >= hashes[:-1])):
        raise Refused("order")
    keys = encoded.decode()
    check_keys(keys.tolist())
    encs = [msgpack.packb(k, use_bin_type=True) for k in keys]
    if [len(e) for e in encs] != lengths.tolist():
        raise Refused("key sizes")
    if [int(hash_function(e)) & MASK64 for e in encs] != hashes.tolist():
        raise Refused("hashes")
    # one entry per key, ties in hash broken by the key's encoding
    entries = list(zip(hashes.tolist(), encs, strict=True))
    if len(set(encs)) != n or entries != sorted(entries):
        raise Refused("duplicate or tie order")
    values = agg.decode_column(raws[3], n)
    return Snapshot(agg, hashes, encoded, values, hash_function)


def ref_merge(a: Snapshot, b: Snapshot, negate: bool = False) -> Snapshot:
    """Merge (or subtract) by sorting the concatenated columns."""
    agg = a.agg
    other = agg.negate_column(b.values_column) if negate else b.values_column
    run = sort_and_aggregate(
        np.concatenate([a.hashes, b.hashes]),
        EncodedKeys.concat([a.encoded_keys, b.encoded_keys]),
        np.concatenate([a.values_column, other]),
        agg,
        owned=False,
    )
    if negate:
        keep = agg.nonzero_mask(run.values)
        if not keep.all():
            run = Run(run.hashes[keep], run.keys[keep], run.values[keep])
    return Snapshot.from_run(agg, run, HASHES_BY_NAME[a.hash_name])


def assert_identical(got: Snapshot, want: Snapshot) -> None:
    """Same columns, dtypes, keys and states (not just equal finalized values)."""
    assert got.agg == want.agg and got.hash_name == want.hash_name
    assert got.hashes.dtype == want.hashes.dtype == np.uint64
    assert got.hashes.tolist() == want.hashes.tolist()
    assert got.encoded_keys.data.dtype == want.encoded_keys.data.dtype
    assert got.encoded_keys.lengths.dtype == want.encoded_keys.lengths.dtype
    assert got.encoded_keys.lengths.tolist() == want.encoded_keys.lengths.tolist()
    assert got.encoded_keys.to_blob() == want.encoded_keys.to_blob()
    assert got.values_column.dtype == want.values_column.dtype
    assert got.agg.encode_column(got.values_column) == want.agg.encode_column(want.values_column)
    assert got == want
    assert ref_to_bytes(got) == ref_to_bytes(want)


# ---- snapshots with colliding hashes, for every aggregator -----------------------------------


def mod8_hash(data: bytes) -> int:
    """Eight hashes: ties inside a snapshot and between snapshots."""
    return xxh3_64(data) & 7


def const_hash(data: bytes) -> int:
    return 2**64 - 1


def wide_hash(data: bytes) -> int:
    """Distinct hashes for distinct keys in practice, a few bits: keys of two snapshots often
    share a hash only when they are the same key, sometimes when they are not."""
    return xxh3_64(data) & 0x3FF


HASHES = [xxh3_64, mod8_hash, const_hash, wide_hash]
HASHES_BY_NAME = {hash_name(f): f for f in HASHES}

KEYS = st.one_of(
    st.text(alphabet="abc\x00", max_size=4),
    st.binary(max_size=3),
    st.integers(-300, 300),
    st.sampled_from([0, 256, 1000, 2**63, -(2**63), 2**64 - 1]),
    st.tuples(st.sampled_from(["x", "y"]), st.integers(0, 2)),
    st.binary(min_size=300, max_size=302),  # wide keys (encodings over 256 bytes)
)
VALUES: dict[str, st.SearchStrategy] = {
    "count": st.integers(-3, 4),
    "sum": st.integers(-50, 50),
    "avg": st.integers(-50, 50),
    "min": st.one_of(st.integers(-50, 50), st.floats(-5, 5, allow_nan=False)),
    "max": st.integers(-50, 50),
    "topk": st.tuples(st.sampled_from(["i", "j", 3]), st.integers(0, 5)),
    "distinct": st.integers(0, 6),
    "collect_set": st.text(alphabet="pq", max_size=2),
    "approx_distinct": st.integers(0, 50),
}
PARAMS = {"topk": {"k": 2}, "approx_distinct": {"lg_k": 4}}
PROPERTY = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def build(name: str, hash_function: Any, pairs: list) -> Snapshot:
    tree = CompressedBufferTree(
        name, aggregator_params=PARAMS.get(name), hash_function=hash_function, root_capacity=3
    )
    for k, v in pairs:
        tree.insert(k, v)
    return tree.flush()


def pairs_of(name: str, keys: st.SearchStrategy = KEYS) -> st.SearchStrategy:
    return st.lists(st.tuples(keys, VALUES[name]), max_size=30)


@pytest.mark.parametrize("hash_index", range(len(HASHES)))
@pytest.mark.parametrize("name", sorted(VALUES))
@PROPERTY
@given(data=st.data())
def test_merge_and_subtract_equal_the_sorting_reference(
    name: str, hash_index: int, data: st.DataObject
) -> None:
    fn = HASHES[hash_index]
    common = data.draw(st.lists(KEYS, max_size=12))
    shared = st.one_of(KEYS, st.sampled_from(common)) if common else KEYS
    a = build(name, fn, data.draw(pairs_of(name, shared)))
    b = build(name, fn, data.draw(pairs_of(name, shared)))
    before = (ref_to_bytes(a), ref_to_bytes(b))
    for x, y in ((a, b), (b, a), (a, a)):
        if len(x) and len(y):
            assert_identical(x.merge(y), ref_merge(x, y))
        if x.agg.invertible and len(y):
            assert_identical(x.subtract(y), ref_merge(x, y, negate=True))
    assert (ref_to_bytes(a), ref_to_bytes(b)) == before  # inputs untouched


def test_merge_of_a_cross_collision_keeps_both_keys_in_encoding_order() -> None:
    """Snapshots whose different keys share a hash: no tie inside either, a tie between them
    (the merge must compare the keys, not trust the hashes)."""
    a = build("count", const_hash, [("b", 1)])
    b = build("count", const_hash, [("a", 2)])
    merged = a.merge(b)
    assert_identical(merged, ref_merge(a, b))
    assert merged.keys() == ["a", "b"]
    assert_identical(b.merge(a), ref_merge(b, a))
    c = build("count", const_hash, [("b", 5)])
    assert_identical(merged.merge(c), ref_merge(merged, c))  # a tie inside the first
    assert merged.merge(c).to_dict() == {"a": 2, "b": 6}
    assert_identical(a.merge(c), ref_merge(a, c))  # the same key under a colliding hash
    assert a.merge(c).to_dict() == {"b": 6}


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.text(alphabet="abcdef", min_size=1, max_size=6), max_size=60, unique=True),
    st.lists(st.text(alphabet="abcdef", min_size=1, max_size=9), max_size=60, unique=True),
)
def test_merge_of_keys_of_different_widths(ka: list, kb: list) -> None:
    """Fixed-width key rows of two widths (and overlapping key sets): the merged rows have the
    wider width, as concatenating them gives."""
    a = build("count", xxh3_64, [(k, 1) for k in ka])
    b = build("count", xxh3_64, [(k, 2) for k in kb + ka[: len(ka) // 2]])
    if len(a) and len(b):
        assert_identical(a.merge(b), ref_merge(a, b))
        assert_identical(b.merge(a), ref_merge(b, a))
        assert_identical(b.subtract(a), ref_merge(b, a, negate=True))
        part = a.split_by_hash(2)[0]
        assert_identical(a.merge(part), ref_merge(a, part))
        # keys a subset of a's, in rows wider than a's
        wider = EncodedKeys(part.encoded_keys.data.astype("S40"), part.encoded_keys.lengths)
        padded = Snapshot(part.agg, part.hashes, wider, part.values_column)
        if len(padded):
            assert_identical(a.merge(padded), ref_merge(a, padded))
            assert_identical(padded.merge(a), ref_merge(padded, a))
            assert_identical(a.subtract(padded), ref_merge(a, padded, negate=True))


def _run(data: st.DataObject, sort: bool) -> Run:
    """A run of arbitrary encodings (trailing NULs, prefixes of each other, repeats) under a
    few hashes; hash-sorted (ties in any order) or not."""
    n = data.draw(st.integers(1, 12))
    hashes = data.draw(st.lists(st.integers(0, 5), min_size=n, max_size=n))
    encs = data.draw(st.lists(st.sampled_from(ENCODINGS), min_size=n, max_size=n))
    if sort:
        hashes.sort()
    counts = data.draw(st.lists(st.integers(-5, 5), min_size=n, max_size=n))
    return Run(
        np.array(hashes, dtype=np.uint64),
        EncodedKeys.from_encodings(encs),
        np.array(counts, dtype=np.int64),
    )


ENCODINGS = [b"a", b"a\x00", b"a\x00\x00", b"b", b"ab", b"\x00", b"abc" * 100]


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_two_run_merge_equals_sorting_the_concatenation(data: st.DataObject) -> None:
    """``merge_two_runs`` on runs that break every assumption of its fast path (hash ties
    inside a run, unsorted runs, keys one NUL apart, duplicate keys) is still the sort."""
    a = _run(data, sort=data.draw(st.booleans()))
    b = _run(data, sort=data.draw(st.booleans()))
    if data.draw(st.booleans()):  # b: some of a's entries, often all, maybe reversed
        picked = data.draw(st.lists(st.booleans(), min_size=len(a), max_size=len(a)))
        idx = np.flatnonzero(picked)
        if data.draw(st.booleans()):
            idx = idx[::-1]
        b = Run(a.hashes[idx], a.keys[idx], a.values[idx])
    if not len(b):
        return
    agg = get_aggregator("count")
    got = merge_two_runs(a, b, agg, owned=False)
    want = sort_and_aggregate(
        np.concatenate([a.hashes, b.hashes]),
        EncodedKeys.concat([a.keys, b.keys]),
        np.concatenate([a.values, b.values]),
        agg,
        owned=False,
    )
    assert got.hashes.tolist() == want.hashes.tolist()
    assert got.keys.data.dtype == want.keys.data.dtype
    assert got.keys.lengths.tolist() == want.keys.lengths.tolist()
    assert got.keys.to_blob() == want.keys.to_blob()
    assert got.values.dtype == want.values.dtype
    assert got.values.tolist() == want.values.tolist()


def test_two_run_merge_tells_keys_one_nul_apart() -> None:
    """Rows of one width are NUL-padded: ``a`` and ``a\\0`` differ only by their lengths."""
    agg = get_aggregator("count")
    rows = np.array([b"a", b"b"], dtype="S2")
    a = Run(np.array([1, 2], np.uint64), EncodedKeys(rows, np.array([1, 1])), np.array([1, 2]))
    b = Run(np.array([1, 2], np.uint64), EncodedKeys(rows, np.array([2, 1])), np.array([3, 4]))
    got = merge_two_runs(a, b, agg, owned=False)
    assert got.keys.lengths.tolist() == [1, 2, 1]
    assert got.values.tolist() == [1, 3, 6]


SCALAR_OR_NOT = st.one_of(
    st.text(max_size=90),
    st.text(alphabet="\x00a", max_size=3),
    st.binary(max_size=255),
    st.integers(-(2**63), 2**64 - 1),
    st.sampled_from([0, 256, -256, 2**32, "a\x00", b"\x00"]),
    st.tuples(st.integers(0, 300)),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(SCALAR_OR_NOT, max_size=20))
def test_header_sizes_and_encodings_of_key_rows(keys: list) -> None:
    encs = [msgpack.packb(k, use_bin_type=True) for k in keys]
    column = EncodedKeys.from_encodings(encs)
    assert column.encodings() == encs  # rows ending in NUL bytes included
    if column.wide:
        return
    sizes = scalar_encoding_sizes(column.rows())
    if any(isinstance(k, tuple) for k in keys):
        assert sizes is None
    else:
        assert sizes is not None and sizes.tolist() == [len(e) for e in encs]
        assert pack_keys(keys) == array_head(len(keys)) + b"".join(encs)


@pytest.mark.parametrize("mode", CHECKS)
def test_a_non_canonical_key_encoding_is_judged_as_the_reference_judges_it(mode: str) -> None:
    """1000 stored as int16 (``d1 03 e8``), the size of its canonical uint16 (``cd 03 e8``):
    the one-pass check cannot vouch for it, so the per-key path decides, as it always did."""
    snap = build("count", xxh3_64, [(1000, 1), ("x", 2)])
    header, raws = _split(snap.to_bytes())
    blob = raws[2].replace(b"\xcd\x03\xe8", b"\xd1\x03\xe8")
    assert blob != raws[2]
    bad = _assemble(header, [raws[0], raws[1], blob, raws[3]])
    with key_checks(mode):
        try:
            want = ref_from_bytes(bad)
        except Refused:
            with pytest.raises(SnapshotError):
                Snapshot.from_bytes(bad)
        else:
            assert_identical(Snapshot.from_bytes(bad), want)


def _forge(keys_bytes: list[bytes], hashes: list[int]) -> bytes:
    """A count snapshot whose key column holds exactly these rows and these stored hashes."""
    header = {"aggregator": "count", "params": {}, "hash": "xxh3_64", "count": len(hashes)}
    raws = [
        encode_hashes(np.array(hashes, dtype=np.uint64)),
        shuffle_bytes(np.array([len(k) for k in keys_bytes], dtype="<u4"), 4),
        b"".join(keys_bytes),
        shuffle_bytes(np.ones(len(hashes), dtype="<i8")),
    ]
    return _assemble(header, raws)


@pytest.mark.parametrize("mode", CHECKS)
def test_rows_hashed_as_stored_are_still_refused_unless_they_are_the_keys(mode: str) -> None:
    """Stored hashes computed over the stored rows, not over the keys' encodings: the rows
    must still be exactly the keys' encodings, as the per-key path requires."""
    with key_checks(mode):
        # 1000 stored as int16, hashed as stored
        forged = b"\xd1\x03\xe8"
        with pytest.raises(SnapshotError, match="hashes do not match"):
            Snapshot.from_bytes(_forge([forged], [xxh3_64(forged)]))
        # two keys' bytes split one byte off their boundary, each part hashed as stored
        for a_key, b_key in [("ab", "cd"), ("ab", "ce"), ("ab", "cf"), ("ac", "cd"), ("ad", "cd")]:
            blob = msgpack.packb(a_key) + msgpack.packb(b_key)
            rows = [blob[:2], blob[2:]]
            hashes = [xxh3_64(r) for r in rows]
            if hashes == sorted(hashes):
                break
        else:
            pytest.fail("no pair hashed in order")
        with pytest.raises(SnapshotError, match="key sizes"):
            Snapshot.from_bytes(_forge(rows, hashes))
        good = [msgpack.packb(a_key), msgpack.packb(b_key)]
        hashes = [xxh3_64(r) for r in good]
        order = np.argsort(hashes)
        back = Snapshot.from_bytes(_forge([good[i] for i in order], sorted(hashes)))
        assert back.to_dict() == {a_key: 1, b_key: 1}


# ---- the wire format ------------------------------------------------------------------------


@pytest.mark.parametrize("mode", CHECKS)
@pytest.mark.parametrize("name", sorted(VALUES))
@PROPERTY
@given(data=st.data())
def test_round_trip_and_bytes_equal_the_reference(
    name: str, mode: str, data: st.DataObject
) -> None:
    fn = data.draw(st.sampled_from(HASHES))
    snap = build(name, fn, data.draw(pairs_of(name)))
    level = data.draw(st.sampled_from([3, 3, 1, 19, -5]))
    blob = snap.to_bytes(level)
    assert blob == ref_to_bytes(snap, level)
    with key_checks(mode):
        back = Snapshot.from_bytes(blob, hash_function=None if fn is xxh3_64 else fn)
    assert_identical(back, ref_from_bytes(blob, None if fn is xxh3_64 else fn))
    assert_identical(back, snap)
    assert back.keys() == snap.keys()
    assert back.to_bytes() == ref_to_bytes(snap)


def test_to_bytes_from_many_threads_equals_the_reference() -> None:
    snaps = [build("count", xxh3_64, [(f"k{i}-{j}", j) for j in range(40 * i)]) for i in range(6)]
    want = [ref_to_bytes(s) for s in snaps]
    errors: list[str] = []

    def work(offset: int) -> None:
        for r in range(30):
            i = (offset + r) % len(snaps)
            level = 3 if r % 5 else 1
            got = snaps[i].to_bytes(level)
            if got != (want[i] if level == 3 else ref_to_bytes(snaps[i], 1)):
                errors.append(f"thread {offset} snapshot {i} level {level}")
            if Snapshot.from_bytes(got) != snaps[i]:
                errors.append(f"thread {offset} snapshot {i} decode")

    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def _split(data: bytes) -> tuple[dict, list[bytes]]:
    """The header and the four raw (decompressed) columns of a snapshot."""
    hlen = FIXED.unpack_from(data)[4]
    header = msgpack.unpackb(data[FIXED.size : FIXED.size + hlen], raw=False)
    pos, raws = FIXED.size + hlen, []
    for clen, _rlen in header["columns"]:
        raws.append(zstandard.ZstdDecompressor().decompress(data[pos : pos + clen]))
        pos += clen
    return header, raws


def _assemble(header: dict, raws: list[bytes], count: int | None = None) -> bytes:
    """A snapshot of these raw columns, sealed with a valid checksum."""
    c = zstandard.ZstdCompressor()
    cols = [c.compress(r) for r in raws]
    header = {
        **header,
        "count": header["count"] if count is None else count,
        "columns": [[len(z), len(r)] for z, r in zip(cols, raws, strict=True)],
    }
    h = msgpack.packb(header, use_bin_type=True)
    total = FIXED.size + len(h) + sum(map(len, cols)) + TRAILER.size
    body = b"".join([FIXED.pack(b"CBTSNAP\x00", 1, 0, total, len(h)), h, *cols])
    return body + TRAILER.pack(zlib.crc32(body))


def _tamper(data: st.DataObject, blob: bytes) -> bytes:
    header, raws = _split(blob)
    n = header["count"]
    kind = data.draw(
        st.sampled_from(["hash", "swap", "size", "truncate", "key byte", "count", "value"])
    )
    if kind == "hash" and n:  # one stored hash changed (the order may still hold)
        hashes = decode_hashes(raws[0], n).copy()
        i = data.draw(st.integers(0, n - 1))
        hashes[i] = np.uint64(data.draw(st.integers(0, MASK64)))
        raws[0] = encode_hashes(np.sort(hashes) if data.draw(st.booleans()) else hashes)
    elif kind == "swap" and n > 1:  # two whole entries exchanged: out of order
        i, j = data.draw(st.lists(st.integers(0, n - 1), min_size=2, max_size=2, unique=True))
        hashes = decode_hashes(raws[0], n).copy()
        lengths = unshuffle_bytes(raws[1], n, "<u4", 4).astype(np.int64)
        keys = EncodedKeys.from_blob(raws[2], lengths)
        perm = np.arange(n)
        perm[[i, j]] = perm[[j, i]]
        raws[0] = encode_hashes(hashes[perm])
        raws[1] = shuffle_bytes(lengths[perm].astype("<u4"), 4)
        raws[2] = keys[perm].to_blob()
    elif kind == "size" and n:  # one key size moved by a byte, the total kept or not
        lengths = unshuffle_bytes(raws[1], n, "<u4", 4).astype(np.int64)
        i = data.draw(st.integers(0, n - 1))
        lengths[i] += data.draw(st.sampled_from([-1, 1]))
        if n > 1 and data.draw(st.booleans()):
            lengths[(i + 1) % n] -= lengths.sum() - len(raws[2])
        raws[1] = shuffle_bytes(np.maximum(lengths, 0).astype("<u4"), 4)
    elif kind == "truncate":  # a column cut short
        col = data.draw(st.integers(0, 3))
        cut = data.draw(st.integers(0, max(0, len(raws[col]) - 1)))
        raws[col] = raws[col][:cut]
    elif kind == "key byte" and raws[2]:
        i = data.draw(st.integers(0, len(raws[2]) - 1))
        raws[2] = raws[2][:i] + bytes([data.draw(st.integers(0, 255))]) + raws[2][i + 1 :]
    elif kind == "count":
        return _assemble(header, raws, count=n + data.draw(st.sampled_from([-1, 1])))
    elif kind == "value" and raws[3]:
        raws[3] = raws[3][:-1]
    return _assemble(header, raws)


@pytest.mark.parametrize("mode", CHECKS)
@pytest.mark.parametrize("name", ["count", "sum", "collect_set"])
@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_tampered_bytes_are_refused_as_the_reference_refuses_them(
    name: str, mode: str, data: st.DataObject
) -> None:
    fn = data.draw(st.sampled_from([xxh3_64, mod8_hash]))
    snap = build(name, fn, data.draw(pairs_of(name)))
    bad = _tamper(data, snap.to_bytes())
    arg = None if fn is xxh3_64 else fn
    with key_checks(mode):
        try:
            want = ref_from_bytes(bad, arg)
        except Refused:
            with pytest.raises(SnapshotError):
                Snapshot.from_bytes(bad, hash_function=arg)
        else:
            assert_identical(Snapshot.from_bytes(bad, hash_function=arg), want)


@pytest.mark.parametrize("mode", CHECKS)
def test_known_hostile_snapshots_are_refused(mode: str) -> None:
    with key_checks(mode):
        _known_hostile_snapshots_are_refused()


def _known_hostile_snapshots_are_refused() -> None:
    snap = build("count", xxh3_64, [("a", 1), ("b", 2), ("c", 3)])
    header, raws = _split(snap.to_bytes())
    hashes = decode_hashes(raws[0], 3)
    for bad_hashes, match in (
        (hashes + np.uint64(1), "hashes do not match"),  # every hash tampered, order kept
        (hashes[::-1].copy(), "not in order"),
    ):
        with pytest.raises(SnapshotError, match=match):
            Snapshot.from_bytes(_assemble(header, [encode_hashes(bad_hashes), *raws[1:]]))
    with pytest.raises(SnapshotError, match="key sizes"):  # a size moved to the next key
        sizes = shuffle_bytes(np.array([3, 1, 2], dtype="<u4"), 4)
        Snapshot.from_bytes(_assemble(header, [raws[0], sizes, *raws[2:]]))
    with pytest.raises(SnapshotError):  # the key column cut short
        Snapshot.from_bytes(_assemble(header, [raws[0], raws[1], raws[2][:-1], raws[3]]))
    with pytest.raises(SnapshotError):  # one entry fewer than the header says
        Snapshot.from_bytes(_assemble(header, raws, count=2))
