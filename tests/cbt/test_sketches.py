"""The DataSketches aggregators (cbt/sketches.py): any tree shape and merge order gives the same
HLL estimate and KLL / frequent-items answers within their stated bounds of the exact ones;
states survive snapshots (the wire, checkpoints, spills); hostile binaries are refused with a
ValueError and counted, never a crash."""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import msgpack
import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from cbt import (
    ApproxDistinct,
    ApproxQuantiles,
    ApproxTopK,
    CompressedBufferTree,
    Snapshot,
    SnapshotError,
    rejected_binaries,
)
from cbt.sketch_bytes import kll_capacity
from cbt.sketches import hll_rse, kll_rank_error

# derandomized: the bounds below hold with overwhelming probability, not always, so every run
# checks the same examples (a failure is a real regression, not a 1-in-10^5 draw)
PROPERTY = settings(
    max_examples=40,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def merge_tree(agg: Any, leaves: list[Any], rng: random.Random) -> Any:
    """Merge ``leaves`` along a random binary tree, each merge of random order, some states
    taking a trip through their binary on the way (a hop to another agent)."""
    states = list(leaves)
    while len(states) > 1:
        i, j = rng.sample(range(len(states)), 2)
        a, b = states[i], states[j]
        if rng.random() < 0.5:
            a, b = b, a
        if rng.random() < 0.3:
            b = agg.deserialize(agg.serialize(b))
        merged = agg.merge(agg.copy(a), b)
        states = [s for n, s in enumerate(states) if n not in (i, j)] + [merged]
    return states[0]


def leaves_of(agg: Any, values: list[Any], rng: random.Random, pieces: int) -> list[Any]:
    """A random partition of ``values`` into ``pieces`` non-empty leaves, each fed one by one."""
    cuts = sorted(rng.sample(range(1, len(values)), pieces - 1)) if pieces > 1 else []
    shuffled = values[:]
    rng.shuffle(shuffled)
    out = []
    for lo, hi in zip([0, *cuts], [*cuts, len(values)], strict=True):
        state = agg.lift(shuffled[lo])
        for v in shuffled[lo + 1 : hi]:
            state = agg.add(state, v)
        out.append(state)
    return out


# ---- HLL ---------------------------------------------------------------------------------------


@PROPERTY
@given(
    n=st.integers(1, 6000),
    dup=st.integers(1, 3),
    seed=st.integers(0, 2**32 - 1),
    lg_k=st.sampled_from([4, 8, 12]),
)
@example(n=6000, dup=2, seed=1, lg_k=12)  # past LIST and SET: the dense registers
@example(n=300, dup=3, seed=2, lg_k=8)
def test_hll_any_tree_gives_one_estimate_within_its_error(
    n: int, dup: int, seed: int, lg_k: int
) -> None:
    agg = ApproxDistinct(lg_k)
    rng = random.Random(seed)
    values: list[Any] = [f"user{i}" for i in range(n)] * dup
    estimates = set()
    for _ in range(3):
        pieces = rng.randint(1, min(16, len(values)))
        estimates.add(agg.finalize(merge_tree(agg, leaves_of(agg, values, rng, pieces), rng)))
    assert len(estimates) == 1  # the registers are a max: tree shape and order do not matter
    (est,) = estimates
    # 4 relative standard errors (the benchmark checks the 3-RSE figure over many runs)
    assert abs(est - n) <= max(4 * hll_rse(lg_k) * n, 1.0)


def test_hll_values_hash_like_python_equality() -> None:
    agg = ApproxDistinct(12)
    state = agg.lift(1)
    for v in (1.0, True, "1", 2**70, (1, 2), [1, 2]):
        state = agg.add(state, v)
    # 1, 1.0 and True are one value (as in a Python set); "1", 2**70 and (1, 2) = [1, 2] three
    assert round(agg.finalize(state)) == 4


# ---- KLL ---------------------------------------------------------------------------------------


def rank_error(sorted_values: np.ndarray, q: float, rank: float) -> float:
    """How far ``q``'s normalized rank in the data is from ``rank`` (0 when some position of
    ``q`` among equal values has exactly that rank)."""
    n = len(sorted_values)
    lo = np.searchsorted(sorted_values, q, side="left") / n
    hi = np.searchsorted(sorted_values, q, side="right") / n
    return 0.0 if lo <= rank <= hi else min(abs(lo - rank), abs(hi - rank))


@PROPERTY
@given(
    n=st.integers(1, 30_000),
    seed=st.integers(0, 2**32 - 1),
    k=st.sampled_from([50, 200]),
    dist=st.sampled_from(["normal", "ints", "skewed"]),
)
@example(n=30_000, seed=1, k=200, dist="normal")  # many compactions
@example(n=20_000, seed=2, k=50, dist="skewed")
@example(n=5_000, seed=3, k=50, dist="ints")
def test_kll_any_tree_stays_within_the_rank_error(n: int, seed: int, k: int, dist: str) -> None:
    ranks = (0.0, 0.01, 0.25, 0.5, 0.9, 0.99, 1.0)
    agg = ApproxQuantiles(k, ranks, True)
    gen = np.random.default_rng(seed)
    data = {
        "normal": gen.normal(size=n),
        "ints": gen.integers(0, 50, size=n).astype(float),
        "skewed": gen.pareto(1.5, size=n),
    }[dist]
    rng = random.Random(seed)
    exact = np.sort(data)
    bound = kll_rank_error(k)
    for _ in range(2):
        pieces = rng.randint(1, min(16, n))
        state = merge_tree(agg, leaves_of(agg, data.tolist(), rng, pieces), rng)
        assert state.n == n
        got = agg.finalize(state)
        assert got[0] == exact[0] and got[-1] == exact[-1]  # min and max are exact
        for q, r in zip(got, ranks, strict=True):
            # the bound is the 99th percentile of a single quantile's error: 2x never fails
            assert rank_error(exact, q, r) <= 2 * bound, (q, r, bound)


def test_kll_batch_update_equals_the_rank_guarantee_of_single_updates() -> None:
    agg = ApproxQuantiles(200, (0.5,), False)
    data = np.random.default_rng(7).normal(size=50_000)
    state = agg.add_array(agg.empty(), data)
    assert state.n == len(data)
    assert rank_error(np.sort(data), agg.finalize(state), 0.5) <= kll_rank_error(200)
    assert agg.finalize(agg.empty()) is None


# ---- frequent items ----------------------------------------------------------------------------


@PROPERTY
@given(
    counts=st.lists(st.integers(1, 400), min_size=1, max_size=60),
    seed=st.integers(0, 2**32 - 1),
    lg=st.sampled_from([3, 4, 10]),
)
@example(counts=[400, 300, *range(1, 50)], seed=1, lg=3)  # a full map: estimates, not counts
def test_frequent_items_any_tree_keeps_the_error_guarantee(
    counts: list[int], seed: int, lg: int
) -> None:
    agg = ApproxTopK(3, lg)
    values: list[Any] = [f"i{j}" for j, c in enumerate(counts) for _ in range(c)]
    truth = Counter(values)
    total = len(values)
    rng = random.Random(seed)
    pieces = rng.randint(1, min(16, total))
    state = merge_tree(agg, leaves_of(agg, values, rng, pieces), rng)
    assert state.total_weight == total  # nothing lost, even when a purge emptied a map
    slack = agg.epsilon() * total
    for item, true in truth.items():
        assert state.lower_bound(item) <= true <= state.upper_bound(item)
        assert abs(state.sk.get_estimate(item) - true) <= slack
    top = agg.finalize(state)
    assert len(top) <= 3
    for item, est in top:
        assert abs(est - truth[item]) <= slack
    # no false negatives: an item heavier than every other by more than 2 * slack is first
    (first, c1), *rest = [*truth.most_common(2), (None, 0)]
    if c1 - rest[0][1] > 2 * slack:
        assert top[0][0] == first
    if len(truth) <= 0.75 * (1 << lg):  # the map never filled: exact
        assert top == sorted(([i, c] for i, c in truth.items()), key=lambda p: (-p[1], p[0]))[:3]


def test_a_purge_that_empties_the_map_loses_no_weight() -> None:
    """769 distinct items seen once fill a 1024-slot map; its purge removes them all and
    DataSketches then calls the sketch empty (a merge would skip it): the state keeps the
    weight and the error aside."""
    agg = ApproxTopK(3)
    state = agg.empty()
    for i in range(769):
        state = agg.add(state, f"x{i}")
    assert state.total_weight == 769 and state.lost_error > 0
    other = agg.add(agg.lift("a"), "a")
    merged = agg.merge(agg.copy(other), agg.deserialize(agg.serialize(state)))
    assert merged.total_weight == 771
    assert merged.upper_bound("x1") >= 1
    assert agg.finalize(merged) == [["a", 2]]


def test_top_k_items_are_counted_by_their_text() -> None:
    agg = ApproxTopK(5)
    state = agg.lift("a")
    for v in ("a", 1, 1.0, "1", True, "true", 2.5):
        state = agg.add(state, v)
    assert agg.finalize(state) == [["1", 3], ["a", 2], ["true", 2], ["2.5", 1]]
    with pytest.raises(TypeError):
        agg.add(state, [1, 2])


# ---- in the tree: snapshots, merges, the wire --------------------------------------------------


@pytest.mark.parametrize("name", ["approx_percentile", "approx_distinct", "approx_top_k"])
def test_trees_and_snapshot_merges_in_any_order(name: str) -> None:
    params = {"approx_percentile": {"k": 200, "ranks": [0.5], "array": False}}.get(name, {})
    rng = random.Random(3)
    records = [(f"g{rng.randrange(4)}", rng.randrange(500)) for _ in range(8000)]
    snaps = []
    for piece in range(6):
        tree = CompressedBufferTree(name, aggregator_params=params or None, root_capacity=8)
        for key, value in records[piece::6]:
            tree.insert(key, value)
        snaps.append(Snapshot.from_bytes(tree.flush().to_bytes()))  # the wire
    results = []
    for order in range(3):
        rng.shuffle(snaps)
        acc = snaps[0]
        for s in snaps[1:]:
            acc = acc.merge(s) if order % 2 else s.merge(acc)
        results.append(Snapshot.from_bytes(acc.to_bytes()).to_dict())
    by_key: dict[str, list[int]] = {}
    for key, value in records:
        by_key.setdefault(key, []).append(value)
    for got in results:
        assert sorted(got) == sorted(by_key)
        for key, values in by_key.items():
            if name == "approx_distinct":
                assert got[key] == results[0][key]  # identical whatever the order
                assert abs(got[key] - len(set(values))) <= 4 * hll_rse(12) * len(set(values))
            elif name == "approx_percentile":
                err = rank_error(np.sort(values), got[key], 0.5)
                assert err <= 2 * kll_rank_error(200)
            else:
                truth = Counter(map(str, values))
                for item, est in got[key]:
                    assert est == truth[item]  # fewer items than slots: exact


# ---- hostile bytes -----------------------------------------------------------------------------


def _valid_binaries() -> list[tuple[Any, bytes]]:
    out = []
    rng = random.Random(5)
    for agg in (ApproxQuantiles(200), ApproxDistinct(12), ApproxTopK(3)):
        for n in (0, 1, 7, 50, 3000):
            state = agg.empty()
            for _ in range(n):
                state = agg.add(state, rng.randrange(10 * n + 1))
            out.append((agg, agg.serialize(state)))
    return out


VALID = _valid_binaries()


@settings(max_examples=400, deadline=None, derandomize=True)
@given(
    which=st.integers(0, len(VALID) - 1),
    edits=st.lists(
        st.tuples(st.sampled_from(["set", "cut", "add"]), st.integers(0, 2**16), st.binary()),
        min_size=1,
        max_size=6,
    ),
)
def test_mutated_binaries_are_refused_or_read_never_a_crash(which: int, edits: list) -> None:
    agg, blob = VALID[which]
    data = bytearray(blob)
    for op, pos, extra in edits:
        if op == "set" and data:
            data[pos % len(data)] = extra[0] if extra else pos & 0xFF
        elif op == "cut":
            del data[pos % (len(data) + 1) :]
        else:
            data[pos % (len(data) + 1) : pos % (len(data) + 1)] = extra
    try:
        state = agg.deserialize(bytes(data))
    except ValueError as e:
        assert "malformed" in str(e)
        return
    # accepted: a well-formed sketch that reads, merges and serializes like any other
    agg.finalize(state)
    agg.merge(agg.copy(state), state)
    agg.serialize(state)


@settings(max_examples=200, deadline=None, derandomize=True)
@given(blob=st.binary(max_size=200), which=st.integers(0, 2))
def test_random_bytes_are_refused(blob: bytes, which: int) -> None:
    agg = (ApproxQuantiles(200), ApproxDistinct(12), ApproxTopK(3))[which]
    before = rejected_binaries()
    with pytest.raises(ValueError, match="malformed"):
        agg.deserialize(blob)
    assert rejected_binaries() == before + 1


def test_sketches_of_another_size_are_refused() -> None:
    """One lg_k / k per job: a sketch of another size is refused, never unioned (the C++ HLL
    union's mixed-lg_k regression, datasketches-cpp #512 / #522, is never reached)."""
    for mine, other in (
        (ApproxDistinct(12), ApproxDistinct(11)),
        (ApproxQuantiles(200), ApproxQuantiles(100)),
        (ApproxTopK(3, 10), ApproxTopK(3, 11)),
    ):
        state = other.lift(1)
        for i in range(600):
            state = other.add(state, i)
        with pytest.raises(ValueError, match="this job's"):
            mine.deserialize(other.serialize(state))


def test_a_hostile_sketch_in_a_snapshot_is_a_snapshot_error() -> None:
    """A snapshot whose checksum holds (a hostile sender computes it) but whose sketch binary
    is malformed is a SnapshotError: the receiver answers 422, never crashes."""
    tree = CompressedBufferTree("approx_distinct")
    tree.insert("k", "v")
    raw = tree.flush().to_bytes()
    agg = ApproxDistinct()
    bad = agg.serialize(agg.lift("v")) + b"\x00"  # a length that no longer matches
    before = rejected_binaries()
    with pytest.raises(SnapshotError, match="malformed HLL"):
        Snapshot.from_bytes(_rewritten(raw, values=[bad]))
    assert rejected_binaries() == before + 1


def test_pre_datasketches_hll_snapshots_are_refused_clearly() -> None:
    """A snapshot of the former register-array approx_distinct (params ``precision``) says
    what it is instead of failing obscurely."""
    with pytest.raises(ValueError, match="former register-array HyperLogLog"):
        ApproxDistinct(precision=10)
    tree = CompressedBufferTree("count")
    tree.insert("k", 1)
    old = _rewritten(
        tree.flush().to_bytes(),
        aggregator=("approx_distinct", {"precision": 10}),
        values=[bytes(1024)],
    )
    with pytest.raises(SnapshotError, match="former register-array"):
        Snapshot.from_bytes(old)


def _rewritten(
    raw: bytes, aggregator: tuple[str, dict] | None = None, values: list[bytes] | None = None
) -> bytes:
    """``raw`` (a one-key snapshot) with its header's aggregator and / or its values column
    replaced, lengths and checksum recomputed: what a hostile or old sender could send."""
    import zlib

    import zstandard

    from cbt.snapshot import _FIXED, _TRAILER

    magic, version, flags, _total, hlen = _FIXED.unpack_from(raw)
    header = msgpack.unpackb(raw[_FIXED.size : _FIXED.size + hlen], raw=False)
    cols = raw[_FIXED.size + hlen : len(raw) - _TRAILER.size]
    if aggregator is not None:
        header["aggregator"], header["params"] = aggregator
    if values is not None:
        lengths = [c[0] for c in header["columns"]]
        head = cols[: sum(lengths[:3])]
        plain = msgpack.packb(values, use_bin_type=True)
        packed = zstandard.ZstdCompressor().compress(plain)
        header["columns"][3] = [len(packed), len(plain)]
        cols = head + packed
    new_header = msgpack.packb(header, use_bin_type=True)
    total = _FIXED.size + len(new_header) + len(cols) + _TRAILER.size
    body = _FIXED.pack(magic, version, flags, total, len(new_header)) + new_header + cols
    return body + _TRAILER.pack(zlib.crc32(body))


def test_kll_capacity_matches_the_library() -> None:
    for k in (8, 200, 1000):
        agg = ApproxQuantiles(k)
        state = agg.add_array(agg.empty(), np.random.default_rng(k).normal(size=100_000))
        blob = agg.serialize(state)
        levels = blob[18]
        first = int.from_bytes(blob[20:24], "little")
        assert len(blob) == 20 + 4 * levels + 16 + 8 * (kll_capacity(k, 8, levels) - first)
