"""Late records with real agents: three ``elf agent`` processes on loopback run a word count
with ``allowed_lateness``; two of them then read lines far behind their newest ones. The
epoch's rows stay exact for the records in time, its ``late`` field counts the late ones per
origin and input against the test's own count (the origins' reports reach a master on another
agent), each origin's dead-letter file holds samples naming job, epoch, origin and event time,
and its log a WARNING naming them."""

from __future__ import annotations

import asyncio
import json
import math
import random
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest
from agent_helpers import wait_until

from agent.client import ApiClient, ApiError
from agent.server.cluster import LocalCluster
from srt import DataPlaneClient
from srt.config import Tunables

AGENTS = 3
WORDS = ["alpha", "beta", "gamma", "delta"]


def write(path: Path, rows: list[tuple[float, list[str]]]) -> None:
    with path.open("a") as f:
        for ts, words in rows:
            f.write(json.dumps({"ts": ts, "line": " ".join(words)}) + "\n")


def result(client: ApiClient, epoch: int) -> dict[str, Any] | None:
    try:
        return client.results("wc", epoch)
    except ApiError as exc:
        if exc.status in (404, 503):
            return None
        raise


@pytest.fixture
def cluster(tmp_path: Path) -> Any:
    inputs = {i: {"lines": str(tmp_path / f"input-{i}.jsonl")} for i in range(AGENTS)}
    for spec in inputs.values():
        Path(spec["lines"]).touch()
    local = LocalCluster(
        AGENTS, tmp_path / "c", inputs=inputs, extra_args=["--log-level", "WARNING"]
    )
    local.start(timeout=90)
    local.wait_settled(60)
    yield local, inputs
    local.stop()


def test_late_records_are_counted_in_the_result_sampled_and_logged(cluster: Any) -> None:
    local, inputs = cluster
    rng = random.Random(11)
    base = math.floor(time.time()) - 6
    in_time: dict[int, Counter] = defaultdict(Counter)
    for i in range(AGENTS):
        rows = []
        for epoch in range(base, base + 5):
            for j in range(rng.randrange(3, 8)):
                words = [rng.choice(WORDS) for _ in range(rng.randrange(1, 4))]
                rows.append((epoch + j / 10, words))
                in_time[epoch].update(words)
        write(Path(inputs[i]["lines"]), rows)
    client = local.client(0)
    client.submit({"name": "wc", "creator": "tests", "job_class": "wordcount",
                   "inputs": ["lines"], "epoch_seconds": 1, "allowed_lateness": 1.0,
                   "start_epoch": base})  # fmt: skip

    def final(epoch: int) -> dict[str, Any] | None:
        res = result(client, epoch)
        return res if res is not None and res["state"] == "final" else None

    wait_until(lambda: final(base + 3) is not None, 60, "epoch base+3 final")
    # every agent read its lines up to base+4.x: its watermark passed base+2; now two of them
    # read lines of epoch `base` (late: its end is before the watermark) - the test's count
    late_rows = {1: 7, 2: 4}
    for i, n in late_rows.items():
        write(Path(inputs[i]["lines"]), [(base + 0.05 * k, ["late"]) for k in range(n)])
    nodes = {i: local.client(i).status()["node_id"] for i in range(AGENTS)}
    want_origins = {format(int(nodes[i], 16), "x"): n for i, n in late_rows.items()}
    total = sum(late_rows.values())

    def late_field() -> Any:
        res = result(client, base)
        return None if res is None else res.get("late")

    want = {"records": total, "origins": want_origins, "inputs": {"lines": total}}
    wait_until(lambda: late_field() == want, 30, f"epoch {base}'s late field: {want}")
    res = final(base)
    assert res is not None  # final: every record in time is in; the late ones are counted
    assert Counter(dict(res["rows"])) == in_time[base]  # never folded into the rows
    later = result(client, base + 1)
    assert later is not None and later["late"]["records"] == 0

    for i, n in late_rows.items():
        job = local.client(i).status()["jobs"]["wc"]
        assert job["worker"]["late"]["by_input"] == {"lines": n}
        dead = Path(job["worker"]["late"]["dead_letter"]["path"])
        assert dead.name == "wc.jsonl" and dead.parent.name == "late"
        samples = [json.loads(x) for x in dead.read_text().splitlines()]
        assert 1 <= len(samples) <= 3  # SAMPLES_PER_EPOCH per (epoch, input)
        for s in samples:
            assert (s["job"], s["epoch"], s["input"], s["reason"]) == ("wc", base, "lines", "late")
            assert s["origin"] == format(int(nodes[i], 16), "x")
            assert math.floor(s["event_time"]) == base
            assert json.loads(s["line"])["line"] == "late"
        log = (local.procs[i].data_dir / "stderr.log").read_text()
        assert f"too late for epoch {base} from origin {s['origin']}" in log
    # the master says how many it was told of
    masters = [local.client(i).status()["jobs"]["wc"]["late_reported"] for i in range(AGENTS)]
    assert [m["records"] for m in masters if m is not None] == [total]
    assert [m["by_origin"] for m in masters if m is not None] == [want_origins]

    # a peer holding the secret with malformed reports: a clear 4xx, nothing counted
    answers = asyncio.run(hostile_reports(local))
    assert {a for a in answers if a[1] == 400} == {
        (what, 400, "bad_body") for what in ("origin", "epoch", "count", "long origin")
    }
    assert ("unknown job", 503, "unknown_job") in answers
    assert late_field() == want


async def hostile_reports(local: LocalCluster) -> list[tuple[str, int, str | None]]:
    secret = local.secret_file.read_bytes().strip()
    client = DataPlaneClient(secret, tunables=Tunables(request_timeout=5.0))
    good = [[1, {"lines": 1}]]
    bodies = {
        "origin": {"job": "wc", "origin": "zz", "epochs": good},
        "long origin": {"job": "wc", "origin": "f" * 400, "epochs": good},
        "epoch": {"job": "wc", "origin": "ab", "epochs": [[1.5, {"lines": 1}]]},
        "count": {"job": "wc", "origin": "ab", "epochs": [[1, {"lines": -3}]]},
        "unknown job": {"job": "nope", "origin": "ab", "epochs": good},
    }
    out = []
    try:
        for agent in local.agents():
            for what, body in bodies.items():
                status, data = await client.request(
                    "POST", agent["data_url"], "/agent/v1/late-records",
                    json.dumps(body).encode(), content_type="application/json",
                )  # fmt: skip
                out.append((what, status, json.loads(data or b"{}").get("error")))
    finally:
        await client.close()
    return out
