"""Tree API details: input forms, validation, bounded memory, stats, aggregator behaviour."""

from __future__ import annotations

import random
import sys
from collections import Counter
from typing import Any

import datasketches
import numpy as np
import pytest

from cbt import (
    Aggregator,
    ApproxDistinct,
    CompressedBufferTree,
    Snapshot,
    TopK,
    aggregator_names,
    get_aggregator,
)


def test_insert_many_accepts_numpy_and_iterables() -> None:
    t = CompressedBufferTree("count", root_capacity=4)
    t.insert_many(np.array(["a", "b", "a"]))
    t.insert_many(np.array([5, 6, 5, 5]))
    t.insert_many(iter(["a", "z"]))
    t.insert_many(["b"], np.array([10]))
    assert t.flush().to_dict() == {"a": 3, "b": 11, 5: 3, 6: 1, "z": 1}
    s = CompressedBufferTree("sum")
    s.insert_many(np.array(["p", "q", "p"]), np.array([1.5, 2.0, 3.0]))
    assert s.flush().to_dict() == {"p": 4.5, "q": 2.0}


@pytest.mark.parametrize("name", ["count", "sum", "max"])
@pytest.mark.parametrize("bad", [1.5, True, None, [1], frozenset()])
def test_invalid_keys_raise_and_earlier_pairs_stay(name: str, bad: object) -> None:
    t = CompressedBufferTree(name, root_capacity=1000)
    t.insert_many(["keep"], [1])
    with pytest.raises(TypeError):
        t.insert_many(["a", "b", bad, "c"], [1, 1, 1, 1])
    with pytest.raises(TypeError):
        t.insert_many(["d", bad, "e"])
    with pytest.raises(TypeError):
        t.insert(bad, 1)
    expected = {"keep": 1, "a": 1, "b": 1, "d": 1}
    assert t.flush().to_dict() == expected
    assert t.stats()["inserts"] == 4


def test_invalid_values_raise() -> None:
    with pytest.raises(TypeError):
        CompressedBufferTree("count").insert("a", 1.5)
    with pytest.raises(TypeError):
        CompressedBufferTree("sum").insert_many(["a"], ["x"])
    with pytest.raises(ValueError):
        CompressedBufferTree("sum").insert_many(["a", "b"], [1])
    with pytest.raises(ValueError):
        CompressedBufferTree("nope")
    with pytest.raises(ValueError):
        TopK(0)


def test_root_stays_bounded_and_memory_beats_a_counter() -> None:
    rng = random.Random(7)
    keys = [f"/catalog/{rng.choice(['toys', 'books', 'games'])}/item-{i:07d}" for i in range(60000)]
    t = CompressedBufferTree("count", root_capacity=2000, buffer_entries=8000, leaf_capacity=8000)
    for lo in range(0, len(keys), 5000):
        t.insert_many(keys[lo : lo + 5000])
        assert t.stats()["root_entries"] <= 2000 + 2000
    t.flush()
    counter = Counter(keys)
    counter_bytes = sys.getsizeof(counter) + sum(map(sys.getsizeof, counter))
    assert t.memory_bytes() < counter_bytes / 4
    stats = t.stats()
    for field in ("inserts", "flushes", "root_spills", "compression_ratio", "height", "leaves"):
        assert field in stats
    assert stats["inserts"] == 60000 and stats["flushes"] == 1
    assert stats["compression_ratio"] > 2
    assert stats["height"] >= 2


def test_flush_is_repeatable_and_empty_resets() -> None:
    t = CompressedBufferTree("count", root_capacity=3, buffer_entries=4, leaf_capacity=4)
    t.insert_many(list("abcdefghij") * 3)
    a = t.flush()
    assert a == t.flush()
    t.empty()
    assert len(t.flush()) == 0
    assert a.to_dict() == dict.fromkeys("abcdefghij", 3)  # the old snapshot is unaffected


def test_snapshot_merge_does_not_mutate_inputs_with_mutable_states() -> None:
    t1 = CompressedBufferTree("collect_set")
    t1.insert_many(["k", "k"], [1, 2])
    t2 = CompressedBufferTree("collect_set")
    t2.insert("k", 3)
    a, b = t1.flush(), t2.flush()
    m = a.merge(b)
    assert m["k"] == {1, 2, 3} and a["k"] == {1, 2} and b["k"] == {3}
    assert m.merge(a)["k"] == {1, 2, 3} and a["k"] == {1, 2}


def test_merge_rejects_incompatible_snapshots() -> None:
    def one(agg: str, **kw: Any) -> Any:
        tree = CompressedBufferTree(agg, **kw)
        tree.insert("k", 1)
        return tree.flush()

    a = one("count")
    with pytest.raises(ValueError):
        a.merge(one("sum"))
    with pytest.raises(ValueError):
        a.merge(one("count", hash_function=lambda b: 1))
    # an empty snapshot is merge's identity, whatever its aggregator
    assert a.merge(CompressedBufferTree("sum").flush()) is a
    assert CompressedBufferTree("max").flush().merge(a) is a
    with pytest.raises(TypeError):
        CompressedBufferTree("max").flush().subtract(CompressedBufferTree("max").flush())


def test_hll_estimates_within_error_and_merges_exactly() -> None:
    t1 = CompressedBufferTree("approx_distinct", aggregator_params={"lg_k": 12})
    t2 = CompressedBufferTree("hll", aggregator_params={"lg_k": 12})
    t1.insert_many(["u"] * 20000, [f"user{i}" for i in range(20000)])
    t2.insert_many(["u"] * 20000, [f"user{i}" for i in range(10000, 30000)])
    a, b = t1.flush(), t2.flush()
    assert abs(a["u"] - 20000) / 20000 < 0.05
    union = a.merge(b)["u"]
    assert abs(union - 30000) / 30000 < 0.05
    direct = datasketches.hll_union(12)
    for i in range(30000):
        direct.update(f"user{i}")
    assert union == ApproxDistinct(12).finalize(direct)  # the same registers, one estimate
    union_state = a.merge(b).state("u")
    assert union_state is not a.state("u")
    small = CompressedBufferTree("hll")
    small.insert_many(["s"] * 5, ["a", "b", "c", "a", "b"])
    assert round(small.flush()["s"]) == 3


def test_topk_semantics() -> None:
    t = CompressedBufferTree("topk", aggregator_params={"k": 2})
    t.insert_many(["p"] * 4, [("a", 5), ("b", 9), ("c", 1), ("a", 7)])
    t.insert("q", 3)
    assert t.flush().to_dict() == {"p": [("b", 9), ("a", 7)], "q": [(3, 3)]}


def test_tuple_keys_for_multi_column_group_by() -> None:
    t = CompressedBufferTree("sum", root_capacity=2)
    rows = [(("video games", "US"), 2), (("video games", "DE"), 1), (("video games", "US"), 5)]
    for k, v in rows:
        t.insert(k, v)
    snap = t.flush()
    assert snap[("video games", "US")] == 7
    assert Snapshot.from_bytes(snap.to_bytes())[("video games", "DE")] == 1


def test_registry_and_custom_instance() -> None:
    assert {
        "count",
        "sum",
        "avg",
        "min",
        "max",
        "topk",
        "distinct",
        "collect_set",
        "approx_distinct",
    } <= set(aggregator_names())
    assert get_aggregator("topk", {"k": 4}) == TopK(4)

    class Concat(Aggregator):
        name = "test_concat"

        def merge(self, a: str, b: str) -> str:
            return "".join(sorted(a + b))

    t = CompressedBufferTree(Concat(), root_capacity=2)
    t.insert_many(["x", "x", "y", "x"], ["c", "a", "z", "b"])
    assert t.flush().to_dict() == {"x": "abc", "y": "z"}


def const_hash(data: bytes) -> int:
    return 5


@pytest.mark.parametrize("hash_function", [None, const_hash])
def test_keys_with_nul_bytes_and_wide_keys(hash_function: object) -> None:
    """Encodings ending in NUL bytes (fixed-width numpy rows drop them) and keys too long for
    the fixed-width columns stay distinct and exact."""
    rng = random.Random(5)
    keys = [0, b"", "", b"\x00", b"\x00\x00", (0,), (), "a\x00", "a", 256, 2**63]
    keys += ["w" * rng.randint(250, 700) + str(i) for i in range(30)]
    stream = [rng.choice(keys) for _ in range(3000)]
    t = CompressedBufferTree(
        "count", hash_function=hash_function, root_capacity=7, buffer_entries=20, leaf_capacity=10
    )
    t.insert_many(stream)
    snap = t.flush()
    assert snap.to_dict() == Counter(stream)
    assert Snapshot.from_bytes(snap.to_bytes(), hash_function=hash_function) == snap


@pytest.mark.slow
def test_large_zipf_stream_matches_counter() -> None:
    """Two million Zipf-distributed inserts over 300k keys: a tree several levels deep."""
    rng = np.random.default_rng(11)
    ranks = np.minimum(rng.zipf(1.1, 2_000_000), 300_000)
    keys = [f"/products/item-{r:07d}" for r in ranks.tolist()]
    t = CompressedBufferTree("count", root_capacity=4096, buffer_entries=16384, leaf_capacity=8192)
    for lo in range(0, len(keys), 100_000):
        t.insert_many(keys[lo : lo + 100_000])
    assert t.stats()["height"] >= 3
    assert t.flush().to_dict() == Counter(keys)


@pytest.mark.parametrize("name", ["sum", "avg", "min", "max"])
def test_numbers_beyond_64_bits_survive_spills_and_snapshots(name: str) -> None:
    big = [2**70, -(2**65), 3, 2**64 - 1, -(2**63)]
    t = CompressedBufferTree(name, root_capacity=2, buffer_entries=4, leaf_capacity=4)
    for i, v in enumerate(big * 3):
        t.insert(f"k{i % 4}", v)
    ref: dict = {}
    for i, v in enumerate(big * 3):
        ref.setdefault(f"k{i % 4}", []).append(v)
    fold = {"sum": sum, "avg": lambda vs: sum(vs) / len(vs), "min": min, "max": max}[name]
    snap = t.flush()
    assert snap.to_dict() == {k: fold(vs) for k, vs in ref.items()}
    assert Snapshot.from_bytes(snap.to_bytes()) == snap


# approx_distinct takes any value (ints past 64 bits by their encoding): not listed
@pytest.mark.parametrize("name", ["collect_set", "distinct", "topk"])
def test_unserializable_values_are_rejected_at_insert(name: str) -> None:
    t = CompressedBufferTree(name, root_capacity=2)
    bad = (2**80, 1) if name == "topk" else 2**80
    t.insert("a", (1, 1) if name == "topk" else 1)
    with pytest.raises(TypeError, match="msgpack"):
        t.insert("a", bad)
    with pytest.raises(TypeError, match="msgpack"):
        t.insert("b", bad)
    assert len(t.flush()) == 1


def test_count_weights_must_fit() -> None:
    t = CompressedBufferTree("count")
    with pytest.raises(TypeError, match="range"):
        t.insert_many(["a", "b"], [1, 2**63])
    assert t.flush().to_dict() == {"a": 1}


@pytest.mark.parametrize("parts", [1, 2, 3, 7, 16])
def test_split_by_hash_partitions_keys_by_hash_range(parts: int) -> None:
    from cbt.hashing import encode_key, xxh3_64

    rng = random.Random(parts)
    words = [f"w{rng.randrange(5000)}" for _ in range(20000)]
    tree = CompressedBufferTree("count", root_capacity=1024)
    tree.insert_many(words)
    snap = tree.flush()
    pieces = snap.split_by_hash(parts)
    assert len(pieces) == parts
    merged: Counter = Counter()
    for index, piece in enumerate(pieces):
        for key, value in piece:
            assert (xxh3_64(encode_key(key)) * parts) >> 64 == index
            merged[key] += value
        # slices survive the wire format on their own
        assert type(piece).from_bytes(piece.to_bytes()).to_dict() == piece.to_dict()
    assert merged == Counter(words)
    with pytest.raises(ValueError):
        snap.split_by_hash(0)
