"""Final means final on a real cluster (docs/fault-tolerance.md, "The guarantee"): four agent
processes tailing files still being written, WordCount on them, and one leaf ending for good.

* kill -9, never restarted, the job's ``retire_after`` short: the epochs after the kill stay
  tentative, naming the dead agent, until ``retire_after`` runs out; then they are partial
  (``state``), naming it, coverage < 1, exact over the live agents' lines; the epochs from
  the retirement on are final and exact; ``/metrics`` counts the retired origin.
* the same with a long ``retire_after`` and the operator's retirement
  (``POST /api/v1/jobs/wc/retire``, what ``elf retire`` sends).
* SIGTERM (a graceful stop): its end is declared (``membership.left``); the epochs before
  it are exact including its lines, the later ones final and exact without it.

Every answer of the results API for the epochs around the fault is recorded while it runs
(:class:`Seen`): a version shown final while it lacked the dead agent would fail the test even
if a later version corrected it.
"""

from __future__ import annotations

import json
import math
import time
import urllib.request
from pathlib import Path
from typing import Any

from agent.server.chaos import (
    EXACT,
    PARTIAL,
    ChaosCluster,
    JobPlan,
    JobReport,
    LogWriter,
    check,
    fetch_result,
    tracebacks,
    wait_until,
)

AGENTS = 4
JOB = "wc"


class Seen:
    """Every distinct answer (state, lacking, version) of each epoch from ``first`` on, with
    the wall time it was first seen."""

    def __init__(self, chaos: ChaosCluster, first: int) -> None:
        self.chaos = chaos
        self.first = first
        self.answers: dict[int, list[tuple[float, dict[str, Any]]]] = {}

    def poll(self) -> None:
        newest = self.chaos.stored(JOB)
        for epoch in range(self.first, (newest if newest is not None else self.first - 1) + 1):
            res = fetch_result(self.chaos, JOB, epoch)
            if not isinstance(res, dict):
                continue
            got = self.answers.setdefault(epoch, [])
            key = (res["state"], tuple(res["lacking"]), res["version"])
            if (
                not got
                or (got[-1][1]["state"], tuple(got[-1][1]["lacking"]), got[-1][1]["version"]) != key
            ):
                got.append((time.time(), res))

    def states(self, epoch: int) -> list[str]:
        return [r["state"] for _, r in self.answers.get(epoch, [])]


def masters_membership(chaos: ChaosCluster) -> dict[str, list[dict[str, Any]]]:
    """The job's ``membership`` as its masters report it (other agents report none)."""
    out: dict[str, list[dict[str, Any]]] = {"absent": [], "retired": [], "left": []}
    for i in chaos.live():
        st = chaos.client(i).status()["jobs"].get(JOB) or {}
        for kind, entries in (st.get("membership") or {}).items():
            out[kind] += entries
    return out


def retired_entry(chaos: ChaosCluster, origin: str) -> dict[str, Any] | None:
    return next((r for r in masters_membership(chaos)["retired"] if r["origin"] == origin), None)


def metrics(chaos: ChaosCluster, index: int) -> str:
    proc = chaos.cluster.procs[index]
    req = urllib.request.Request(
        proc.api_url + "/metrics", headers={"Authorization": f"Bearer {chaos.cluster.token}"}
    )
    with urllib.request.urlopen(req, timeout=10) as r:
        return r.read().decode()


def a_leaf_to_end(chaos: ChaosCluster) -> int:
    """A leaf that is not the master's standby (ending both would cost the job its state)."""
    master = chaos.pick(JOB, "master")
    st = chaos.client(master).status()["jobs"][JOB]
    standbys = {
        format(int(s, 16), "x")
        for s in ((st.get("replication") or {}).get("standbys") or {}).values()
    }
    ids = chaos.node_ids()
    return next(
        i for i, r in sorted(chaos.roles(JOB).items()) if r == "leaf" and ids[i] not in standbys
    )


def newest_final(chaos: ChaosCluster, plan: JobPlan) -> int:
    """The newest epoch the results API answers ``final`` (asked just before a fault: the
    epochs after it may still wait for the agent about to end, which is then flagged)."""
    newest = chaos.stored(JOB)
    finals = [
        e
        for e in range(plan.start_epoch, (newest if newest is not None else 0) + 1)
        if isinstance(res := fetch_result(chaos, JOB, e), dict) and res["state"] == "final"
    ]
    assert finals, "no final epoch before the fault"
    return max(finals)


def start(tmp_path: Path, retire_after: float) -> tuple[ChaosCluster, LogWriter, JobPlan]:
    chaos = ChaosCluster(AGENTS, tmp_path).start()
    writer = LogWriter(chaos.paths, rate=10).start()
    first = math.floor(time.time()) + 2
    plan = JobPlan(JOB, "wordcount", first, settings=(("retire_after", retire_after),))
    assert chaos.submit(plan)["agents_reached"] == AGENTS
    chaos.wait_stored(JOB, first + 2)
    wait_until(lambda: newest_final(chaos, plan) >= first + 1, 30, "a final epoch")
    return chaos, writer, plan


def assert_retired_for_good(
    chaos: ChaosCluster,
    reports: list[JobReport],
    seen: Seen,
    dead: str,
    killed_epoch: int,
    final_at_kill: int,
    retired: dict[str, Any],
) -> None:
    """The promise around a retirement (module contract), from what was seen on the way and
    where the epochs ended."""
    (report,) = reports
    print(json.dumps(report.to_dict(), indent=1)[:4000])
    assert not report.violations(), report.to_dict()["violations"]
    from_epoch = retired["from_epoch"]
    by_epoch = {e.epoch: e for e in report.epochs}
    for epoch, answers in sorted(seen.answers.items()):
        for at, res in answers:
            # never final without the dead agent before its retirement takes effect
            if killed_epoch < epoch < from_epoch:
                assert res["state"] != "final", (epoch, at, res["state"], res["lacking"])
                if at < retired["at"]:
                    assert res["state"] == "tentative" and dead in res["lacking"], (epoch, res)
    # seen tentative, naming it, before the retirement
    named = [
        e
        for e, answers in seen.answers.items()
        if any(at < retired["at"] and dead in r["lacking"] for at, r in answers)
    ]
    assert named, {e: seen.states(e) for e in seen.answers}
    # where they ended: partial (naming it, coverage < 1, exact over the live agents) until
    # the retirement, final and exact from it on
    for epoch in range(killed_epoch + 1, from_epoch):
        e = by_epoch[epoch]
        assert e.verdict == PARTIAL and e.lacking == [dead], vars(e)
        assert e.coverage is not None and e.coverage < 1.0, vars(e)
        assert fetch_result(chaos, JOB, epoch)["state"] == "partial"  # type: ignore[index]
        # the lake names it too, coverage < 1 (it has no state column: a partial file says
        # tentative=false with a non-empty lacking, so the harness counts it "wrong" there)
        lake = {x.epoch: x for x in report.lake or ()}
        assert lake[epoch].lacking == [dead] and (lake[epoch].coverage or 1.0) < 1.0, vars(
            lake[epoch]
        )
    later = [e for e in report.epochs if e.epoch >= from_epoch]
    assert later and all(e.verdict == EXACT for e in later), [vars(e) for e in later]
    # final before the kill: exact. Between that and the kill the dead agent's share may not
    # have reached the master yet (a loaded machine lags seconds): exact, or flagged naming it
    earlier = [e for e in report.epochs if e.epoch <= final_at_kill]
    assert earlier and all(e.verdict == EXACT for e in earlier), [vars(e) for e in earlier]
    around = [e for e in report.epochs if final_at_kill < e.epoch <= killed_epoch]
    assert all(
        e.verdict == EXACT or (e.verdict == PARTIAL and e.lacking == [dead]) for e in around
    ), [vars(e) for e in around]
    assert not tracebacks(chaos), tracebacks(chaos)


def test_retire_after_retires_a_dead_leaf_and_the_epochs_it_missed_are_partial(
    tmp_path: Path,
) -> None:
    retire_after = 4.0
    chaos, writer, plan = start(tmp_path, retire_after)
    try:
        leaf = a_leaf_to_end(chaos)
        dead = chaos.node_ids()[leaf]
        final_at_kill = newest_final(chaos, plan)
        ev = chaos.lose(leaf, writer, JOB, "leaf")  # kill -9; its host's log stops too
        killed_epoch = plan.epoch_of(ev.at)
        seen = Seen(chaos, killed_epoch - 2)
        retired = wait_until(
            lambda: seen.poll() or retired_entry(chaos, dead), 60, "retire_after to retire it"
        )
        assert "retire_after" in retired["why"], retired
        assert retired["at"] - ev.at >= retire_after - 3.0, (retired, ev.at)  # not before
        wait_until(
            lambda: seen.poll() or (chaos.stored(JOB) or 0) >= retired["from_epoch"] + 3,
            60,
            "epochs after the retirement",
        )
        master = chaos.pick(JOB, "master")
        assert f'elf_origins_retired{{job="{JOB}"}} 1.0' in metrics(chaos, master)
    finally:
        writer.stop()
    try:
        reports = check(chaos, [plan], settle_timeout=20)
        assert_retired_for_good(chaos, reports, seen, dead, killed_epoch, final_at_kill, retired)
    finally:
        chaos.stop()


def test_an_operator_retires_a_dead_leaf(tmp_path: Path) -> None:
    chaos, writer, plan = start(tmp_path, 3600.0)
    try:
        leaf = a_leaf_to_end(chaos)
        dead = chaos.node_ids()[leaf]
        final_at_kill = newest_final(chaos, plan)
        ev = chaos.lose(leaf, writer, JOB, "leaf")
        killed_epoch = plan.epoch_of(ev.at)
        seen = Seen(chaos, killed_epoch - 2)
        # absent, not gone: epochs keep coming, tentative, naming it. Counted once the
        # barrier has given up waiting for it (not a deadline's preview: a retirement turns
        # a stored epoch partial; a preview still waits on its barrier and turns partial when
        # that resolves, as the epochs after it do)
        wait_until(
            lambda: (
                seen.poll()
                or sum(
                    dead in r["lacking"] and not r.get("preview")
                    for a in seen.answers.values()
                    for _, r in a[-1:]
                )
                >= 3
            ),
            60,
            "three epochs lacking it",
        )
        assert retired_entry(chaos, dead) is None
        # asked of an agent that is not the master (it forwards to each master)
        other = next(i for i, r in chaos.roles(JOB).items() if r != "master")
        reply = chaos.client(other).retire_origin(JOB, dead, "host decommissioned")
        assert reply["complete"] and reply["masters"][0]["partial_epochs"] >= 3, reply
        retired = retired_entry(chaos, dead)
        assert retired is not None and retired["why"] == "host decommissioned"
        wait_until(
            lambda: seen.poll() or (chaos.stored(JOB) or 0) >= retired["from_epoch"] + 3,
            60,
            "epochs after the retirement",
        )
        master = chaos.pick(JOB, "master")
        assert f'elf_origins_retired{{job="{JOB}"}} 1.0' in metrics(chaos, master)
    finally:
        writer.stop()
    try:
        reports = check(chaos, [plan], settle_timeout=20)
        assert_retired_for_good(chaos, reports, seen, dead, killed_epoch, final_at_kill, retired)
    finally:
        chaos.stop()


def test_a_leaf_stopped_by_sigterm_leaves_and_later_epochs_are_final_without_it(
    tmp_path: Path,
) -> None:
    chaos, writer, plan = start(tmp_path, 3600.0)
    try:
        leaf = a_leaf_to_end(chaos)
        gone = chaos.node_ids()[leaf]
        ev = chaos.terminate(leaf, writer, JOB, "leaf")
        assert ev.detail["exit"] == 0
        left = wait_until(
            lambda: next(
                (x for x in masters_membership(chaos)["left"] if x["origin"] == gone), None
            ),
            30,
            "the master to record its leave",
        )
        assert gone not in {x["origin"] for x in masters_membership(chaos)["absent"]}
        # its declared end: the newest epoch it closed; the lines it had read of the epochs
        # still open are after it, so those epochs are final without them (the guarantee)
        chaos.left[leaf] = left["from_epoch"]
        chaos.wait_stored(JOB, left["from_epoch"] + 3)
    finally:
        writer.stop()
    try:
        reports = check(chaos, [plan], settle_timeout=20)
    finally:
        chaos.stop()
    (report,) = reports
    print(json.dumps(report.to_dict(), indent=1)[:4000])
    # every epoch exact: before its declared end including its lines, after it over the
    # others' lines
    assert all(e.verdict == EXACT for e in report.epochs), (
        f"stopped in epoch {plan.epoch_of(ev.at)}, left from epoch {left['from_epoch']}",
        [vars(e) for e in report.epochs if e.verdict != EXACT],
    )
    assert any(e.epoch >= left["from_epoch"] for e in report.epochs)
    assert not tracebacks(chaos), tracebacks(chaos)
