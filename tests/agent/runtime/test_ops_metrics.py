"""The operator's view of one agent over real sockets: ``/metrics`` figures against an
independent reference (what the test sent, counted by a Counter), the probes' semantics and
what they leak, the token rules (``metrics_public``), the OpenAPI document against the app's
routes, and its request validation's 400s naming the field."""

from __future__ import annotations

import asyncio
import dataclasses
import math
import re
import time
from collections import Counter
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
from agent_helpers import complete_result as result
from agent_helpers import lines, running_agents, wait_for
from prometheus_client.parser import text_string_to_metric_families

from agent.config import load_config
from agent.errors import ConfigError
from agent.runtime.host.agent import Agent
from agent.runtime.ops.http_api import HttpApi
from agent.runtime.ops.metrics import AgentMetrics
from agent.runtime.ops.openapi import DOCUMENT, DOCUMENT_BYTES, app_routes, document_routes
from agent.runtime.ops.ops_api import install

ROOT = Path(__file__).resolve().parents[3]
ALLOWED_LABELS = {"job", "input", "reason", "role", "kind", "le"}


def parse(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of an exposition, by (name, sorted labels), with prometheus_client's own
    parser (an independent reading of the text we produced)."""
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def value(samples: dict, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


async def get(url: str, token: str | None = None) -> tuple[int, bytes, str]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with aiohttp.ClientSession() as s, s.get(url, headers=headers) as r:
        return r.status, await r.read(), r.headers.get("Content-Type", "")


async def post(url: str, token: str, body: bytes) -> tuple[int, Any]:
    headers = {"Authorization": f"Bearer {token}"}
    async with aiohttp.ClientSession() as s, s.post(url, headers=headers, data=body) as r:
        return r.status, orjson.loads(await r.read())


async def scrape(agent: Agent) -> dict:
    status, body, ctype = await get(agent.api.url + "/metrics", agent.config.api_token)
    assert status == 200 and ctype.startswith("text/plain; version=0.0.4")
    return parse(body.decode())


async def test_metrics_count_what_was_sent() -> None:
    """Ingest N good and K bad lines per agent over HTTP: the counters equal the reference;
    epochs closed, the roll-up and multicast histograms at the master and the roles agree
    with the runtime's own records; a stopped job's series go away."""
    good = ["a b", "b c", "c"]
    bad = [b"not json", b'{"no": "ts"}', b'{"ts": "yesterday", "line": "x"}', b"[1]"]
    async with running_agents(2) as agents:
        e = math.floor(time.time()) + 1
        spec = {"name": "wc", "creator": "t", "job_class": "wordcount", "start_epoch": e,
                "allowed_lateness": 0.5}  # fmt: skip
        await agents[0].submit(spec)
        reasons: Counter[str] = Counter()
        sent_bytes = 0
        for a in agents:
            body = [x.encode() for x in lines(e + 0.1, good)] + bad
            sent_bytes = sum(len(x) for x in body)
            status, reply = await post(
                a.api.url + "/api/v1/ingest/ingest", a.config.api_token, b"\n".join(body) + b"\n"
            )
            assert status == 200 and reply["accepted"] == len(good)
            reasons = Counter(err["reason"] for err in reply["errors"])
        assert sum(reasons.values()) == len(bad)
        await wait_for(lambda: result(agents[0], "wc", e), 15, "the first epoch")
        master = next(a for a in agents if "master" in a.runtimes["wc"].roles())
        await wait_for(lambda: master.runtimes["wc"].control.multicast_stats, 10, "a multicast")
        for a in agents:
            m = await scrape(a)
            assert value(m, "elf_ingest_lines_total", input="ingest") == len(good) + len(bad)
            assert value(m, "elf_ingest_bytes_total", input="ingest") == sent_bytes
            assert value(m, "elf_ingest_records_total", input="ingest") == len(good)
            for reason, n in reasons.items():
                got = value(m, "elf_ingest_rejected_lines_total", input="ingest", reason=reason)
                assert got == n, reason
            worker = a.runtimes["wc"].pipeline.worker_stats() or {}
            assert value(m, "elf_job_records_total", job="wc") == worker["records_in"]
            await wait_for(lambda a=a: _closed_agrees(a), 10, "epochs closed = the worker's")
            is_master = a is master
            assert value(m, "elf_job_role", job="wc", role="master") == float(is_master)
            assert value(m, "elf_job_role", job="wc", role="worker") == 1.0
            assert value(m, "elf_agent_ready") == 1.0
            assert value(m, "process_resident_memory_bytes") > 0
            # bounded labels: only the documented names, never an id
            for name, labels in m:
                assert {k for k, _ in labels} <= ALLOWED_LABELS, name
                assert not any(re.fullmatch(r"[0-9a-f]{40}", v) for _, v in labels), name
        # Epochs may go on closing (the idle clock): compare a scrape and the runtime's own
        # records read at one instant, until they agree.
        await wait_for(lambda: _master_agrees(master), 10, "the histograms = the runtime's")
        await agents[0].stop_job("wc")
        await wait_for(lambda: "wc" not in master.runtimes, 10, "the job stopped")
        await scrape(master)  # the stopped job's histogram children are pruned after this one
        m = await scrape(master)
        assert not [k for k in m if ("job", "wc") in k[1]]


async def _closed_agrees(agent: Agent) -> bool:
    m = await scrape(agent)
    worker = agent.runtimes["wc"].pipeline.worker_stats() or {}
    return value(m, "elf_epochs_closed_total", job="wc") == worker["epochs_emitted"] > 0


async def _master_agrees(master: Agent) -> bool:
    """The master's histogram counts against its own records: stored epochs (``timings``,
    fewer than the 64 it lists) and multicasts by kind (fewer than the 64 it keeps)."""
    m = await scrape(master)
    runtime = master.runtimes["wc"]
    stored = len(runtime.report.timings()["completed_at"])
    sent = Counter(x["kind"] for x in runtime.control.multicast_stats)
    return (
        value(m, "elf_rollup_latency_seconds_count", job="wc") == stored > 0
        and all(
            value(m, "elf_multicast_latency_seconds_count", job="wc", kind=kind) == n
            for kind, n in sent.items()
        )
        and value(m, "elf_epochs_committed_total", job="wc") == runtime.counters.get("commits", 0)
    )


async def test_probes_tokens_and_the_contract_over_http() -> None:
    async with running_agents(1) as (agent,):
        url, token = agent.api.url, agent.config.api_token
        status, body, _ = await get(url + "/healthz")
        assert (status, orjson.loads(body)) == (200, {"status": "ok"})
        await wait_for(lambda: all(agent.readiness().values()), 15, "ready")
        status, body, _ = await get(url + "/readyz")
        ready = orjson.loads(body)
        assert status == 200 and ready["ready"] is True
        assert all(v is True for v in ready["checks"].values())
        leaked = [f"{agent.overlay.id:040x}", str(agent.overlay.info.address[1]), "127.0.0.1"]
        await agent.submit({"name": "secret-job-name", "creator": "t", "job_class": "wordcount"})
        for path in ("/healthz", "/readyz"):
            _, body, _ = await get(url + path)
            assert not any(x.encode() in body for x in [*leaked, "secret-job-name"]), path
        assert (await get(url + "/metrics"))[0] == 401  # metrics_public is off by default
        status, body, _ = await get(url + "/metrics", token)
        assert status == 200 and b'job="secret-job-name"' in body
        assert (await get(url + "/api/v1/status"))[0] == 401
        status, body, ctype = await get(url + "/api/v1/openapi.json")
        assert status == 200 and body == DOCUMENT_BYTES and ctype.startswith("application/json")
        # the document validates requests: a 400 naming the field, before any handler ran
        for spec, field in (
            ({"name": "x", "creator": "t", "job_class": "wordcount", "trees": "2"}, "trees"),
            ({"name": "x", "creator": "t"}, "job_class"),
            ({"name": "x", "creator": "t", "job_class": "wordcount", "bogus": 1}, "bogus"),
            ({"name": "x y", "creator": "t", "job_class": "wordcount"}, "name"),
        ):
            status, reply = await post(url + "/api/v1/jobs", token, orjson.dumps(spec))
            assert status == 400 and reply["field"] == field and field in reply["error"], reply
        # a large body is validated in a worker thread (THREAD_BODY_BYTES), then refused
        # by the spec's own size bound, naming it
        big = {"name": "x", "creator": "t", "job_class": "wordcount",
               "params": {str(i): {"a": [i] * 5} for i in range(20_000)}}  # fmt: skip
        status, reply = await post(url + "/api/v1/jobs", token, orjson.dumps(big))
        assert status == 400 and reply["field"] == "spec", reply
        big["trees"] = "2"
        status, reply = await post(url + "/api/v1/jobs", token, orjson.dumps(big))
        assert status == 400 and reply["field"] == "trees", reply
        status, reply = await post(url + "/api/v1/jobs", token, b"\x80 not json")
        assert status == 400 and "not valid JSON" in reply["error"]
        for query, field in (("epoch=abc", "epoch"), ("epoch=-1", "epoch")):
            status, body, _ = await get(
                url + f"/api/v1/jobs/secret-job-name/results?{query}", token
            )
            reply = orjson.loads(body)
            assert status == 400 and reply["field"] == field and reply["error"], reply
        assert "x" not in agent.runtimes  # nothing refused was submitted


async def test_metrics_public_opens_only_metrics() -> None:
    async with running_agents(1, metrics_public=True) as (agent,):
        status, body, _ = await get(agent.api.url + "/metrics")
        assert status == 200 and b"elf_agent_uptime_seconds" in body
        assert (await get(agent.api.url + "/api/v1/jobs"))[0] == 401


async def test_readyz_is_503_with_the_failing_checks() -> None:
    class NotYet:
        def readiness(self) -> dict[str, bool]:
            return {"started": True, "overlay": False, "jobs_tree": False, "job_table": False}

    class NoFigures:
        def metrics_node(self) -> dict[str, Any]:
            return {}

        def metrics_inputs(self) -> dict[str, Any]:
            return {}

        def metrics_jobs(self) -> dict[str, Any]:
            return {}

    api = HttpApi(NotYet(), "token")  # type: ignore[arg-type]
    install(api, NotYet(), AgentMetrics(NoFigures(), process=False))
    await api.start()
    try:
        status, body, _ = await get(api.url + "/readyz")
        assert status == 503 and orjson.loads(body) == {
            "ready": False,
            "checks": NotYet().readiness(),
        }
        status, body, _ = await get(api.url + "/metrics", "token")
        assert status == 200 and b"elf_agent_ready 0.0" in body
    finally:
        await api.stop()


def test_the_document_lists_exactly_the_apps_routes_and_docs_keeps_a_copy() -> None:
    cfg = load_config(env={"ELF_SECRET": "x" * 32})
    agent = Agent(cfg)
    assert app_routes(agent.api.app) == document_routes()
    assert (ROOT / "docs" / "openapi.json").read_bytes() == DOCUMENT_BYTES
    assert DOCUMENT["openapi"].startswith("3.")
    public = {
        p
        for p, item in DOCUMENT["paths"].items()
        for op in item.values()
        if op.get("security") == []
    }
    # the dashboard's static page: HttpApi.public() admits these without a token too
    assert public == agent.api.public_paths | {"/dashboard", "/dashboard/", "/dashboard/{file}"}


def test_metrics_public_is_a_config_boolean(tmp_path: Path) -> None:
    env = {"ELF_SECRET": "x" * 32}
    assert load_config(env=env).metrics_public is False
    assert load_config(env={**env, "ELF_METRICS_PUBLIC": "true"}).metrics_public is True
    cfg = tmp_path / "a.toml"
    cfg.write_text("[agent]\nmetrics_public = true\n")
    assert load_config(cfg, env=env).metrics_public is True
    with pytest.raises(ConfigError, match="metrics_public"):
        load_config(env={**env, "ELF_METRICS_PUBLIC": "maybe"})
    assert dataclasses.replace(load_config(env=env), metrics_public=True).metrics_public


async def test_histogram_observer_never_raises_and_bounds_kinds() -> None:
    class Empty:
        def metrics_node(self) -> dict[str, Any]:
            return {}

        def metrics_inputs(self) -> dict[str, Any]:
            return {}

        def metrics_jobs(self) -> dict[str, Any]:
            return {"j": {}}

    metrics = AgentMetrics(Empty(), process=False)
    for kind in ("empty", "user-kind-1", "user-kind-2"):
        metrics.multicast_done("j", kind, 0.01)
    metrics.epoch_stored("j", epoch_end=100.0, stored_at=99.0)  # a clock step: 0, not < 0
    m = parse(metrics.exposition().decode())
    assert value(m, "elf_multicast_latency_seconds_count", job="j", kind="job") == 2
    assert value(m, "elf_multicast_latency_seconds_count", job="j", kind="empty") == 1
    assert value(m, "elf_rollup_latency_seconds_sum", job="j") == 0.0
    await asyncio.sleep(0)


async def test_lake_written_counts_the_files_in_the_lake(tmp_path: Path) -> None:
    """``elf_lake_written_total`` against the lake itself: one Parquet file per rollup
    written (no compaction runs within the test)."""
    lake = tmp_path / "lake"
    async with running_agents(1, lake=str(lake), data_dir=str(tmp_path / "data")) as (agent,):
        e = math.floor(time.time()) + 1
        await agent.submit({"name": "wc", "creator": "t", "job_class": "wordcount",
                            "start_epoch": e})  # fmt: skip
        await agent.ingest("ingest", lines(e + 0.1, ["a b"]) + lines(e + 1.1, ["c"]))
        await wait_for(lambda: result(agent, "wc", e + 1), 15, "two epochs")

        async def agree() -> bool:
            files = len(list(lake.rglob("epoch-*.parquet")))
            m = await scrape(agent)
            return files >= 2 and value(m, "elf_lake_written_total") == files

        await wait_for(agree, 20, "the counter and the lake's files to agree")
        m = await scrape(agent)
        assert value(m, "elf_lake_refused_total") == 0


def test_the_collector_maps_every_figure_to_its_metric() -> None:
    """A fake source with known figures (the shapes ``Agent.status()`` parts have): each lands
    in its documented metric and labels; free-text counter names are collapsed."""

    class Source:
        def metrics_node(self) -> dict[str, Any]:
            return {
                "uptime_s": 12.5,
                "ready": True,
                "overlay": {"contacts": 7, "suspected": 2, "events": {"nodes_failed": 3},
                            "drops": {"bad_mac": 4, "replay": 1},
                            "sent_msgs": {"ping": 9}, "recv_bytes": {"ping": 90}},
                "data_plane": {"requests": 11, "bytes_in": 1000, "results": {"merged": 5},
                               "rejected": {"corrupt": 2},
                               "connections": {"open": 1, "opened_total": 6,
                                               "closed": {"idle": 5}}},
                "api": {"rejected": {"http_404": 3}, "connections": {}},
                "counters": {"task_failed:wc repair": 2, "task_failed:wc commit": 1,
                             "tick_errors": 4},
                "job_table": {"entries": 3, "stopped": 1},
                "loop_lag": {"last_ms": 2.0, "recent_max_ms": 8.0},
                "lake": {"written": 20, "buffered": 3, "dropped_over_capacity": 1, "pending": 2},
            }  # fmt: skip

        def metrics_inputs(self) -> dict[str, Any]:
            return {
                "web": {"lines": 10, "bytes": 500, "records": 8, "prefiltered": 1,
                        "quarantine": {"total": 2, "by_reason": {"bad_access_line": 2}}},
            }  # fmt: skip

        def metrics_jobs(self) -> dict[str, Any]:
            return {
                "wc": {
                    "roles": ["worker", "master"],
                    "trees": [{"children": [{}, {}]}, {"children": [{}]}],
                    "worker": {"late_dropped": 5, "future_dropped": 1, "records_in": 100,
                               "epochs_emitted": 9,
                               "late": {"records": 5, "by_input": {"web": 3, "api": 2}}},
                    "upstream": {"t1": {"counters": {"enqueued": 4}, "queued": [1, 2]},
                                 "t2": {"counters": {"enqueued": 3}, "queued": []}},
                    "barrier": {"t1": {"counters": {"merged": 6, "merged_local": 9,
                                                    "emitted": 9}}},
                    "counters": {"commits": 8, "tentative_epochs": 2, "repair_requests": 3,
                                 "repaired": 2, "takeovers": 1, "takeover_failed": 1,
                                 "handovers_sent": 1, "partial_epochs": 6,
                                 "origins_retired": 2, "origins_absent": 1},
                    "results_now": {"tentative": 1, "coverage": 0.5, "accuracy": 0.9},
                    "origins_expected": 4,
                    "membership": {
                        "absent": [{"origin": "ab", "since": 1.0, "last_epoch": 3, "why": None,
                                    "retire_at": None}],
                        "retired": [{"origin": "cd", "at": 2.0, "from_epoch": 4, "why": "x"},
                                    {"origin": "ef", "at": 3.0, "from_epoch": 5, "why": "y"}],
                        "left": [{"origin": "01", "from_epoch": 2}],
                    },
                    "cpu": {"share_used": 0.25, "throttled": False, "backlog_records": 0},
                    "memory": {"worker_bytes": 64, "results": {"resident_bytes": 32}},
                    "retained": {"bytes": 16},
                },
            }  # fmt: skip

    m = parse(AgentMetrics(Source(), process=False).exposition().decode())
    want = {
        ("elf_agent_uptime_seconds", ()): 12.5,
        ("elf_overlay_contacts", ()): 7,
        ("elf_overlay_suspected", ()): 2,
        ("elf_overlay_nodes_failed_total", ()): 3,
        ("elf_overlay_datagrams_rejected_total", (("reason", "bad_mac"),)): 4,
        ("elf_overlay_messages_sent_total", (("kind", "ping"),)): 9,
        ("elf_overlay_received_bytes_total", (("kind", "ping"),)): 90,
        ("elf_data_plane_requests_total", ()): 11,
        ("elf_data_plane_errors_total", (("reason", "corrupt"),)): 2,
        ("elf_data_plane_connections_closed_total", (("reason", "idle"),)): 5,
        ("elf_api_errors_total", (("reason", "http_404"),)): 3,
        ("elf_agent_events_total", (("kind", "task_failed"),)): 3,
        ("elf_agent_events_total", (("kind", "tick_errors"),)): 4,
        ("elf_event_loop_lag_max_seconds", ()): 0.008,
        ("elf_lake_written_total", ()): 20,
        ("elf_lake_buffered_total", ()): 3,
        ("elf_lake_refused_total", ()): 1,
        ("elf_lake_pending", ()): 2,
        ("elf_ingest_lines_total", (("input", "web"),)): 10,
        ("elf_ingest_bytes_total", (("input", "web"),)): 500,
        ("elf_ingest_records_total", (("input", "web"),)): 8,
        ("elf_ingest_rejected_lines_total", (("input", "web"), ("reason", "bad_access_line"))): 2,
        ("elf_job_role", (("job", "wc"), ("role", "master"))): 1,
        ("elf_job_role", (("job", "wc"), ("role", "forwarder"))): 0,
        ("elf_job_trees", (("job", "wc"),)): 2,
        ("elf_job_children", (("job", "wc"),)): 3,
        ("elf_records_late_total", (("job", "wc"),)): 5,
        ("elf_late_records_total", (("input", "web"), ("job", "wc"))): 3,
        ("elf_late_records_total", (("input", "api"), ("job", "wc"))): 2,
        ("elf_epochs_closed_total", (("job", "wc"),)): 9,
        ("elf_epochs_sent_total", (("job", "wc"),)): 7,
        ("elf_upstream_queued", (("job", "wc"),)): 2,
        ("elf_epochs_merged_total", (("job", "wc"), ("kind", "child"))): 6,
        ("elf_epochs_committed_total", (("job", "wc"),)): 8,
        ("elf_tentative_epochs_total", (("job", "wc"),)): 2,
        ("elf_tentative_epochs_now", (("job", "wc"),)): 1,
        ("elf_epoch_coverage", (("job", "wc"),)): 0.5,
        ("elf_epoch_accuracy", (("job", "wc"),)): 0.9,
        ("elf_repairs_total", (("job", "wc"), ("kind", "requested"))): 3,
        ("elf_repairs_total", (("job", "wc"), ("kind", "repaired"))): 2,
        ("elf_failovers_total", (("job", "wc"), ("kind", "takeover"))): 1,
        ("elf_failovers_total", (("job", "wc"), ("kind", "failed"))): 1,
        ("elf_handovers_total", (("job", "wc"), ("kind", "sent"))): 1,
        ("elf_origins_expected", (("job", "wc"),)): 4,
        ("elf_origins_absent", (("job", "wc"),)): 1,
        ("elf_origins_retired", (("job", "wc"),)): 2,
        ("elf_partial_epochs_total", (("job", "wc"),)): 6,
        ("elf_job_memory_bytes", (("job", "wc"), ("kind", "retained"))): 16,
    }
    got = {k: m.get(k) for k in want}
    assert got == want
    # process-wide (cbt.rejected_binaries): present, whatever other tests refused
    assert m[("elf_sketch_binaries_rejected_total", ())] >= 0
