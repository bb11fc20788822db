"""The compressed buffer tree: insert, flush, empty.

Contract (see docs/cbt.md): ``insert``/``insert_many`` fold ``(key, value)`` pairs into
per-key PAOs; ``flush`` returns a :class:`~cbt.snapshot.Snapshot` of everything inserted since
the last ``empty`` without destroying the tree (it can be called repeatedly, e.g. for sliding
windows); ``empty`` drops everything. Memory is bounded by the buffers' thresholds, not by the
number of keys: at most ``root_capacity`` (+ one ``insert_many`` chunk) uncompressed entries,
everything else zstd-compressed (or spilled to disk under a memory budget).

Structure. An uncompressed root dict pre-aggregates inserts at C speed. When it reaches
``root_capacity`` entries it is spilled (for ``count``, minus its hottest keys, which stay):
keys are hashed (64-bit xxh3 of the msgpack encoding), sorted by hash and partitioned into the
buffers of the top node's children in an (a,b)-tree (b = ``fanout``, a = fanout // 2) over hash
ranges - the root dict plays the top node's buffer. Any other internal node whose buffer
passes ``buffer_entries`` is flushed: its runs are decompressed, merged (sort by hash,
aggregate equal keys, comparing full keys on hash ties) and partitioned into its children's
buffers. A leaf compacts its runs once it has buffered ``leaf_capacity // 2`` new
entries and splits when it holds more than ``leaf_capacity`` distinct keys; an internal node
with more than ``fanout`` children splits too, growing the tree at the top like a B-tree.
"""

from __future__ import annotations

import itertools
import math
import sys
from collections import _count_elements  # type: ignore[attr-defined]
from collections.abc import Iterable, Sequence
from typing import Any

import msgpack
import numpy as np
from xxhash import xxh3_64_intdigest

from cbt.aggregators import Aggregator, Avg, Count, Sum, get_aggregator
from cbt.buffers import (
    Codec,
    CompressedRun,
    EncodedKeys,
    Run,
    deep_sizeof,
    merge_runs,
    sort_and_aggregate,
)
from cbt.hashing import HashFunction, check_key, check_keys, xxh3_64
from cbt.snapshot import Snapshot
from cbt.spill import SpillStore

_MISSING = object()
_CHUNK = 16384
_MASK64 = (1 << 64) - 1


class _Node:
    """A tree node: a buffer of compressed runs plus, for internal nodes, children and pivots.

    Child ``i`` owns hashes in ``[pivots[i-1], pivots[i])``.
    """

    __slots__ = ("buffered", "children", "compacted", "pivots", "runs")

    def __init__(self, children: list[_Node] | None = None, pivots: list[int] | None = None):
        self.runs: list[CompressedRun] = []
        self.buffered = 0  # entries in ``runs`` (duplicates across runs included)
        self.compacted = 0  # leaf only: entries in its compacted (first) run
        self.children = children
        self.pivots = pivots

    @property
    def is_leaf(self) -> bool:
        return self.children is None


Split = list[tuple[int, _Node]]


class CompressedBufferTree:
    """Group-by-aggregate store over compressed, hash-partitioned buffers.

    Parameters: ``aggregator`` (a name from ``cbt.aggregator_names()`` or an
    :class:`~cbt.aggregators.Aggregator`), ``aggregator_params`` (constructor arguments for a
    named aggregator, e.g. ``{"k": 5}`` for topk), ``hash_function`` (bytes -> 64-bit int;
    inject a tiny one to force collisions in tests), ``fanout``, ``root_capacity``,
    ``buffer_entries``, ``leaf_capacity`` (thresholds in entries), ``compression_level``
    (zstd), ``memory_budget_bytes`` and ``spill_dir`` (compressed runs beyond the budget go to
    files under ``spill_dir``, a temp dir by default).
    """

    def __init__(
        self,
        aggregator: str | Aggregator = "count",
        *,
        aggregator_params: dict[str, Any] | None = None,
        hash_function: HashFunction | None = None,
        fanout: int = 8,
        root_capacity: int = 65536,
        buffer_entries: int = 262144,
        leaf_capacity: int = 131072,
        compression_level: int = 1,
        memory_budget_bytes: int | None = None,
        spill_dir: str | None = None,
    ) -> None:
        if fanout < 4:
            raise ValueError("fanout must be at least 4")
        for name, v in (
            ("root_capacity", root_capacity),
            ("buffer_entries", buffer_entries),
            ("leaf_capacity", leaf_capacity),
        ):
            if not isinstance(v, int) or v < 2:
                raise ValueError(f"{name} must be an int >= 2, got {v!r}")
        if memory_budget_bytes is not None and memory_budget_bytes < 0:
            raise ValueError("memory_budget_bytes must be >= 0")
        self.agg = get_aggregator(aggregator, aggregator_params)
        self.hash_function = hash_function or xxh3_64
        self.fanout = fanout
        self.root_capacity = root_capacity
        self.buffer_entries = buffer_entries
        self.leaf_capacity = leaf_capacity
        self.memory_budget_bytes = memory_budget_bytes
        self._spill_dir = spill_dir
        self._store: SpillStore | None = None
        self._codec = Codec(self.agg, compression_level)
        self._root: dict[Any, Any] = {}
        self._top = _Node()
        # A small initial buffer: the default 256 KiB would dominate a small tree's footprint
        # (keys are packed one at a time; the buffer grows if a key needs it).
        self._pack = msgpack.Packer(use_bin_type=True, buf_size=256).pack
        self._collect: list[Run] | None = None
        self._chunk = max(1, min(_CHUNK, root_capacity))
        self._counts = dict.fromkeys(
            (
                "inserts",
                "flushes",
                "empties",
                "root_spills",
                "node_flushes",
                "leaf_compactions",
                "leaf_splits",
                "node_splits",
                "runs_spilled",
            ),
            0,
        )

    # ---- inserting ------------------------------------------------------------------------
    def insert(self, key: Any, value: Any = 1) -> None:
        """Fold ``value`` into ``key``'s PAO."""
        root = self._root
        state = root.get(key, _MISSING)
        if state is _MISSING:
            check_key(key)
            root[key] = self.agg.lift(value)
        else:
            root[key] = self.agg.add(state, value)
        self._counts["inserts"] += 1
        if len(root) >= self.root_capacity:
            self._spill_root()

    def insert_many(
        self,
        keys: Sequence[Any] | np.ndarray | Iterable[Any],
        values: Sequence[Any] | np.ndarray | None = None,
    ) -> None:
        """Insert many pairs (``values`` None means the default value 1 for each key).

        Equivalent to ``insert`` in a loop, only faster: it works in chunks, so the root never
        exceeds its capacity by more than one chunk. On an invalid key or value it raises
        ``TypeError``; the pairs before the offending one are inserted, as with the loop.
        """
        if not isinstance(keys, list | tuple | np.ndarray):
            keys = list(keys)
        n = len(keys)
        if values is not None:
            if not isinstance(values, list | tuple | np.ndarray):
                values = list(values)
            if len(values) != n:
                raise ValueError(f"{n} keys but {len(values)} values")
        step = self._chunk
        for lo in range(0, n, step):
            ck = keys[lo : lo + step]
            if isinstance(ck, np.ndarray):
                ck = ck.tolist()
            cv = None
            if values is not None:
                cv = values[lo : lo + step]
                if isinstance(cv, np.ndarray):
                    cv = cv.tolist()
            self._insert_chunk(ck, cv)
            if len(self._root) >= self.root_capacity:
                self._spill_root()

    def merge_states(self, keys: Sequence[Any], states: Sequence[Any]) -> None:
        """Fold already-aggregated partial states (PAOs of this tree's aggregator, e.g. one
        chunk's pre-aggregation: a count, a ``(sum, n)`` pair, a set) into ``keys``' PAOs.

        The result equals inserting the values each state summarizes one by one (the
        aggregator's ``merge`` is associative and commutative); the caller hands over the
        states (mutable ones may be merged into). Counted as one insert per state. An invalid
        key raises ``TypeError`` with the states before it merged, as ``insert_many`` does.
        """
        if len(keys) != len(states):
            raise ValueError(f"{len(keys)} keys but {len(states)} states")
        root = self._root
        merge = self.agg.merge
        step = self._chunk
        for lo in range(0, len(keys), step):
            done = 0
            try:
                for k, s in zip(keys[lo : lo + step], states[lo : lo + step], strict=True):
                    prior = root.get(k, _MISSING)
                    if prior is _MISSING:
                        check_key(k)
                        root[k] = s
                    else:
                        root[k] = merge(prior, s)
                    done += 1
            finally:
                self._counts["inserts"] += done
            if len(root) >= self.root_capacity:
                self._spill_root()

    def _insert_chunk(self, keys: Sequence[Any], values: Sequence[Any] | None) -> None:
        root = self._root
        agg = self.agg
        before = len(root)
        if type(agg) is Count and values is None:
            # The C loop behind Counter.update: one dict lookup per key, no bytecode.
            try:
                _count_elements(root, keys)
                new = len(root) - before
                if new:
                    check_keys(list(itertools.islice(reversed(root), new)))
            except TypeError:
                self._undo_counts(keys, before)
                self._insert_slow(keys, None)  # re-raises at the offending pair
                raise AssertionError("unreachable") from None
            self._counts["inserts"] += len(keys)
            return
        if type(agg) in (Count, Sum, Avg) and values is not None:
            allowed = {int} if type(agg) is Count else {int, float}
            if not set(map(type, values)) <= allowed or (
                # count totals live in int64 columns; leave odd weights to the checked path
                type(agg) is Count
                and values
                and not -(1 << 62) <= min(values) <= max(values) < 1 << 62
            ):
                self._insert_slow(keys, values)
                return
            get = root.get
            try:
                if type(agg) is Count:
                    for k, v in zip(keys, values, strict=True):
                        root[k] = get(k, 0) + v
                else:
                    for k, v in zip(keys, values, strict=True):
                        s = get(k)
                        root[k] = (v, 1) if s is None else (s[0] + v, s[1] + 1)
                new = len(root) - before
                if new:
                    check_keys(list(itertools.islice(reversed(root), new)))
            except TypeError:
                self._undo_values(keys, values, before)
                self._insert_slow(keys, values)
                raise AssertionError("unreachable") from None
            self._counts["inserts"] += len(keys)
            return
        self._insert_slow(keys, values)

    def _insert_slow(self, keys: Sequence[Any], values: Sequence[Any] | None) -> None:
        root = self._root
        agg = self.agg
        lift, add = agg.lift, agg.add
        done = 0
        try:
            for i, k in enumerate(keys):
                v = 1 if values is None else values[i]
                state = root.get(k, _MISSING)
                if state is _MISSING:
                    check_key(k)
                    root[k] = lift(v)
                else:
                    root[k] = add(state, v)
                done += 1
        finally:
            self._counts["inserts"] += done

    def _undo_counts(self, keys: Sequence[Any], before: int) -> None:
        """Roll back a partially or fully applied ``_count_elements`` over ``keys``."""
        new_keys = list(itertools.islice(reversed(self._root), len(self._root) - before))
        root = self._root
        for k in keys:
            try:
                hash(k)
            except TypeError:
                break  # _count_elements stopped here
            root[k] -= 1
        for k in new_keys:
            del root[k]

    def _undo_values(self, keys: Sequence[Any], values: Sequence[Any], before: int) -> None:
        root = self._root
        new_keys = list(itertools.islice(reversed(root), len(root) - before))
        applied = 0
        for k in keys:
            try:
                hash(k)
            except TypeError:
                break
            applied += 1
        for k, v in zip(keys[:applied], values[:applied], strict=True):
            s = root[k]
            root[k] = s - v if type(self.agg) is Count else (s[0] - v, s[1] - 1)
        for k in new_keys:
            del root[k]

    # ---- moving data down -----------------------------------------------------------------
    def _spill_root(self, everything: bool = False) -> None:
        root = self._root
        if not root:
            return
        self._root = {}
        keys = list(root)
        if not everything and type(self.agg) is Count and len(keys) >= 64:
            keys, values = self._keep_hot(keys, root)
        else:
            values = self.agg.column(root.values(), len(keys))
        del root
        run = self._run_of(keys, values, owned=True)
        del keys
        self._counts["root_spills"] += 1
        top = self._top
        if top.is_leaf:
            self._grow(self._push(top, run))
        else:
            # The root dict is the top node's buffer: partition straight into the children
            # rather than compressing a run into the top only to decompress it again.
            self._grow(self._flush_node(top, run, drain=False))
        self._enforce_budget()

    def _run_of(self, keys: list[Any], values: np.ndarray, owned: bool) -> Run:
        """Encode, hash, sort and aggregate root entries into one run."""
        n = len(keys)
        encs = list(map(self._pack, keys))
        if self.hash_function is xxh3_64:
            hashes = np.fromiter(map(xxh3_64_intdigest, encs), dtype=np.uint64, count=n)
        else:
            fn = self.hash_function
            hashes = np.fromiter((int(fn(e)) & _MASK64 for e in encs), np.uint64, count=n)
        return sort_and_aggregate(
            hashes, EncodedKeys.from_encodings(encs), values, self.agg, owned=owned
        )

    def _keep_hot(self, keys: list[Any], root: dict[Any, int]) -> tuple[list[Any], np.ndarray]:
        """Keep the hottest eighth of a count root in place; return the rest to spill.

        Under skew (Zipf) the same hot keys fill every root; spilling them each time would
        hash, sort, compress and merge them again and again for nothing. A key may be split
        between root and tree: flush merges both, so this is invisible to callers.
        """
        n = len(keys)
        counts = np.fromiter(root.values(), dtype=np.int64, count=n)
        keep = n // 8
        cut = max(int(np.partition(counts, n - keep)[n - keep]), 2)
        hot = counts >= cut
        if int(hot.sum()) > 2 * keep:
            hot = counts > cut
        if not hot.any():
            return keys, counts
        cold = ~hot
        self._root = {
            keys[i]: c
            for i, c in zip(np.flatnonzero(hot).tolist(), counts[hot].tolist(), strict=True)
        }
        return list(itertools.compress(keys, cold.tolist())), counts[cold]

    def _grow(self, splits: Split) -> None:
        """Add a new top node when the old one split (the tree grows at the top)."""
        while splits:
            top = _Node([self._top, *(c for _, c in splits)], [p for p, _ in splits])
            self._top = top
            splits = self._split_internal(top) if len(top.children) > self.fanout else []

    def _decompress_all(self, node: _Node) -> list[Run]:
        runs = [self._codec.decompress(cr, self._store) for cr in node.runs]
        self._release(node.runs)
        node.runs = []
        node.buffered = 0
        node.compacted = 0
        return runs

    def _release(self, runs: list[CompressedRun]) -> None:
        if self._store is not None:
            for cr in runs:
                if cr.path is not None:
                    self._store.delete(cr.path)
                    cr.path = None

    def _push(self, node: _Node, run: Run) -> Split:
        if not len(run):
            return []
        if node.is_leaf:
            if node.buffered - node.compacted + len(run) > self.leaf_capacity // 2:
                return self._compact_leaf(node, run)
        elif node.buffered + len(run) > self.buffer_entries:
            return self._flush_node(node, run, drain=False)
        node.runs.append(self._codec.compress(run))
        node.buffered += len(run)
        return []

    def _take_merged(self, node: _Node, extra: Run | None) -> Run:
        """Empty ``node``'s buffer and return its runs (plus ``extra``) merged into one."""
        runs = self._decompress_all(node)
        if extra is not None:
            runs.append(extra)
        return merge_runs(runs, self.agg, owned=True)

    def _compact_leaf(self, node: _Node, extra: Run | None) -> Split:
        merged = self._take_merged(node, extra)
        self._counts["leaf_compactions"] += 1
        n = len(merged)
        pieces = [merged]
        if n > self.leaf_capacity:
            pieces = self._cut(merged, max(2, math.ceil(n * 4 / (3 * self.leaf_capacity))))
        if self._collect is not None:
            self._collect.extend(p for p in pieces if len(p))
        first = pieces[0]
        if len(first):
            node.runs = [self._codec.compress(first)]
        node.buffered = node.compacted = len(first)
        splits: Split = []
        for piece in pieces[1:]:
            leaf = _Node()
            leaf.runs = [self._codec.compress(piece)]
            leaf.buffered = leaf.compacted = len(piece)
            splits.append((int(piece.hashes[0]), leaf))
        self._counts["leaf_splits"] += len(splits)
        return splits

    @staticmethod
    def _cut(run: Run, parts: int) -> list[Run]:
        """Cut a run into about ``parts`` pieces, never separating equal hashes."""
        n = len(run)
        guesses = [n * i // parts for i in range(1, parts)]
        cuts = sorted(
            {int(np.searchsorted(run.hashes, run.hashes[g], side="left")) for g in guesses}
        )
        bounds = [0, *(c for c in cuts if 0 < c < n), n]
        return [run.slice(a, b) for a, b in itertools.pairwise(bounds)]

    def _flush_node(self, node: _Node, extra: Run | None, drain: bool) -> Split:
        merged = self._take_merged(node, extra)
        self._counts["node_flushes"] += 1
        assert node.children is not None and node.pivots is not None
        bounds = [
            0,
            *np.searchsorted(
                merged.hashes, np.array(node.pivots, dtype=np.uint64), side="left"
            ).tolist(),
            len(merged),
        ]
        children: list[_Node] = []
        pivots: list[int] = []
        for i, child in enumerate(node.children):
            if i:
                pivots.append(node.pivots[i - 1])
            children.append(child)
            part = merged.slice(bounds[i], bounds[i + 1])
            if drain:
                splits = self._drain(child, part if len(part) else None)
            else:
                splits = self._push(child, part) if len(part) else []
            for p, c in splits:
                pivots.append(p)
                children.append(c)
        node.children, node.pivots = children, pivots
        if len(children) > self.fanout:
            return self._split_internal(node)
        return []

    def _split_internal(self, node: _Node) -> Split:
        assert node.children is not None and node.pivots is not None and not node.runs
        children, pivots = node.children, node.pivots
        parts = math.ceil(len(children) / self.fanout)
        bounds = [len(children) * i // parts for i in range(parts + 1)]
        node.children, node.pivots = children[: bounds[1]], pivots[: bounds[1] - 1]
        splits: Split = []
        for a, b in itertools.pairwise(bounds[1:]):
            splits.append((pivots[a - 1], _Node(children[a:b], pivots[a : b - 1])))
        self._counts["node_splits"] += len(splits)
        return splits

    def _drain(self, node: _Node, extra: Run | None = None) -> Split:
        """Push ``extra`` and every buffered entry below ``node`` down to the leaves and compact
        each leaf to one run (the tree's contents are unchanged)."""
        if node.is_leaf:
            if extra is not None or len(node.runs) > 1:
                return self._compact_leaf(node, extra)
            if node.runs and self._collect is not None:
                self._collect.append(self._codec.decompress(node.runs[0], self._store))
            return []
        return self._flush_node(node, extra, drain=True)

    # ---- reading --------------------------------------------------------------------------
    def _leaves(self) -> Iterable[_Node]:
        stack = [self._top]
        while stack:
            node = stack.pop()
            if node.is_leaf:
                yield node
            else:
                stack.extend(reversed(node.children))  # type: ignore[arg-type]

    def _nodes(self) -> Iterable[_Node]:
        stack = [self._top]
        while stack:
            node = stack.pop()
            yield node
            if not node.is_leaf:
                stack.extend(node.children)  # type: ignore[arg-type]

    def flush(self) -> Snapshot:
        """The whole group-by-aggregate result so far (the tree keeps its contents)."""
        top = self._top
        if top.is_leaf and not top.runs and not self.agg.mutable_state:
            # Nothing below the root (small epochs): build the snapshot straight from the root
            # dict and leave the dict in place, skipping a compress/decompress round trip.
            # Immutable states only, so later inserts cannot change the snapshot.
            self._counts["flushes"] += 1
            root = self._root
            if not root:
                return Snapshot.empty(self.agg, self.hash_function)
            keys = list(root)
            run = self._run_of(keys, self.agg.column(root.values(), len(keys)), owned=False)
            return Snapshot.from_run(self.agg, run, self.hash_function)
        self._spill_root(everything=True)
        # Draining visits the leaves in hash order; each leaf hands over its uncompressed
        # contents as it goes, so nothing is decompressed twice.
        runs: list[Run] = []
        self._collect = runs
        try:
            self._grow(self._drain(self._top))
        finally:
            self._collect = None
        self._enforce_budget()
        self._counts["flushes"] += 1
        if not runs:
            return Snapshot.empty(self.agg, self.hash_function)
        return Snapshot(
            self.agg,
            np.concatenate([r.hashes for r in runs]),
            EncodedKeys.concat([r.keys for r in runs]),
            np.concatenate([r.values for r in runs]),
            self.hash_function,
        )

    def empty(self) -> None:
        """Drop everything and start a new batch (spill files are removed)."""
        self._root = {}
        self._top = _Node()
        if self._store is not None:
            self._store.clear()
        self._counts["empties"] += 1

    def close(self) -> None:
        """Release spill files and their directory; the tree is empty afterwards."""
        self.empty()
        if self._store is not None:
            self._store.close()
            self._store = None

    def __enter__(self) -> CompressedBufferTree:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- spill ----------------------------------------------------------------------------
    def set_memory_budget(self, budget_bytes: int | None) -> None:
        """Change the budget of resident compressed buffers (None: unbounded) and enforce it
        now: runs past it are spilled at once. A holder of several trees (a job's open
        epochs) shares one budget among them this way."""
        if budget_bytes is not None and budget_bytes < 0:
            raise ValueError("memory_budget_bytes must be >= 0")
        self.memory_budget_bytes = budget_bytes
        self._enforce_budget()

    def resident_compressed_bytes(self) -> int:
        """Bytes of compressed buffers held in memory (what the budget bounds)."""
        return sum(cr.compressed_bytes for node in self._nodes() for cr in node.runs if cr.resident)

    def _enforce_budget(self) -> None:
        budget = self.memory_budget_bytes
        if budget is None:
            return
        resident = [cr for node in self._nodes() for cr in node.runs if cr.resident]
        total = sum(cr.compressed_bytes for cr in resident)
        if total <= budget:
            return
        if self._store is None:
            self._store = SpillStore(self._spill_dir)
        # Largest first: fewest files for the most bytes freed.
        for cr in sorted(resident, key=lambda c: c.compressed_bytes, reverse=True):
            if total <= budget:
                break
            total -= cr.compressed_bytes
            cr.path = self._store.write(cr.cols)  # type: ignore[arg-type]
            cr.cols = None
            self._counts["runs_spilled"] += 1

    # ---- accounting -----------------------------------------------------------------------
    def memory_bytes(self) -> int:
        """Bytes held by this tree: the root dict with its key and state objects (even when
        shared with the caller: the tree keeps them alive), nodes, lists and compressed
        columns. Spilled columns are on disk and not counted."""
        root = self._root
        size = sys.getsizeof(self) + sys.getsizeof(self.__dict__) + sys.getsizeof(root)
        size += sum(map(deep_sizeof, root)) + sum(map(deep_sizeof, root.values()))
        for node in self._nodes():
            size += sys.getsizeof(node) + sys.getsizeof(node.runs)
            size += sum(cr.memory_bytes() for cr in node.runs)
            if node.children is not None:
                size += sys.getsizeof(node.children) + sys.getsizeof(node.pivots)
                size += sum(map(sys.getsizeof, node.pivots))  # type: ignore[arg-type]
        return size

    def stats(self) -> dict[str, Any]:
        """Counters and sizes: inserts, flushes, spills, compression ratio, shape..."""
        nodes = list(self._nodes())
        runs = [cr for node in nodes for cr in node.runs]
        raw = sum(cr.raw_bytes for cr in runs)
        comp = sum(cr.compressed_bytes for cr in runs if cr.resident)
        height, node = 1, self._top
        while not node.is_leaf:
            height += 1
            node = node.children[0]  # type: ignore[index]
        out: dict[str, Any] = dict(self._counts)
        spilled_raw = sum(cr.raw_bytes for cr in runs if not cr.resident)
        out.update(
            root_entries=len(self._root),
            buffered_entries=sum(node.buffered for node in nodes),
            height=height,
            nodes=len(nodes),
            leaves=sum(1 for n in nodes if n.is_leaf),
            runs=len(runs),
            uncompressed_bytes=raw,
            compressed_bytes=comp,
            compression_ratio=(raw - spilled_raw) / comp if comp else None,
            spilled_runs=sum(1 for cr in runs if not cr.resident),
            spill_bytes=self._store.bytes_on_disk if self._store else 0,
            spill_reads=self._store.reads if self._store else 0,
            memory_bytes=self.memory_bytes(),
        )
        return out
