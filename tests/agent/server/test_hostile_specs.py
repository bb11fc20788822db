"""Hostile job specs against real agent processes (issue 13, findings 2, 3 and 7).

Four ``elf agent`` processes on loopback run a reference WordCount job while every probe of
the issue is submitted (or sent as a runtime change) to one agent or another: each gets the
documented 400 naming the field, none reaches any agent's job table, ``/status`` stays
responsive throughout (:class:`StatusWatch`), and the reference job's epochs stay exact
against a Counter. Then the reference job is stopped, collected from every agent's table after
the short ``stopped_job_ttl`` this cluster is configured with, and its name runs again.
"""

from __future__ import annotations

import json
import math
import time
from collections import Counter
from typing import Any

import orjson
import pytest
from agent_helpers import wait_until
from hostile_helpers import StatusWatch

from agent.client import ApiClient, ApiError
from agent.server.cluster import LocalCluster

AGENTS = 4
TTL = 2.0
REF = {"name": "ref", "creator": "tests", "job_class": "wordcount", "inputs": ["ingest"],
       "epoch_seconds": 1, "allowed_lateness": 0.5}  # fmt: skip
TEXTS = ["alpha beta", "beta gamma gamma", "delta"]

#: (name, spec fields or raw JSON text of them, the field the 400 must name)
SUBMIT_PROBES: list[tuple[str, Any, str]] = [
    ("min-length-str", {"params": {"min_length": "3"}}, "params.min_length"),
    ("min-length-2-64", '{"params": {"min_length": 18446744073709551616}}', "params.min_length"),
    ("param-int64", {"params": {"x": 2**63}}, "params.x"),
    ("start-2-64", '{"start_epoch": 18446744073709551616}', "start_epoch"),
    ("start-neg", {"start_epoch": -5}, "start_epoch"),
    ("start-zero", {"start_epoch": 0}, "start_epoch"),
    ("start-far-ahead", {"start_epoch": 10**12}, "start_epoch"),
    ("epoch-1e-9", {"epoch_seconds": 1e-9}, "epoch_seconds"),
    ("epoch-1e-4", {"epoch_seconds": 1e-4}, "epoch_seconds"),
    ("lake-flood", {"trees": 64}, "epoch_seconds"),  # 64 lake files per second
    ("top-k", {"top_k": 10**9}, "top_k"),
    ("huge-params", {"params": {"x": "y" * 8000}}, "spec"),
    ("lateness", {"allowed_lateness": 1e9}, "allowed_lateness"),
]
CHANGE_PROBES: list[tuple[dict[str, Any], str]] = [
    ({"epoch_seconds": 1e-4}, "epoch_seconds"),
    ({"epoch_seconds": 1e-9}, "epoch_seconds"),
    ({"params": {"min_length": "3"}}, "params.min_length"),
    ({"allowed_lateness": 1e9}, "allowed_lateness"),
    ({"top_k": 2**62}, "top_k"),
]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Any:
    root = tmp_path_factory.mktemp("hostile-specs")
    config = root / "agent.toml"
    config.write_text(f"[runtime]\nstopped_job_ttl = {TTL}\nresync_seconds = 1.0\n")
    local = LocalCluster(
        AGENTS, root, extra_args=["--log-level", "WARNING", "--config", str(config)]
    )
    local.start(timeout=90)
    local.wait_settled(60)
    yield local
    local.stop()


def submit_raw(client: ApiClient, name: str, fields: Any) -> Any:
    """Submit ``REF`` with ``fields`` under ``name``; raw JSON text keeps integers the
    client's encoder would refuse (2**64) exactly as an attacker sends them."""
    if isinstance(fields, str):
        body = orjson.dumps({**REF, "name": name})[:-1] + b", " + fields.strip()[1:].encode()
        return client.call("POST", "/api/v1/jobs", raw=body)
    return client.submit({**REF, "name": name, **fields})


def exact(client: ApiClient, epoch: int) -> Counter | None:
    try:
        res = client.results("ref", epoch)
    except ApiError as exc:
        if exc.status in (404, 503):
            return None
        raise
    return Counter({k: v for k, v in res["rows"]}) if res["complete"] else None


def test_hostile_specs_are_refused_naming_the_field_and_the_cluster_runs_on(
    cluster: LocalCluster,
) -> None:
    clients = [cluster.client(i) for i in range(AGENTS)]
    e0 = math.floor(time.time()) + 2
    info = clients[0].submit({**REF, "start_epoch": e0})
    assert info["agents_reached"] == AGENTS
    want: dict[int, Counter] = {}
    with StatusWatch(cluster.procs[1].api_url, cluster.token) as watch:
        for epoch in range(e0, e0 + 3):  # every agent ingests the same lines, in time order
            batch = [
                json.dumps({"ts": epoch + 0.1 + i / 10, "line": t}) for i, t in enumerate(TEXTS)
            ]
            for c in clients:
                assert c.ingest("ingest", batch)["accepted"] == len(TEXTS)
            want[epoch] = Counter(
                {w: n * AGENTS for w, n in Counter(" ".join(TEXTS).split()).items()}
            )
        for i, (name, fields, field) in enumerate(SUBMIT_PROBES):
            with pytest.raises(ApiError) as err:
                submit_raw(clients[i % AGENTS], name, fields)
            assert (err.value.status, err.value.field) == (400, field), (name, err.value)
            assert field in err.value.message
        for i, (change, field) in enumerate(CHANGE_PROBES):
            with pytest.raises(ApiError) as err:
                clients[(i + 1) % AGENTS].change("ref", change)
            assert (err.value.status, err.value.field) == (400, field), (change, err.value)
        for epoch, counts in want.items():
            wait_until(lambda e=epoch, w=counts: exact(clients[e % AGENTS], e) == w, 60, f"{epoch}")
    watch.assert_responsive()
    for c in clients:  # no probe reached any table; no agent failed to run anything
        assert [j["name"] for j in c.jobs()] == ["ref"]
        failed = ("job_start_errors", "tick_errors", "task_failed")
        assert not [k for k in c.status()["counters"] if k.startswith(failed)]

    # finding 7: the stopped job leaves every agent's table after the TTL; its name is free
    stopped = clients[2].stop_job("ref")
    assert stopped["state"] == "stopped"
    wait_until(lambda: all(c.jobs() == [] for c in clients), 10 * TTL + 20, "ref collected")
    again = clients[3].submit({**REF, "start_epoch": math.floor(time.time()) + 1})
    assert again["version"] == stopped["version"] + 1 and again["agents_reached"] == AGENTS
