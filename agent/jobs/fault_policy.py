"""A job's fault-tolerance policy: the spec's ``fault_tolerance`` field.

Contract (``docs/fault-tolerance.md``, "Replicated masters"; changeable at runtime like the
other fault-tolerance fields):

* ``{"policy": "passive"}`` (the default; also written as the bare string ``"passive"``):
  recovery after the fact - lineage, commit, the master's standby, checkpoints - with the
  results tentative, naming what they lack, while an agent is dead or slow.
* ``{"policy": "replicated", "replicas": r}``, r in [2, :data:`MAX_REPLICAS`]: the master
  position of each of the job's trees gets r - 1 *active* replicas (the agents closest to
  the tree id after the master: the next masters), which merge every member's epochs as the
  master does, so a master's kill -9 loses no epoch in flight.

``budget`` (PPA's budgeted replicas) and ``adaptive`` (mirroring for a latency target) are
refused by name until they run (a spec accepted is a spec that runs). A violation is a
``ValueError`` whose message the spec parser reports under the field's name.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

PASSIVE = "passive"
REPLICATED = "replicated"
BUDGET = "budget"
ADAPTIVE = "adaptive"
POLICIES = (PASSIVE, REPLICATED, BUDGET, ADAPTIVE)
NOT_YET: tuple[str, ...] = ()
MIN_TARGET_MS = 50.0
MAX_TARGET_MS = 3_600_000.0
MIN_REPLICAS = 2
MAX_REPLICAS = 5
MAX_BUDGET = 64  # positions a budget may name (the plan travels in one multicast datagram)


@dataclass(frozen=True)
class FaultPolicy:
    """One job's policy (module contract); ``replicas`` is the replicas per replicated
    position (1 for passive, 2 for a budget's planned positions), ``budget`` the positions a
    budget policy may replicate (0 otherwise)."""

    policy: str = PASSIVE
    replicas: int = 1
    budget: int = 0
    target_ms: float = 0.0
    mirror_ratio: float | None = None

    @property
    def replicated(self) -> bool:
        """Positions have active replicas: every one (replicated), the planned (budget), or
        every inner one's mirror (adaptive)."""
        return self.policy in (REPLICATED, BUDGET, ADAPTIVE)

    @property
    def mirrored(self) -> bool:
        """Inner positions have mirrors fed a fraction of the epochs (adaptive)."""
        return self.policy == ADAPTIVE

    @property
    def planned(self) -> bool:
        """Only the positions of the master's plan are replicated (budget)."""
        return self.policy == BUDGET

    def to_dict(self) -> dict[str, Any]:
        if self.policy == PASSIVE:
            return {"policy": PASSIVE}
        if self.policy == BUDGET:
            return {"policy": BUDGET, "replica_budget": self.budget}
        if self.policy == ADAPTIVE:
            out: dict[str, Any] = {"policy": ADAPTIVE, "latency_target_ms": self.target_ms}
            if self.mirror_ratio is not None:
                out["mirror_ratio"] = self.mirror_ratio
            return out
        return {"policy": self.policy, "replicas": self.replicas}

    def label(self) -> str:
        """A short name for results and the lake: ``passive``, ``replicated:r``,
        ``budget:R``."""
        if self.policy == PASSIVE:
            return PASSIVE
        if self.policy == ADAPTIVE:
            fixed = "" if self.mirror_ratio is None else f":rho={self.mirror_ratio:g}"
            return f"{ADAPTIVE}:{self.target_ms:g}ms{fixed}"
        return (
            f"{BUDGET}:{self.budget}" if self.policy == BUDGET else f"{self.policy}:{self.replicas}"
        )


def parse_policy(raw: Any) -> FaultPolicy:
    """The spec's ``fault_tolerance`` value (None: the default) as a :class:`FaultPolicy`;
    ``ValueError`` saying what is wrong otherwise."""
    if raw is None or raw == PASSIVE:
        return FaultPolicy()
    if not isinstance(raw, dict):
        raise ValueError(f'must be "passive" or an object with a "policy", got {raw!r}')
    policy = raw.get("policy")
    known = {"policy", "replicas", "replica_budget", "latency_target_ms", "mirror_ratio"}
    unknown = set(raw) - known
    if unknown:
        raise ValueError(f"unknown keys {sorted(unknown)}; known: {', '.join(sorted(known))}")
    if policy in NOT_YET:
        raise ValueError(f"policy {policy!r} is not available yet; use one of {list(POLICIES)}")
    if policy not in POLICIES:
        raise ValueError(f"policy must be one of {list(POLICIES)}, got {policy!r}")
    if policy != ADAPTIVE and ({"latency_target_ms", "mirror_ratio"} & set(raw)):
        raise ValueError('"latency_target_ms" and "mirror_ratio" apply to the adaptive policy only')
    if policy == ADAPTIVE:
        return _adaptive(raw)
    if policy != BUDGET and "replica_budget" in raw:
        raise ValueError('"replica_budget" applies to the budget policy only')
    if policy == PASSIVE:
        if "replicas" in raw:
            raise ValueError('"replicas" applies to the replicated policy only')
        return FaultPolicy()
    if policy == BUDGET:
        if "replicas" in raw:
            raise ValueError(
                '"replicas" applies to the replicated policy only (a budget '
                "gives each planned position one replica)"
            )
        budget = raw.get("replica_budget")
        if type(budget) is not int or not 1 <= budget <= MAX_BUDGET:
            raise ValueError(
                f"replica_budget must be an integer in [1, {MAX_BUDGET}], got {budget!r}"
            )
        return FaultPolicy(BUDGET, MIN_REPLICAS, budget)
    replicas = raw.get("replicas", MIN_REPLICAS)
    if type(replicas) is not int or not MIN_REPLICAS <= replicas <= MAX_REPLICAS:
        raise ValueError(
            f"replicas must be an integer in [{MIN_REPLICAS}, {MAX_REPLICAS}], got {replicas!r}"
        )
    return FaultPolicy(REPLICATED, replicas)


def _adaptive(raw: dict[str, Any]) -> FaultPolicy:
    if "replicas" in raw or "replica_budget" in raw:
        raise ValueError('the adaptive policy takes "latency_target_ms" (and "mirror_ratio")')
    target = raw.get("latency_target_ms")
    if (
        type(target) not in (int, float)
        or not math.isfinite(target)
        or not MIN_TARGET_MS <= target <= MAX_TARGET_MS
    ):
        raise ValueError(
            f"latency_target_ms must be a number in [{MIN_TARGET_MS:.0f}, {MAX_TARGET_MS:.0f}], "
            f"got {target!r}"
        )
    ratio = raw.get("mirror_ratio")
    if ratio is not None and (
        type(ratio) not in (int, float) or not math.isfinite(ratio) or not 0 <= ratio <= 1
    ):
        raise ValueError(f"mirror_ratio must be a number in [0, 1], got {ratio!r}")
    return FaultPolicy(
        ADAPTIVE, MIN_REPLICAS, 0, float(target), None if ratio is None else float(ratio)
    )
