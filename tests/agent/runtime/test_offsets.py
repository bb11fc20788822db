"""Durable file offsets: the commit rule against fake job runtimes (positions commit only once
every job reading the input acknowledged the epochs of the records before them), the atomic
state file, the job resume rule, and an in-process cluster whose file-reading agent is stopped
and restarted: the master's results equal a Counter over every line, exactly."""

from __future__ import annotations

import json
import math
import time
from collections import Counter
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import orjson
from agent_helpers import running_agents, wait_for

from agent.ingest.tail import FileTail
from agent.jobs.spec import JobSpec
from agent.runtime.epochs.clock import EpochClock
from agent.runtime.host.agent import Agent
from agent.runtime.recovery.offsets import (
    OffsetKeeper,
    TreeOutflow,
    acknowledged_epoch,
    write_atomically,
)

# ---- the commit rule, with fakes ------------------------------------------------------------


class FakeSender:
    def __init__(self) -> None:
        self.queued: list[int] = []

    def pending(self) -> dict[str, Any]:
        return {"queued": sorted(self.queued)}


class FakeRuntime:
    """What OffsetKeeper reads of a JobRuntime (offsets.JobProgress): the worker's clock and,
    per tree, the barrier's next epoch, the upstream queue and whether this agent is root."""

    def __init__(self, name: str, inputs: list[str], start_epoch: int) -> None:
        self.name = name
        self.inputs = inputs
        self.spec = JobSpec.from_dict(
            {"name": name, "creator": "t", "job_class": "wordcount", "start_epoch": start_epoch}
        )
        self.clock = EpochClock(1.0, start_epoch=start_epoch)
        self.tree_list = [1, 2]
        self.combiners = {tid: SimpleNamespace(next_epoch=start_epoch) for tid in (1, 2)}
        self.senders = {1: FakeSender(), 2: FakeSender()}
        self.is_root = False
        # the master's commit watermark (end-to-end); far ahead unless a test holds it back
        self.committed: int | None = 2**62

    def outflow(self) -> list[TreeOutflow] | None:
        if any(tid not in self.combiners for tid in self.tree_list):
            return None
        return [
            TreeOutflow(
                self.combiners[tid].next_epoch,
                (self.senders[tid].pending()["queued"] or [None])[0],
                self.is_root,
                self.committed,
            )
            for tid in self.tree_list
        ]


def fake_runtime(name: str, inputs: list[str], start_epoch: int = 100) -> Any:
    return FakeRuntime(name, inputs, start_epoch)


def emit(rt: Any, epoch: int, *, acked: bool) -> None:
    """Both trees emitted ``epoch``; the parents acknowledged it or not."""
    for tid in rt.tree_list:
        rt.combiners[tid].next_epoch = epoch + 1
        if not acked:
            rt.senders[tid].queued.append(epoch)


def ack(rt: Any, epoch: int) -> None:
    for s in rt.senders.values():
        s.queued = [e for e in s.queued if e != epoch]


def test_positions_commit_only_after_every_reader_acknowledged(tmp_path: Path) -> None:
    log = tmp_path / "in.jsonl"
    log.write_text("".join(json.dumps({"ts": 100.5, "i": i}) + "\n" for i in range(3)))
    tail = FileTail(log)
    keeper = OffsetKeeper(tmp_path / "data", flush_interval=0)
    a, b = fake_runtime("a", ["in"]), fake_runtime("b", ["in"])
    inputs = {"in": tail}

    tail.poll()
    a.clock.assign(100.5)  # both jobs hold records of epoch 100
    b.clock.assign(100.5)
    keeper.observe(inputs, {"in"}, [a, b])
    assert keeper.resume_state("in") is None  # nothing acknowledged yet
    emit(a, 100, acked=True)
    emit(b, 100, acked=False)
    keeper.observe(inputs, set(), [a, b])
    assert keeper.resume_state("in") is None  # b's parent has not acknowledged epoch 100
    assert acknowledged_epoch(a) == 100 and acknowledged_epoch(b) == 99
    ack(b, 100)
    keeper.observe(inputs, set(), [a, b])
    assert keeper.resume_state("in") == tail.state()

    with open(log, "a") as f:  # records of epoch 101: position waits for epoch 101
        f.write(json.dumps({"ts": 101.2}) + "\n")
    tail.poll()
    a.clock.assign(101.2)
    keeper.observe(inputs, {"in"}, [a, b])  # b got no records: its high epoch stays 100
    committed = keeper.resume_state("in")
    assert committed is not None and committed["offset"] < tail.state()["offset"]
    emit(a, 101, acked=True)
    keeper.observe(inputs, set(), [a, b])
    assert keeper.resume_state("in") == tail.state()

    doc = orjson.loads((tmp_path / "data" / "offsets.json").read_bytes())
    assert doc["inputs"]["in"] == tail.state()
    assert doc["jobs"]["a"] == {"creator": "t", "start_epoch": 100, "acked": 101}
    assert doc["jobs"]["b"]["acked"] == 100


def test_master_role_counts_stored_epochs_as_acknowledged() -> None:
    rt = fake_runtime("m", ["in"])
    rt.is_root = True
    emit(rt, 100, acked=False)  # queued upstream but we are root: stored in our results
    assert acknowledged_epoch(rt) == 100
    rt.combiners.pop(2)
    assert acknowledged_epoch(rt) is None


def test_state_survives_a_new_keeper_and_resumes_only_the_same_job(tmp_path: Path) -> None:
    keeper = OffsetKeeper(tmp_path, flush_interval=0)
    rt = fake_runtime("wc", [])
    emit(rt, 104, acked=True)
    keeper.observe({}, set(), [rt])
    again = OffsetKeeper(tmp_path)
    spec = rt.spec
    assert again.resume_spec(spec).start_epoch == 105
    assert again.resume_spec(spec.with_changes(start_epoch=200)).start_epoch == 200  # resubmitted
    other = JobSpec.from_dict({**spec.to_dict(), "creator": "someone-else"})
    assert again.resume_spec(other).start_epoch == 100
    assert OffsetKeeper(None).resume_spec(spec) is spec


def test_corrupt_state_file_starts_afresh_and_writes_are_atomic(tmp_path: Path) -> None:
    (tmp_path / "offsets.json").write_text("{not json")
    keeper = OffsetKeeper(tmp_path)
    assert keeper.resume_state("x") is None and keeper.counters["load_errors"] == 1
    write_atomically(tmp_path / "f.json", b"one")
    write_atomically(tmp_path / "f.json", b"two")
    assert (tmp_path / "f.json").read_bytes() == b"two"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.json", "offsets.json"]


# ---- an agent restarted on the same data directory ------------------------------------------


def words(texts: list[str]) -> Counter:
    c: Counter = Counter()
    for t in texts:
        c.update(t.split())
    return c


def append(path: Path, ts: float, texts: list[str]) -> None:
    with open(path, "a") as f:
        f.write("".join(json.dumps({"ts": ts, "line": t}) + "\n" for t in texts))


async def union_of_results(agent: Agent, job: str, first: int, last: int) -> Counter:
    total: Counter = Counter()
    for epoch in range(first, last + 1):
        try:
            res = await agent.results(job, epoch)
        except Exception:
            continue
        total.update({k: v for k, v in res["rows"]})
    return total


async def test_restarted_agent_resumes_with_no_loss_and_no_duplicates(tmp_path: Path) -> None:
    log = tmp_path / "events.jsonl"
    log.touch()
    data = tmp_path / "data"
    async with running_agents(4, data_dir=str(data), inputs=(f"f={log}",)) as agents:
        e = math.floor(time.time()) + 1
        spec = {"name": "wcr", "creator": "t", "job_class": "wordcount", "start_epoch": e,
                "allowed_lateness": 2.0, "inputs": ["f"]}  # fmt: skip
        await agents[0].submit(spec)
        await wait_for(lambda: all("wcr" in a.runtimes for a in agents), 10, "the job")
        early = [f"alpha w{i} common" for i in range(40)]
        later = [f"beta v{i} common" for i in range(40)]
        append(log, e + 0.2, early)  # epoch e: closes as soon as epoch e+3 records arrive
        await wait_for(
            lambda: all(a.inputs["f"].stats()["records"] == 40 for a in agents), 10, "a poll"
        )
        append(log, e + 3.5, later)  # epoch e+3: still open when the victim stops
        want_e = Counter({k: 4 * v for k, v in words(early).items()})

        async def epoch_e_done() -> bool:
            got = await union_of_results(agents[0], "wcr", e, e)
            return got == want_e

        await wait_for(epoch_e_done, 30, "epoch e at the master")
        # four agents: besides agent 0 (asked for results) at most two hold the job's master
        # role or the jobs-tree root, so one of the others can be stopped
        victim_index = next(
            i
            for i, a in enumerate(agents)
            if i > 0 and "master" not in a.runtimes["wcr"].roles()
            and not (a.jobs_tree() or {}).get("is_root")
        )  # fmt: skip
        victim = agents[victim_index]
        vrt = victim.runtimes["wcr"]
        await wait_for(  # end to end: the master committed epoch e, and the victim heard it
            lambda: all(vrt.recovery.committed.get(t, -1) >= e for t in vrt.tree_list),
            15,
            "commit of e",
        )
        await victim.stop()
        state = orjson.loads((Path(victim.config.data_dir) / "offsets.json").read_bytes())
        assert state["jobs"]["wcr"]["acked"] >= e  # epoch e was committed before the stop
        assert 0 < state["inputs"]["f"]["offset"] < log.stat().st_size  # e+3 not yet

        # ahead of every live agent's watermark (max(e+3.5, now) - lateness)
        ts2 = max(e + 3.7, math.floor(time.time()) + 1.5)
        more = [f"gamma u{i} common" for i in range(40)]
        append(log, ts2, more)
        restarted = Agent(victim.config)
        await restarted.start()
        agents[victim_index] = restarted  # running_agents stops it at the end
        await wait_for(lambda: "wcr" in restarted.runtimes, 15, "the job on the restarted agent")

        want = Counter({k: 4 * v for k, v in words(early + later + more).items()})
        last = math.floor(ts2)

        async def all_done() -> bool:
            return await union_of_results(agents[0], "wcr", e, last) == want

        try:
            await wait_for(all_done, 45, "every line counted once per agent")
        except AssertionError:  # show the difference
            got = await union_of_results(agents[0], "wcr", e, last)
            assert got - want == Counter() and want - got == Counter()
            raise
        # the restarted tail resumed at the committed offset: it read only what followed
        stats = restarted.inputs["f"].stats()
        assert stats["records"] == len(later) + len(more)
        assert restarted.runtimes["wcr"].spec.start_epoch > e


def test_acknowledged_epochs_wait_for_the_masters_commit() -> None:
    """A parent's acknowledgement is not enough (it can die after acknowledging): an epoch
    counts as passed on only once the master committed it."""
    rt = fake_runtime("wc", ["in"])
    emit(rt, 105, acked=True)
    rt.committed = None
    assert acknowledged_epoch(rt) is None  # no commit heard yet: everything stays re-readable
    rt.committed = 102
    assert acknowledged_epoch(rt) == 102
    rt.committed = 110  # a watermark ahead of what this agent emitted
    assert acknowledged_epoch(rt) == 105


def test_positions_noted_before_a_job_joined_wait_for_its_acknowledgement(tmp_path: Path) -> None:
    """The chaos harness's sliding-window finding: a job submitted while another reads the same
    file re-reads (replays) the records read before it joined, but the positions noted then
    carried no high epoch for it; they committed on the first job's acknowledgement alone, so
    a restart resumed the file past records of epochs the late job had not acknowledged (a
    window job's acknowledgement trails by ``window_size - 1`` epochs) and they were lost."""
    log = tmp_path / "in.jsonl"
    log.write_text("".join(json.dumps({"ts": 100.5 + e}) + "\n" for e in range(3)))
    tail = FileTail(log)
    keeper = OffsetKeeper(tmp_path / "data", flush_interval=0)
    wc = fake_runtime("wc", ["in"])
    inputs = {"in": tail}
    tail.poll()
    for e in range(3):
        wc.clock.assign(100.5 + e)  # wc read epochs 100..102
    keeper.observe(inputs, {"in"}, [wc])
    end_of_102 = tail.state()

    win = fake_runtime("win", ["in"])  # joins now; replays epochs 100..102 from byte 0
    for e in range(3):
        win.clock.assign(100.5 + e)
    with open(log, "a") as f:
        f.write(json.dumps({"ts": 103.5}) + "\n")
    tail.poll()
    wc.clock.assign(103.5)
    win.clock.assign(103.5)
    emit(wc, 103, acked=True)
    emit(win, 100, acked=True)  # win acknowledged only epoch 100 so far
    keeper.observe(inputs, {"in"}, [wc, win])
    assert keeper.resume_state("in") is None  # records of 101, 102 are not win's yet

    emit(win, 102, acked=True)
    keeper.observe(inputs, set(), [wc, win])
    assert keeper.resume_state("in") == end_of_102
    emit(win, 103, acked=True)
    keeper.observe(inputs, set(), [wc, win])
    assert keeper.resume_state("in") == tail.state()

    # a job that starts after everything the position's records held needs none of them
    late = fake_runtime("late", ["in"], start_epoch=200)
    with open(log, "a") as f:
        f.write(json.dumps({"ts": 104.5}) + "\n")
    tail.poll()
    for rt in (wc, win):
        rt.clock.assign(104.5)
        emit(rt, 104, acked=True)
    keeper.observe(inputs, {"in"}, [wc, win, late])
    assert keeper.resume_state("in") == tail.state()


def test_a_position_committed_before_a_job_joined_goes_back_until_it_acknowledged(
    tmp_path: Path,
) -> None:
    """wc committed the file up to epoch 102 before win (start 100) joined and re-read it from
    the start (``replay_from``): a restart then must re-read those records for win, so the
    committed position goes back to where win re-read from until win acknowledged them."""
    log = tmp_path / "in.jsonl"
    log.write_text("".join(json.dumps({"ts": 100.5 + e}) + "\n" for e in range(3)))
    tail = FileTail(log)
    keeper = OffsetKeeper(tmp_path / "data", flush_interval=0)
    wc = fake_runtime("wc", ["in"])
    inputs = {"in": tail}
    tail.poll()
    for e in range(3):
        wc.clock.assign(100.5 + e)
    emit(wc, 102, acked=True)
    keeper.observe(inputs, {"in"}, [wc])
    end_of_102 = tail.state()
    assert keeper.resume_state("in") == end_of_102  # win does not exist yet

    start = keeper.replay_from("in", 100)  # win joins: re-reads from the tail's origin
    assert start is not None and start["offset"] == 0
    win = fake_runtime("win", ["in"])
    for e in range(3):
        win.clock.assign(100.5 + e)
    emit(win, 100, acked=True)
    keeper.observe(inputs, set(), [wc, win])
    assert keeper.resume_state("in") == start  # a restart now re-reads epochs 101, 102
    doc = orjson.loads((tmp_path / "data" / "offsets.json").read_bytes())
    assert doc["inputs"]["in"]["offset"] == 0

    emit(win, 102, acked=True)
    keeper.observe(inputs, set(), [wc, win])
    assert keeper.resume_state("in") == end_of_102
