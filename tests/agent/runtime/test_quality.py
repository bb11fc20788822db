"""The quality of tentative results (agent/runtime/results/quality.py): rates and rate-weighted
coverage
against an independent computation (hypothesis), and the top-k accuracy estimate against the
real |tentative top-k ∩ final top-k| / k on synthetic Zipf-distributed keys.

The accuracy check is the issue's acceptance figure: over many synthetic epochs (origins
drawing keys from one Zipf distribution, one or more origins missing) the estimate's mean
absolute error against the real accuracy must stay within 5 points. Printed with ``-s``."""

from __future__ import annotations

import statistics

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent.runtime.results.quality import (
    WINDOW,
    missing_mass,
    origin_rates,
    snapshot_accuracy,
    topk_accuracy,
    weighted_coverage,
)
from cbt import CompressedBufferTree, Snapshot

COUNTS = st.integers(0, 10_000)
ORIGINS = st.integers(1, 12)


@given(st.lists(st.dictionaries(ORIGINS, COUNTS, max_size=6), max_size=80), st.sets(ORIGINS))
def test_rates_are_the_median_of_the_newest_counts(history, wanted) -> None:
    got = origin_rates(history, wanted)
    for o in wanted:
        seen = [h[o] for h in history[:64] if o in h][:WINDOW]  # newest first
        if not seen:
            assert o not in got
        else:
            assert got[o] == pytest.approx(statistics.median(seen))


@given(
    st.dictionaries(ORIGINS, st.one_of(st.none(), COUNTS), min_size=1, max_size=6),
    st.dictionaries(st.integers(20, 30), st.one_of(st.none(), COUNTS), max_size=4),
    st.dictionaries(st.integers(1, 30), st.floats(0, 1e4), max_size=10),
)
def test_weighted_coverage_against_a_direct_computation(covered, lacking, rates) -> None:
    """covered: origin → exact count (None: unknown); lacking: origin → measured rate
    (None: never measured); a covered origin without a count weighs its rate."""
    rates = {o: r for o, r in rates.items() if o not in lacking} | {
        o: float(r) for o, r in lacking.items() if r is not None
    }
    records = {o: n for o, n in covered.items() if n is not None}
    got = weighted_coverage(covered, records, lacking, rates)
    if not lacking:
        assert got == 1.0
        return
    weights_in = [records.get(o, rates.get(o)) for o in covered]
    weights_out = [rates.get(o) for o in lacking]
    known = [w for w in weights_in + weights_out if w is not None]
    if not known:
        assert got is None
        return
    mean = sum(known) / len(known)
    num = sum(mean if w is None else w for w in weights_in)
    den = num + sum(mean if w is None else w for w in weights_out)
    assert got == pytest.approx(1.0 if den == 0 else num / den)
    assert 0.0 <= got <= 1.0


def test_coverage_examples() -> None:
    # two origins of 30 and 60 records covered, one of rate 10 lacking: 90 / 100
    assert weighted_coverage([1, 2], {1: 30, 2: 60}, [3], {3: 10.0}) == pytest.approx(0.9)
    # the lacking origin was never measured: the mean of the others (45)
    assert weighted_coverage([1, 2], {1: 30, 2: 60}, [3], {}) == pytest.approx(90 / 135)
    assert missing_mass(0.9) == pytest.approx(1 / 9) and missing_mass(1.0) == 0.0


def _ranking(counts: np.ndarray) -> np.ndarray:
    """Keys with a count, by count (largest first), ties by key: the result's order."""
    keys = np.nonzero(counts)[0]
    return keys[np.lexsort((keys, -counts[keys]))]


def _zipf_trials(origins, missing, per_origin, keys, s, k, trials, seed):
    rng = np.random.default_rng(seed)
    p = 1.0 / np.arange(1, keys + 1) ** s
    p /= p.sum()
    out = []
    for t in range(trials):
        counts = rng.multinomial(per_origin, p, size=origins)
        tentative, final = counts[missing:].sum(0), counts.sum(0)
        t_rank, f_rank = _ranking(tentative), _ranking(final)
        real = len(set(t_rank[:k]) & set(f_rank[:k])) / k
        coverage = tentative.sum() / final.sum()
        est = topk_accuracy(tentative[t_rank], k, missing_mass(coverage), seed=t)
        out.append((est, real))
    return out


@pytest.mark.parametrize(
    "origins,missing,per_origin,keys,s,k",
    [
        (8, 1, 2000, 5000, 1.1, 10),
        (8, 1, 2000, 5000, 1.1, 50),
        (8, 2, 500, 2000, 1.0, 20),
        (4, 1, 10_000, 10_000, 1.2, 100),
        (8, 4, 1000, 1000, 0.8, 10),
        (16, 1, 300, 3000, 1.1, 10),
    ],
)
def test_accuracy_estimate_against_the_real_accuracy_on_zipf_keys(
    origins, missing, per_origin, keys, s, k
) -> None:
    pairs = _zipf_trials(origins, missing, per_origin, keys, s, k, trials=30, seed=k + origins)
    errors = [abs(e - r) for e, r in pairs]
    mae = sum(errors) / len(errors)
    bias = sum(e - r for e, r in pairs) / len(pairs)
    print(f"zipf s={s} k={k} origins={origins} missing={missing}: MAE {mae:.3f} bias {bias:+.3f}")
    assert mae <= 0.05
    assert abs(bias) <= 0.03


def test_accuracy_edge_cases() -> None:
    assert topk_accuracy([5, 4, 3], 3, 0.5) == 1.0  # every key seen is in both top-k
    assert topk_accuracy([5, 4, 3, 2], 2, 0.0) == 1.0  # nothing missing
    assert topk_accuracy([5, -4, 3, 2], 2, 0.5) is None  # not a count
    assert topk_accuracy([100, 99, 98, 97], 2, np.inf) is None
    # a clear gap: the top 2 stay; a tie at the boundary: about half stays
    assert topk_accuracy([1000, 900, 10, 9], 2, 0.2) == pytest.approx(1.0)
    assert 0.6 < topk_accuracy([50, 40, 40, 40, 40], 2, 1.0) < 0.9
    # deterministic for one seed (a lake version's digest depends on it)
    v = [30, 29, 28, 27, 26, 25]
    assert topk_accuracy(v, 3, 0.5, seed=3) == topk_accuracy(v, 3, 0.5, seed=3)


def _snapshot(pairs: list[tuple[str, int]], aggregator: str) -> Snapshot:
    tree = CompressedBufferTree(aggregator=aggregator)
    for key, value in pairs:
        tree.insert(key, value)
    return tree.flush()


def test_snapshot_accuracy_reads_a_stored_result() -> None:
    snap = _snapshot([(f"k{i}", 100 - 3 * i) for i in range(30)], "sum")
    assert snapshot_accuracy(snap, k=5, largest=True, coverage=1.0, tentative=False) == 1.0
    est = snapshot_accuracy(snap, k=5, largest=True, coverage=0.5, tentative=True)
    assert est is not None and 0.5 < est < 1.0
    assert snapshot_accuracy(snap, k=5, largest=False, coverage=0.5, tentative=True) is None
    maxed = _snapshot([("a", 3), ("b", 1)], "max")
    assert snapshot_accuracy(maxed, k=1, largest=True, coverage=0.5, tentative=True) is None
