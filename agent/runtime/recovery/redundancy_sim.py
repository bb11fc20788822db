"""A seeded simulation of one job's reducer tree under pause bursts, closing the loop of
:mod:`agent.runtime.recovery.redundancy_control` (its tests and
``bench/redundancy_controller_bench.py``). It models the controller, not the data path: no
sockets, no agents, no clock but its own.

Contract. A tree of ``inner`` parents with ``fan_in`` children each under one master; epoch
``e`` closes at ``(e + 1) * epoch_s``. Each child's snapshot reaches its parent after
``child_ms`` (uniform); a parent forwards when it holds all its children, after ``merge_ms``,
taking ``hop_ms`` to the master. A **paused** parent (SIGSTOP: its kernel buffers what
arrives) does nothing until the pause ends. A mirrored (parent, epoch) sends the children's
snapshots to the mirror parent too (parent ``p``'s mirror is parent ``p + 1``, itself
pausable), which forwards the same way; the master takes the first arrival of each child's
share (lineage); siblings are mirrored together (``mirrored_siblings``), so the parent's
share is covered at the earlier of the two. The master completes epochs in order; latency
is completion minus close. Pauses come in **storms** (Tran's injection periods): quiet gaps
(exponential) and storms (uniform length); inside a storm pauses arrive as a Poisson process
(a per-storm mean gap), each of ``pause_s`` (uniform), on the storm's victim parent with
probability ``focus`` and on a random parent otherwise.

Policies: ``none`` (rho 0), ``static`` (rho 1: every snapshot mirrored), and the controller's
``adaptive`` (targeted: the slowest parents first, siblings together) and
``adaptive_uniform`` (no ranking: the same rho spread evenly over the parents, as Tran's
redundancy is). The plan for epoch ``e`` is fixed
``plan_lead_s`` before it closes, from what the master knew then: the controller runs every
``period_epochs`` epochs on the window of completed epochs and the epochs open past T; a
parent's lateness is its own snapshot's arrival (or, still missing, the plan time) minus the
epoch's close, the maximum over its last ``lateness_epochs`` epochs. Extra sends (the CPU
proxy) count each mirrored child snapshot and each mirror's forward; base sends are one per
child and parent per epoch.
"""

from __future__ import annotations

import bisect
import math
import random
from dataclasses import dataclass, field
from typing import Any

from agent.runtime.recovery.redundancy_control import (
    ControlLaw,
    LatencyWindow,
    RedundancyController,
    mirror_ratios,
    mirrored_siblings,
    slow_parents,
)

POLICIES = ("none", "static", "adaptive", "adaptive_uniform")
_JOB = "sim"


@dataclass(frozen=True)
class SimConfig:
    """One simulated run's tree, load, pause process and controller settings."""

    inner: int = 16
    fan_in: int = 4
    epochs: int = 1800
    epoch_s: float = 1.0
    target_ms: float = 250.0
    child_ms: tuple[float, float] = (5.0, 40.0)
    merge_ms: tuple[float, float] = (2.0, 8.0)
    hop_ms: tuple[float, float] = (1.0, 5.0)
    quiet_mean_s: float = 300.0
    storm_s: tuple[float, float] = (60.0, 240.0)
    storm_gap_s: tuple[float, float] = (2.0, 8.0)
    pause_s: tuple[float, float] = (0.5, 3.0)
    focus: float = 1.0
    period_epochs: int = 1
    window_epochs: int = 30
    lateness_epochs: int = 30
    plan_lead_s: float = 0.1
    law: ControlLaw = field(default_factory=ControlLaw)

    @property
    def slow_ms(self) -> float:
        """A parent is slow when its lateness passes half the target."""
        return self.target_ms / 2


class Pauses:
    """Each parent's pauses as sorted, disjoint [start, end) intervals (seconds)."""

    def __init__(self, inner: int) -> None:
        self._starts: list[list[float]] = [[] for _ in range(inner)]
        self._ends: list[list[float]] = [[] for _ in range(inner)]

    def add(self, node: int, start: float, end: float) -> None:
        starts, ends = self._starts[node], self._ends[node]
        i = bisect.bisect_left(starts, start)
        starts.insert(i, start)
        ends.insert(i, end)
        merged_s: list[float] = []
        merged_e: list[float] = []
        for s, e in zip(starts, ends, strict=True):
            if merged_e and s <= merged_e[-1]:
                merged_e[-1] = max(merged_e[-1], e)
            else:
                merged_s.append(s)
                merged_e.append(e)
        self._starts[node], self._ends[node] = merged_s, merged_e

    def resume(self, node: int, t: float) -> float:
        """When ``node`` can act on something that reached it at ``t``."""
        i = bisect.bisect_right(self._starts[node], t) - 1
        if i >= 0 and t < self._ends[node][i]:
            return self._ends[node][i]
        return t

    def paused_seconds(self) -> float:
        return sum(
            e - s
            for st, en in zip(self._starts, self._ends, strict=True)
            for s, e in zip(st, en, strict=True)
        )


def storm_pauses(cfg: SimConfig, rng: random.Random) -> Pauses:
    """The seeded pause process of the module contract over the run."""
    pauses = Pauses(cfg.inner)
    horizon = (cfg.epochs + 2) * cfg.epoch_s
    t = rng.expovariate(1 / cfg.quiet_mean_s)
    while t < horizon:
        storm_end = t + rng.uniform(*cfg.storm_s)
        victim = rng.randrange(cfg.inner)
        mean_gap = rng.uniform(*cfg.storm_gap_s)
        while True:
            t += rng.expovariate(1 / mean_gap)
            if t >= min(storm_end, horizon):
                break
            node = victim if rng.random() < cfg.focus else rng.randrange(cfg.inner)
            pauses.add(node, t, t + rng.uniform(*cfg.pause_s))
        t = storm_end + rng.expovariate(1 / cfg.quiet_mean_s)
    return pauses


@dataclass
class RunResult:
    """One policy's run: per-epoch latencies (ms), the rho each epoch was planned at, and
    the extra and base sends."""

    policy: str
    latencies_ms: list[float]
    rhos: list[float]
    extra_sends: int
    base_sends: int
    controller: dict[str, Any] | None = None

    def over(self, target_ms: float) -> int:
        return sum(1 for ms in self.latencies_ms if ms > target_ms)


def simulate(cfg: SimConfig, policy: str, seed: int) -> RunResult:
    """Run ``policy`` over the pause process drawn from ``seed`` (the same pauses and path
    delays for every policy of one seed, so policies compare on identical faults)."""
    if policy not in POLICIES:
        raise ValueError(f"unknown policy {policy!r}; one of {POLICIES}")
    pauses = storm_pauses(cfg, random.Random(seed))
    noise = random.Random(seed * 7919 + 1)  # path delays: independent of the pauses
    parents = [str(p) for p in range(cfg.inner)]
    children = {p: cfg.fan_in for p in parents}
    controller = RedundancyController(cfg.law) if policy.startswith("adaptive") else None
    window = LatencyWindow(max_epochs=cfg.window_epochs, max_age_s=cfg.window_epochs * cfg.epoch_s)
    primary_at: list[list[float]] = []  # epoch -> parent -> its own share's arrival (s)
    completed: list[float] = []  # epoch -> completion time (s), non-decreasing
    latencies: list[float] = []
    rhos: list[float] = []
    fed = 0  # epochs fed to the window so far
    fresh = 0  # epochs completed past T since the last control period
    extra = 0
    base_per_epoch = cfg.inner * (cfg.fan_in + 1)
    for e in range(cfg.epochs):
        close = (e + 1) * cfg.epoch_s
        plan_t = close - cfg.plan_lead_s
        while fed < e and completed[fed] <= plan_t:
            window.record(latencies[fed], completed[fed])
            fresh += latencies[fed] > cfg.target_ms
            fed += 1
        if controller is not None and e % cfg.period_epochs == 0:
            still_open = sum(
                1 for o in range(fed, e) if (plan_t - (o + 1) * cfg.epoch_s) * 1000 > cfg.target_ms
            )
            controller.update(
                window.p99(plan_t),
                cfg.target_ms,
                fresh + still_open,
                extra / max(1, e * base_per_epoch),  # the run's extra sends so far
            )
            fresh = 0
        rho = {"none": 0.0, "static": 1.0}.get(policy, controller.rho if controller else 0.0)
        ratios = _ratios(cfg, policy, rho, parents, children, primary_at, plan_t)
        rhos.append(rho)
        done, sends = _one_epoch(cfg, policy, e, close, ratios, pauses, noise, primary_at)
        extra += sends
        done = max(done, completed[-1] if completed else done)
        completed.append(done)
        latencies.append((done - close) * 1000)
    base = cfg.epochs * base_per_epoch
    status = controller.status() if controller else None
    return RunResult(policy, latencies, rhos, extra, base, status)


def _ratios(
    cfg: SimConfig,
    policy: str,
    rho: float,
    parents: list[str],
    children: dict[str, int],
    primary_at: list[list[float]],
    plan_t: float,
) -> dict[str, float]:
    if policy in ("none", "static"):
        return {p: rho for p in parents}
    ranking: list[str] = []
    if policy == "adaptive":
        lateness = {p: 0.0 for p in parents}
        for o in range(max(0, len(primary_at) - cfg.lateness_epochs), len(primary_at)):
            close = (o + 1) * cfg.epoch_s
            for i, p in enumerate(parents):
                seen = min(primary_at[o][i], plan_t)
                lateness[p] = max(lateness[p], (seen - close) * 1000)
        ranking = slow_parents(lateness, cfg.slow_ms)
    return mirror_ratios(rho, children, ranking)


def _one_epoch(
    cfg: SimConfig,
    policy: str,
    e: int,
    close: float,
    ratios: dict[str, float],
    pauses: Pauses,
    noise: random.Random,
    primary_at: list[list[float]],
) -> tuple[float, int]:
    """Epoch ``e``'s completion at the master and its extra sends."""
    u = noise.uniform
    covered: list[float] = []
    own: list[float] = []
    sends = 0
    for p in range(cfg.inner):
        arrivals = [close + u(*cfg.child_ms) / 1000 for _ in range(cfg.fan_in)]
        # Every delay is drawn whether used or not: each policy sees the same path delays.
        to_master = (u(*cfg.merge_ms) + u(*cfg.hop_ms)) / 1000
        to_mirror = u(*cfg.hop_ms) / 1000
        mirror_to_master = (u(*cfg.merge_ms) + u(*cfg.hop_ms)) / 1000
        at = pauses.resume(p, max(arrivals)) + to_master
        own.append(at)
        if mirrored_siblings(_JOB, 0, e, str(p), ratios[str(p)]):
            sends += cfg.fan_in + 1
            mirror = (p + 1) % cfg.inner
            via = pauses.resume(mirror, max(arrivals) + to_mirror) + mirror_to_master
            at = min(at, via)
        covered.append(at)
    primary_at.append(own)
    return max(covered) + u(*cfg.merge_ms) / 1000, sends


def summarize(run: RunResult, target_ms: float) -> dict[str, Any]:
    """A run's figures: nearest-rank p50/p99 of epoch latency, epochs over T, extra sends."""
    window = LatencyWindow(max_epochs=len(run.latencies_ms), max_age_s=math.inf)
    for i, ms in enumerate(run.latencies_ms):
        window.record(ms, float(i))
    return {
        "p50_ms": round(window.p50() or 0.0, 1),
        "p99_ms": round(window.p99() or 0.0, 1),
        "epochs_over_target": run.over(target_ms),
        "epochs": len(run.latencies_ms),
        "extra_sends": run.extra_sends,
        "extra_cost": round(run.extra_sends / run.base_sends, 4),
        "mean_rho": round(sum(run.rhos) / len(run.rhos), 4),
    }
