"""Late records made visible at their origin: counted, sampled, logged, reported.

Contract (:class:`LateRecords`, one per worker; every method runs on the thread that feeds the
worker, after each batch): :meth:`LateRecords.collect` takes what the clock refused as late in
one batch of one input (:meth:`~agent.runtime.epochs.clock.EpochClock.take_late`: per epoch the
records would have belonged to, a count and the first one's event time) and

* **counts** them per epoch and input (the newest :data:`MAX_EPOCHS` epochs kept for the
  status), per input and in total (``stats()``; the agent's ``elf_late_records_total{job,
  input}``), and queues them for the job's master (:meth:`LateRecords.take_report`: epoch →
  input → count, what arrived since the last call; the master puts them in each epoch's
  result, agent/runtime/results/late_ledger.py);
* **samples** them to the job's late dead-letter file (``<data_dir>/deadletter/late/<job>.jsonl``,
  :class:`~agent.ingest.deadletter.DeadLetterFile`, reason ``late``): at most
  :data:`SAMPLES_PER_EPOCH` per (epoch, input) and the file's ``per_reason_per_hour``
  (:data:`SAMPLES_PER_HOUR`) per job, each with job, epoch, origin, input, event time, the
  watermark that refused it and, where the batch still holds it, the record itself;
* takes, through :meth:`LateRecords.lost`, records the worker accepted but lost (not
  readable again: a parse helper's chunk whose file was truncated), counted and reported the
  same way under the input :data:`UNREADABLE`;
* **logs** one WARNING per (epoch, input) and batch, naming job, epoch, origin, input and the
  count, within a :class:`~overlay.logbudget.LogBudget` per job (10 a minute, then "[n similar
  suppressed]"): never one line per record.

A late record is one the watermark refused (bounded out-of-orderness: its epoch ended at or
before ``max event time - allowed_lateness``, or already closed here); records before the job's
``start_epoch`` belong to no result and are not late here (the clock counts them apart).
Cost: nothing per accepted record; per batch with late records, one dict update per late
epoch (the columnar path's counting is vectorized in the clock).
"""

from __future__ import annotations

import logging
import math
from collections import Counter, OrderedDict
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from agent.ingest.deadletter import DeadLetterFile
from overlay.logbudget import LogBudget

log = logging.getLogger(__name__)

MAX_EPOCHS = 256  # epochs whose late counts per input the status keeps (newest)
MAX_REPORT_EPOCHS = 4096  # epochs queued for the master between two reports
SAMPLES_PER_EPOCH = 3  # dead-letter samples per (epoch, input)
SAMPLES_PER_HOUR = 100  # dead-letter samples per job per clock hour
REASON = "late"
#: the input name under which records lost unreadable are counted and reported (:meth:`lost`)
UNREADABLE = "(unreadable)"


def late_dead_letter(data_dir: str | Path, job: str) -> DeadLetterFile:
    """The late dead-letter file of ``job`` under ``data_dir`` (module contract)."""
    path = Path(data_dir) / "deadletter" / "late" / f"{job}.jsonl"
    return DeadLetterFile(path, job, per_reason_per_hour=SAMPLES_PER_HOUR)


class LateRecords:
    """One worker's late records (see the module contract). ``origin`` names this agent
    (its hex node id; ``elf run``: ``local``)."""

    def __init__(self, job: str, origin: str, *, dead_letter: DeadLetterFile | None = None) -> None:
        self.job = job
        self.origin = origin
        self.dead_letter = dead_letter
        self.total = 0
        self.by_input: Counter[str] = Counter()
        #: epoch → input → late records (the newest MAX_EPOCHS epochs)
        self.by_epoch: OrderedDict[int, Counter[str]] = OrderedDict()
        self._sampled: dict[tuple[int, str], int] = {}
        self._report: dict[int, Counter[str]] = {}
        self.report_overflow = 0  # late records not reported: past MAX_REPORT_EPOCHS
        self._log = LogBudget(log, burst=10, interval=60.0)

    def collect(
        self,
        input_name: str,
        late: Mapping[int, tuple[int, float]],
        *,
        watermark: float = -math.inf,
        records: Any = None,
        ts_field: str = "ts",
    ) -> int:
        """Count, sample, log and queue one batch's late records of ``input_name`` (module
        contract); ``records`` is the batch (to find a sampled record by its event time).
        Returns how many there were."""
        n_all = 0
        for epoch, (n, first_ts) in sorted(late.items()):
            n_all += n
            self._count(epoch, input_name, n)
            self._log.warning(
                f"late:{self.job}",
                "job %s: %d records arrived too late for epoch %d from origin %s (input %s; "
                "watermark %s, allowed lateness exceeded): not in its result, counted in its "
                "late field",
                self.job,
                n,
                epoch,
                self.origin,
                input_name,
                _num(watermark),
            )
            self._sample(epoch, input_name, first_ts, watermark, records, ts_field)
        return n_all

    def lost(self, epochs: Mapping[int, int], why: str) -> int:
        """Records this worker accepted into no result because it could not read them again
        (a parse helper aggregated them and the file lost their bytes before they were
        needed: agent/ingest/columnar/handed.py): epoch -> records. Counted and queued for the
        master as the late ones are, under the input :data:`UNREADABLE`, so each epoch's
        ``late`` field in the results API and the lake names them; logged at WARNING per
        epoch with job, origin and ``why``. Returns how many there were."""
        n_all = 0
        for epoch, n in sorted(epochs.items()):
            if n <= 0:
                continue
            n_all += n
            self._count(epoch, UNREADABLE, n)
            self._log.warning(
                f"unreadable:{self.job}",
                "job %s: %d records of epoch %d from origin %s could not be read again (%s): "
                "not in its result, counted in its late field as input %r",
                self.job, n, epoch, self.origin, why, UNREADABLE,
            )  # fmt: skip
        return n_all

    def _count(self, epoch: int, input_name: str, n: int) -> None:
        self.total += n
        self.by_input[input_name] += n
        per = self.by_epoch.get(epoch)
        if per is None:
            per = self.by_epoch[epoch] = Counter()
            if len(self.by_epoch) > MAX_EPOCHS:  # the oldest epoch's figures leave the status
                old, _ = self.by_epoch.popitem(last=False)
                for key in [k for k in self._sampled if k[0] == old]:
                    del self._sampled[key]
        per[input_name] += n
        queued = self._report.get(epoch)
        if queued is None:
            if len(self._report) >= MAX_REPORT_EPOCHS:  # the master is out of reach
                self.report_overflow += n
                return
            queued = self._report[epoch] = Counter()
        queued[input_name] += n

    def _sample(
        self,
        epoch: int,
        input_name: str,
        ts: float,
        watermark: float,
        records: Any,
        ts_field: str,
    ) -> None:
        dead = self.dead_letter
        key = (epoch, input_name)
        if dead is None or self._sampled.get(key, 0) >= SAMPLES_PER_EPOCH:
            return
        self._sampled[key] = self._sampled.get(key, 0) + 1
        record = find_record(records, ts_field, ts)
        fields = {
            "input": input_name,
            "job": self.job,
            "epoch": epoch,
            "origin": self.origin,
            "event_time": ts,
            "watermark": _num(watermark),
        }
        line = "" if record is None else _text(record)
        dead.write(REASON, line, message="later than the allowed lateness", fields=fields)

    def take_report(self) -> dict[int, dict[str, int]]:
        """epoch → input → late records since the last call (for the job's master)."""
        if not self._report:
            return {}
        out, self._report = self._report, {}
        return {e: dict(c) for e, c in out.items()}

    def stats(self) -> dict[str, Any]:
        """``records`` (total), ``by_input``, ``recent`` (the newest 16 epochs: epoch →
        count), ``report_overflow`` and the dead-letter file's counters (None: no file)."""
        recent = list(self.by_epoch.items())[-16:]
        return {
            "records": self.total,
            "by_input": dict(self.by_input),
            "recent": {str(e): sum(c.values()) for e, c in recent},
            "report_overflow": self.report_overflow,
            "dead_letter": None if self.dead_letter is None else self.dead_letter.stats(),
        }


def find_record(records: Any, ts_field: str, ts: float) -> Any:
    """The first record of a batch (a list of records, or a columnar batch's parts) whose
    ``ts_field`` equals ``ts``; None when not found. Runs only for a sample (rate-limited)."""
    if records is None:
        return None
    parts = getattr(records, "parts", None)
    for part in [records] if parts is None else parts:
        if hasattr(part, "num_rows"):  # an Arrow table
            found = _find_in_table(part, ts_field, ts)
        else:
            found = next((r for r in part if isinstance(r, dict) and r.get(ts_field) == ts), None)
        if found is not None:
            return found
    return None


def _find_in_table(table: Any, ts_field: str, ts: float) -> Any:
    import pyarrow as pa  # (loaded: a columnar batch came with it)
    import pyarrow.compute as pc

    if ts_field not in table.column_names:
        return None
    try:
        col = table.column(ts_field).cast(pa.float64())
        hits = pc.indices_nonzero(pc.equal(col, ts))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None
    if not len(hits):
        return None
    return table.slice(hits[0].as_py(), 1).to_pylist()[0]


def _text(record: Any) -> str:
    import orjson

    try:
        return orjson.dumps(record, default=repr).decode()
    except TypeError:
        return repr(record)


def _num(x: float) -> float | None:
    return x if math.isfinite(x) else None
