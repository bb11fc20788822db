"""The standby's bookkeeping (agent/runtime/recovery/standby.py): who the standby is, what is due,
what bounds the commit watermark, and the replica's version and size rules."""

from __future__ import annotations

from types import SimpleNamespace

from hypothesis import given
from hypothesis import strategies as st

from agent.runtime.recovery.standby import Replica, ReplicationLog, standby_for


def test_the_standby_is_the_next_closest_agent_to_the_tree() -> None:
    nodes = [SimpleNamespace(id=i) for i in (0b0001, 0b0110, 0b1000)]
    assert standby_for(0b0000, 0b0001, nodes).id == 0b0110  # type: ignore[union-attr]
    assert standby_for(0b0000, 0b0001, nodes[:1]) is None  # alone: no standby


@given(
    st.dictionaries(st.integers(0, 20), st.integers(1, 4), max_size=12),
    st.dictionaries(st.integers(0, 20), st.integers(0, 4), max_size=12),
)
def test_commit_bound_is_the_longest_fully_replicated_prefix(
    versions: dict[int, int], acked: dict[int, int]
) -> None:
    log = ReplicationLog()
    log.retarget(1, 99)
    log.acknowledged(1, 99, acked)
    upto = log.replicated_upto(1, versions)
    prefix = [e for e in sorted(versions)]
    for e in prefix:
        held = acked.get(e, 0) >= versions[e]
        if upto is not None and e <= upto:
            assert held  # everything up to the bound is replicated at its current version
        elif held is False:
            break
    assert set(log.due(1, versions)) == {e for e in versions if acked.get(e, 0) < versions[e]}


def test_a_new_standby_gets_everything_again_and_old_acks_are_ignored() -> None:
    log = ReplicationLog()
    assert log.retarget(1, 5)
    log.acknowledged(1, 5, {10: 1, 11: 2})
    assert log.due(1, {10: 1, 11: 2, 12: 1}) == [12]
    assert log.retarget(1, 6)  # the standby changed (the old one died, or a closer one came)
    assert log.due(1, {10: 1, 11: 2, 12: 1}) == [10, 11, 12]
    log.acknowledged(1, 5, {10: 1})  # a late answer from the old standby: not counted
    assert log.replicated_upto(1, {10: 1}) is None


def test_replica_keeps_the_newest_version_within_its_retention() -> None:
    r = Replica(master=7, max_epochs=2)
    assert r.add([{"epoch": 1, "version": 1, "snapshot": b"a"}]) == 1
    assert r.add([{"epoch": 1, "version": 1, "snapshot": b"zz"}]) == 0  # same version again
    assert r.add([{"epoch": 1, "version": 2, "snapshot": b"bb"}]) == 1
    assert r.items[1]["snapshot"] == b"bb" and r.bytes == 2
    r.add(
        [{"epoch": 3, "version": 1, "snapshot": b"c"}, {"epoch": 2, "version": 1, "snapshot": b"d"}]
    )
    assert list(r.items) == [2, 3] and r.bytes == 2  # oldest dropped past the retention
