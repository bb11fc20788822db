"""Membership (agent/runtime/recovery/membership.py) and the result store's lineage rules
(agent/runtime/results/store.py): what makes an epoch tentative, partial or final, what a late fold
may add, and that no sequence of folds counts an origin twice (hypothesis, against a
Counter)."""

from __future__ import annotations

from collections import Counter

from hypothesis import given
from hypothesis import strategies as st

from agent.runtime.recovery.membership import Membership
from agent.runtime.results.store import ResultStore
from cbt import CompressedBufferTree, Snapshot


def snap(counts: dict[str, int]) -> Snapshot:
    t = CompressedBufferTree(aggregator="sum")
    for k, v in counts.items():
        t.insert(k, v)
    return t.flush()


def data(origin: int, epoch: int) -> dict[str, int]:
    return {f"k{origin % 3}": origin, "all": 1, f"e{epoch}": 100 * origin}


def test_expected_origins_follow_joins_absence_leaves_and_retirements() -> None:
    exp = Membership()
    assert exp.expected(10) is None
    exp.observe(10, frozenset({1, 2}), now=10.0)
    exp.observe(11, frozenset({1, 2, 3}), now=11.0)  # 3 joins at 11
    assert exp.expected(10) == {1, 2}  # 3 is not missing from an epoch before it joined
    assert exp.expected(12) == {1, 2, 3}
    exp.observe(12, frozenset({1, 3}), now=12.0)  # 2 crashed after 11: absent, not gone
    assert exp.declare_absent(2, "refused", now=12.5)
    assert exp.expected(500) == {1, 2, 3}  # expected for as long as it is not retired
    exp.leave(3, 14)  # 3 stopped gracefully after epoch 13
    assert exp.expected(13) == {1, 2, 3} and exp.expected(14) == {1, 2}
    assert exp.retire_due(now=11.0 + 899.0, retire_after=900.0) == []  # last heard at 11
    assert exp.retire_due(now=11.0 + 900.0, retire_after=900.0) == [2]
    assert exp.retire(2, 20, now=920.0, why="operator")
    assert exp.retired_before() == {2: 20} and exp.absent() == {}
    assert exp.expected(19) == {1, 2} and exp.expected(20) == {1}
    fresh = Membership()
    fresh.restore(exp.export())
    for e in (13, 14, 19, 20):
        assert fresh.expected(e) == exp.expected(e)
    assert fresh.retired_before() == {2: 20}
    fresh.restore({"origins": {"zz": [1, 2, None], "5": "bad"}})  # malformed: skipped
    exp.observe(30, frozenset({2}), now=930.0)  # 2 came back after all
    assert exp.retired_before() == {} and exp.expected(29) == {1} and 2 in exp.expected(30)
    exp.join(3, 31, now=931.0)  # so did 3
    assert exp.expected(31) == {1, 2, 3} and exp.expected(20) == {1}


def test_a_result_lacking_an_origin_is_tentative_until_it_arrives() -> None:
    store = ResultStore(job="j")
    store.put(1, 7, snap(data(1, 7)), 0.0, origins=frozenset({1}), expected=frozenset({1, 2}))
    r = store.get(1, 7)
    assert r is not None and r.tentative and r.lacking == ("2",) and r.coverage == 0.5
    assert r.version == 1
    assert store.add_late(1, 7, 2, snap(data(2, 7)), 1.0, origins=frozenset({2}))
    r = store.get(1, 7)
    assert r is not None and not r.tentative and r.coverage == 1.0 and r.version == 2
    assert Counter(r.snapshot.to_dict()) == Counter(data(1, 7)) + Counter(data(2, 7))
    # the same origin again (a re-send after a lost ack): refused, counted
    assert not store.add_late(1, 7, 9, snap(data(2, 7)), 2.0, origins=frozenset({2}))
    # an overlap (2 is in, 3 is not): refused, 3 stays missing until it comes alone
    assert not store.add_late(1, 7, 9, snap(data(3, 7)), 2.0, origins=frozenset({2, 3}))
    assert store.stats()["lineage_refused"] == {"duplicate": 1, "overlap": 1}
    assert store.get(1, 7).version == 2  # type: ignore[union-attr]


def test_an_epoch_the_new_master_passed_as_a_child_materializes_from_late_parts() -> None:
    store = ResultStore(job="j")
    assert store.add_late(1, 4, 5, snap(data(5, 4)), 0.0, origins=frozenset({5}),
                          materialize=True, expected=frozenset({5, 6}))  # fmt: skip
    r = store.get(1, 4)
    assert r is not None and r.tentative and r.lacking == ("6",)
    assert store.add_late(1, 4, 6, snap(data(6, 4)), 0.0, origins=frozenset({6}))
    assert not store.get(1, 4).tentative  # type: ignore[union-attr]


@given(
    st.lists(st.frozensets(st.integers(1, 6), min_size=1, max_size=3), max_size=12),
    st.frozensets(st.integers(1, 6), min_size=1),
)
def test_no_sequence_of_late_folds_counts_an_origin_twice(
    folds: list[frozenset[int]], first: frozenset[int]
) -> None:
    store = ResultStore(job="j")
    part = Counter()
    for o in first:
        part.update(data(o, 0))
    store.put(1, 0, snap(part), 0.0, origins=first, expected=frozenset(range(1, 7)))
    for origins in folds:
        part = Counter()
        for o in origins:
            part.update(data(o, 0))
        store.add_late(1, 0, 99, snap(part), 0.0, origins=origins)
    r = store.get(1, 0)
    assert r is not None and r.origins is not None
    want = Counter()
    for o in r.origins:
        want.update(data(o, 0))
    assert Counter(r.snapshot.to_dict()) == want  # exactly the origins it says, once each
    assert r.tentative == (r.origins != frozenset(range(1, 7)))


def test_a_restarted_master_still_expects_the_origins_it_persisted() -> None:
    before = Membership()
    before.observe(10, frozenset({1, 2, 3}), now=0.0)
    before.retire(3, 12, now=5.0, why="operator")
    after = Membership()  # the same master after a restart
    after.restore_members(before.members(), now=100.0)
    after.restore_members({"zz": 1, "4": "x"}, now=100.0)  # malformed entries are skipped
    assert after.expected(20) == {1, 2}  # its first result after the restart ...
    after.observe(20, frozenset({1}), now=101.0)  # ... holds only its own records
    for epoch in range(21, 500):
        after.observe(epoch, frozenset({1}), now=101.0)
    assert after.expected(499) == {1, 2}  # 2 is absent, not gone: still expected
    assert after.retired_before() == {3: 12}
    assert after.retire_due(now=100.0 + 900.0, retire_after=900.0) == [2]


def test_a_handed_over_result_covering_more_replaces_a_restarted_masters_own() -> None:
    mine = ResultStore(job="j")  # the restarted master stored its own records only
    mine.put(1, 5, snap(data(1, 5)), 0.0, origins=frozenset({1}), expected=frozenset({1}))
    interim = ResultStore(job="j")  # the interim master had every origin's records
    full = Counter(data(1, 5)) + Counter(data(2, 5)) + Counter(data(3, 5))
    interim.put(1, 5, snap(full), 0.0, origins=frozenset({1, 2, 3}), expected=frozenset({1, 2, 3}))
    assert mine.absorb(1, interim.export(1)) == 1
    r = mine.get(1, 5)
    assert r is not None and Counter(r.snapshot.to_dict()) == full  # not doubled for 1
    assert r.origins == {1, 2, 3} and not r.tentative and r.version == 2
    # the other way round: the smaller result is not merged into the larger one
    assert interim.absorb(1, ResultStore.encode_plan(mine.export_plan(1))) in (0, 1)
    r = interim.get(1, 5)
    assert r is not None and Counter(r.snapshot.to_dict()) == full


def test_a_master_that_inherited_nothing_doubts_until_it_is_told_the_members() -> None:
    """A partition's minority side, or the third agent when the master and its standby died
    together: a root knowing only itself. Its results are tentative (lacking "?") until it
    is told who the members are (a hand-over, a replica, a successor's copy) - one more
    origin's news is not all of them; then its doubtful results expect the real members."""
    exp = Membership()
    exp.doubt_until_told(7)
    assert exp.doubt == 7
    exp.observe(10, frozenset({7}), now=0.0)  # only its own records: still in doubt
    assert exp.doubt == 7
    store = ResultStore(job="j")
    store.put(1, 10, snap(data(7, 10)), 0.0, origins=frozenset({7}), expected=exp.expected(10),
              doubtful=exp.doubt is not None)  # fmt: skip
    r = store.get(1, 10)
    assert r is not None and r.tentative and r.lacking == ("?",)
    exp.join(8, 9, now=0.0)  # another origin announces itself: not all of them yet
    exp.observe(10, frozenset({8}), now=0.0)
    assert exp.doubt == 7
    told = Membership()  # what the old master knew, handed over or shared
    told.observe(3, frozenset({7, 8, 9}), now=0.0)
    exp.restore(told.export())
    assert exp.doubt is None and exp.expected(11) == {7, 8, 9}
    assert store.resolve_doubt(1, exp.expected) == [10]
    r = store.get(1, 10)
    assert r is not None and r.tentative and r.lacking == ("8", "9") and r.version == 2
    informed = Membership()
    informed.observe(3, frozenset({7, 8}), now=0.0)
    informed.doubt_until_told(7)  # it already knows another origin: no doubt
    assert informed.doubt is None


def test_a_retired_origin_makes_the_epochs_it_missed_partial_for_good() -> None:
    """Retiring (elf retire, retire_after): the stored epochs before it that lack the
    origin turn partial (a new version), later ones do not wait for it; if it comes back
    after all, its data folds in and the epoch becomes final."""
    exp = Membership()
    exp.observe(10, frozenset({1, 2}), now=0.0)
    store = ResultStore(job="j")
    retired_before = exp.retired_before
    store.given_up_for = lambda e: frozenset(o for o, r in retired_before().items() if e < r)
    for e in (11, 12):
        store.put(1, e, snap(data(1, e)), 0.0, origins=frozenset({1}), expected=exp.expected(e))
    r = store.get(1, 11)
    assert r is not None and r.tentative and not r.partial and r.state == "tentative"
    assert exp.retire(2, 13, now=1.0, why="operator")
    assert store.retire(2, 13) == [(1, 11), (1, 12)]
    r = store.get(1, 11)
    assert r is not None and r.partial and not r.tentative and r.state == "partial"
    assert r.lacking == ("2",) and r.coverage < 1.0 and r.version == 2
    assert store.missing(1, -1) == {}  # nothing left to repair
    # an epoch stored after the retirement but before it: partial at once
    store.put(1, 9, snap(data(1, 9)), 0.0, origins=frozenset({1}), expected=frozenset({1, 2}))
    assert store.get(1, 9).partial  # type: ignore[union-attr]
    store.put(1, 13, snap(data(1, 13)), 0.0, origins=frozenset({1}), expected=exp.expected(13))
    assert store.get(1, 13).state == "final"  # type: ignore[union-attr]
    # it comes back after all: its share folds in, final and exact
    assert store.add_late(1, 11, 2, snap(data(2, 11)), 2.0, origins=frozenset({2}))
    r = store.get(1, 11)
    assert r is not None and r.state == "final" and r.version == 3
    assert Counter(r.snapshot.to_dict()) == Counter(data(1, 11)) + Counter(data(2, 11))
    # the state travels with a hand-over or a standby replica
    other = ResultStore(job="j")
    other.absorb(1, store.export(1))
    assert other.get(1, 12).state == "partial"  # type: ignore[union-attr]
