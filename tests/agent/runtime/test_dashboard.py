"""The dashboard's data: the cluster picture against independent references, its HTTP routes
(token, static files, query action, 4xx naming the field), the Server-Sent Events feed (at most
one job event per change, bounded streams, streams end when the API stops), ``elf top``'s
rendering of a live agent's feed, and ``elf dashboard``.

In-process agents on loopback (real overlay, data plane and API); the browser test with agent
processes is tests/agent/server/test_dashboard_browser.py.
"""

from __future__ import annotations

import asyncio
import io
import itertools
import math
import time
from collections import Counter
from typing import Any

import aiohttp
import orjson
from agent_helpers import SECRET, lines, running_agents, wait_for
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console
from yarl import URL

from agent.cli import cli
from agent.client import ApiClient, parse_events
from agent.config import derive_api_token
from agent.runtime.ops.dashboard.cluster import ClusterPicture, tree_edges
from agent.runtime.ops.dashboard.routes import MAX_STREAMS, DashboardRoutes
from agent.top import TopView, render, run_top

TOKEN = derive_api_token(SECRET.encode())
AUTH = {"Authorization": f"Bearer {TOKEN}"}
QUERY = "SELECT line, count(*) AS n FROM ingest GROUP BY line"
TEXTS = [["a b", "a"], ["b c c"], ["a"], ["c a", "b"], ["d"], ["a a"]]


def qspec(name: str, start: int) -> dict[str, Any]:
    from agent.jobs.ql_job import spec_from_query

    return spec_from_query(name, "t", QUERY, start_epoch=start, allowed_lateness=0.5)


async def feed(agents: list[Any], start: int) -> dict[int, Counter]:
    """Known lines for epochs start.. on every agent; the expected count per epoch."""
    expected = {}
    for k, texts in enumerate(TEXTS):
        for a in agents:
            await a.ingest("ingest", lines(start + k + 0.1, texts))
        want = Counter()
        for text in texts:  # QL groups whole lines, not words
            want[text] += len(agents)
        expected[start + k] = want
    return expected


def hexid(agent: Any) -> str:
    return f"{agent.node_id:040x}"


async def test_picture_shows_every_agent_the_tree_and_exact_results() -> None:
    async with running_agents(3) as agents:
        start = math.floor(time.time()) + 1
        await agents[0].submit(qspec("q", start))
        expected = await feed(agents, start)
        await agents[2].ingest("ingest", [b"not json", b'{"no": "ts"}'])  # 2 rejected lines
        picture = agents[1].dashboard

        async def shown() -> dict[str, Any] | None:
            snap = await picture.snapshot(max_age=0)
            job = snap["jobs"].get("q")
            res = (job or {}).get("result") or {}
            if res.get("epoch") in expected and res.get("complete"):
                return snap
            return None

        snap = await wait_for(shown, 30, "a complete result of a fed epoch in the picture")
        job = snap["jobs"]["q"]
        res = job["result"]
        # the result equals the lines fed for its epoch (reference: a Counter)
        assert Counter({r["line"]: r["n"] for r in res["rows"]}) == expected[res["epoch"]]
        assert res["rows_total"] == len(res["rows"])
        # every agent, alive; the picture was asked of all of them
        assert {a["node_id"] for a in snap["agents"]} == {hexid(a) for a in agents}
        assert {a["status"] for a in snap["agents"]} == {"alive"}
        assert snap["asked"] == snap["known"] == 3 and not snap["truncated"]
        # the tree: one node per agent, parent links as each agent's own tree view says
        tid = agents[0].runtimes["q"].tree_list[0]
        nodes = {n["node"]: n for n in job["nodes"]}
        assert set(nodes) == {hexid(a) for a in agents}
        for a in agents:
            view = a.trees.view(tid)
            want_parent = None if view.is_root else f"{view.parent.id:040x}"
            assert nodes[hexid(a)]["parent"] == want_parent
            assert nodes[hexid(a)]["is_root"] == ("master" in a.runtimes["q"].roles())
        assert len(tree_edges(job["nodes"])) == 2
        roots = [n for n in job["nodes"] if n["is_root"]]
        assert len(roots) == 1 and job["masters"][f"{tid:040x}"]["node"] == roots[0]["node"]
        # the standby the master names is marked on its node
        standby = job["standbys"].get(f"{tid:040x}")
        if standby is not None:
            assert nodes[standby]["standby"]
        assert job["versions"] == {hexid(a): 1 for a in agents} and job["applied_everywhere"]
        epochs = job["masters"][f"{tid:040x}"]["epochs"]
        assert res["epoch"] in {e["epoch"] for e in epochs}
        assert all(not e["tentative"] and e["coverage"] == 1.0 for e in epochs)
        # per-agent figures are present and plausible
        fed = sum(len(texts) for texts in TEXTS)
        for a in snap["agents"]:
            bad = 2 if a["node_id"] == hexid(agents[2]) else 0
            assert a["rss_bytes"] > 0 and a["cpu_percent"] >= 0 and a["rejected"] == bad
            assert a["inputs"]["ingest"] == {"accepted": fed, "rejected": bad}
            assert a["roles"]["q"] and "worker" in a["roles"]["q"]


async def test_picture_is_bounded_and_shared() -> None:
    async with running_agents(3) as agents:
        small = ClusterPicture(agents[0].views, max_agents=2)
        snap = await small.snapshot()
        assert snap["asked"] == 2 and snap["known"] == 3 and snap["truncated"]
        assert len(snap["agents"]) == 2
        # concurrent viewers share one refresh
        big = agents[0].dashboard
        before = big.refreshes
        await asyncio.gather(*(big.snapshot(max_age=0.5) for _ in range(10)))
        assert big.refreshes - before <= 1


async def test_routes_need_the_token_except_the_static_page() -> None:
    async with running_agents(2) as agents:
        url = agents[0].api.url
        async with aiohttp.ClientSession() as http:
            for path in ("/api/v1/dashboard/cluster", "/api/v1/dashboard/events"):
                async with http.get(url + path) as resp:
                    assert resp.status == 401
            async with http.get(url + "/dashboard/") as resp:
                assert resp.status == 200
                assert "default-src 'self'" in resp.headers["Content-Security-Policy"]
                page = await resp.text()
                assert "uPlot.iife.min.js" in page and "dashboard.js" in page
            for name in ("uPlot.iife.min.js", "dashboard.js", "dashboard.css", "uPlot.LICENSE"):
                async with http.get(f"{url}/dashboard/{name}") as resp:
                    assert resp.status == 200, name
            for bad in ("/dashboard/nope.js", "/dashboard/..%2Fcluster.py", "/dashboard/%2e%2e"):
                async with http.get(URL(url + bad, encoded=True)) as resp:  # sent as is
                    assert resp.status in (401, 404), bad  # not public, or public and absent
                async with http.get(URL(url + bad, encoded=True), headers=AUTH) as resp:
                    assert resp.status == 404, bad  # no file outside the allow-list
            # raw request paths that try to climb out of /dashboard/: never the API unlocked
            for climb in (
                "/dashboard/../api/v1/status",
                "/dashboard/%2e%2e/api/v1/status",
                "/dashboard/..%2fapi/v1/status",
                "/dashboard//../api/v1/status",
                "/dashboard%2f../api/v1/status",
                "//dashboard/../api/v1/status",
            ):
                status = await raw_status(agents[0].api.port, climb)
                assert status in (401, 404), (climb, status)
            async with http.get(url + "/dashboard", allow_redirects=False) as resp:
                assert resp.status == 302 and resp.headers["Location"] == "/dashboard/"
            async with http.get(url + "/api/v1/dashboard/cluster", headers=AUTH) as resp:
                assert resp.status == 200
                body = await resp.json()
                assert len(body["agents"]) == 2
                assert TOKEN not in await resp.text() and SECRET not in await resp.text()


async def raw_status(port: int, path: str) -> int:
    """The status of ``GET path`` sent byte for byte (no client normalizes it)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
    await writer.drain()
    head = await reader.readline()
    writer.close()
    return int(head.split()[1])


async def test_query_action_submits_a_ql_job_and_names_bad_fields() -> None:
    async with running_agents(2) as agents:
        url = agents[0].api.url + "/api/v1/dashboard/query"
        cases = [
            (b"not json", None),
            (orjson.dumps([1]), None),
            (orjson.dumps({"name": "x", "query": QUERY, "extra": 1}), "extra"),
            (orjson.dumps({"query": QUERY}), "name"),
            (orjson.dumps({"name": "x", "query": ""}), "query"),
            (orjson.dumps({"name": "x", "query": "SELEC nothing"}), "query"),
            (orjson.dumps({"name": "x", "query": QUERY, "epoch_seconds": "1"}), "epoch_seconds"),
            (orjson.dumps({"name": "x", "query": QUERY, "epoch_seconds": 0.001}), "epoch_seconds"),
            (orjson.dumps({"name": "x", "query": "x" * 5000}), "query"),
        ]
        async with aiohttp.ClientSession(headers=AUTH) as http:
            for body, field in cases:
                async with http.post(url, data=body) as resp:
                    doc = await resp.json()
                    assert resp.status == 400, (body[:60], doc)
                    assert doc["error"]
                    assert doc.get("field") == field, (body[:60], doc)
            ok = {"name": "from-page", "query": QUERY, "epoch_seconds": 2}
            async with http.post(url, data=orjson.dumps(ok)) as resp:
                doc = await resp.json()
                assert resp.status == 201, doc
                assert doc["agents_reached"] == 2
        entry = agents[1].table.get("from-page")
        assert entry is not None and entry.spec["params"]["query"] == QUERY
        assert entry.spec["epoch_seconds"] == 2 and entry.spec["creator"] == "dashboard"


async def read_events(resp: aiohttp.ClientResponse, until: Any, timeout: float) -> list[Any]:
    """Parse SSE frames from ``resp`` until ``until(events)`` or ``timeout``."""
    events: list[tuple[str, Any]] = []
    buf = b""
    deadline = time.monotonic() + timeout
    while not until(events):
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(f"events so far: {[e for e, _ in events]}")
        chunk = await asyncio.wait_for(resp.content.readany(), left)
        if not chunk:
            break
        buf += chunk
        while b"\n\n" in buf:
            frame, buf = buf.split(b"\n\n", 1)
            kind, data = "message", []
            for line in frame.decode().split("\n"):
                if line.startswith("event:"):
                    kind = line[6:].strip()
                elif line.startswith("data:"):
                    data.append(line[5:].strip())
            if data:
                events.append((kind, orjson.loads("\n".join(data))))
    return events


async def test_event_feed_sends_a_job_only_when_it_changed_and_ends_on_stop() -> None:
    async with running_agents(2) as agents:
        start = math.floor(time.time()) + 1
        await agents[0].submit(qspec("q", start))
        await feed(agents, start)
        url = agents[1].api.url + "/api/v1/dashboard/events"
        async with aiohttp.ClientSession(headers=AUTH) as http, http.get(url) as resp:
            assert resp.status == 200
            assert resp.headers["Content-Type"].startswith("text/event-stream")
            t0 = time.monotonic()
            newest = lambda ev: [d["newest_epoch"] for k, d in ev if k == "job"]  # noqa: E731
            events = await read_events(resp, lambda ev: len(set(newest(ev)) - {None}) >= 3, 30)
            elapsed = time.monotonic() - t0
            assert events[0][0] == "cluster"
            assert events[0][1]["job_names"] == ["q"]
            jobs = [d for k, d in events if k == "job"]
            # never the same job content twice in a row: at most one event per change
            keys = [
                (
                    d["newest_epoch"],
                    d["version"],
                    d["applied_everywhere"],
                    sorted((n["node"], n["parent"] or "", n["lag"] or 0) for n in d["nodes"]),
                )
                for d in jobs
            ]
            assert all(a != b for a, b in itertools.pairwise(keys))
            # cluster events come at most once per refresh period (1 s here) and the
            # stream's first one at once (a generous slack for a loaded machine)
            clusters = sum(1 for k, _ in events if k == "cluster")
            assert clusters <= elapsed / agents[1].dashboard.min_interval + 2
            # a stopped job is announced as gone
            await agents[0].stop_job("q")
            gone = await read_events(resp, lambda ev: any(k == "gone" for k, _ in ev), 30)
            assert ("gone", {"name": "q"}) in gone
            # the API stopping ends the stream (no viewer holds an agent's shutdown)
            await agents[1].api.stop()
            assert await asyncio.wait_for(resp.content.read(), 30) is not None
            assert resp.content.at_eof()


async def test_event_streams_are_bounded() -> None:
    async with running_agents(1) as agents:
        url = agents[0].api.url + "/api/v1/dashboard/events"
        async with aiohttp.ClientSession(headers=AUTH) as http:
            streams = [await http.get(url) for _ in range(MAX_STREAMS)]
            try:
                assert all(s.status == 200 for s in streams)
                await wait_for(
                    lambda: agents[0].dashboard_routes.streams == MAX_STREAMS, 10, "streams"
                )
                async with http.get(url) as extra:
                    assert extra.status == 503
                    assert "at most" in (await extra.json())["error"]
                streams.pop().close()
                await wait_for(
                    lambda: agents[0].dashboard_routes.streams < MAX_STREAMS, 10, "a slot"
                )
                async with http.get(url) as again:
                    assert again.status == 200
            finally:
                for s in streams:
                    s.close()


async def test_elf_top_renders_a_live_agents_feed() -> None:
    async with running_agents(3) as agents:
        start = math.floor(time.time()) + 1
        await agents[0].submit(qspec("q", start))
        await feed(agents, start)
        await wait_for(
            lambda: any("master" in a.runtimes["q"].roles() for a in agents), 10, "a master"
        )
        master = next(a for a in agents if "master" in a.runtimes["q"].roles())

        async def has_epoch() -> bool:
            snap = await agents[2].dashboard.snapshot(max_age=0)
            return snap["jobs"].get("q", {}).get("newest_epoch") is not None

        await wait_for(has_epoch, 30, "an epoch in the picture")
        client = ApiClient(agents[2].api.url, TOKEN, timeout=30)
        console = Console(record=True, width=200, force_terminal=False)
        # the same feed the page reads, through the CLI's code path
        await asyncio.to_thread(run_top, client, console, once=True)
        text = console.export_text()
        assert "ELF top" in text and "jobs" in text and "agents" in text
        row = next(line for line in text.splitlines() if line.startswith("│ q "))
        assert hexid(master)[:8] in row
        assert text.count("│ alive") == 3
        for a in agents:
            assert hexid(a)[:8] in text
        # a picture from the JSON snapshot renders the same rows
        snap = await agents[2].dashboard.snapshot()
        again = Console(record=True, width=200)
        again.print(render(TopView.from_snapshot(snap)))
        assert hexid(master)[:8] in again.export_text()


async def test_elf_dashboard_prints_the_url_and_keeps_the_token_out_unless_asked() -> None:
    async with running_agents(1) as agents:
        url = agents[0].api.url
        env = {"ELF_TOKEN": TOKEN, "DISPLAY": "", "WAYLAND_DISPLAY": ""}

        def run(*args: str) -> Any:
            return CliRunner().invoke(cli, ["dashboard", "--api", url, *args], env=env)

        plain = await asyncio.to_thread(run)
        assert plain.exit_code == 0, plain.output
        assert f"{url}/dashboard/" in plain.output and TOKEN not in plain.output
        shown = await asyncio.to_thread(run, "--show-token", "--no-browser")
        assert shown.exit_code == 0 and f"#token={TOKEN}" in shown.output
        wrong = await asyncio.to_thread(
            lambda: CliRunner().invoke(
                cli, ["dashboard", "--api", url], env={**env, "ELF_TOKEN": "wrong"}
            )
        )
        assert wrong.exit_code != 0 and "401" in wrong.output


# ---- the feed's frames and the picture's memory, without a network ----------------------------

JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=12),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=12,
)


def job_doc(name: str, extra: Any, epoch: int | None = 7) -> dict[str, Any]:
    return {
        "name": name,
        "nodes": [],
        "newest_epoch": epoch,
        "version": 1,
        "applied_everywhere": True,
        "versions": {},
        "result": None,
        "extra": extra,
    }


@settings(max_examples=60, deadline=None)
@given(names=st.lists(st.text(min_size=1, max_size=16), unique=True, max_size=4), extra=JSON)
def test_event_frames_parse_back_and_repeat_nothing(names: list[str], extra: Any) -> None:
    """Whatever a job's name or content (newlines, "event:", unicode), the frames parse back
    to the same documents; the same picture again sends only its cluster event; a job gone
    is announced once."""
    snap = {
        "time": 1.0,
        "agents": [],
        "timeline": [],
        "jobs": {n: job_doc(n, extra) for n in names},
    }
    sent: dict[str, str] = {}
    events = list(parse_events(io.BytesIO(DashboardRoutes._frames(snap, sent))))
    assert events[0] == (
        "cluster",
        {"time": 1.0, "agents": [], "timeline": [], "job_names": sorted(names)},
    )
    assert [d for k, d in events[1:]] == [snap["jobs"][n] for n in sorted(names)]
    assert {k for k, _ in events[1:]} <= {"job"}
    again = list(parse_events(io.BytesIO(DashboardRoutes._frames(snap, sent))))
    assert [k for k, _ in again] == ["cluster"]
    if names:
        moved = dict(snap, jobs={names[0]: job_doc(names[0], extra, epoch=8)})
        after = list(parse_events(io.BytesIO(DashboardRoutes._frames(moved, sent))))
        assert [k for k, _ in after] == ["cluster", "job", *["gone"] * (len(names) - 1)]
        assert {d["name"] for k, d in after if k == "gone"} == set(names[1:])


class _Overlay:
    def __init__(self) -> None:
        self.failed: list[Any] = []
        self.joined: list[Any] = []

    def contacts(self) -> list[Any]:
        return []

    def leaf_set(self) -> list[Any]:
        return []

    def size_estimate(self) -> int:
        return 1

    def on_node_failed(self, cb: Any) -> None:
        self.failed.append(cb)

    def on_node_joined(self, cb: Any) -> None:
        self.joined.append(cb)


class _Agent:
    """The least an agent must offer a ClusterPicture (its ClusterSource and SummarySource)."""

    def __init__(self) -> None:
        from agent.runtime.ops.looplag import LoopLag

        self.overlay = _Overlay()
        self.client = None
        self.runtimes: dict[str, Any] = {}
        self.inputs: dict[str, Any] = {}
        self.trees = None
        self.node_id = 1
        self.data_url = "http://127.0.0.1:1"
        self.started_at = time.time()
        self.loop_lag = LoopLag()

    def describe(self) -> dict[str, Any]:
        return {"node_id": f"{self.node_id:040x}", "overlay": "127.0.0.1:1"}

    def jobs(self) -> list[dict[str, Any]]:
        return []

    async def data_url_of(self, node: Any) -> str:
        raise AssertionError("no peer to ask")

    # what the picture reads (ClusterSource, SummarySource), from the fields above
    def loop_lag_stats(self) -> dict[str, Any]:
        return self.loop_lag.stats()

    def input_stats(self) -> dict[str, dict[str, Any]]:
        return {name: source.stats() for name, source in self.inputs.items()}

    def job_summaries(self) -> dict[str, Any]:
        return {}

    def tree_view(self, tree: int) -> Any:
        return None

    def tree_members(self) -> list[Any]:
        return []

    def leaf_set(self) -> list[Any]:
        return self.overlay.leaf_set()

    def contacts(self) -> list[Any]:
        return self.overlay.contacts()

    def size_estimate(self) -> int:
        return self.overlay.size_estimate()

    def watch_membership(self, failed: Any, joined: Any) -> None:
        self.overlay.on_node_failed(failed)
        self.overlay.on_node_joined(joined)

    async def post_json(self, url: str, path: str, body: dict) -> Any:
        return await self.client.post_json(url, path, body)  # type: ignore[attr-defined]

    def result_reader(self, name: str) -> Any:
        return None


async def test_failed_agents_stay_listed_and_tentative_runs_are_one_event() -> None:
    from agent.runtime.ops.dashboard.cluster import _JobTrack
    from overlay import NodeInfo

    agent = _Agent()
    picture = ClusterPicture(agent)
    picture.attach()
    gone = NodeInfo(0xAB, "127.0.0.1", 9)
    agent.overlay.failed[0](gone)
    snap = await picture.snapshot(max_age=0)
    row = next(a for a in snap["agents"] if a["node_id"] == f"{0xAB:040x}")
    assert row["status"] == "failed" and row["overlay"] == "127.0.0.1:9"
    assert snap["known"] == 2
    agent.overlay.joined[0](gone)  # back: no longer listed as failed, a recovery noted
    snap = await picture.snapshot(max_age=0)
    assert [a["node_id"] for a in snap["agents"]] == [f"{1:040x}"]
    assert [e["kind"] for e in snap["timeline"]] == ["failure", "recovery"]

    track = _JobTrack()

    def epochs(*numbers: int) -> dict[str, Any]:
        return {
            "t": {
                "node": "aa",
                "epochs": [{"epoch": e, "tentative": True, "coverage": 0.5} for e in numbers],
            }
        }

    picture._note_changes("j", track, epochs(10, 11, 12), {}, time.time())
    agent.overlay.failed[0](gone)
    picture._note_changes("j", track, epochs(11, 12, 13), {}, time.time())
    kinds = [(e["kind"], e["text"]) for e in picture._timeline][2:]
    assert kinds == [
        ("tentative", "j: epochs 10–12 tentative (coverage ≥ 50%)"),
        ("failure", kinds[1][1]),
        ("tentative", "j: epoch 13 tentative (coverage ≥ 50%)"),
    ]


async def test_throughput_counts_only_agents_seen_twice() -> None:
    """Records/s is each agent's growth between two new epochs, over the agents present in
    both pictures: an agent that died does not turn the rate negative (or zero), a new one
    does not add its whole count."""
    picture = ClusterPicture(_Agent())
    entry = {"name": "j", "version": 1, "spec": {"epoch_seconds": 1.0}}

    def summary(node: str, records: int, epoch: int) -> dict[str, Any]:
        job = {
            "version": 1,
            "roles": ["worker"],
            "worker": {"records_in": records},
            "trees": [],
            "masters": {
                "t": {
                    "committed": None,
                    "epochs": [
                        {"epoch": epoch, "latency_s": 0.1, "tentative": False, "coverage": 1.0}
                    ],
                }
            }
            if node == "m"
            else {},
        }
        return {"node_id": node, "jobs": {"j": job}}

    picture._job(entry, [summary("m", 100, 1), summary("a", 50, 1)], 1000.0)
    job = picture._job(
        entry, [summary("m", 130, 2), summary("b", 999, 2)], 1002.0
    )  # "a" died, "b" is new
    assert job["series"][-1][1] == 15.0  # only m's 30 records over 2 s
    assert job["records_in"] == 130 + 999


async def test_picture_follows_tree_links_past_the_overlay_contacts() -> None:
    """An agent the serving agent has no overlay contact with is still asked when a tree
    parent names it (a deep tree in a large overlay), within the cap."""
    from overlay import NodeInfo

    b, c = NodeInfo(0xB, "127.0.0.1", 2), NodeInfo(0xC, "127.0.0.1", 3)

    def summary(node: int, children: list[NodeInfo]) -> dict[str, Any]:
        tree = {
            "tree": f"{0x7:040x}",
            "state": "member",
            "is_root": False,
            "parent": None,
            "parent_at": None,
            "children": [f"{x.id:040x}" for x in children],
            "children_at": [f"{x.host}:{x.port}" for x in children],
            "last_sent": None,
        }
        job = {"version": 1, "roles": ["worker"], "trees": [tree]}
        return {"node_id": f"{node:040x}", "jobs": {"j": job}}

    class Client:
        async def post_json(self, url: str, path: str, body: dict) -> dict:
            return summary(0xB, [c]) if url.endswith("b") else summary(0xC, [])

    agent = _Agent()
    agent.overlay.contacts = lambda: [b]  # type: ignore[method-assign]
    agent.client = Client()

    async def data_url_of(node: Any) -> str:
        return f"http://{node.host}:{node.port}/{node.id:x}"

    agent.data_url_of = data_url_of  # type: ignore[method-assign]
    snap = await ClusterPicture(agent).snapshot(max_age=0)
    assert {a["node_id"] for a in snap["agents"]} == {f"{n:040x}" for n in (1, 0xB, 0xC)}
    assert snap["asked"] == snap["known"] == 3 and not snap["truncated"]
    capped = await ClusterPicture(agent, max_agents=2).snapshot(max_age=0)
    assert capped["asked"] == 2 and capped["known"] == 3 and capped["truncated"]


def test_summary_counts_file_and_ingest_inputs_alike() -> None:
    """A file input counts ``records``, the ingest queue ``accepted``: both are accepted."""
    from agent.runtime.ops.dashboard.summary import ProcessSampler, local_summary

    class Source:
        def __init__(self, stats: dict[str, Any]) -> None:
            self._stats = stats

        def stats(self) -> dict[str, Any]:
            return self._stats

    agent = _Agent()
    agent.inputs = {
        "file": Source({"kind": "file", "lines": 9, "records": 7, "rejected": 2}),
        "ingest": Source({"kind": "ingest", "accepted": 4, "rejected": 1}),
    }
    s = local_summary(agent, ProcessSampler())  # type: ignore[arg-type]
    assert s["inputs"] == {
        "file": {"accepted": 7, "rejected": 2},
        "ingest": {"accepted": 4, "rejected": 1},
    }
    assert s["rejected"] == 3 and s["jobs"] == {} and s["jobs_total"] == 0
    assert s["process"]["rss_bytes"] > 0


async def test_elf_top_follows_the_feed_until_the_agent_ends_it() -> None:
    async with running_agents(2) as agents:
        client = ApiClient(agents[0].api.url, TOKEN, timeout=30)
        console = Console(record=True, width=160, force_terminal=False)
        top = asyncio.ensure_future(asyncio.to_thread(run_top, client, console))
        await wait_for(lambda: agents[0].dashboard_routes.streams == 1, 10, "elf top's stream")
        await wait_for(lambda: agents[0].dashboard.refreshes >= 2, 15, "two pictures")
        await agents[0].api.stop()  # the feed ends: elf top says so and returns
        await asyncio.wait_for(top, 30)
        text = console.export_text()
        assert "the agent ended the feed" in text
        assert f"{hexid(agents[1])[:8]}" in text


SUMMARY_FIELDS = ["node_id", "process", "inputs", "jobs", "rejected", "loop_lag", "uptime_s"]


@settings(max_examples=150, deadline=None)
@given(
    junk=st.one_of(
        JSON,
        st.dictionaries(st.sampled_from(SUMMARY_FIELDS), JSON, max_size=5),
        st.builds(
            lambda jobs: {"node_id": f"{0xB:040x}", "jobs": jobs},
            st.dictionaries(st.text(max_size=4), JSON, max_size=2),
        ),
    )
)
def test_a_peers_malformed_summary_is_refused_not_used(junk: Any) -> None:
    """Whatever a peer answers, the picture is built: the peer is marked with the field at
    fault, its data is not used, the refusal is counted."""
    from agent.runtime.ops.dashboard.summary import SummaryError, check_summary
    from overlay import NodeInfo

    try:
        check_summary(junk)
        acceptable = True
    except SummaryError:
        acceptable = False

    class Client:
        async def post_json(self, url: str, path: str, body: dict) -> Any:
            return junk

    async def data_url_of(node: Any) -> str:
        return "http://127.0.0.1:1"

    agent = _Agent()
    agent.overlay.contacts = lambda: [NodeInfo(0xB, "127.0.0.1", 2)]  # type: ignore[method-assign]
    agent.client = Client()
    agent.data_url_of = data_url_of  # type: ignore[method-assign]
    picture = ClusterPicture(agent)
    snap = asyncio.run(picture.snapshot(max_age=0))
    peer = next(a for a in snap["agents"] if a["node_id"] == f"{0xB:040x}")
    if acceptable and isinstance(junk, dict) and junk.get("node_id") == f"{0xB:040x}":
        assert peer["status"] == "alive"
    else:
        assert peer["status"] == "unreachable" and "SummaryError" in peer["error"]
        assert picture.refused == 1


async def test_own_summary_passes_the_peer_check_unchanged() -> None:
    from agent.runtime.ops.dashboard.summary import check_summary

    async with running_agents(2) as agents:
        start = math.floor(time.time()) + 1
        await agents[0].submit(qspec("q", start))
        await feed(agents, start)
        master = await wait_for(
            lambda: next((a for a in agents if a.runtimes["q"].store.trees()), None),
            30,
            "a master with epochs",
        )
        for a in agents:
            raw = orjson.loads(orjson.dumps(a.dashboard.summary()))
            del raw["time"]  # the one field the picture does not read
            assert check_summary(raw) == raw, a is master
