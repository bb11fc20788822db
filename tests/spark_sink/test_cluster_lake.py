"""A real in-process cluster (3 agents, wordcount over 2 trees) writes its rollups to a lake;
format("elf") returns exactly the rows the masters reported through the results API, row for
row, and a duplicate push of an epoch by its master leaves no duplicate rows."""

from __future__ import annotations

import json
import math
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from agent_helpers import lines, running_agents, wait_for

from spark_sink.lake import Lake, complete_epochs, read_table

pytest.importorskip("pyspark")

TEXTS = [["a a b", "c d"], ["b b b", "e"], ["zeta a", "a"]]


async def reported(agent: Any, job: str, epoch: int) -> Counter | None:
    try:
        res = await agent.results(job, epoch)
    except Exception:
        return None
    if not res["complete"]:
        return None
    return Counter(json.dumps(row, sort_keys=True) for row in res["rows"])


def rows_of(texts: list[str], agents: int) -> Counter:
    """The wordcount rows ``[word, count]`` of ``texts`` ingested by each of ``agents``."""
    words: Counter = Counter()
    for t in texts:
        words.update(t.split())
    return Counter(json.dumps([w, n * agents], sort_keys=True) for w, n in words.items())


async def _equal(result: Any, want: Counter) -> bool:
    return await result == want


async def test_cluster_rollups_read_through_elf_equal_the_masters_results(
    spark: Any, tmp_path: Path
) -> None:
    lake_dir = tmp_path / "lake"
    async with running_agents(3, data_dir=str(tmp_path), lake=str(lake_dir)) as agents:
        e = math.floor(time.time()) + 1
        spec = {
            "name": "wc-lake",
            "creator": "t",
            "job_class": "wordcount",
            "start_epoch": e,
            "allowed_lateness": 0.5,
            "trees": 2,
        }
        await agents[0].submit(spec)
        for a in agents:
            batch: list[str] = []
            for i, texts in enumerate(TEXTS):
                batch += lines(e + i + 0.1, texts)
            await a.ingest("ingest", batch)
        epochs = range(e, e + len(TEXTS) - 1)  # the last epoch waits for the watermark
        # Reference: every agent's lines. A master's result can still grow after it first
        # reports the epoch complete (a late contribution from an agent that joined the tree
        # mid-epoch is folded in, and the lake file replaced), so wait for the full result.
        want = {e + i: rows_of(TEXTS[i], agents=3) for i in range(len(epochs))}
        for epoch in epochs:
            await wait_for(
                lambda ep=epoch: _equal(reported(agents[1], "wc-lake", ep), want[ep]),
                20,
                f"epoch {epoch} with every agent's lines",
            )
        lake = Lake(str(lake_dir))

        def in_lake() -> bool:
            done = complete_epochs(lake.files("wc-lake"))
            if not all(done.get(epoch) for epoch in epochs):
                return False
            rows = read_table(lake, lake.files("wc-lake")).to_pylist()
            have: dict[int, Counter] = {}
            for r in rows:
                row = json.dumps([r["key"], r["value"]], sort_keys=True)
                have.setdefault(r["epoch"], Counter())[row] += 1
            return all(have.get(epoch) == want[epoch] for epoch in epochs)

        await wait_for(in_lake, 20, "the full epochs in the lake")
        # the master pushes an epoch again (a retry): same file, no new rows
        for a in agents:
            rt = a.runtimes["wc-lake"]
            for tid in rt.tree_list:
                if rt.store.get(tid, e) is not None:
                    rt.lake.epoch(tid, e)
                    rt.lake.epoch(tid, e)
    df = spark.read.format("elf").option("job", "wc-lake").load(str(lake_dir))
    got: dict[int, Counter] = {}
    for r in df.select("epoch", "key_json", "value_json", "key", "value").collect():
        row = [json.loads(r["key_json"]), json.loads(r["value_json"])]
        assert row == [r["key"], r["value"]]
        got.setdefault(r["epoch"], Counter())[json.dumps(row, sort_keys=True)] += 1
    for epoch in epochs:
        assert got[epoch] == want[epoch]
    expected = Counter()
    for t in TEXTS[0]:
        expected.update(t.split())
    assert Counter({json.loads(k)[0]: json.loads(k)[1] for k in got[e]}) == Counter(
        {w: n * 3 for w, n in expected.items()}
    )
