"""The agent's own CPU cap: ``max_cores`` (CPU affinity) and ``nice`` (scheduling priority).

Contract: :func:`apply_cpu_limits` restricts the calling process (and the threads and child
processes it starts afterwards) to at most ``max_cores`` of the CPUs it may run on now (the
lowest-numbered ones; 0: unchanged) and raises its niceness by ``nice`` (0: unchanged), so an
operator can run the agent beside a webserver without it taking every core. Returns what it
applied (``cores``: the CPUs now allowed, ``nice``: the niceness now), also reported by the
agent's status. Where the platform has no affinity call (macOS), ``max_cores`` is refused
with ``ValueError`` rather than ignored.
"""

from __future__ import annotations

import os
from typing import Any


def apply_cpu_limits(max_cores: int = 0, nice: int = 0) -> dict[str, Any]:
    """Cap this process's CPUs and priority (see module docstring)."""
    cores: list[int] | None = None
    if hasattr(os, "sched_getaffinity"):
        allowed = sorted(os.sched_getaffinity(0))
        if max_cores and max_cores < len(allowed):
            os.sched_setaffinity(0, allowed[:max_cores])
        cores = sorted(os.sched_getaffinity(0))
    elif max_cores:
        raise ValueError("max_cores needs CPU affinity (Linux); this platform has none")
    level = os.nice(nice) if nice else os.nice(0)
    return {"cores": cores, "nice": level}
