"""MasterTerms: how long an unsettled master defers its lake writes, and what it defers."""

from __future__ import annotations

from agent.runtime.recovery.master_terms import MasterTerms

TREE = 0xAB


def test_a_new_master_settles_after_settle_seconds() -> None:
    terms = MasterTerms(settle_seconds=2.0, restart_settle_seconds=15.0)
    assert terms.became_root(TREE, 100.0, settled=False) == 1
    terms.defer(TREE, 7)
    assert terms.deferred(TREE, 7) and not terms.deferred(TREE, 8)
    assert terms.settle(TREE, 101.9) == set()
    assert terms.settle(TREE, 102.0) == {7}
    assert not terms.deferred(TREE, 7)


def test_a_restarted_master_waits_longer_unless_handed_over() -> None:
    terms = MasterTerms(settle_seconds=2.0, restart_settle_seconds=15.0)
    terms.became_root(TREE, 100.0, settled=False, restarted=True)
    terms.defer(TREE, 7)
    # its predecessor (master while it was down) is usually alive and hands over: publishing
    # its own re-read share of the epochs it missed before then would lack everyone else
    assert terms.settle(TREE, 110.0) == set()
    assert terms.settle_in(TREE, 110.0) == 5.0
    term = terms.handed_over(TREE, 4)  # the predecessor's term
    assert term == 5 and terms.settled(TREE, 110.0)
    assert terms.settle(TREE, 110.0) == {7}


def test_a_restarted_master_with_no_predecessor_settles_at_the_bound() -> None:
    terms = MasterTerms(settle_seconds=2.0, restart_settle_seconds=15.0)
    terms.became_root(TREE, 100.0, settled=False, restarted=True)
    terms.defer(TREE, 3)
    assert terms.settle(TREE, 114.9) == set()
    assert terms.settle(TREE, 115.0) == {3}


def test_terms_persisted_by_an_earlier_run_say_it_ran_before() -> None:
    terms = MasterTerms()
    terms.restore({format(TREE, "x"): 3, "zz": 1, "cd": "x", "ef": 0})
    assert terms.ran_before(TREE) and not terms.ran_before(0xCD) and not terms.ran_before(0xEF)
    assert terms.heard_of(TREE) == 3
    assert terms.became_root(TREE, 0.0, settled=False, restarted=True) == 4


def test_a_restarted_master_waits_long_once_per_tree() -> None:
    """A root that flaps while the overlay converges after the restart must not push its
    lake writes back by the long wait each time it becomes the root again."""
    terms = MasterTerms(settle_seconds=2.0, restart_settle_seconds=15.0)
    terms.became_root(TREE, 100.0, settled=False, restarted=True)
    assert terms.settle_in(TREE, 100.0) == 15.0
    terms.not_root(TREE)
    terms.became_root(TREE, 104.0, settled=False, restarted=True)
    assert terms.settle_in(TREE, 104.0) == 2.0


def test_a_fenced_master_claims_above_and_waits_before_publishing_again() -> None:
    terms = MasterTerms(settle_seconds=2.0, restart_settle_seconds=15.0)
    terms.became_root(TREE, 100.0, settled=True)
    assert terms.hear(TREE, 1)  # the lake holds our own term: another root wrote under it
    assert terms.reclaim(TREE, 105.0) == 2
    terms.defer(TREE, 9)
    assert terms.settle(TREE, 106.9) == set()
    assert terms.settle(TREE, 107.0) == {9} and terms.term(TREE) == 2


def test_fences_heard_while_waiting_raise_the_term_once_when_it_settles() -> None:
    """Two roots of one tree fence each other at every epoch while the overlay converges:
    each root claims once per wait, not once per fenced epoch."""
    terms = MasterTerms(settle_seconds=2.0)
    terms.became_root(TREE, 100.0, settled=True)
    assert terms.hear(TREE, 1) and terms.reclaim(TREE, 100.0) == 2
    terms.defer(TREE, 1)
    for epoch, other in ((2, 3), (3, 4), (4, 5)):  # the other root claims above us each time
        assert terms.hear(TREE, other)
        assert terms.reclaim(TREE, 100.0 + epoch / 4) is None  # waiting: no new claim now
        terms.defer(TREE, epoch)
    assert terms.term(TREE) == 2
    assert terms.settle(TREE, 102.0) == {1, 2, 3, 4}
    assert terms.term(TREE) == 6  # above every term heard, in one claim


def test_a_master_that_heard_nothing_newer_settles_under_its_own_term() -> None:
    terms = MasterTerms(settle_seconds=2.0)
    assert terms.became_root(TREE, 100.0, settled=False) == 1
    assert not terms.hear(TREE, 0)
    terms.defer(TREE, 3)
    assert terms.settle(TREE, 102.0) == {3} and terms.term(TREE) == 1
