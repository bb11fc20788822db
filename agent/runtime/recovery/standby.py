"""The master's standby: a Flux process pair at the root of each job tree.

Contract (``docs/fault-tolerance.md``, "Master standby").

* **Who.** A tree's standby is the live agent XOR-closest to the tree id after the master
  itself (:func:`standby_for`, among the master's overlay neighbours): the agent the overlay
  routes the tree id to - and so makes the next master - when the master dies.
* **What (master side, :class:`ReplicationLog`).** Every stored epoch result, at every
  version, with its lineage, plus the master's expected origins and commit watermark, is
  replicated to the standby (``POST /agent/v1/replica``). The log remembers, per tree, the
  standby and which (epoch, version) it acknowledged; a new standby gets everything again
  (the standby rebuilt online while epochs keep flowing). :meth:`ReplicationLog.replicated_upto`
  bounds the commit watermark: an epoch is committed only once its final version is held by
  the standby, so a master's death never loses a committed epoch.
* **What (standby side, :class:`Replica`).** The replicated items per tree (the same wire items
  as a hand-over: ``ResultStore.export_plan``), bounded to ``max_epochs`` epochs (oldest
  dropped) and replaced per epoch by newer versions; the expected-origins state; the commit
  watermark. When the standby becomes the root it absorbs them into its result store
  (:meth:`agent.runtime.results.store.ResultStore.absorb`, lineage-aware), restores the expected
  origins, and replays the epochs' results through the job's ``on_epoch_result`` so job state
  derived from results (WordCount's recent epochs) is intact.

Pure bookkeeping: no I/O here (the job runtime sends and receives).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Mapping
from typing import Any, Protocol


class Neighbour(Protocol):
    @property
    def id(self) -> int: ...


def standby_for(tree: int, self_id: int, neighbours: Iterable[Neighbour]) -> Neighbour | None:
    """The neighbour that would be the tree's root if this one (the root) disappeared."""
    found = standbys_for(tree, self_id, neighbours, 1)
    return found[0] if found else None


def standbys_for(
    tree: int, self_id: int, neighbours: Iterable[Neighbour], n: int
) -> list[Neighbour]:
    """The ``n`` neighbours closest to the tree id after this one: the next masters, in
    order (a replicated master's replicas; the first is the standby)."""
    others = sorted((x for x in neighbours if x.id != self_id), key=lambda x: x.id ^ tree)
    return others[:n]


class ReplicationLog:
    """Master side: per tree, the standby and the (epoch → version) it acknowledged."""

    def __init__(self) -> None:
        self._standby: dict[int, int] = {}
        self._acked: dict[int, dict[int, int]] = {}
        self.sent_items = 0
        self.full_syncs = 0

    def standby(self, tree: int) -> int | None:
        return self._standby.get(tree)

    def retarget(self, tree: int, standby: int | None) -> bool:
        """Use ``standby`` from now on; True if it changed (everything is sent again)."""
        if standby is None:
            changed = tree in self._standby
            self._standby.pop(tree, None)
            self._acked.pop(tree, None)
            return changed
        if self._standby.get(tree) == standby:
            return False
        self._standby[tree] = standby
        self._acked[tree] = {}
        self.full_syncs += 1
        return True

    def due(self, tree: int, versions: Mapping[int, int]) -> list[int]:
        """Epochs whose current version the standby does not hold, oldest first."""
        acked = self._acked.get(tree, {})
        return sorted(e for e, v in versions.items() if acked.get(e, 0) < v)

    def acknowledged(self, tree: int, standby: int, sent: Mapping[int, int]) -> None:
        """``standby`` stored these (epoch → version); ignored if the standby changed."""
        if self._standby.get(tree) != standby:
            return
        acked = self._acked.setdefault(tree, {})
        for epoch, version in sent.items():
            acked[epoch] = max(acked.get(epoch, 0), version)
        self.sent_items += len(sent)

    def forget(self, tree: int, keep: Iterable[int]) -> None:
        """Drop bookkeeping of epochs the store no longer holds."""
        wanted = set(keep)
        acked = self._acked.get(tree)
        if acked:
            for epoch in [e for e in acked if e not in wanted]:
                del acked[epoch]

    def replicated_upto(self, tree: int, versions: Mapping[int, int]) -> int | None:
        """The highest epoch E such that the standby holds the current version of every
        stored epoch ≤ E (None: not even the oldest)."""
        acked = self._acked.get(tree, {})
        upto = None
        for epoch in sorted(versions):
            if acked.get(epoch, 0) < versions[epoch]:
                break
            upto = epoch
        return upto

    def stats(self) -> dict[str, Any]:
        return {
            "standbys": {f"{t:040x}": f"{s:040x}" for t, s in self._standby.items()},
            "sent_items": self.sent_items,
            "full_syncs": self.full_syncs,
        }


class Replica:
    """Standby side: one tree's replicated master state (module contract)."""

    def __init__(self, master: int, max_epochs: int = 256) -> None:
        self.master = master
        self.max_epochs = max_epochs
        self.items: OrderedDict[int, dict[str, Any]] = OrderedDict()
        self.expected: Any = None
        self.committed: int | None = None
        #: the master's fencing term: the standby that takes over claims above it
        self.term = 0
        self.bytes = 0

    def add(self, items: Iterable[dict[str, Any]]) -> int:
        """Keep each item unless an equal or newer (term, version) of its epoch is held;
        returns how many were kept. Items must carry ``epoch`` (int), ``version`` and
        ``snapshot`` bytes (``term``: 0 when absent)."""
        kept = 0
        for item in items:
            epoch = item["epoch"]
            held = self.items.get(epoch)
            if held is not None and _rank(held) >= _rank(item):
                continue
            if held is not None:
                self.bytes -= len(held["snapshot"])
            self.items[epoch] = item
            self.bytes += len(item["snapshot"])
            kept += 1
        if kept:
            self.items = OrderedDict(sorted(self.items.items()))
        while len(self.items) > self.max_epochs:
            _, old = self.items.popitem(last=False)
            self.bytes -= len(old["snapshot"])
        return kept

    def stats(self) -> dict[str, Any]:
        return {
            "master": f"{self.master:040x}",
            "epochs": len(self.items),
            "bytes": self.bytes,
            "committed": self.committed,
            "term": self.term,
        }


def _rank(item: dict[str, Any]) -> tuple[int, int]:
    """An item's (term, version): which of two copies of an epoch is newer."""
    term, version = item.get("term", 0), item.get("version", 1)
    return (term if type(term) is int else 0, version if type(version) is int else 1)
