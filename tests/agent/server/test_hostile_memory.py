"""Hostile input, finding 5 of issue 13: a unique-key flood must not grow a master without
bound, and stopping the job must free what it held.

Real agent processes (``LocalCluster``) with a small result budget (``[runtime]
result_memory_bytes``, scaled down from the 256 MB default so the probe runs in seconds): a
QL ``GROUP BY user`` job gets a new set of unique users every epoch through the HTTP ingest
endpoint. Throughout, ``/status`` answers (``StatusWatch``); the master's retained bytes (its
status figure) stay within the budget once its spill task has run, and its RSS stays bounded;
every epoch stays answerable exactly (the oldest from the spill files) or is refused with a
410 naming the bound; stopping the job removes its spill files, and its RSS does not grow.
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

from agent.client import ApiClient, ApiError
from agent.jobs.ql_job import spec_from_query
from agent.server.cluster import LocalCluster

BUDGET = 1_500_000  # bytes of resident results per job at the master
SPILL_BUDGET = 6_000_000  # bytes of spilled results per job
KEYS = 20_000  # unique users per epoch
EPOCHS = 26
# epochs stored before the RSS baseline: RSS ramps up while the first epochs fill the result
# budget and the spill starts (measured: 135, 150, 175, 200, 233 MB after epochs 0..4, then
# flat within ±4 MB), so a baseline taken inside the ramp counted it as growth
WARM_UP = 6
QUERY = "SELECT user, count(*) AS n FROM ingest GROUP BY user"


def lines(epoch: int, start: int) -> list[str]:
    ts = start + epoch
    return [json.dumps({"ts": ts + i / KEYS, "user": f"user-{epoch}-{i:06d}"}) for i in range(KEYS)]


def job_status(client: ApiClient, name: str) -> dict[str, Any] | None:
    return client.status()["jobs"].get(name)


@pytest.fixture
def cluster(tmp_path: Path):
    config = tmp_path / "agent.toml"
    config.write_text(
        "[runtime]\n"
        f"result_memory_bytes = {BUDGET}\n"
        f"result_spill_bytes = {SPILL_BUDGET}\n"
        "worker_memory_bytes = 1000000\n"
    )
    local = LocalCluster(
        2, tmp_path / "c", extra_args=["--config", str(config), "--log-level", "WARNING"]
    )
    with local:
        local.wait_settled(60)
        yield local


@pytest.mark.timeout(300)
def test_unique_key_flood_keeps_the_master_within_its_budget(cluster: LocalCluster) -> None:
    clients = [cluster.client(i) for i in range(cluster.n)]
    # event time about an hour ago: the flood is all history (kept 60 s inside the hour of
    # catch-up the agent admits: at exactly 3600 a second's tick before the check refused it)
    start = int(time.time()) - 3540
    spec = spec_from_query("flood", "t", QUERY, start_epoch=start, idle_timeout=0)
    clients[0].submit(spec)

    def master() -> int | None:
        for i, c in enumerate(clients):
            st = job_status(c, "flood")
            if st and "master" in st["roles"]:
                return i
        return None

    feeder = clients[0]
    wait_until(lambda: all(job_status(c, "flood") for c in clients), 60, "the job everywhere")
    expected = {e: Counter(json.loads(x)["user"] for x in lines(e, start)) for e in range(EPOCHS)}
    for c in clients:  # the first records: the job's tree forms
        c.ingest("ingest", lines(0, start)[:10])
        expected[0].update(json.loads(x)["user"] for x in lines(0, start)[:10])
    wait_until(lambda: master() is not None, 60, "a master")
    m = master()
    assert m is not None
    proc = psutil.Process(cluster.procs[m].process.pid)
    rss_before = 0

    def stored(n: int) -> bool:  # the master stored (or dropped) n epochs
        st = job_status(clients[m], "flood")
        res = st["memory"]["results"] if st else None
        return bool(res) and res["epochs"] + sum(res["dropped"].values()) >= n

    resident_seen: list[int] = []
    with StatusWatch(cluster.procs[m].api_url, cluster.token) as watch:
        for epoch in range(EPOCHS + 1):  # epoch EPOCHS's first records close epoch EPOCHS-1
            if epoch == WARM_UP:  # once the master has stored the warm-up's closed epochs
                wait_until(lambda: stored(WARM_UP - 1), 60, "the warm-up epochs stored")
                rss_before = proc.memory_info().rss
            batch = lines(epoch, start)
            for i in range(0, len(batch), 5000):  # every agent is a worker: feed them all
                clients[(i // 5000) % len(clients)].ingest("ingest", batch[i : i + 5000])
            st = job_status(clients[m], "flood")
            if st is not None:
                resident_seen.append(st["memory"]["results"]["resident_bytes"])

        def spilled_all() -> dict[str, Any] | None:
            st = job_status(clients[m], "flood")
            res = st["memory"]["results"] if st else None
            return res if stored(EPOCHS) and res and res["resident_bytes"] <= BUDGET else None

        results = wait_until(spilled_all, 120, "the master's results within the budget")
    watch.assert_responsive()
    rss_flood = proc.memory_info().rss
    # the status figure: within the budget once the spill task ran; at most a few epochs
    # over it in between (the spill runs after each epoch is stored)
    assert results["resident_bytes"] <= BUDGET
    assert max(resident_seen) <= 3 * BUDGET, resident_seen
    assert results["spilled_epochs"] > 0 and results["spill_bytes"] <= SPILL_BUDGET, results
    # RSS over the last 20 epochs, from the plateau: it ended within 8 MB of it in every
    # measured run (allocator and Arrow pool slack); retaining the epochs, with the decoded
    # keys the lake writer and the results API create, would add ~2 MB per epoch for as long
    # as the flood lasts (an injected 1 MB per spilled epoch grew it by 19 MB)
    assert rss_flood - rss_before < 24 * 2**20, (rss_before, rss_flood)
    # every epoch is answered exactly from memory or spill, or refused naming the bound
    answered = gone = 0
    for epoch in range(EPOCHS):
        try:
            res = feeder.results("flood", start + epoch)
        except ApiError as exc:
            assert exc.status == 410, exc
            assert "spill budget" in str(exc) or "retention" in str(exc), exc
            gone += 1
            continue
        got = Counter({r["user"]: r["n"] for r in res["rows"]})
        assert got == expected[epoch], epoch
        answered += 1
    assert answered >= 3 and answered + gone == EPOCHS
    assert gone == sum(results["dropped"].values())
    data_dir = cluster.procs[m].data_dir  # <data_dir>/<logical agent>/results/results-*/
    assert any(data_dir.rglob("results/*/*.snap"))
    # stopping the job frees what it held: spill files go, memory does not grow
    feeder.stop_job("flood")
    wait_until(lambda: job_status(clients[m], "flood") is None, 60, "the job gone at the master")
    wait_until(lambda: not any(data_dir.rglob("results/*/*.snap")), 30, "spill files removed")
    rss_after = proc.memory_info().rss
    assert rss_after <= rss_flood + 16 * 2**20, (rss_flood, rss_after)
    with pytest.raises(ApiError) as exc:
        feeder.results("flood", start)
    assert exc.value.status == 404
