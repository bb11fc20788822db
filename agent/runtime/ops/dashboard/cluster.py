"""The cluster picture a serving agent gathers for its dashboard and ``elf top``.

Contract: :class:`ClusterPicture` asks a bounded set of agents for their summaries
(:mod:`agent.runtime.ops.dashboard.summary`, over the authenticated data plane's
``POST /agent/v1/summary``) and assembles one snapshot: the agents (alive, unreachable, or
failed as the overlay declared it; agents known but not asked are counted), and per job its
trees as nodes with parent links colored by epoch lag, its masters' newest epochs (roll-up
latency, tentative and partial epochs, coverage, term) and the origins they count absent,
retired or left (:mod:`agent.runtime.ops.dashboard.membership`), the newest result (at most
:data:`RESULT_ROWS` rows, fetched once per new epoch, with ``estimates``: its sketch columns,
:mod:`agent.runtime.ops.dashboard.columns`; a session query's with the sessions that epoch
closed, at most :data:`RESULT_ROWS` of them: ``sessions``), series of throughput and roll-up
latency, which agents applied which spec version, and a timeline of failures, failovers,
recoveries and tentative epochs.

Bounds (each documented in docs/dashboard.md): at most ``max_agents`` agents asked per
refresh (the serving agent first, then the job trees' members it knows, then its overlay
contacts nearest first, then — in up to :data:`ROUNDS` rounds — the tree parents and children
the answers name; the snapshot says how many were heard of and asked), ``concurrency``
requests at once, each given ``peer_timeout`` seconds and the whole refresh
``refresh_timeout`` (peers not answered by then are marked); one refresh at a time, shared by
every viewer, and none sooner than :meth:`period` after the previous one (the shortest running
epoch, clamped to [``min_interval``, ``max_interval``]); :data:`HISTORY` points per job series,
:data:`TIMELINE` events, :data:`FAILED_KEPT` remembered failed agents. Nothing here blocks the
loop: every peer call is awaited with a timeout, and a failing peer is only marked.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Protocol

from agent.runtime.ops.dashboard.columns import estimate_columns
from agent.runtime.ops.dashboard.membership import merge_membership
from agent.runtime.ops.dashboard.summary import (
    ProcessSampler,
    SummaryError,
    SummarySource,
    check_summary,
    local_summary,
)
from overlay import NodeInfo
from overlay.logbudget import LogBudget

log = logging.getLogger(__name__)

SUMMARY_PATH = "/agent/v1/summary"
RESULT_ROWS = 20  # rows of the newest result per job in a snapshot
HISTORY = 300  # points per job series (throughput, latency)
TIMELINE = 200  # events kept in the timeline
FAILED_KEPT = 256  # agents remembered as failed
FAILED_TTL = 600.0  # seconds a failed agent stays listed
ROUNDS = 4  # rounds of asking per picture (each asks the tree neighbours the last one named)


class ClusterSource(SummarySource, Protocol):
    """What :class:`ClusterPicture` reads of its agent (the host adapts it): its own summary
    source, the job table, the agents it knows of (job-tree neighbours, leaf set, overlay
    contacts) and membership news, a peer's data-plane URL and summary, and one job's result."""

    @property
    def node_id(self) -> int: ...

    def jobs(self) -> list[dict[str, Any]]: ...

    def tree_members(self) -> list[NodeInfo]:
        """The parents, roots and children of every job tree this agent is on, in order."""
        ...

    def leaf_set(self) -> list[NodeInfo]: ...
    def contacts(self) -> list[NodeInfo]: ...
    def size_estimate(self) -> int: ...

    def watch_membership(
        self, failed: Callable[[NodeInfo], None], joined: Callable[[NodeInfo], None]
    ) -> None:
        """Call ``failed`` / ``joined`` as the overlay declares agents failed or joined."""
        ...

    async def data_url_of(self, node: Any) -> str: ...
    async def post_json(self, url: str, path: str, body: dict) -> dict: ...

    def result_reader(self, name: str) -> Callable[[int], Awaitable[dict[str, Any]]] | None:
        """How to read job ``name``'s result of an epoch here; None if it does not run here."""
        ...


class _JobTrack:
    """What the picture remembers of one job between refreshes."""

    def __init__(self) -> None:
        self.series: collections.deque[list[float | None]] = collections.deque(maxlen=HISTORY)
        self.newest: int | None = None
        self.records: dict[str, int] | None = None  # records_in per agent at the last point
        self.records_at = 0.0
        self.masters: dict[str, str] = {}  # tree → master id
        self.counters: dict[str, int] = {}
        self.tentative_seen: set[int] = set()
        self.result: dict[str, Any] | None = None
        self.result_epoch: int | None = None


class ClusterPicture:
    """See the module contract. ``summary()`` is also what the peer route serves."""

    def __init__(
        self,
        agent: ClusterSource,
        *,
        max_agents: int = 64,
        concurrency: int = 8,
        peer_timeout: float = 2.0,
        min_interval: float = 1.0,
        max_interval: float = 5.0,
        refresh_timeout: float = 5.0,
    ) -> None:
        if max_agents < 1 or concurrency < 1:
            raise ValueError("max_agents and concurrency must be at least 1")
        self.agent = agent
        self.max_agents = max_agents
        self.peer_timeout = peer_timeout
        self.refresh_timeout = refresh_timeout
        self._attached = False
        self.min_interval, self.max_interval = min_interval, max_interval
        self._gate = asyncio.Semaphore(concurrency)
        self._lock = asyncio.Lock()
        self._sampler = ProcessSampler()
        self._urls: dict[int, str] = {}
        self._failed: collections.OrderedDict[int, tuple[float, str]] = collections.OrderedDict()
        self._jobs: dict[str, _JobTrack] = {}
        self._timeline: collections.deque[dict[str, Any]] = collections.deque(maxlen=TIMELINE)
        self._snapshot: dict[str, Any] | None = None
        self._built_at = -1e9
        self.seq = 0
        self.refreshes = 0
        self.refused = 0  # peer summaries refused (malformed; counted, logged in a budget)
        self._log = LogBudget(log)

    # ---- wiring --------------------------------------------------------------------------

    def attach(self) -> None:
        """Listen to the overlay's membership (failed agents stay listed as failed); once."""
        if self._attached:
            return
        self._attached = True
        self.agent.watch_membership(self._node_failed, self._node_joined)

    def _node_failed(self, info: Any) -> None:
        self._failed[info.id] = (time.time(), f"{info.host}:{info.port}")
        self._failed.move_to_end(info.id)
        while len(self._failed) > FAILED_KEPT:
            self._failed.popitem(last=False)
        self._urls.pop(info.id, None)
        # the overlay reports a graceful leave the same way as a failure
        self._event("failure", f"agent {info.id:040x}"[:14] + " failed (or left)", node=info.id)

    def _node_joined(self, info: Any) -> None:
        if self._failed.pop(info.id, None) is not None:
            self._event("recovery", f"agent {info.id:040x}"[:14] + " is back", node=info.id)

    def _event(
        self,
        kind: str,
        text: str,
        *,
        job: str | None = None,
        node: int | None = None,
        at: float | None = None,
    ) -> None:
        self._timeline.append(
            {
                "time": time.time() if at is None else at,
                "kind": kind,
                "job": job,
                "node": None if node is None else f"{node:040x}",
                "text": text,
            }
        )

    def summary(self) -> dict[str, Any]:
        """This agent's own summary (the peer route's answer)."""
        return local_summary(self.agent, self._sampler)

    # ---- refresh -------------------------------------------------------------------------

    def period(self) -> float:
        """Seconds between refreshes: the shortest running job's epoch, clamped; at most
        one update per epoch per job reaches a viewer."""
        shortest = [
            float(job["spec"].get("epoch_seconds") or 1.0)
            for job in self.agent.jobs()
            if job.get("state") == "running"
        ]
        wanted = min(shortest, default=self.max_interval)
        return min(self.max_interval, max(self.min_interval, wanted))

    async def snapshot(self, *, max_age: float | None = None) -> dict[str, Any]:
        """The newest snapshot, refreshed first if older than ``max_age`` (default
        :meth:`period`); concurrent callers share one refresh."""
        age = self.period() if max_age is None else max_age
        if self._snapshot is not None and time.monotonic() - self._built_at < age:
            return self._snapshot
        async with self._lock:
            if self._snapshot is None or time.monotonic() - self._built_at >= age:
                self._snapshot = await self._build()
                self._built_at = time.monotonic()
                self.seq += 1
                self.refreshes += 1
        return self._snapshot

    def next_due(self) -> float:
        """Seconds until the current snapshot is due for a refresh."""
        return max(0.0, self._built_at + self.period() - time.monotonic())

    def _first_round(self) -> list[Any]:
        """Agents to ask first, nearest to what the page shows first: the members of the job
        trees this agent is on (parents, roots, children), its leaf set, its other overlay
        contacts nearest first (all of them: :meth:`_build` applies the cap)."""
        me = self.agent.node_id
        out: dict[int, Any] = {}
        for info in self.agent.tree_members():
            out.setdefault(info.id, info)
        for info in self.agent.leaf_set():
            out.setdefault(info.id, info)
        for info in sorted(self.agent.contacts(), key=lambda c: c.id ^ me):
            out.setdefault(info.id, info)
        out.pop(me, None)
        return list(out.values())

    @staticmethod
    def _tree_neighbours(summary: dict[str, Any]) -> list[Any]:
        """The parents and children an agent's summary names, with their addresses: the
        next round of a picture asks those it has not asked yet (trees deeper than the
        serving agent's overlay contacts)."""
        out = []
        for job in summary.get("jobs", {}).values():
            for t in job.get("trees", []):
                pairs = [(t.get("parent"), t.get("parent_at"))]
                pairs += zip(t.get("children", []), t.get("children_at", []), strict=False)
                for node, at in pairs:
                    if not node or not at:
                        continue
                    host, _, port = str(at).rpartition(":")
                    try:
                        out.append(NodeInfo(int(node, 16), host, int(port)))
                    except ValueError:
                        continue  # a malformed peer summary names nobody
        return out

    async def _ask(self, node: Any) -> dict[str, Any]:
        async with self._gate:
            try:
                return {
                    "ok": True,
                    "summary": await asyncio.wait_for(self._summary_of(node), self.peer_timeout),
                }
            except TimeoutError:
                self._urls.pop(node.id, None)
                return {"ok": False, "error": f"no answer within {self.peer_timeout:g} s"}
            except Exception as exc:  # a peer failing is data here: marked, never raised
                self._urls.pop(node.id, None)
                return {"ok": False, "error": _describe(exc)}

    async def _summary_of(self, node: Any) -> dict[str, Any]:
        url = self._urls.get(node.id)
        if url is None:
            url = await self.agent.data_url_of(node)  # over the overlay, once per peer
            self._urls[node.id] = url
        reply = await self.agent.post_json(url, SUMMARY_PATH, {})
        try:
            summary = check_summary(reply)
        except SummaryError as exc:  # a peer of another version, or a broken one: not used
            self.refused += 1
            self._log.warning("bad_summary", "dashboard: summary of %x refused: %s", node.id, exc)
            raise
        if summary["node_id"] != f"{node.id:040x}":
            self.refused += 1
            raise SummaryError(f"node_id: {summary['node_id'][:12]} answered for {node.id:x}")
        return summary

    async def _ask_all(self, peers: list[Any], timeout: float) -> list[dict[str, Any]]:
        """Every peer's answer within ``timeout``: a peer still queued or running then is
        marked, so one refresh never outlasts ``refresh_timeout``."""
        tasks = [asyncio.ensure_future(self._ask(p)) for p in peers]
        if not tasks:
            return []
        done, pending = await asyncio.wait(tasks, timeout=max(0.0, timeout))
        for task in pending:
            task.cancel()
        late = {"ok": False, "error": f"no answer within the {self.refresh_timeout:g} s refresh"}
        return [t.result() if t in done else late for t in tasks]

    async def _gather(self) -> tuple[list[tuple[Any, Any]], set[int]]:
        """Ask up to ``max_agents - 1`` peers in rounds (at most :data:`ROUNDS`): the first
        round's candidates, then the tree neighbours the answers name that no round asked
        yet. Returns (node, answer) pairs and the ids of every agent heard of."""
        deadline = time.monotonic() + self.refresh_timeout
        me = self.agent.node_id
        heard: dict[int, Any] = {}
        for info in self._first_round():
            heard.setdefault(info.id, info)
        batch = list(heard.values())
        asked: dict[int, tuple[Any, Any]] = {}
        for _ in range(ROUNDS):
            room = self.max_agents - 1 - len(asked)
            batch = [n for n in batch if n.id not in asked and n.id != me][: max(0, room)]
            if not batch or time.monotonic() >= deadline:
                break
            answers = await self._ask_all(batch, deadline - time.monotonic())
            new: list[Any] = []
            for node, answer in zip(batch, answers, strict=True):
                asked[node.id] = (node, answer)
                if answer["ok"]:
                    new += self._tree_neighbours(answer["summary"])
            batch = []
            for info in new:
                if info.id != me and info.id not in heard:
                    heard[info.id] = info
                if info.id not in asked and info.id != me:
                    batch.append(info)
            # candidates of the first round the cap left out come after the tree's nodes
            batch += [n for n in heard.values() if n.id not in asked]
            batch = list({n.id: n for n in batch}.values())
        return list(asked.values()), set(heard) | {me}

    async def _build(self) -> dict[str, Any]:
        mine = self.summary()
        pairs, heard = await self._gather()
        now = time.time()
        for nid, (at, _) in list(self._failed.items()):
            if now - at > FAILED_TTL:
                del self._failed[nid]
        summaries = [mine]
        agents = [_agent_row(mine, "alive")]
        for node, answer in pairs:
            if answer["ok"]:
                summaries.append(answer["summary"])
                agents.append(_agent_row(answer["summary"], "alive"))
            else:
                status = "failed" if node.id in self._failed else "unreachable"
                agents.append(_unreached(node, status, answer["error"]))
        asked = {a["node_id"] for a in agents}
        for nid, (at, address) in self._failed.items():
            hexid = f"{nid:040x}"
            if hexid not in asked:
                agents.append(
                    {"node_id": hexid, "overlay": address, "status": "failed", "failed_at": at}
                )
        known = len(heard | set(self._failed))
        jobs = {}
        for entry in self.agent.jobs():
            if entry["state"] != "running":
                continue
            jobs[entry["name"]] = self._job(entry, summaries, now)
        await self._results(jobs)
        for gone in set(self._jobs) - set(jobs):
            del self._jobs[gone]
        return {
            "time": now,
            "serving": mine["node_id"],
            "known": known,
            "asked": len(pairs) + 1,
            "max_agents": self.max_agents,
            "truncated": len(heard) > self.max_agents,
            # the overlay's own estimate of its size (from the leaf set's spread): a cluster
            # larger than the agents this one heard of shows here
            "overlay_estimate": self.agent.size_estimate(),
            "period_s": self.period(),
            "agents": agents,
            "jobs": jobs,
            "stopped": [e["name"] for e in self.agent.jobs() if e["state"] != "running"],
            "timeline": list(self._timeline)[-50:],
        }

    def _job(
        self, entry: dict[str, Any], summaries: list[dict[str, Any]], now: float
    ) -> dict[str, Any]:
        name = entry["name"]
        track = self._jobs.setdefault(name, _JobTrack())
        nodes: dict[str, dict[str, Any]] = {}
        masters: dict[str, dict[str, Any]] = {}  # tree → {node, committed, epochs}
        standbys: dict[str, str] = {}
        versions: dict[str, int] = {}
        records: dict[str, int] = {}
        counters: dict[str, int] = {}
        memberships: list[dict[str, Any] | None] = []
        for s in summaries:
            job = s.get("jobs", {}).get(name)
            if job is None:
                continue
            nid = s["node_id"]
            versions[nid] = job["version"]
            if job.get("worker"):
                records[nid] = int(job["worker"].get("records_in") or 0)
            for key, value in job.get("counters", {}).items():
                counters[key] = counters.get(key, 0) + int(value)
            standbys.update(job.get("standby", {}))
            memberships.append(job.get("membership"))
            for tree, block in job.get("masters", {}).items():
                masters[tree] = {"node": nid, **block}
            for t in job.get("trees", []):
                nodes[f"{t['tree']}/{nid}"] = {
                    "tree": t["tree"],
                    "node": nid,
                    "parent": t["parent"],
                    "is_root": t["is_root"],
                    "state": t["state"],
                    "children": t["children"],
                    "last_sent": t["last_sent"],
                    "roles": job["roles"],
                    "replica_of": job.get("replica_of", {}),
                    # an active replica of the tree's master position (replicated masters)
                    "replica": t["tree"] in job.get("active_replica_of", {}),
                }
        newest_by_tree = {
            tree: max((e["epoch"] for e in m["epochs"]), default=None)
            for tree, m in masters.items()
        }
        for node in nodes.values():
            newest = newest_by_tree.get(node["tree"])
            sent = node["last_sent"]
            if node["is_root"]:
                node["lag"] = 0
            elif newest is None or sent is None:
                node["lag"] = None
            else:
                node["lag"] = max(0, newest - sent)
            node["standby"] = standbys.get(node["tree"]) == node["node"]
        # children reported by an asked parent but not asked themselves: listed, lag unknown
        for node in list(nodes.values()):
            for child in node["children"]:
                key = f"{node['tree']}/{child}"
                if key not in nodes:
                    nodes[key] = {
                        "tree": node["tree"],
                        "node": child,
                        "parent": node["node"],
                        "is_root": False,
                        "state": "not asked",
                        "children": [],
                        "last_sent": None,
                        "roles": [],
                        "lag": None,
                        "replica_of": {},
                        "replica": False,
                        "standby": standbys.get(node["tree"]) == child,
                    }
        self._note_changes(name, track, masters, counters, now)
        newest = min((e for e in newest_by_tree.values() if e is not None), default=None)
        if newest is not None and newest != track.newest:
            point_latency = _latency(masters, newest)
            throughput = None
            if track.records is not None and now > track.records_at:
                # agents in both pictures only: one that died or was not asked this time
                # neither drops the rate nor adds its whole count to it
                before = track.records
                grown = sum(max(0, n - before[a]) for a, n in records.items() if a in before)
                throughput = grown / (now - track.records_at)
            track.series.append([now, throughput, point_latency])
            track.records, track.records_at = records, now
            track.newest = newest
        version = int(entry["version"])
        return {
            "name": name,
            "version": version,
            "spec": entry["spec"],
            "nodes": list(nodes.values()),
            "masters": masters,
            "standbys": standbys,
            "newest_epoch": newest,
            "versions": versions,
            "applied_everywhere": bool(versions) and all(v >= version for v in versions.values()),
            "records_in": sum(records.values()),
            "counters": counters,
            "membership": merge_membership(memberships),
            "series": list(track.series),
            "result": None,  # set by _results
        }

    def _note_changes(
        self,
        name: str,
        track: _JobTrack,
        masters: dict[str, dict[str, Any]],
        counters: dict[str, int],
        now: float,
    ) -> None:
        """Timeline events: a tree's master changed (failover or hand-over), fault counters
        grew (recoveries), an epoch became tentative."""
        for tree, block in masters.items():
            before = track.masters.get(tree)
            if before is not None and before != block["node"]:
                self._event(
                    "failover",
                    f"{name}: master moved to {block['node'][:12]}",
                    job=name,
                    node=int(block["node"], 16),
                )
            track.masters[tree] = block["node"]
            for e in block["epochs"]:
                if e["tentative"] and e["epoch"] not in track.tentative_seen:
                    track.tentative_seen.add(e["epoch"])
                    self._tentative(name, e)
            if len(track.tentative_seen) > 4 * HISTORY:
                track.tentative_seen = set(sorted(track.tentative_seen)[-HISTORY:])
        for key in ("takeovers", "repaired", "handovers_received", "epochs_replayed"):
            grew = counters.get(key, 0) - track.counters.get(key, 0)
            if key in track.counters and grew > 0:
                self._event("recovery", f"{name}: {key} +{grew}", job=name, at=now)
        track.counters = dict(counters)

    def _tentative(self, name: str, e: dict[str, Any]) -> None:
        """A tentative epoch on the timeline; a run of them in a row is one event (E1–E2),
        so a long outage does not push failures and failovers out of the bounded timeline."""
        last = self._timeline[-1] if self._timeline else None
        if (
            last is not None
            and last["kind"] == "tentative"
            and last["job"] == name
            and last.get("last_epoch") == e["epoch"] - 1
        ):
            last["last_epoch"] = e["epoch"]
            last["coverage"] = min(last["coverage"], e["coverage"])
        else:
            self._event("tentative", "", job=name)
            last = self._timeline[-1]
            last.update(first_epoch=e["epoch"], last_epoch=e["epoch"], coverage=e["coverage"])
        span = (
            f"epoch {last['first_epoch']}"
            if last["first_epoch"] == last["last_epoch"]
            else f"epochs {last['first_epoch']}–{last['last_epoch']}"
        )
        last["text"] = f"{name}: {span} tentative (coverage ≥ {last['coverage']:.0%})"

    async def _results(self, jobs: dict[str, dict[str, Any]]) -> None:
        """Each job's newest result, fetched once per new epoch: concurrently (``concurrency``
        at once) and within ``peer_timeout`` for all of them, so many jobs never hold the
        refresh. One not fetched in time is said so and fetched again next time."""
        due = [
            (job, self._jobs[name])
            for name, job in jobs.items()
            if job["newest_epoch"] is not None
            and job["newest_epoch"] != self._jobs[name].result_epoch
        ]
        tasks = [
            asyncio.ensure_future(self._result(job["name"], job["newest_epoch"])) for job, _ in due
        ]
        if tasks:
            done, pending = await asyncio.wait(tasks, timeout=self.peer_timeout)
            for task in pending:
                task.cancel()
            for (job, track), task in zip(due, tasks, strict=True):
                if task in done:
                    track.result, track.result_epoch = task.result(), job["newest_epoch"]
                else:
                    track.result = {"error": f"no result within {self.peer_timeout:g} s"}
        for name, job in jobs.items():
            result = self._jobs[name].result
            if result is not None and "rows" in result:
                # which columns are sketch estimates, and their error: shown marked (≈)
                result = {**result, "estimates": estimate_columns(job["spec"])}
            job["result"] = result

    async def _result(self, name: str, epoch: int) -> dict[str, Any] | None:
        read = self.agent.result_reader(name)
        if read is None:
            return None
        try:
            async with self._gate:
                # the epoch the masters listed, so the snapshot agrees with itself
                res = await read(epoch)
        except Exception as exc:  # no complete epoch yet, a master changing: said, not raised
            return {"error": _describe(exc)}
        rows = res.get("rows") or []
        return {
            **{
                k: res.get(k)
                for k in (
                    "epoch",
                    "complete",
                    "tentative",
                    "partial",
                    "state",
                    "coverage",
                    "accuracy",
                    "version",
                    "term",
                    "lacking",
                    "source",
                )
            },
            "rows": rows[:RESULT_ROWS],
            "rows_total": len(rows),
            **_sessions_shown(res.get("sessions")),
        }


def _sessions_shown(sessions: Any) -> dict[str, Any]:
    """A session query's closed sessions as the picture shows them: the first
    :data:`RESULT_ROWS` rows and their total (rows None: unknown here, and ``why``)."""
    if not isinstance(sessions, dict):
        return {}
    rows = sessions.get("rows")
    shown = {k: sessions.get(k) for k in ("columns", "since_epoch", "why", "pending")}
    if not isinstance(rows, list):
        return {"sessions": {**shown, "rows": None, "rows_total": 0}}
    total = len(rows) + int(sessions.get("omitted") or 0)  # a reply's cut, counted
    return {"sessions": {**shown, "rows": rows[:RESULT_ROWS], "rows_total": total}}


def _describe(exc: BaseException) -> str:
    """An exception as one short line (some, e.g. a timeout, have no message)."""
    text = str(exc)
    return f"{type(exc).__name__}: {text}"[:200] if text else type(exc).__name__


def _latency(masters: dict[str, dict[str, Any]], epoch: int) -> float | None:
    values = [e["latency_s"] for m in masters.values() for e in m["epochs"] if e["epoch"] == epoch]
    return max(values) if values else None


def _agent_row(s: dict[str, Any], status: str) -> dict[str, Any]:
    return {
        "node_id": s["node_id"],
        "status": status,
        "overlay": s.get("overlay"),
        "api_url": s.get("api_url"),
        "uptime_s": s.get("uptime_s"),
        "cpu_percent": s.get("process", {}).get("cpu_percent"),
        "rss_bytes": s.get("process", {}).get("rss_bytes"),
        "rejected": s.get("rejected", 0),
        "inputs": s.get("inputs", {}),
        "loop_lag": s.get("loop_lag"),
        "roles": {name: job.get("roles", []) for name, job in s.get("jobs", {}).items()},
    }


def _unreached(node: Any, status: str, error: str) -> dict[str, Any]:
    return {
        "node_id": f"{node.id:040x}",
        "status": status,
        "overlay": f"{node.host}:{node.port}",
        "error": error,
    }


def tree_edges(nodes: Iterable[dict[str, Any]]) -> list[tuple[str, str]]:
    """(parent, child) links of a job's nodes (for tests and renderers)."""
    return [(n["parent"], n["node"]) for n in nodes if n.get("parent")]
