"""A QL job on in-process agents (real sockets on loopback): submitted as a spec from
spec_from_query, records ingested on every agent, the results API returns named rows (HAVING,
ORDER BY, LIMIT applied over all trees) equal to a reference over the same records."""

from __future__ import annotations

import json
import math
import time
from collections import defaultdict
from typing import Any

import pytest
from agent_helpers import running_agents, wait_for

from agent.errors import BadRequest
from agent.jobs.ql_job import spec_from_query

QUERY = """
SELECT product, count(*) AS clicks, sum(price) AS revenue, avg(price) AS avg_price
FROM ingest
WHERE action = 'click'
GROUP BY product
HAVING clicks >= 2
ORDER BY revenue DESC, product
LIMIT 4
PARTITIONS 2
"""


def reference(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    groups: dict[str, list[int]] = defaultdict(list)
    for r in records:
        if r["action"] == "click":
            groups[r["product"]].append(r["price"])
    rows = [
        {"product": p, "clicks": len(v), "revenue": sum(v), "avg_price": sum(v) / len(v)}
        for p, v in groups.items()
        if len(v) >= 2
    ]
    rows.sort(key=lambda r: (-r["revenue"], r["product"]))
    return rows[:4]


async def test_ql_job_results_are_named_rows_over_all_trees() -> None:
    async with running_agents(3) as agents:
        e = math.floor(time.time()) + 1
        spec = spec_from_query("ql-top", "t", QUERY, start_epoch=e, allowed_lateness=0.5)
        await agents[0].submit(spec)
        everything = []
        for i, a in enumerate(agents):
            records = [
                {
                    "ts": e + 0.1,
                    "product": f"p{(i + j) % 7}",
                    "price": 10 * (j % 4 + 1),
                    "action": "click" if j % 3 else "view",
                }
                for j in range(30)
            ]
            everything.extend(records)
            await a.ingest("ingest", [json.dumps(r) for r in records])
        want = reference(everything)

        async def rows() -> list[dict[str, Any]] | None:
            try:
                res = await agents[1].results("ql-top", e)
            except Exception:
                return None
            return res["rows"] if res["complete"] else None

        got = await wait_for(rows, 20, "the QL job's result rows")
        assert got == want
        bad = {**spec, "name": "ql-bad", "params": {"query": "SELECT product\nFORM ingest"}}
        with pytest.raises(BadRequest, match=r"params\.query: line 2, column 1: expected"):
            await agents[2].submit(bad)
