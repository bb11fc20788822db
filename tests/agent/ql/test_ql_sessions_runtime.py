"""A ``WINDOW SESSION`` query on in-process agents (real sockets on loopback): submitted as a
spec from spec_from_query (what ``elf submit --query`` and the dashboard build), records
ingested on every agent across several 1-second epochs, the master closes the sessions and
its ``on_query`` (``POST /api/v1/jobs/{name}/query``) answers rows equal to an independent
reference: each user's maximal runs of adjacent active epochs, counted and summed directly
from the records - and so do ``elf run`` (columnar and row path) over the same records, the
results API's ``sessions`` read epoch by epoch (each session in the epoch that closed it;
replies valid against the OpenAPI document), the results stream, and the lake the master
writes (``<name>~sessions``). A tentative epoch's sessions come flagged through the results
API, also under EMIT FINAL."""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import aiohttp
import jsonschema
import pytest
from agent_helpers import SECRET, running_agents, wait_for

from agent.config import derive_api_token
from agent.jobs.ql_job import spec_from_query
from agent.ql.sessions import late_flag
from agent.runtime.local.oneshot import run_file
from agent.runtime.ops.openapi import DOCUMENT
from spark_sink.lake import Lake, read_table

QUERY = """
SELECT user, count(*) AS n, sum(bytes) AS total
FROM ingest
WHERE bytes >= 0
GROUP BY user
WINDOW SESSION(1 s)
"""

# (user, epoch offset, bytes) per agent: u1 active in 0, 1 then 3 (two sessions), u2 in 0
# and 2 (two sessions: one empty epoch between), u3 in 1, 2, 3 on alternating agents
PLAN = [
    [("u1", 0, 5), ("u1", 1, 7), ("u2", 0, 1), ("u3", 1, 2), ("u3", 3, 4), ("u1", 3, -1)],
    [("u1", 1, 3), ("u2", 2, 9), ("u3", 2, 6), ("u1", 3, 8), ("u2", 0, 2)],
]


def reference(e: int, records: list[tuple[str, int, int]]) -> list[dict[str, Any]]:
    by_user: dict[str, dict[int, list[int]]] = defaultdict(lambda: defaultdict(list))
    for user, off, b in records:
        if b >= 0:
            by_user[user][e + off].append(b)
    out = []
    for user, epochs in by_user.items():
        run: list[int] = []
        for ep in sorted(epochs):
            if run and ep != run[-1] + 1:
                out.append((user, run))
                run = []
            run.append(ep)
        out.append((user, run))
    rows = [
        {
            "window_start": float(run[0]),
            "window_end": float(run[-1] + 1),
            "user": user,
            "n": sum(len(by_user[user][ep]) for ep in run),
            "total": sum(sum(by_user[user][ep]) for ep in run),
            "flags": [],
        }
        for user, run in out
    ]
    return sorted(rows, key=lambda r: (r["window_start"], r["user"]))


async def test_a_session_query_closes_sessions_at_its_master(tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    async with running_agents(2, lake=str(lake), data_dir=str(tmp_path / "data")) as agents:
        # epoch e starts 2-3 s from now: an agent's idle clock closes an epoch by the wall
        # clock (idle_timeout 1 s, lateness 0.5 s), so records ingested more than 1.5 s after
        # their epoch ended would be late (counted, and their sessions flagged); a loaded CI
        # machine took that long once with e one second ahead
        e = math.floor(time.time()) + 3
        spec = spec_from_query("sessions", "t", QUERY, start_epoch=e, allowed_lateness=0.5)
        assert spec["epoch_seconds"] == 1.0 and spec["mode"] == "batch"
        await agents[0].submit(spec)
        everything, sends = [], []
        for a, plan in zip(agents, PLAN, strict=True):
            # in event-time order: a record more than allowed_lateness behind the newest one
            # is dropped as late by the worker (and counted), before any session sees it
            recs = [{"ts": e + off + 0.25, "user": u, "bytes": b} for u, off, b in plan]
            recs.sort(key=lambda r: r["ts"])
            everything.extend(recs)
            sends.append(a.ingest("ingest", [json.dumps(r) for r in recs]))
        await asyncio.gather(*sends)
        want = reference(e, [r for plan in PLAN for r in plan])

        async def closed() -> dict[str, Any] | None:
            try:
                reply = await agents[1].query("sessions", {})
            except Exception:
                return None
            return reply if len(reply.get("rows") or ()) >= len(want) else None

        reply = await wait_for(closed, 30, "the session query's closed sessions")
        got = sorted(reply["rows"], key=lambda r: (r["window_start"], r["user"]))
        assert got == want
        assert reply["columns"] == ["window_start", "window_end", "user", "n", "total", "flags"]
        assert reply["early_closed"] == 0 and reply["since_epoch"] >= e
        # elf run over the same records, columnar and row path: the same sessions
        path = tmp_path / "all.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in everything))
        for columnar in (True, False):
            local = run_file(QUERY, path, "json", columnar=columnar).sessions
            assert sorted(local or [], key=lambda r: (r["window_start"], r["user"])) == want
        # the per-epoch panes stay in the results API, one row per user active there
        res = await agents[0].results("sessions", e + 3)
        assert sorted((r["user"], r["n"]) for r in res["rows"]) == [("u1", 1), ("u3", 1)]
        # and each epoch's reply carries the sessions it closed: a session whose last active
        # epoch is L closes with epoch L + 1 (gap 1), so its window_end is that epoch's start;
        # over the epochs, every session once, equal to the reference
        from_api = []
        schema = {
            **DOCUMENT["components"]["schemas"]["Results"],
            "components": DOCUMENT["components"],
        }
        for epoch in range(e, reply["epoch"] + 1):
            res = await agents[1].results("sessions", epoch)
            jsonschema.validate(res, schema)  # the reply the OpenAPI document describes
            got_e = res["sessions"]
            assert got_e["columns"] == reply["columns"] and got_e["since_epoch"] == e
            assert all(r["window_end"] == float(epoch) for r in got_e["rows"]), (epoch, got_e)
            from_api.extend(got_e["rows"])
        assert sorted(from_api, key=lambda r: (r["window_start"], r["user"])) == want

        # the results stream (GET .../results/stream, elf results --follow) carries the same
        # reply: each epoch's sessions, once per epoch
        streamed = await stream_sessions(agents[0].api.url, e, int(reply["epoch"]))
        assert sorted(streamed, key=lambda r: (r["window_start"], r["user"])) == want

        # the lake: each epoch's sessions under the job "sessions~sessions", one named row
        # per session (Spark reads them as any job's rows), the same sessions once each
        def in_lake() -> list[dict[str, Any]] | None:
            files = Lake(str(lake)).files("sessions~sessions")
            if not set(range(e, reply["epoch"] + 1)) <= {f.epoch for f in files}:
                return None
            table = read_table(Lake(str(lake)), files)
            cols = ["epoch", "window_start", "window_end", "user", "n", "total", "flags"]
            return [{c: r.get(c) for c in cols} for r in table.to_pylist()]

        written = await wait_for(in_lake, 30, "the sessions in the lake")
        assert all(r["window_end"] == float(r["epoch"]) for r in written)
        got_lake = [{k: v for k, v in r.items() if k != "epoch"} for r in written]
        assert sorted(got_lake, key=lambda r: (r["window_start"], r["user"])) == want

        # a record of epoch e + 1 arriving now is late at its origin: counted in that epoch's
        # late field, and every session it could belong to or have joined says so (its key is
        # not known at the master): those spanning e + 1 or ending or starting next to it
        late = {"ts": e + 1.5, "user": "u2", "bytes": 1}
        await agents[1].ingest("ingest", [json.dumps(late)])
        near = {(r["user"], r["window_start"]) for r in want
                if r["window_start"] - 1 <= e + 1 <= r["window_end"]}  # fmt: skip
        flag = late_flag(e + 1)

        async def flagged() -> dict[str, Any] | None:
            reply = await agents[1].query("sessions", {})
            marked = {(r["user"], r["window_start"]) for r in reply["rows"] if flag in r["flags"]}
            return reply if marked else None

        reply = await wait_for(flagged, 30, "the late record's flags on the sessions")
        for row in reply["rows"]:
            key = (row["user"], row["window_start"])
            exact = {k: v for k, v in row.items() if k != "flags"}
            assert exact in [{k: v for k, v in w.items() if k != "flags"} for w in want]
            assert row["flags"] == ([flag] if key in near else []), row
        assert (await agents[1].results("sessions", e + 1))["late"]["records"] == 1

        # and the lake's session rows say so too: a new version of each epoch's file whose
        # sessions the master flagged (the reader rule picks it)
        def flagged_in_lake() -> list[dict[str, Any]] | None:
            rows = in_lake()
            marked = {(r["user"], r["window_start"]) for r in rows or () if flag in r["flags"]}
            return rows if marked == near else None

        written = await wait_for(flagged_in_lake, 30, "the late record's flags in the lake")
        assert len(written) == len(want)
        for row in written:
            assert row["flags"] == ([flag] if (row["user"], row["window_start"]) in near else [])


async def stream_sessions(api_url: str, first: int, last: int) -> list[dict[str, Any]]:
    """The sessions of epochs first..last read from the results stream (one per epoch: a
    newer version of an epoch carries the same sessions)."""
    headers = {"Authorization": f"Bearer {derive_api_token(SECRET.encode())}"}
    url = f"{api_url}/api/v1/jobs/sessions/results/stream?emit=changes&after={first - 1}:0"
    by_epoch: dict[int, list[dict[str, Any]]] = {}
    async with aiohttp.ClientSession(headers=headers) as http, http.get(url) as resp:
        assert resp.status == 200, await resp.text()
        async with asyncio.timeout(30):
            async for line in resp.content:
                event = json.loads(line)
                if event["event"] == "result" and first <= event["epoch"] <= last:
                    by_epoch[event["epoch"]] = event["sessions"]["rows"]
                if len(by_epoch) == last - first + 1:
                    break
    return [row for rows in by_epoch.values() for row in rows]


async def test_the_master_pipeline_flags_the_sessions_of_a_tentative_epoch() -> None:
    """The master's epoch pipeline (agent/runtime/job/pipeline.py) over a real ResultStore:
    an epoch stored lacking an expected origin is tentative, and the job hears it
    (``on_epoch_quality``) before its result, so the sessions it touches are flagged."""
    from types import SimpleNamespace

    from agent.jobs.job import create_job, parse_spec
    from agent.runtime.job.pipeline import EpochPipeline
    from agent.runtime.results.store import ResultStore
    from agent.tunables import RuntimeTunables
    from cbt import CompressedBufferTree

    text = "SELECT user, count(*) AS n FROM ingest GROUP BY user WINDOW SESSION(1 s)"
    job = create_job(parse_spec(spec_from_query("s", "t", text, start_epoch=1)))
    store = ResultStore()

    async def call_job(fn: Any, *args: Any) -> Any:
        return fn(*args)

    multicasts: list[dict[str, Any]] = []

    async def multicast(tid: int, message: dict[str, Any]) -> None:
        multicasts.append(message)

    host = SimpleNamespace(
        tunables=RuntimeTunables(), worker=None, store=store, spec=job.spec,
        changes=SimpleNamespace(job_for=lambda epoch: job), call_job=call_job,
        control=SimpleNamespace(multicast=multicast), lake=None, tree_list=[0],
    )  # fmt: skip
    pipeline = EpochPipeline(host)  # type: ignore[arg-type]
    for epoch, users, origins in [(1, "ab", {1, 2}), (2, "a", {1}), (3, "", {1, 2})]:
        tree = CompressedBufferTree(job.make_aggregator())
        for u in users:
            for k, v in job.compiled.map({"user": u}):
                tree.insert(k, v)
        snap = tree.flush()
        store.put(
            0, epoch, snap, time.time(), origins=frozenset(origins), expected=frozenset({1, 2})
        )
        await pipeline.master_epoch(0, epoch, snap)
    rows = {r["user"]: r for r in job.on_query({})["rows"]}
    assert rows["a"]["n"] == 2 and rows["b"]["n"] == 1
    # epoch 2 lacked origin 2: a's session holds it, b's was closed by it
    for user in "ab":
        (flag,) = rows[user]["flags"]
        assert flag.startswith("tentative: epoch 2 lacks origins"), flag
    assert job.on_query({})["flagged_epochs"] == 1
    assert [m["kind"] for m in multicasts] == ["empty"] * 3  # batch mode, as before

    # the results API (agent/runtime/job/queries.py, as GET /api/v1/jobs/{name}/results
    # answers) carries each epoch's closed sessions, flagged the same way
    from agent.runtime.job.queries import NotFinal, ResultQueries

    me = "http://me"
    host.__dict__.update(
        name="s", operator=None, count=lambda *a: None,
        network=SimpleNamespace(
            data_url=me, trees=SimpleNamespace(view=lambda t: SimpleNamespace(is_root=True))
        ),
        recovery=SimpleNamespace(unpublished=lambda t, e: False),
        late_ledger=SimpleNamespace(of=lambda first, last: None),
    )  # fmt: skip
    queries = ResultQueries(host)  # type: ignore[arg-type]
    by_epoch = {}
    for epoch in (1, 2, 3):
        res = await queries.results(epoch, "changes")
        by_epoch[epoch] = res["sessions"]
        assert res["state"] == ("tentative" if epoch == 2 else "final")
    assert by_epoch[1]["rows"] == []  # nothing closed with epoch 1 (gap 1: a and b go on)
    (b_row,) = by_epoch[2]["rows"]  # b's session [1, 2) closed by the tentative epoch 2
    (a_row,) = by_epoch[3]["rows"]  # a's [1, 3) closed by the final epoch 3, still flagged
    assert (b_row["user"], b_row["n"], a_row["user"], a_row["n"]) == ("b", 1, "a", 2)
    assert (b_row["window_start"], b_row["window_end"]) == (1.0, 2.0)
    assert (a_row["window_start"], a_row["window_end"]) == (1.0, 3.0)
    for row in (a_row, b_row):
        (flag,) = row["flags"]
        assert flag == "tentative: epoch 2 lacks origins 2", flag
    assert by_epoch[3]["columns"] == ["window_start", "window_end", "user", "n", "flags"]
    # EMIT FINAL: the tentative epoch is refused, the final epoch 3 shows a's session flagged
    with pytest.raises(NotFinal):
        await queries.results(2, "final")
    assert (await queries.results(3, "final"))["sessions"]["rows"] == [a_row]
    # an epoch the master never fed: said so, no rows guessed
    assert job.closed_windows(9) == {
        "columns": by_epoch[3]["columns"], "since_epoch": 1, "rows": None, "pending": True,
        "why": "epoch 9 not fed yet",
    }  # fmt: skip


def test_the_sessions_kept_per_epoch_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """``QLJob.closed_windows``: the newest MAX_SESSION_EPOCHS epochs within MAX_SESSION_ROWS
    rows (the newest epoch whole however many), older ones answered null with why, a reply
    cut at ``limit`` counts the rest in ``omitted``."""
    from agent.jobs import ql_job
    from agent.jobs.job import create_job, parse_spec
    from cbt import CompressedBufferTree

    monkeypatch.setattr(ql_job, "MAX_SESSION_EPOCHS", 3)
    monkeypatch.setattr(ql_job, "MAX_SESSION_ROWS", 4)
    text = "SELECT user, count(*) AS n FROM ingest GROUP BY user WINDOW SESSION(1 s)"
    job = create_job(parse_spec(spec_from_query("s", "t", text, start_epoch=1)))

    def feed(epoch: int, users: list[str]) -> None:
        tree = CompressedBufferTree(job.make_aggregator())
        for u in users:
            for k, v in job.compiled.map({"user": u}):
                tree.insert(k, v)
        job.on_epoch_result(epoch, tree.flush())

    for epoch in range(1, 7):  # u<k> active in epoch k alone: its session closes with k + 1
        feed(epoch, [f"u{epoch}"])
    assert [r["user"] for r in job.closed_windows(6)["rows"]] == ["u5"]
    assert [r["user"] for r in job.closed_windows(4)["rows"]] == ["u3"]
    old = job.closed_windows(3)
    assert old["rows"] is None and "newest 3 epochs within 4 rows" in old["why"]
    assert "pending" not in old
    feed(7, [f"v{i}" for i in range(5)])
    feed(8, [])  # closes the five v sessions: more than the row budget, kept whole
    whole = job.closed_windows(8)
    assert sorted(r["user"] for r in whole["rows"]) == [f"v{i}" for i in range(5)]
    assert job.closed_windows(7)["rows"] is None  # the budget dropped every older epoch
    cut = job.closed_windows(8, 2)
    assert cut["rows"] == whole["rows"][:2] and cut["omitted"] == 3
    # replaying an epoch (a master rebuilding) keeps its first sessions
    feed(8, ["v0"])
    assert job.closed_windows(8)["rows"] == whole["rows"]
