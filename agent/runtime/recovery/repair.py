"""Repair: what a master's result lacks is pulled from its origins, and late data folds in.

Contract (``docs/fault-tolerance.md``, "Repair by pull" and "Late contributions"):

* **Repair by pull.** A stored epoch that lacks expected origins is tentative: it is reported
  (:meth:`Repair.report_missing`: counted, a WARNING within a log budget, the lacking
  origins probed at once) and one loop per tree (:meth:`schedule`) asks each lacking origin,
  every ``repair_interval``, for its own retained snapshots of the epochs it is missing from
  (``POST /agent/v1/resend``, at most :data:`REPAIR_BATCH` epochs; answered by
  :meth:`resend`), until no repairable epoch is tentative. What comes back folds in as that
  origin's alone (:meth:`fold_own`): new or duplicate, never an overlap.
* **Late contributions.** A snapshot for an epoch this agent already emitted
  (:meth:`fold_in`) is folded in at the master - a new version, once per origin by lineage -
  or forwarded there (``POST /agent/v1/late``, retried with back-off through hand-overs;
  only a stopping job gives up, and says so). A new root keeps the epochs it had queued for
  its old parent the same way (:meth:`keep_queued`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from agent.runtime.recovery.backoff import backoff
from agent.runtime.recovery.host import RecoveryParts
from agent.runtime.recovery.result_items import decode_snapshot, encode_snapshots
from agent.runtime.services import NetworkService, Spawner
from agent.tunables import RuntimeTunables
from cbt import Snapshot
from overlay.logbudget import LogBudget
from srt import DataPlaneError, SnapshotName
from srt.dataplane.lineage import Lineage, counted, covered, describe
from srt.dataplane.lineage import decode as lineage_of
from srt.dataplane.lineage import encode as with_lineage
from srt.errors import Reject

log = logging.getLogger(__name__)

REPAIR_BATCH = 16  # epochs asked of one origin per repair request


class Repair:
    """Repair by pull and late folds of one job on one agent (module contract)."""

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
        self._repairing: set[int] = set()  # trees whose repair loop runs (as master)
        self._log = LogBudget(log)

    # ---- repair by pull ----------------------------------------------------------------------

    def schedule(self, tid: int) -> None:
        if tid in self._repairing or self.parts.host.stopped:
            return
        self._repairing.add(tid)
        self.tasks.spawn(self._repair(tid), f"{self.parts.name} repair")

    def lacking(self, tid: int) -> dict[int, list[int]]:
        """As master: origin → the tentative epochs that lack it (its share not given up)."""
        wanted: dict[int, list[int]] = {}
        for epoch, origins in sorted(self.parts.store.missing(tid, -1).items()):
            for origin in origins:
                wanted.setdefault(origin, []).append(epoch)
        return wanted

    async def _repair(self, tid: int) -> None:
        """Ask each lacking origin for its own snapshots of the epochs it is missing from,
        every ``repair_interval``, until no repairable epoch is tentative."""
        host = self.parts.host
        try:
            while not host.stopped:
                await asyncio.sleep(self.tunables.repair_interval)
                wanted = self.lacking(tid) if host.is_root(tid) else {}
                if not wanted:
                    return
                # concurrently: a dead origin's lookup must not hold up a live one's repair
                await asyncio.gather(
                    *(self._pull(tid, o, epochs[-REPAIR_BATCH:]) for o, epochs in wanted.items())
                )
        finally:
            self._repairing.discard(tid)

    async def _pull(self, tid: int, origin: int, epochs: list[int]) -> None:
        parts = self.parts
        body = {"job": parts.name, "tree": tid, "origin": f"{origin:x}", "epochs": epochs}
        parts.host.count("repair_requests")
        try:
            if origin == self.network.node_id:  # this master lacks its own share: no round trip
                reply: Any = await self.resend(tid, origin, epochs)
            else:
                url = parts.loss.urls.get(origin) or await self.network.data_url_of(origin)
                reply = await self.network.client.post_json(url, "/agent/v1/resend", body)
            answer = reply.get("epochs") if isinstance(reply, dict) else None
            if not isinstance(answer, dict):
                raise ValueError("reply without an epochs object")
            decoded = {
                int(k): await asyncio.to_thread(decode_snapshot, v) for k, v in answer.items()
            }
            counts = reply.get("records")
            counts = counts if isinstance(counts, dict) else {}
        except Exception as exc:  # down, not found, or a bad reply: the next round retries
            parts.host.count("repair_unreachable")
            log.info("job %s: repair from origin %x failed: %r", parts.name, origin, exc)
            if isinstance(exc, DataPlaneError) and exc.reason == "refused":
                parts.loss.refused(origin, "its data-plane port refused a repair pull")
            return
        parts.host.count("repaired", self.fold_own(tid, origin, decoded, counts, epochs))
        # what a live origin no longer holds is past repair (absence.py)
        parts.absence.pulled(tid, origin, epochs, set(decoded))

    def fold_own(
        self,
        tid: int,
        origin: int,
        snaps: dict[int, Snapshot],
        counts: dict[str, Any],
        epochs: Any = None,
    ) -> int:
        """Fold ``origin``'s own snapshots (a repair pull's, a leaving origin's, or re-issued
        from its checkpoints) as that origin's alone: new or duplicate, never an overlap.
        Returns how many were merged."""
        host = self.parts.host
        combiner = host.ensure_tree(tid)
        merged = 0
        for epoch, snap in sorted(snaps.items()):
            if epochs is not None and epoch not in epochs:
                continue
            try:
                snap = combiner.check(epoch, snap, origin)
            except Reject:
                host.count("repair_refused")
                continue
            name = SnapshotName(self.parts.name, tid, epoch, origin)
            n = counts.get(str(epoch))
            lineage = counted((origin,), {origin: n} if type(n) is int and n >= 0 else None)
            if self.fold_in(name, snap, lineage) == "merged":
                merged += 1
        return merged

    async def resend(self, tid: int, origin: int, epochs: list[int]) -> dict[str, Any]:
        """As origin (``POST /agent/v1/resend``): our retained snapshots of ``epochs``."""
        if origin != self.network.node_id:
            raise Reject(404, "not_origin", f"this agent is not origin {origin:x}")
        self.parts.host.known_tree(tid)
        retained = self.parts.retained
        found = [(e, s) for e in epochs[:REPAIR_BATCH] if (s := retained.get(tid, e))]
        encoded = await asyncio.to_thread(encode_snapshots, found)
        counts = {str(e): n for e, _ in found if (n := retained.records(tid, e)) is not None}
        return {"epochs": encoded, "records": counts}

    def report_missing(self, tid: int, epoch: int) -> None:
        """A stored epoch that lacks expected origins is tentative: say so (counted, and a
        WARNING within the log budget naming job, epoch and the origins)."""
        result = self.parts.store.peek(tid, epoch)
        if result is None or not result.tentative:
            return
        self.parts.host.count("tentative_epochs")
        self.schedule(tid)
        # a lacking origin may be dead: probe it now rather than at the first repair round
        self.parts.loss.suspect(tid, result.missing - result.given_up, time.time())
        self._log.warning(
            "tentative",
            "job %s tree %x epoch %d is tentative: coverage %.3f, lacking origins %s "
            "(their contributions are folded in when they arrive)",
            self.parts.name,
            tid,
            epoch,
            result.coverage,
            ", ".join(result.lacking[:8]),
        )

    # ---- late contributions ------------------------------------------------------------------

    def offer_late(self, name: SnapshotName, snap: Snapshot, origins: Lineage | None = None) -> str:
        """A late contribution from a peer (``POST /agent/v1/late``): admitted like a
        child's snapshot (a tree of this job, epoch bounds, expectation), then folded in."""
        host = self.parts.host
        host.known_tree(name.tree)
        snap = host.ensure_tree(name.tree).check(name.epoch, snap, name.sender)
        return self.fold_in(name, snap, origins)

    def fold_in(self, name: SnapshotName, snap: Snapshot, origins: Lineage | None) -> str:
        """A contribution for an epoch already emitted here: fold it in at the master (a
        new version of the epoch), or forward it there."""
        parts, host = self.parts, self.parts.host
        if host.is_root(name.tree):
            tid, epoch = name.tree, name.epoch
            store = parts.store
            # Our barrier already passed this epoch as a child (we became the master since):
            # it will never store it here, so what arrives late *is* the epoch's result.
            fresh = store.peek(tid, epoch) is None
            if fresh and self.committed_duplicate(name, origins):
                return "duplicate"
            passed = fresh and host.ensure_tree(tid).next_epoch > epoch
            # ... unless a replica of the dead master's position still owns it: its result
            # comes from there (active_replicas.py), this is held for it meanwhile
            passed = passed and not parts.replica_owns(tid, epoch)
            folded = store.add_late(
                tid,
                epoch,
                name.sender,
                snap,
                time.time(),
                origins=origins,
                materialize=passed,
                expected=parts.membership.expected(epoch),
                doubtful=parts.membership.doubt is not None,
            )
            stored = store.peek(tid, epoch)
            if folded and stored is not None and stored.preview:
                host.previews.refresh(tid, epoch)  # held for the barrier; shown meanwhile
                host.bound_results()
            elif folded and stored is not None:
                host.previews.stored(tid, epoch)
                if fresh:
                    host.count("epochs_from_late")
                parts.epoch_stored(tid, epoch, stored.origins, new=fresh)  # a new version
            else:
                host.bound_results()
            return "merged" if folded else "duplicate"
        self.tasks.spawn(self._forward(name, snap, origins), f"{parts.name} late epoch")
        return "merged"

    def committed_duplicate(self, name: SnapshotName, origins: Lineage | None) -> bool:
        """As master, of an epoch it does not hold: a contribution (late, or its own
        barrier's) whose origins each have a share in a version a master of the tree
        committed is a re-read duplicate (its sender restarted behind a commit it had not
        persisted), never a result of its own - stored alone it would lack every other origin
        and be published above the lake's committed version (committed_epochs.py)."""
        parts = self.parts
        mine = covered(origins) if origins is not None else frozenset()
        if not parts.committed_epochs.covers(name.tree, name.epoch, mine):
            return False
        parts.host.count("committed_duplicates")
        self._log.info(
            "committed_duplicate",
            "job %s tree %x epoch %d: a contribution of origins %s (from %x) was committed "
            "already by a master of the tree; a duplicate, dropped (the lake's version holds it)",
            parts.name,
            name.tree,
            name.epoch,
            ", ".join(describe(mine)[:8]),
            name.sender,
        )
        return True

    async def _forward(self, name: SnapshotName, snap: Snapshot, origins: Lineage | None) -> None:
        """Deliver a late contribution to the master, retrying (with a fresh master lookup)
        through hand-overs and overload; only a stopping job gives up, and says so."""
        host = self.parts.host
        payload = snap.to_bytes()
        if origins is not None:
            payload = with_lineage(origins, payload)
        async for _ in backoff(self.tunables.late_attempts, 0.1):
            if host.stopped:
                break
            try:
                url = await host.master_url(name.tree)
                status, _ = await self.network.client.request(
                    "POST", url, "/agent/v1/late", payload, name=name
                )
                if status == 200:
                    return
            except Exception as exc:
                log.info("late contribution %s: %r; retrying", name, exc)
                host.forget_master_url(name.tree, exc)
            else:
                host.forget_master_url(name.tree)
            host.count("late_forward_retries")
        host.count("late_forward_failed")
        log.warning(
            "job %s epoch %d: late contribution from %x (origins %s) could not reach the "
            "master; dropped here (the epoch stays tentative, lacking them)",
            self.parts.name,
            name.epoch,
            name.sender,
            ", ".join(describe(origins or ())[:8]) or "unknown",
        )

    def keep_queued(self, tid: int) -> None:
        """This agent became the tree's root (its master died or moved): the epochs it had
        emitted but not yet delivered to the old master are results now, not lost."""
        host = self.parts.host
        for epoch, payload in host.take_queued(tid):
            origins, raw = lineage_of(payload)
            try:
                snap = Snapshot.from_bytes(raw)
            except Exception as exc:  # our own bytes: a bug, said loudly
                log.error(
                    "job %s epoch %d: own queued snapshot unreadable: %r",
                    self.parts.name,
                    epoch,
                    exc,
                )
                continue
            host.count("queued_kept_as_root")
            self.fold_in(
                SnapshotName(self.parts.name, tid, epoch, self.network.node_id), snap, origins
            )
