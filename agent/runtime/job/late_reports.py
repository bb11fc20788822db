"""Late-record reports from an origin to its job's master.

Contract (:class:`LateReporter`, one per job runtime, on the event loop): the pipeline hands
it what the worker's :class:`~agent.runtime.epochs.late.LateRecords` queued (epoch → input →
late records, :meth:`LateReporter.add`); at most once per :data:`INTERVAL` seconds, with one
report in flight, :meth:`LateReporter.flush` sends what accumulated to the master of the job's
first tree (``POST /agent/v1/late-records``, an authenticated peer route: ``{"job", "origin",
"epochs": [[epoch, {input: n}], ...]}``), or hands it to the local ledger when this agent is
that master. A failed send keeps the counts for the next one (counted:
``late_report_retries``; an agent that is no longer the master answers 503 ``not_master``);
past :data:`MAX_EPOCHS` pending epochs (a master out of reach for
long) the oldest epochs' counts are dropped from the report - counted
(``late_report_dropped``, records) and logged at WARNING within a budget - and stay in this
agent's status and metrics. Every count is sent once: a report the master answered 200 is not
re-sent.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping

from agent.runtime.job.host import JobHost
from overlay.logbudget import LogBudget

log = logging.getLogger(__name__)

PATH = "/agent/v1/late-records"
INTERVAL = 1.0  # seconds between two reports of one job
MAX_EPOCHS = 4096  # epochs pending for the master (oldest dropped past it, counted)


class LateReporter:
    """Sends this origin's late counts to the job's master (module contract). ``local`` takes
    a report when this agent is the master (origin hex id, epoch → input → count; False: it
    is not, the report is kept and sent again)."""

    def __init__(
        self,
        host: JobHost,
        *,
        master_url: Callable[[int], Awaitable[str]],
        forget_master_url: Callable[[int, BaseException | None], None],
        local: Callable[[str, Mapping[int, Mapping[str, int]]], bool],
    ) -> None:
        self.host = host
        self._master_url = master_url
        self._forget = forget_master_url
        self._local = local
        self._pending: dict[int, Counter[str]] = {}
        self._sending = False
        self._last = 0.0
        self._log = LogBudget(log)

    def add(self, report: Mapping[int, Mapping[str, int]]) -> None:
        """Counts the worker queued (epoch → input → late records)."""
        for epoch, inputs in report.items():
            self._pending.setdefault(epoch, Counter()).update(inputs)
        if len(self._pending) > MAX_EPOCHS:
            dropped = 0
            for epoch in sorted(self._pending)[: len(self._pending) - MAX_EPOCHS]:
                dropped += sum(self._pending.pop(epoch).values())
            self.host.count("late_report_dropped", dropped)
            self._log.warning(
                f"late-report:{self.host.name}",
                "job %s: %d late records of old epochs not reported to the master (out of "
                "reach); they stay counted in this agent's status",
                self.host.name,
                dropped,
            )

    def flush(self, now: float | None = None) -> None:
        """Send what is pending if due (module contract); never waits."""
        now = time.monotonic() if now is None else now
        if not self._pending or self._sending or now - self._last < INTERVAL:
            return
        self._last = now
        batch, self._pending = self._pending, {}
        self._sending = True
        self.host.tasks.spawn(self._send(batch), f"{self.host.name} late report")

    async def _send(self, batch: dict[int, Counter[str]]) -> None:
        host = self.host
        origin = format(host.network.node_id, "x")
        tid = host.tree_list[0]
        try:
            url = await self._master_url(tid)
            if url == host.network.data_url:
                if not self._local(origin, batch):  # stopped being the master meanwhile
                    raise LookupError("not the job's master here any more")
                return
            body = {
                "job": host.name,
                "origin": origin,
                "epochs": [[e, dict(c)] for e, c in sorted(batch.items())],
            }
            await host.network.client.post_json(url, PATH, body)
        except Exception as exc:  # unreachable, a hand-over: keep the counts, retry later
            self._forget(tid, exc)
            host.count("late_report_retries")
            self._log.info(
                f"late-report-retry:{host.name}",
                "job %s: late report to the master failed: %r; retrying",
                host.name,
                exc,
            )
            self.add(batch)
        finally:
            self._sending = False
