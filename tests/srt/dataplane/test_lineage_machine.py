"""Lineage makes re-sends harmless: a hypothesis state machine over a tree of real
EpochCombiners, their upstream queues (modelled: ordered, kept until acknowledged, re-sent)
and the master's late folds.

Random steps: epochs closing on each origin, deliveries with lost acknowledgements (so the
same contribution arrives again), re-parenting (a tree change: queued contributions go to the
new parent), crash and restart of an inner node or leaf (its barrier state and queue are
lost; it re-reads its input and re-closes its own epochs, as an agent resuming from its
offsets does). Invariants after every step:

* every snapshot a node emits, and every result the master holds, equals the sum of its
  lineage's origins' data (lineage is truthful: nothing counted twice, nothing without an
  origin);
* once the run quiesces and the master re-asks each origin it lacks for its own snapshot
  (the end-to-end repair), every epoch equals the reference with every origin exactly once.
"""

from __future__ import annotations

from collections import Counter

from dataplane_helpers import snap_of
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from cbt import Snapshot
from srt.dataplane.barrier import EpochCombiner
from srt.dataplane.lineage import NEW, Lineage, classify

NODES = 5  # node 0 is the master; every node is an origin (it reads the job's input)
EPOCHS = 3
IDS = [0x1000 + 17 * i for i in range(NODES)]


def data(node: int, epoch: int) -> Counter:
    """What origin ``node`` read in ``epoch`` (distinct per origin and epoch)."""
    return Counter({f"k{(node * 7 + epoch) % 3}": node + 1, f"e{epoch}": 10**node})


def total(origins: Lineage, epoch: int) -> Counter:
    out: Counter = Counter()
    for o in origins:
        out.update(data(IDS.index(o), epoch))
    return out


def counts(snap: Snapshot) -> Counter:
    return Counter({k: v for k, v in snap.to_dict().items() if v})


class LineageTree(RuleBasedStateMachine):
    STRAGGLER_EPOCHS: int | None = None  # straggler leaping off (see LeapingLineageTree)

    def __init__(self) -> None:
        super().__init__()
        self.parent = {i: i - 1 for i in range(1, NODES)}  # a chain to start with
        self.combiners: dict[int, EpochCombiner] = {}
        self.outbox: dict[int, list[tuple[int, Lineage, Snapshot]]] = {}
        self.closed = dict.fromkeys(range(NODES), 0)  # next epoch each origin closes
        self.results: dict[int, tuple[Counter, set[int]]] = {}  # master: epoch -> result
        self.emits = 0
        self.violations: list[tuple] = []
        for i in range(NODES):
            self._boot(i, first_epoch=0)

    # ---- the model ------------------------------------------------------------------------
    def _children(self, i: int) -> list[int]:
        return [IDS[c] for c, p in self.parent.items() if p == i]

    def _boot(self, i: int, first_epoch: int | None) -> None:
        self.outbox[i] = []
        self.combiners[i] = EpochCombiner(
            job="j",
            tree=1,
            expect_local=True,
            children=self._children(i),
            emit=lambda e, s, i=i: self._emitted(i, e, s),
            first_epoch=first_epoch,
            origin=IDS[i],
            straggler_epochs=self.STRAGGLER_EPOCHS,
        )

    def _emitted(self, i: int, epoch: int, snap: Snapshot) -> None:
        # (the barrier logs and swallows a failing emit callback: record, assert in invariant)
        lineage = self.combiners[i].lineage_of(epoch)
        if lineage is None or counts(snap) != total(lineage, epoch):
            self.violations.append((i, epoch, lineage, counts(snap)))
            return
        self.emits += 1
        if i == 0:
            assert epoch not in self.results
            self.results[epoch] = (counts(snap), set(lineage))
        else:
            self.outbox[i].append((epoch, lineage, snap))

    def _fold_at_master(self, epoch: int, lineage: Lineage, snap: Snapshot) -> None:
        """The master's late fold (agent.runtime.results.store.ResultStore.add_late's rule)."""
        held = self.results.get(epoch)
        if held is None:
            return  # the master's own barrier has not emitted it: it is still open there
        if classify(held[1], lineage) == NEW:
            held[0].update(counts(snap))
            held[1].update(lineage)

    def _deliver(self, i: int, keep: bool) -> None:
        epoch, lineage, snap = self.outbox[i][0]
        p = self.parent[i]
        result = self.combiners[p].offer_child(IDS[i], epoch, snap, lineage)
        if result == "stale":
            # an inner node forwards it to the master (agent.runtime.recovery.repair.Repair.fold_in)
            emitted = self.combiners[p].lineage_of(epoch)
            if not (emitted is not None and lineage <= emitted):
                self._fold_at_master(epoch, lineage, snap)
        if not keep:
            self.outbox[i].pop(0)

    # ---- rules --------------------------------------------------------------------------
    @rule(i=st.integers(0, NODES - 1))
    def close_epoch(self, i: int) -> None:
        self._close(i, EPOCHS)

    def _close(self, i: int, limit: int) -> None:
        e = self.closed[i]
        if e < limit:
            own = snap_of(data(i, e), "sum")
            if self.combiners[i].offer_local(e, own) == "stale":
                # our barrier passed e without our records (it leapt over them): the agent
                # sends them to the master (agent.runtime.job.runtime.JobRuntime.deliver)
                self._fold_at_master(e, frozenset((IDS[i],)), own)
            self.closed[i] = e + 1

    @rule(i=st.integers(1, NODES - 1), lose_ack=st.booleans())
    def deliver(self, i: int, lose_ack: bool) -> None:
        if self.outbox[i]:
            self._deliver(i, keep=lose_ack)

    @rule(i=st.integers(1, NODES - 1), choice=st.integers(0, NODES))
    def reparent(self, i: int, choice: int) -> None:
        new = choice % i  # a lower-numbered node: the tree stays a tree rooted at 0
        old = self.parent[i]
        if new == old:
            return
        self.parent[i] = new
        self.combiners[old].set_children(self._children(old))
        self.combiners[new].set_children(self._children(new))

    @rule(i=st.integers(1, NODES - 1))
    def crash_and_restart(self, i: int) -> None:
        # barrier state and the unacknowledged queue are gone; the restarted agent re-reads
        # its input from its committed offsets (here: the start) and closes its epochs again
        self._boot(i, first_epoch=None)
        self.closed[i] = 0

    # ---- invariants ---------------------------------------------------------------------
    @invariant()
    def emitted_snapshots_match_their_lineage(self) -> None:
        assert not self.violations, self.violations[:3]

    @invariant()
    def master_results_match_their_lineage(self) -> None:
        for epoch, (got, lineage) in self.results.items():
            assert got == total(frozenset(lineage), epoch), (epoch, lineage)

    def teardown(self) -> None:
        """Run to the end without faults, then repair from the origins: exact."""
        for _ in range(200):
            progressed = False
            for i in range(NODES):
                # one epoch more than checked: the stream goes on, and a child that moved
                # after its old parent acknowledged its epochs tells its new parent where it
                # starts with its next delivery (the barrier's floating start); without it
                # the new parent would wait for epochs the child sent elsewhere
                if self.closed[i] < EPOCHS + 1:
                    self._close(i, EPOCHS + 1)
                    progressed = True
            for i in range(1, NODES):
                while self.outbox[i]:
                    self._deliver(i, keep=False)
                    progressed = True
            if not progressed:
                break
        assert set(range(EPOCHS)) <= set(self.results), (self.results.keys(), self._pending())
        everyone = frozenset(IDS)
        for epoch in range(EPOCHS):
            got, lineage = self.results[epoch]
            for o in everyone - lineage:  # end-to-end repair: the origin's own snapshot
                self._fold_at_master(
                    epoch, frozenset((o,)), snap_of(data(IDS.index(o), epoch), "sum")
                )
            got, lineage = self.results[epoch]
            assert lineage == set(everyone)
            assert got == total(everyone, epoch)

    def _pending(self) -> dict:
        return {i: c.pending()["open"] for i, c in self.combiners.items()}


TestLineageTree = LineageTree.TestCase
TestLineageTree.settings = settings(
    max_examples=150,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


class LeapingLineageTree(LineageTree):
    """The same tree with straggler leaping (one epoch behind is enough here, so leaps are
    frequent): leapt contributions arrive "stale" and are folded in at the master by
    lineage - the same invariants hold and the repaired end is exact."""

    STRAGGLER_EPOCHS = 1


TestLeapingLineageTree = LeapingLineageTree.TestCase
TestLeapingLineageTree.settings = TestLineageTree.settings
