"""Latency histograms observed as things happen, kept as plain counts until a scrape.

Contract: a :class:`LatencyHistogram` has a metric ``name``, its help text, label names and
bucket upper bounds. :meth:`~LatencyHistogram.observe` adds one value to the series of a label
tuple (thread-safe; a value lands in the first bucket whose bound it does not exceed, as in a
Prometheus histogram); :meth:`~LatencyHistogram.remove` drops a series;
:meth:`~LatencyHistogram.family` builds the Prometheus histogram family of every series at
scrape time (cumulative ``_bucket`` counts with ``+Inf``, ``_count``, ``_sum``: what a
``prometheus_client.Histogram`` exposes, without its ``_created`` series).

Why not ``prometheus_client.Histogram``: importing ``prometheus_client`` maps ~13 MB, and an
agent observes these latencies from its start while nobody may ever scrape it (the issue
"A lightweight agent"). Here it is imported only by :meth:`~LatencyHistogram.family`.
"""

from __future__ import annotations

import bisect
import math
import threading
from collections.abc import Iterable, Sequence
from typing import Any


class LatencyHistogram:
    """One histogram metric with labels (see the module contract)."""

    def __init__(
        self, name: str, doc: str, labelnames: Sequence[str], buckets: Iterable[float]
    ) -> None:
        bounds = tuple(float(b) for b in buckets)
        if not bounds or list(bounds) != sorted(set(bounds)) or math.isinf(bounds[-1]):
            raise ValueError("buckets must be finite, increasing and not empty")
        self.name = name
        self.doc = doc
        self.labelnames = tuple(labelnames)
        self.bounds = bounds
        self._lock = threading.Lock()
        #: label tuple -> [count per bucket, the +Inf bucket last; sum of the values]
        self._series: dict[tuple[str, ...], tuple[list[int], list[float]]] = {}

    def observe(self, labels: tuple[str, ...], value: float) -> None:
        if len(labels) != len(self.labelnames):
            raise ValueError(f"{self.name} takes labels {self.labelnames}, got {labels}")
        index = bisect.bisect_left(self.bounds, value)  # value <= bound: that bucket
        with self._lock:
            series = self._series.get(labels)
            if series is None:
                series = self._series[labels] = ([0] * (len(self.bounds) + 1), [0.0])
            series[0][index] += 1
            series[1][0] += value

    def remove(self, labels: tuple[str, ...]) -> None:
        with self._lock:
            self._series.pop(labels, None)

    def series(self) -> dict[tuple[str, ...], tuple[list[int], float]]:
        """A copy of every series: per-bucket counts (not cumulative, ``+Inf`` last), sum."""
        with self._lock:
            return {k: (list(c), s[0]) for k, (c, s) in self._series.items()}

    def family(self) -> Any:
        """The ``prometheus_client`` histogram family of every series (imports it)."""
        from prometheus_client.core import HistogramMetricFamily
        from prometheus_client.utils import floatToGoString

        family = HistogramMetricFamily(self.name, self.doc, labels=list(self.labelnames))
        bounds = [*map(floatToGoString, self.bounds), "+Inf"]
        for labels, (counts, total) in self.series().items():
            cumulative, buckets = 0, []
            for bound, count in zip(bounds, counts, strict=True):
                cumulative += count
                buckets.append((bound, cumulative))
            family.add_metric(list(labels), buckets, total)
        return family

    def collect(self) -> list[Any]:
        """As a collector of one family (what ``generate_latest`` reads)."""
        return [self.family()]
