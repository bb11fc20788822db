"""Control messages of one job on one agent: multicasts down its trees, and peers' ``send_to``.

Contract (:class:`JobControl`, one per job runtime, on the event loop):

* :meth:`~JobControl.multicast` sends a message down one of the job's trees (stamped
  ``sent_at``), within ``RuntimeTunables.multicast_timeout``; how many agents it reached and
  how long it took are kept (the 64 newest, ``multicast_stats``) and told to the observer.
* **One multicast per epoch.** A master sends two messages down a tree each epoch: the
  result's ``empty`` (batch jobs) and the ``commit`` that follows the standby's copy. The
  ``empty`` waits up to ``RuntimeTunables.multicast_bundle_wait`` for the commit, and the
  two go down as one ``{"kind": "bundle", "messages": [...]}`` (alone after
  the wait). A commit never waits - the members' recovery timers follow its pace
  (``recovery/commit_lag.py``), and a later commit makes them checkpoint and probe more: one
  that comes first goes alone, at once. Every agent in the tree then handles one multicast
  instead of two: a receive, a forward per child and their replies (docs/agent-runtime.md,
  "Benchmark"). Messages of other kinds go at once, alone, after what waits (a ``feedback``
  value may fill a datagram by itself, so it never shares one). A receiver takes a bundle's
  messages in order, each as if it came alone; a bundle holds at most :data:`MAX_BUNDLE`
  messages, never another bundle.
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

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass
from typing import Any

from agent.jobs.job import maybe_await
from agent.runtime.job.host import JobHost
from cbt import Snapshot
from overlay.logbudget import LogBudget
from srt.dataplane.compat import admit
from srt.errors import Incompatible, Reject

log = logging.getLogger(__name__)

#: the per-epoch kinds that may wait for company, and the one that takes them along but never
#: waits itself (module contract)
WAITING_KINDS = frozenset({"empty"})  # tiny; a feedback value may fill a datagram alone
COMPANY_KINDS = frozenset({"commit"})
BUNDLE = "bundle"
MAX_BUNDLE = 8  # messages a received bundle may hold


async def _failure_to_caller(sending: Any) -> None:
    """A parked multicast's send: its failure is the parked caller's (it has it), not the
    spawner's to log again."""
    with contextlib.suppress(Exception):
        await sending


@dataclass
class _Waiting:
    """Messages parked for one tree until company comes or the wait ends."""

    messages: list[dict[str, Any]]
    done: asyncio.Future
    timer: asyncio.TimerHandle


class JobControl:
    """The control plane of one job here (see the module contract)."""

    def __init__(self, host: JobHost) -> None:
        self.host = host
        self.multicasts: list[dict[str, Any]] = []  # recent control messages received
        self.multicast_stats: list[dict[str, Any]] = []  # as master: reached, elapsed
        self._log = LogBudget(log)  # refusals of peer data: counted, logged within a budget
        self._waiting: dict[int, _Waiting] = {}  # per tree: messages waiting for company

    def release(self) -> None:
        """The job stopped: forget the messages received; parked ones go no further."""
        self.multicasts.clear()
        for waiting in self._waiting.values():
            waiting.timer.cancel()
            if not waiting.done.done():
                waiting.done.cancel()
        self._waiting.clear()

    async def multicast(self, tid: int, message: dict[str, Any]) -> Any:
        """Send ``message`` down tree ``tid`` (as its master); the tree layer's result. A
        per-epoch kind may wait for company first (module contract)."""
        wait = self.host.tunables.multicast_bundle_wait
        kind = message.get("kind")
        parked = self._waiting.get(tid)
        if parked is not None and kind in WAITING_KINDS:  # it waits with them (room kept for
            parked.messages.append(message)  # the company; a full bundle goes at once)
            if len(parked.messages) >= MAX_BUNDLE - 1:
                self._send_parked(tid)
            return await asyncio.shield(parked.done)
        if parked is not None:  # company: they go with it; anything else goes after them
            del self._waiting[tid]
            parked.timer.cancel()
            if kind in COMPANY_KINDS:
                return await self._send_bundle(tid, [*parked.messages, message], parked.done)
            await _failure_to_caller(self._send_bundle(tid, parked.messages, parked.done))
        elif kind in WAITING_KINDS and wait > 0:  # park it until company comes or the wait ends
            loop = asyncio.get_running_loop()
            done = loop.create_future()
            timer = loop.call_later(wait, self._send_parked, tid)
            self._waiting[tid] = _Waiting([message], done, timer)
            return await asyncio.shield(done)
        return await self._send(tid, [message])

    def _send_parked(self, tid: int) -> None:
        """The wait ended with no company: the parked messages go down alone."""
        waiting = self._waiting.pop(tid, None)
        if waiting is not None:
            sending = self._send_bundle(tid, waiting.messages, waiting.done)
            self.host.tasks.spawn(_failure_to_caller(sending), f"{self.host.name} multicast")

    async def _send_bundle(
        self, tid: int, messages: list[dict[str, Any]], done: asyncio.Future
    ) -> Any:
        """Send and hand the result (or the failure) to the parked caller as well."""
        try:
            result = await self._send(tid, messages)
        except BaseException as exc:
            if not done.done():
                done.set_exception(exc)
                done.exception()  # retrieved: a caller that went away leaves no warning
            raise
        if not done.done():
            done.set_result(result)
        return result

    async def _send(self, tid: int, messages: list[dict[str, Any]]) -> Any:
        """One multicast of ``messages`` (a bundle when more than one)."""
        host = self.host
        trees = host.network.trees
        assert trees is not None
        sent = time.time()
        stamped = [{**m, "sent_at": sent} for m in messages]
        wire = stamped[0] if len(stamped) == 1 else {"kind": BUNDLE, "messages": stamped}
        result = await trees.multicast(tid, wire, timeout=host.tunables.multicast_timeout)
        for message in messages:
            self.multicast_stats.append(
                {
                    "kind": message.get("kind"),
                    "epoch": message.get("epoch"),
                    "sent_at": sent,
                    "reached": result.reached,
                    "ms": result.elapsed_s * 1000,
                }
            )
            host.observer.multicast_done(host.name, str(message.get("kind")), result.elapsed_s)
        del self.multicast_stats[:-64]
        return result

    async def on_multicast(self, tid: int, message: dict[str, Any]) -> None:
        """A message the job's tree ``tid`` delivered here (see the module contract)."""
        if message.get("kind") == BUNDLE:
            inner = message.get("messages")
            if not isinstance(inner, list) or not 0 < len(inner) <= MAX_BUNDLE:
                self.host.count("bad_multicast_bundle")
                return
            for one in inner:
                if isinstance(one, dict) and one.get("kind") != BUNDLE:
                    await self.on_multicast(tid, one)
                else:
                    self.host.count("bad_multicast_bundle")
            return
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
