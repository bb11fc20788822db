"""Job/tree ids and the key → tree partition; the roots-per-agent computation."""

from __future__ import annotations

import hashlib
import itertools
import random
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from srt.ids import app_id, key_tree_index, tree_ids, tree_index, tree_range
from srt.trees.balance import closest_node, roots, roots_per_agent

U64 = st.integers(min_value=0, max_value=(1 << 64) - 1)
M = st.integers(min_value=1, max_value=1024)


def test_app_id_is_sha1_of_creator_and_name() -> None:
    expected = int.from_bytes(hashlib.sha1(b"alice\x00wordcount").digest(), "big")
    assert app_id("wordcount", "alice") == expected
    assert app_id("ab", "c") != app_id("b", "ca")
    with pytest.raises(ValueError):
        app_id("", "alice")
    with pytest.raises(ValueError):
        app_id("a\x00b", "alice")


def test_tree_ids() -> None:
    app = app_id("wordcount", "alice")
    ids = tree_ids(app, 4)
    assert ids[0] == app and len(set(ids)) == 4
    raw = app.to_bytes(20, "big")
    assert ids[2] == int.from_bytes(hashlib.sha1(raw + (2).to_bytes(4, "big")).digest(), "big")
    assert tree_ids(app, 4)[:2] == tree_ids(app, 2)  # growing m keeps the first trees
    assert all(0 <= t < 1 << 160 for t in ids)
    for bad in (0, -1, True):
        with pytest.raises(ValueError):
            tree_ids(app, bad)
    with pytest.raises(ValueError):
        tree_ids(1 << 160, 2)


@given(U64, M)
def test_tree_index_in_range_and_monotone(h: int, m: int) -> None:
    i = tree_index(h, m)
    assert 0 <= i < m
    lo, hi = tree_range(i, m)
    assert lo <= h < hi  # the ranges are exactly the preimages
    if h < (1 << 64) - 1:
        assert tree_index(h + 1, m) in (i, i + 1)


@given(M)
def test_tree_ranges_partition_the_hash_space_evenly(m: int) -> None:
    ranges = [tree_range(i, m) for i in range(m)]
    assert ranges[0][0] == 0 and ranges[-1][1] == 1 << 64
    for (_, hi), (lo, _) in itertools.pairwise(ranges):
        assert hi == lo  # contiguous, no gaps, no overlaps
    sizes = {hi - lo for lo, hi in ranges}
    assert max(sizes) - min(sizes) <= 1  # equal up to rounding


@settings(max_examples=25, deadline=None)
@given(st.integers(min_value=2, max_value=16), st.integers(min_value=0, max_value=2**32))
def test_real_keys_spread_evenly_over_trees(m: int, seed: int) -> None:
    rnd = random.Random(seed)
    n = 4000
    counts = Counter(key_tree_index(f"user-{rnd.getrandbits(48)}", m) for _ in range(n))
    expected = n / m
    # binomial: 5 standard deviations either side
    sd = (n * (1 / m) * (1 - 1 / m)) ** 0.5
    assert all(abs(counts[i] - expected) < 5 * sd + 1 for i in range(m))


def test_tree_index_rejects_bad_input() -> None:
    with pytest.raises(ValueError):
        tree_index(1 << 64, 2)
    with pytest.raises(ValueError):
        tree_index(-1, 2)
    with pytest.raises(ValueError):
        tree_index(5, 0)


@settings(deadline=None)
@given(
    st.lists(st.integers(0, (1 << 160) - 1), min_size=1, max_size=60, unique=True),
    st.lists(st.integers(0, (1 << 160) - 1), min_size=1, max_size=20),
)
def test_closest_node_matches_brute_force(nodes: list[int], keys: list[int]) -> None:
    ordered = sorted(nodes)
    for k in keys:
        assert closest_node(ordered, k) == min(nodes, key=lambda n: n ^ k)


def test_roots_per_agent_counts() -> None:
    rnd = random.Random(7)
    nodes = [rnd.getrandbits(160) for _ in range(200)]
    trees = [rnd.getrandbits(160) for _ in range(300)]
    d = roots_per_agent(nodes, trees)
    per = Counter(roots(nodes, trees).values())
    assert d["agents"] == 200 and d["trees"] == 300
    assert sum(int(k) * v for k, v in d["histogram"].items()) == 300
    assert sum(d["histogram"].values()) == 200
    assert d["max"] == max(per.values())
    below3 = sum(1 for n in nodes if per.get(n, 0) < 3)
    assert d["paper"]["pct_below_3"] == round(100 * below3 / 200, 3)


def test_placement_salts_derive_distinct_tree_ids_and_salt_zero_is_the_app_id() -> None:
    from srt.ids import placement_id

    app = app_id("job", "me")
    assert tree_ids(app, 3, salt=0) == tree_ids(app, 3)
    assert tree_ids(app, 3)[0] == app == placement_id(app, 0)
    salted = tree_ids(app, 3, salt=1)
    assert salted[0] == placement_id(app, 1) != app
    assert len(set(salted) | set(tree_ids(app, 3))) == 6
    with pytest.raises(ValueError):
        placement_id(app, -1)


def test_two_choice_placement_balances_better_than_rendezvous() -> None:
    import random

    from srt.trees.balance import roots_per_agent, two_choice_tree_ids

    rng = random.Random(3)
    nodes = [rng.getrandbits(160) for _ in range(300)]
    apps = [app_id(f"job-{i}", "t") for i in range(600)]
    one = roots_per_agent(nodes, two_choice_tree_ids(nodes, apps, 1))
    two = roots_per_agent(nodes, two_choice_tree_ids(nodes, apps, 2))
    assert two_choice_tree_ids(nodes, apps, 1) == apps
    assert two["max"] <= one["max"] // 2  # mean load 2: from 14 roots on one agent to 5
