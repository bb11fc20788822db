"""``elf tap``'s endpoint, ``GET /api/v1/jobs/{name}/tap`` (agent/runtime/ops/tap_api.py over
agent/runtime/job/tap.py): the records a job sees on an agent, sampled live, bounded,
authenticated, with no effect on results.

Unit tests of the tap point, then real HTTP on loopback against an in-process agent: the
tapped records are the parsed records of the lines fed (the reference is ``json.loads`` of
those lines), the limit holds, 401/404/400/429, and a job's result with a tap running equals
the same job's without one and the word counts of the lines (exact Counters).
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections import Counter
from typing import Any

import aiohttp
import jsonschema_rs
import orjson
import pyarrow as pa
import pytest
from agent_helpers import complete_result, lines, running_agents, wait_for, word_counts

from agent.errors import TooManyRequests
from agent.ingest.base import ColumnarBatch
from agent.runtime.job.tap import MAX_TAPS, JobTaps, Tap
from agent.runtime.ops.openapi import DOCUMENT

WORDS = ["a a b", "c d", "a b c", "e", "b b"]


def epoch_of(ts: float) -> int:
    return math.floor(ts / 2.0)


# ---- the tap point, without an agent ----------------------------------------------------------


async def test_a_tap_keeps_copies_up_to_its_limit_and_counts_the_rest() -> None:
    taps = JobTaps()
    assert taps.active == ()
    tap = taps.open(3)
    batch = [{"ts": 1.0, "line": "x"}, {"ts": 5.0, "line": "y"}]
    taps.offer("in", batch, "ts", epoch_of)
    batch[0]["line"] = "changed by the job"  # a job mutating its record cannot reach the tap
    taps.offer("other", [{"ts": "soon"}, {"line": "no ts"}, {"ts": float("nan")}], "ts", epoch_of)
    assert await tap.wait(1.0) is True
    assert tap.records == [
        ("in", 0, {"ts": 1.0, "line": "x"}),
        ("in", 2, {"ts": 5.0, "line": "y"}),
        ("other", None, {"ts": "soon"}),
    ]
    assert (tap.seen, tap.dropped) == (5, 2)
    taps.close(tap)
    assert taps.active == ()
    taps.offer("in", batch, "ts", epoch_of)  # closed: nothing more
    assert tap.seen == 5


async def test_a_tap_times_out_with_what_it_has() -> None:
    taps = JobTaps()
    tap = taps.open(10)
    taps.offer("in", [{"ts": 3}], "ts", epoch_of)
    started = time.monotonic()
    assert await tap.wait(0.2) is False
    assert time.monotonic() - started >= 0.19
    assert tap.records == [("in", 1, {"ts": 3})]


async def test_a_columnar_batch_is_converted_only_for_the_rows_kept() -> None:
    taps = JobTaps()
    tap = taps.open(3)
    batch = ColumnarBatch()
    batch.add(pa.table({"ts": [0.5, 2.5], "status": [200, 404]}))
    batch.add([{"ts": 4.5, "status": 500}, {"ts": 6.5, "status": 301}])
    taps.offer("logs", batch, "ts", epoch_of)
    assert [r[2] for r in tap.records] == [
        {"ts": 0.5, "status": 200},
        {"ts": 2.5, "status": 404},
        {"ts": 4.5, "status": 500},
    ]
    assert [r[1] for r in tap.records] == [0, 1, 2]
    assert (tap.seen, tap.dropped) == (4, 1)


async def test_a_failing_tap_never_reaches_the_record_path(
    caplog: pytest.LogCaptureFixture,
) -> None:
    class Odd(list):  # a batch whose rows cannot be read
        def __getitem__(self, index: Any) -> Any:
            raise RuntimeError("unreadable")

    taps = JobTaps()
    tap = taps.open(2)
    taps.offer("in", Odd([{"ts": 1}]), "ts", epoch_of)  # logged, not raised
    assert "tap of input in failed" in caplog.text
    loop = asyncio.new_event_loop()
    loop.close()
    late = JobTaps()
    late.active = (Tap(1, loop),)  # its agent's loop closed: nobody waits for it
    late.offer("in", [{"ts": 1}], "ts", epoch_of)
    assert late.active[0].records == [("in", 0, {"ts": 1})]
    assert tap.records == []


async def test_taps_of_one_job_are_bounded() -> None:
    taps = JobTaps()
    opened = [taps.open(1) for _ in range(MAX_TAPS)]
    with pytest.raises(TooManyRequests, match=f"{MAX_TAPS} taps"):
        taps.open(1)
    taps.close(opened[0])
    taps.close(taps.open(1))
    assert len(taps.active) == MAX_TAPS - 1


# ---- over HTTP, against an in-process agent ------------------------------------------------


async def get(url: str, token: str | None) -> tuple[int, Any]:
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    async with aiohttp.ClientSession() as s, s.get(url, headers=headers) as r:
        return r.status, orjson.loads(await r.read())


def reply_schema() -> Any:
    schema = DOCUMENT["components"]["schemas"]["TapReply"]
    return jsonschema_rs.validator_for(schema)


async def test_tapped_records_are_the_parsed_lines_and_results_are_unchanged() -> None:
    async with running_agents(1) as (agent,):
        e = math.floor(time.time()) + 1
        for name in ("tapped", "plain"):
            spec = {
                "name": name,
                "creator": "t",
                "job_class": "wordcount",
                "start_epoch": e,
                "allowed_lateness": 0.5,
            }
            await agent.submit(spec)
        url, token = agent.api.url, agent.config.api_token
        runtime = agent.runtimes["tapped"]
        fed = lines(e + 0.1, WORDS)

        # the whole feed, and at most 3 of it: two taps at once
        whole = asyncio.create_task(
            get(f"{url}/api/v1/jobs/tapped/tap?limit=1000&timeout=3", token)
        )
        first = asyncio.create_task(get(f"{url}/api/v1/jobs/tapped/tap?limit=3&timeout=20", token))
        await wait_for(lambda: len(runtime.taps.active) == 2, 10, "both taps to open")
        assert agent.runtimes["plain"].taps.active == ()  # a tap is one job's
        await agent.ingest("ingest", fed)
        (status, body), (status3, body3) = await whole, await first

        assert status == 200 and status3 == 200
        for reply in (body, body3):
            reply_schema().validate(reply)
            assert reply["job"] == "tapped" and reply["node_id"] == f"{agent.overlay.id:040x}"
        reference = [json.loads(line) for line in fed]  # the parsed records, independently
        assert [r["record"] for r in body["records"]] == reference
        assert {(r["input"], r["origin"], r["epoch"]) for r in body["records"]} == {
            ("ingest", body["node_id"], e)
        }
        assert body["complete"] is False and body["seen"] == len(fed) and body["dropped"] == 0
        assert [r["record"] for r in body3["records"]] == reference[:3]
        assert body3["complete"] is True and body3["seen"] >= 3
        assert body3["dropped"] == body3["seen"] - 3
        assert runtime.taps.active == ()  # closed with their requests

        # the tap had no effect: the tapped job's result is the untapped one's, and exact
        want = word_counts(WORDS, 1)
        for name in ("tapped", "plain"):
            await wait_for(
                lambda n=name: _eq(agent, n, e, want), 15, f"{name}'s result of epoch {e}"
            )
        assert await complete_result(agent, "tapped", e) == await complete_result(agent, "plain", e)


async def _eq(agent: Any, job: str, epoch: int, want: Counter) -> bool:
    return await complete_result(agent, job, epoch) == want


async def test_the_tap_is_authenticated_and_refuses_bad_requests() -> None:
    async with running_agents(1) as (agent,):
        await agent.submit({"name": "wc", "creator": "t", "job_class": "wordcount"})
        url, token = agent.api.url, agent.config.api_token
        tap = f"{url}/api/v1/jobs/wc/tap"
        assert (await get(tap + "?timeout=0.1", None))[0] == 401
        assert (await get(tap + "?timeout=0.1", "wrong-token"))[0] == 401
        assert agent.runtimes["wc"].taps.active == ()  # refused before a tap opened

        status, body = await get(f"{url}/api/v1/jobs/nope/tap?timeout=0.1", token)
        assert status == 404 and "nope" in body["error"]
        for query, field in (
            ("limit=0", "limit"),
            ("limit=1001", "limit"),
            ("limit=ten", "limit"),
            ("timeout=0", "timeout"),
            ("timeout=61", "timeout"),
            ("timeout=soon", "timeout"),
        ):
            status, body = await get(f"{tap}?{query}", token)
            assert status == 400 and body.get("field") == field, (query, body)

        # nothing fed: a tap returns empty after its timeout
        status, body = await get(f"{tap}?limit=5&timeout=0.3", token)
        assert status == 200 and body["records"] == [] and body["complete"] is False
        assert body["seconds"] >= 0.29

        # MAX_TAPS at once, then 429 until one ends
        held = [asyncio.create_task(get(f"{tap}?timeout=2", token)) for _ in range(MAX_TAPS)]
        await wait_for(
            lambda: len(agent.runtimes["wc"].taps.active) == MAX_TAPS, 10, "the taps to open"
        )
        status, body = await get(f"{tap}?timeout=0.1", token)
        assert status == 429 and f"{MAX_TAPS} taps" in body["error"]
        assert [s for s, _ in await asyncio.gather(*held)] == [200] * MAX_TAPS
        assert (await get(f"{tap}?timeout=0.1", token))[0] == 200
