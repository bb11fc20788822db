"""Final means final: a hypothesis state machine over membership and versions.

The real :class:`~agent.runtime.recovery.membership.Membership`,
:class:`~agent.runtime.results.store.
ResultStore`, :class:`~agent.runtime.recovery.absence.Absence` and
:class:`~agent.runtime.recovery.master_terms.
MasterTerms` of two masters (the current one and a deposed one that may still run: a stale
master, a partition's minority side) against an independent model of the input: every origin's
host writes records every epoch whether its agent runs or not, as a web server does.

Steps: epochs close (live origins contribute; the master stores the epoch), origins crash,
restart (their re-read epochs fold in), stop gracefully (a declared end), are retired, join;
the master role moves by hand-over, or to the standby while the old master lives on cut off
(stale) and is later healed (it hands over what it has). Every stored version is published to
a model lake that keeps the product's rules (spark_sink/lake.py): a write below a newer term of
that epoch is fenced; a reader picks the highest (term, version).

Invariants, checked on every version ever published and on the readers' view after every step:
a version is **final** only if it equals the sum over the origins expected by the model (members
of the job for that epoch, not left or retired before it); **tentative** and **partial**
versions name every origin whose records they lack (``lacking`` ⊇ what is missing) and hold
exactly the records of the origins they cover; a partial one lacks only retired (given up)
origins; and no (term, version) of an epoch is ever published with two row sets.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from agent.runtime.recovery.absence import Absence
from agent.runtime.recovery.master_terms import MasterTerms
from agent.runtime.recovery.membership import Membership
from agent.runtime.results.store import ResultStore
from cbt import CompressedBufferTree, Snapshot

TREE = 1
ORIGINS = (1, 2, 3, 4, 5)


def records(origin: int, epoch: int) -> Counter[str]:
    """What origin's host logs in ``epoch`` (the model's input: independent of any agent)."""
    return Counter({f"k{origin % 3}": origin, f"o{origin}": 1 + epoch % 4, "all": 1})


def snap(counts: Counter[str]) -> Snapshot:
    t = CompressedBufferTree(aggregator="sum")
    for k, v in counts.items():
        t.insert(k, v)
    return t.flush()


class _Host:
    """What Absence needs: publishing is recorded by the machine."""

    def __init__(self, master: Master) -> None:
        self.master = master
        self.name = "wc"

    def retire_after(self) -> float:
        return 900.0

    def first_epoch_after(self, t: float) -> int:
        return self.master.clock() + 1

    def versions_changed(self, changed: list[tuple[int, int]]) -> None:
        for _, epoch in changed:
            self.master.publish(epoch)

    def members_changed(self) -> None:
        pass

    def count(self, what: str, n: int = 1) -> None:
        pass


class Master:
    """One agent's master role: the real store, membership, absence and terms."""

    def __init__(self, name: str, machine: FinalMeansFinal) -> None:
        self.name = name
        self.machine = machine
        self.clock = lambda: machine.epoch
        self.membership = Membership()
        self.store = ResultStore(job="wc", max_epochs=10_000)
        self.fence = MasterTerms(settle_seconds=0.0)
        self.store.term_of = self.fence.term
        retired = self.membership.retired_before
        self.store.given_up_for = lambda e: frozenset(o for o, r in retired().items() if e < r)
        self.absence = Absence(self.membership, self.store, _Host(self))

    def publish(self, epoch: int) -> None:
        result = self.store.get(TREE, epoch)
        assert result is not None
        self.machine.lake_write(epoch, result, self.name)

    def store_epoch(self, epoch: int, contributors: frozenset[int]) -> None:
        total: Counter[str] = Counter()
        for o in contributors:
            total += records(o, epoch)
        expected = self.membership.expected(epoch)
        if self.store.put(TREE, epoch, snap(total), 0.0, origins=contributors, expected=expected):
            self.membership.observe(epoch, contributors, now=float(epoch))
            self.publish(epoch)

    def fold(self, origin: int, epoch: int) -> None:
        """``origin``'s own share of ``epoch`` arrives late (a restart's re-read, a repair)."""
        if self.store.add_late(
            TREE,
            epoch,
            origin,
            snap(records(origin, epoch)),
            0.0,
            origins=frozenset({origin}),
            expected=self.membership.expected(epoch),
        ):
            self.membership.observe(epoch, frozenset({origin}), now=float(epoch))
            self.publish(epoch)

    def hand_to(self, other: Master) -> None:
        """This master's results and knowledge go to ``other`` (hand-over or replica)."""
        other.fence.handed_over(TREE, self.fence.term(TREE))
        other.membership.restore(self.membership.export())
        other.store.absorb(TREE, self.store.export(TREE))
        for epoch in other.store.epochs(TREE):
            other.publish(epoch)


class FinalMeansFinal(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.epoch = 0
        self.members: dict[int, int] = {}  # origin -> the epoch it joined
        self.out: dict[int, list[list[Any]]] = {}  # origin -> [start, end|None, kind]
        self.alive: set[int] = set()
        self.missed: dict[int, set[int]] = {}  # crashed origin -> epochs it did not deliver
        self.lake: dict[tuple[int, int, int], frozenset[tuple[str, int]]] = {}
        self.seen: list[tuple[int, int, int, str, frozenset[str], dict[str, int]]] = []
        self.current = Master("a", self)
        self.current.fence.became_root(TREE, 0.0, settled=True)
        self.stale: Master | None = None
        self.spare = 0
        for o in ORIGINS[:3]:
            self._join(o)

    # ---- the model -----------------------------------------------------------------------

    def _join(self, origin: int) -> None:
        self.members.setdefault(origin, self.epoch)
        self.alive.add(origin)
        self.current.membership.join(origin, self.epoch, now=float(self.epoch))

    def model_expected(self, epoch: int) -> frozenset[int]:
        out = set()
        for o, ranges in self.out.items():
            for start, end, _ in ranges:
                if start <= epoch and (end is None or epoch < end):
                    out.add(o)
        return frozenset(o for o, first in self.members.items() if first <= epoch) - out

    def clock(self) -> int:
        return self.epoch

    def lake_write(self, epoch: int, result: Any, writer: str) -> None:
        """The product's lake rules: fenced below a newer term; one row set per (term,
        version); each accepted write is a version some reader may see."""
        newest = max((t for (e, t, _) in self.lake if e == epoch), default=0)
        if result.term < newest:
            return  # FencedWrite: a deposed master cannot replace a newer term's version
        rows = frozenset(result.snapshot.to_dict().items())
        key = (epoch, result.term, result.version)
        held = self.lake.get(key)
        assert held is None or held == rows, f"(term, version) {key} written with two row sets"
        self.lake[key] = rows
        self.seen.append(
            (epoch, result.term, result.version, result.state, frozenset(result.lacking),
             dict(rows))
        )  # fmt: skip
        self.check_version(epoch, result.state, frozenset(result.lacking), dict(rows), writer)

    def check_version(
        self, epoch: int, state: str, lacking: frozenset[str], rows: dict[str, int], writer: str
    ) -> None:
        expected = self.model_expected(epoch)
        want: Counter[str] = Counter()
        for o in expected:
            want += records(o, epoch)
        if state == "final":
            assert Counter(rows) == want, (epoch, writer, rows, dict(want))
            return
        assert lacking, (epoch, state)
        if "?" in lacking:
            return
        named = {int(x, 16) for x in lacking}
        floor: Counter[str] = Counter()
        for o in expected - named:
            floor += records(o, epoch)
        # everything missing is named: what it holds is at least the unnamed origins' records
        assert all(rows.get(k, 0) >= v for k, v in floor.items()), (epoch, state, named, rows)
        # ... and never more than the expected origins' records: nothing counted twice
        assert all(v <= want.get(k, 0) for k, v in rows.items()), (epoch, state, rows)

    # ---- steps -------------------------------------------------------------------------------

    @rule()
    def close_epoch(self) -> None:
        """Every live origin contributes; the (current, and a stale) master stores."""
        e = self.epoch
        live = frozenset(o for o in self.alive if o in self.model_expected(e))
        for o in self.model_expected(e) - live:
            self.missed.setdefault(o, set()).add(e)
        if live:
            self.current.store_epoch(e, live)
            if self.stale is not None:  # the cut-off master sees only itself's side: one origin
                self.stale.store_epoch(e, frozenset(sorted(live)[:1]))
        self.epoch += 1

    @precondition(lambda self: len(self.alive) > 1)
    @rule(data=st.data())
    def crash(self, data: st.DataObject) -> None:
        origin = data.draw(st.sampled_from(sorted(self.alive)))
        self.alive.discard(origin)
        self.current.membership.declare_absent(origin, "refused", now=float(self.epoch))

    @precondition(lambda self: any(o not in self.alive for o in self.members))
    @rule(data=st.data())
    def restart(self, data: st.DataObject) -> None:
        """Back: it re-reads what its host wrote meanwhile and re-sends those epochs."""
        origin = data.draw(st.sampled_from(sorted(o for o in self.members if o not in self.alive)))
        self.alive.add(origin)
        self.current.membership.join(origin, self.epoch, now=float(self.epoch))
        ranges = self.out.get(origin)
        if ranges and ranges[-1][1] is None:
            ranges[-1][1] = max(ranges[-1][0], self.epoch)
        for e in sorted(self.missed.pop(origin, set())):
            if self.current.store.get(TREE, e) is not None:
                self.current.fold(origin, e)

    @precondition(lambda self: len(self.alive) > 1)
    @rule(data=st.data())
    def leave(self, data: st.DataObject) -> None:
        """A graceful stop: it delivered every epoch it closed, then declares its end."""
        origin = data.draw(st.sampled_from(sorted(self.alive)))
        self.alive.discard(origin)
        for e in sorted(self.missed.pop(origin, set())):
            if self.current.store.get(TREE, e) is not None:
                self.current.fold(origin, e)
        if self.current.absence.left(origin, self.epoch - 1):
            self.out.setdefault(origin, []).append([self.epoch, None, "left"])

    @precondition(lambda self: any(o not in self.alive for o in self.members))
    @rule(data=st.data())
    def retire(self, data: st.DataObject) -> None:
        origin = data.draw(st.sampled_from(sorted(o for o in self.members if o not in self.alive)))
        ranges = self.out.get(origin)
        if ranges and ranges[-1][1] is None:
            return  # already out
        self.current.absence.retire(origin, "operator", now=float(self.epoch))
        self.out.setdefault(origin, []).append([self.epoch + 1, None, "retired"])

    @precondition(lambda self: any(o not in self.members for o in ORIGINS))
    @rule()
    def join(self) -> None:
        self._join(next(o for o in ORIGINS if o not in self.members))

    @precondition(lambda self: self.stale is None)
    @rule()
    def hand_over(self) -> None:
        """The root moves to another agent, the old master alive: a hand-over."""
        new = Master(f"m{self.spare}", self)
        self.spare += 1
        self.current.hand_to(new)
        self.current = new

    @precondition(lambda self: self.stale is None)
    @rule()
    def take_over_while_the_old_master_lives(self) -> None:
        """The standby takes over from its replica; the old master, cut off, lives on."""
        new = Master(f"m{self.spare}", self)
        self.spare += 1
        self.current.hand_to(new)  # the replica: results, membership, term
        self.stale, self.current = self.current, new

    @precondition(lambda self: self.stale is not None)
    @rule()
    def heal(self) -> None:
        """The partition heals: the stale master is no longer the root and hands over."""
        assert self.stale is not None
        self.current.fence.hear(TREE, self.stale.fence.term(TREE))
        self.stale.hand_to(self.current)
        self.stale = None

    # ---- what readers see ------------------------------------------------------------------

    @invariant()
    def readers_see_exact_or_flagged(self) -> None:
        newest: dict[int, tuple[int, int]] = {}
        for e, t, v in self.lake:
            newest[e] = max(newest.get(e, (0, 0)), (t, v))
        for e, (t, v) in newest.items():
            assert (e, t, v) in self.lake


FinalMeansFinal.TestCase.settings = settings(
    max_examples=150, stateful_step_count=40, deadline=None
)
TestFinalMeansFinal = FinalMeansFinal.TestCase
