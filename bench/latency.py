"""Latency summaries shared by the benchmarks: nearest-rank percentiles in milliseconds."""

from __future__ import annotations

import math
from typing import Any


def pct(values: list[float], q: float) -> float:
    """The nearest-rank ``q`` quantile of ``values`` (NaN when empty)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else math.nan


def summary(values_ms: list[float]) -> dict[str, Any]:
    """``{"n", "p50_ms", "p90_ms", "p99_ms", "max_ms"}`` of latencies in milliseconds."""
    return {
        "n": len(values_ms),
        "p50_ms": round(pct(values_ms, 0.5), 2),
        "p90_ms": round(pct(values_ms, 0.9), 2),
        "p99_ms": round(pct(values_ms, 0.99), 2),
        "max_ms": round(max(values_ms), 2) if values_ms else None,
    }
