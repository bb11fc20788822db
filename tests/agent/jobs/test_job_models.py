"""The three execution models end to end in one process: several workers (agents) with their
own record streams, per-epoch snapshots merged like the reducer tree's barrier, the master's
hooks, and multicast back to every worker. Results are compared with Counters over all
agents' records."""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

from agent.jobs.job import Job, create_job, parse_spec, register_job
from agent.runtime.epochs.worker import Worker
from cbt import Snapshot


@register_job("test-models")
class Clicks(Job):
    """Counts products; iterative runs skip the products the master fed back (already
    promoted), so each epoch's result is the next tier of popularity."""

    timer_interval = None

    def setup(self) -> None:
        self.results: dict[int, Snapshot] = {}
        self.feedbacks: list[Any] = []

    def map(self, record: dict[str, Any]) -> list[tuple[str, int]]:
        if self.feedback and record["product"] in self.feedback:
            return []
        return [(record["product"], 1)]

    def on_epoch_result(self, epoch: int, snapshot: Snapshot) -> None:
        self.results[epoch] = snapshot

    def feedback_for(self, epoch: int, snapshot: Snapshot) -> Any:
        top = [key for key, _ in snapshot.top(2)]
        return sorted(set(self.feedback or []) | set(top))

    def on_multicast(self, message: dict[str, Any]) -> None:
        self.feedbacks.append(message)


class LocalJob:
    """Workers + a master in one process: merges every worker's epoch snapshot (the
    barrier), hands the result to the master job, multicasts control to every worker."""

    def __init__(self, spec: dict[str, Any], agents: int) -> None:
        self.spec = parse_spec({"name": "m", "creator": "t", "job_class": "test-models", **spec})
        self.master = create_job(self.spec)
        self.workers = [
            Worker(create_job(self.spec), wall_clock=lambda: 0.0) for _ in range(agents)
        ]
        self.pending: dict[int, list[Snapshot]] = {}

    def feed(self, agent: int, records: list[dict[str, Any]]) -> None:
        self.workers[agent].process(records)

    def step(self, *, finish: bool = False) -> None:
        for worker in self.workers:
            for epoch, snap in worker.finish() if finish else worker.poll():
                self.pending.setdefault(epoch, []).append(snap)
        for epoch in sorted(self.pending):
            snaps = self.pending[epoch]
            if len(snaps) < len(self.workers):
                break  # the barrier: wait for every agent's snapshot of this epoch
            del self.pending[epoch]
            result = snaps[0]
            for s in snaps[1:]:
                result = result.merge(s)
            self.master.on_epoch_result(epoch, result)
            if self.spec.mode == "iterative":
                value = self.master.feedback_for(epoch, result)
                self.master.feedback = value
                self.multicast({"kind": "feedback", "epoch": epoch, "value": value})
            elif self.spec.mode == "batch":
                self.multicast({"kind": "empty", "epoch": epoch})

    def multicast(self, message: dict[str, Any]) -> None:
        for worker in self.workers:
            worker.on_multicast(message)


def streams(agents: int, epochs: int, seed: int) -> list[list[dict[str, Any]]]:
    rng = random.Random(seed)
    products = [f"p{i}" for i in range(12)]
    weights = [1 / (i + 1) for i in range(12)]
    out: list[list[dict[str, Any]]] = [[] for _ in range(agents)]
    for agent in range(agents):
        for epoch in range(epochs):
            for _ in range(rng.randint(0, 60)):
                ts = epoch + rng.random()
                out[agent].append({"ts": ts, "product": rng.choices(products, weights)[0]})
        out[agent].sort(key=lambda r: r["ts"])
    return out


def expected(recs: list[list[dict[str, Any]]], lo: int, hi: int) -> Counter:
    return Counter(r["product"] for s in recs for r in s if lo <= int(r["ts"]) <= hi)


def run(job: LocalJob, recs: list[list[dict[str, Any]]], epochs: int) -> None:
    """Feed each agent one epoch at a time, all agents in lockstep, stepping as we go."""
    for epoch in range(epochs):
        for agent, stream in enumerate(recs):
            job.feed(agent, [r for r in stream if int(r["ts"]) == epoch])
        job.step()
    job.step(finish=True)


def test_synchronous_batches() -> None:
    recs = streams(agents=5, epochs=12, seed=1)
    job = LocalJob({"mode": "batch", "start_epoch": 0}, agents=5)
    run(job, recs, 12)
    assert sorted(job.master.results) == list(range(12))
    for epoch, snap in job.master.results.items():
        assert Counter(snap.to_dict()) == expected(recs, epoch, epoch)
    # the master multicast "empty" after every epoch and every worker saw it
    for worker in job.workers:
        kinds = [(m["kind"], m["epoch"]) for m in worker.job.feedbacks]
        assert kinds == [("empty", e) for e in range(12)]


def test_asynchronous_sliding_windows() -> None:
    recs = streams(agents=4, epochs=15, seed=2)
    job = LocalJob({"mode": "window", "window_size": 5, "window_slide": 2, "start_epoch": 0}, 4)
    run(job, recs, 15)
    assert sorted(job.master.results) == list(range(15))
    for epoch, snap in job.master.results.items():
        if (epoch + 1) % 2:
            assert len(snap) == 0
        else:
            assert Counter(snap.to_dict()) == expected(recs, epoch - 4, epoch)
    assert all(not w.job.feedbacks for w in job.workers)  # no "empty": windows flush only


def test_iterative_feedback_reaches_every_worker_and_changes_the_next_epoch() -> None:
    recs = streams(agents=3, epochs=6, seed=3)
    job = LocalJob({"mode": "iterative", "start_epoch": 0}, agents=3)
    excluded: set[str] = set()
    # lockstep: each epoch is fed only after the previous one's feedback arrived
    for epoch in range(6):
        for agent, stream in enumerate(recs):
            job.feed(agent, [r for r in stream if int(r["ts"]) == epoch])
        for worker in job.workers:
            worker.clock.advance_to(epoch + 1)
        job.step()
        want = Counter({k: v for k, v in expected(recs, epoch, epoch).items() if k not in excluded})
        assert Counter(job.master.results[epoch].to_dict()) == want
        excluded |= {k for k, _ in job.master.results[epoch].top(2)}
        assert all(w.job.feedback == sorted(excluded) for w in job.workers)
    assert len(excluded) > 2
