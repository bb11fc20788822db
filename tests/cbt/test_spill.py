"""Spill: with a memory budget, compressed runs go to files and come back transparently."""

from __future__ import annotations

import os
import random
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cbt import CompressedBufferTree, SpillError


def _files(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file()]


def test_spill_round_trip(tmp_path: Path) -> None:
    rng = random.Random(3)
    keys = [f"/shop/item-{rng.randint(0, 3000)}" for _ in range(40000)]
    t = CompressedBufferTree(
        "count",
        root_capacity=500,
        buffer_entries=2000,
        leaf_capacity=1000,
        memory_budget_bytes=0,
        spill_dir=str(tmp_path),
    )
    t.insert_many(keys)
    assert _files(tmp_path), "nothing was spilled"
    stats = t.stats()
    assert stats["spilled_runs"] > 0 and stats["spill_bytes"] > 0
    assert stats["compressed_bytes"] == 0  # budget 0: nothing stays resident
    assert t.flush().to_dict() == Counter(keys)
    assert t.flush().to_dict() == Counter(keys)  # flush is repeatable, files still valid
    t.insert_many(keys[:100])
    assert t.flush().to_dict() == Counter(keys) + Counter(keys[:100])
    t.empty()
    assert not _files(tmp_path)
    assert len(t.flush()) == 0
    t.insert("a")
    assert t.flush().to_dict() == {"a": 1}
    t.close()
    assert not list(tmp_path.iterdir())


def test_budget_keeps_resident_bytes_below_it(tmp_path: Path) -> None:
    budget = 20_000
    t = CompressedBufferTree(
        "count",
        root_capacity=300,
        buffer_entries=1000,
        leaf_capacity=600,
        memory_budget_bytes=budget,
        spill_dir=str(tmp_path),
    )
    keys = [f"k{i}" for i in range(20000)]
    t.insert_many(keys)
    assert t.stats()["compressed_bytes"] <= budget
    snap = t.flush()
    assert t.stats()["compressed_bytes"] <= budget
    assert snap.to_dict() == Counter(keys)
    t.close()


@pytest.mark.parametrize("damage", ["flip", "truncate", "delete"])
def test_corrupt_spill_file_is_a_clear_error(tmp_path: Path, damage: str) -> None:
    t = CompressedBufferTree(
        "count",
        root_capacity=50,
        buffer_entries=100,
        leaf_capacity=100,
        memory_budget_bytes=0,
        spill_dir=str(tmp_path),
    )
    t.insert_many([f"k{i}" for i in range(1000)])
    victim = max(_files(tmp_path), key=lambda p: p.stat().st_size)
    data = victim.read_bytes()
    if damage == "flip":
        victim.write_bytes(data[:-5] + bytes([data[-5] ^ 0xFF]) + data[-4:])
    elif damage == "truncate":
        victim.write_bytes(data[: len(data) // 2])
    else:
        os.remove(victim)
    with pytest.raises(SpillError, match=str(victim.name)):
        t.flush()
    t.close()


@settings(max_examples=25, deadline=None)
@given(
    st.lists(st.tuples(st.text(alphabet="abc", max_size=3), st.integers(-5, 5)), max_size=300),
    st.sampled_from(["sum", "max", "collect_set"]),
)
def test_spill_property(tmp_path_factory: pytest.TempPathFactory, pairs: list, name: str) -> None:
    d = tmp_path_factory.mktemp("spill")
    with CompressedBufferTree(
        name,
        root_capacity=3,
        buffer_entries=6,
        leaf_capacity=5,
        memory_budget_bytes=64,
        spill_dir=str(d),
    ) as t:
        ref: dict = {}
        for k, v in pairs:
            t.insert(k, v)
            ref.setdefault(k, []).append(v)
        expected = {
            "sum": lambda vs: sum(vs),
            "max": lambda vs: max(vs),
            "collect_set": lambda vs: frozenset(vs),
        }[name]
        assert t.flush().to_dict() == {k: expected(vs) for k, vs in ref.items()}
    assert not _files(d)
