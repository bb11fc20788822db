"""The operator's view, measured: what a ``/metrics`` scrape costs and what the OpenAPI
request validation adds. Prints one JSON document on stdout.

    python bench/ops_bench.py            # 4 logical agents, 64 jobs, 200 scrapes
    python bench/ops_bench.py --quick    # 2 logical agents, 8 jobs, 50 scrapes

N real agents (overlay over UDP, data plane and API over HTTP) run in this process; J wordcount
jobs run on all of them and every agent ingested some lines, so every job has workers, trees
and (on some agent) a master with stored epochs. Measured on the agent that masters the most
jobs:

* ``scrape``: ``GET /metrics`` with the token over loopback HTTP — latency percentiles, the
  exposition's bytes and series, and how late a 1 ms sleep on the event loop woke up while
  scraping back to back, against 2 s of the same agents without scrapes;
* ``status``: ``GET /api/v1/status`` the same way, for comparison (the same figures as JSON);
* ``validation``: ``RequestValidator.check`` alone on a valid job spec and on one the schema
  refuses (µs per call, in this thread).

All agents share this machine's cores (the lead re-measures on a quiet machine).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import statistics
import sys
import time
from pathlib import Path

import aiohttp
import orjson
import requests
from aiohttp.test_utils import make_mocked_request

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "agent"))

from agent_helpers import lines, running_agents

from agent.errors import BadRequest
from agent.runtime.ops.openapi import RequestValidator


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1)], 3)


async def timed_gets(url: str, token: str, n: int) -> tuple[list[float], int]:
    """``n`` GETs back to back from another thread (a scraper is another process: its own
    parsing must not run on the agents' loop), timed there."""

    def scrape() -> tuple[list[float], int]:
        times, size = [], 0
        with requests.Session() as s:
            for _ in range(n):
                t0 = time.perf_counter()
                r = s.get(url, headers={"Authorization": f"Bearer {token}"}, timeout=30)
                assert r.status_code == 200, r.status_code
                times.append((time.perf_counter() - t0) * 1000)
                size = len(r.content)
        return times, size

    return await asyncio.to_thread(scrape)


class LagProbe:
    """How late a 1 ms sleep on the event loop wakes up, while it runs (max and p99, ms)."""

    def __init__(self) -> None:
        self.lags: list[float] = []
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        while True:
            t0 = time.perf_counter()
            await asyncio.sleep(0.001)
            self.lags.append((time.perf_counter() - t0 - 0.001) * 1000)

    def __enter__(self) -> LagProbe:
        self._task = asyncio.ensure_future(self._run())
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()

    def figures(self) -> dict[str, float]:
        return {
            "loop_lag_p99_ms": pct(self.lags, 0.99),
            "loop_lag_max_ms": round(max(self.lags), 3),
        }


def validation(n: int) -> dict[str, float]:
    validator = RequestValidator()
    good = orjson.dumps({"name": "bench", "creator": "t", "job_class": "wordcount", "trees": 2,
                         "epoch_seconds": 1.0, "params": {"min_length": 3}})  # fmt: skip
    bad = orjson.dumps({"name": "bench", "creator": "t", "job_class": "wordcount", "trees": "2"})
    request = make_mocked_request("POST", "/api/v1/jobs")
    out = {}
    for label, body in (("valid_spec_us", good), ("refused_spec_us", bad)):
        t0 = time.perf_counter()
        for _ in range(n):
            with contextlib.suppress(BadRequest):
                _check(validator, request, body)
        out[label] = round((time.perf_counter() - t0) / n * 1e6, 1)
    return out


def _check(validator: RequestValidator, request: object, body: bytes) -> None:
    """One validation, in this thread (``check`` awaits nothing: one step completes it)."""
    coro = validator.check(request, body)  # type: ignore[arg-type]
    with contextlib.suppress(StopIteration):
        coro.send(None)


async def run(agents_n: int, jobs: int, scrapes: int) -> dict:
    async with running_agents(agents_n) as agents:
        e = math.floor(time.time())
        for j in range(jobs):
            await agents[0].submit({"name": f"wc{j}", "creator": "bench", "job_class": "wordcount"})
        for a in agents:
            await a.ingest("ingest", lines(e + 2, ["a b c", "d e"] * 50))
        await asyncio.sleep(4)  # a few epochs close and roll up
        target = max(agents, key=lambda a: sum("master" in r.roles() for r in a.runtimes.values()))
        token = target.config.api_token
        with LagProbe() as idle:  # the same time without scrapes: the baseline lag
            await asyncio.sleep(2.0)
        with LagProbe() as during:
            scrape, size = await timed_gets(target.api.url + "/metrics", token, scrapes)
        status, status_size = await timed_gets(target.api.url + "/api/v1/status", token, scrapes)
        async with (
            aiohttp.ClientSession() as s,
            s.get(target.api.url + "/metrics", headers={"Authorization": f"Bearer {token}"}) as r,
        ):
            series = sum(1 for line in (await r.text()).splitlines() if line and line[0] != "#")
        masters = sum("master" in r.roles() for r in target.runtimes.values())
        return {
            "agents": agents_n,
            "jobs": jobs,
            "jobs_mastered_by_scraped_agent": masters,
            "scrape": {
                "n": scrapes,
                "p50_ms": pct(scrape, 0.5),
                "p99_ms": pct(scrape, 0.99),
                "mean_ms": round(statistics.fmean(scrape), 3),
                "bytes": size,
                "series": series,
                "while_scraping": during.figures(),
                "without_scrapes": idle.figures(),
            },
            "status": {
                "n": scrapes,
                "p50_ms": pct(status, 0.5),
                "p99_ms": pct(status, 0.99),
                "bytes": status_size,
            },
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--agents", type=int)
    parser.add_argument("--jobs", type=int)
    parser.add_argument("--scrapes", type=int)
    args = parser.parse_args()
    agents = args.agents or (2 if args.quick else 4)
    jobs = args.jobs or (8 if args.quick else 64)
    scrapes = args.scrapes or (50 if args.quick else 200)
    out = asyncio.run(run(agents, jobs, scrapes))
    out["validation"] = validation(200 if args.quick else 2000)
    out["mode"] = "quick" if args.quick else "full"
    json.dump(out, sys.stdout, indent=2)
    print()


if __name__ == "__main__":
    main()
