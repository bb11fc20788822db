"""Partial aggregation objects (PAOs) and the aggregators that create and merge them.

An :class:`Aggregator` defines, for one kind of aggregate, what a key's partial state (its PAO)
looks like and how states combine. The contract every aggregator must honour:

* ``lift(value)`` makes the state of a single inserted value; ``add(state, value)`` folds one
  more value in (it may mutate and return ``state``).
* ``merge(a, b)`` combines two states; it must be associative and commutative, may mutate and
  return ``a`` and must never mutate ``b``.
* ``serialize(state)`` returns a msgpack-encodable object (numbers, str, bytes, lists, dicts);
  ``deserialize`` inverts it. Pickle is never used, so a snapshot is safe to load from anyone.
* Optional, for invertible aggregators (``invertible = True``): ``zero()`` is the identity and
  ``invert(a, b)`` is ``a ⊖ b`` with ``merge(invert(a, b), b) == a``; ``is_zero(state)`` tells
  when a key has no contribution left, so ``Snapshot.subtract`` drops it.
* ``finalize(state)`` is the user-facing value (``avg`` divides, ``distinct`` counts).

Column hooks (``merge_groups``, ``negate_column``, ``encode_column``...) work on numpy arrays of
states; the defaults loop in Python, ``count`` overrides them with vectorized numpy.

Custom aggregators subclass :class:`Aggregator`, set a unique ``name``, implement ``merge``
(plus ``lift``/``serialize``/``deserialize`` when the state is not the raw value) and register
a factory with :func:`register_aggregator` so ``Snapshot.from_bytes`` can rebuild them.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from typing import Any, ClassVar

import msgpack
import numpy as np

State = Any

_packb = msgpack.packb


def _unpackb(blob: bytes) -> Any:
    return msgpack.unpackb(blob, use_list=False, raw=False, strict_map_key=False)


def object_array(items: Any, n: int | None = None) -> np.ndarray:
    """A 1-D object array of ``items`` (``np.array`` would turn tuples into a 2-D array)."""
    if n is None:
        items = list(items)
        n = len(items)
    return np.fromiter(items, dtype=object, count=n)


def _is_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1
_BIGINT_EXT = 1  # msgpack ext type code of an int outside msgpack's 64-bit range


def _num_out(v: Any) -> Any:
    """A number as msgpack can carry it: ints beyond 64 bits (a sum can grow past them) travel
    as an ext type holding their decimal digits."""
    if type(v) is int and not -(1 << 63) <= v < 1 << 64:
        return msgpack.ExtType(_BIGINT_EXT, str(v).encode())
    return v


def _num_in(obj: Any) -> Any:
    if isinstance(obj, msgpack.ExtType) and obj.code == _BIGINT_EXT:
        return int(obj.data.decode())
    if not _is_number(obj):
        raise ValueError(f"expected a number in a serialized state, got {obj!r}")
    return obj


def check_packable(value: Any) -> None:
    """Reject at insert time a value msgpack cannot serialize, rather than fail at a spill."""
    try:
        _packb(value, use_bin_type=True)
    except (TypeError, ValueError, OverflowError) as e:
        raise TypeError(f"value {value!r} cannot be serialized with msgpack: {e}") from None


class Aggregator:
    """Base class: how one kind of PAO is built, merged, inverted and serialized."""

    name: ClassVar[str] = "custom"
    invertible: ClassVar[bool] = False
    #: numpy dtype of a column of states, or ``object`` for arbitrary Python states
    dtype: ClassVar[Any] = object
    #: True when ``merge``/``add`` mutate their first argument (sets, bytearrays)
    mutable_state: ClassVar[bool] = False

    # ---- per-state contract -------------------------------------------------------------
    def params(self) -> dict[str, Any]:
        """Constructor keyword arguments; recorded in snapshot headers."""
        return {}

    def lift(self, value: Any) -> State:
        return value

    def add(self, state: State, value: Any) -> State:
        return self.merge(state, self.lift(value))

    def merge(self, a: State, b: State) -> State:
        raise NotImplementedError

    def zero(self) -> State:
        raise TypeError(f"aggregator {self.name!r} is not invertible")

    def invert(self, a: State, b: State) -> State:
        raise TypeError(f"aggregator {self.name!r} is not invertible")

    def is_zero(self, state: State) -> bool:
        return False

    def serialize(self, state: State) -> Any:
        return state

    def deserialize(self, obj: Any) -> State:
        return obj

    def finalize(self, state: State) -> Any:
        return state

    def copy(self, state: State) -> State:
        if not self.mutable_state:
            return state
        return self.deserialize(_unpackb(_packb(self.serialize(state), use_bin_type=True)))

    def describe(self) -> tuple[str, dict[str, Any]]:
        return self.name, self.params()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Aggregator) and self.describe() == other.describe()

    def __hash__(self) -> int:
        return hash((self.name, tuple(sorted(self.params().items()))))

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.params().items())
        return f"{type(self).__name__}({args})"

    # ---- column hooks (numpy arrays of states) ---------------------------------------
    def column(self, states: Any, n: int | None = None) -> np.ndarray:
        return object_array(states, n)

    def merge_groups(self, values: np.ndarray, starts: np.ndarray, owned: bool) -> np.ndarray:
        """Merge each run ``values[starts[i]:starts[i+1]]`` into one state.

        ``owned`` says the states belong to the caller (freshly decoded), so mutating merges are
        safe; otherwise mutable states are copied first.
        """
        out = values[starts]
        sizes = np.diff(np.append(starts, len(values)))
        merge = self.merge
        copy = None if (owned or not self.mutable_state) else self.copy
        for gi in np.flatnonzero(sizes > 1).tolist():
            lo = int(starts[gi])
            hi = lo + int(sizes[gi])
            acc = values[lo] if copy is None else copy(values[lo])
            for j in range(lo + 1, hi):
                acc = merge(acc, values[j])
            out[gi] = acc
        return out

    def negate_column(self, values: np.ndarray) -> np.ndarray:
        zero, invert = self.zero, self.invert
        return object_array((invert(zero(), s) for s in values), len(values))

    def nonzero_mask(self, values: np.ndarray) -> np.ndarray:
        is_zero = self.is_zero
        return np.fromiter((not is_zero(s) for s in values), dtype=bool, count=len(values))

    def encode_column(self, values: np.ndarray) -> bytes:
        ser = self.serialize
        return _packb([ser(s) for s in values], use_bin_type=True)

    def decode_column(self, blob: bytes, n: int) -> np.ndarray:
        objs = _unpackb(blob)
        if not isinstance(objs, tuple) or len(objs) != n:
            raise ValueError(f"value column holds {len(objs)} states, expected {n}")
        de = self.deserialize
        return object_array(map(de, objs), n)

    def finalize_column(self, values: np.ndarray) -> list:
        return list(map(self.finalize, values))


class Count(Aggregator):
    """``count``: number of inserts per key; an inserted value is an integer weight (default 1).

    Invertible; ``Snapshot.subtract`` drops keys whose count nets to 0.
    """

    name = "count"
    invertible = True
    dtype = np.int64

    def lift(self, value: Any) -> int:
        if not isinstance(value, int | np.integer) or isinstance(value, bool):
            raise TypeError(f"count weights are ints, got {type(value).__name__}")
        if not _INT64_MIN >> 1 <= value <= _INT64_MAX >> 1:
            raise TypeError(f"count weight {value} is out of range (totals are int64)")
        return int(value)

    def add(self, state: int, value: Any) -> int:
        return state + self.lift(value)

    def merge(self, a: int, b: int) -> int:
        return a + b

    def zero(self) -> int:
        return 0

    def invert(self, a: int, b: int) -> int:
        return a - b

    def is_zero(self, state: int) -> bool:
        return state == 0

    def serialize(self, state: Any) -> int:
        return int(state)

    def deserialize(self, obj: Any) -> int:
        if not isinstance(obj, int):
            raise ValueError(f"count state must be an int, got {type(obj).__name__}")
        return obj

    def column(self, states: Any, n: int | None = None) -> np.ndarray:
        if n is None:
            states = list(states)
            n = len(states)
        return np.fromiter(states, dtype=np.int64, count=n)

    def merge_groups(self, values: np.ndarray, starts: np.ndarray, owned: bool) -> np.ndarray:
        return np.add.reduceat(values, starts) if len(values) else values

    def negate_column(self, values: np.ndarray) -> np.ndarray:
        return -values

    def nonzero_mask(self, values: np.ndarray) -> np.ndarray:
        return values != 0

    def encode_column(self, values: np.ndarray) -> bytes:
        return shuffle_bytes(np.ascontiguousarray(values, dtype="<i8"))

    def decode_column(self, blob: bytes, n: int) -> np.ndarray:
        if len(blob) != 8 * n:
            raise ValueError(f"count column has {len(blob)} bytes, expected {8 * n}")
        return unshuffle_bytes(blob, n, "<i8").astype(np.int64)

    def finalize_column(self, values: np.ndarray) -> list:
        return values.tolist()


def shuffle_bytes(arr: np.ndarray, width: int = 8) -> bytes:
    """Byte-transpose an array of ``width``-byte words: all first bytes, then all second...

    Small numbers (counts, hash deltas, sizes) have long runs of zero high bytes after the
    transpose, which zstd then stores in almost nothing.
    """
    return np.ascontiguousarray(arr.view(np.uint8).reshape(-1, width).T).tobytes()


def unshuffle_bytes(blob: bytes, n: int, dtype: str, width: int = 8) -> np.ndarray:
    raw = np.frombuffer(blob, dtype=np.uint8).reshape(width, n)
    return np.ascontiguousarray(raw.T).view(dtype).reshape(n)


class Sum(Aggregator):
    """``sum``: total of numeric values. The state is ``(total, n)``; ``n`` (number of values)
    lets ``Snapshot.subtract`` drop a key once none of its values remain, even if the total is 0.
    """

    name = "sum"
    invertible = True

    def lift(self, value: Any) -> tuple:
        if not _is_number(value):
            raise TypeError(f"{self.name} values are numbers, got {type(value).__name__}")
        return (value, 1)

    def add(self, state: tuple, value: Any) -> tuple:
        if not _is_number(value):
            raise TypeError(f"{self.name} values are numbers, got {type(value).__name__}")
        return (state[0] + value, state[1] + 1)

    def merge(self, a: tuple, b: tuple) -> tuple:
        return (a[0] + b[0], a[1] + b[1])

    def zero(self) -> tuple:
        return (0, 0)

    def invert(self, a: tuple, b: tuple) -> tuple:
        return (a[0] - b[0], a[1] - b[1])

    def is_zero(self, state: tuple) -> bool:
        return state[1] == 0

    def serialize(self, state: tuple) -> list:
        return [_num_out(state[0]), state[1]]

    def deserialize(self, obj: Any) -> tuple:
        if not (isinstance(obj, tuple) and len(obj) == 2 and type(obj[1]) is int):
            raise ValueError(f"{self.name} state must be a (number, count) pair, got {obj!r}")
        return (_num_in(obj[0]), obj[1])

    def finalize(self, state: tuple) -> Any:
        return state[0]


class Avg(Sum):
    """``avg``: arithmetic mean, kept as ``(sum, count)`` so it merges and inverts exactly."""

    name = "avg"

    def finalize(self, state: tuple) -> float:
        return state[0] / state[1] if state[1] else float("nan")


class _Extremum(Aggregator):
    _pick: ClassVar[Callable[[Any, Any], Any]]

    def lift(self, value: Any) -> Any:
        if not _is_number(value):
            raise TypeError(f"{self.name} values are numbers, got {type(value).__name__}")
        return value

    def add(self, state: Any, value: Any) -> Any:
        return type(self)._pick(state, self.lift(value))

    def merge(self, a: Any, b: Any) -> Any:
        return type(self)._pick(a, b)

    def serialize(self, state: Any) -> Any:
        return _num_out(state)

    def deserialize(self, obj: Any) -> Any:
        return _num_in(obj)


class Min(_Extremum):
    """``min``: smallest numeric value (not invertible)."""

    name = "min"
    _pick = min


class Max(_Extremum):
    """``max``: largest numeric value (not invertible)."""

    name = "max"
    _pick = max


def _item_order(pair: tuple) -> tuple:
    # Largest weight first; ties broken by the item's encoding so any merge order gives the same
    # bytes (items of different types need not be comparable).
    return (-pair[1], _packb(pair[0], use_bin_type=True))


class TopK(Aggregator):
    """``topk(k)``: per key, the ``k`` inserted ``(item, weight)`` pairs of largest weight.

    A value is an ``(item, weight)`` pair (item: any msgpack-able value, weight: number); a bare
    number ``x`` stands for ``(x, x)``. Pairs are kept as a multiset (the same item inserted
    twice is two pairs; weights are not summed per item - use a tuple key with ``count`` and
    ``Snapshot.top`` for that). Ties on weight are broken by the item's msgpack encoding. The
    result is a list of pairs, heaviest first. Bounded: a state never holds more than k pairs.
    """

    name = "topk"

    def __init__(self, k: int = 10) -> None:
        if not isinstance(k, int) or k < 1:
            raise ValueError(f"topk needs a positive int k, got {k!r}")
        self.k = k

    def params(self) -> dict[str, Any]:
        return {"k": self.k}

    def lift(self, value: Any) -> tuple:
        if isinstance(value, tuple | list) and len(value) == 2 and _is_number(value[1]):
            check_packable(value[0])
            return ((freeze(value[0]), value[1]),)
        if _is_number(value):
            return ((value, value),)
        raise TypeError(f"topk values are (item, weight) pairs or numbers, got {value!r}")

    def merge(self, a: tuple, b: tuple) -> tuple:
        return tuple(heapq.nsmallest(self.k, a + b, key=_item_order))

    def serialize(self, state: tuple) -> list:
        return [[item, _num_out(w)] for item, w in state]

    def deserialize(self, obj: Any) -> tuple:
        if not isinstance(obj, tuple) or len(obj) > self.k:
            raise ValueError(f"topk state must be at most {self.k} pairs")
        return tuple((item, _num_in(w)) for item, w in obj)

    def finalize(self, state: tuple) -> list:
        return list(state)


def freeze(v: Any) -> Any:
    # msgpack decodes arrays as tuples; freezing lists on the way in keeps states comparable.
    if isinstance(v, list | tuple):
        return tuple(freeze(x) for x in v)
    return v


def _set_order(v: Any) -> bytes:
    return _packb(v, use_bin_type=True)


class CollectSet(Aggregator):
    """``collect_set``: the exact set of distinct values per key (a ``frozenset``).

    Values must be hashable and msgpack-able (lists become tuples). Not invertible.
    """

    name = "collect_set"
    mutable_state = True

    def lift(self, value: Any) -> set:
        value = freeze(value)
        check_packable(value)
        return {value}

    def add(self, state: set, value: Any) -> set:
        value = freeze(value)
        if value not in state:
            check_packable(value)
            state.add(value)
        return state

    def merge(self, a: set, b: set) -> set:
        a |= b
        return a

    def copy(self, state: set) -> set:
        return set(state)

    def serialize(self, state: set) -> list:
        # sorted by encoding: equal sets always produce identical snapshot bytes
        return sorted(state, key=_set_order)

    def deserialize(self, obj: Any) -> set:
        if not isinstance(obj, tuple):
            raise ValueError(f"{self.name} state must be an array")
        return set(obj)

    def finalize(self, state: set) -> Any:
        return frozenset(state)


class Distinct(CollectSet):
    """``distinct``: exact number of distinct values per key (COUNT(DISTINCT v)); keeps the set."""

    name = "distinct"

    def finalize(self, state: set) -> int:
        return len(state)


class Composite(Aggregator):
    """``composite``: several aggregators side by side, one state per part, e.g. a count and a
    sum per key in one snapshot.

    ``parts`` is a sequence of ``(name, params)`` pairs (registered aggregator names; no
    nesting). A value is a sequence with one entry per part; an entry ``None`` leaves its
    part untouched (an absent part, e.g. SQL's NULL argument). The state is a tuple of part
    states, ``None`` for a part that has seen no value yet; ``finalize`` gives the tuple of
    finalized parts (``None`` for absent ones). Invertible only when every part is; a part
    that nets to zero becomes absent again, and a key is zero when all its parts are.
    """

    name = "composite"

    def __init__(self, parts: Any = ()) -> None:
        if not isinstance(parts, list | tuple) or not parts:
            raise ValueError("composite needs a non-empty list of [name, params] parts")
        aggs = []
        for part in parts:
            if not (isinstance(part, list | tuple) and len(part) == 2):
                raise ValueError(f"composite parts are [name, params] pairs, got {part!r}")
            pname, pparams = part
            if pname == self.name:
                raise ValueError("composite parts cannot be composite")
            if not isinstance(pparams, dict):
                raise ValueError(f"composite part params must be a map, got {pparams!r}")
            aggs.append(get_aggregator(pname, dict(pparams) or None))
        self.parts: tuple[Aggregator, ...] = tuple(aggs)
        self.invertible = all(a.invertible for a in aggs)  # type: ignore[misc]
        self.mutable_state = any(a.mutable_state for a in aggs)  # type: ignore[misc]

    def params(self) -> dict[str, Any]:
        return {"parts": [[a.name, a.params()] for a in self.parts]}

    def __hash__(self) -> int:
        return hash((self.name, self.parts))

    def lift(self, value: Any) -> tuple:
        if not isinstance(value, list | tuple) or len(value) != len(self.parts):
            raise TypeError(
                f"composite values are sequences of {len(self.parts)} entries, got {value!r}"
            )
        return tuple(
            None if v is None else a.lift(v) for a, v in zip(self.parts, value, strict=True)
        )

    def add(self, state: tuple, value: Any) -> tuple:
        return self.merge(state, self.lift(value))

    def merge(self, a: tuple, b: tuple) -> tuple:
        out = []
        for agg, x, y in zip(self.parts, a, b, strict=True):
            if y is None:
                out.append(x)
            elif x is None:
                out.append(agg.copy(y))
            else:
                s = agg.merge(x, y)
                # a negated pane (Snapshot.subtract) can net a part to nothing: absent again
                out.append(None if self.invertible and agg.is_zero(s) else s)
        return tuple(out)

    def zero(self) -> tuple:
        return (None,) * len(self.parts)

    def invert(self, a: tuple, b: tuple) -> tuple:
        if not self.invertible:
            raise TypeError(f"aggregator {self.name!r} with these parts is not invertible")
        out = []
        for agg, x, y in zip(self.parts, a, b, strict=True):
            if y is None:
                out.append(x)
                continue
            s = agg.invert(agg.zero() if x is None else x, y)
            out.append(None if agg.is_zero(s) else s)
        return tuple(out)

    def is_zero(self, state: tuple) -> bool:
        return all(s is None or a.is_zero(s) for a, s in zip(self.parts, state, strict=True))

    def serialize(self, state: tuple) -> list:
        return [
            None if s is None else a.serialize(s) for a, s in zip(self.parts, state, strict=True)
        ]

    def deserialize(self, obj: Any) -> tuple:
        if not isinstance(obj, tuple) or len(obj) != len(self.parts):
            raise ValueError(f"composite state must be {len(self.parts)} parts, got {obj!r}")
        return tuple(
            None if s is None else a.deserialize(s) for a, s in zip(self.parts, obj, strict=True)
        )

    def copy(self, state: tuple) -> tuple:
        return tuple(
            None if s is None else a.copy(s) for a, s in zip(self.parts, state, strict=True)
        )

    def finalize(self, state: tuple) -> tuple:
        return tuple(
            None if s is None else a.finalize(s) for a, s in zip(self.parts, state, strict=True)
        )


_REGISTRY: dict[str, Callable[..., Aggregator]] = {
    "count": Count,
    "sum": Sum,
    "avg": Avg,
    "min": Min,
    "max": Max,
    "topk": TopK,
    "distinct": Distinct,
    "collect_set": CollectSet,
    "composite": Composite,
}


def register_aggregator(name: str, factory: Callable[..., Aggregator]) -> None:
    """Make ``name`` resolvable (by the tree constructor and ``Snapshot.from_bytes``).

    ``factory(**params)`` must rebuild an aggregator equal to the one that wrote a snapshot.
    """
    if not isinstance(name, str) or not name:
        raise ValueError("aggregator names are non-empty strings")
    _REGISTRY[name] = factory


def aggregator_names() -> list[str]:
    return sorted(_REGISTRY)


def get_aggregator(spec: str | Aggregator, params: dict[str, Any] | None = None) -> Aggregator:
    """Resolve an aggregator name (with optional constructor params) or pass an instance through."""
    if isinstance(spec, Aggregator):
        if params:
            raise ValueError("params are only accepted with an aggregator name")
        return spec
    if not isinstance(spec, str):
        raise TypeError(f"aggregator must be a name or an Aggregator, got {type(spec).__name__}")
    try:
        factory = _REGISTRY[spec]
    except KeyError:
        raise ValueError(
            f"unknown aggregator {spec!r}; known: {', '.join(aggregator_names())}"
        ) from None
    return factory(**(params or {}))
