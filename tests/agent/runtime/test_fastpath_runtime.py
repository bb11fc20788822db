"""The ingest fast path in a running agent (real sockets on loopback): the runtime installs
the QL job's prefilter on the file input it reads, and the job's result rows equal a Counter
over the lines."""

from __future__ import annotations

import json
import math
import time
from collections import Counter
from pathlib import Path
from typing import Any

from agent_helpers import running_agents, wait_for

from agent.jobs.ql_job import spec_from_query

QUERY = """
SELECT product, count(*) AS clicks FROM clicks
WHERE directory = 'Video Games' AND action = 'click'
GROUP BY product ORDER BY clicks DESC, product LIMIT 3
"""


async def test_runtime_prefilters_file_input_and_results_match(tmp_path: Path) -> None:
    path = tmp_path / "clicks.jsonl"
    path.write_bytes(b"")
    async with running_agents(1, inputs=[f"clicks:json={path}"]) as agents:
        agent = agents[0]
        e = math.floor(time.time()) + 2
        spec = spec_from_query("promo", "t", QUERY, start_epoch=e, allowed_lateness=0.5)
        await agent.submit(spec)
        records = [
            {
                "ts": e + 0.25,
                "product": f"p{j % 5}",
                "directory": "Video Games" if j % 3 else "Books",
                "action": "click" if j % 4 else "view",
            }
            for j in range(200)
        ]
        lines = [json.dumps(r) for r in records]
        assert records[7]["action"] == "click" and records[7]["directory"] == "Video Games"
        lines[7] = lines[7].replace('"click"', '"\\u0063lick"')  # escaped: still counted
        lines += ['{"directory": "Video Games", "action": "click", "ts": ', "not json"]
        want = Counter(
            r["product"]
            for r in records
            if r["directory"] == "Video Games" and r["action"] == "click"
        )
        rows_want = [
            {"product": p, "clicks": c}
            for p, c in sorted(want.items(), key=lambda kv: (-kv[1], kv[0]))[:3]
        ]
        # the job must be running on this agent before the lines arrive
        await wait_for(lambda: "promo" in agent.runtimes, 20, "the job to start")
        with path.open("a") as f:
            f.write("\n".join(lines) + "\n")
        # a later epoch's record moves the watermark past e
        with path.open("a") as f:
            f.write(json.dumps({**records[1], "ts": e + 3}) + "\n")

        async def rows() -> list[dict[str, Any]] | None:
            try:
                res = await agent.results("promo", e)
            except Exception:
                return None
            return res["rows"] if res["complete"] else None

        got = await wait_for(rows, 30, "the job's result rows")
        assert got == rows_want
        tail = agent.inputs["clicks"]
        assert tail.prefilter is not None
        stats = tail.stats()
        assert stats["prefiltered"] > 0
        assert stats["quarantine"]["by_reason"] == {"bad_json": 1}  # "not json" was skipped
        worker = agent.runtimes["promo"].worker
        assert worker is not None and worker.counters["prefiltered"] == stats["prefiltered"]


async def test_a_runtime_where_change_re_derives_the_prefilter(tmp_path: Path) -> None:
    path = tmp_path / "clicks.jsonl"
    path.write_bytes(b"")
    query = "SELECT product, count(*) AS clicks FROM clicks WHERE action = 'click' GROUP BY product"
    async with running_agents(1, inputs=[f"clicks:json={path}"]) as agents:
        agent = agents[0]
        e = math.floor(time.time()) + 2
        await agent.submit(
            spec_from_query("promo", "t", query, start_epoch=e, allowed_lateness=0.5)
        )
        await wait_for(lambda: "promo" in agent.runtimes, 20, "the job to start")
        agent.ticks.tick()  # installs the prefilter for action = 'click'
        assert agent.inputs["clicks"].prefilter is not None
        await agent.change_job("promo", {"query": query.replace("'click'", "'buy'")})
        records = [
            {"ts": e + 0.25, "product": f"p{j % 3}", "action": a}
            for j, a in enumerate(["click", "buy", "buy", "view"] * 10)
        ]
        with path.open("a") as f:
            f.write("\n".join(json.dumps(r) for r in records) + "\n")
            f.write(json.dumps({**records[1], "ts": e + 3}) + "\n")
        want = Counter(r["product"] for r in records if r["action"] == "buy")

        async def counts() -> Counter | None:
            try:
                res = await agent.results("promo", e)
            except Exception:
                return None
            return (
                Counter({r["product"]: r["clicks"] for r in res["rows"]})
                if res["complete"]
                else None
            )

        assert await wait_for(counts, 30, "the changed job's result") == want
