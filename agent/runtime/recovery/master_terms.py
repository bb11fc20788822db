"""MasterTerms: the fencing term a job's master publishes under, per tree.

Contract (``docs/fault-tolerance.md``, "One writer per version"; the lake side is
``docs/spark-sink.md``). Every version of (job, tree, epoch) a master publishes carries its
**term**; the lake's reader rule and the ``elf`` Spark source pick the highest (term, version),
and the lake refuses a write whose term is below one it already holds for that epoch
(``FencedWrite``). So a deposed master - a stale one, the minority side of a partition, a
restarted agent that briefly believes it is the root - can never replace a newer term's
version. Like Kafka's producer epoch and Flink's leader session id, the term only grows:

* a new master **claims** ``max(every term it heard of) + 1``; it hears of terms from the
  standby replica and the hand-over it takes over (both carry the old master's term), from the
  commit multicasts of the current master (every member of the tree knows the term), from its
  own earlier terms (persisted beside the job's members) and from the lake (a fenced write
  names the newer term: the master claims above it and publishes again, see below);
* a master that took over from a live predecessor's hand-over, or from its dead predecessor's
  standby replica, publishes at once (**settled**); one that became the root with nothing
  handed over (a restarted agent, the job's first master, or one that briefly believes it is
  the root before the overlay converges) first waits ``settle_seconds``: a real predecessor
  hands over within that time (and the would-be master that is not the root by then publishes
  nothing). A restarted master (it ran the job before) waits longer,
  ``restart_settle_seconds``: its predecessor is usually alive and hands over as soon as the
  overlay tells it. Until settled, lake writes wait here (:meth:`defer`); the results API
  answers a deferred epoch (:meth:`deferred`) with what the lake holds when that lacks
  fewer origins, else with this master's version, flagged as it must be. The long wait is
  taken once per tree and process;
* a master the lake fenced (:meth:`reclaim`) claims above the newer term and is unsettled
  again for ``settle_seconds``: the fenced epoch and every write meanwhile wait and go out
  together under one term, and a fence heard while it waits raises the term once more when
  it settles (:meth:`settle`), not at once. Two roots that both believe they own a tree (while
  the overlay converges) would otherwise fence each other at every epoch, each claim a new
  version of every epoch and a listing of the lake: bounded this way to one claim per root
  per ``settle_seconds``.

Pure state: times are arguments; the caller runs the settle timer. Bounded by the job's trees.
"""

from __future__ import annotations

from typing import Any


class MasterTerms:
    """Per job on one agent: its term as master of each tree, the highest term heard of, and
    the lake writes waiting for this master to settle (module contract)."""

    def __init__(self, settle_seconds: float = 2.0, restart_settle_seconds: float = 15.0) -> None:
        self.settle_seconds = settle_seconds
        self.restart_settle_seconds = restart_settle_seconds
        self._mine: dict[int, int] = {}  # tree -> the term this agent claimed as its master
        self._heard: dict[int, int] = {}  # tree -> the highest term heard of
        self._settle_at: dict[int, float] = {}  # tree -> when an unsettled master settles
        self._pending: dict[int, set[int]] = {}  # tree -> epochs to publish once settled
        self._restored: set[int] = set()  # trees with a term persisted by an earlier run
        self._restart_waited: set[int] = set()  # trees whose restarted master waited once
        self._outclaimed: set[int] = set()  # trees with a term heard >= ours since our claim

    def term(self, tree: int) -> int:
        """The term this agent stamps on what it produces for ``tree`` (0: never master)."""
        return self._mine.get(tree, 0)

    def heard_of(self, tree: int) -> int:
        return max(self._heard.get(tree, 0), self._mine.get(tree, 0))

    def hear(self, tree: int, term: Any) -> bool:
        """A term seen on the wire or in the lake (malformed: ignored). True when it is at
        least this agent's own term as master: it must claim above it to publish again."""
        if type(term) is not int or term < 0:
            return False
        if term > self._heard.get(tree, 0):
            self._heard[tree] = term
        outclaimed = tree in self._mine and term >= self._mine[tree]
        if outclaimed:
            self._outclaimed.add(tree)
        return outclaimed

    def claim(self, tree: int) -> int:
        """Become (or stay) the tree's master under a new term above every one heard of."""
        term = self.heard_of(tree) + 1
        self._outclaimed.discard(tree)
        self._mine[tree] = term
        self._heard[tree] = term
        return term

    def became_root(self, tree: int, now: float, settled: bool, restarted: bool = False) -> int:
        """This agent just became the tree's root; returns its new term. Not ``settled``
        (nothing handed over): its lake writes wait :attr:`settle_seconds`, or
        :attr:`restart_settle_seconds` the first time it becomes the root after it ran the
        job before (``restarted``)."""
        term = self.claim(tree)
        if settled:
            self._settle_at.pop(tree, None)
        else:
            # the long wait once per tree and process: a root that flaps while the overlay
            # converges after the restart must not push its lake writes back each time
            long = restarted and tree not in self._restart_waited
            if long:
                self._restart_waited.add(tree)
            wait = self.restart_settle_seconds if long else self.settle_seconds
            self._settle_at[tree] = now + wait
        return term

    def reclaim(self, tree: int, now: float) -> int | None:
        """The lake holds a term at least ours (:meth:`hear` said so) and this agent is still
        the root: claim above it and wait ``settle_seconds`` before publishing again; returns
        the new term. None when it already waits to settle: :meth:`settle` claims above
        whatever was heard meanwhile (one claim per wait, module contract)."""
        if not self.settled(tree, now):
            return None
        term = self.claim(tree)
        self._settle_at[tree] = now + self.settle_seconds
        return term

    def handed_over(self, tree: int, term: Any) -> int:
        """A predecessor handed its results over: claim above its term, settled now."""
        self.hear(tree, term)
        self._settle_at.pop(tree, None)
        return self.claim(tree)

    def not_root(self, tree: int) -> set[int]:
        """No longer the tree's root: nothing of it is published from here any more (the
        new master publishes what it took over); returns the writes dropped."""
        self._settle_at.pop(tree, None)
        return self._pending.pop(tree, set())

    def settled(self, tree: int, now: float) -> bool:
        at = self._settle_at.get(tree)
        return at is None or now >= at

    def settle_in(self, tree: int, now: float) -> float | None:
        """Seconds until the tree's master settles (None: settled)."""
        at = self._settle_at.get(tree)
        return None if at is None or now >= at else at - now

    def defer(self, tree: int, epoch: int) -> None:
        self._pending.setdefault(tree, set()).add(epoch)

    def undefer(self, tree: int, epoch: int) -> None:
        """The lake write of (tree, epoch) waits no more: it is not to be published."""
        self._pending.get(tree, set()).discard(epoch)

    def deferred(self, tree: int, epoch: int) -> bool:
        """Whether the lake write of (tree, epoch) waits for this master to settle."""
        return epoch in self._pending.get(tree, ())

    def settle(self, tree: int, now: float) -> set[int]:
        """Settle now if due: the deferred epochs to publish (empty if not due). A term
        heard meanwhile at least ours (a fence while it waited) is claimed above first."""
        if not self.settled(tree, now):
            return set()
        self._settle_at.pop(tree, None)
        if tree in self._outclaimed:
            self.claim(tree)
        return self._pending.pop(tree, set())

    def export(self) -> dict[str, int]:
        """Tree (hex) -> the highest term heard of: persisted beside the job's members."""
        return {format(t, "x"): self.heard_of(t) for t in self._heard.keys() | self._mine.keys()}

    def restore(self, state: Any) -> None:
        """Terms persisted by an earlier run (malformed entries skipped)."""
        for key, term in state.items() if isinstance(state, dict) else ():
            try:
                tree = int(key, 16)
            except (TypeError, ValueError):
                continue
            self.hear(tree, term)
            if type(term) is int and term > 0:
                self._restored.add(tree)

    def ran_before(self, tree: int) -> bool:
        """Whether an earlier run of this agent knew a master of ``tree`` (a term persisted):
        after a restart, that master - or the one that took over meanwhile - may be alive."""
        return tree in self._restored

    def stats(self, now: float) -> dict[str, Any]:
        return {
            format(t, "040x"): {
                "term": self._mine.get(t),
                "heard": self.heard_of(t),
                "settles_in": self.settle_in(t, now),
                "deferred": len(self._pending.get(t, ())),
            }
            for t in self._heard.keys() | self._mine.keys()
        }
