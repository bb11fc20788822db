"""Commit: each tree's commit watermark, as its master moves it and as its members hear it.

Contract (``docs/fault-tolerance.md``, "Commit"). As master, :meth:`Commit.watermark` is the
highest epoch C such that every stored epoch up to C is final or partial, or tentative
lacking only origins declared absent - and, for each such absent origin, the first epoch up
to C it lacks (its own commit stays below that, so it re-sends those epochs when it comes
back). :meth:`Commit.advance` moves the tree's watermark there (with a standby, only over
epochs whose current version it holds), drops this origin's retained snapshots up to it and
multicasts it down the tree with the master's term. As member, :meth:`Commit.on_commit`
takes the multicast: the term is heard, the watermark (held back for an origin the master
lacks) moves up, retained snapshots up to it are dropped. ``committed`` is the watermark per
tree as last heard (as master: our own): agents let their read positions pass it
(``recovery/offsets.py``).
"""

from __future__ import annotations

from typing import Any

from agent.runtime.recovery.host import RecoveryParts
from agent.runtime.services import NetworkService, Spawner


class Commit:
    """The commit watermarks of one job on one agent (module contract)."""

    def __init__(
        self, parts: RecoveryParts, network: NetworkService, tasks: Spawner, standby: Any
    ) -> None:
        self.parts = parts
        self.network = network
        self.tasks = tasks
        self.standby = standby  # tid -> the tree's standby (None: no replication)

    def watermark(self, tid: int) -> tuple[int | None, dict[int, int]]:
        """As master: the watermark and, per absent origin, the first epoch it lacks."""
        store = self.parts.store
        absent = self.parts.membership.absent().keys()
        watermark: int | None = None
        held: dict[int, int] = {}
        for epoch in store.epochs(tid):
            result = store.peek(tid, epoch)
            if result is not None and result.preview:
                break  # a preview never commits: the barrier's result replaces it
            if result is not None and result.tentative:
                waiting = result.missing - result.given_up
                if result.doubtful or not waiting <= absent:
                    break
                for origin in waiting:
                    held.setdefault(origin, epoch)
            watermark = epoch
        return watermark, held

    def advance(self, tid: int) -> None:
        """Move the tree's watermark and tell the tree (module contract)."""
        parts = self.parts
        watermark, held = self.watermark(tid)
        if watermark is not None and self.standby(tid) is not None:
            upto = parts.replication.replicated_upto(tid, parts.store.versions(tid))
            watermark = None if upto is None else min(watermark, upto)
        if watermark is None or watermark <= parts.committed.get(tid, -1):
            return
        parts.committed[tid] = watermark
        parts.retained.commit(tid, watermark)
        parts.commit_heard(watermark)
        parts.host.count("commits")
        held_hex = {format(o, "x"): e for o, e in held.items() if e <= watermark}
        parts.committed_epochs.hear(tid, watermark, held_hex)
        message = {
            "kind": "commit",
            "epoch": watermark,
            "term": parts.fence.term(tid),
            "held": held_hex,
        }
        self.tasks.spawn(parts.host.multicast(tid, message), f"{parts.name} commit")

    def on_commit(self, tid: int, message: dict[str, Any]) -> None:
        """The master committed up to ``epoch`` - except, for an origin it lacks (absent,
        now back), from the first epoch it lacks: that origin keeps (and re-sends) those."""
        parts = self.parts
        parts.fence.hear(tid, message.get("term"))
        epoch = message.get("epoch")
        held = message.get("held")
        parts.committed_epochs.hear(tid, epoch, held)  # the master's, not held back for us
        mine = held.get(format(self.network.node_id, "x")) if isinstance(held, dict) else None
        if type(epoch) is int and type(mine) is int:
            epoch = min(epoch, mine - 1)
        if type(epoch) is int and epoch > parts.committed.get(tid, -1):
            parts.committed[tid] = epoch
            parts.retained.commit(tid, epoch)
            parts.commit_heard(epoch)
