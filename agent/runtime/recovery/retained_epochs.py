"""RetainedEpochs: an origin's own snapshots of the epochs its master has not committed yet.

Contract (``docs/fault-tolerance.md``, "repair by pull"). Each agent keeps, per tree of a
job, the local snapshot it offered for every epoch above the tree's commit watermark: it is
what the master asks for (``POST /agent/v1/resend``) when a result lacks this origin - the
parent that merged it died after acknowledging, a contribution was refused as an overlap, a
re-send was lost. :meth:`RetainedEpochs.commit` drops what the master committed.

Bounds: at most ``max_bytes`` of snapshots (``Snapshot.memory_bytes()``) per job; past it the
oldest epochs are dropped, counted (``dropped``) and logged at WARNING with job, tree and
epoch: those epochs can then only be repaired by a restart's re-read. Snapshots are immutable
and shared with the barrier, so keeping one costs no copy.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from typing import Any

from cbt import Snapshot

log = logging.getLogger(__name__)


class RetainedEpochs:
    """Per job on one agent: (tree, epoch) → this origin's own snapshot (module contract)."""

    def __init__(self, job: str, max_bytes: int = 64 * 2**20) -> None:
        self.job = job
        self.max_bytes = max_bytes
        self.bytes = 0
        self.dropped = 0
        self.served = 0
        self._held: OrderedDict[tuple[int, int], tuple[Snapshot, int, int | None]] = OrderedDict()
        self._committed: dict[int, int] = {}
        self._newest: dict[int, int] = {}  # tree -> the newest epoch ever offered to keep

    def keep(self, tree: int, epoch: int, snap: Snapshot, records: int | None = None) -> None:
        """Retain this origin's snapshot of (tree, epoch) - and how many input records it
        folded, if known - unless already committed."""
        self._newest[tree] = max(self._newest.get(tree, epoch), epoch)
        if epoch <= self._committed.get(tree, -1) or (tree, epoch) in self._held:
            return
        size = snap.memory_bytes()
        self._held[(tree, epoch)] = (snap, size, records)
        self.bytes += size
        self._trim()

    def set_limit(self, limit: int) -> None:
        """The agent's memory budget gave this job's retained epochs ``limit`` bytes: shed
        the oldest past it now (each logged, as past ``max_bytes``)."""
        self.max_bytes = limit
        self._trim()

    def _trim(self) -> None:
        while self.bytes > self.max_bytes and self._held:
            (t, e), (_, old, _) = self._held.popitem(last=False)
            self.bytes -= old
            self.dropped += 1
            log.warning(
                "job %s tree %x epoch %d: own snapshot dropped before its commit (retention "
                "budget %d bytes); only a restart's re-read can repair it now",
                self.job,
                t,
                e,
                self.max_bytes,
            )

    def commit(self, tree: int, epoch: int) -> None:
        """The tree's master committed every epoch up to ``epoch``: forget them."""
        if epoch <= self._committed.get(tree, -1):
            return
        self._committed[tree] = epoch
        for key in [k for k in self._held if k[0] == tree and k[1] <= epoch]:
            self.bytes -= self._held.pop(key)[1]

    def get(self, tree: int, epoch: int) -> Snapshot | None:
        held = self._held.get((tree, epoch))
        if held is None:
            return None
        self.served += 1
        return held[0]

    def newest(self, tree: int) -> int | None:
        """The newest epoch this origin closed for ``tree`` (None: none yet)."""
        return self._newest.get(tree)

    def held(self, tree: int) -> list[int]:
        """The epochs of ``tree`` retained here, oldest first."""
        return sorted(e for t, e in self._held if t == tree)

    def records(self, tree: int, epoch: int) -> int | None:
        """The retained epoch's record count (None: not retained, or not known)."""
        held = self._held.get((tree, epoch))
        return None if held is None else held[2]

    def stats(self) -> dict[str, Any]:
        return {
            "epochs": len(self._held),
            "bytes": self.bytes,
            "max_bytes": self.max_bytes,
            "dropped": self.dropped,
            "served": self.served,
        }
