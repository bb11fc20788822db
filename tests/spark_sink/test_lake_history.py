"""The results API after a master change (issue 12: every earlier epoch answered 404 although
the lake still had it): a real in-process cluster writes wordcount and an ELF QL job to a lake
all agents share; then every master's in-memory results are emptied (what a new master starts
with) and the HTTP API, asked on every agent, still answers every earlier epoch from the lake
exactly as it did before (reference: the answers recorded before), marked ``source: lake``
with its version; a QL epoch, whose named rows cannot be merged exactly from the lake, is a
410 naming the reason; an epoch the lake never had is still a 404 (pyarrow only, no Spark)."""

from __future__ import annotations

import asyncio
import math
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from agent_helpers import complete_result, lines, running_agents, wait_for, word_counts

from agent.client import ApiClient, ApiError
from agent.jobs.ql_job import spec_from_query

TEXTS = [["a a b", "c d"], ["b b b", "e"], ["zeta a", "a"], ["q"]]


async def _is(agent: Any, job: str, epoch: int, want: Counter) -> bool:
    return await complete_result(agent, job, epoch) == want


async def test_the_results_api_answers_earlier_epochs_from_the_lake(tmp_path: Path) -> None:
    lake_dir = tmp_path / "lake"
    async with running_agents(3, data_dir=str(tmp_path), lake=str(lake_dir)) as agents:
        e = math.floor(time.time()) + 1
        base = {"start_epoch": e, "allowed_lateness": 0.5, "trees": 2}
        await agents[0].submit({"name": "wc", "creator": "t", "job_class": "wordcount", **base})
        query = "SELECT line, count(*) AS n FROM ingest GROUP BY line"
        await agents[0].submit(spec_from_query("lines", "t", query, **base))
        for a in agents:
            batch: list[str] = []
            for i, texts in enumerate(TEXTS):
                batch += lines(e + i + 0.1, texts)
            await a.ingest("ingest", batch)
        epochs = range(e, e + len(TEXTS) - 1)  # the last epoch waits for the watermark
        for i, epoch in enumerate(epochs):
            want = word_counts(TEXTS[i], 3)
            await wait_for(lambda ep=epoch, w=want: _is(agents[1], "wc", ep, w), 20, f"wc {epoch}")
            want_lines = Counter({t: 3 for t in TEXTS[i]})
            await wait_for(
                lambda ep=epoch, w=want_lines: _is(agents[1], "lines", ep, w), 20, f"ql {epoch}"
            )
        clients = [ApiClient(a.api.url, a.config.api_token) for a in agents]
        before = {ep: await asyncio.to_thread(clients[0].results, "wc", ep) for ep in epochs}
        assert all(b["source"] == "master" for b in before.values())
        for a in agents:  # every rollup written (the writer thread, off the loop)
            for job in ("wc", "lines"):
                rt = a.runtimes[job]
                assert await asyncio.to_thread(rt.lake.writer.flush, 20)
        for a in agents:  # what a new master holds of the job's history: nothing
            for job in ("wc", "lines"):
                a.runtimes[job].store.close()
        for client in clients:
            for ep in epochs:
                after = await asyncio.to_thread(client.results, "wc", ep)
                assert after["rows"] == before[ep]["rows"]  # identical, row for row
                same = ("job", "epoch", "epoch_seconds", "epoch_start", "complete", "updated")
                assert {k: after[k] for k in same} == {k: before[ep][k] for k in same}
                assert after["source"] == "lake"
                lake = after["lake"]
                assert (lake["tentative"], lake["coverage"], lake["lacking"]) == (False, 1.0, [])
                assert (lake["version"] > 1) == before[ep]["updated"]  # late data: version 2+
                assert [t["tree"] for t in lake["trees"]] == [0, 1]
            with pytest.raises(ApiError) as gone:
                await asyncio.to_thread(client.results, "lines", e)
            assert gone.value.status == 410 and "named result rows" in gone.value.message
            with pytest.raises(ApiError) as missing:
                await asyncio.to_thread(client.results, "wc", e + 1000)
            assert missing.value.status == 404


def test_read_epoch_reads_epoch_files_and_compacted_hours_alike(tmp_path: Path) -> None:
    from agent.runtime.results.lake_history import epochs, read_epoch
    from spark_sink.compaction import LakeMaintenance, maintain
    from spark_sink.lake import Lake, Rollup

    step, first = 600.0, 1_795_298_400 // 600  # six epochs an hour, from a whole hour
    lake = Lake(str(tmp_path))
    pairs = {e: [((f"k{e}", e % 2), [e, 1.5])] for e in range(first, first + 8)}
    for e, rows in pairs.items():
        lake.write(Rollup("wc", 0, 1, e, step, rows))
    lake.write(Rollup("wc", 0, 1, first + 1, step, [], version=2, tentative=True,
                      coverage=0.25, lacking=["0a"]))  # fmt: skip
    start = first * step

    def part(e: int) -> dict | None:
        return read_epoch(str(tmp_path), "wc", 0, 1, e, start + (e - first) * step)

    def check() -> None:
        assert part(first) == {"source": "lake", "term": 0, "version": 1, "tentative": False,
                               "partial": False, "coverage": 1.0, "lacking": [],
                               "updated": False,
                               "rows": [[[f"k{first}", first % 2], [first, 1.5]]]}  # fmt: skip
        empty = part(first + 1)
        assert empty is not None
        assert (empty["rows"], empty["version"], empty["tentative"]) == ([], 2, True)
        assert (empty["coverage"], empty["lacking"], empty["updated"]) == (0.25, ["0a"], True)
        assert part(first + 100) is None
        # a newer master's term outranks the higher version of term 0; partial is said
        fenced = part(first + 3)
        assert fenced is not None
        assert (fenced["term"], fenced["version"], fenced["partial"]) == (2, 1, True)
        assert (fenced["coverage"], fenced["lacking"]) == (0.5, ["0b"])
        assert fenced["rows"] == [[["t2", 0], 7]]

    lake.write(Rollup("wc", 0, 1, first + 3, step, [], version=3))
    lake.write(Rollup("wc", 0, 1, first + 3, step, [(("t2", 0), 7)], term=2, partial=True,
                      coverage=0.5, lacking=["0b"]))  # fmt: skip
    check()
    counts = maintain(lake, [("wc", 0, 1)], LakeMaintenance(grace=0))
    assert counts["files_compacted"] == 6  # the first hour now lives in one file
    check()
    assert epochs(str(tmp_path), "wc") == list(pairs)
    lake.write(Rollup("wc", 0, 1, first + 2, step, [], named_rows=[{"a": 1}], version=2))
    named = read_epoch(str(tmp_path), "wc", 0, 1, first + 2, start + 2 * step)
    assert named is not None and named["rows"] is None and "named result rows" in named["gone"]


def test_provenance_names_the_highest_term_and_any_partial_tree() -> None:
    from agent.runtime.results.lake_history import provenance

    lake_part = {"source": "lake", "term": 3, "version": 1, "tentative": False,
                 "partial": True, "coverage": 0.5, "lacking": ["0b"], "rows": []}  # fmt: skip
    old_part = {"source": "lake", "version": 4, "tentative": False, "coverage": 1.0,
                "lacking": [], "rows": []}  # fmt: skip  # an answer from before terms
    master = {"rows": [], "tentative": False}
    got = provenance([lake_part, master, old_part])
    assert got["source"] == "master+lake"
    summary = {k: v for k, v in got["lake"].items() if k != "trees"}
    assert summary == {"term": 3, "version": 4, "tentative": False, "partial": True,
                       "coverage": 0.5, "lacking": ["0b"]}  # fmt: skip
    assert [(t["tree"], t["term"], t["partial"]) for t in got["lake"]["trees"]] == [
        (0, 3, True),
        (2, 0, False),
    ]
