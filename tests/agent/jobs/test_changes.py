"""Runtime job changes on in-process agents (real sockets): new params, a new ELF QL filter,
"empty windows now", refusals; each checked against a Counter over the same input."""

from __future__ import annotations

import math
import time
from collections import Counter
from typing import Any

import pytest
from agent_helpers import complete_result as result
from agent_helpers import lines, running_agents, wait_for
from agent_helpers import word_counts as words

from agent.errors import BadRequest, Conflict
from agent.jobs.changes import parse_change
from agent.jobs.ql_job import spec_from_query

TEXTS = ["a bb ccc dddd", "bb ccc eeeee", "a a ccc"]


def next_epoch(seconds: float = 1.0) -> int:
    return math.floor(time.time() / seconds) + 1


async def test_new_params_apply_on_every_agent_between_records() -> None:
    async with running_agents(4) as agents:
        e = next_epoch()
        spec = {
            "name": "wc",
            "creator": "t",
            "job_class": "wordcount",
            "start_epoch": e,
            "allowed_lateness": 0.5,
        }
        await agents[0].submit(spec)
        for a in agents:
            await a.ingest("ingest", lines(e + 0.1, TEXTS))  # processed with min_length 1
        reply = await agents[2].change_job("wc", {"params": {"min_length": 3}})
        assert reply["agents_reached"] == 4 and reply["missing"] == []
        version = reply["version"]
        for a in agents:  # applied everywhere before the reply came back
            runtime = a.runtimes["wc"]
            assert runtime.version == version and runtime.job.min_length == 3
            assert a.table.get("wc").version == version  # type: ignore[union-attr]
        for a in agents:
            await a.ingest("ingest", lines(e + 1.1, TEXTS))  # processed with min_length 3
        await wait_for(lambda: _eq(agents[1], "wc", e, words(TEXTS, 4)), 20, "epoch e")
        await wait_for(lambda: _eq(agents[3], "wc", e + 1, words(TEXTS, 4, 3)), 20, "epoch e+1")
        # the timings endpoint shows when each agent applied it and sent its epochs upward
        timings = [a.job_timings("wc") for a in agents]
        assert all(
            [version, at] in [[v, x] for v, x in t["changes_applied"]]
            for t, at in zip(
                timings,
                [a.runtimes["wc"].changes.changes_applied[version] for a in agents],
                strict=True,
            )
        )
        completed = [x for t in timings for x in t["completed_at"]]
        assert {c[1] for c in completed} >= {e, e + 1}
        assert sum(1 for t in timings for s in t["sent_at"] if s[1] == e) == 3  # all but master


async def _eq(agent: Any, job: str, epoch: int, want: Counter) -> bool:
    return await result(agent, job, epoch) == want


async def test_a_new_where_filter_for_an_elf_ql_job() -> None:
    async with running_agents(3) as agents:
        e = next_epoch()
        query = "SELECT line, count(*) AS n FROM ingest WHERE line LIKE 'a%' GROUP BY line"
        spec = spec_from_query("ql", "t", query, start_epoch=e, allowed_lateness=0.5)
        await agents[0].submit(spec)
        texts = ["a1", "a1", "b1", "a2", "b2", "b2"]
        for a in agents:
            await a.ingest("ingest", lines(e + 0.1, texts))
        new_query = query.replace("LIKE 'a%'", "LIKE 'b%'")
        reply = await agents[1].change_job("ql", {"query": new_query})
        assert reply["agents_reached"] == 3
        for a in agents:
            await a.ingest("ingest", lines(e + 1.1, texts))
        want_a = Counter({t: 3 * n for t, n in Counter(texts).items() if t.startswith("a")})
        want_b = Counter({t: 3 * n for t, n in Counter(texts).items() if t.startswith("b")})
        await wait_for(lambda: _eq(agents[2], "ql", e, want_a), 20, "old filter")
        await wait_for(lambda: _eq(agents[2], "ql", e + 1, want_b), 20, "new filter")


async def test_empty_windows_now_drops_closed_panes_everywhere() -> None:
    async with running_agents(3) as agents:
        e = next_epoch(2.0)
        spec = {
            "name": "win",
            "creator": "t",
            "job_class": "wordcount",
            "start_epoch": e,
            "epoch_seconds": 2.0,
            "mode": "window",
            "window_size": 3,
            "allowed_lateness": 0.3,
        }
        await agents[0].submit(spec)
        for a in agents:
            await a.ingest("ingest", lines(2 * e + 0.1, ["old old"]))
        await wait_for(lambda: _eq(agents[0], "win", e, Counter(old=6)), 20, "first window")
        reply = await agents[2].change_job("win", {"empty": True})
        assert reply["agents_reached"] == 3
        for a in agents:
            got = [m for m in a.runtimes["win"].control.multicasts if m.get("kind") == "change"]
            assert got and got[-1]["empty"] is True
            await a.ingest("ingest", lines(2 * (e + 1) + 0.1, ["new"]))
        # the window ending at e+1 would hold e's pane too; it was emptied
        await wait_for(lambda: _eq(agents[1], "win", e + 1, Counter(new=3)), 20, "after empty")


async def test_a_new_epoch_length_applies_from_the_epoch_the_master_chose() -> None:
    async with running_agents(3) as agents:
        e = next_epoch()
        spec = {"name": "wcl", "creator": "t", "job_class": "wordcount", "start_epoch": e,
                "allowed_lateness": 0.5}  # fmt: skip
        await agents[0].submit(spec)
        asked = time.time()
        reply = await agents[1].change_job("wcl", {"epoch_seconds": 2.0})
        assert reply["agents_reached"] == 3 and reply["missing"] == []
        specs = [a.runtimes["wcl"].spec for a in agents]
        assert all(s.epoch_schedule == specs[0].epoch_schedule for s in specs)
        assert all(a.runtimes["wcl"].worker.clock.schedule == specs[0].schedule for a in agents)
        (first, seconds),  = specs[0].epoch_schedule  # fmt: skip
        schedule = specs[0].schedule
        switch = schedule.start(first)
        assert seconds == 2.0 and switch >= asked + 2.0  # no agent's records had reached it
        assert schedule.end(first - 1) == switch and schedule.end(first) == switch + 2.0
        stamped = [(switch - 0.5, "x y"), (switch + 0.1, "y z"), (switch + 1.9, "z z"),
                   (switch + 2.1, "w")]  # fmt: skip
        for a in agents:
            for ts, text in stamped:
                await a.ingest("ingest", lines(ts, [text]))
        expected: dict[int, Counter] = {}
        for ts, text in stamped:  # reference: each line in the epoch the schedule cuts
            expected.setdefault(schedule.epoch_of(ts), Counter()).update(text.split() * 3)
        assert sorted(expected) == [first - 1, first, first + 1]
        for epoch, want in expected.items():
            await wait_for(lambda ep=epoch, w=want: _eq(agents[2], "wcl", ep, w), 30, f"{epoch}")
        res = await agents[0].results("wcl", first)
        assert res["epoch_seconds"] == 2.0 and res["epoch_start"] == switch
        with pytest.raises(BadRequest, match="epoch_seconds: expected a number"):
            await agents[1].change_job("wcl", {"epoch_seconds": 0})


async def test_a_new_aggregate_applies_from_the_epoch_the_master_chose() -> None:
    async with running_agents(3) as agents:
        e = next_epoch()
        query = "SELECT line, count(*) AS n FROM ingest GROUP BY line"
        await agents[0].submit(spec_from_query("ql", "t", query, start_epoch=e,
                                               allowed_lateness=0.5))  # fmt: skip
        texts = ["a", "b", "a"]
        for a in agents:  # counted by the old aggregate
            await a.ingest("ingest", lines(e + 0.1, texts))
        asked = time.time()
        new_query = "SELECT line, min(ts) AS first FROM ingest GROUP BY line"
        reply = await agents[1].change_job("ql", {"query": new_query})
        assert reply["agents_reached"] == 3 and reply["missing"] == []
        specs = [a.runtimes["ql"].spec for a in agents]
        first = specs[0].aggregator_since
        assert first is not None and all(s.aggregator_since == first for s in specs)
        assert all(s.aggregator == "min" for s in specs)
        switch = specs[0].schedule.start(first)
        assert switch >= asked + 2.0
        before, after = switch - 0.6, switch + 0.3
        for i, a in enumerate(agents):  # around the switch: old map and count, then min(ts)
            await a.ingest("ingest", lines(before, texts))
            await a.ingest("ingest", lines(after + i * 0.1, texts))
        counted = Counter({t: 3 * n for t, n in Counter(texts).items()})
        await wait_for(lambda: _eq(agents[2], "ql", e, counted), 30, "epoch e, count")
        await wait_for(lambda: _eq(agents[2], "ql", first - 1, counted), 30, "before the switch")

        async def first_seen() -> dict[str, float] | None:
            try:
                res = await agents[0].results("ql", first)
            except Exception:
                return None
            return {r["line"]: r["first"] for r in res["rows"]} if res["complete"] else None

        await wait_for(lambda: _first_is(first_seen, after), 30, "after the switch, min(ts)")
        assert all(a.runtimes["ql"].worker.stats()["switch_discarded_keys"] == 0 for a in agents)


async def _first_is(seen: Any, after: float) -> bool:
    got = await seen()
    return got is not None and got == {"a": after, "b": after}


async def test_changes_that_would_alter_snapshots_are_refused() -> None:
    async with running_agents(2) as agents:
        query = "SELECT line, count(*) AS n FROM ingest GROUP BY line"
        await agents[0].submit(spec_from_query("ql", "t", query))
        await agents[0].submit({"name": "wc", "creator": "t", "job_class": "wordcount"})
        window = {"name": "win", "creator": "t", "job_class": "wordcount", "mode": "window",
                  "window_size": 3}  # fmt: skip
        await agents[0].submit(window)
        with pytest.raises(Conflict, match="cannot change epoch_seconds of window job"):
            await agents[1].change_job("win", {"epoch_seconds": 5})
        windowed = query + " WINDOW 3 s EVERY 1 s"
        await agents[0].submit(spec_from_query("qw", "t", windowed))
        with pytest.raises(Conflict, match="cannot change the aggregator of window job"):
            await agents[1].change_job("qw", {"query": windowed.replace("count(*)", "min(ts)")})
        with pytest.raises(BadRequest, match="min_length"):
            await agents[1].change_job("wc", {"params": {"min_length": "x"}})
        with pytest.raises(BadRequest, match="not ql"):
            await agents[1].change_job("wc", {"query": query})
        with pytest.raises(BadRequest, match="unknown change fields"):
            await agents[1].change_job("wc", {"colour": "red"})
        # nothing changed
        assert all(a.runtimes["wc"].version == 1 for a in agents)


def test_parse_change_names_the_bad_field() -> None:
    with pytest.raises(BadRequest, match="params: expected a JSON object"):
        parse_change({"params": [1]})
    with pytest.raises(BadRequest, match="empty: expected true or false"):
        parse_change({"empty": "yes"})
    with pytest.raises(BadRequest, match="an empty change"):
        parse_change({})
    change = parse_change({"params": {"k": 3}, "top_k": 5, "batch": True})
    assert change.params == {"k": 3} and dict(change.fields) == {"top_k": 5} and change.batch
