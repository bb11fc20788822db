"""Mergeable sketch aggregators on Apache DataSketches (the ``datasketches`` binding).

Three CBT aggregators whose PAO is a DataSketches sketch, so they merge in the tree, up the
trees, in hand-overs, checkpoints and standby replicas like any other state:

* :class:`ApproxQuantiles` (``approx_percentile``): a KLL doubles sketch (``k``, default 200:
  normalized rank error about 1.33 % at 99 % confidence, ``kll_doubles_sketch
  .get_normalized_rank_error(k, False)``); ``finalize`` gives the quantile(s) at the
  job's ``ranks``.
* :class:`ApproxDistinct` (``approx_distinct``, alias ``hll``): an HLL union of ``lg_k``
  (default 12: relative standard error about 1.6 %, ``hll_sketch.get_rel_err``); replaces the
  former register-array HyperLogLog (``cbt/hll.py``).
* :class:`ApproxTopK` (``approx_top_k``): a frequent-strings sketch (misra-gries with
  ``2**lg_max_map_size`` slots); ``finalize`` gives the ``k`` heaviest items with their
  estimated counts.

Contract, beyond :class:`~cbt.aggregators.Aggregator`'s: the serialized state is the
sketch's DataSketches binary (``bytes``): the same bytes go on the wire, into checkpoints
and into the lake, where Spark's ``hll_union_agg`` / ``kll_merge_agg_double`` read them
(HLL as HLL_8 compact, KLL as the compact doubles sketch). One ``lg_k`` / ``k`` per job:
a binary of another size is refused at ``deserialize`` rather than unioned (DataSketches
C++ had an HLL union regression with mixed ``lg_k``, datasketches-cpp #512 / #522). A
malformed binary (from the network or a disk) raises ``ValueError`` naming the sketch and is
counted (:func:`rejected_binaries`); the C++ decoder only sees bytes that
:mod:`cbt.sketch_bytes` vetted (every length, offset and index it would trust: the decoders
are not hardened, fuzzing crashed them), and reads its result back once before use. Nothing
is pickled.

Merges are exact for HLL (register-wise max: the estimate does not depend on the tree shape
or the merge order, every state being a union) and within the sketch's stated bound for KLL
(randomized compaction) and frequent items (estimates stay within ``[lower, upper]``
bounds, ``upper - lower <= epsilon * total weight``).
"""

from __future__ import annotations

import math
import threading
from typing import Any

import msgpack
import numpy as np

from cbt import sketch_bytes
from cbt.aggregators import (
    Aggregator,
    check_packable,
    freeze,
    register_aggregator,
)


def _ds() -> Any:
    """The ``datasketches`` module, imported on first use: it maps ~18 MB that an agent whose
    jobs use no sketch never needs (the issue "A lightweight agent"; import is thread-safe
    and, once done, a dictionary lookup)."""
    import datasketches

    return datasketches


def _hll_wire() -> Any:
    """The HLL target type of serialized states: HLL_8, one byte per register (4 KiB at
    lg_k 12 once dense; HLL_4 would be half): its layout has no exception table, so a hostile
    binary is fully checkable before the C++ decoder sees it (cbt/sketch_bytes.py); Spark
    reads any type."""
    return _ds().tgt_hll_type.HLL_8


_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1

MIN_LG_K, MAX_LG_K, DEFAULT_LG_K = 4, 21, 12
MIN_KLL_K, MAX_KLL_K, DEFAULT_KLL_K = 8, 65_535, 200
MAX_TOP_K = 10_000

_rejected = 0
_rejected_lock = threading.Lock()


def rejected_binaries() -> int:
    """How many sketch binaries this process refused (malformed, or of another size)."""
    return _rejected


def _reject(what: str, detail: str) -> ValueError:
    global _rejected
    with _rejected_lock:
        _rejected += 1
    return ValueError(f"malformed {what} sketch binary: {detail}")


def _vetted(obj: Any, what: str, check: Any, size_param: int, max_bytes: int) -> bytes:
    """The bytes of a serialized sketch once :mod:`cbt.sketch_bytes` found them well formed."""
    if not isinstance(obj, bytes | bytearray | memoryview):
        raise _reject(what, f"expected bytes, got {type(obj).__name__}")
    blob = bytes(obj)
    if len(blob) > max_bytes:
        raise _reject(what, f"{len(blob)} bytes is more than a sketch of this size holds")
    problem = check(blob, size_param)
    if problem is not None:
        raise _reject(what, problem)
    return blob


def _decode(what: str, decode: Any, blob: bytes, probe: Any) -> Any:
    """``decode(blob)``, then ``probe(sketch)``: reading the result once (items to Python
    strings, an estimate, a quantile) finds defects the decoder lets through (e.g. items that
    are not UTF-8), here rather than in a later merge or finalize."""
    # any exception from the C++ side (IndexError, ValueError, RuntimeError: std::bad_cast...)
    # means the bytes are bad: at this trust boundary they are all one refusal
    try:
        sk = decode(blob)
        probe(sk)
    except Exception as e:
        raise _reject(what, f"{type(e).__name__}: {e}") from None
    return sk


def _probe_kll(sk: Any) -> None:
    if not sk.is_empty():
        lo, hi = sk.get_min_value(), sk.get_max_value()
        if not lo <= sk.get_quantile(0.5) <= hi:
            raise ValueError("quantiles outside the sketch's own min and max")


def _probe_hll(sk: Any) -> None:
    if not sk.get_estimate() >= 0.0:
        raise ValueError("negative or NaN estimate")


def _probe_items(sk: Any) -> None:
    sk.get_frequent_items(_ds().frequent_items_error_type.NO_FALSE_POSITIVES)


def _is_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


# ---- KLL quantiles -----------------------------------------------------------------------------


def check_ranks(ranks: Any) -> tuple[float, ...]:
    """Normalized ranks (fractions in [0, 1]); ValueError otherwise."""
    if not isinstance(ranks, list | tuple) or not ranks:
        raise ValueError(f"expected a non-empty list of ranks in [0, 1], got {ranks!r}")
    out = []
    for r in ranks:
        if not _is_number(r) or not 0.0 <= r <= 1.0:
            raise ValueError(f"expected ranks in [0, 1], got {r!r}")
        out.append(float(r))
    return tuple(out)


def check_kll_k(k: Any) -> int:
    if not isinstance(k, int) or isinstance(k, bool) or not MIN_KLL_K <= k <= MAX_KLL_K:
        raise ValueError(f"expected a KLL k in [{MIN_KLL_K}, {MAX_KLL_K}], got {k!r}")
    return k


def kll_rank_error(k: int) -> float:
    """The KLL sketch's normalized rank error for ``k`` (single quantile, 99 % confidence)."""
    return float(_ds().kll_doubles_sketch.get_normalized_rank_error(k, False))


class ApproxQuantiles(Aggregator):
    """``approx_percentile(k, ranks, array)``: a KLL doubles sketch per key.

    Values are numbers (ints are converted to float64; NaN is ignored, as DataSketches does).
    ``finalize`` gives the quantile at each of ``ranks`` (a list when ``array``, else the one
    value); a state that holds no value finalizes to None.
    """

    name = "approx_percentile"
    mutable_state = True

    def __init__(self, k: int = DEFAULT_KLL_K, ranks: Any = (0.5,), array: bool = False) -> None:
        self.k = check_kll_k(k)
        self.ranks = check_ranks(ranks)
        if not isinstance(array, bool):
            raise ValueError(f"expected array to be a boolean, got {array!r}")
        if not array and len(self.ranks) != 1:
            raise ValueError("a scalar approx_percentile has exactly one rank")
        self.array = array
        # a compact KLL binary is at most some 8 * (3k + levels) bytes; generous bound
        self._max_bytes = 64 * self.k + 4096

    def params(self) -> dict[str, Any]:
        return {"k": self.k, "ranks": list(self.ranks), "array": self.array}

    def __hash__(self) -> int:
        return hash((self.name, self.k, self.ranks, self.array))

    def empty(self) -> Any:
        """A sketch that has seen nothing (the columnar path's batch start)."""
        return _ds().kll_doubles_sketch(self.k)

    def lift(self, value: Any) -> Any:
        return self.add(_ds().kll_doubles_sketch(self.k), value)

    def add(self, state: Any, value: Any) -> Any:
        if not _is_number(value):
            raise TypeError(f"{self.name} values are numbers, got {type(value).__name__}")
        state.update(float(value))
        return state

    def add_array(self, state: Any, values: np.ndarray) -> Any:
        """Fold a whole float64 column in (the columnar path's batch update)."""
        state.update(np.ascontiguousarray(values, dtype=np.float64))
        return state

    def merge(self, a: Any, b: Any) -> Any:
        a.merge(b)
        return a

    def copy(self, state: Any) -> Any:
        return _ds().kll_doubles_sketch.deserialize(state.serialize())

    def serialize(self, state: Any) -> bytes:
        if not state.is_empty():
            # reading a quantile sorts level zero (and sets its flag) once: equal sketches
            # then give equal bytes whether or not they were read before
            state.get_quantile(0.5)
        return bytes(state.serialize())

    def deserialize(self, obj: Any) -> Any:
        what = "KLL"
        blob = _vetted(obj, what, sketch_bytes.check_kll, self.k, self._max_bytes)
        return _decode(what, _ds().kll_doubles_sketch.deserialize, blob, _probe_kll)

    def finalize(self, state: Any) -> Any:
        if state.is_empty():
            return None
        # ranks 0 and 1 are the exact min and max the sketch tracks (KLL's quantile at rank
        # 0 is its smallest retained item, which compaction may have dropped)
        lo, hi = float(state.get_min_value()), float(state.get_max_value())
        qs = [
            lo if r == 0.0 else hi if r == 1.0 else float(state.get_quantile(r)) for r in self.ranks
        ]
        return qs if self.array else qs[0]

    def sketch_bytes(self, state: Any) -> bytes:
        """The binary the lake keeps (Spark's ``kll_merge_agg_double`` reads it)."""
        return self.serialize(state)


# ---- HLL distinct count ------------------------------------------------------------------------


def check_lg_k(lg_k: Any) -> int:
    if not isinstance(lg_k, int) or isinstance(lg_k, bool) or not MIN_LG_K <= lg_k <= MAX_LG_K:
        raise ValueError(f"expected an HLL lg_k in [{MIN_LG_K}, {MAX_LG_K}], got {lg_k!r}")
    return lg_k


def hll_rse(lg_k: int) -> float:
    """The relative standard error of a merged (unioned) HLL sketch of ``lg_k``."""
    return float(_ds().hll_sketch.get_rel_err(False, True, lg_k, 1))


def hll_item(value: Any) -> int | float | str:
    """What an HLL hashes for ``value``: strings as UTF-8, integers (and integral floats, which
    Python counts as the same value) as int64, other floats as doubles, booleans as 0 / 1
    (Python's ``True == 1``) - the same conversions as Spark's ``hll_sketch_agg`` for strings
    and longs, so sketches of both agree - and anything else (ints past 64 bits, tuples,
    bytes) as a NUL-prefixed hex text of its msgpack encoding (lists as tuples), which no
    JSON string a user sends is likely to equal."""
    t = type(value)
    if t is str:
        return value
    if t is bool:
        return int(value)
    if t is int:
        return value if _INT64_MIN <= value <= _INT64_MAX else f"\x00int:{value}"
    if t is float:
        if value.is_integer() and _INT64_MIN <= value <= _INT64_MAX:
            return int(value)
        return value
    value = freeze(value)
    check_packable(value)
    return "\x00" + msgpack.packb(value, use_bin_type=True).hex()


class ApproxDistinct(Aggregator):
    """``approx_distinct(lg_k)`` (alias ``hll``): an HLL union of ``2**lg_k`` slots per key.

    The state is a ``datasketches.hll_union``. ``finalize`` gives the float estimate of its
    canonical binary, so it depends on the set of values only (a lone sketch would use the
    HIP estimator, a merged one the composite one).
    """

    name = "approx_distinct"
    mutable_state = True

    def __init__(self, lg_k: int = DEFAULT_LG_K, **legacy: Any) -> None:
        if "precision" in legacy:
            raise ValueError(
                "this approx_distinct state is the former register-array HyperLogLog "
                f"(params {{'precision': {legacy['precision']!r}}}); since the DataSketches "
                "HLL it is not read (resubmit the job; its params are now {'lg_k': n})"
            )
        if legacy:
            raise ValueError(f"unknown approx_distinct params {sorted(legacy)}")
        self.lg_k = check_lg_k(lg_k)
        # dense HLL_8 is 40 + 2**lg_k bytes; a SET of coupons stays below 3 * 2**lg_k
        self._max_bytes = (1 << self.lg_k) * 4 + 4096

    def params(self) -> dict[str, Any]:
        return {"lg_k": self.lg_k}

    def empty(self) -> Any:
        return _ds().hll_union(self.lg_k)

    def lift(self, value: Any) -> Any:
        return self.add(_ds().hll_union(self.lg_k), value)

    def add(self, state: Any, value: Any) -> Any:
        state.update(hll_item(value))
        return state

    def add_values(self, state: Any, values: Any) -> Any:
        """Fold many values in (the columnar path feeds each group's distinct values)."""
        update = state.update
        for v in values:
            update(hll_item(v))
        return state

    def merge(self, a: Any, b: Any) -> Any:
        a.update(b.get_result(_hll_wire()))
        return a

    def copy(self, state: Any) -> Any:
        u = _ds().hll_union(self.lg_k)
        u.update(state.get_result(_hll_wire()))
        return u

    def serialize(self, state: Any) -> bytes:
        return sketch_bytes.canonical_hll(bytes(state.get_result(_hll_wire()).serialize_compact()))

    def deserialize(self, obj: Any) -> Any:
        what = "HLL"
        blob = _vetted(obj, what, sketch_bytes.check_hll, self.lg_k, self._max_bytes)
        sk = _decode(what, _ds().hll_sketch.deserialize, blob, _probe_hll)
        if sk.lg_config_k != self.lg_k:
            raise _reject(what, f"lg_k={sk.lg_config_k}, expected {self.lg_k}")
        u = _ds().hll_union(self.lg_k)
        u.update(sk)
        return u

    def finalize(self, state: Any) -> float:
        # A union fed values directly (never merged) estimates with HIP, one that took a
        # sketch with the composite estimator: the same registers, different estimates. The
        # estimate is that of the canonical binary (sketch_bytes.canonical_hll), a function
        # of the registers alone, whatever the tree shape, merge order, spills and hops.
        return float(_ds().hll_sketch.deserialize(self.serialize(state)).get_estimate())

    def sketch_bytes(self, state: Any) -> bytes:
        """The binary the lake keeps (Spark's ``hll_union_agg`` reads it)."""
        return self.serialize(state)


# ---- frequent items ----------------------------------------------------------------------------


def check_top_k(k: Any) -> int:
    if not isinstance(k, int) or isinstance(k, bool) or not 1 <= k <= MAX_TOP_K:
        raise ValueError(f"expected a top-k k in [1, {MAX_TOP_K}], got {k!r}")
    return k


def lg_map_size_for(k: int) -> int:
    """Map slots for the top ``k``: at least 4k (the sketch keeps 0.75 of its slots, and an
    item's error is about 3.5 / slots of the total weight), at least 2**10."""
    return max(10, (4 * k - 1).bit_length())


def item_text(value: Any) -> str:
    """The text an item is counted under: strings as they are, numbers and booleans by their
    JSON spelling (so ``1`` and ``"1"`` are one item)."""
    t = type(value)
    if t is str:
        return value
    if t is bool:
        return "true" if value else "false"
    if t is int:
        return str(value)
    if t is float:
        return str(int(value)) if value.is_integer() and abs(value) < 2**63 else repr(value)
    raise TypeError(f"approx_top_k items are strings, numbers or booleans, got {t.__name__}")


class FrequentState:
    """A frequent-strings sketch plus what DataSketches would drop of purged-out inputs.

    When a full map's purge removes every item (e.g. more than 0.75 * slots distinct items
    seen once each), ``frequent_strings_sketch.is_empty()`` turns true while its total weight
    and error offset are not zero; it then serializes as an empty sketch and ``merge`` skips
    it, so the weight and offset vanish and a merged sketch's upper bounds can fall below
    true counts (found by this module's property tests; datasketches 5.2). Such a sketch is
    settled here: its weight and offset move to ``lost_weight`` / ``lost_error`` and the
    sketch restarts empty. Bounds: ``lower(item) <= true <= upper(item) + lost_error``.
    """

    __slots__ = ("lost_error", "lost_weight", "sk")

    def __init__(self, sk: Any, lost_weight: int = 0, lost_error: int = 0) -> None:
        self.sk = sk
        self.lost_weight = lost_weight
        self.lost_error = lost_error

    @property
    def total_weight(self) -> int:
        return int(self.sk.total_weight) + self.lost_weight

    def upper_bound(self, item: str) -> int:
        return int(self.sk.get_upper_bound(item)) + self.lost_error

    def lower_bound(self, item: str) -> int:
        return int(self.sk.get_lower_bound(item))

    def settle(self, lg_max_map_size: int) -> FrequentState:
        if self.sk.is_empty() and self.sk.total_weight:
            # nothing is in the map, so any string's upper bound is the sketch's offset
            self.lost_error += int(self.sk.get_upper_bound(""))
            self.lost_weight += int(self.sk.total_weight)
            self.sk = _ds().frequent_strings_sketch(lg_max_map_size)
        return self


class ApproxTopK(Aggregator):
    """``approx_top_k(k)``: a frequent-strings sketch per key; the ``k`` heaviest items.

    ``finalize`` gives up to ``k`` ``[item, estimate]`` pairs, heaviest first (ties by item),
    among the items that may be frequent (``NO_FALSE_NEGATIVES``: no item whose true count
    exceeds the sketch's error offset is missing). Exact while a key has fewer distinct items
    than 0.75 of the map's slots; beyond, each estimate is within ``epsilon * total weight``.
    The state is a :class:`FrequentState`; it serializes as the sketch's binary, or
    ``[binary, lost_weight, lost_error]`` once a purge emptied its map (the lake keeps the
    binary alone).
    """

    name = "approx_top_k"
    mutable_state = True

    def __init__(self, k: int = 10, lg_max_map_size: int | None = None) -> None:
        self.k = check_top_k(k)
        lg = lg_map_size_for(self.k) if lg_max_map_size is None else lg_max_map_size
        if not isinstance(lg, int) or isinstance(lg, bool) or not 3 <= lg <= 21:
            raise ValueError(f"expected lg_max_map_size in [3, 21], got {lg!r}")
        self.lg_max_map_size = lg
        self._epsilon = _ds().frequent_strings_sketch.get_epsilon_for_lg_size(lg)

    def params(self) -> dict[str, Any]:
        return {"k": self.k, "lg_max_map_size": self.lg_max_map_size}

    def epsilon(self) -> float:
        return float(self._epsilon)

    def empty(self) -> FrequentState:
        return FrequentState(_ds().frequent_strings_sketch(self.lg_max_map_size))

    def lift(self, value: Any) -> FrequentState:
        return self.add(self.empty(), value)

    def add(self, state: FrequentState, value: Any) -> FrequentState:
        state.sk.update(item_text(value))
        return state.settle(self.lg_max_map_size)

    def add_counts(self, state: FrequentState, items: Any, counts: Any) -> FrequentState:
        """Fold ``(item, count)`` pairs in (the columnar path counts each group's items)."""
        lg = self.lg_max_map_size
        for item, c in zip(items, counts, strict=True):
            state.sk.update(item_text(item), int(c))
            state.settle(lg)
        return state

    def merge(self, a: FrequentState, b: FrequentState) -> FrequentState:
        a.sk.merge(b.sk)  # b settled: its map holds items whenever it holds weight
        a.lost_weight += b.lost_weight
        a.lost_error += b.lost_error
        return a.settle(self.lg_max_map_size)

    def copy(self, state: FrequentState) -> FrequentState:
        sk = _ds().frequent_strings_sketch.deserialize(state.sk.serialize())
        return FrequentState(sk, state.lost_weight, state.lost_error)

    def serialize(self, state: FrequentState) -> Any:
        blob = sketch_bytes.canonical_frequent(bytes(state.sk.serialize()))
        if state.lost_weight or state.lost_error:
            return [blob, state.lost_weight, state.lost_error]
        return blob

    def deserialize(self, obj: Any) -> FrequentState:
        what = "frequent items"
        lost_weight = lost_error = 0
        if isinstance(obj, list | tuple):
            if not (
                len(obj) == 3
                and all(type(x) is int and 0 <= x < 1 << 62 for x in obj[1:])
                and obj[2] <= obj[1]
            ):
                raise _reject(what, "expected [binary, lost weight, lost error]")
            obj, lost_weight, lost_error = obj
        # items are arbitrary strings: bound the whole binary rather than guess their sizes
        check = sketch_bytes.check_frequent
        blob = _vetted(obj, what, check, self.lg_max_map_size, 64 << 20)
        sk = _decode(what, _ds().frequent_strings_sketch.deserialize, blob, _probe_items)
        if not math.isclose(sk.epsilon, self._epsilon):
            raise _reject(what, "map size differs from this job's")
        return FrequentState(sk, lost_weight, lost_error)

    def finalize(self, state: FrequentState) -> list:
        rows = state.sk.get_frequent_items(_ds().frequent_items_error_type.NO_FALSE_NEGATIVES)
        # rows: (item, estimate, lower bound, upper bound)
        rows.sort(key=lambda r: (-r[1], r[0]))
        return [[item, int(est)] for item, est, _lo, _hi in rows[: self.k]]

    def sketch_bytes(self, state: FrequentState) -> bytes:
        """The sketch's binary (without the weight of purged-out inputs, see FrequentState)."""
        return sketch_bytes.canonical_frequent(bytes(state.sk.serialize()))


SKETCH_AGGREGATORS: tuple[type[Aggregator], ...] = (ApproxQuantiles, ApproxDistinct, ApproxTopK)
#: the aggregators whose state the lake keeps as a binary beside the estimate
SKETCH_NAMES: frozenset[str] = frozenset(a.name for a in SKETCH_AGGREGATORS)


def holds_sketches(agg: Aggregator) -> bool:
    """Whether ``agg`` (or a part of a composite) is a DataSketches aggregator."""
    return any(isinstance(a, SKETCH_AGGREGATORS) for a in getattr(agg, "parts", (agg,)))


def sketch_binaries(agg: Aggregator, state: Any) -> tuple[bytes | None, ...] | None:
    """The DataSketches binary of each part of ``state`` (one part, or a composite's), None
    for a part that is no sketch or is absent; None when ``agg`` has no sketch part at all.
    What the lake keeps beside the estimates (``spark_sink``)."""
    if not holds_sketches(agg):
        return None
    parts = getattr(agg, "parts", None)
    if parts is None:
        parts, state = (agg,), (state,)
    return tuple(
        a.sketch_bytes(s) if isinstance(a, SKETCH_AGGREGATORS) and s is not None else None  # type: ignore[attr-defined]
        for a, s in zip(parts, state, strict=True)
    )


register_aggregator(ApproxQuantiles.name, ApproxQuantiles)
register_aggregator(ApproxDistinct.name, ApproxDistinct)
register_aggregator("hll", ApproxDistinct)
register_aggregator(ApproxTopK.name, ApproxTopK)
