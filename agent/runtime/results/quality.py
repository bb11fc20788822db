"""The quality of a tentative result: rate-weighted coverage and a top-k accuracy estimate.

Contract (pure functions, no I/O, no clock; ``docs/fault-tolerance.md``, "Tentative results
and their quality"):

* :func:`origin_rates` — each origin's **recent rate**: the median of its record counts in the
  last :data:`WINDOW` (8) stored epochs it contributed to, looking back at most :data:`SCAN`
  (64) epochs. The median, not the mean: one burst (or one near-empty epoch after a restart)
  among eight moves it little, and a rate is meant to say what an origin *usually* sends.
* :func:`weighted_coverage` — the share of an epoch's input records a result includes::

      coverage = Σ_covered n_o / (Σ_covered n_o + Σ_lacking r̂_o)

  with n_o the exact counts the lineage carried (a covered origin without a count weighs its
  rate instead) and r̂_o the lacking origins' recent rates. An origin never measured weighs the
  mean of the other origins' weights in the epoch (the best guess: origins of one job are
  usually alike). None when nothing at all is measured (the caller falls back to the share of
  origins). Nothing lacking: 1.0. A final result's coverage is 1.0 by definition (the caller).
* :func:`topk_accuracy` — PPA's accuracy |tentative top-k ∩ accurate top-k| / k, estimated
  for a tentative result of an additive aggregate (``count``, ``sum`` of non-negative values,
  ranked largest first) from its values and the missing mass ρ = (1 − coverage) / coverage
  (missing records per covered record). Model: the missing records are distributed like the
  covered ones; key i's missing part is Poisson(λ_i ρ) with λ_i ~ Gamma(v_i + ½, 1) (the
  posterior of its rate given its value v_i: Poisson noise *and* the uncertainty of the
  tentative distribution itself); keys not seen at all are assumed not to enter. A seeded
  Monte-Carlo over the candidate keys that can reach the k-th place (within 5 σ, at most
  :data:`MAX_CANDIDATES`) counts how many of the tentative top k stay; samples × candidates
  is bounded by :data:`SAMPLE_BUDGET` (a few ms of numpy; callers run it off the event loop).
  Values are read as counts for a ``sum`` too (its per-record values are unknown): there it
  is a rougher estimate.
* :func:`observed_topk_accuracy` — the same accuracy **measured**, where both the tentative
  and the final counts are known (benchmarks, the replica planner's figures): each top k by
  count, largest first, ties by key; |tentative ∩ final| / min(k, keys in the final result)
  (1.0 when the final result is empty).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from cbt import Snapshot
from srt.dataplane.operators import ranked

WINDOW = 8  # contributed epochs per origin whose median is its rate
SCAN = 64  # stored epochs looked back at most, per result
MAX_CANDIDATES_EXTRA = 256  # candidates beyond 4k
SAMPLE_BUDGET = 200_000  # samples × candidates per estimate
MIN_SAMPLES, MAX_SAMPLES = 32, 400
ADDITIVE = frozenset({"count", "sum"})


def origin_rates(
    history: Iterable[Mapping[int, int]],
    wanted: Iterable[int],
    *,
    window: int = WINDOW,
    scan: int = SCAN,
) -> dict[int, float]:
    """Recent rates of the ``wanted`` origins from ``history`` - the record counts of earlier
    epochs, **newest first** - reading at most ``scan`` epochs; origins not found are left
    out (never measured)."""
    want = set(wanted)
    seen: dict[int, list[int]] = {o: [] for o in want}
    open_ = set(want)
    for i, counts in enumerate(history):
        if i >= scan or not open_:
            break
        for o in list(open_):
            n = counts.get(o)
            if n is not None:
                seen[o].append(n)
                if len(seen[o]) >= window:
                    open_.discard(o)
    # seen lists are newest first; the median does not care about order
    return {o: float(statistics.median(c)) for o, c in seen.items() if c}


def weighted_coverage(
    covered: Iterable[int],
    records: Mapping[int, int],
    lacking: Iterable[int],
    rates: Mapping[int, float],
) -> float | None:
    """The rate-weighted coverage (module contract) of a result covering ``covered`` (with
    the exact ``records`` counts where known) and lacking ``lacking``."""
    lacking = list(lacking)
    if not lacking:
        return 1.0
    have: list[float | None] = [
        float(records[o]) if o in records else rates.get(o) for o in covered
    ]
    miss: list[float | None] = [rates.get(o) for o in lacking]
    known = [w for w in have + miss if w is not None]
    if not known:
        return None
    fill = sum(known) / len(known)  # never measured: the mean of the others
    num = sum(fill if w is None else w for w in have)
    den = num + sum(fill if w is None else w for w in miss)
    if den <= 0:
        return 1.0  # every weight is zero: nothing the lacking origins usually send is missing
    return num / den


def missing_mass(coverage: float) -> float:
    """ρ: missing records per covered record, from a coverage (∞ for coverage 0)."""
    if coverage >= 1.0:
        return 0.0
    if coverage <= 0.0:
        return math.inf
    return (1.0 - coverage) / coverage


def applicable(aggregator: str, largest: bool) -> bool:
    """Whether :func:`topk_accuracy` models this top-k (additive, ranked largest first)."""
    return largest and aggregator in ADDITIVE


def topk_accuracy(
    values: Sequence[float] | np.ndarray,
    k: int,
    rho: float | Sequence[float] | np.ndarray,
    *,
    seed: int = 0,
) -> float | None:
    """Estimated |tentative top-k ∩ accurate top-k| / k (module contract). ``values``: the
    tentative values ranked best first (ties already in the result's order); ``rho``: the
    missing mass per key (one number, or one per key: keys of different trees). None where
    the model does not apply (negative or non-finite values, nothing covered)."""
    v = np.asarray(values, dtype=np.float64)
    r = np.broadcast_to(np.asarray(rho, dtype=np.float64), v.shape)
    if k < 1:
        raise ValueError("k must be >= 1")
    n = len(v)
    if n <= k or not (r > 0).any():
        return 1.0  # every key seen is in both top-k lists (unseen keys are not modelled)
    if not np.isfinite(v).all() or (v < 0).any() or not np.isfinite(r).all():
        return None
    mean = v * (1 + r)
    sd = np.sqrt((v + 0.5) * r * (1 + r))
    threshold = mean[k - 1] - 5 * sd[k - 1]
    cap = min(n, 4 * k + MAX_CANDIDATES_EXTRA)
    reach = np.nonzero(mean[:cap] + 5 * sd[:cap] >= threshold)[0]
    c = max(k + 1, int(reach[-1]) + 1 if len(reach) else k + 1)
    c = min(c, cap)
    samples = max(MIN_SAMPLES, min(MAX_SAMPLES, SAMPLE_BUDGET // c))
    rng = np.random.default_rng(seed)
    lam = rng.gamma(v[:c] + 0.5, 1.0, size=(samples, c))
    final = v[:c] + rng.poisson(lam * r[:c])
    # a stable sort keeps the tentative order among equal final values (the result's ties)
    order = np.argsort(-final, axis=1, kind="stable")[:, :k]
    stay = (order < k).sum(axis=1)
    return float(stay.mean() / k)


def _top(counts: Mapping[Any, float], k: int) -> set[Any]:
    keys = list(counts)
    try:
        keys.sort()
    except TypeError:  # keys of mixed types: a fixed order all the same
        keys.sort(key=repr)
    keys.sort(key=counts.__getitem__, reverse=True)  # stable: ties stay in key order
    return set(keys[:k])


def observed_topk_accuracy(
    tentative: Mapping[Any, float], final: Mapping[Any, float], k: int
) -> float:
    """The measured |tentative top-k ∩ final top-k| / k (module contract)."""
    if k < 1:
        raise ValueError("k must be >= 1")
    if not final:
        return 1.0
    return len(_top(tentative, k) & _top(final, k)) / min(k, len(final))


def candidate_limit(k: int) -> int:
    """How many ranked values :func:`topk_accuracy` may look at for a top-k."""
    return 4 * k + MAX_CANDIDATES_EXTRA


def ranked_values(snap: Snapshot, k: int, *, largest: bool = True) -> np.ndarray:
    """The first :func:`candidate_limit` values of ``snap`` in the result's order (best
    first, ties in hash order: :func:`srt.dataplane.operators.ranked`), as floats. Sorts the
    whole snapshot: call it off the event loop."""
    idx = ranked(snap, largest=largest)[: candidate_limit(k)]
    column = snap.values_column
    if column.dtype == object:
        values = snap.values()
        return np.asarray([float(values[i]) for i in idx], dtype=np.float64)
    return np.asarray(column[idx], dtype=np.float64)


def snapshot_accuracy(
    snap: Snapshot, *, k: int, largest: bool, coverage: float, tentative: bool
) -> float | None:
    """The accuracy estimate of one stored top-k result (module contract): 1.0 when final,
    None where the model does not apply (not an additive aggregate ranked largest first).
    Off the event loop (it sorts the snapshot)."""
    if not applicable(snap.agg.name, largest):
        return None
    if not tentative:
        return 1.0
    return topk_accuracy(ranked_values(snap, k, largest=largest), k, missing_mass(coverage))
