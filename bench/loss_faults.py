"""The permanent-loss and straggler part of ``bench/fault_bench.py`` (issue 14).

* :func:`loss_run` - a fresh cluster whose agents share failure domains two by two
  (``--domain rack-i``); WordCount (``wc``), the QL job (``ql``) and a top-5 WordCount
  (``top``). In sequence: a leaf killed -9 **for good** (never restarted, its file stops
  growing), an inner node for good (when the tree has one), both agents of one domain for
  good, a leaf SIGSTOPped for three epochs then SIGCONTed (a straggler), a leaf CPU-capped
  (SIGSTOP/SIGCONT duty cycle) for ``slow_seconds``. A :class:`ResultWatcher` per job polls the
  results API through the stall and the slow agent. Afterwards every epoch is classified
  (``exact``, ``partial`` - flagged, lacking only agents lost for good, exact over what it
  covers - ``wrong``, ``misdeclared``...).
* :func:`checkpoint_cost_runs` - steady state with ``checkpoint_replicas`` 0 and 2,
  interleaved: CPU of all agents, data-plane bytes received, checkpoint bytes sent, roll-up
  p50/p99.

The loss run also runs the every-version reader (:mod:`agent.server.version_watch`) from the
submits on: ``final_means_final`` and ``every_version`` (see ``bench/fault_bench.py``).

Figures per lost agent: kill → the master declares it absent (``declared_s``) → its
checkpointed epochs re-issued (``reissued_s``, how many) → the jobs' ``retire_after``
(:data:`RETIRE_AFTER`, 5 s here) retires it (``retired_s``; the epochs it missed are partial
from then on) → the first epoch after the retirement stored final (``first_final_stored_s``
after the kill, and ``first_final_late_s``: how long after its own close - end plus allowed
lateness - it was stored).
"""

from __future__ import annotations

import math
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from latency import summary
from steady_window import measure_window, steady_cluster

from agent.client import ApiError
from agent.server.chaos import (
    EXACT,
    PARTIAL,
    ChaosCluster,
    JobPlan,
    LogWriter,
    check,
    tracebacks,
    wait_until,
)
from agent.server.chaos_watch import ResultWatcher
from agent.server.version_check import headline
from agent.server.version_watch import VersionWatch, chaos_figures, chaos_watch

LEAD = "wc"
#: seconds an absent agent stays expected before the master retires it (the jobs' setting:
#: short here, so the run sees the retirement; the product's default is 900)
RETIRE_AFTER = 5.0


def _retired(chaos: ChaosCluster, job: str) -> dict[str, dict[str, Any]]:
    """Origin → its retirement, as the job's masters report it."""
    out: dict[str, dict[str, Any]] = {}
    for i in chaos.live():
        try:
            membership = chaos.client(i).status()["jobs"][job].get("membership") or {}
        except (ApiError, KeyError):
            continue
        for r in membership.get("retired") or []:
            out.setdefault(r["origin"], r)
    return out


def _losses(chaos: ChaosCluster, job: str) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for i in chaos.live():
        try:
            for e in chaos.client(i).status()["jobs"][job].get("losses") or []:
                out.setdefault(e["origin"], e)
        except (ApiError, KeyError):
            continue
    return out


def _stored_at(chaos: ChaosCluster, job: str) -> dict[int, float]:
    """epoch → when a live master of the job's first tree stored it (its own clock)."""
    tid = chaos.any_client().status()["jobs"][job]["tree_ids"][0]
    out: dict[int, float] = {}
    for t in chaos.timings(job):
        for t_, e, at in t["completed_at"]:
            if t_ == tid:
                out[e] = min(out.get(e, at), at)
    return out


def lose(
    chaos: ChaosCluster,
    writer: LogWriter,
    plan: JobPlan,
    indices: list[int],
    roles: list[str],
    timeout: float,
) -> dict[str, Any]:
    """Kill ``indices`` for good; time the absence declarations, re-issues, the retirements
    (``retire_after``) and the first final epoch after."""
    ids = chaos.node_ids()
    events = [chaos.lose(i, writer, LEAD, r) for i, r in zip(indices, roles, strict=True)]
    killed = events[0].at
    wanted = {ids[i] for i in indices}
    out: dict[str, Any] = {"agents": indices, "roles": roles}
    try:
        found = wait_until(
            lambda: (ls := _losses(chaos, LEAD)).keys() >= wanted and ls,
            timeout,
            "the losses to be declared",
        )
    except TimeoutError:
        out["declared_s"] = None
        return out
    mine = [found[o] for o in wanted]
    out["why"] = sorted({e["why"] for e in mine})
    out["declared_s"] = round(max(e["declared_at"] for e in mine) - killed, 3)
    out["reissued_epochs"] = sum(e.get("reissued") or 0 for e in mine)
    out["reissued_s"] = round(max(e["reissued_at"] for e in mine) - killed, 3)
    try:
        gone = wait_until(
            lambda: (rs := _retired(chaos, LEAD)).keys() >= wanted and rs,
            timeout,
            "retire_after to retire them",
        )
    except TimeoutError:
        out["retired_s"] = None
        return out
    out["retired_s"] = round(max(gone[o]["at"] for o in wanted) - killed, 3)
    from_epoch = max(gone[o]["from_epoch"] for o in wanted)
    chaos.wait_stored(LEAD, from_epoch + 1, timeout=timeout)

    def first_final() -> int | None:
        for e in range(from_epoch, from_epoch + 4):
            try:
                res = chaos.any_client().results(LEAD, e)
            except ApiError:
                return None
            if not res.get("tentative"):
                return e
        return None

    try:
        epoch = wait_until(first_final, timeout, "a final epoch after the loss")
    except TimeoutError:
        return out
    at = _stored_at(chaos, LEAD).get(epoch)
    if at is not None:
        close = (epoch + 1) * plan.epoch_seconds + plan.allowed_lateness
        out["first_final_epoch"] = epoch
        out["first_final_stored_s"] = round(at - killed, 3)
        out["first_final_late_s"] = round(at - close, 3)
        out["open_epochs_lacking"] = from_epoch - plan.epoch_of(killed)
    return out


def loss_run(
    n: int,
    rate: float,
    timeout: float,
    slow_seconds: float,
    seed: int,
    log_level: str,
    stall_epochs: int = 3,
) -> dict[str, Any]:
    out: dict[str, Any] = {"agents": n, "faults": []}
    domains = [f"rack-{i // 2}" for i in range(n)]
    with tempfile.TemporaryDirectory(prefix="fault-bench-loss-") as tmp:
        chaos = ChaosCluster(n, Path(tmp), log_level=log_level, domains=domains)
        writer: LogWriter | None = None
        watchers: list[ResultWatcher] = []
        watch: VersionWatch | None = None
        try:
            chaos.start(timeout=180)
            writer = LogWriter(chaos.paths, rate=rate, seed=seed).start()
            start = math.floor(time.time()) + 2
            # a member one epoch behind is leapt: with 1 s epochs and the default of two, the
            # leap races the overlay's failure detector (3.5 s) in a 3-epoch stall
            leap = (("straggler_epochs", 1), ("retire_after", RETIRE_AFTER))
            plans = [
                JobPlan("wc", "wordcount", start, settings=leap),
                JobPlan("ql", "ql", start, settings=leap),
                JobPlan("top", "wordcount", start, top_k=5, settings=leap),
            ]
            for plan in plans:
                chaos.submit(plan)
            watch = chaos_watch(chaos, plans)  # every version a reader sees (issue 'Final...')
            chaos.wait_stored(LEAD, start + 3, timeout=timeout)
            chaos.node_ids()
            faults = out["faults"]
            leaf = chaos.pick(LEAD, "leaf")
            faults.append(
                {"fault": "leaf lost", **lose(chaos, writer, plans[0], [leaf], ["leaf"], timeout)}
            )
            try:
                inner = chaos.pick(LEAD, "inner")
            except LookupError:
                faults.append({"fault": "inner node lost", "skipped": "no inner node"})
            else:
                faults.append(
                    {
                        "fault": "inner node lost",
                        **lose(chaos, writer, plans[0], [inner], ["inner"], timeout),
                    }
                )
            roles = chaos.roles(LEAD)
            pairs = [[i for i in roles if domains[i] == d] for d in sorted(set(domains))]
            pair = next(
                (p for p in pairs if len(p) == 2 and all(roles[i] != "master" for i in p)), None
            )
            if pair is None:
                faults.append({"fault": "both agents of one domain lost", "skipped": "no pair"})
            else:
                faults.append(
                    {
                        "fault": "both agents of one domain lost",
                        "domain": domains[pair[0]],
                        **lose(chaos, writer, plans[0], pair, [roles[i] for i in pair], timeout),
                    }
                )
            # a straggler: SIGSTOP for three epochs, then SIGCONT
            chaos.wait_stored(LEAD, (chaos.stored(LEAD) or start) + 2, timeout=timeout)
            first = (chaos.stored(LEAD) or start) + 1
            watchers = [ResultWatcher(chaos, p, first).start() for p in plans]
            victim = chaos.pick(LEAD, "leaf")
            ev = chaos.stall(victim, LEAD, "leaf")
            time.sleep(stall_epochs * plans[0].epoch_seconds)  # the fault's length, not a wait
            chaos.resume(victim, LEAD)
            chaos.wait_stored(LEAD, plans[0].epoch_of(time.time()) - 1, timeout=timeout)
            stall = {
                "fault": f"straggler: SIGSTOP {stall_epochs} epochs",
                "agent": victim,
                "stalled_at": ev.at,
            }
            # a slow agent: 20 % of one CPU for slow_seconds
            slow = chaos.pick(LEAD, "leaf")
            thread = chaos.throttle(slow, 0.2, slow_seconds, LEAD, "leaf")
            thread.join()
            chaos.wait_stored(LEAD, plans[0].epoch_of(time.time()) - 1, timeout=timeout)
            for w in watchers:
                w.stop()
            stall["watch"] = {w.plan.name: w.summary() for w in watchers}
            stall["leaps"] = leaps(chaos, [p.name for p in plans])
            faults.append(stall)
            faults.append({"fault": "slow agent: 20 % CPU", "agent": slow, "seconds": slow_seconds})
            writer.stop()
            reports = check(chaos, plans, settle_timeout=timeout)
            figs = chaos_figures(watch, chaos, plans, reports)
            out["final_means_final"] = headline(figs)
            out["every_version"] = figs
            out["jobs"] = [r.to_dict() for r in reports]
            verdicts = [e.verdict for r in reports for e in r.epochs]
            out["epochs_checked"] = len(verdicts)
            out["pct_final_exact"] = round(100 * verdicts.count(EXACT) / len(verdicts), 2)
            out["partial_epochs"] = verdicts.count(PARTIAL)
            out["pct_exact_or_partial"] = round(
                100 * (verdicts.count(EXACT) + verdicts.count(PARTIAL)) / len(verdicts), 2
            )
            out["violations"] = sum(len(r.violations()) for r in reports)
            out["tracebacks"] = {str(i): t[:2000] for i, t in tracebacks(chaos).items()}
        except Exception as exc:  # report what broke with the figures gathered so far
            out["error"] = f"{type(exc).__name__}: {exc}"
        finally:
            for w in watchers:
                if w._thread.is_alive():
                    w.stop()
            if writer is not None:
                writer.stop()
            if watch is not None:
                watch.stop()
            chaos.stop()
    return out


def leaps(chaos: ChaosCluster, jobs: list[str]) -> dict[str, Any]:
    """The straggler leaps the agents recorded (``/timings``: ``leaps``): detected → the
    epoch left without it (ms)."""
    times: list[float] = []
    for job in jobs:
        for t in chaos.timings(job):
            for leap in t.get("leaps") or []:
                if isinstance(leap, dict) and "detected_at" in leap and "emitted_at" in leap:
                    times.append(1000 * (leap["emitted_at"] - leap["detected_at"]))
    return {"count": len(times), "detected_to_emitted_ms": summary(times) if times else None}


def checkpoint_cost_run(
    n: int, rate: float, seconds: float, timeout: float, k: int
) -> dict[str, Any]:
    out: dict[str, Any] = {"agents": n, "checkpoint_replicas": k}
    try:
        with steady_cluster(n, "fault-bench-ckpt-", rate) as (chaos, _writer):
            start = math.floor(time.time()) + 2
            settings = (("checkpoint_replicas", k),)
            plans = [
                JobPlan("wc", "wordcount", start, settings=settings),
                JobPlan("ql", "ql", start, settings=settings),
            ]
            for plan in plans:
                chaos.submit(plan)
            chaos.wait_stored(LEAD, start + 2, timeout=timeout)
            window = measure_window(chaos, LEAD, seconds, timeout, _bytes)
            received, sent = window.pop("counter_rates")
            out.update(window, data_plane_bytes_per_s=received, checkpoint_bytes_per_s=sent)
    except Exception as exc:
        out["error"] = f"{type(exc).__name__}: {exc}"
    return out


def _bytes(chaos: ChaosCluster) -> tuple[int, int]:
    """(data-plane bytes received, checkpoint bytes sent) summed over the live agents."""
    received = sent = 0
    for i in chaos.live():
        st = chaos.client(i).status()
        received += int(st["data_plane"]["bytes_in"])
        sent += sum(int(j.get("checkpoints", {}).get("sent_bytes", 0)) for j in st["jobs"].values())
    return received, sent


def medians_and_ratio(
    runs: list[dict[str, Any]],
    side: str,
    values: tuple[Any, Any],
    labels: tuple[str, str, str],
    figures: tuple[tuple[str, str, str | None], ...],
) -> dict[str, Any]:
    """Per figure (name, key, sub-key): the medians of the runs whose ``side`` is
    ``values[0]`` and ``values[1]``, and their ratio, under ``labels`` (first, second,
    ratio). Runs with an error are left out."""

    def med(value: Any, key: str, sub: str | None) -> float | None:
        vals = []
        for r in runs:
            if r.get(side) == value and "error" not in r:
                v = r.get(key)
                v = v.get(sub) if isinstance(v, dict) and sub else v
                if isinstance(v, int | float):
                    vals.append(float(v))
        return statistics.median(vals) if vals else None

    out: dict[str, Any] = {}
    for name, key, sub in figures:
        a, b = med(values[0], key, sub), med(values[1], key, sub)
        ratio = round(a / b, 3) if a is not None and b else None
        out[name] = {labels[0]: a, labels[1]: b, labels[2]: ratio}
    return out


def cost_ratios(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians with checkpoint_replicas 2 vs 0 and their ratios (goal: at most 1.10)."""
    return medians_and_ratio(
        runs,
        "checkpoint_replicas",
        (2, 0),
        ("k2", "k0", "k2_over_k0"),
        (
            ("cpu_cores", "cpu_cores_all_agents", None),
            ("data_plane_bytes_per_s", "data_plane_bytes_per_s", None),
            ("checkpoint_bytes_per_s", "checkpoint_bytes_per_s", None),
            ("rollup_p50_ms", "rollup_ms", "p50_ms"),
            ("rollup_p99_ms", "rollup_ms", "p99_ms"),
        ),
    )
