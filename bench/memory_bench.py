"""Memory of one agent under a unique-key flood: the agent's memory budget against the per-job
bounds alone. Prints one JSON document on stdout.

    python bench/memory_bench.py                    # 100 s flood, a 64 MiB agent budget
    python bench/memory_bench.py --quick            # 45 s
    python bench/memory_bench.py --baseline REF     # and the agent of git commit REF, after it
    python bench/memory_bench.py --budget-mb 256    # the default budget (flattens later)

One ``elf agent`` process masters a QL job (``SELECT word, count(*) AS n FROM ingest GROUP
BY word``, 2 s epochs, live event time) fed unique words through the HTTP ingest endpoint as
fast as it takes them, up to ``--rate`` words/s (the issue's flood: 100,000/s). Every 5 s: the
process RSS, what the agent says it holds (``memory.held_bytes``, absent before the budget
existed) and the job's resident results. Reported per run: the rate achieved, the series,
RSS growth over the last 30 s and the results' resident bytes at the end.

``--baseline REF`` runs the same flood against the agent of commit ``REF`` (its tree extracted
to a temporary directory) with the same config minus ``memory_budget_bytes`` (a key it does
not know): per-job bounds only, at their defaults (256 MiB of results per job). The two runs
are sequential on the same machine, never concurrent (2 shared cores).

The budget here defaults to 64 MiB, not the agent's 256 MiB default, so that the flood -
about 1 MB of results per second at the rate this 2-core machine takes - reaches it within the
run; ``--budget-mb 256`` measures the default (it flattens about four minutes in).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil
from checkout import checkout

from agent.jobs.ql_job import spec_from_query
from agent.server.cluster import LocalCluster

QUERY = "SELECT word, count(*) AS n FROM ingest GROUP BY word"
BATCH = 10_000  # lines per ingest request
EVERY = 5.0  # seconds between samples


def flood(
    seconds: float, rate: int, budget_mb: int | None, code: Path | None = None
) -> dict[str, Any]:
    """One agent flooded for ``seconds`` (module contract); ``budget_mb`` None: no
    ``memory_budget_bytes`` in its config (a baseline that predates it)."""
    with tempfile.TemporaryDirectory(prefix="elf-flood-") as tmp:
        config = Path(tmp) / "agent.toml"
        config.write_text(
            "[runtime]\n"
            + ("" if budget_mb is None else f"memory_budget_bytes = {budget_mb * 2**20}\n")
        )
        cluster = LocalCluster(
            1, Path(tmp) / "c", extra_args=["--config", str(config)], cwd=code
        ).start()
        try:
            client = cluster.client(0)
            client.submit(spec_from_query("flood", "bench", QUERY, epoch_seconds=2))
            proc = psutil.Process(cluster.procs[0].process.pid)
            series: list[dict[str, Any]] = []
            t0 = time.monotonic()
            sent = 0
            next_sample = t0 + EVERY
            while (now := time.monotonic()) - t0 < seconds:
                if sent < (now - t0) * rate:
                    ts = time.time()
                    n = min(BATCH, int((now - t0) * rate) - sent)
                    lines = [f'{{"ts": {ts}, "word": "w{sent + k}"}}' for k in range(n)]
                    client.ingest("ingest", lines)
                    sent += n
                else:
                    time.sleep(0.005)  # the generator is ahead of its rate
                if now >= next_sample:
                    next_sample += EVERY
                    series.append(sample(client, proc, now - t0, sent))
            elapsed = time.monotonic() - t0
            series.append(sample(client, proc, elapsed, sent))
        finally:
            cluster.stop()
    return summarize(series, sent / elapsed, budget_mb)


def sample(client: Any, proc: psutil.Process, t: float, sent: int) -> dict[str, Any]:
    status = client.status()
    job = status["jobs"].get("flood") or {}
    results = (job.get("memory") or {}).get("results") or {}
    memory = status.get("memory")
    return {
        "t_s": round(t, 1),
        "words": sent,
        "rss_mb": round(proc.memory_info().rss / 2**20, 1),
        "held_mb": None if memory is None else round(memory["held_bytes"] / 2**20, 1),
        "results_mb": round(results.get("resident_bytes", 0) / 2**20, 1),
        "spilled_epochs": results.get("spilled_epochs", 0),
    }


def summarize(series: list[dict[str, Any]], rate: float, budget_mb: int | None) -> dict[str, Any]:
    end = series[-1]
    last_30 = [s for s in series if s["t_s"] >= end["t_s"] - 30]
    return {
        "budget_mb": budget_mb,
        "words_per_s": round(rate),
        "rss_mb_end": end["rss_mb"],
        "rss_mb_max": max(s["rss_mb"] for s in series),
        "rss_growth_mb_last_30s": round(end["rss_mb"] - last_30[0]["rss_mb"], 1),
        "results_mb_end": end["results_mb"],
        "held_mb_end": end["held_mb"],
        "spilled_epochs_end": end["spilled_epochs"],
        "series": series,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a 45 s flood")
    parser.add_argument("--seconds", type=float, help="flood length (default 100; quick 45)")
    parser.add_argument("--rate", type=int, default=100_000, help="target words per second")
    parser.add_argument("--budget-mb", type=int, default=64, help="the agent's memory budget")
    parser.add_argument("--baseline", metavar="REF", help="also flood the agent of this commit")
    args = parser.parse_args()
    seconds = args.seconds or (45.0 if args.quick else 100.0)
    out: dict[str, Any] = {
        "benchmark": "memory",
        "quick": args.quick,
        "python": sys.version.split()[0],
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
        "flood": {"seconds": seconds, "target_words_per_s": args.rate},
        "budget": flood(seconds, args.rate, args.budget_mb),
    }
    if args.baseline:
        with checkout(args.baseline) as code:
            out["baseline"] = {"ref": args.baseline, **flood(seconds, args.rate, None, code)}
    json.dump(out, sys.stdout, indent=2)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
