"""Hand-over: a master that loses the root role gives its results to the next one; a
stopping origin declares its end.

Contract (``docs/fault-tolerance.md``, "Hand-over" and "Absence, leaving and retiring"):

* :meth:`Handover.hand_over` - no longer the root: send the stored results (result items,
  :mod:`agent.runtime.recovery.result_items`) with the expected origins and the term to the
  new master (``POST /agent/v1/handover``), retried with back-off until it took them, this
  agent is the root again, or the job stops (a master lookup that still answers this agent,
  mid-transition, is retried too, never taken as "nothing to send"); :meth:`to_successor` - a
  stopping master sends them to the live agent closest to the tree id (:meth:`next_roots`);
* :meth:`absorb` - the receiving side: every item admitted before any is stored; as the root
  this master claims a term above the previous one and publishes at once, then the shared
  absorb sequence publishes, replays and re-replicates;
* :meth:`declare_leave` - a stopping origin tells the master its last closed epoch with its
  own snapshots of the epochs not committed yet (best effort, bounded by
  :data:`LEAVE_TIMEOUT`); :meth:`accept_leave` folds them and stops expecting the origin.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from agent.runtime.recovery.backoff import backoff
from agent.runtime.recovery.host import RecoveryParts
from agent.runtime.recovery.result_items import decode_snapshots, encode_items, encode_snapshots
from agent.runtime.recovery.standby import standbys_for
from agent.runtime.services import NetworkService
from srt.dataplane.lineage import covered, describe

log = logging.getLogger(__name__)

HANDOVER_ATTEMPTS = 30  # ~1 min with back-off
LEAVE_TIMEOUT = 3.0  # a stopping origin's end declaration, per tree


class Handover:
    """Hand-over of results and declaration of an origin's end for one job (module
    contract)."""

    def __init__(self, parts: RecoveryParts, network: NetworkService) -> None:
        self.parts = parts
        self.network = network

    async def hand_over(self, tid: int) -> None:
        """No longer the root: give the results to the new master, retrying (the new master
        may not run the job yet - a restarted agent - or may be moving on) until it took
        them, we are the root again, or the job stops."""
        parts, host = self.parts, self.parts.host
        async for _ in backoff(HANDOVER_ATTEMPTS, 0.2):
            if host.stopped or not parts.store.epochs(tid):
                return
            if host.is_root(tid):
                return  # we are root again
            try:
                url = await host.master_url(tid)
                if url == self.network.data_url:
                    # the tree still routes to us (the new root's JOIN is in flight, or the
                    # lookup was answered from before): ask again - never keep the results
                    # silently, the new master would hold the epochs in flight alone
                    raise LookupError("the master lookup answered this agent")
                await self.send_results(tid, url)
                return
            except Exception as exc:
                host.forget_master_url(tid, exc)
                host.count("handover_retries")
                log.info("job %s: hand-over of tree %x failed: %r; retrying", parts.name, tid, exc)
        host.count("handover_failed")
        log.warning(
            "job %s: could not hand tree %x's results to its new master; they stay here (and "
            "in the lake)",
            parts.name,
            tid,
        )

    def next_roots(self, tid: int, count: int = 1) -> list[Any]:
        """The live neighbours XOR-closest to the tree id, this agent left out: who becomes
        the tree's root next if this one goes (the successor first)."""
        return standbys_for(tid, self.network.node_id, self.network.neighbours(), count)

    async def to_successor(self, tid: int) -> None:
        """Stopping master: give the results to the live agent closest to the tree id."""
        nearest = self.next_roots(tid)
        if not nearest:
            return
        successor = nearest[0]
        try:
            await self.send_results(tid, await self.network.data_url_of(successor))
        except Exception as exc:
            self.parts.host.count("handover_failed")
            log.warning("hand-over of %s to %s failed: %r", self.parts.name, successor, exc)

    async def send_results(self, tid: int, url: str) -> None:
        parts = self.parts
        store = parts.store
        # encoding (and reading spilled epochs) runs in a thread
        exported = await asyncio.to_thread(store.encode_plan, store.export_plan(tid))
        body = {
            "job": parts.name,
            "tree": tid,
            "items": encode_items(exported),
            "expected": {**parts.membership.export(), "urls": parts.loss.export_urls()},
            "term": parts.fence.term(tid),
            # what this tree's masters committed, as we heard it: a re-read share of a
            # committed epoch the new master holds alone is a duplicate (committed_epochs.py)
            "committed": parts.committed_epochs.export(tid),
        }
        await self.network.client.post_json(url, "/agent/v1/handover", body)
        store.drop_tree(tid)
        parts.host.count("handovers_sent")

    def absorb(
        self,
        tid: int,
        items: list[dict[str, Any]],
        expected: Any = None,
        term: Any = 0,
        committed: Any = None,
    ) -> int:
        """A previous master's results (``POST /agent/v1/handover``, items decoded by
        :func:`~agent.runtime.recovery.result_items.decode_items`): every item is admitted
        (tree, epoch bounds, expectation) before any is stored. As the root, this master
        claims a term above the previous master's (master_terms.py) and publishes at once."""
        parts, host = self.parts, self.parts.host
        host.known_tree(tid)
        host.ensure_tree(tid)
        taken = parts.absorb_items(tid, items, expected, "handover")
        if isinstance(committed, dict):
            parts.committed_epochs.hear(tid, committed.get("epoch"), committed.get("held"))
        self._drop_committed_duplicates(tid, items)
        # settled only now, with the hand-over in the store: settling first published the
        # writes that waited - a restarted master's own re-read share of the epochs it missed,
        # lacking every other origin - under the new term, before the merged versions
        if host.is_root(tid):
            parts.fence.handed_over(tid, term)
            parts.members_changed()
            parts.publish_deferred(tid)
        else:
            parts.fence.hear(tid, term)
        host.count("handovers_received")
        host.bound_results()
        # a handed-over epoch may lack origins (ours among them, when we were down): as the
        # root, nothing else would ask for them - no new tentative epoch may come
        root = host.is_root(tid)
        epochs = sorted({i["epoch"] for i in items if isinstance(i.get("epoch"), int)})
        parts.adopted(tid, epochs, repair=root)
        if root:
            parts.knowledge_gained(tid)
        return taken

    def _drop_committed_duplicates(self, tid: int, items: list[dict[str, Any]]) -> None:
        """Epochs this (restarted) master holds unpublished that the predecessor did not hand
        over and a master committed with a share of every origin ours has: ours is a re-read
        duplicate of part of the lake's committed version - published, it would replace that
        version (a newer term) with one lacking every other origin. Forgotten here; the
        results API answers them from the lake."""
        parts = self.parts
        handed = {i.get("epoch") for i in items}
        for epoch in parts.store.epochs(tid):
            result = parts.store.peek(tid, epoch)
            if (
                epoch in handed
                or result is None
                or result.origins is None
                or not parts.fence.deferred(tid, epoch)
                or not parts.committed_epochs.covers(tid, epoch, covered(result.origins))
            ):
                continue
            parts.fence.undefer(tid, epoch)
            parts.store.forget(tid, epoch)
            parts.host.count("committed_duplicates")
            log.info(
                "job %s tree %x epoch %d: committed by an earlier master with every share held "
                "here (origins %s); our re-read copy is dropped, the lake's version stands",
                parts.name,
                tid,
                epoch,
                ", ".join(describe(covered(result.origins))[:8]),
            )

    async def declare_leave(self, tid: int) -> None:
        """Stopping gracefully: tell the tree's master (our successor, if we were it) this
        origin's end - the newest epoch it closed - with its own snapshots of the epochs not
        committed yet, so the master has every epoch it is told to expect from us. Best
        effort, bounded: a master that does not hear it sees an absent origin instead."""
        parts, host = self.parts, self.parts.host
        retained = parts.retained
        through = retained.newest(tid)
        if through is None:  # it closed no epoch yet: its end is before its first one
            if host.spec.start_epoch is None:
                return
            through = host.spec.start_epoch - 1
        held = retained.held(tid)
        found = [(e, s) for e in held if (s := retained.get(tid, e)) is not None]
        body = {
            "job": parts.name,
            "tree": tid,
            "origin": f"{self.network.node_id:x}",
            "through": through,
            "epochs": await asyncio.to_thread(encode_snapshots, found),
            "records": {str(e): n for e in held if (n := retained.records(tid, e)) is not None},
        }
        try:
            if host.is_root(tid):
                nearest = self.next_roots(tid)
                if not nearest:
                    return
                url = await self.network.data_url_of(nearest[0])
            else:
                url = await asyncio.wait_for(host.master_url(tid), LEAVE_TIMEOUT)
            await asyncio.wait_for(
                self.network.client.post_json(url, "/agent/v1/leave", body), LEAVE_TIMEOUT
            )
            host.count("leaves_declared")
        except Exception as exc:
            host.count("leave_failed")
            log.warning(
                "job %s tree %x: could not declare this origin's end to the master (%r): it "
                "will see it absent until it comes back or is retired",
                parts.name,
                tid,
                exc,
            )

    async def accept_leave(self, tid: int, origin: int, body: dict[str, Any]) -> bool:
        """As master (``POST /agent/v1/leave``): fold the leaving origin's own snapshots of
        its uncommitted epochs, then stop expecting it after its last epoch. Raises
        ``ValueError`` on a malformed body."""
        parts = self.parts
        parts.host.known_tree(tid)
        through = body.get("through")
        if type(through) is not int or through < 0:
            raise ValueError("through must be a non-negative integer epoch")
        raw = body.get("epochs") or {}
        counts = body.get("records") or {}
        if not isinstance(raw, dict) or not isinstance(counts, dict) or len(raw) > 4096:
            raise ValueError("epochs and records must be objects (at most 4096 epochs)")
        snaps = await asyncio.to_thread(decode_snapshots, raw)
        if snaps:
            parts.host.count("leave_epochs_folded", parts.fold_own(tid, origin, snaps, counts))
        return parts.origin_left(tid, origin, through)
