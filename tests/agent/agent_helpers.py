"""In-process agents for runtime tests: real overlay (UDP), data plane and API (HTTP) on
loopback, several logical agents in this test's event loop, fast maintenance timings."""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import json
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

from agent.config import load_config
from agent.runtime.host.agent import Agent, spans_one_tree
from agent.server.daemon import freeze_heap, start_agents, stop_agents
from agent.tunables import RuntimeTunables
from overlay import Tunables

SECRET = "runtime-test-secret-0123456789abcdef"
FAST = Tunables(
    probe_interval=0.2,
    probe_timeout=0.3,
    request_timeout=0.5,
    fail_timeout=1.0,
    leaf_refresh_interval=1.0,
    slot_refresh_interval=0.5,
    # fixed refresh periods: in-process agent tests keep the timings they were written for
    # (tests/overlay/test_trickle.py covers the stretching; cluster tests run production's)
    leaf_refresh_max_interval=1.0,
    slot_refresh_max_interval=0.5,
)


async def wait_for(predicate: Callable[[], Any], timeout: float, what: str) -> Any:
    """Poll ``predicate`` (sync or async) until truthy; fail naming ``what``."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = predicate()
        if asyncio.iscoroutine(last):
            last = await last
        if last:
            return last
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}; last: {last!r}")


def wait_until(predicate: Callable[[], Any], timeout: float, what: str, step: float = 0.2) -> Any:
    """Wait for a condition on *another process's* state (an agent process, read over its
    HTTP API) until ``timeout``: there is no event to wait on across processes, so this is the
    suite's one polling loop (every ``step`` s, bounded by the deadline); an API error counts
    as "not yet". Fails naming ``what`` and the last value seen."""
    from agent.client import ApiError

    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = predicate()
        except ApiError as exc:
            last = exc
        else:
            if last:
                return last
        time.sleep(step)  # the poll interval of a cross-process condition, not a guess
    raise AssertionError(f"timed out after {timeout}s waiting for {what}; last: {last!r}")


def settled(agents: list[Agent]) -> bool:
    return spans_one_tree([a.jobs_tree() for a in agents])


@asynccontextmanager
async def running_agents(n: int, runtime: RuntimeTunables | None = None, **overrides: Any):  # type: ignore[no-untyped-def]
    """``n`` logical agents in this loop; ``runtime``: their runtime tunables (default ones)."""
    cfg = load_config(env={"ELF_SECRET": SECRET}, overrides={"logical_agents": n, **overrides})
    cfg = dataclasses.replace(cfg, tunables=FAST, heartbeat_interval=0.3)
    if runtime is not None:
        cfg = dataclasses.replace(cfg, runtime=runtime)
    agents = await start_agents(cfg)
    try:
        await wait_for(lambda: settled(agents), 30, "the jobs tree to span every agent")
        # as the daemon does once its agents are up; here it also takes the suite's own heap
        # (every earlier test's objects) out of the collector's reach: a full collection of
        # it paused this shared loop ~190-380 ms in a full-suite run, which the agents'
        # processes never see
        freeze_heap()
        yield agents
    finally:
        gc.unfreeze()  # the next test's garbage is collected as usual
        await stop_agents(agents, timeout=30)


def lines(ts: float, texts: list[str]) -> list[str]:
    return [json.dumps({"ts": ts, "line": t}) for t in texts]


def word_counts(texts: list[str], n_agents: int, min_length: int = 1) -> Counter:
    """Reference: the words of ``texts`` (at least ``min_length`` long) as ingested by each of
    ``n_agents`` agents."""
    c: Counter = Counter()
    for text in texts:
        c.update(w for w in text.split() if len(w) >= min_length)
    return Counter({k: v * n_agents for k, v in c.items()})


async def complete_result(agent: Any, job: str, epoch: int) -> Counter | None:
    """A job's complete result for ``epoch`` as a Counter (None until complete); QL rows
    ``{"line", "n"}`` or ``[key, value]`` pairs."""
    try:
        res = await agent.results(job, epoch)
    except Exception:
        return None
    if not res["complete"]:
        return None
    rows = res["rows"]
    if rows and isinstance(rows[0], dict):
        return Counter({r["line"]: r["n"] for r in rows})
    return Counter({k: v for k, v in rows})


@contextmanager
def tailing_cluster(root: Path, agents: int) -> Iterator[tuple[Any, dict[int, dict[str, str]]]]:
    """``agents`` agent processes on loopback, each tailing its own (empty) log file
    ``root/input-i.jsonl`` as input ``lines``, started and settled; stopped on exit.
    Yields the cluster and its inputs (agent index -> {input name: path})."""
    from agent.server.cluster import LocalCluster

    inputs = {i: {"lines": str(root / f"input-{i}.jsonl")} for i in range(agents)}
    for spec in inputs.values():
        Path(spec["lines"]).touch()
    local = LocalCluster(agents, root, inputs=inputs, extra_args=["--log-level", "WARNING"])
    local.start(timeout=90)
    try:
        local.wait_settled(60)
        yield local, inputs
    finally:
        local.stop()


async def master_knowing_every_origin(agents: list[Any], job: str) -> tuple[Any, list[Any]]:
    """Wait for ``job``'s master among ``agents`` and for it to count every agent as an
    origin; returns the master and the other agents."""
    master = await wait_for(
        lambda: next((a for a in agents if "master" in a.runtimes[job].roles()), None),
        20,
        "a master",
    )
    membership = master.runtimes[job].recovery.membership
    await wait_for(
        lambda: all(membership.is_member(a.overlay.id) for a in agents),
        20,
        "the master to know every agent as an origin",
    )
    return master, [a for a in agents if a is not master]
