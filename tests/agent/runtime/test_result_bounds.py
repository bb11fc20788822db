"""The master's results within a byte budget (issue 13, finding 5): the oldest epochs spill to
disk and are read back exactly; past the disk budget (or without a spill directory) they are
dropped and reported as gone with the reason; stored snapshots never grow when iterated; a
closed store leaves no file; a job's worker shares one budget among its open epochs."""

from __future__ import annotations

import os
import stat
import tracemalloc
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.jobs.job import Job, register_job
from agent.jobs.spec import JobSpec
from agent.runtime.epochs.worker import Worker
from agent.runtime.results.epoch_result import EPOCH_LIMIT, MEMORY_BUDGET, SPILL_BUDGET
from agent.runtime.results.spill import ResultSpill
from agent.runtime.results.store import ResultStore
from cbt import CompressedBufferTree, Snapshot


@register_job("test-bounds-keys")
class Keys(Job):
    """Every word of ``record["line"]`` is a key (count)."""

    def map_keys(self, record: dict[str, Any]) -> list[Any]:
        return record["line"].split()


def unique_keys(epoch: int, n: int) -> Snapshot:
    tree = CompressedBufferTree("count")
    tree.insert_many([f"user-{epoch}-{i:07d}" for i in range(n)])
    return tree.flush()


def spill_all(store: ResultStore) -> int:
    """What the job runtime does in its background task (here inline): spill candidates."""
    done = 0
    while batch := store.spill_candidates():
        for tree, epoch, snap in batch:
            store.spilled(tree, epoch, snap, store.spill_write(tree, epoch, snap))
            done += 1
    return done


def test_spilled_epochs_are_read_back_exactly_and_memory_stays_in_budget(tmp_path: Path) -> None:
    one = unique_keys(0, 5000).memory_bytes()
    store = ResultStore(budget_bytes=3 * one, spill=ResultSpill(tmp_path, "flood"), job="flood")
    expected = {}
    for epoch in range(10):
        s = unique_keys(epoch, 5000)
        expected[epoch] = Counter(s.to_dict())
        store.put(1, epoch, s, float(epoch))
        spill_all(store)
        assert store.resident_bytes <= store.budget_bytes
    stats = store.stats()
    assert stats["spilled_epochs"] >= 7 and stats["spill_bytes"] > 0
    # the agent's memory budget lowers the bound (set_budget): the next spill round meets it
    store.set_budget(one)
    assert store.over_budget()
    spill_all(store)
    assert store.resident_bytes <= one
    for epoch in range(10):
        result = store.get(1, epoch)
        assert result is not None
        got = result.snapshot if result.snapshot is not None else store.load(1, epoch)
        assert Counter(got.to_dict()) == expected[epoch]
    # spill files are private: they hold user data
    files = list(Path(store.spill.directory).iterdir())  # type: ignore[union-attr]
    assert files and all(stat.S_IMODE(f.stat().st_mode) == 0o600 for f in files)
    store.close()
    assert not os.path.exists(store.spill.directory)  # type: ignore[union-attr]


def test_late_contribution_to_a_spilled_epoch_is_folded_in_exactly_once(tmp_path: Path) -> None:
    store = ResultStore(budget_bytes=1, spill=ResultSpill(tmp_path, "j"))
    store.put(1, 0, unique_keys(0, 100), 0.0)
    store.put(1, 1, unique_keys(1, 100), 1.0)
    spill_all(store)
    assert store.get(1, 0).snapshot is None  # type: ignore[union-attr]
    late = unique_keys(0, 10)
    assert store.add_late(1, 0, origin=9, snap=late, now=2.0)
    assert not store.add_late(1, 0, origin=9, snap=late, now=2.0)
    got = store.get(1, 0)
    assert got is not None and got.snapshot is not None and got.updated
    want = Counter(unique_keys(0, 100).to_dict()) + Counter(late.to_dict())
    assert Counter(got.snapshot.to_dict()) == want


def test_a_spill_superseded_by_a_late_merge_is_discarded(tmp_path: Path) -> None:
    store = ResultStore(budget_bytes=1, spill=ResultSpill(tmp_path, "j"))
    store.put(1, 0, unique_keys(0, 50), 0.0)
    [(tree, epoch, snap)] = store.spill_candidates()
    size = store.spill_write(tree, epoch, snap)  # written in a thread while...
    store.add_late(1, 0, origin=3, snap=unique_keys(7, 5), now=1.0)  # ...a late merge lands
    store.spilled(tree, epoch, snap, size)
    got = store.get(1, 0)
    assert got is not None and got.snapshot is not None and len(got.snapshot) == 55
    assert store.spill.files == 0  # type: ignore[union-attr]


def test_gone_epochs_are_named_with_their_bound(tmp_path: Path) -> None:
    # the epoch limit (a count)
    store = ResultStore(max_epochs=2)
    for e in range(4):
        store.put(1, e, unique_keys(e, 3), float(e))
    assert store.gone(1, 0) == EPOCH_LIMIT and store.gone(1, 3) is None
    assert store.gone(1, 9) is None  # not yet: a 404, not a 410
    # no spill directory: the memory budget drops the oldest epochs
    one = unique_keys(0, 1000).memory_bytes()
    store = ResultStore(budget_bytes=2 * one)
    for e in range(5):
        store.put(1, e, unique_keys(e, 1000), float(e))
    assert store.resident_bytes <= 2 * one and store.gone(1, 0) == MEMORY_BUDGET
    assert store.dropped[MEMORY_BUDGET] == 3
    store.set_budget(one)  # without a spill directory a lower bound drops at once
    assert store.resident_bytes <= one and store.dropped[MEMORY_BUDGET] == 4
    # spill budget
    store = ResultStore(budget_bytes=1, spill=ResultSpill(tmp_path, "j"), spill_budget_bytes=1)
    for e in range(3):
        store.put(1, e, unique_keys(e, 1000), float(e))
        spill_all(store)
    assert store.gone(1, 0) == SPILL_BUDGET
    assert store.spill.bytes_on_disk <= store.stats()["spill_bytes"]  # type: ignore[union-attr]


def test_iterating_results_never_grows_the_store() -> None:
    store = ResultStore()
    store.put(1, 0, unique_keys(0, 20_000), 0.0)
    before = store.resident_bytes
    tracemalloc.start()
    try:
        for _ in range(3):
            result = store.get(1, 0)
            assert result is not None and result.snapshot is not None
            assert len(list(result.snapshot)) == 20_000  # decodes keys on the copy only
            del result
        current, _peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert store.resident_bytes == before
    assert current < 200_000  # the decoded keys (MBs) were not kept


def test_handover_export_reads_spilled_epochs(tmp_path: Path) -> None:
    store = ResultStore(budget_bytes=1, spill=ResultSpill(tmp_path, "j"))
    for e in range(3):
        store.put(1, e, unique_keys(e, 200), float(e))
    spill_all(store)
    other = ResultStore()
    assert other.absorb(1, store.export(1)) == 3
    for e in range(3):
        assert Counter(other.get(1, e).snapshot.to_dict()) == Counter(  # type: ignore[union-attr]
            unique_keys(e, 200).to_dict()
        )


@settings(max_examples=40, deadline=None)
@given(
    ops=st.lists(
        st.tuples(st.sampled_from(["put", "late", "spill"]), st.integers(0, 6), st.integers(1, 40)),
        max_size=30,
    ),
    budget=st.integers(1, 20_000),
)
def test_budgeted_store_answers_like_an_unbounded_one(
    tmp_path_factory: pytest.TempPathFactory, ops: list[tuple[str, int, int]], budget: int
) -> None:
    """Whatever the order of puts, late merges and spills, every epoch still held answers
    exactly what an unbounded store answers; resident bytes match a recount."""
    bounded = ResultStore(budget_bytes=budget, spill=ResultSpill(tmp_path_factory.mktemp("s"), "j"))
    reference = ResultStore()
    origin = 0
    for op, epoch, n in ops:
        s = unique_keys(epoch * 100 + n, n)
        if op == "put":
            bounded.put(1, epoch, s, float(epoch))
            reference.put(1, epoch, s, float(epoch))
        elif op == "late":
            origin += 1
            bounded.add_late(1, epoch, origin, s, 0.0)
            reference.add_late(1, epoch, origin, s, 0.0)
        else:
            spill_all(bounded)
    spill_all(bounded)
    for epoch in reference.epochs(1):
        want = reference.get(1, epoch)
        got = bounded.get(1, epoch)
        assert want is not None and got is not None
        snap = got.snapshot if got.snapshot is not None else bounded.load(1, epoch)
        assert Counter(snap.to_dict()) == Counter(want.snapshot.to_dict())  # type: ignore[union-attr]
    recount = sum(r.nbytes for t in bounded._trees.values() for r in t.values()) + sum(
        h.snapshot.memory_bytes() for h in bounded._early.values()
    )
    assert bounded.resident_bytes == recount
    assert bounded.resident_bytes <= budget or not bounded.spill_candidates()
    bounded.close()


def test_worker_open_epochs_share_the_jobs_memory_budget(tmp_path: Path) -> None:
    spec = JobSpec.from_dict(
        {"name": "wc", "creator": "me", "job_class": "test-bounds-keys", "epoch_seconds": 1.0,
         "allowed_lateness": 5.0}
    )  # fmt: skip
    budget = 64 * 1024
    worker = Worker(
        Keys(spec),
        memory_budget_bytes=budget,
        spill_dir=str(tmp_path),
        tree_options={"root_capacity": 1024, "buffer_entries": 2048, "leaf_capacity": 2048},
    )
    records = [
        {"ts": 100.0 + (i % 3) * 0.4, "line": f"k{i} u{i * 7919} v{i * 104729}"}
        for i in range(40_000)
    ]
    for start in range(0, len(records), 2000):
        worker.process(records[start : start + 2000])
        assert worker.memory_bytes() <= budget
    assert worker.stats()["budget_enforcements"] > 0
    assert any(tmp_path.iterdir())  # runs went to the spill directory
    worker.clock.advance_to(200.0)
    out = dict(worker.poll())
    total = Counter()
    for s in out.values():
        total.update(s.to_dict())
    want = Counter(w for r in records for w in r["line"].split())
    assert total == want
    worker.close()


def test_closing_the_store_frees_its_memory(tmp_path: Path) -> None:
    """What a stopped job's ``JobRuntime.release`` relies on, measured with tracemalloc."""
    tracemalloc.start()
    try:
        base, _ = tracemalloc.get_traced_memory()
        store = ResultStore(budget_bytes=10**9, spill=ResultSpill(tmp_path, "j"))
        for e in range(6):
            store.put(1, e, unique_keys(e, 20_000), float(e))
        held, _ = tracemalloc.get_traced_memory()
        store.close()
        freed, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert held - base > 6 * 20_000 * 30  # the snapshots were held...
    assert freed - base < (held - base) / 20  # ...and are gone after close
