"""Buffer columns: uncompressed hash-ordered runs and their compressed form.

A :class:`Run` is three parallel columns - ``hashes`` (sorted ``uint64``), ``keys`` and
``values`` (PAO states; ``int64`` for ``count``, an object array otherwise) - holding at most
one entry per distinct key; entries with equal hashes but different keys sit side by side,
ordered by key encoding. Inside the tree, keys stay msgpack-encoded in an
:class:`EncodedKeys` column (fixed-width numpy bytes plus a length column), so sorting,
partitioning and duplicate detection are vectorized and no Python object is created per key;
snapshots hold decoded keys in an object array. :func:`sort_and_aggregate` sorts by hash and
merges duplicates, comparing full keys on every hash tie, so collisions never merge two keys;
:func:`merge_two_runs` gives exactly its result for two runs (a snapshot merge) by a linear
merge of their sorted hash columns.

A :class:`CompressedRun` stores a run as four separately zstd-compressed columns (the CBT
design: like data compresses far better than interleaved records): hashes (delta-encoded,
byte-transposed), sizes (key encoding lengths), keys (the concatenated msgpack encodings) and
values (the aggregator's column codec). Narrow keys are stored as their zero-padded
fixed-width rows (zstd squeezes the padding; reading back is a zero-copy view). A compressed
run lives in memory or in a spill file.
"""

from __future__ import annotations

import operator
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import zstandard

from cbt.aggregators import Aggregator, object_array, shuffle_bytes, unshuffle_bytes
from cbt.hashing import decode_key_stream

if TYPE_CHECKING:
    from cbt.spill import SpillStore

_EMPTY_U64 = np.empty(0, dtype=np.uint64)
#: encodings longer than this are kept as bytes objects rather than padded fixed-width rows
WIDE_KEY = 256


class EncodedKeys:
    """A column of msgpack-encoded keys.

    Narrow mode: ``data`` is a fixed-width ``S<w>`` array (rows zero-padded) and ``lengths``
    gives each encoding's true length (numpy drops trailing NULs, so equality compares both).
    Wide mode (some encoding longer than ``WIDE_KEY``): ``data`` is an object array of bytes.
    """

    __slots__ = ("data", "lengths")

    def __init__(self, data: np.ndarray, lengths: np.ndarray) -> None:
        self.data = data
        self.lengths = lengths

    @classmethod
    def from_encodings(cls, encs: list[bytes]) -> EncodedKeys:
        n = len(encs)
        lengths = np.fromiter(map(len, encs), dtype=np.int64, count=n)
        width = int(lengths.max()) if n else 1
        if width > WIDE_KEY:
            return cls(object_array(encs, n), lengths)
        return cls(np.array(encs, dtype=f"S{max(width, 1)}"), lengths)

    @property
    def wide(self) -> bool:
        return self.data.dtype == object

    def __len__(self) -> int:
        return len(self.lengths)

    def __getitem__(self, idx: Any) -> EncodedKeys:
        return EncodedKeys(self.data[idx], self.lengths[idx])

    def equal(self, other: EncodedKeys) -> np.ndarray:
        if self.wide or other.wide:
            a, b = self.as_wide().data, other.as_wide().data
            return np.fromiter(map(operator.eq, a, b), dtype=bool, count=len(a))
        return (self.data == other.data) & (self.lengths == other.lengths)

    def encoding(self, i: int) -> bytes:
        raw = self.data[i]
        return bytes(raw) if self.wide else bytes(raw).ljust(int(self.lengths[i]), b"\0")

    def rows(self) -> np.ndarray:
        """Narrow mode: the fixed-width rows as a 2-D ``uint8`` array (a view when possible)."""
        n = len(self)
        return np.ascontiguousarray(self.data).view(np.uint8).reshape(n, self.data.itemsize)

    def encodings(self) -> list[bytes]:
        """Every encoding as ``bytes``, in one C-level pass (``tolist``); the few rows whose
        encoding ends in NUL bytes, which numpy strips, are restored from their length."""
        out = self.data.tolist()
        n = len(self)
        if self.wide or not n:
            return out
        ends_nul = self.rows()[np.arange(n), self.lengths - 1] == 0
        for i in np.flatnonzero(ends_nul).tolist():
            out[i] = self.encoding(i)
        return out

    def as_wide(self) -> EncodedKeys:
        if self.wide:
            return self
        n = len(self)
        return EncodedKeys(object_array(map(self.encoding, range(n)), n), self.lengths)

    @staticmethod
    def concat(parts: list[EncodedKeys]) -> EncodedKeys:
        if any(p.wide for p in parts):
            parts = [p.as_wide() for p in parts]
        return EncodedKeys(
            np.concatenate([p.data for p in parts]), np.concatenate([p.lengths for p in parts])
        )

    def to_blob(self) -> bytes:
        """The encodings back to back: a msgpack stream of the keys."""
        if self.wide:
            return b"".join(self.data)
        n = len(self)
        if n == 0:
            return b""
        width = self.data.dtype.itemsize
        rows = self.data.view(np.uint8).reshape(n, width)
        return rows[np.arange(width) < self.lengths[:, None]].tobytes()

    @classmethod
    def from_blob(cls, blob: bytes, lengths: np.ndarray) -> EncodedKeys:
        n = len(lengths)
        if int(lengths.sum()) != len(blob) or (n and int(lengths.min()) < 1):
            raise ValueError("key sizes do not match the key column")
        width = int(lengths.max()) if n else 1
        if width > WIDE_KEY:
            ends = np.cumsum(lengths).tolist()
            starts = [0, *ends[:-1]]
            return cls(
                object_array((blob[a:b] for a, b in zip(starts, ends, strict=True)), n), lengths
            )
        rows = np.zeros((n, width), dtype=np.uint8)
        rows[np.arange(width) < lengths[:, None]] = np.frombuffer(blob, dtype=np.uint8)
        return cls(rows.view(f"S{width}").reshape(n), lengths)

    def decode(self) -> np.ndarray:
        """The keys as Python objects (one msgpack array decode: a single C call)."""
        n = len(self)
        return object_array(decode_key_stream(self.to_blob(), n), n)

    def nbytes(self) -> int:
        return self.data.nbytes + self.lengths.nbytes


@dataclass
class Run:
    """An uncompressed hash-ordered, aggregated run of entries."""

    hashes: np.ndarray
    keys: EncodedKeys
    values: np.ndarray

    def __len__(self) -> int:
        return len(self.hashes)

    def slice(self, lo: int, hi: int) -> Run:
        return Run(self.hashes[lo:hi], self.keys[lo:hi], self.values[lo:hi])


def empty_run(agg: Aggregator) -> Run:
    return Run(_EMPTY_U64, EncodedKeys.from_encodings([]), agg.column((), 0))


def encode_hashes(hashes: np.ndarray) -> bytes:
    """Delta-encode sorted hashes (wrap-around subtraction is exact) and byte-transpose."""
    if len(hashes) == 0:
        return b""
    deltas = np.empty_like(hashes)
    deltas[0] = hashes[0]
    np.subtract(hashes[1:], hashes[:-1], out=deltas[1:])
    return shuffle_bytes(deltas.astype("<u8", copy=False))


def decode_hashes(blob: bytes, n: int) -> np.ndarray:
    if len(blob) != 8 * n:
        raise ValueError(f"hash column has {len(blob)} bytes, expected {8 * n}")
    if n == 0:
        return _EMPTY_U64
    deltas = unshuffle_bytes(blob, n, "<u8").astype(np.uint64)
    return np.cumsum(deltas, dtype=np.uint64)


def sort_and_aggregate(
    hashes: np.ndarray, keys: EncodedKeys, values: np.ndarray, agg: Aggregator, owned: bool
) -> Run:
    """Stable-sort entries by hash and merge entries with equal keys.

    ``owned`` tells whether mutable states may be merged in place (see
    ``Aggregator.merge_groups``). Among entries with equal keys, earlier positions come first,
    so merges see inputs in arrival order.
    """
    n = len(hashes)
    if n == 0:
        return Run(hashes, keys, values)
    if n > 1 and not bool(np.all(hashes[1:] >= hashes[:-1])):
        order = np.argsort(hashes, kind="stable")
        hashes, keys, values = hashes[order], keys[order], values[order]
    same = hashes[1:] == hashes[:-1]
    if not same.any():
        return Run(hashes, keys, values)
    idx = np.flatnonzero(same)
    key_equal = keys[idx].equal(keys[idx + 1])
    if not key_equal.all():
        perm = _collision_order(hashes, keys, idx[~key_equal])
        keys, values = keys[perm], values[perm]
        same[idx[~keys[idx].equal(keys[idx + 1])]] = False
    starts = np.flatnonzero(np.concatenate(([True], ~same)))
    return Run(hashes[starts], keys[starts], agg.merge_groups(values, starts, owned))


def _collision_order(
    hashes: np.ndarray, keys: EncodedKeys, tie_positions: np.ndarray
) -> np.ndarray:
    """A permutation that stable-sorts every equal-hash group holding different keys by key
    encoding, so equal keys become adjacent and the order never depends on arrival order."""
    perm = np.arange(len(hashes))
    enc = keys.encoding
    done: set[int] = set()
    for pos in tie_positions.tolist():
        h = hashes[pos]
        lo = int(np.searchsorted(hashes, h, side="left"))
        if lo in done:
            continue
        done.add(lo)
        hi = int(np.searchsorted(hashes, h, side="right"))
        perm[lo:hi] = sorted(range(lo, hi), key=enc)
    return perm


def merge_two_runs(a: Run, b: Run, agg: Aggregator, owned: bool) -> Run:
    """Exactly ``sort_and_aggregate`` of ``a``'s entries followed by ``b``'s (the same columns,
    dtypes and states; a shared key's merge sees ``a``'s state first), for two runs each in
    hash order, without its work on every tie.

    The stable sort of the concatenated hashes is a linear merge of the two sorted runs
    (timsort finds them). When every tie it leaves pairs one entry of ``a`` with one of ``b``
    holding the same key (no hash shared inside a run, none shared by two keys), the pairs are
    merged and the rows gathered once - or, when every entry of ``b`` found its key in ``a``,
    ``a``'s rows are kept as they are. Anything else (collisions, mismatched value dtypes, an
    empty run) is the ``sort_and_aggregate`` call."""
    ha, hb = a.hashes, b.hashes
    n, m = len(ha), len(hb)
    if not (n and m) or a.values.dtype != b.values.dtype:
        return _concat_and_aggregate(a, b, agg, owned)
    hashes = np.concatenate([ha, hb])
    order = np.argsort(hashes, kind="stable")
    hashes = hashes[order]
    same = hashes[1:] == hashes[:-1]
    k = int(np.count_nonzero(same))
    if not k:
        return Run(
            hashes,
            EncodedKeys.concat([a.keys, b.keys])[order],
            np.concatenate([a.values, b.values])[order],
        )
    ties = np.flatnonzero(same)
    ia, jb = order[ties], order[ties + 1] - n  # the stable sort puts a's entry first
    if not (bool((ia < n).all()) and bool((jb >= 0).all())):
        return _concat_and_aggregate(a, b, agg, owned)  # a hash tie inside a run
    # when all of a run's entries are in pairs and it is in order, they pair in place
    a_sorted = k in (n, m) and bool(np.all(ha[1:] > ha[:-1]))
    a_all = k == n and a_sorted
    b_all = k == m and bool(np.all(hb[1:] > hb[:-1]))
    ia_: Any = slice(None) if a_all else ia
    jb_: Any = slice(None) if b_all else jb
    if not _all_equal(a.keys[ia_], b.keys[jb_]):
        return _concat_and_aggregate(a, b, agg, owned)  # a hash shared by two keys
    # the same two-entry groups sort_and_aggregate hands the aggregator
    pairs = np.empty(2 * k, dtype=a.values.dtype)
    pairs[0::2] = a.values[ia_]
    pairs[1::2] = b.values[jb_]
    merged = agg.merge_groups(pairs, np.arange(0, 2 * k, 2), owned)
    if b_all and a_sorted:  # nothing of b's is new: a's rows, in a's order
        keys = _common_form(a.keys, b.keys)
        values = a.values.astype(np.result_type(a.values, merged))  # a copy
        values[ia_] = merged
        return Run(
            ha.copy(),
            EncodedKeys(
                keys.data if keys is not a.keys else keys.data.copy(),
                keys.lengths.astype(np.result_type(keys.lengths, b.keys.lengths)),
            ),
            values,
        )
    starts = np.flatnonzero(np.concatenate(([True], ~same)))
    take = order[starts]
    values = np.concatenate([a.values, b.values])[take]
    values = values.astype(np.result_type(values, merged), copy=False)
    values[ties - np.arange(k)] = merged  # each pair's place once the pairs are merged
    return Run(hashes[starts], EncodedKeys.concat([a.keys, b.keys])[take], values)


def _all_equal(a: EncodedKeys, b: EncodedKeys) -> bool:
    """Whether every key of ``a`` equals the key at the same place in ``b``: fixed-width rows
    of one width are NUL-padded alike, so their bytes compare in one ``memcmp``."""
    if not (a.wide or b.wide) and a.data.dtype == b.data.dtype:
        return a.data.tobytes() == b.data.tobytes() and bool((a.lengths == b.lengths).all())
    return bool(a.equal(b).all())


def _concat_and_aggregate(a: Run, b: Run, agg: Aggregator, owned: bool) -> Run:
    return sort_and_aggregate(
        np.concatenate([a.hashes, b.hashes]),
        EncodedKeys.concat([a.keys, b.keys]),
        np.concatenate([a.values, b.values]),
        agg,
        owned,
    )


def _common_form(keys: EncodedKeys, other: EncodedKeys) -> EncodedKeys:
    """``keys`` in the form ``EncodedKeys.concat([keys, other])`` gives its rows: wide if either
    is, else the wider fixed width."""
    if keys.wide or other.wide:
        return keys.as_wide()
    if other.data.dtype.itemsize > keys.data.dtype.itemsize:
        return EncodedKeys(keys.data.astype(other.data.dtype), keys.lengths)
    return keys


def merge_runs(runs: list[Run], agg: Aggregator, owned: bool) -> Run:
    """One aggregated run from several (earlier runs' states are merged first)."""
    if not runs:
        return empty_run(agg)
    if len(runs) == 1:
        return runs[0]
    return sort_and_aggregate(
        np.concatenate([r.hashes for r in runs]),
        EncodedKeys.concat([r.keys for r in runs]),
        np.concatenate([r.values for r in runs]),
        agg,
        owned,
    )


class Codec:
    """Per-tree zstandard compressor/decompressor pair plus the aggregator's value codec."""

    def __init__(self, agg: Aggregator, level: int) -> None:
        self.agg = agg
        self.level = level
        self._c = zstandard.ZstdCompressor(level=level)
        self._d = zstandard.ZstdDecompressor()

    def _compress_tight(self, raw: bytes) -> bytes:
        # python-zstandard returns a bytes object whose allocation is the worst-case bound
        # (about the input size) with only the length shrunk; copying releases the slack,
        # which is most of the memory the compression is meant to save.
        return bytes(memoryview(self._c.compress(raw)))

    def compress(self, run: Run) -> CompressedRun:
        """Compress a run. Narrow keys are stored as their zero-padded fixed-width rows: about
        2 bytes per key bigger once compressed than packed back to back, but there is no
        gather on the way in and the way out is a zero-copy view, which made inserts ~15 %
        faster on the benchmark. Wide keys are stored packed."""
        keys = run.keys
        width = 0
        if not keys.wide and len(keys):
            width = keys.data.dtype.itemsize
            kraw = keys.data.tobytes()
        else:
            kraw = keys.to_blob()
        raws = (
            encode_hashes(run.hashes),
            shuffle_bytes(keys.lengths.astype("<u4"), 4),
            kraw,
            self.agg.encode_column(run.values),
        )
        return CompressedRun(
            len(run), [self._compress_tight(r) for r in raws], sum(map(len, raws)), width
        )

    def decompress(self, cr: CompressedRun, store: SpillStore | None) -> Run:
        hcol, scol, kcol, vcol = (self._d.decompress(c) for c in cr.columns(store))
        n = cr.n
        if len(scol) != 4 * n:
            raise ValueError(f"size column has {len(scol)} bytes, expected {4 * n}")
        lengths = unshuffle_bytes(scol, n, "<u4", 4).astype(np.int64)
        if cr.width:
            if len(kcol) != n * cr.width:
                raise ValueError(
                    f"padded key column has {len(kcol)} bytes, expected {n * cr.width}"
                )
            keys = EncodedKeys(np.frombuffer(kcol, dtype=f"S{cr.width}"), lengths)
        else:
            keys = EncodedKeys.from_blob(kcol, lengths)
        return Run(decode_hashes(hcol, n), keys, self.agg.decode_column(vcol, n))


class CompressedRun:
    """A run's four zstd-compressed columns, resident (``cols``) or spilled (``path``)."""

    __slots__ = ("cols", "n", "path", "raw_bytes", "width")

    def __init__(self, n: int, cols: list[bytes], raw_bytes: int, width: int) -> None:
        self.n = n
        self.width = width  # 0: keys packed back to back; else fixed-width rows of this size
        self.cols: list[bytes] | None = cols
        self.raw_bytes = raw_bytes
        self.path: str | None = None

    @property
    def resident(self) -> bool:
        return self.cols is not None

    @property
    def compressed_bytes(self) -> int:
        return 0 if self.cols is None else sum(map(len, self.cols))

    def columns(self, store: SpillStore | None) -> list[bytes]:
        if self.cols is not None:
            return self.cols
        if store is None or self.path is None:
            raise ValueError("compressed run is neither resident nor spilled")
        return store.read(self.path)

    def memory_bytes(self) -> int:
        size = sys.getsizeof(self)
        if self.cols is not None:
            size += sys.getsizeof(self.cols) + sum(map(sys.getsizeof, self.cols))
        if self.path is not None:
            size += sys.getsizeof(self.path)
        return size


_SMALL_INTS = range(-5, 257)


def deep_sizeof(obj: Any) -> int:
    """``sys.getsizeof`` of an object and its contents (tuples, sets, lists), except CPython's
    cached small ints, which cost nothing extra."""
    t = type(obj)
    if t is int and obj in _SMALL_INTS:
        return 0
    size = sys.getsizeof(obj)
    if t is tuple or t is list or t is set or t is frozenset:
        size += sum(map(deep_sizeof, obj))
    return size
