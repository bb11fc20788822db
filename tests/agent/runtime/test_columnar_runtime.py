"""The columnar path in a running agent (real sockets on loopback): the runtime installs it on
a file input read by a full-parse ELF QL query (no prefilter), the job's result rows equal a
Counter over the lines, bad lines are counted by reason, and the ``columnar = false`` setting
keeps the row path with the same results."""

from __future__ import annotations

import dataclasses
import json
import math
import time
from pathlib import Path
from typing import Any

import pytest
from agent_helpers import running_agents, wait_for

from agent.jobs.ql_job import spec_from_query
from agent.tunables import RuntimeTunables

QUERY = "SELECT action, count(*) AS n, sum(price) AS total FROM clicks GROUP BY action"


@pytest.mark.parametrize(("columnar", "parse_processes"), [(True, 0), (False, 0), (True, 1)])
async def test_full_parse_query_runs_columnar_with_row_path_results(
    tmp_path: Path, columnar: bool, parse_processes: int
) -> None:
    path = tmp_path / "clicks.jsonl"
    path.write_bytes(b"")
    runtime = dataclasses.replace(
        RuntimeTunables(), columnar=columnar, parse_processes=parse_processes
    )
    async with running_agents(1, runtime=runtime, inputs=[f"clicks:json={path}"]) as agents:
        agent = agents[0]
        e = math.floor(time.time()) + 2
        await agent.submit(spec_from_query("acts", "t", QUERY, start_epoch=e, allowed_lateness=1))
        await wait_for(lambda: "acts" in agent.runtimes, 20, "the job to start")
        records = [
            {"ts": e + 0.1 + j / 1000, "action": ["click", "view", "buy"][j % 3], "price": j}
            for j in range(600)
        ]
        lines = [json.dumps(r) for r in records]
        lines[5:5] = ["not json", '{"action": "click"}', ""]
        agent.ticks.tick()  # installs the columnar reader
        tail = agent.inputs["clicks"]
        if columnar:
            tail.columnar.min_rows = 1
        if parse_processes:  # small reads: the 600 lines are a backlog of many chunks
            tail.read_size = 4096
        with path.open("a") as f:
            f.write("\n".join(lines) + "\n")
            f.write(json.dumps({"ts": e + 3, "action": "x", "price": 0}) + "\n")
        want = {
            a: (sum(1 for r in records if r["action"] == a),
                sum(r["price"] for r in records if r["action"] == a))
            for a in ("click", "view", "buy")
        }  # fmt: skip

        async def rows() -> dict[str, Any] | None:
            try:
                res = await agent.results("acts", e)
            except Exception:
                return None
            if not res["complete"]:
                return None
            return {r["action"]: (r["n"], r["total"]) for r in res["rows"]}

        assert await wait_for(rows, 30, "the job's result rows") == want
        tail = agent.inputs["clicks"]
        assert (tail.columnar is not None) == columnar
        if parse_processes:  # the helper process parsed some of the chunks
            assert agent.ticks.parse_pool is not None and agent.ticks.parse_pool.chunks > 0
        stats = tail.stats()
        assert stats["quarantine"]["by_reason"] == {"bad_json": 1, "missing_timestamp": 1}
        assert stats["blank_lines"] == 1
        worker = agent.runtimes["acts"].worker
        assert worker is not None
        if columnar:
            assert worker.counters["columnar_rows"] == 601
            assert worker.counters["partials_out"] < 50  # per (epoch, key), not per line
        else:
            assert worker.counters["columnar_rows"] == 0
            assert worker.counters["pairs_out"] == 601
