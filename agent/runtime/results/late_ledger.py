"""The late records of a job's epochs, as its master knows them from the origins' reports.

Contract (:class:`LateLedger`, one per job runtime, on the event loop): each origin (an agent
reading the job's input) reports the records its clock refused as late - later than the job's
``allowed_lateness`` - per epoch they would have belonged to and per input
(agent/runtime/epochs/late.py, agent/runtime/job/late_reports.py); :meth:`LateLedger.add` sums
them. :meth:`LateLedger.of` is an epoch's ``late`` field in the results API: ``{"records": n,
"origins": {hex id: n}, "inputs": {input: n}}`` - records offered for the epoch that its result
does **not** include. It is a running count: late records keep arriving after the epoch's
result is final (that is what late means), so the figure may grow; the result's rows stay
exact for the records the watermark accepted. A sliding window's result (``mode: window``)
covers the panes of its epochs, so its ``late`` field sums theirs (:meth:`LateLedger.of` with
the window's last epoch). ``None`` means unknown: an epoch older than the
ledger's window (:data:`MAX_EPOCHS` epochs, the newest kept; the status says how many were
forgotten). Counts from before this agent became the master stay with the agents' status and
the lake rows written before: a master that took over from another says so - the counts of
the epochs before the one after its wall clock's are unknown (``None``) there
(:meth:`LateLedger.unknown_before`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

MAX_EPOCHS = 4096  # epochs whose late counts a master keeps (newest)


class LateLedger:
    """Late-record counts per epoch, origin and input at a job's master (module contract)."""

    def __init__(self, max_epochs: int = MAX_EPOCHS) -> None:
        self.max_epochs = max_epochs
        self._origins: dict[int, Counter[str]] = {}
        self._inputs: dict[int, Counter[str]] = {}
        self._floor: int | None = None  # the highest epoch forgotten (older: unknown)
        self.total = 0
        self.by_origin: Counter[str] = Counter()  # every late record reported, per origin
        self.reports = 0

    def add(self, origin: str, epochs: Mapping[int, Mapping[str, int]]) -> dict[int, int]:
        """One origin's report: epoch → input → late records. Returns epoch → the records it
        added there (those at or below the floor - forgotten, or before this master took over
        - are counted in the total only: their epoch's count stays unknown)."""
        self.reports += 1
        changed: dict[int, int] = {}
        for epoch, inputs in epochs.items():
            n = sum(inputs.values())
            if n <= 0:
                continue
            self.total += n
            self.by_origin[origin] += n
            changed[epoch] = changed.get(epoch, 0) + n
            if self._floor is not None and epoch <= self._floor:
                continue
            per = self._origins.get(epoch)
            if per is None:
                per = self._origins[epoch] = Counter()
                self._inputs[epoch] = Counter()
            per[origin] += n
            self._inputs[epoch].update(inputs)
        while len(self._origins) > self.max_epochs:
            old = min(self._origins)
            del self._origins[old], self._inputs[old]
            self._floor = old if self._floor is None else max(self._floor, old)
        return changed

    def unknown_before(self, epoch: int) -> None:
        """This agent became the job's master after another: the reports before went there,
        so the counts of epochs before ``epoch`` are unknown here (``None``), as forgotten
        ones are."""
        floor = epoch - 1
        if self._floor is not None and self._floor >= floor:
            return
        self._floor = floor
        for old in [e for e in self._origins if e <= floor]:
            del self._origins[old], self._inputs[old]

    def records(self, epoch: int, last: int | None = None) -> int | None:
        """The late records of ``epoch`` - of epochs ``epoch``..``last`` when given (a
        window's) - (0: none reported; None: one of them forgotten)."""
        last = epoch if last is None else last
        if self._floor is not None and epoch <= self._floor:
            return None
        return sum(sum(self._origins[e].values()) for e in self._kept(epoch, last))

    def of(self, epoch: int, last: int | None = None) -> dict[str, Any] | None:
        """The results API's ``late`` field of ``epoch`` (module contract); of a window's
        epochs ``epoch``..``last`` when given (its panes' late records, summed: none of them
        is in the window's result)."""
        n = self.records(epoch, last)
        if n is None:
            return None
        origins: Counter[str] = Counter()
        inputs: Counter[str] = Counter()
        for e in self._kept(epoch, epoch if last is None else last):
            origins.update(self._origins[e])
            inputs.update(self._inputs[e])
        return {"records": n, "origins": dict(origins), "inputs": dict(inputs)}

    def _kept(self, first: int, last: int) -> list[int]:
        """The epochs of ``first``..``last`` with late records, ascending."""
        if last - first < len(self._origins):
            return [e for e in range(first, last + 1) if e in self._origins]
        return sorted(e for e in self._origins if first <= e <= last)

    def stats(self) -> dict[str, Any]:
        """``records`` (every late record reported here) and ``by_origin``, ``epochs`` (with
        late records, kept), ``forgotten_below`` (epochs at or below it: unknown),
        ``reports``."""
        return {
            "records": self.total,
            "by_origin": dict(self.by_origin),
            "epochs": len(self._origins),
            "forgotten_below": self._floor,
            "reports": self.reports,
        }


def parse_report(
    body: Any, *, max_epochs: int = 4096, max_inputs: int = 64
) -> dict[int, dict[str, int]]:
    """A late report's ``epochs`` field (``[[epoch, {input: count}], ...]``) checked and read;
    ``ValueError`` naming what is wrong (the route answers 400)."""
    if not isinstance(body, list) or len(body) > max_epochs:
        raise ValueError(f"epochs must be a list of at most {max_epochs} [epoch, counts] pairs")
    out: dict[int, dict[str, int]] = {}
    for item in body:
        if not (isinstance(item, list) and len(item) == 2 and type(item[0]) is int):
            raise ValueError("each entry is [epoch (int), {input: count}]")
        epoch, counts = item
        if not isinstance(counts, dict) or len(counts) > max_inputs:
            raise ValueError(f"counts must be an object of at most {max_inputs} inputs")
        per = out.setdefault(epoch, {})
        for name, n in counts.items():
            if not isinstance(name, str) or len(name) > 128:
                raise ValueError("an input name is a string of at most 128 characters")
            if type(n) is not int or not 0 <= n < 1 << 53:
                raise ValueError("a count is an integer in [0, 2**53)")
            per[name] = per.get(name, 0) + n
    return out
