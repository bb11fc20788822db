"""Control messages of one job on one agent: multicasts down its trees, and peers' ``send_to``.

Contract (:class:`JobControl`, one per job runtime, on the event loop):

* :meth:`~JobControl.multicast` sends a message down one of the job's trees (stamped
  ``sent_at``), within ``RuntimeTunables.multicast_timeout``; how many agents it reached and
  how long it took are kept (the 64 newest, ``multicast_stats``) and told to the observer.
* :meth:`~JobControl.on_multicast` takes each message the tree delivers here (the 64 newest are
  kept, ``multicasts``): a runtime ``change`` goes to the changes part, fault tolerance's own
  kinds to the job's fault tolerance (:class:`~agent.runtime.job.host.
  RecoveryHooks`), anything else to the job - the worker's instance on the record thread, or
  the job's ``on_multicast`` hook on an agent without input (``feedback`` kept first).
* :meth:`~JobControl.receive` is a peer's ``send_to``: a snapshot must match the current
  aggregate and key schema (409 ``incompatible``); an exception from the job's ``on_recv``
  answers 400 ``recv_refused`` (counted, logged within a budget), never a 500.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from agent.jobs.job import maybe_await
from agent.runtime.job.host import JobHost
from cbt import Snapshot
from overlay.logbudget import LogBudget
from srt.dataplane.compat import admit
from srt.errors import Incompatible, Reject

log = logging.getLogger(__name__)


class JobControl:
    """The control plane of one job here (see the module contract)."""

    def __init__(self, host: JobHost) -> None:
        self.host = host
        self.multicasts: list[dict[str, Any]] = []  # recent control messages received
        self.multicast_stats: list[dict[str, Any]] = []  # as master: reached, elapsed
        self._log = LogBudget(log)  # refusals of peer data: counted, logged within a budget

    def release(self) -> None:
        """The job stopped: forget the messages received."""
        self.multicasts.clear()

    async def multicast(self, tid: int, message: dict[str, Any]) -> Any:
        """Send ``message`` down tree ``tid`` (as its master); the tree layer's result."""
        host = self.host
        trees = host.network.trees
        assert trees is not None
        sent = time.time()
        result = await trees.multicast(
            tid, {**message, "sent_at": sent}, timeout=host.tunables.multicast_timeout
        )
        self.multicast_stats.append(
            {
                "kind": message.get("kind"),
                "epoch": message.get("epoch"),
                "sent_at": sent,
                "reached": result.reached,
                "ms": result.elapsed_s * 1000,
            }
        )
        del self.multicast_stats[:-64]
        host.observer.multicast_done(host.name, str(message.get("kind")), result.elapsed_s)
        return result

    async def on_multicast(self, tid: int, message: dict[str, Any]) -> None:
        """A message the job's tree ``tid`` delivered here (see the module contract)."""
        host = self.host
        self.multicasts.append({"tree": f"{tid:040x}", **message, "received_at": time.time()})
        del self.multicasts[:-64]
        if message.get("kind") == "change":
            await host.changes.on_change(message)
            return
        if host.recovery.on_multicast(tid, message):  # fault tolerance's own kinds
            return
        if host.worker is not None:
            await maybe_await(await host.records.run(host.worker.on_multicast, message))
        else:
            if message.get("kind") == "feedback":
                host.job.feedback = message.get("value")
            await host.call_job(host.job.on_multicast, message)

    async def receive(self, sender: int, paos: Snapshot | Any) -> None:
        """A peer's ``send_to`` (``POST /agent/v1/recv``) to the job's ``on_recv``: a snapshot
        must match the current aggregate and key schema (409 ``incompatible``); an exception
        from ``on_recv`` answers 400 ``recv_refused`` (counted, logged), never a 500."""
        host = self.host
        if isinstance(paos, Snapshot):
            try:
                paos = admit(host.trees.expectation(None), paos)
            except Incompatible as exc:
                host.count("refused_incompatible")
                self._log.warning(
                    "refused_incompatible",
                    "job %s: refused a send_to snapshot from %x: %s",
                    host.name,
                    sender,
                    exc.detail,
                )
                raise
        try:
            await host.call_job(host.job.on_recv, sender, paos)
        except Exception as exc:
            host.count("recv_errors")
            self._log.warning(
                "recv_errors", "job %s: on_recv refused data from %x: %r", host.name, sender, exc
            )
            raise Reject(400, "recv_refused", f"the job's on_recv raised {exc!r}"[:300]) from None
