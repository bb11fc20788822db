"""The steady-state window the fault and redundancy benchmarks measure on a chaos cluster.

Contract. :func:`measure_window` waits for ``seconds`` more stored epochs of a job on a
running :class:`~agent.server.chaos.ChaosCluster` and returns, over that window: its wall
time (``measured_s``), the CPU (user + system, psutil) of all agent processes in cores
(``cpu_cores_all_agents``) and per agent in percent, each of the caller's counters as a rate
per second (``counter_rates``, in the order ``counters`` returns them, sampled before and after),
and the roll-up latency of the epochs stored in it (:func:`rollup_ms`, summarised by
:func:`latency.summary`). It never sleeps: it waits on the job's stored epochs.

:func:`steady_cluster` is the cluster those windows run on: ``n`` started agent processes (an
``agent.toml`` text as ``config``, if given) with a :class:`~agent.server.chaos.LogWriter`
writing ``rate`` lines/s to each, both stopped on leaving it, even on an error.

Bounds: one wait of at most ``timeout + seconds``; the counters are read twice.
"""

from __future__ import annotations

import contextlib
import math
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import psutil
from latency import summary

from agent.server.chaos import ChaosCluster, LogWriter


def rollup_ms(chaos: ChaosCluster, job: str, epochs: range) -> list[float]:
    """Per epoch: the master's stored time minus the last other agent's send (ms)."""
    timings = chaos.timings(job)
    tid = chaos.any_client().status()["jobs"][job]["tree_ids"][0]
    done: dict[int, float] = {}
    sends: dict[int, list[float]] = {}
    for t in timings:
        mine = {e: at for t_, e, at in t["completed_at"] if t_ == tid}
        done.update(mine)
        if not mine:
            for t_, e, at in t["sent_at"]:
                if t_ == tid:
                    sends.setdefault(e, []).append(at)
    return [1000 * (done[e] - max(sends[e])) for e in epochs if e in done and sends.get(e)]


def measure_window(
    chaos: ChaosCluster,
    job: str,
    seconds: float,
    timeout: float,
    counters: Callable[[ChaosCluster], Sequence[int]] | None = None,
) -> dict[str, Any]:
    """CPU, counter rates and roll-up latency over ``seconds`` stored epochs (contract)."""
    procs = [psutil.Process(pid) for pid in chaos.pids()]
    before = list(counters(chaos)) if counters else []
    cpu0 = [p.cpu_times() for p in procs]
    t0, first = time.monotonic(), math.floor(time.time()) + 1
    chaos.wait_stored(job, first + math.ceil(seconds), timeout=timeout + seconds)
    cpu1 = [p.cpu_times() for p in procs]
    after = list(counters(chaos)) if counters else []
    wall = time.monotonic() - t0
    used = sum(b.user - a.user + b.system - a.system for a, b in zip(cpu0, cpu1, strict=True))
    last = chaos.stored(job) or first
    return {
        "measured_s": round(wall, 2),
        "cpu_cores_all_agents": round(used / wall, 3),
        "cpu_percent_per_agent": round(100 * used / wall / len(procs), 2),
        "counter_rates": [round((b - a) / wall) for a, b in zip(before, after, strict=True)],
        "rollup_ms": summary(rollup_ms(chaos, job, range(first, last + 1))),
    }


@contextlib.contextmanager
def steady_cluster(
    n: int, prefix: str, rate: float, config: str | None = None
) -> Iterator[tuple[ChaosCluster, LogWriter]]:
    """A started cluster and its log writer, both stopped on exit (module contract)."""
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        extra: list[str] = []
        if config is not None:
            path = Path(tmp) / "agent.toml"
            path.write_text(config)
            extra = ["--config", str(path)]
        chaos = ChaosCluster(n, Path(tmp), extra_args=extra)
        writer: LogWriter | None = None
        try:
            chaos.start(timeout=180)
            writer = LogWriter(chaos.paths, rate=rate).start()
            yield chaos, writer
        finally:
            if writer is not None:
                writer.stop()
            chaos.stop()
