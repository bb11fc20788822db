"""Buffer columns: uncompressed hash-ordered runs and their compressed form.

A :class:`Run` is three parallel columns - ``hashes`` (sorted ``uint64``), ``keys`` (object
array of keys) and ``values`` (array of PAO states, ``int64`` for ``count``) - holding at most
one entry per distinct key (entries with equal hashes but different keys sit side by side,
ordered by key encoding). :func:`merge_runs` sorts by hash and aggregates duplicates, comparing
full keys on every hash tie, so hash collisions never merge different keys.

A :class:`CompressedRun` stores the same three columns, each compressed separately with
zstandard (the CBT design: columns of similar data compress far better than interleaved
records): hashes are delta-encoded and byte-transposed, keys are one msgpack array (msgpack is
self-delimiting, so it also plays the role of the paper's "size" column), values use the
aggregator's column codec. A compressed run may live in memory or in a spill file.
"""

from __future__ import annotations

import operator
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import msgpack
import numpy as np
import zstandard

from cbt.aggregators import Aggregator, object_array, shuffle_bytes, unshuffle_bytes
from cbt.hashing import decode_keys

if TYPE_CHECKING:
    from cbt.spill import SpillStore

_EMPTY_U64 = np.empty(0, dtype=np.uint64)


@dataclass
class Run:
    """An uncompressed hash-ordered, aggregated run of entries."""

    hashes: np.ndarray
    keys: np.ndarray
    values: np.ndarray

    def __len__(self) -> int:
        return len(self.hashes)

    def slice(self, lo: int, hi: int) -> Run:
        return Run(self.hashes[lo:hi], self.keys[lo:hi], self.values[lo:hi])


def empty_run(agg: Aggregator) -> Run:
    return Run(_EMPTY_U64, object_array((), 0), agg.column((), 0))


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
    hashes: np.ndarray, keys: np.ndarray, values: np.ndarray, agg: Aggregator, owned: bool
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
    key_equal = _elementwise_equal(keys[idx], keys[idx + 1])
    if not key_equal.all():
        keys, values = _order_collisions(hashes, keys, values, idx[~key_equal])
        same = hashes[1:] == hashes[:-1]
        idx = np.flatnonzero(same)
        same[idx[~_elementwise_equal(keys[idx], keys[idx + 1])]] = False
    starts = np.flatnonzero(np.concatenate(([True], ~same)))
    return Run(hashes[starts], keys[starts], agg.merge_groups(values, starts, owned))


def _elementwise_equal(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    eq = a == b
    if isinstance(eq, np.ndarray) and eq.dtype == bool:
        return eq
    return np.fromiter(map(operator.eq, a, b), dtype=bool, count=len(a))


def _order_collisions(
    hashes: np.ndarray, keys: np.ndarray, values: np.ndarray, tie_positions: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Within every equal-hash group that holds different keys, stable-sort by key encoding
    so equal keys become adjacent and the order is the same whatever the arrival order."""
    keys = keys.copy()
    values = values.copy()
    done: set[int] = set()
    pack = msgpack.Packer(use_bin_type=True).pack
    for pos in tie_positions.tolist():
        h = hashes[pos]
        lo = int(np.searchsorted(hashes, h, side="left"))
        if lo in done:
            continue
        done.add(lo)
        hi = int(np.searchsorted(hashes, h, side="right"))
        order = sorted(range(lo, hi), key=lambda i: pack(keys[i]))
        keys[lo:hi] = object_array((keys[i] for i in order), hi - lo)
        values[lo:hi] = values[order]
    return keys, values


def concat_runs(runs: list[Run], agg: Aggregator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    if not runs:
        r = empty_run(agg)
        return r.hashes, r.keys, r.values
    if len(runs) == 1:
        r = runs[0]
        return r.hashes, r.keys, r.values
    return (
        np.concatenate([r.hashes for r in runs]),
        np.concatenate([r.keys for r in runs]),
        np.concatenate([r.values for r in runs]),
    )


def merge_runs(runs: list[Run], agg: Aggregator, owned: bool) -> Run:
    """One aggregated run from several (earlier runs' states are merged first)."""
    if len(runs) == 1:
        return runs[0]
    h, k, v = concat_runs(runs, agg)
    return sort_and_aggregate(h, k, v, agg, owned)


class Codec:
    """Per-tree zstandard compressor/decompressor pair plus the aggregator's value codec."""

    def __init__(self, agg: Aggregator, level: int) -> None:
        self.agg = agg
        self.level = level
        self._c = zstandard.ZstdCompressor(level=level)
        self._d = zstandard.ZstdDecompressor()

    def compress(self, run: Run) -> CompressedRun:
        n = len(run)
        h_raw = encode_hashes(run.hashes)
        k_raw = msgpack.packb(run.keys.tolist(), use_bin_type=True)
        v_raw = self.agg.encode_column(run.values)
        c = self._compress_tight
        return CompressedRun(
            n, c(h_raw), c(k_raw), c(v_raw), len(h_raw) + len(k_raw) + len(v_raw)
        )

    def _compress_tight(self, raw: bytes) -> bytes:
        # python-zstandard returns a bytes object whose allocation is the worst-case bound
        # (about the input size) with only the length shrunk; copying releases the slack,
        # which is most of the memory the compression is meant to save.
        return bytes(memoryview(self._c.compress(raw)))

    def decompress(self, cr: CompressedRun, store: SpillStore | None) -> Run:
        hcol, kcol, vcol = cr.columns(store)
        d = self._d.decompress
        n = cr.n
        hashes = decode_hashes(d(hcol), n)
        keys = decode_keys(d(kcol))
        if len(keys) != n:
            raise ValueError(f"key column holds {len(keys)} keys, expected {n}")
        values = self.agg.decode_column(d(vcol), n)
        return Run(hashes, object_array(keys, n), values)


class CompressedRun:
    """A run's three zstd-compressed columns, resident or spilled to a file."""

    __slots__ = ("hcol", "kcol", "n", "path", "raw_bytes", "vcol")

    def __init__(self, n: int, hcol: bytes, kcol: bytes, vcol: bytes, raw_bytes: int) -> None:
        self.n = n
        self.hcol: bytes | None = hcol
        self.kcol: bytes | None = kcol
        self.vcol: bytes | None = vcol
        self.raw_bytes = raw_bytes
        self.path: str | None = None

    @property
    def resident(self) -> bool:
        return self.hcol is not None

    @property
    def compressed_bytes(self) -> int:
        if self.hcol is None:
            return 0
        return len(self.hcol) + len(self.kcol) + len(self.vcol)  # type: ignore[arg-type]

    def columns(self, store: SpillStore | None) -> tuple[bytes, bytes, bytes]:
        if self.hcol is not None:
            return self.hcol, self.kcol, self.vcol  # type: ignore[return-value]
        if store is None or self.path is None:
            raise ValueError("compressed run is neither resident nor spilled")
        return store.read(self.path)

    def memory_bytes(self) -> int:
        size = sys.getsizeof(self)
        for col in (self.hcol, self.kcol, self.vcol):
            if col is not None:
                size += sys.getsizeof(col)
        if self.path is not None:
            size += sys.getsizeof(self.path)
        return size


def run_memory_bytes(run: Run, agg: Aggregator) -> int:
    """Approximate footprint of an uncompressed run (arrays plus the objects they point at)."""
    size = run.hashes.nbytes + run.keys.nbytes + run.values.nbytes + 3 * 112
    size += sum(map(deep_sizeof, run.keys))
    if run.values.dtype == object:
        size += sum(map(deep_sizeof, run.values))
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
