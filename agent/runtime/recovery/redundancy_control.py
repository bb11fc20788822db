"""Adaptive redundancy's decisions (issue 24, Tran's resiliency manager): how much to mirror,
which snapshots, and for which parents. Pure: no I/O, no asyncio, no clock of its own.

Contract (``docs/fault-tolerance.md``, "Adaptive redundancy: the controller (Tran)"):

* :class:`LatencyWindow` - a master's epoch completion latencies (ms), bounded by count **and**
  age: it holds at most ``max_epochs`` entries, and none completed more than ``max_age_s``
  seconds before the ``now`` it is asked at (times are the caller's monotonic clock). Its
  quantile is the **nearest rank**: ``sorted[ceil(q * n) - 1]`` (clamped to ``[0, n - 1]``),
  i.e. ``numpy.quantile(values, q, method="inverted_cdf")`` - always a latency that was
  observed, never an interpolation. With ``n <= 100`` the p99 is the maximum.
* :class:`RedundancyController` - holds the redundancy ratio ``rho`` in
  ``[rho_min, rho_max]`` (the fraction of children's snapshots also sent to a mirror
  parent). Once per control period :meth:`~RedundancyController.update` is given the window's
  p99, the target T (p99 of epoch completion, ms), how many epochs missed T since the last
  period (completed late, or still open past T) and the measured extra cost. The law is
  Tran's Algorithm 2 (additive hill climbing on the ratio, a proportional kick, a safety
  margin) with these changes against the flapping he reports (:class:`ControlLaw`):

  - a fresh miss raises ``rho`` at once by ``max(step, min(step_max, gain * (p99 - T) / T))``;
  - ``dwell`` periods in a row with p99 below ``(1 - margin) * T`` lower it by ``step``; in
    the dead band between, or when the window's miss is old news, it holds;
  - ``step`` doubles while moves keep one direction (up to ``step_max``) and halves at each
    reversal (down to ``step_min``);
  - a miss right after a decrease makes the midpoint of the levels before and after it a
    floor for ``memory`` periods (Tran's "minimum redundancy", learnt by bisection); once
    it expires the next decrease probes by ``step_min``, and a probe that misses doubles the
    memory (up to 16 times; reaching ``rho_min`` resets it);
  - a cost over ``cost_budget`` forbids raising.

  Guarantees: ``rho`` always in bounds; never lowered while misses persist, never raised
  while slack persists; sustained misses reach ``rho_max`` within
  :meth:`ControlLaw.periods_to_max` periods (8 with the defaults) and sustained slack
  reaches the floor within ``dwell`` times that; a process whose p99 stays in the dead band
  once ``rho`` is there makes it hold until a floor expires, and the probes below an
  expired floor grow rarer each time they fail (no flapping).
* :func:`mirrored` / :func:`mirrored_siblings` - the deterministic choice of the (child,
  epoch) snapshots mirrored at ratio ``rho``: a keyed 64-bit BLAKE2b of (job, tree, epoch,
  child or parent) below ``floor(rho * 2**64)``. Every agent and the master agree without a
  message; the long-run fraction is exactly ``rho``; raising ``rho`` only adds choices.
  ``mirrored_siblings`` keys by the parent, so all of one parent's children are mirrored in
  the same epochs: an ELF barrier completes an epoch at the **latest** of its children, so a
  mirror covers a slow parent's epoch only when every child of it was mirrored - per-child
  choices do that with probability ``rho ** k`` for k children, per-parent ones with ``rho``.
* :func:`slow_parents` / :func:`mirror_ratios` - ELF's "mirroring straggler" rule made
  concrete: rank parents by their recent per-epoch arrival lateness at the master (their own
  snapshots, not the mirror's), and spend the controller's budget (``rho`` times all
  children) on the slowest first, the rest evenly.
"""

from __future__ import annotations

import hashlib
import math
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from sortedcontainers import SortedList

_HASH_SPACE = 1 << 64
_MIRROR_KEY = b"elf-mirror-v1"  # the BLAKE2b key: a version bump re-draws every choice


class LatencyWindow:
    """The last epoch completion latencies (ms) at a master, bounded by ``max_epochs`` entries
    and ``max_age_s`` seconds (module contract). ``record`` and ``quantile`` cost
    O(log n); the memory is O(``max_epochs``)."""

    def __init__(self, max_epochs: int = 100, max_age_s: float = 120.0) -> None:
        if max_epochs < 1:
            raise ValueError(f"max_epochs must be >= 1, got {max_epochs}")
        if not max_age_s > 0:
            raise ValueError(f"max_age_s must be > 0, got {max_age_s}")
        self.max_epochs = max_epochs
        self.max_age_s = max_age_s
        self._order: deque[tuple[float, float]] = deque()  # (completed at, latency) by time
        self._sorted: SortedList = SortedList()
        self._newest = -math.inf

    def record(self, latency_ms: float, at: float) -> None:
        """One epoch completed ``latency_ms`` after its close, at time ``at`` (seconds,
        non-decreasing across calls: a master stores epochs in its clock's order)."""
        if not math.isfinite(latency_ms) or latency_ms < 0:
            raise ValueError(f"latency must be a finite number >= 0, got {latency_ms!r}")
        if not math.isfinite(at) or at < self._newest:
            raise ValueError(f"completion times must not go back ({at!r} < {self._newest!r})")
        self._newest = at
        self._order.append((at, latency_ms))
        self._sorted.add(latency_ms)
        if len(self._order) > self.max_epochs:
            self._drop_oldest()
        self._expire(at)

    def _drop_oldest(self) -> None:
        _, latency = self._order.popleft()
        self._sorted.remove(latency)

    def _expire(self, now: float) -> None:
        while self._order and self._order[0][0] < now - self.max_age_s:
            self._drop_oldest()

    def count(self, now: float | None = None) -> int:
        """How many latencies the window holds (at ``now``, when given)."""
        if now is not None:
            self._expire(now)
        return len(self._order)

    def quantile(self, q: float, now: float | None = None) -> float | None:
        """The nearest-rank ``q`` quantile (``0 <= q <= 1``) of the latencies held at ``now``
        (None when empty)."""
        if not 0.0 <= q <= 1.0:
            raise ValueError(f"q must be in [0, 1], got {q!r}")
        if now is not None:
            self._expire(now)
        n = len(self._sorted)
        if n == 0:
            return None
        rank = min(n - 1, max(0, math.ceil(n * q) - 1))
        return float(self._sorted[rank])

    def p99(self, now: float | None = None) -> float | None:
        return self.quantile(0.99, now)

    def p50(self, now: float | None = None) -> float | None:
        return self.quantile(0.5, now)

    def over(self, target_ms: float, now: float | None = None) -> int:
        """How many held latencies exceed ``target_ms``."""
        if now is not None:
            self._expire(now)
        return len(self._sorted) - self._sorted.bisect_right(target_ms)


@dataclass(frozen=True)
class ControlLaw:
    """The controller's parameters (defaults tuned in ``bench/redundancy_controller_bench.py``).

    ``margin`` is Tran's ``perfMargin`` (the dead band below T), ``gain`` his proportional
    ``alpha_i`` (a raise is at least ``min(step_max, gain * (p99 - T) / T)``: capped, as his
    uncapped kick overshot past his static level), ``step_min`` his ``delta_min`` and
    ``step_start`` his 10 % additive step; ``dwell`` (periods of slack before each decrease),
    the doubling/halving of ``step`` and the learnt floor kept ``memory`` periods are ours,
    against his controller dropping to zero between sparse faults and flapping around the
    bound."""

    rho_min: float = 0.0
    rho_max: float = 1.0
    margin: float = 0.2
    gain: float = 1.0
    step_start: float = 0.1
    step_min: float = 0.01
    step_max: float = 0.25
    dwell: int = 3
    memory: int = 300
    cost_budget: float = math.inf

    def __post_init__(self) -> None:
        if not 0.0 <= self.rho_min <= self.rho_max <= 1.0:
            raise ValueError("need 0 <= rho_min <= rho_max <= 1")
        if not 0.0 < self.margin < 1.0:
            raise ValueError("margin must be in (0, 1)")
        if not 0.0 < self.step_min <= self.step_start <= self.step_max:
            raise ValueError("need 0 < step_min <= step_start <= step_max")
        if self.gain < 0 or self.dwell < 1 or self.memory < 0 or not self.cost_budget >= 0:
            raise ValueError("need gain >= 0, dwell >= 1, memory >= 0 and cost_budget >= 0")

    def periods_to_max(self) -> int:
        """The most control periods sustained misses take from ``rho_min`` to ``rho_max``:
        the i-th raise in a row is at least ``min(step_max, step_min * 2**(i - 1))``."""
        periods, total, step = 0, 0.0, self.step_min
        while total < self.rho_max - self.rho_min:
            periods, total, step = periods + 1, total + step, min(self.step_max, step * 2)
        return periods


@dataclass
class ControllerStatus:
    """What the job's status shows of its controller."""

    rho: float
    step: float
    last_p99_ms: float | None = None
    last_target_ms: float | None = None
    last_extra_cost: float | None = None
    last_decision: str = "none"
    decisions: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "rho": self.rho,
            "step": self.step,
            "last_p99_ms": self.last_p99_ms,
            "last_target_ms": self.last_target_ms,
            "last_extra_cost": self.last_extra_cost,
            "last_decision": self.last_decision,
            "decisions": dict(self.decisions),
        }


RAISE, LOWER, HOLD = "raise", "lower", "hold"


class RedundancyController:
    """A job's redundancy ratio ``rho`` driven by its tail-latency target (module contract;
    the law is :class:`ControlLaw`'s). One instance per job at its master."""

    def __init__(self, law: ControlLaw | None = None, rho: float | None = None) -> None:
        self.law = law or ControlLaw()
        start = self.law.rho_min if rho is None else rho
        self._rho = min(self.law.rho_max, max(self.law.rho_min, start))
        self._step = self.law.step_start
        self._last_move = 0  # +1 raised, -1 lowered, 0 not yet moved
        self._slack_streak = 0
        self._periods = 0
        self._before_lower = self._rho  # the level the last decrease left
        self._floor = self.law.rho_min  # the learnt floor (a decrease that missed) ...
        self._floor_until = 0  # ... and the period it is forgotten at
        self._memory = self.law.memory  # doubles at each failed probe below a floor
        self._probing = False  # decreasing below a floor that expired: a miss now fails it
        self._status = ControllerStatus(rho=self._rho, step=self._step)
        self._status.decisions = {RAISE: 0, LOWER: 0, HOLD: 0}

    @property
    def rho(self) -> float:
        return self._rho

    def floor(self) -> float:
        """The level decreases stop at now: ``rho_min``, or the learnt floor while kept."""
        return self._floor if self._periods < self._floor_until else self.law.rho_min

    def status(self) -> dict[str, Any]:
        return self._status.as_dict() | {"floor": self.floor(), "periods": self._periods}

    def update(
        self,
        p99_ms: float | None,
        target_ms: float,
        fresh_misses: int,
        extra_cost: float = 0.0,
    ) -> str:
        """One control period: decide from the window's p99 (None: no epoch in it), the
        target, how many epochs missed it since the last period (completed past T, or still
        open past T: the master sees those before they are in the window) and the measured
        extra cost (the unit of ``cost_budget``, e.g. extra sends per base send); returns
        ``"raise"``, ``"lower"`` or ``"hold"``."""
        if not target_ms > 0:
            raise ValueError(f"target must be > 0 ms, got {target_ms!r}")
        if fresh_misses < 0:
            raise ValueError("fresh_misses must be >= 0")
        if p99_ms is not None and not (math.isfinite(p99_ms) and p99_ms >= 0):
            raise ValueError(f"p99 must be a finite number >= 0, got {p99_ms!r}")
        law = self.law
        self._periods += 1
        decision = HOLD
        if fresh_misses > 0:
            self._slack_streak = 0
            if self._rho < law.rho_max and extra_cost <= law.cost_budget:
                error = 0.0 if p99_ms is None else max(0.0, p99_ms - target_ms) / target_ms
                if self._last_move < 0:
                    # The last decrease went too far: the least sufficient level lies between
                    # the levels before and after it, so keep their midpoint for a while -
                    # twice as long when it was a probe below a floor that had expired.
                    if self._probing:
                        self._memory = min(16 * law.memory, 2 * self._memory)
                    self._floor = (self._before_lower + self._rho) / 2
                    self._floor_until = self._periods + self._memory
                self._probing = False
                self._move(+1, min(law.step_max, law.gain * error))
                decision = RAISE
        elif p99_ms is not None and p99_ms < (1.0 - law.margin) * target_ms:
            self._slack_streak += 1
            if self._slack_streak >= law.dwell and self._rho > self.floor():
                self._slack_streak = 0
                self._before_lower = self._rho
                if self._floor_until and self._periods >= self._floor_until:
                    # The floor expired while holding at it: probe below it by the finest
                    # step (a band at least two steps wide cannot be jumped over).
                    self._floor_until, self._probing = 0, True
                    self._step, self._last_move = law.step_min, 0
                self._move(-1)
                self._rho = max(self._rho, self.floor())
                if self._rho == law.rho_min:
                    self._memory = law.memory  # back to quiet: forget the failed probes
                decision = LOWER
        else:
            # In the dead band, or the window's miss is old news (Tran adapts only when the
            # latency changed): more redundancy would buy nothing the next window shows.
            self._slack_streak = 0
        status = self._status
        status.rho, status.step = self._rho, self._step
        status.last_p99_ms, status.last_target_ms = p99_ms, target_ms
        status.last_extra_cost, status.last_decision = extra_cost, decision
        status.decisions[decision] += 1
        return decision

    def _move(self, direction: int, kick: float = 0.0) -> None:
        """Move ``rho`` one step in ``direction`` (a raise by at least ``kick``)."""
        law = self.law
        if self._last_move == -direction:
            self._step = max(law.step_min, self._step / 2)  # a reversal: we overshot
        elif self._last_move == direction:
            self._step = min(law.step_max, self._step * 2)  # still short: go faster
        self._last_move = direction
        size = max(self._step, kick) if direction > 0 else self._step
        self._rho = min(law.rho_max, max(law.rho_min, self._rho + direction * size))


def _mirror_hash(kind: bytes, job: str, tree: int, epoch: int, unit: str | int) -> int:
    parts = (kind, job.encode(), str(tree).encode(), str(epoch).encode(), str(unit).encode())
    # Length prefixes keep ("ab", "c") and ("a", "bc") apart.
    data = b"".join(len(p).to_bytes(4, "big") + p for p in parts)
    digest = hashlib.blake2b(data, digest_size=8, key=_MIRROR_KEY).digest()
    return int.from_bytes(digest, "big")


def _threshold(rho: float) -> int:
    if not 0.0 <= rho <= 1.0:
        raise ValueError(f"rho must be in [0, 1], got {rho!r}")
    return math.floor(Fraction(rho) * _HASH_SPACE)  # exact: no float rounding at the top


def mirrored(job: str, tree: int, epoch: int, child: str | int, rho: float) -> bool:
    """Whether ``child``'s snapshot of ``epoch`` in ``tree`` also goes to a mirror parent at
    ratio ``rho`` (each (child, epoch) drawn on its own; module contract)."""
    return _mirror_hash(b"child", job, tree, epoch, child) < _threshold(rho)


def mirrored_siblings(job: str, tree: int, epoch: int, parent: str | int, rho: float) -> bool:
    """Whether every child of ``parent`` mirrors its snapshot of ``epoch`` at ratio ``rho``
    (one draw per (parent, epoch): siblings go together, which a barrier needs)."""
    return _mirror_hash(b"parent", job, tree, epoch, parent) < _threshold(rho)


def slow_parents(lateness_ms: Mapping[str, float], threshold_ms: float) -> list[str]:
    """The parents whose recent arrival lateness at the master exceeds ``threshold_ms``,
    latest first (ties by id, so every caller ranks alike). Lateness is a parent's own
    snapshot's arrival (or, still missing, ``now``) minus when it was due, over the last
    few epochs - never the mirror's arrival, which would hide the parent it covers."""
    late = [(-ms, parent) for parent, ms in lateness_ms.items() if ms > threshold_ms]
    return [parent for _, parent in sorted(late)]


def mirror_ratios(
    rho: float,
    children: Mapping[str, int],
    ranking: Iterable[str],
) -> dict[str, float]:
    """Each parent's mirroring ratio for ``mirrored_siblings``, spending the budget
    ``rho * sum(children)`` snapshots per epoch: the ranked (slow) parents first, wholly
    (ratio 1) while the budget lasts, a fraction for the one where it runs out; what is left
    after the ranked ones spreads evenly (one ratio) over the others. The expected mirrored
    snapshots per epoch are exactly the budget."""
    total = sum(children.values())
    if any(k < 0 for k in children.values()):
        raise ValueError("child counts must be >= 0")
    _threshold(rho)  # validates rho
    budget = rho * total
    if budget <= 1e-12:  # nothing to spend (a denormal budget would split unevenly: 1e-323 / 3
        budget = 0.0  # underflows to 0.0 while 1e-323 / 1 does not)
    ratios = {parent: 0.0 for parent in children}
    for parent in ranking:
        k = children.get(parent, 0)
        if k == 0 or budget <= 0:
            continue
        ratios[parent] = min(1.0, budget / k)
        budget -= ratios[parent] * k
    rest = sum(k for parent, k in children.items() if ratios[parent] == 0.0)
    if budget > 1e-12 and rest:
        share = min(1.0, budget / rest)
        for parent in children:
            if ratios[parent] == 0.0:
                ratios[parent] = share
    return ratios
