"""The agent's memory budget under a unique-key flood (issue "A lightweight agent"): one
``[runtime] memory_budget_bytes`` bounds everything the agent holds, with the per-job bounds
left at their 256 MiB defaults.

A real agent process (``LocalCluster``) with a 4 MB budget (scaled down from the 256 MiB
default so the probe runs in seconds) masters a QL ``GROUP BY user`` job fed a new set of
unique users every epoch through the HTTP ingest endpoint. Asserted from its status, polled
throughout: the limits of the consumers that spill, plus what the shedding ones hold, never
pass the budget, and no limit passes its consumer's cap; once the flood is stored, what it
holds comes down within the budget (the results spilled by the budget's limit - far below
their own 256 MiB bound); every epoch is answered exactly (from memory or the spill files)
against a Counter of the input; RSS stays flat after the warm-up; the agent kept answering.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path
from typing import Any

import psutil
import pytest
from agent_helpers import wait_until
from hostile_helpers import StatusWatch

from agent.client import ApiClient
from agent.jobs.ql_job import spec_from_query
from agent.server.cluster import LocalCluster

BUDGET = 4_000_000  # the agent's memory budget, bytes
KEYS = 20_000  # unique users per epoch
EPOCHS = 20
WARM_UP = 6  # epochs before the RSS baseline (the budget fills, the spill starts)
QUERY = "SELECT user, count(*) AS n FROM ingest GROUP BY user"


def lines(epoch: int, start: int) -> list[str]:
    ts = start + epoch
    return [json.dumps({"ts": ts + i / KEYS, "user": f"u-{epoch}-{i:06d}"}) for i in range(KEYS)]


@pytest.fixture
def agent(tmp_path: Path):
    config = tmp_path / "agent.toml"
    config.write_text(f"[runtime]\nmemory_budget_bytes = {BUDGET}\n")
    local = LocalCluster(
        1, tmp_path / "c", extra_args=["--config", str(config), "--log-level", "WARNING"]
    )
    with local:
        local.wait_settled(60)
        yield local


def memory(client: ApiClient) -> dict[str, Any]:
    return client.status()["memory"]


def check_limits(mem: dict[str, Any]) -> None:
    """The spilling consumers' limits leave the shedding ones' bytes within the budget."""
    consumers = mem["consumers"]
    spill = sum(c["limit_bytes"] for c in consumers if c["beyond_limit"] == "spill")
    shed_held = sum(c["bytes"] for c in consumers if c["beyond_limit"] == "shed")
    assert spill + shed_held <= mem["budget_bytes"], consumers
    for c in consumers:
        assert c["cap_bytes"] is None or c["limit_bytes"] <= c["cap_bytes"], c
        assert c["beyond_limit"] in ("spill", "shed"), c


@pytest.mark.timeout(300)
def test_a_unique_key_flood_stays_within_the_agents_memory_budget(agent: LocalCluster) -> None:
    client = agent.client(0)
    start = int(time.time()) - 3600  # event time an hour ago: the flood is all history
    client.submit(spec_from_query("flood", "t", QUERY, start_epoch=start, idle_timeout=0))
    wait_until(lambda: client.status()["jobs"].get("flood"), 60, "the job")
    expected = {e: Counter(json.loads(x)["user"] for x in lines(e, start)) for e in range(EPOCHS)}
    proc = psutil.Process(agent.procs[0].process.pid)

    def results() -> dict[str, Any]:
        return client.status()["jobs"]["flood"]["memory"]["results"]

    def stored(n: int) -> bool:
        res = results()
        return res["epochs"] + sum(res["dropped"].values()) >= n

    seen: list[dict[str, Any]] = []
    rss_before = 0
    with StatusWatch(agent.procs[0].api_url, agent.token) as watch:
        for epoch in range(EPOCHS + 1):  # epoch EPOCHS's first record closes EPOCHS - 1
            if epoch == WARM_UP:
                wait_until(lambda: stored(WARM_UP - 1), 60, "the warm-up epochs stored")
                rss_before = proc.memory_info().rss
            batch = lines(epoch, start) if epoch < EPOCHS else lines(epoch, start)[:1]
            for i in range(0, len(batch), 5000):
                client.ingest("ingest", batch[i : i + 5000])
            seen.append(memory(client))

        def settled() -> dict[str, Any] | None:
            mem = memory(client)
            seen.append(mem)
            ok = stored(EPOCHS) and mem["held_bytes"] <= BUDGET and mem["rebalances"] > 0
            return mem if ok else None

        settled_mem = wait_until(settled, 60, "what the agent holds within its budget")
    watch.assert_responsive()
    for mem in seen:
        if mem["consumers"]:
            check_limits(mem)
    res = results()
    print("settled:", json.dumps(settled_mem), "\nresults:", json.dumps(res))
    names = {c["name"]: c for c in settled_mem["consumers"]}
    limit = names["results of job flood"]["limit_bytes"]
    assert limit <= BUDGET < 256 * 2**20, names  # the budget spilled them, not their own bound
    assert res["budget_bytes"] <= BUDGET and res["spilled_epochs"] > 0, res
    assert not res["dropped"], res  # the spill budget (4 GiB) dropped nothing
    assert {"checkpoints held for other agents", "worker buffers of job flood"} <= set(names)
    assert names["retained epochs of job flood"]["beyond_limit"] == "shed"
    # RSS from the plateau: flat (allocator slack); holding every epoch would add ~1 MB each
    rss_growth = proc.memory_info().rss - rss_before
    print(f"rss {rss_before / 2**20:.1f} MB after the warm-up, growth {rss_growth / 2**20:.1f} MB")
    assert rss_growth < 24 * 2**20, rss_growth
    # every epoch is answered exactly, the oldest from the spill files
    for epoch in range(EPOCHS):
        rows = client.results("flood", start + epoch)["rows"]
        assert Counter({r["user"]: r["n"] for r in rows}) == expected[epoch], epoch
