"""AccuracyCache: a master's top-k accuracy estimates of its stored results, computed off the
event loop and kept per result version.

Contract. :meth:`AccuracyCache.estimate` returns the accuracy estimate
(:func:`agent.runtime.results.quality.snapshot_accuracy`) of one stored result of a top-k job and
the
candidate values a caller merging several trees needs (:meth:`AccuracyCache.candidates`;
:meth:`AccuracyCache.answer` gives both, as a master adds them to a tree's part of a result),
computing both in a thread (the estimate sorts the snapshot and runs a bounded Monte-Carlo):
the event loop never does that work. A result's estimate is kept until its version changes (a
late fold is a new version, re-estimated at its next read). :meth:`AccuracyCache.peek` answers
from the cache alone (the dashboard's summary, built on the loop). Bounded: at most
:data:`LIMIT` entries, the oldest forgotten first.

:func:`merged_accuracy` estimates the accuracy of a job's result merged from its m trees'
parts (each tree owns a key range: the global top k is among the trees' candidates), from
the candidates and missing mass each tentative part carries and the rows of each final one;
a part that carries neither (read back from the lake) gives the lowest tree's estimate; any
malformed or missing figure gives None (not estimated), never a guess.
"""

from __future__ import annotations

import asyncio
import math
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

from agent.runtime.results import quality
from cbt import Snapshot

LIMIT = 1024
MISSING = object()


class AccuracyCache:
    """Per job at its master: (tree, epoch) → (version, accuracy, candidate values)."""

    def __init__(self, limit: int = LIMIT) -> None:
        self.limit = limit
        self._held: OrderedDict[tuple[int, int], tuple[int, float | None, list[float]]] = (
            OrderedDict()
        )
        self.computed = 0

    def peek(self, tree: int, epoch: int, version: int) -> Any:
        """The cached estimate of that version (None: not applicable), or :data:`MISSING`."""
        held = self._held.get((tree, epoch))
        return held[1] if held is not None and held[0] == version else MISSING

    def candidates(self, tree: int, epoch: int, version: int) -> list[float] | None:
        """The ranked candidate values of that version's estimate (None: not cached)."""
        held = self._held.get((tree, epoch))
        return held[2] if held is not None and held[0] == version else None

    async def answer(
        self, tree: int, epoch: int, result: Any, snap: Snapshot, *, k: int, largest: bool
    ) -> dict[str, Any]:
        """``{"accuracy": a}`` for a stored result (an :class:`~agent.runtime.results.store.
        EpochResult`), plus ``"quality": {"values": [...], "rho": ρ}`` when it is tentative
        (what :func:`merged_accuracy` needs to merge the job's trees)."""
        accuracy = await self.estimate(
            tree, epoch, result.version, snap, k=k, largest=largest,
            coverage=result.coverage, tentative=result.tentative,
        )  # fmt: skip
        out: dict[str, Any] = {"accuracy": accuracy}
        values = self.candidates(tree, epoch, result.version)
        if accuracy is not None and result.tentative and values:
            rho = quality.missing_mass(result.coverage)
            out["quality"] = {"values": values, "rho": rho if math.isfinite(rho) else None}
        return out

    async def estimate(
        self,
        tree: int,
        epoch: int,
        version: int,
        snap: Snapshot,
        *,
        k: int,
        largest: bool,
        coverage: float,
        tentative: bool,
    ) -> float | None:
        """The estimate of (tree, epoch) at ``version``, computed in a thread if not cached."""
        held = self._held.get((tree, epoch))
        if held is not None and held[0] == version:
            return held[1]

        def work() -> tuple[float | None, list[float]]:
            if not quality.applicable(snap.agg.name, largest):
                return None, []
            if not tentative:
                return 1.0, []
            values = quality.ranked_values(snap, k, largest=largest)
            rho = quality.missing_mass(coverage)
            return quality.topk_accuracy(values, k, rho), values.tolist()

        accuracy, values = await asyncio.to_thread(work)
        self.computed += 1
        self._held[(tree, epoch)] = (version, accuracy, values)
        self._held.move_to_end((tree, epoch))
        while len(self._held) > self.limit:
            self._held.popitem(last=False)
        return accuracy


def _numbers(value: Any, limit: int) -> list[float] | None:
    if not isinstance(value, list) or len(value) > limit:
        return None
    if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in value):
        return None
    return [float(v) for v in value]


async def merged_accuracy(parts: Sequence[dict[str, Any]], k: int) -> float | None:
    """The accuracy estimate of a result merged from ``parts`` (the trees' ``local_results``
    replies; module contract). Peers' figures are checked (types, the candidate bound)."""
    accs = [p.get("accuracy") for p in parts]
    if not parts or any(not isinstance(a, int | float) or isinstance(a, bool) for a in accs):
        return None
    if len(parts) == 1 or not any(p.get("tentative") for p in parts):
        return min(float(a) for a in accs)  # type: ignore[arg-type]
    values: list[float] = []
    rhos: list[float] = []
    limit = quality.candidate_limit(k)
    for p in parts:
        q = p.get("quality")
        if isinstance(q, dict):
            vals, rho = _numbers(q.get("values"), limit), q.get("rho")
            if vals is None or not isinstance(rho, int | float) or isinstance(rho, bool):
                return None
        elif not p.get("tentative"):
            rows = p.get("rows")
            vals = _numbers([r[1] for r in rows if isinstance(r, list) and len(r) == 2], limit) if (
                isinstance(rows, list)) else None  # fmt: skip
            rho = 0.0
            if vals is None:
                return None
        else:  # a tentative part without candidates (from the lake): its own estimate
            return min(float(a) for a in accs)  # type: ignore[arg-type]
        values += vals
        rhos += [float(rho)] * len(vals)
    order = sorted(range(len(values)), key=lambda i: -values[i])  # stable: trees' order on ties
    return await asyncio.to_thread(
        quality.topk_accuracy, [values[i] for i in order], k, [rhos[i] for i in order]
    )
