"""A JobRuntime checks what peers send before it touches state (issue 13, finding 4): the
expectation is the aggregate of the job instance that reduces the epoch - it follows a runtime
change of aggregate - and every entry point (child snapshot, late contribution, hand-over,
``send_to``) refuses a foreign aggregate with 409 and an unknown tree with 503, recording
nothing. Built from the fake services of ``test_services.py`` (no network)."""

from __future__ import annotations

import pytest
from test_services import FakeAgent, runtime

from agent.jobs.job import create_job
from cbt import CompressedBufferTree, Snapshot, get_aggregator
from srt import SnapshotName
from srt.errors import Incompatible, Reject, RetryLater


def snap(counts: dict, aggregator: str = "count") -> Snapshot:
    t = CompressedBufferTree(aggregator=aggregator)
    for k, v in counts.items():
        t.insert(k, v)
    return t.flush()


async def test_every_entry_point_refuses_a_foreign_aggregate_and_records_nothing() -> None:
    fake = FakeAgent()
    rt = runtime(fake, inputs=["web"])
    tid = rt.tree_list[0]
    fake.trees.roots.add(tid)
    comb = rt.ensure_tree(tid)
    summed = snap({"a": 5}, "sum")
    with pytest.raises(Incompatible):
        rt.trees.offer_child(SnapshotName("wc", tid, 110, 9), summed)
    with pytest.raises(Incompatible):
        rt.recovery.offer_late(SnapshotName("wc", tid, 90, 9), summed)
    with pytest.raises(Incompatible):
        rt.recovery.absorb(tid, [{"epoch": 90, "snapshot": summed.to_bytes()}])
    with pytest.raises(Incompatible):
        await rt.control.receive(9, summed)
    with pytest.raises(RetryLater, match="not a tree"):
        rt.recovery.offer_late(SnapshotName("wc", tid ^ 1, 90, 9), snap({"a": 1}))
    with pytest.raises(RetryLater):
        rt.recovery.absorb(tid ^ 1, [])
    assert set(rt.combiners) == {tid}  # no barrier for the bogus tree
    assert fake.ticked == []  # refused before the agent read its own inputs for it
    assert comb.pending()["open"] == {105: {"local": False, "received": [],
                                            "waiting_for": ["local"]}}  # fmt: skip
    assert rt.store.epochs(tid) == [] and rt.store.export(tid) == []
    assert rt.counters["refused_incompatible"] == 1 and rt.counters["refused_unknown_tree"] == 2
    # a count snapshot goes through every path
    assert rt.trees.offer_child(SnapshotName("wc", tid, 110, 9), snap({"a": 1})) == "merged"
    assert rt.recovery.offer_late(SnapshotName("wc", tid, 90, 9), snap({"a": 2})) == "merged"
    await fake.client.close()


async def test_on_recv_errors_answer_400_not_500() -> None:
    fake = FakeAgent()
    rt = runtime(fake, inputs=["web"])

    def boom(node_id: int, paos: object) -> None:
        raise KeyError("x")

    rt.job.on_recv = boom  # type: ignore[method-assign]
    with pytest.raises(Reject) as err:
        await rt.control.receive(9, {"any": "data"})
    assert (err.value.status, err.value.reason) == (400, "recv_refused")
    assert rt.counters["recv_errors"] == 1
    await fake.client.close()


async def test_expectation_follows_a_runtime_change_of_aggregate() -> None:
    fake = FakeAgent()
    rt = runtime(fake, inputs=["web"])
    assert rt.trees.expectation(200).aggregator == get_aggregator("count")
    new = rt.spec.with_changes(aggregator="sum", aggregator_since=150)
    rt.changes.jobs_before.append((150, rt.job))  # what _switch_job records
    rt.job = create_job(new)
    assert rt.trees.expectation(149).aggregator == get_aggregator("count")
    assert rt.trees.expectation(150).aggregator == get_aggregator("sum")
    assert rt.trees.expectation(None).aggregator == get_aggregator("sum")
    tid = rt.tree_list[0]
    comb = rt.ensure_tree(tid)
    assert comb.offer_child(9, 160, snap({"a": 4}, "sum")) == "merged"
    with pytest.raises(Incompatible):
        comb.offer_child(9, 140, snap({"a": 4}, "sum"))
    assert comb.offer_child(9, 140, snap({"a": 4})) == "merged"
    await fake.client.close()


async def test_a_master_whose_barrier_emits_an_epoch_already_handed_over_folds_it_in() -> None:
    """A restarted master re-reads the epochs it missed while dead; the interim master hands
    them over first (lacking the restarted one's origin). When its own barrier then emits
    such an epoch, its contribution is folded in by lineage - it used to be dropped, and the
    epoch stayed tentative, lacking the master's own origin, for good."""
    fake = FakeAgent()
    rt = runtime(fake, inputs=["web"])
    tid = rt.tree_list[0]
    fake.trees.roots.add(tid)
    comb = rt.ensure_tree(tid)
    epoch = 105  # the barrier's next epoch here
    other = 9  # the origin the interim master had
    item = {"epoch": epoch, "snapshot": snap({"a": 2, "b": 1}).to_bytes(),
            "origins": [f"{other:x}"], "expected": [f"{other:x}", f"{fake.node_id:x}"]}  # fmt: skip
    assert rt.recovery.absorb(tid, [item]) == 1
    assert comb.offer_local(epoch, snap({"a": 1, "c": 4})) == "merged"  # emits: no children
    result = rt.store.peek(tid, epoch)
    assert result is not None
    assert dict(result.snapshot) == {"a": 3, "b": 1, "c": 4}  # both origins, each once
    assert set(result.origins or ()) == {other, fake.node_id}
    assert rt.counters["emitted_after_handover"] == 1
    # the same contribution again (a re-send) changes nothing
    rt.recovery.fold_in(SnapshotName("wc", tid, epoch, fake.node_id), snap({"a": 1, "c": 4}),
                        frozenset({fake.node_id}))  # fmt: skip
    assert dict(rt.store.peek(tid, epoch).snapshot) == {"a": 3, "b": 1, "c": 4}  # type: ignore[union-attr]
    await fake.client.close()
