"""A tentative result's quality in-process with real sockets (docs/fault-tolerance.md,
"Tentative results and their quality").

Three agents feed a top-k WordCount at different rates (about 6, 12 and 24 lines an epoch,
seeded jitter). In one epoch X the busiest agent's share is missing (it declares it
incomplete: the master gets only its absence marker). The master's tentative result of X
must give a coverage within 5 points of the truth - the lines the covered agents wrote for X
over all lines written for X, computed from the input lines - where the share of origins (2
of 3) would be 30 points off; it also carries a top-k accuracy estimate. Then the repair pull
folds the missing share in: the final result (a new version) has coverage 1.0, accuracy 1.0
and equals a Counter over the lines.
"""

from __future__ import annotations

import json
import math
import random
import time
from collections import Counter
from pathlib import Path
from typing import Any

import jsonschema
from agent_helpers import lines, running_agents, wait_for

from agent.runtime.host.views import JobView
from agent.runtime.ops.dashboard.summary import _master
from agent.tunables import RuntimeTunables

RATES = (6, 12, 24)  # lines per epoch of agents 0, 1, 2; agent 2 is the one missing in X
EPOCHS = 10  # X is the last: nine measured epochs before it
K = 5
OPENAPI = Path(__file__).parents[3] / "agent" / "runtime" / "ops" / "openapi.json"


def check_contract(result: dict[str, Any]) -> None:
    """The results API's answer matches its schema in the OpenAPI document."""
    doc = json.loads(OPENAPI.read_text())
    schema = {**doc["components"]["schemas"]["Results"], "components": doc["components"]}
    jsonschema.validate(result, schema)


def vocabulary_line(rng: random.Random) -> str:
    # Zipf-like words: w0 most frequent
    return " ".join(f"w{min(int(rng.paretovariate(1.2)) - 1, 40)}" for _ in range(3))


async def test_tentative_coverage_matches_the_truth_then_the_final_replaces_it() -> None:
    rng = random.Random(14)
    runtime = RuntimeTunables(repair_interval=3.0)
    async with running_agents(3, runtime=runtime) as agents:
        e = math.floor(time.time()) + 1
        x = e + EPOCHS - 1
        spec = {"name": "wc", "creator": "t", "job_class": "wordcount", "start_epoch": e,
                "allowed_lateness": 0.5, "top_k": K}  # fmt: skip
        await agents[0].submit(spec)
        await wait_for(lambda: all("wc" in a.runtimes for a in agents), 10, "the job everywhere")
        victim = agents[2]
        vrt = victim.runtimes["wc"]
        (tid,) = vrt.tree_list
        comb = vrt.ensure_tree(tid)
        offer = comb.offer_local

        def incomplete_in_x(epoch: int, snap: Any, *, complete: bool = True, records=None):
            return offer(epoch, snap, complete=complete and epoch != x, records=records)

        comb.offer_local = incomplete_in_x  # its share of X never reaches the master
        written: dict[int, list[list[str]]] = {}  # agent -> per epoch, the texts written
        for i, agent in enumerate(agents):
            batch = []
            written[i] = []
            for epoch in range(e, e + EPOCHS):
                n = max(1, round(RATES[i] * rng.uniform(0.75, 1.25)))
                texts = [vocabulary_line(rng) for _ in range(n)]
                written[i].append(texts)
                batch += lines(epoch + 0.5, texts)
            batch += lines(e + EPOCHS + 0.9, ["tail"])  # the watermark passes X
            await agent.ingest("ingest", batch)

        master = next(a for a in agents if "master" in a.runtimes["wc"].roles())
        mrt = master.runtimes["wc"]
        stored = await wait_for(lambda: mrt.store.peek(tid, x), 20, "epoch X stored")
        assert stored.tentative
        res = await master.results("wc", x)
        assert res["tentative"] and res["lacking"] == [f"{victim.overlay.id:x}"]
        per_agent = [len(written[i][EPOCHS - 1]) for i in range(3)]
        truth = (per_agent[0] + per_agent[1]) / sum(per_agent)
        error = abs(res["coverage"] - truth)
        print(f"coverage {res['coverage']:.3f} truth {truth:.3f} error {error:.3f}")
        assert error <= 0.05, (res["coverage"], truth)
        assert abs(2 / 3 - truth) > 0.15  # the share of origins would be far off
        assert isinstance(res["accuracy"], float) and 0.0 <= res["accuracy"] <= 1.0
        check_contract(res)
        tentative_top, estimate = [k for k, _ in res["rows"]], res["accuracy"]
        # the dashboard's summary (built on the loop) shows the estimate once computed
        shown = mrt.queries.accuracy_now(tid, x, stored)
        assert shown == estimate
        epochs = {e["epoch"]: e for e in _master(JobView(mrt), tid)["epochs"]}
        assert epochs[x]["accuracy"] == estimate and epochs[x]["coverage"] < 0.5

        want = Counter(w for i in range(3) for t in written[i][EPOCHS - 1] for w in t.split())

        async def final() -> dict[str, Any] | None:
            r = await master.results("wc", x)
            return None if r["tentative"] else r

        res = await wait_for(final, 20, "the final result of X")
        assert res["version"] == 2 and res["coverage"] == 1.0 and res["accuracy"] == 1.0
        check_contract(res)
        ranked = sorted(want.items(), key=lambda kv: -kv[1])
        kth = ranked[K - 1][1]
        assert all(want[k] == v for k, v in res["rows"])  # exact values
        assert {k for k, v in ranked if v > kth} <= {k for k, _ in res["rows"]}
        real = len(set(tentative_top) & {k for k, _ in res["rows"]}) / K
        print(f"top-{K} accuracy estimate {estimate:.3f}, real {real:.3f} (one epoch: noisy)")
