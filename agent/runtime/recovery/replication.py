"""Replication: a master keeps its tree's standby up to date; a standby takes over.

Contract (``docs/fault-tolerance.md``, "Master standby"; the bookkeeping is
:mod:`agent.runtime.recovery.standby`):

* as master, :meth:`Replication.replicate` runs one loop per tree that sends the standby
  every stored epoch version it does not hold yet (``POST /agent/v1/replica``, at most
  :data:`REPLICA_BATCH` epochs a request, with the expected origins, their URLs, the commit
  watermark and the term; a failure waits ``repair_interval``), then advances the commit
  watermark (only over epochs the standby holds);
* as standby, :meth:`accept_replica` keeps that state per tree (``ValueError`` on a malformed
  body: nothing kept);
* when the standby becomes the root, :meth:`take_over` absorbs the dead master's replica
  (under a term above the dead master's, settled at once), then the shared absorb sequence
  publishes, replays and re-replicates it; :meth:`replay` rebuilds the job's result-derived
  state (``on_epoch_result`` in epoch order).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from agent.runtime.recovery.host import RecoveryParts
from agent.runtime.recovery.result_items import decode_items, encode_items
from agent.runtime.recovery.standby import Replica, standby_for
from agent.runtime.services import NetworkService, Spawner
from agent.tunables import RuntimeTunables

log = logging.getLogger(__name__)

REPLICA_BATCH = 32  # epochs sent to the standby per replication request


class Replication:
    """The standby side and the master side of one job's replication (module contract)."""

    def __init__(
        self,
        parts: RecoveryParts,
        network: NetworkService,
        tasks: Spawner,
        tunables: RuntimeTunables,
    ) -> None:
        self.parts = parts
        self.network = network
        self.tasks = tasks
        self.tunables = tunables
        self._replicating: set[int] = set()
        self._urls: dict[int, str] = {}  # the standby's node id → its data-plane URL

    def standby(self, tid: int) -> Any:
        if not self.tunables.standby_replication:
            return None
        return standby_for(tid, self.network.node_id, self.network.neighbours())

    def replicate(self, tid: int) -> None:
        """A stored result changed at this master: bring the standby up to date (one loop
        per tree), then advance the commit watermark."""
        if self.parts.host.stopped or tid in self._replicating:
            return
        self._replicating.add(tid)
        self.tasks.spawn(self._loop(tid), f"{self.parts.name} replicate")

    async def _loop(self, tid: int) -> None:
        parts = self.parts
        log_ = parts.replication
        try:
            while not parts.host.stopped:
                if not parts.host.is_root(tid):
                    return
                target = self.standby(tid)
                log_.retarget(tid, None if target is None else target.id)
                versions = parts.store.versions(tid)
                log_.forget(tid, versions)
                due = [] if target is None else log_.due(tid, versions)
                if not due:
                    self._replicating.discard(tid)  # before any await: no change is missed
                    parts.advance(tid)
                    return
                if not await self._send(tid, target, due[:REPLICA_BATCH]):
                    await asyncio.sleep(self.tunables.repair_interval)
        finally:
            self._replicating.discard(tid)

    async def _send(self, tid: int, target: Any, epochs: list[int]) -> bool:
        parts = self.parts
        store = parts.store
        plan = store.export_plan(tid, epochs=set(epochs))
        exported = await asyncio.to_thread(store.encode_plan, plan)
        body = {
            "job": parts.name,
            "tree": tid,
            "master": f"{self.network.node_id:x}",
            "items": encode_items(exported),
            "expected": {**parts.membership.export(), "urls": parts.loss.export_urls()},
            "committed": parts.committed.get(tid),
            "term": parts.fence.term(tid),
        }
        try:
            # the standby's URL is asked over the overlay once, not per epoch (a round trip)
            url = self._urls.get(target.id) or await self.network.data_url_of(target)
            self._urls = {target.id: url}
            await self.network.client.post_json(url, "/agent/v1/replica", body)
        except Exception as exc:
            self._urls.pop(target.id, None)
            parts.host.count("replica_failures")
            log.info("job %s: replicating to standby %x failed: %r", parts.name, target.id, exc)
            return False
        parts.replication.acknowledged(tid, target.id, {i["epoch"]: i["version"] for i in exported})
        parts.host.count("replica_items_sent", len(exported))
        return True

    def accept_replica(self, tid: int, body: dict[str, Any]) -> dict[str, Any]:
        """As standby (``POST /agent/v1/replica``): keep the master's replicated state.
        Raises ``ValueError`` on a malformed body (a 400), nothing kept."""
        parts = self.parts
        parts.host.known_tree(tid)
        master = int(str(body["master"]), 16)
        items = decode_items(body["items"], max_items=4 * REPLICA_BATCH)
        committed = body.get("committed")
        if committed is not None and type(committed) is not int:
            raise ValueError("committed must be an integer or null")
        replica = parts.replicas.get(tid)
        if replica is None or replica.master != master:
            replica = parts.replicas[tid] = Replica(master, parts.store.max_epochs)
        kept = replica.add(items)
        replica.expected = body.get("expected")
        term = body.get("term", 0)
        if type(term) is not int or term < 0:
            raise ValueError("term must be a non-negative integer")
        replica.term = max(replica.term, term)
        parts.fence.hear(tid, term)
        if committed is not None:
            replica.committed = max(committed, replica.committed or committed)
        parts.host.count("replica_items_kept", kept)
        return {"kept": kept}

    def take_over(self, tid: int) -> bool:
        """This agent just became the tree's root: if it was the standby, the dead master's
        replicated state becomes its own (no committed epoch lost, job state replayed), under
        a term above the dead master's (settled: it publishes at once). False when it held no
        replica to take over."""
        parts = self.parts
        replica = parts.replicas.pop(tid, None)
        if replica is None or not replica.items:
            return False
        parts.fence.hear(tid, replica.term)
        parts.fence.became_root(tid, time.time(), settled=True)
        try:
            taken = parts.absorb_items(
                tid, list(replica.items.values()), replica.expected, "standby"
            )
        except Exception as exc:  # a bad replica must not stop the take-over: say so
            parts.host.count("takeover_failed")
            log.warning("job %s: standby replica of tree %x unusable: %r", parts.name, tid, exc)
            return True
        if replica.committed is not None:
            parts.committed[tid] = max(replica.committed, parts.committed.get(tid, -1))
        parts.host.count("takeovers")
        log.warning(
            "job %s tree %x: took over as master from the standby replica of %x "
            "(%d epochs, committed up to %s), term %d",
            parts.name,
            tid,
            replica.master,
            taken,
            replica.committed,
            parts.fence.term(tid),
        )
        # the dead master may not have written (or buffered) some of them yet: each is
        # published again under this master's term (the lake fences the dead one's); what
        # the replica's epochs lack is pulled from here on
        parts.adopted(tid, sorted(replica.items), repair=True)
        return True

    async def replay(self, tid: int, epochs: list[int]) -> None:
        """Rebuild the job instance's result-derived state (``on_epoch_result`` in epoch
        order) from results this master took over."""
        parts = self.parts
        store = parts.store
        for epoch in epochs:
            result = store.get(tid, epoch)
            if result is None:
                continue
            snap = result.snapshot
            if snap is None:
                try:
                    snap = await asyncio.to_thread(store.load, tid, epoch)
                except Exception:
                    continue
            if parts.host.stopped:
                return
            try:
                final = result.state == "final"
                quality = None if final else (result.state, list(result.lacking))
                await parts.host.replay_result(epoch, snap, quality)
            except Exception as exc:  # the job's own hook failed: its state lacks the epoch
                parts.host.count("replay_errors")
                log.warning("job %s: replaying epoch %d failed: %r", parts.name, epoch, exc)
        parts.host.count("epochs_replayed", len(epochs))
