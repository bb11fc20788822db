"""A replica of a dead inner position sends the position's epochs up, as the holder.

Contract (``docs/fault-tolerance.md``, "Replicated tree nodes"). One
:class:`PositionForward` per inner position this agent replicates, built when the holder's
death releases the replica (:mod:`agent.runtime.recovery.active_replicas`):

* :meth:`PositionForward.retarget` names the holder's parent (id and data-plane URL) and
  that parent's own replicas, as the holder last announced them.
* :meth:`PositionForward.send` queues an epoch for the parent
  (``POST /srt/v1/position-snapshot``, named as the holder: the parent's barrier has been
  waiting for the holder's name and takes it as the holder's) and for each of the parent's
  replicas (``/srt/v1/replica-snapshot?position=<parent>``, also as the holder); a parent
  replica that is this agent itself gets it directly (``offer_local``).
* :meth:`PositionForward.finish` (the replica served its last epoch) waits until every
  queued epoch was acknowledged, then tells the parent the position is done
  (``POST /agent/v1/position/event``, ``done``: it stops waiting for the holder), and closes.

Bounds: every sender keeps at most ``max_queued`` unacknowledged epochs (the oldest dropped,
counted by the sender); :meth:`finish` waits at most ``flush_seconds``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from cbt import Snapshot
from srt import DataPlaneClient, SnapshotName, UpstreamSender
from srt import Tunables as SrtTunables
from srt.dataplane.lineage import Lineage
from srt.dataplane.lineage import encode as with_lineage
from srt.dataplane.name import POSITION_SNAPSHOT_PATH, replica_path

log = logging.getLogger(__name__)

EVENT_PATH = "/agent/v1/position/event"
FLUSH_SECONDS = 10.0

OfferLocal = Callable[[int, SnapshotName, bytes], None]


class PositionForward:
    """The upward senders of one released inner position (module contract)."""

    def __init__(
        self,
        client: DataPlaneClient,
        tunables: SrtTunables,
        *,
        job: str,
        tree: int,
        holder: int,
        self_id: int,
        offer_local: OfferLocal,
        max_queued: int,
        flush_seconds: float = FLUSH_SECONDS,
        parent_path: str = POSITION_SNAPSHOT_PATH,
    ) -> None:
        self.client = client
        self.tunables = tunables
        self.job = job
        self.tree = tree
        self.holder = holder
        self.self_id = self_id
        self.offer_local = offer_local
        self.max_queued = max_queued
        self.flush_seconds = flush_seconds
        self.parent_path = parent_path  # a mirror's: the parent's own snapshot door
        self.parent: int | None = None
        self.parent_url: str | None = None
        self.sent = 0
        self._senders: dict[int | None, UpstreamSender] = {}  # None: the parent itself
        self._replicas: dict[int, str] = {}

    def _sender(self, key: int | None, path: str) -> UpstreamSender:
        sender = self._senders.get(key)
        if sender is None:
            sender = self._senders[key] = UpstreamSender(
                self.client,
                job=self.job,
                tree=self.tree,
                sender=self.holder,
                tunables=self.tunables,
                path=path,
                max_queued=self.max_queued,
            )
        return sender

    def retarget(self, parent: int, url: str, replicas: dict[int, str]) -> None:
        """The holder's parent and that parent's replicas, as last announced."""
        self.parent, self.parent_url = parent, url
        self._sender(None, self.parent_path).set_parent(url)
        self._replicas = {r: u for r, u in replicas.items() if r != parent}
        for rid, rurl in self._replicas.items():
            if rid != self.self_id:
                self._sender(rid, replica_path(parent)).set_parent(rurl)

    def send(self, epoch: int, snap: Snapshot, origins: Lineage | None) -> None:
        """One epoch of the position, to the parent and its replicas, as the holder."""
        payload = snap.to_bytes()
        payload = payload if origins is None else with_lineage(origins, payload)
        name = SnapshotName(self.job, self.tree, epoch, self.holder)
        self._sender(None, self.parent_path).send(name, payload)
        for rid in self._replicas:
            if rid == self.self_id and self.parent is not None:
                self.offer_local(self.parent, name, payload)
            else:
                self._senders[rid].send(name, payload)
        self.sent += 1

    async def finish(self) -> bool:
        """Flush, tell the parent the position is done, close. True if the parent heard."""
        flushed = True
        for sender in list(self._senders.values()):
            flushed = await sender.flush(self.flush_seconds) and flushed
        told = False
        if flushed and self.parent_url is not None:
            body = {
                "job": self.job,
                "tree": self.tree,
                "position": format(self.holder, "x"),
                "event": "done",
            }
            try:
                await self.client.post_json(self.parent_url, EVENT_PATH, body)
                told = True
            except Exception as exc:  # the parent gone too: its pin of the holder times out
                log.info(
                    "job %s tree %x: position %x done, parent unreachable: %r",
                    self.job,
                    self.tree,
                    self.holder,
                    exc,
                )
        await self.close()
        return told

    async def close(self) -> None:
        for sender in self._senders.values():
            await sender.close()
        self._senders.clear()

    def status(self) -> dict[str, Any]:
        return {
            "parent": None if self.parent is None else format(self.parent, "x"),
            "sent": self.sent,
            "queued": {
                ("parent" if k is None else format(k, "x")): len(s.pending()["queued"])
                for k, s in self._senders.items()
            },
        }
