"""Expected origins (agent/runtime/coverage.py) and the result store's lineage rules
(agent/runtime/results.py): what makes an epoch tentative, what a late fold may add, and
that no sequence of folds counts an origin twice (hypothesis, against a Counter)."""

from __future__ import annotations

from collections import Counter

from hypothesis import given
from hypothesis import strategies as st

from agent.runtime.coverage import ExpectedOrigins
from agent.runtime.results import ResultStore
from cbt import CompressedBufferTree, Snapshot


def snap(counts: dict[str, int]) -> Snapshot:
    t = CompressedBufferTree(aggregator="sum")
    for k, v in counts.items():
        t.insert(k, v)
    return t.flush()


def data(origin: int, epoch: int) -> dict[str, int]:
    return {f"k{origin % 3}": origin, "all": 1, f"e{epoch}": 100 * origin}


def test_expected_origins_follow_joins_grace_and_leaves() -> None:
    exp = ExpectedOrigins(grace_epochs=3)
    assert exp.expected(10) is None
    exp.observe(10, frozenset({1, 2}))
    exp.observe(11, frozenset({1, 2, 3}))  # 3 joins at 11
    assert exp.expected(10) == {1, 2}  # 3 is not missing from an epoch before it joined
    assert exp.expected(12) == {1, 2, 3}
    exp.observe(12, frozenset({1, 3}))  # 2 crashed after 11
    assert exp.expected(13) == {1, 2, 3}  # still expected within the grace ...
    assert exp.expected(15) == {1, 3}  # ... not after it
    exp.left(3, 14)
    assert exp.expected(14) == {1, 2}  # 2 still within its grace; 3 left
    fresh = ExpectedOrigins(grace_epochs=3)
    fresh.restore(exp.export())
    assert fresh.expected(13) == exp.expected(13)
    fresh.restore({"origins": {"zz": [1, 2, None], "5": "bad"}})  # malformed: skipped


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
    before = ExpectedOrigins(grace_epochs=3)
    before.observe(10, frozenset({1, 2, 3}))
    after = ExpectedOrigins(grace_epochs=3)  # the same master after a restart
    after.restore_members(before.members())
    after.restore_members({"zz": 1, "4": "x"})  # malformed entries are skipped
    assert after.expected(20) == {1, 2, 3}  # its first result after the restart ...
    after.observe(20, frozenset({1}))  # ... holds only its own records: 2 and 3 are lacking
    assert after.expected(21) == {1, 2, 3}
    for epoch in range(21, 25):
        after.observe(epoch, frozenset({1}))
    assert after.expected(24) == {1}  # no longer expected once the grace has passed


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


def test_a_master_that_was_a_member_doubts_until_it_hears_of_another_origin() -> None:
    """A partition's minority side: a former member becomes the root knowing only itself.
    Its results are tentative (lacking "?") until any other origin is heard of."""
    exp = ExpectedOrigins(grace_epochs=3)
    exp.doubt_until_told(7)
    assert exp.doubt == 7
    exp.observe(10, frozenset({7}))  # only its own records: still in doubt
    assert exp.doubt == 7
    store = ResultStore(job="j")
    store.put(1, 10, snap(data(7, 10)), 0.0, origins=frozenset({7}), expected=exp.expected(10),
              doubtful=exp.doubt is not None)  # fmt: skip
    r = store.get(1, 10)
    assert r is not None and r.tentative and r.lacking == ("?",)
    exp.join(8, 9)  # another origin announces itself (or contributes, or is handed over)
    assert exp.doubt is None and exp.expected(11) == {7, 8}
    informed = ExpectedOrigins(grace_epochs=3)
    informed.observe(3, frozenset({7, 8}))
    informed.doubt_until_told(7)  # it already knows another origin: no doubt
    assert informed.doubt is None


def test_a_lost_origin_is_not_expected_after_and_its_gap_is_past_repair() -> None:
    exp = ExpectedOrigins(grace_epochs=60)
    for e in range(10, 13):
        exp.observe(e, frozenset({1, 2, 3}))
    assert not exp.lose(9, 20)  # never a member: nothing to lose
    assert exp.lose(2, 15)  # declared dead during epoch 14
    assert not exp.lose(2, 16)  # once
    assert exp.expected(14) == {1, 2, 3}  # the epochs it had open still expect it ...
    assert exp.past_repair(14) == {2}  # ... and what they lack of it died with it
    assert exp.expected(15) == {1, 3}  # not expected from the first epoch after
    assert exp.past_repair(15) == frozenset()
    assert exp.lost() == {2: 15}
    moved = ExpectedOrigins(grace_epochs=60)  # the state moves with the master role
    moved.restore(exp.export())
    assert moved.expected(15) == {1, 3} and moved.past_repair(13) == {2}
    exp.observe(17, frozenset({1, 2, 3}))  # it came back (it was cut off, or restarted)
    assert exp.lost() == {} and exp.expected(18) == {1, 2, 3}
