"""ResultWatcher: what the results API showed for each epoch while a fault ran, and when.

Contract. The chaos harness's end-of-run check (:func:`agent.server.chaos.check`) sees only
where results converged. A :class:`ResultWatcher` polls the results API of one job from a
thread, every ``interval`` seconds, for every epoch from ``first_epoch`` up to the newest
stored one that is not final yet, and keeps per epoch the **first answer** (its wall time,
tentative or final, coverage, accuracy, lacking origins, rows) and the **first final answer**.
:meth:`ResultWatcher.summary` then measures, against the lines written (per agent file):

* **time to the first result vs to the final one**, each from the epoch's close (its end plus
  the allowed lateness), for the epochs whose first answer was tentative (PPA: tentative output
  up to 10x sooner than the accurate one);
* **coverage error**: each first tentative answer's ``coverage`` vs the truth - the share of
  the epoch's records (lines) written to the files of the agents it does not name as lacking;
* **top-k accuracy error** (a plan with ``top_k``): the answer's ``accuracy`` estimate vs the
  real ``|tentative top-k ∩ final top-k| / k``.

Bounds: one API call per watched epoch per poll; epochs final once are not asked again; the
thread ends on :meth:`stop`. Poll times are wall-clock (``time.time()``), like the agents'.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from agent.client import ApiError
from agent.server.chaos import ChaosCluster, JobPlan, read_records, reference


@dataclass
class Seen:
    """One epoch as the watcher saw it."""

    first_at: float | None = None
    first: dict[str, Any] | None = None
    final_at: float | None = None
    final: dict[str, Any] | None = None
    answers: int = 0
    tentative_answers: list[tuple[float, dict[str, Any]]] = field(default_factory=list)


class ResultWatcher:
    """Polls one job's per-epoch results from a thread (module contract)."""

    def __init__(
        self, chaos: ChaosCluster, plan: JobPlan, first_epoch: int, interval: float = 0.05
    ) -> None:
        self.chaos = chaos
        self.plan = plan
        self.first_epoch = first_epoch
        self.interval = interval
        self.seen: dict[int, Seen] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="result-watcher", daemon=True)

    def start(self) -> ResultWatcher:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _client(self) -> Any:
        return self.chaos.any_client()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                client = self._client()
                newest = int(client.results(self.plan.name)["epoch"])
            except (ApiError, IndexError, KeyError, TypeError, ValueError):
                continue
            for epoch in range(self.first_epoch, newest + 1):
                seen = self.seen.setdefault(epoch, Seen())
                if seen.final is not None:
                    continue
                try:
                    res = client.results(self.plan.name, epoch)
                except ApiError:
                    continue
                now = time.time()
                seen.answers += 1
                if seen.first is None:
                    seen.first_at, seen.first = now, res
                if res.get("tentative"):
                    if len(seen.tentative_answers) < 8:
                        seen.tentative_answers.append((now, res))
                else:
                    seen.final_at, seen.final = now, res

    # ---- measuring ---------------------------------------------------------------------

    def closed_at(self, epoch: int) -> float:
        return (epoch + 1) * self.plan.epoch_seconds + self.plan.allowed_lateness

    def summary(self) -> dict[str, Any]:
        """The figures of the module contract (JSON-able)."""
        ids = self.chaos.node_ids()
        lines = [Counter(self.plan.epoch_of(float(r["ts"])) for r in read_records([p]))
                 for p in self.chaos.paths]  # fmt: skip
        by_agent = [reference(self.plan, read_records([p])) for p in self.chaos.paths]
        rows: list[dict[str, Any]] = []
        for epoch, seen in sorted(self.seen.items()):
            if seen.first is None or not seen.first.get("tentative"):
                continue
            close = self.closed_at(epoch)
            row: dict[str, Any] = {
                "epoch": epoch,
                "tentative_after_close_s": round(seen.first_at - close, 3),  # type: ignore[operator]
                "final_after_close_s": (
                    round(seen.final_at - close, 3) if seen.final_at is not None else None
                ),
                "lacking": len(seen.first.get("lacking") or ()),
            }
            lacking = set(seen.first.get("lacking") or ())
            total = sum(c[epoch] for c in lines)
            if total and len(ids) == self.chaos.n and "?" not in lacking:
                truth = sum(lines[i][epoch] for i in ids if ids[i] not in lacking) / total
                row["coverage"] = seen.first.get("coverage")
                row["coverage_truth"] = round(truth, 4)
                if isinstance(row["coverage"], int | float):
                    row["coverage_error_pts"] = round(abs(row["coverage"] - truth) * 100, 2)
            if self.plan.top_k and seen.final is not None:
                k = self.plan.top_k
                tentative = {str(r[0]) for r in seen.first.get("rows") or ()}
                final = {str(r[0]) for r in seen.final.get("rows") or ()}
                want = sum((b.get(epoch, Counter()) for b in by_agent), Counter())
                if final and self.plan.matches(
                    Counter({str(r[0]): int(r[1]) for r in seen.final["rows"]}), want
                ):
                    real = len(tentative & final) / min(k, len(final))
                    row["accuracy"] = seen.first.get("accuracy")
                    row["accuracy_truth"] = round(real, 4)
                    if isinstance(row["accuracy"], int | float):
                        row["accuracy_error_pts"] = round(abs(row["accuracy"] - real) * 100, 2)
            rows.append(row)
        return {"epochs": rows, **_medians(rows)}


def _medians(rows: list[dict[str, Any]]) -> dict[str, Any]:
    def med(key: str) -> float | None:
        vals = [r[key] for r in rows if isinstance(r.get(key), int | float)]
        return round(statistics.median(vals), 3) if vals else None

    def worst(key: str) -> float | None:
        vals = [r[key] for r in rows if isinstance(r.get(key), int | float)]
        return round(max(vals), 3) if vals else None

    tentative, final = med("tentative_after_close_s"), med("final_after_close_s")
    ratios = [
        r["final_after_close_s"] / r["tentative_after_close_s"]
        for r in rows
        if isinstance(r.get("final_after_close_s"), int | float)
        and r.get("tentative_after_close_s", 0) > 0
    ]
    return {
        "tentative_epochs": len(rows),
        "tentative_after_close_s_p50": tentative,
        "final_after_close_s_p50": final,
        "final_over_tentative_p50": round(statistics.median(ratios), 2) if ratios else None,
        "coverage_error_pts_p50": med("coverage_error_pts"),
        "coverage_error_pts_max": worst("coverage_error_pts"),
        "accuracy_error_pts_p50": med("accuracy_error_pts"),
        "accuracy_error_pts_max": worst("accuracy_error_pts"),
    }
