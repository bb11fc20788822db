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
