"""Property tests: any sequence of insert / insert_many / flush / empty / merge / subtract gives
exactly what an independent dict-of-lists reference gives, for every aggregator, with the
real hash and with tiny hash functions that force collisions."""

from __future__ import annotations

import heapq
from typing import Any

import datasketches
import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cbt import CompressedBufferTree, Snapshot, xxh3_64
from cbt.sketches import hll_item

# ---- an independent reference: every key's inserted values, in order -------------------


def _enc(v: Any) -> bytes:
    return msgpack.packb(v, use_bin_type=True)


def _freeze(v: Any) -> Any:
    return tuple(_freeze(x) for x in v) if isinstance(v, list | tuple) else v


def ref_value(name: str, vals: list) -> Any:
    if name == "count":
        return sum(vals)
    if name == "sum":
        return sum(vals)
    if name == "avg":
        return sum(vals) / len(vals)
    if name == "min":
        return min(vals)
    if name == "max":
        return max(vals)
    if name == "topk":
        pairs = [(_freeze(v[0]), v[1]) if isinstance(v, tuple) else (v, v) for v in vals]
        return heapq.nsmallest(3, pairs, key=lambda p: (-p[1], _enc(p[0])))
    if name == "distinct":
        return len({_freeze(v) for v in vals})
    if name == "collect_set":
        return frozenset(_freeze(v) for v in vals)
    if name == "approx_distinct":
        sketch = datasketches.hll_union(6)
        for v in vals:
            sketch.update(hll_item(v))
        return sketch.get_estimate()
    raise AssertionError(name)


def ref_result(name: str, ref: dict) -> dict:
    return {k: ref_value(name, vals) for k, vals in ref.items() if vals}


def snap_result(name: str, snap: Snapshot) -> dict:
    if name == "approx_distinct":
        keys = snap.keys()  # a Snapshot iterates (key, value) pairs, not keys
        return {k: snap.state(k).get_estimate() for k in keys}
    return snap.to_dict()


def check_snapshot(name: str, snap: Snapshot, ref: dict) -> None:
    expected = ref_result(name, ref)
    got = snap_result(name, snap)
    assert got == expected
    assert len(snap) == len(expected)
    assert list(snap.hashes) == sorted(snap.hashes)
    for k, v in expected.items():
        assert k in snap
        if name != "approx_distinct":
            assert snap[k] == v
            assert snap.get(k) == v
    assert "no-such-key-xyz" not in snap
    assert snap.get("no-such-key-xyz", 42) == 42


# ---- strategies -------------------------------------------------------------------------

KEYS = st.one_of(
    st.text(alphabet="ab", max_size=3),
    st.binary(max_size=2),
    st.integers(-3, 3),
    st.sampled_from([2**63, -(2**63), 2**64 - 1, 10**12]),
    st.tuples(st.sampled_from(["x", "y"]), st.integers(0, 2)),
    st.tuples(st.tuples(st.just("n")), st.binary(max_size=1)),
)

_SET_VALUES = st.one_of(
    st.integers(0, 6), st.text(alphabet="pq", max_size=2), st.tuples(st.integers(0, 2))
)
VALUES = {
    "count": st.integers(1, 4),
    "sum": st.integers(-50, 50),
    "avg": st.integers(-50, 50),
    "min": st.one_of(st.integers(-50, 50), st.floats(-5, 5, allow_nan=False)),
    "max": st.one_of(st.integers(-50, 50), st.floats(-5, 5, allow_nan=False)),
    "topk": st.one_of(
        st.tuples(st.sampled_from(["i", "j", b"k", 3]), st.integers(0, 5)), st.integers(0, 9)
    ),
    "distinct": _SET_VALUES,
    "collect_set": _SET_VALUES,
    "approx_distinct": _SET_VALUES,
}
PARAMS = {"topk": {"k": 3}, "approx_distinct": {"lg_k": 6}}
AGGREGATORS = sorted(VALUES)


def tiny_hash(data: bytes) -> int:
    """Only four distinct hashes: nearly every pair of keys collides."""
    return xxh3_64(data) & 3


def const_hash(data: bytes) -> int:
    return 7


def high_hash(data: bytes) -> int:
    """Two hashes at the top of the 64-bit range (exercises unsigned handling)."""
    return (2**64 - 1) - (xxh3_64(data) & 1)


HASHES = [None, tiny_hash, const_hash, high_hash]

TREE_SHAPES = st.fixed_dictionaries(
    {
        "root_capacity": st.sampled_from([2, 3, 7, 1000]),
        "buffer_entries": st.sampled_from([2, 5, 40]),
        "leaf_capacity": st.sampled_from([2, 4, 9, 100]),
        "fanout": st.sampled_from([4, 8]),
    }
)


def ops_strategy(name: str) -> st.SearchStrategy:
    pair = st.tuples(KEYS, VALUES[name])
    return st.lists(
        st.one_of(
            st.tuples(st.just("insert"), pair),
            st.tuples(st.just("insert_many"), st.lists(pair, max_size=25)),
            st.tuples(st.just("insert_many_default"), st.lists(KEYS, max_size=10)),
            st.tuples(st.just("flush"), st.none()),
            st.tuples(st.just("empty"), st.none()),
            st.tuples(st.just("merge"), st.integers(0, 10)),
            st.tuples(st.just("subtract"), st.integers(0, 10)),
        ),
        max_size=30,
    )


PROPERTY = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _default_value(name: str) -> Any:
    return 1


@pytest.mark.parametrize("hash_index", range(len(HASHES)))
@pytest.mark.parametrize("name", AGGREGATORS)
@PROPERTY
@given(data=st.data())
def test_operations_match_reference(name: str, hash_index: int, data: st.DataObject) -> None:
    shape = data.draw(TREE_SHAPES)
    ops = data.draw(ops_strategy(name))
    hash_function = HASHES[hash_index]
    tree = CompressedBufferTree(
        name, aggregator_params=PARAMS.get(name), hash_function=hash_function, **shape
    )
    ref: dict[Any, list] = {}
    # (snapshot, reference at that time, batch number): merge/subtract operands
    taken: list[tuple[Snapshot, dict, int]] = []
    batch = 0
    for op, arg in ops:
        if op == "insert":
            k, v = arg
            tree.insert(k, v)
            ref.setdefault(k, []).append(v)
        elif op == "insert_many":
            tree.insert_many([k for k, _ in arg], [v for _, v in arg])
            for k, v in arg:
                ref.setdefault(k, []).append(v)
        elif op == "insert_many_default":
            tree.insert_many(arg)
            for k in arg:
                ref.setdefault(k, []).append(_default_value(name))
        elif op == "flush":
            snap = tree.flush()
            check_snapshot(name, snap, ref)
            taken.append((snap, {k: list(v) for k, v in ref.items()}, batch))
        elif op == "empty":
            tree.empty()
            ref = {}
            batch += 1
        elif op == "merge" and taken:
            a, ra, _ = taken[arg % len(taken)]
            b, rb, _ = taken[-1]
            merged = a.merge(b)
            rm = {k: ra.get(k, []) + rb.get(k, []) for k in set(ra) | set(rb)}
            check_snapshot(name, merged, rm)
            # inputs are untouched by merging
            check_snapshot(name, a, ra)
            check_snapshot(name, b, rb)
        elif op == "subtract" and taken:
            a, ra, ba = taken[arg % len(taken)]
            b, rb, bb = taken[-1]
            if not tree.agg.invertible:
                with pytest.raises(TypeError):
                    b.subtract(a)
                continue
            if ba != bb:
                continue
            # a was flushed before b in the same batch: its lists are prefixes of b's
            window = b.subtract(a)
            rw = {k: vals[len(ra.get(k, [])) :] for k, vals in rb.items()}
            check_snapshot(name, window, rw)
    check_snapshot(name, tree.flush(), ref)
    assert tree.stats()["inserts"] >= 0


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(KEYS, st.integers(1, 3)), max_size=40),
    st.lists(st.tuples(KEYS, st.integers(1, 3)), max_size=40),
)
def test_count_subtract_of_unrelated_snapshots(a: list, b: list) -> None:
    """Subtracting any count snapshot gives the Counter difference (zero counts dropped,
    negative counts kept)."""
    ta, tb = CompressedBufferTree("count", root_capacity=3), CompressedBufferTree("count")
    ca: dict = {}
    cb: dict = {}
    for k, v in a:
        ta.insert(k, v)
        ca[k] = ca.get(k, 0) + v
    for k, v in b:
        tb.insert(k, v)
        cb[k] = cb.get(k, 0) + v
    diff = {k: ca.get(k, 0) - cb.get(k, 0) for k in set(ca) | set(cb)}
    expected = {k: v for k, v in diff.items() if v}
    assert ta.flush().subtract(tb.flush()).to_dict() == expected


@pytest.mark.parametrize("hash_function", HASHES)
@settings(max_examples=30, deadline=None)
@given(keys=st.lists(KEYS, max_size=200), k=st.integers(0, 6))
def test_count_top_k(hash_function: Any, keys: list, k: int) -> None:
    tree = CompressedBufferTree(
        "count", hash_function=hash_function, root_capacity=5, buffer_entries=8, leaf_capacity=6
    )
    tree.insert_many(keys)
    counts: dict = {}
    for key in keys:
        counts[key] = counts.get(key, 0) + 1
    top = tree.flush().top(k)
    expected = sorted(counts.values(), reverse=True)[:k]
    assert [v for _, v in top] == expected
    assert all(counts[key] == v for key, v in top)
    assert len({key for key, _ in top}) == len(top)
