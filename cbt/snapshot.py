"""Snapshots: immutable, hash-ordered group-by-aggregate results and their wire format.

A :class:`Snapshot` is what ``CompressedBufferTree.flush`` returns: one entry per distinct key,
ordered by (64-bit hash, key encoding), stored as numpy columns: hashes, msgpack-encoded keys
(decoded to Python objects only when first iterated) and PAO states. It iterates
``(key, value)`` pairs (values finalized: ``avg`` is the mean, ``distinct`` the count), supports
``len``, ``key in snap``, ``snap[key]``/``get``, ``top(k)``, ``merge(other)`` and - for
invertible aggregators - ``subtract(other)``, the paper's invertible reduce
(``snap15.subtract(snap5)`` is the window [5, 15)). Operations never modify a snapshot: merge
and subtract return new snapshots (which may share immutable state objects with their inputs).

Wire format (``to_bytes``; all integers little-endian)::

    offset  size  field
    0       8     magic b"CBTSNAP\\0"
    8       2     format version (1)
    10      2     flags (0; reserved)
    12      8     total length of the blob in bytes, trailer included
    20      4     header length H
    24      H     header: msgpack map {"aggregator": name, "params": {...}, "hash": hash name,
                  "count": n, "columns": [[compressed, raw] lengths of the 4 columns]}
    24+H    ...   hashes column (zstd of delta-encoded, byte-transposed uint64)
            ...   sizes column (zstd of byte-transposed uint32 key-encoding lengths)
            ...   keys column (zstd of the n msgpack key encodings back to back)
            ...   values column (zstd of the aggregator's column encoding)
    total-4 4     CRC-32 of every preceding byte

``from_bytes`` checks length, magic, version and CRC before parsing anything (CRC-32 detects
every error burst of up to 32 bits, so every single-byte corruption is caught), then validates
the header and every column - including that every key re-encodes to an encoding of exactly
its stored size that hashes to its stored hash, and that no key is there twice (entries of
equal hash in strictly increasing encoding order) - raising :class:`~cbt.errors.SnapshotError`
naming the problem. For the common key column (ints, strs and bytes, canonically encoded; from
``WHOLE_COLUMN_CHECK_FROM`` keys) those checks run on whole columns (one msgpack call, header
sizes, one hashing pass); any other column, or one that fails them, is checked key by key,
which decides alike.
``to_bytes`` and ``from_bytes`` reuse zstandard compressors and decompressors from small
process-wide pools (``ZSTD_KEPT`` of each; a call takes one and gives it back, so no two
threads share one): the output is the same bytes a fresh compressor writes, without paying for
a new compression context on every call, and the contexts kept do not grow with the threads.
"""

from __future__ import annotations

import heapq
import struct
import sys
import zlib
from collections.abc import Iterator
from itertools import pairwise
from typing import Any

import msgpack
import numpy as np
import zstandard

from cbt.aggregators import (
    Aggregator,
    get_aggregator,
    object_array,
    shuffle_bytes,
    unshuffle_bytes,
)
from cbt.buffers import (
    EncodedKeys,
    Run,
    decode_hashes,
    deep_sizeof,
    encode_hashes,
    merge_two_runs,
)
from cbt.errors import SnapshotError
from cbt.hashing import (
    HashFunction,
    array_head,
    check_keys,
    decode_key_stream,
    encode_key,
    hash_encodings,
    hash_name,
    pack_keys,
    scalar_encoding_sizes,
    xxh3_64,
)

MAGIC = b"CBTSNAP\x00"
VERSION = 1
_FIXED = struct.Struct("<8sHHQI")
_TRAILER = struct.Struct("<I")
_MIN_SIZE = _FIXED.size + _TRAILER.size
_MISSING = object()
_MASK64 = (1 << 64) - 1
#: key columns of at least this many keys are checked whole-column in ``from_bytes`` (see the
#: module doc); shorter ones key by key, which costs them less (numpy's per-call overhead)
WHOLE_COLUMN_CHECK_FROM = 256
#: zstandard (de)compressors kept for reuse, at most this many of each: they are not
#: thread-safe, so a call takes one and puts it back; threads compressing at the same moment
#: take more. A fresh one per call allocated (and page-faulted in) its whole context every time;
#: one per thread would keep a context in each of hundreds of logical agents' threads.
ZSTD_KEPT = 4
_COMPRESSORS: list[tuple[int, zstandard.ZstdCompressor]] = []
_DECOMPRESSORS: list[zstandard.ZstdDecompressor] = []


def _take_compressor(level: int) -> zstandard.ZstdCompressor:
    """A kept compressor at ``level`` (list ``pop`` and ``append`` are atomic: no lock)."""
    try:
        kept_level, c = _COMPRESSORS.pop()
    except IndexError:
        return zstandard.ZstdCompressor(level=level)
    return c if kept_level == level else zstandard.ZstdCompressor(level=level)


def _give_compressor(level: int, c: zstandard.ZstdCompressor) -> None:
    if len(_COMPRESSORS) < ZSTD_KEPT:
        _COMPRESSORS.append((level, c))


def _take_decompressor() -> zstandard.ZstdDecompressor:
    try:
        return _DECOMPRESSORS.pop()
    except IndexError:
        return zstandard.ZstdDecompressor()


def _give_decompressor(d: zstandard.ZstdDecompressor) -> None:
    if len(_DECOMPRESSORS) < ZSTD_KEPT:
        _DECOMPRESSORS.append(d)


# Empty snapshots: every quiet epoch's pane is one, encoded by each agent and decoded at each
# hop up its tree (100 µs to decode, 50 to encode, four zstd frames). An encoding is a pure
# function of (aggregator and parameters, hash function, level), and a byte-equal copy of an
# encoding that once passed the full decode decodes the same, so both are kept (a dict's get
# and set are atomic; a full cache is emptied and refilled).
EMPTY_KEPT = 64
#: an empty snapshot's encoding is ~130 bytes; a larger body is not looked up (hashing a
#: many-megabyte body for the lookup would cost more than the cache saves)
EMPTY_MAX_BYTES = 1024
_EMPTY_BYTES: dict[tuple[str, bytes, str, int], bytes] = {}
#: (encoding, the hash_function asked for) -> what the full decode gave
_EMPTY_DECODED: dict[tuple[bytes, HashFunction | None], tuple[Aggregator, HashFunction]] = {}


def _keep(cache: dict, key: Any, value: Any) -> None:
    if len(cache) >= EMPTY_KEPT:
        cache.clear()
    cache[key] = value


def _object_payload(arr: np.ndarray, sample: int = 64) -> int:
    """Estimated bytes of the objects an object array references (sampled ``getsizeof``)."""
    n = len(arr)
    if not n:
        return 0
    step = max(1, n // sample)
    picked = arr[::step][:sample]
    return int(sum(map(deep_sizeof, picked)) * n / len(picked))


def _stored_keys_hold(
    encoded: EncodedKeys, keys: tuple, blob: bytes, hashes: np.ndarray, fn: HashFunction
) -> bool:
    """The checks of ``from_bytes``'s per-key path (each key valid, its encoding exactly its
    stored size, hashing to its stored hash) in a few whole-column steps, for the common key
    column: narrow rows of ints, strs and bytes, canonically encoded. True: they all hold.
    False: undecided (other key kinds, or a check failed) - the per-key path decides.

    Why this suffices: the keys re-encode, back to back, to exactly the key column's bytes
    (``pack_keys``), and msgpack encodings are prefix-free, so the column splits into the keys'
    encodings at one place only; every stored size is the size its row's header announces, so
    the stored sizes split it there too, key by key. The rows are then the keys' encodings
    (ints, strs, bytes: all valid keys) and hash as the keys do."""
    n = len(keys)
    if n < max(1, WHOLE_COLUMN_CHECK_FROM) or encoded.wide:
        return False
    if pack_keys(keys) != array_head(n) + blob:
        return False
    sizes = scalar_encoding_sizes(encoded.rows())
    if sizes is None or not np.array_equal(sizes, encoded.lengths):
        return False
    return np.array_equal(hash_encodings(encoded.encodings(), fn), hashes)


def _check_distinct(hashes: np.ndarray, encoded: EncodedKeys) -> None:
    """Entries with equal hashes (a 64-bit collision, or a key written twice) must be in
    strictly increasing key-encoding order: a key twice would be merged twice, and lookups
    assume one entry per key. Equal hashes are rare, so this costs one vectorised compare."""
    if len(hashes) < 2:
        return
    for i in (np.flatnonzero(hashes[1:] == hashes[:-1]) + 1).tolist():
        before, this = encoded.encoding(i - 1), encoded.encoding(i)
        if before == this:
            raise SnapshotError(f"snapshot holds one key twice (entries {i - 1} and {i})")
        if before > this:
            raise SnapshotError("snapshot entries with equal hashes are not in key order")


class Snapshot:
    """An immutable group-by-aggregate result ordered by key hash (see module docstring)."""

    __slots__ = ("_decoded", "_hash_fn", "agg", "encoded_keys", "hashes", "values_column")

    def __init__(
        self,
        agg: Aggregator,
        hashes: np.ndarray,
        keys: EncodedKeys,
        values: np.ndarray,
        hash_function: HashFunction = xxh3_64,
        decoded: np.ndarray | None = None,
    ) -> None:
        self.agg = agg
        self.hashes = hashes
        self.encoded_keys = keys
        self.values_column = values
        self._hash_fn = hash_function
        self._decoded = decoded
        for arr in (hashes, keys.data, keys.lengths, values):
            arr.flags.writeable = False

    @classmethod
    def empty(cls, agg: Aggregator | str, hash_function: HashFunction = xxh3_64) -> Snapshot:
        """An empty snapshot (e.g. the pane of an idle epoch); ``agg`` may be a name."""
        agg = get_aggregator(agg)
        return cls(
            agg,
            np.empty(0, np.uint64),
            EncodedKeys.from_encodings([]),
            agg.column((), 0),
            hash_function,
        )

    @classmethod
    def from_run(cls, agg: Aggregator, run: Run, hash_function: HashFunction) -> Snapshot:
        """A snapshot over a sorted, aggregated :class:`Run` whose keys are encoded (what
        :func:`sort_and_aggregate` and a tree's flush produce): its columns are taken as they
        are, not copied, and made read-only."""
        assert isinstance(run.keys, EncodedKeys)
        return cls(agg, run.hashes, run.keys, run.values, hash_function)

    @property
    def hash_name(self) -> str:
        """The name of the hash function the keys were hashed with (in the wire header)."""
        return hash_name(self._hash_fn)

    @property
    def keys_column(self) -> np.ndarray:
        """The keys as an object array (decoded on first use, in one msgpack call)."""
        if self._decoded is None:
            self._decoded = self.encoded_keys.decode()
            self._decoded.flags.writeable = False
        return self._decoded

    # ---- memory ---------------------------------------------------------------------------
    def memory_bytes(self) -> int:
        """Bytes this snapshot holds (an estimate for object columns): the numpy columns'
        buffers, plus, for object columns (wide keys, set/sketch states) and the decoded-key
        cache, ``sys.getsizeof`` of up to 64 sampled elements scaled to the column. Exact for
        plain numeric columns. Used by holders that bound memory by bytes (a master's results)."""
        size = sys.getsizeof(self)
        for arr in (self.hashes, self.encoded_keys.data, self.encoded_keys.lengths,
                    self.values_column, self._decoded):  # fmt: skip
            if arr is not None:
                size += arr.nbytes + (_object_payload(arr) if arr.dtype == object else 0)
        return size

    def lean(self) -> Snapshot:
        """The same snapshot without its decoded-key cache (it shares every column, so this
        costs nothing): a holder that keeps a snapshot for long hands out ``lean()`` copies so
        iterating them never grows what it holds."""
        return Snapshot(self.agg, self.hashes, self.encoded_keys, self.values_column, self._hash_fn)

    # ---- mapping-like access ------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.hashes)

    def __iter__(self) -> Iterator[tuple[Any, Any]]:
        return zip(
            self.keys_column.tolist(), self.agg.finalize_column(self.values_column), strict=True
        )

    def items(self) -> Iterator[tuple[Any, Any]]:
        return iter(self)

    def keys(self) -> list:
        return self.keys_column.tolist()

    def values(self) -> list:
        return self.agg.finalize_column(self.values_column)

    def to_dict(self) -> dict[Any, Any]:
        return dict(iter(self))

    def _index(self, key: Any) -> int:
        enc = encode_key(key)
        h = np.uint64(int(self._hash_fn(enc)) & _MASK64)
        lo = int(np.searchsorted(self.hashes, h, side="left"))
        hi = int(np.searchsorted(self.hashes, h, side="right"))
        for i in range(lo, hi):
            if self.encoded_keys.encoding(i) == enc:
                return i
        return -1

    def state(self, key: Any) -> Any:
        """The raw PAO state of ``key`` (read-only; KeyError if absent)."""
        i = self._index(key)
        if i < 0:
            raise KeyError(key)
        return self.values_column[i]

    def __getitem__(self, key: Any) -> Any:
        return self.agg.finalize(self.state(key))

    def get(self, key: Any, default: Any = None) -> Any:
        try:
            i = self._index(key)
        except TypeError:
            return default
        return default if i < 0 else self.agg.finalize(self.values_column[i])

    def __contains__(self, key: Any) -> bool:
        try:
            return self._index(key) >= 0
        except TypeError:
            return False

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Snapshot):
            return NotImplemented
        return (
            self.agg == other.agg
            and np.array_equal(self.hashes, other.hashes)
            and np.array_equal(self.encoded_keys.lengths, other.encoded_keys.lengths)
            and self.encoded_keys.to_blob() == other.encoded_keys.to_blob()
            and self.agg.encode_column(self.values_column)
            == other.agg.encode_column(other.values_column)
        )

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"<Snapshot {self.agg!r} with {len(self)} keys>"

    def top(self, k: int) -> list[tuple[Any, Any]]:
        """The ``k`` entries with the largest finalized values, largest first (ties: hash order)."""
        if k <= 0 or not len(self):
            return []
        vals = self.values_column
        if vals.dtype != object:
            n = len(vals)
            if k < n:
                part = np.argpartition(-vals, k - 1)[:k]
                order = part[np.lexsort((part, -vals[part]))]
            else:
                order = np.lexsort((np.arange(n), -vals))
            keys = self.encoded_keys[order].decode().tolist()
            return list(zip(keys, vals[order].tolist(), strict=True))
        return heapq.nlargest(k, iter(self), key=lambda kv: kv[1])

    # ---- algebra --------------------------------------------------------------------------
    def _run(self) -> Run:
        return Run(self.hashes, self.encoded_keys, self.values_column)

    def _check_compatible(self, other: Snapshot) -> None:
        if not isinstance(other, Snapshot):
            raise TypeError(f"expected a Snapshot, got {type(other).__name__}")
        if self.agg != other.agg:
            raise ValueError(f"cannot combine {self.agg!r} with {other.agg!r} snapshots")
        if hash_name(self._hash_fn) != hash_name(other._hash_fn):
            raise ValueError("cannot combine snapshots built with different hash functions")

    def merge(self, other: Snapshot) -> Snapshot:
        """A new snapshot aggregating both (for every key: ``merge(self[k], other[k])``).

        An empty snapshot is the identity whatever its aggregator (an epoch without data
        where a job's aggregate changed is empty in either form); two non-empty snapshots
        must share aggregator and hash function (``ValueError``)."""
        if not isinstance(other, Snapshot):
            raise TypeError(f"expected a Snapshot, got {type(other).__name__}")
        if not len(other):
            return self
        if not len(self):
            return other
        self._check_compatible(other)
        run = merge_two_runs(self._run(), other._run(), self.agg, owned=False)
        return Snapshot.from_run(self.agg, run, self._hash_fn)

    def subtract(self, other: Snapshot) -> Snapshot:
        """A new snapshot ``self ⊖ other`` (invertible aggregators only).

        Keys whose state becomes empty (``Aggregator.is_zero``: count 0, no summed values) are
        dropped, so subtracting a prefix leaves exactly the keys seen after it. Keys only in
        ``other`` come out negated.
        """
        self._check_compatible(other)
        agg = self.agg
        if not agg.invertible:
            raise TypeError(f"aggregator {agg.name!r} is not invertible; merge panes instead")
        if not len(other):
            return self
        negated = Run(other.hashes, other.encoded_keys, agg.negate_column(other.values_column))
        run = merge_two_runs(self._run(), negated, agg, owned=False)
        keep = agg.nonzero_mask(run.values)
        if not keep.all():
            run = Run(run.hashes[keep], run.keys[keep], run.values[keep])
        return Snapshot.from_run(agg, run, self._hash_fn)

    def split_by_hash(self, parts: int) -> list[Snapshot]:
        """Split into ``parts`` snapshots by equal ranges of the 64-bit key hash: part ``i``
        holds the keys with ``(hash * parts) >> 64 == i`` (how a job with ``m`` reducer trees
        assigns keys to trees). Slices share this snapshot's immutable columns."""
        if parts < 1:
            raise ValueError("parts must be at least 1")
        if parts == 1:
            return [self]
        bounds = [-(-(i << 64) // parts) for i in range(1, parts)]  # ceil(i * 2**64 / parts)
        cuts = np.searchsorted(self.hashes, np.array(bounds, dtype=np.uint64), side="left")
        edges = [0, *cuts.tolist(), len(self.hashes)]
        out = []
        for lo, hi in pairwise(edges):
            decoded = None if self._decoded is None else self._decoded[lo:hi]
            out.append(
                Snapshot(
                    self.agg,
                    self.hashes[lo:hi],
                    self.encoded_keys[lo:hi],
                    self.values_column[lo:hi],
                    self._hash_fn,
                    decoded,
                )
            )
        return out

    # ---- wire format ----------------------------------------------------------------------
    def to_bytes(self, level: int = 3) -> bytes:
        """Compact, compressed, versioned, checksummed encoding (layout in the module doc)."""
        if not len(self):
            name, params = self.agg.describe()
            key = (name, msgpack.packb(params, use_bin_type=True), hash_name(self._hash_fn), level)
            known = _EMPTY_BYTES.get(key)
            if known is None:
                known = self._encode(level)
                _keep(_EMPTY_BYTES, key, known)
            return known
        return self._encode(level)

    def _encode(self, level: int) -> bytes:
        raws = (
            encode_hashes(self.hashes),
            shuffle_bytes(self.encoded_keys.lengths.astype("<u4"), 4),
            self.encoded_keys.to_blob(),
            self.agg.encode_column(self.values_column),
        )
        c = _take_compressor(level)
        try:
            cols = [c.compress(r) for r in raws]
        finally:
            _give_compressor(level, c)
        name, params = self.agg.describe()
        header = msgpack.packb(
            {
                "aggregator": name,
                "params": params,
                "hash": hash_name(self._hash_fn),
                "count": len(self),
                "columns": [[len(cc), len(r)] for cc, r in zip(cols, raws, strict=True)],
            },
            use_bin_type=True,
        )
        total = _FIXED.size + len(header) + sum(map(len, cols)) + _TRAILER.size
        body = b"".join([_FIXED.pack(MAGIC, VERSION, 0, total, len(header)), header, *cols])
        return body + _TRAILER.pack(zlib.crc32(body))

    @classmethod
    def from_bytes(
        cls, data: bytes | bytearray | memoryview, hash_function: HashFunction | None = None
    ) -> Snapshot:
        """Decode ``to_bytes`` output; raises :class:`SnapshotError` on any defect."""
        data = bytes(data)
        size = len(data)
        small = size <= EMPTY_MAX_BYTES
        empty = _EMPTY_DECODED.get((data, hash_function)) if small else None
        if empty is not None:
            return cls.empty(*empty)
        if size < _MIN_SIZE:
            raise SnapshotError(
                f"truncated snapshot: {size} bytes, the fixed header alone needs {_MIN_SIZE}"
            )
        magic, version, flags, total, hlen = _FIXED.unpack_from(data)
        if magic != MAGIC:
            raise SnapshotError(f"bad magic {magic!r}: not a CBT snapshot")
        if version != VERSION:
            raise SnapshotError(f"unsupported snapshot version {version} (this reads {VERSION})")
        if size < total:
            raise SnapshotError(f"truncated snapshot: ends at byte {size}, header says {total}")
        if size > total:
            raise SnapshotError(f"{size - total} unexpected bytes after the snapshot's end")
        (crc,) = _TRAILER.unpack_from(data, size - _TRAILER.size)
        if zlib.crc32(memoryview(data)[: size - _TRAILER.size]) != crc:
            raise SnapshotError("snapshot checksum mismatch: the bytes are corrupt")
        if flags != 0:
            raise SnapshotError(f"unknown snapshot flags {flags:#x}")
        try:
            snap = cls._decode(data, hlen, hash_function)
        except SnapshotError:
            raise
        except Exception as e:  # any decoding failure past the checksum is still a bad snapshot
            raise SnapshotError(f"invalid snapshot contents: {e}") from e
        if small and not len(snap):
            _keep(_EMPTY_DECODED, (data, hash_function), (snap.agg, snap._hash_fn))
        return snap

    @classmethod
    def _decode(cls, data: bytes, hlen: int, hash_function: HashFunction | None) -> Snapshot:
        end = len(data) - _TRAILER.size
        start = _FIXED.size
        if start + hlen > end:
            raise SnapshotError(f"header length {hlen} runs past the end of the snapshot")
        header = msgpack.unpackb(data[start : start + hlen], raw=False, use_list=False)
        if not isinstance(header, dict):
            raise SnapshotError("snapshot header is not a map")
        name = header.get("aggregator")
        params = header.get("params")
        n = header.get("count")
        columns = header.get("columns")
        hname = header.get("hash")
        if not isinstance(name, str) or not isinstance(params, dict):
            raise SnapshotError("snapshot header lacks the aggregator name or params")
        if not isinstance(n, int) or n < 0:
            raise SnapshotError(f"bad entry count {n!r} in snapshot header")
        if not isinstance(hname, str):
            raise SnapshotError("snapshot header lacks the hash function name")
        if (
            not isinstance(columns, tuple)
            or len(columns) != 4
            or not all(
                isinstance(c, tuple)
                and len(c) == 2
                and all(isinstance(x, int) and x >= 0 for x in c)
                for c in columns
            )
        ):
            raise SnapshotError("snapshot header has malformed column lengths")
        try:
            agg = get_aggregator(name, params)
        except ValueError as e:
            raise SnapshotError(
                f"snapshot uses aggregator {name!r} that is not registered here "
                "(see cbt.register_aggregator)"
                if "unknown aggregator" in str(e)
                else f"cannot rebuild aggregator {name!r} with {params!r}: {e}"
            ) from e
        except TypeError as e:
            raise SnapshotError(f"cannot rebuild aggregator {name!r} with {params!r}: {e}") from e
        if hash_function is None:
            if hname != "xxh3_64":
                raise SnapshotError(
                    f"snapshot keys were hashed with {hname!r}; pass hash_function= to read it"
                )
            hash_function = xxh3_64
        pos = start + hlen
        if pos + sum(c[0] for c in columns) != end:
            raise SnapshotError("snapshot column lengths do not add up to its size")
        d = _take_decompressor()
        raws = []
        try:
            labels = ("hashes", "sizes", "keys", "values")
            for (clen, rlen), label in zip(columns, labels, strict=True):
                try:
                    raw = d.decompress(data[pos : pos + clen], max_output_size=rlen)
                except zstandard.ZstdError as e:
                    raise SnapshotError(f"{label} column does not decompress: {e}") from e
                if len(raw) != rlen:
                    raise SnapshotError(f"{label} column is {len(raw)} bytes, header says {rlen}")
                raws.append(raw)
                pos += clen
        finally:
            _give_decompressor(d)
        try:
            hashes = decode_hashes(raws[0], n)
            if len(raws[1]) != 4 * n:
                raise ValueError(f"sizes column has {len(raws[1])} bytes, expected {4 * n}")
            lengths = unshuffle_bytes(raws[1], n, "<u4", 4).astype(np.int64)
            encoded = EncodedKeys.from_blob(raws[2], lengths)
        except ValueError as e:
            raise SnapshotError(str(e)) from e
        if n > 1 and not bool(np.all(hashes[1:] >= hashes[:-1])):
            raise SnapshotError("snapshot hashes are not in order")
        _check_distinct(hashes, encoded)
        keys = decode_key_stream(raws[2], n)  # the key column's bytes as they came
        # Every key must re-encode to exactly its bytes and hash to its stored hash, so lookups
        # and merges can trust the columns even if the sender was not this code.
        if not _stored_keys_hold(encoded, keys, raws[2], hashes, hash_function):
            try:
                check_keys(keys)
            except TypeError as e:
                raise SnapshotError(f"snapshot holds an invalid key: {e}") from e
            encs = list(map(msgpack.Packer(use_bin_type=True).pack, keys))
            if list(map(len, encs)) != lengths.tolist():
                raise SnapshotError("key sizes do not match the keys' encodings")
            if not np.array_equal(hash_encodings(encs, hash_function), hashes):
                raise SnapshotError("stored hashes do not match the keys")
        try:
            values = agg.decode_column(raws[3], n)
        except (ValueError, TypeError) as e:
            raise SnapshotError(f"values column is invalid: {e}") from e
        return cls(agg, hashes, encoded, values, hash_function, decoded=object_array(keys, n))
