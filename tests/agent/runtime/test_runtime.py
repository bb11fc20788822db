"""The job runtime in-process (real sockets): the three execution models, send_to/on_recv,
job stop, and the HTTP API, each checked against a Counter over the same input."""

from __future__ import annotations

import dataclasses
import math
import time
from collections import Counter
from typing import Any

import pytest
from agent_helpers import FAST, SECRET, lines, running_agents, wait_for, word_counts
from agent_helpers import complete_result as result

from agent.client import ApiClient, ApiError
from agent.config import load_config
from agent.errors import BadRequest, Conflict
from agent.jobs.job import Job, register_job
from agent.runtime.host.agent import JOBS_TREE
from agent.server.daemon import start_agents, stop_agents
from cbt import Snapshot

WORDS_A = ["a a a b", "a c"]
WORDS_B = ["b c c", "d"]


@register_job("test-exclude-top")
class ExcludeTop(Job):
    """Iterative: workers drop the word the master fed back (last epoch's most common)."""

    def map(self, record: dict[str, Any]) -> list[tuple[str, int]]:
        banned = (self.feedback or {}).get("exclude")
        return [(w, 1) for w in record["line"].split() if w != banned]

    def feedback_for(self, epoch: int, snapshot: Snapshot) -> Any:
        top = snapshot.top(1)
        return {"exclude": top[0][0]} if top else None


@register_job("test-recv")
class Recorder(Job):
    """Records what ``send_to`` delivered to it."""

    def setup(self) -> None:
        self.received: list[tuple[int, Any]] = []

    def map(self, record: dict[str, Any]) -> list[tuple[str, int]]:
        return []

    def on_recv(self, node_id: int, paos: Any) -> None:
        self.received.append((node_id, paos))


def next_epoch() -> int:
    return math.floor(time.time()) + 1


async def test_synchronous_batches_roll_up_exactly_and_empty_reaches_every_worker() -> None:
    async with running_agents(4) as agents:
        e = next_epoch()
        spec = {
            "name": "wc",
            "creator": "t",
            "job_class": "wordcount",
            "start_epoch": e,
            "allowed_lateness": 0.5,
        }
        info = await agents[1].submit(spec)
        assert info["agents_reached"] == 4
        placed = agents[3].table.get("wc").spec["placement"]  # type: ignore[union-attr]
        assert placed in (0, 1)  # the less loaded of two candidate masters
        for a in agents:
            await a.ingest("ingest", lines(e + 0.1, WORDS_A) + lines(e + 1.1, WORDS_B))
        for epoch, texts in ((e, WORDS_A), (e + 1, WORDS_B)):
            want = word_counts(texts, 4)
            await wait_for(lambda ep=epoch, w=want: _eq(agents[2], "wc", ep, w), 15, f"{epoch}")
        # The master multicasts "empty" after each epoch (once the result is stored); every
        # worker gets it and the confirmation counts all four.
        master = next(a for a in agents if "master" in a.runtimes["wc"].roles())

        def empties() -> list[dict[str, Any]]:
            stats = master.runtimes["wc"].control.multicast_stats
            return [s for s in stats if s["kind"] == "empty" and s["epoch"] in (e, e + 1)]

        await wait_for(lambda: len(empties()) == 2, 10, "the empty multicasts")
        assert all(s["reached"] == 4 for s in empties())
        for a in agents:
            got = {
                m["epoch"] for m in a.runtimes["wc"].control.multicasts if m.get("kind") == "empty"
            }
            assert {e, e + 1} <= got
        # an empty that went down with its commit as one bundle (test_multicast_bundles.py):
        # every agent took both of the bundle's messages
        stats = master.runtimes["wc"].control.multicast_stats
        commits_sent = {s["sent_at"] for s in stats if s["kind"] == "commit"}
        for s in empties():
            if s["sent_at"] in commits_sent:
                for a in agents:
                    heard = a.runtimes["wc"].control.multicasts
                    kinds = {m["kind"] for m in heard if m.get("sent_at") == s["sent_at"]}
                    assert kinds == {"empty", "commit"}, (a.config.node_id, kinds)
        # a malformed bundle (too many messages, nested, not a list) is counted and dropped
        member = agents[3].runtimes["wc"]
        tid = member.tree_list[0]
        before = len(member.control.multicasts)
        note = {"kind": "note", "epoch": e}
        for bad in (
            {"kind": "bundle", "messages": [note] * 9},
            {"kind": "bundle", "messages": "not a list"},
            {"kind": "bundle", "messages": [{"kind": "bundle", "messages": [note]}, 7]},
        ):
            await member.control.on_multicast(tid, bad)
        assert member.counters["bad_multicast_bundle"] == 4
        assert len(member.control.multicasts) == before


async def test_the_commit_lag_each_agent_hears_times_its_recovery_timers() -> None:
    """Commits made (master) and heard (members) feed each agent's commit lag, which sets
    its checkpoint round's delay and its laggard probes' wait: within [the configured
    delay, LATE_COMMIT_CAP] (agent/runtime/recovery/commit_lag.py)."""
    from agent.runtime.recovery.recovery import LATE_COMMIT_CAP

    async with running_agents(3) as agents:
        e = next_epoch()
        spec = {"name": "wc", "creator": "t", "job_class": "wordcount", "start_epoch": e}
        await agents[0].submit(spec)
        for a in agents:
            await a.ingest("ingest", lines(e + 0.1, WORDS_A))
        await wait_for(lambda: _eq(agents[1], "wc", e, word_counts(WORDS_A, 3)), 15, "result")

        def lag(a: Any) -> dict[str, Any]:
            return a.runtimes["wc"].recovery.status()["commit_lag"]

        await wait_for(lambda: all(lag(a)["observed"] >= 1 for a in agents), 15, "commits")
        for a in agents:
            t = a.config.runtime
            seen = lag(a)
            assert t.checkpoint_delay <= seen["checkpoint_delay_s"] <= LATE_COMMIT_CAP
            assert t.laggard_probe_after <= seen["laggard_probe_after_s"] <= LATE_COMMIT_CAP
            assert seen["srtt_s"] is not None and seen["srtt_s"] >= 0


async def _eq(agent: Any, job: str, epoch: int, want: Counter) -> bool:
    return await result(agent, job, epoch) == want


async def test_sliding_windows_by_invertible_subtraction() -> None:
    async with running_agents(3) as agents:
        e = next_epoch()
        spec = {
            "name": "win",
            "creator": "t",
            "job_class": "wordcount",
            "start_epoch": e,
            "mode": "window",
            "window_size": 3,
            "window_slide": 1,
            "allowed_lateness": 0.5,
        }
        await agents[0].submit(spec)
        per_epoch = {e + i: [f"w{i} x", f"w{i}"] for i in range(4)}
        for a in agents:
            batch: list[str] = []
            for epoch, texts in per_epoch.items():
                batch += lines(epoch + 0.1, texts)
            await a.ingest("ingest", batch)
        for end in (e + 2, e + 3):
            want: Counter = Counter()
            for epoch in range(end - 2, end + 1):
                want += word_counts(per_epoch[epoch], 3)
            await wait_for(lambda ep=end, w=want: _eq(agents[1], "win", ep, w), 20, f"{end}")
        # a record of pane e + 1 arriving now is late: every window holding that pane lacks
        # it, so their late fields count it (the master's ledger sums a window's panes), and
        # the rows stay what the reference says
        await agents[2].ingest("ingest", lines(e + 1.2, ["late"]))

        async def late_of(epoch: int) -> int | None:
            return ((await agents[1].results("win", epoch)).get("late") or {}).get("records")

        await wait_for(lambda: _is(late_of(e + 3), 1), 20, "the late record in window e+3")
        assert await late_of(e + 2) == 1 and await late_of(e + 1) == 1
        assert await late_of(e) == 0  # the window e-2..e holds no pane e + 1
        want = sum((word_counts(per_epoch[p], 3) for p in (e + 1, e + 2, e + 3)), Counter())
        assert await result(agents[1], "win", e + 3) == want


async def _is(value: Any, want: Any) -> bool:
    return await value == want


async def test_iterative_jobs_use_last_epochs_feedback() -> None:
    async with running_agents(3) as agents:
        e = next_epoch()
        spec = {
            "name": "it",
            "creator": "t",
            "job_class": "test-exclude-top",
            "start_epoch": e,
            "mode": "iterative",
            "allowed_lateness": 0.5,
        }
        await agents[0].submit(spec)
        for a in agents:
            await a.ingest("ingest", lines(e + 0.1, ["a a a b"]))
        await wait_for(lambda: _eq(agents[0], "it", e, Counter(a=9, b=3)), 15, "epoch 1")
        # The master fed the top word back; every worker has it before the next epoch's data.
        await wait_for(
            lambda: all(a.runtimes["it"].job.feedback == {"exclude": "a"} for a in agents),
            10,
            "feedback at every worker",
        )
        later = next_epoch()
        for a in agents:
            await a.ingest("ingest", lines(later + 0.1, ["a b c"]))
        await wait_for(lambda: _eq(agents[2], "it", later, Counter(b=3, c=3)), 15, "epoch 2")


async def test_send_to_reaches_on_recv_and_stop_removes_the_job() -> None:
    async with running_agents(3) as agents:
        await agents[0].submit({"name": "rx", "creator": "t", "job_class": "test-recv"})
        await wait_for(lambda: all("rx" in a.runtimes for a in agents), 10, "job everywhere")
        ctx = agents[0].runtimes["rx"].context
        await ctx.send_to(agents[2].overlay.id, {"hello": [1, 2]})
        job = agents[2].runtimes["rx"].job
        assert job.received == [(agents[0].overlay.id, {"hello": [1, 2]})]  # type: ignore[attr-defined]
        reply = await agents[1].stop_job("rx")
        assert reply["state"] == "stopped" and reply["agents_reached"] == 3
        await wait_for(lambda: all("rx" not in a.runtimes for a in agents), 10, "job gone")
        assert [j["state"] for j in agents[2].jobs() if j["name"] == "rx"] == ["stopped"]


async def test_http_api_end_to_end_and_bad_input() -> None:
    async with running_agents(2) as agents:
        api = ApiClient(agents[0].api.url, agents[0].config.api_token)
        loop_call = _in_thread
        e = next_epoch()
        spec = {
            "name": "api",
            "creator": "t",
            "job_class": "wordcount",
            "start_epoch": e,
            "allowed_lateness": 0.5,
        }
        created = await loop_call(api.submit, spec)
        assert created["job"] == "api" and created["state"] == "running"
        assert [j["name"] for j in await loop_call(api.jobs)] == ["api"]
        accepted = await loop_call(
            api.ingest, "ingest", [*lines(e + 0.1, ["q r", "q"]), "not json", '{"no": "ts"}']
        )
        assert accepted["accepted"] == 2 and accepted["rejected"] == 2
        await wait_for(lambda: _eq(agents[1], "api", e, Counter(q=2, r=1)), 15, "api epoch")
        res = await loop_call(api.results, "api", e)
        assert Counter({k: v for k, v in res["rows"]}) == Counter(q=2, r=1)
        status = await loop_call(api.status)
        assert status["node_id"] == f"{agents[0].overlay.id:040x}" and "api" in status["jobs"]
        for call, status_code in (
            (lambda: api.results("api", -1), 400),
            (lambda: api.results("nope"), 404),
            (lambda: api.ingest("no-such-input", ["{}"]), 404),
            (
                lambda: api.submit(
                    {"name": "x", "creator": "t", "job_class": "wordcount", "trees": 0}
                ),
                400,
            ),
            (lambda: api.call("POST", "/api/v1/jobs", raw=b"[1, 2]"), 400),
        ):
            with pytest.raises(ApiError) as err:
                await loop_call(call)
            assert err.value.status == status_code, err.value.message
            assert err.value.message


async def _in_thread(fn: Any, *args: Any) -> Any:
    """The API client is synchronous; run it off the event loop that serves the agents."""
    import asyncio

    return await asyncio.to_thread(fn, *args)


async def test_cross_job_route_reaches_the_other_jobs_master() -> None:
    from srt import app_id

    async with running_agents(3) as agents:
        e = next_epoch()
        await agents[0].submit(
            {
                "name": "words",
                "creator": "t",
                "job_class": "wordcount",
                "start_epoch": e,
                "allowed_lateness": 0.5,
            }
        )
        await agents[0].submit({"name": "asker", "creator": "t", "job_class": "test-recv"})
        for a in agents:
            await a.ingest("ingest", lines(e + 0.1, ["x y x"]))
        await wait_for(lambda: _eq(agents[1], "words", e, Counter(x=6, y=3)), 15, "words epoch")
        asker = agents[2].runtimes["asker"].job
        assert asker.context is not None
        reply = await asker.context.route(app_id("words", "t"), {"word": "x"})
        assert reply["word"] == "x" and reply["count"] == 6
        with pytest.raises(BadRequest, match="non-empty string 'word'"):
            await asker.context.route(app_id("words", "t"), {"word": ""})


async def test_m_trees_and_exact_top_k_of_counts() -> None:
    async with running_agents(3) as agents:
        e = next_epoch()
        base = {
            "creator": "t",
            "job_class": "wordcount",
            "start_epoch": e,
            "allowed_lateness": 0.5,
            "trees": 3,
        }
        await agents[0].submit({**base, "name": "all3"})
        # Locally every agent's top word is its own "hot" word; globally it is "common".
        await agents[0].submit({**base, "name": "top1", "top_k": 1})
        await agents[0].submit({**base, "name": "top2", "top_k": 2})
        want: Counter = Counter()
        for i, a in enumerate(agents):
            texts = [f"hot{i}"] * (10 + i) + ["common"] * 6
            want.update(texts)
            await a.ingest("ingest", lines(e + 0.1, texts))
        await wait_for(lambda: _eq(agents[1], "all3", e, want), 15, "3-tree result")
        roots = {
            v.tree_id: a.overlay.id
            for a in agents
            for v in (a.trees.view(t) for t in a.runtimes["all3"].tree_list)  # type: ignore[union-attr]
            if v is not None and v.is_root
        }
        assert len(roots) == 3  # every tree has exactly one master
        for name, k in (("top1", 1), ("top2", 2)):
            res = await wait_for(lambda n=name: _complete(agents[2], n, e), 15, name)
            assert [tuple(r) for r in res["rows"]] == want.most_common(k)


async def _complete(agent: Any, job: str, epoch: int) -> dict[str, Any] | None:
    try:
        res = await agent.results(job, epoch)
    except Exception:
        return None
    return res if res["complete"] else None


async def test_agent_data_plane_endpoints_reject_bad_bodies_and_keep_serving() -> None:
    from srt import DataPlaneError

    async with running_agents(2) as agents:
        await agents[0].submit({"name": "wc", "creator": "t", "job_class": "wordcount"})
        await wait_for(lambda: all("wc" in a.runtimes for a in agents), 10, "job everywhere")
        client, url = agents[0].client, agents[1].data_url
        for path, raw in (
            ("/agent/v1/handover", b"not json"),
            ("/agent/v1/handover", b'{"job": "wc", "tree": 1, "items": [{"epoch": 1}]}'),
            ("/agent/v1/results", b"[1]"),
            ("/agent/v1/recv", b'{"job": "wc", "from": "zz"}'),
        ):
            status, body = await client.request(
                "POST", url, path, raw, content_type="application/json"
            )
            assert status == 400, (path, status, body)
        with pytest.raises(DataPlaneError):  # an unknown job is a clear 404
            await client.post_json(url, "/agent/v1/results", {"job": "nope", "tree": 1})
        assert agents[1].counters.get("bad_handover") == 1
        assert (await client.post_json(url, "/agent/v1/jobs", {}))["jobs"][0]["name"] == "wc"


async def test_a_new_jobs_tree_root_learns_the_job_table_from_its_children() -> None:
    async with running_agents(3) as agents:
        spec = {"name": "wc", "creator": "t", "job_class": "wordcount"}
        await agents[0].submit(spec)
        host, port = agents[0].overlay.info.address
        cfg = load_config(
            env={"ELF_SECRET": SECRET},
            overrides={"node_id": f"{JOBS_TREE ^ 1:040x}", "bootstrap": [f"{host}:{port}"]},
        )
        cfg = dataclasses.replace(cfg, tunables=FAST, heartbeat_interval=0.3)
        [newcomer] = await start_agents(cfg)
        try:
            # the closest agent to the jobs-tree key takes the root over with an empty table
            await wait_for(
                lambda: newcomer.jobs_tree()["is_root"] and newcomer.table.get("wc"),
                30,
                "the new jobs-tree root to hold the job table",
            )
            assert newcomer.table.get("wc").spec["name"] == "wc"  # type: ignore[union-attr]
            # and it serves the table as the root: a submission through it sees the job
            with pytest.raises(Conflict, match="already running"):
                await newcomer.submit(spec)
        finally:
            await stop_agents([newcomer], timeout=30)


async def test_stop_agents_leaves_no_agent_running_past_its_budget(tmp_path: Any) -> None:
    """A budget too short to stop every agent one by one: the rest are stopped together, so
    none keeps the event loop busy after the caller returns."""
    cfg = load_config(env={"ELF_SECRET": "s" * 64}, overrides={"logical_agents": 4})
    agents = await start_agents(cfg)
    try:
        await stop_agents(agents, timeout=0.001)
        assert not [a for a in agents if a.running()]
    finally:
        await stop_agents(agents, timeout=30)
