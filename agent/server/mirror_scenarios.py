"""Mirroring scenario on a chaos cluster: an inner node paused (SIGSTOP) for a few seconds,
shared by the cluster test and the benchmark.

Contract (``docs/fault-tolerance.md``, "Adaptive redundancy"; issue "Active redundancy").
On a cluster of a :class:`~agent.server.tree_layouts.Layout` (default ``SIX``: agent 2 is an
inner node with children 3 and 4; ``TWELVE`` has three inner nodes), for one
``fault_tolerance`` policy and an every-version reader started before the job:

* a :class:`~agent.server.chaos.LogWriter` (10 lines/s per agent) and WordCount ``wc`` on 1 s
  epochs, previews and leaping off (only results as stored are judged: without a mirror the
  master waits for the paused node), placement salt 0 (the planned tree);
* once three epochs are stored and the shape checked, ``bursts`` times, ``gap_s`` seconds
  apart: one of the layout's inner nodes - the first, or a random one drawn from ``rng``
  (seeded by the caller) - is paused (SIGSTOP) for ``pause_s`` seconds (the fault's length:
  a pause is a duration), then resumed; under the adaptive policy only once a mirror of
  its position exists (with a static ratio: has sent an epoch up). Then five more stored
  epochs, the writer stops and the end-of-run check settles. ``on_window("start")`` and
  ``on_window("end")`` are called right before the first pause and after the last burst's
  gap (a benchmark measures its CPU and bytes between them).

It returns a :class:`Pause`: the end-of-run reports, the every-version figures, and from the
master's timings each epoch's **completion latency** (its first stored version's time minus
its close, ms) for the epochs around the pause, their p99 and how many exceeded the target
``target_ms`` - the figure adaptive redundancy is about (Tran: deadline misses) - and the
versions flagged lacking an origin other than the paused nodes. Nothing here asserts.

Bounds: every wait has a timeout (30 s for the shape and the mirror, 60 s after the resume,
20 s to settle) and raises ``TimeoutError`` (or ``ScenarioError``) naming what it waited for.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from agent.server.chaos import ChaosCluster, JobPlan, JobReport, LogWriter, check, wait_until
from agent.server.replica_scenarios import JOB, start_wordcount
from agent.server.tree_layouts import SIX, Layout, wait_for_the_planned_tree
from agent.server.version_check import Seen, origin_name
from agent.server.version_watch import VersionWatch, chaos_figures

#: seconds the inner node is paused
PAUSE_SECONDS = 5.0


def mirror_ready(chaos: ChaosCluster, holder_hex: str, sent: bool, job: str = JOB) -> bool:
    """Whether some agent mirrors ``holder_hex``'s position (and, ``sent``, has sent an
    epoch up: a static ratio mirrors from the start; the controller's starts at 0)."""
    for i in range(chaos.n):
        if i in chaos.stalled or i in chaos.lost:
            continue
        st = chaos.client(i).status()["jobs"].get(job) or {}
        mirrors = (st.get("active_replicas") or {}).get("mirrors") or {}
        for key, m in mirrors.items():
            if key.endswith("/" + holder_hex) and (m.get("sent", 0) > 0 or not sent):
                return True
    return False


@dataclass
class Pause:
    """One run of :func:`pause_an_inner_node` (module contract)."""

    policy: Any
    plan: JobPlan
    #: the agent index paused in each burst
    victims: list[int]
    paused_at: float
    resumed_at: float
    latencies_ms: dict[int, float]
    target_ms: float
    reports: list[JobReport]
    figs: dict[str, Any]
    others: list[dict[str, Any]] = field(default_factory=list)
    flagged: list[Seen] = field(default_factory=list)

    def figures(self) -> dict[str, Any]:
        lat = sorted(self.latencies_ms.values())
        p99 = lat[min(len(lat) - 1, max(0, math.ceil(0.99 * len(lat)) - 1))] if lat else None
        return {
            "paused": self.victims,
            "fault_window_s": round(self.resumed_at - self.paused_at, 2),
            "epochs": len(lat),
            "p99_ms": p99,
            "max_ms": lat[-1] if lat else None,
            "over_target": sum(x > self.target_ms for x in lat),
            "target_ms": self.target_ms,
            "latencies_ms": {str(e): round(x) for e, x in sorted(self.latencies_ms.items())},
            "flagged_versions": len(self.flagged),
            "lacking_others_versions": len(self.others),
            "violations": self.figs.get("violations"),
            "never_repaired": (self.figs.get("never_repaired") or {}).get("count"),
            "epochs_final_exact_at_end": self.figs.get("epochs_final_exact_at_end"),
        }


def pause_an_inner_node(
    chaos: ChaosCluster,
    watch: VersionWatch,
    policy: Any,
    target_ms: float,
    pause_s: float = PAUSE_SECONDS,
    bursts: int = 1,
    gap_s: float = 0.0,
    on_window: Callable[[str], None] | None = None,
    layout: Layout = SIX,
    rng: random.Random | None = None,
) -> Pause:
    """The scenario (module contract) under ``policy`` on a cluster of ``layout``; each burst
    pauses one of its inner nodes, chosen by ``rng`` (None: the first); stops ``watch``."""
    writer = LogWriter(chaos.paths, rate=10).start()
    adaptive = isinstance(policy, dict) and policy.get("policy") == "adaptive"
    static = adaptive and policy.get("mirror_ratio") is not None
    victims: list[int] = []
    try:
        plan, _ = start_wordcount(chaos, watch, policy, ("placement", 0))
        wait_for_the_planned_tree(chaos, layout)
        master = chaos.pick(JOB, "master")
        paused_at = 0.0
        for burst in range(bursts):
            victim = layout.inner[0] if rng is None else rng.choice(layout.inner)
            holder = layout.ids[victim]
            if adaptive:
                wait_until(
                    lambda h=holder: mirror_ready(chaos, h, static),
                    30,
                    f"a mirror of {holder}" + (" sending an epoch" if static else ""),
                )
            if burst == 0:
                if on_window is not None:
                    on_window("start")
                paused_at = time.time()
            victims.append(victim)
            chaos.stall(victim, JOB, "inner")
            time.sleep(pause_s)  # the fault's length (a pause is a duration), not a wait
            chaos.resume(victim, JOB)
            if burst < bursts - 1 or gap_s:
                time.sleep(gap_s)  # the fault schedule: the gap between two bursts
        resumed_at = time.time()
        if on_window is not None:
            on_window("end")
        first = plan.start_epoch + 3
        last = math.floor(resumed_at) + 3
        chaos.wait_stored(JOB, last + 2, timeout=60)
    finally:
        writer.stop()
    reports = check(chaos, [plan], settle_timeout=20)
    figs = chaos_figures(watch, chaos, [plan], reports)
    timings = {t["epoch"]: t for t in chaos.client(master).timings(JOB)["epochs"]}
    latencies = {
        e: (t["stored_at"] - t["closes_at"]) * 1000.0
        for e, t in timings.items()
        if first <= e <= last and t.get("stored_at") and t.get("closes_at")
    }
    flagged = [v for v in watch.seen() if v.flagged]
    # compared as results name origins (hex without leading zeros: the lake's may have them)
    paused = {origin_name(layout.ids[v]) for v in victims}
    others = [
        {"source": v.source, "epoch": v.epoch, "lacking": v.lacking}
        for v in flagged
        if not v.lacking or {origin_name(x) for x in v.lacking} - paused
    ]
    return Pause(
        policy=policy,
        plan=plan,
        victims=victims,
        paused_at=paused_at,
        resumed_at=resumed_at,
        latencies_ms=latencies,
        target_ms=target_ms,
        reports=reports,
        figs=figs,
        others=others,
        flagged=flagged,
    )
