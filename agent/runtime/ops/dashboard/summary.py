"""One agent's compact picture for the dashboard: what the peer route ``/agent/v1/summary``
returns and what the serving agent contributes about itself.

Contract: :func:`local_summary` reads (never changes) the agent's state, through the narrow
:class:`SummarySource` and, per job, :class:`JobSummarySource` (plain dicts and values the host
adapts from its runtimes: ``agent/runtime/host/views.py``; never a runtime whole), and returns a
small, JSON-ready dict: identity and addresses, process CPU and RSS, loop lag, inputs' accepted
and rejected counts, and per job this agent's applied spec version, roles, its place in each of
the job's trees (parent, children, root), the newest epoch it sent upward, its worker's record
counts, the fault-tolerance counters, its standby or replica role, and — where it is a master —
its newest :data:`MASTER_EPOCHS` epochs (completion time, roll-up latency, tentative, partial,
coverage, version, term, lacking origins) and the job's absent, retired and left origins
(:mod:`agent.runtime.ops.dashboard.membership`). Its size is bounded: at most :data:`MAX_JOBS`
jobs, a fixed set of fields per tree and :data:`MAX_CHILDREN` child ids per tree
(``children_total`` says how many there are), never a result row or a secret. Building it is
O(jobs × trees) and runs on the event loop without awaiting.

:class:`ProcessSampler` measures the process's CPU share between two calls (all threads, the
record thread included) and its resident set size (``/proc/self/statm``; where that is missing
the peak RSS from ``getrusage``, flagged ``rss_peak``). Logical agents sharing one process
report the same process figures.

:func:`check_summary` rebuilds a *peer's* summary field by field within those bounds, so the
serving agent never uses a shape it did not check (:class:`SummaryError` names the field).
"""

from __future__ import annotations

import math
import os
import resource
import time
from typing import TYPE_CHECKING, Any, Protocol

from agent.runtime.ops.dashboard.membership import check_membership, local_membership

if TYPE_CHECKING:
    from srt import TreeView

MASTER_EPOCHS = 16  # newest epochs per master tree in a summary
MAX_JOBS = 64  # jobs per summary (the newest names beyond it are counted, not listed)
MAX_CHILDREN = 64  # child ids per tree view
#: job counters about recoveries and failovers shown on the dashboard's timeline
FAULT_COUNTERS = (
    "takeovers",
    "takeover_failed",
    "handovers_sent",
    "handovers_received",
    "repaired",
    "repair_requests",
    "tentative_epochs",
    "partial_epochs",
    "origins_retired",
    "epochs_replayed",
    "changes_applied",
    "changes_refused",
    "incomplete_epochs",
)


class ProcessSampler:
    """CPU share since the previous sample and current RSS of this process."""

    def __init__(self) -> None:
        self._wall = time.monotonic()
        self._cpu = time.process_time()
        self._share = 0.0

    def sample(self) -> dict[str, Any]:
        wall, cpu = time.monotonic(), time.process_time()
        span = wall - self._wall
        # at least 0.2 s between the two ends, so two calls in a row do not report noise
        if span >= 0.2:
            self._share = (cpu - self._cpu) / span
            self._wall, self._cpu = wall, cpu
        rss, peak = _rss()
        return {"cpu_percent": round(100 * self._share, 1), "rss_bytes": rss, "rss_peak": peak}


def _rss() -> tuple[int, bool]:
    try:
        with open("/proc/self/statm", "rb") as f:
            pages = int(f.read().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE"), False
    except (OSError, ValueError, IndexError):
        # ru_maxrss is KiB on Linux (bytes on macOS): a peak, flagged as such
        return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024, True


class JobSummarySource(Protocol):
    """One job on this agent as plain values (the host adapts its job runtime)."""

    def summary_state(self) -> dict[str, Any]:
        """``version``, ``roles``, ``trees`` (its tree ids, in order), ``last_sent`` (tree →
        the newest epoch sent upward), ``next_epoch`` (tree → its combiner's next epoch, or
        None), ``worker`` (the worker's published figures, or None), ``standby`` (the
        replication's ``standbys``), ``replica_of`` (tree → the master it is a replica of),
        ``active_replica_of`` (tree → the master whose position it actively replicates:
        replicated masters) and ``counters``."""
        ...

    def epoch_seconds(self, epoch: int) -> float:
        """The length of ``epoch`` (it can change at runtime: docs/job-changes.md)."""
        ...

    def stored_epochs(self, tree: int, newest: int) -> list[dict[str, Any]]:
        """As master, the flags of the ``newest`` epochs stored for ``tree``: ``epoch``,
        ``completed_at``, ``end`` (the epoch's end), ``tentative``, ``partial``, ``coverage``,
        ``accuracy`` (or None), ``version``, ``term`` (or None), ``lacking``."""
        ...

    def committed(self, tree: int) -> int | None:
        """The newest epoch of ``tree`` this master committed, or None."""
        ...

    def membership_status(self) -> dict[str, Any] | None:
        """The job's absent, retired and left origins (``Recovery.membership_status``)."""
        ...


class SummarySource(Protocol):
    """What :func:`local_summary` reads of an agent (the host adapts it)."""

    @property
    def started_at(self) -> float: ...

    def describe(self) -> dict[str, Any]: ...
    def loop_lag_stats(self) -> dict[str, Any]: ...
    def input_stats(self) -> dict[str, dict[str, Any]]: ...
    def job_summaries(self) -> dict[str, JobSummarySource]: ...
    def tree_view(self, tree: int) -> TreeView | None: ...


def _hex(n: int | None) -> str | None:
    return None if n is None else f"{n:040x}"


def _at(info: Any) -> str | None:
    return None if info is None else f"{info.host}:{info.port}"


def local_summary(agent: SummarySource, sampler: ProcessSampler) -> dict[str, Any]:
    """This agent's picture (module contract)."""
    inputs = {}
    rejected = 0
    for name, stats in agent.input_stats().items():
        bad = int(stats.get("rejected", 0) or 0)
        rejected += bad
        # the ingest queue counts "accepted", file and stdin inputs "records"
        accepted = stats.get("accepted", stats.get("records", 0))
        inputs[name] = {"accepted": int(accepted or 0), "rejected": bad}
    summaries = agent.job_summaries()
    names = sorted(summaries)
    jobs = {name: _job(agent, summaries[name]) for name in names[:MAX_JOBS]}
    return {
        **agent.describe(),
        "time": time.time(),
        "uptime_s": round(time.time() - agent.started_at, 1),
        "process": sampler.sample(),
        "loop_lag": agent.loop_lag_stats(),
        "inputs": inputs,
        "rejected": rejected,
        "jobs": jobs,
        "jobs_total": len(names),
    }


def _job(agent: SummarySource, job: JobSummarySource) -> dict[str, Any]:
    state = job.summary_state()
    newest_sent: dict[int, int] = state["last_sent"]
    trees = []
    masters: dict[str, Any] = {}
    for tid in state["trees"]:
        view = agent.tree_view(tid)
        children = sorted(view.children) if view is not None else []
        trees.append(
            {
                "tree": _hex(tid),
                "state": view.state if view is not None else "absent",
                "is_root": bool(view is not None and view.is_root),
                "parent": _hex(view.parent.id) if view is not None and view.parent else None,
                "root": _hex(view.root.id) if view is not None and view.root else None,
                "children": [_hex(c) for c in children[:MAX_CHILDREN]],
                # where the parent and children listen, so a picture can ask them in turn
                "parent_at": _at(view.parent) if view is not None else None,
                "children_at": [_at(view.children[c]) for c in children[:MAX_CHILDREN]],
                "children_total": len(children),
                "last_sent": newest_sent.get(tid),
                "next_epoch": state["next_epoch"].get(tid),
            }
        )
        if view is not None and view.is_root:
            masters[_hex(tid) or ""] = _master(job, tid)
    worker = state["worker"]  # the record thread's published copy, never the worker
    return {
        "version": state["version"],
        "roles": state["roles"],
        "epoch_seconds": job.epoch_seconds(_current_epoch(worker, newest_sent)),
        "trees": trees,
        "worker": None
        if worker is None
        else {
            k: worker.get(k)
            for k in ("records_in", "records_accepted", "bad_records", "late_dropped", "next_epoch")
        },
        "standby": state["standby"],
        "replica_of": {_hex(t): m for t, m in state["replica_of"].items()},
        "active_replica_of": {
            _hex(t): _hex(m) for t, m in state.get("active_replica_of", {}).items()
        },
        "counters": {k: state["counters"][k] for k in FAULT_COUNTERS if k in state["counters"]},
        "masters": masters,
        "membership": local_membership(job) if masters else None,
    }


def _current_epoch(worker: dict[str, Any] | None, newest_sent: dict[int, int]) -> int:
    """The epoch whose length the summary reports: the worker's next one, else the newest
    sent upward (the length can change at runtime: docs/job-changes.md)."""
    if worker and isinstance(worker.get("next_epoch"), int):
        return int(worker["next_epoch"])
    return max(newest_sent.values(), default=0)


def _master(job: JobSummarySource, tid: int) -> dict[str, Any]:
    epochs = [
        {
            "epoch": e["epoch"],
            "completed_at": e["completed_at"],
            # from the epoch's end (event time = wall time for live inputs) to the master
            "latency_s": round(e["completed_at"] - e["end"], 4),
            "tentative": e["tentative"],
            # a retired origin's part missing for good (False before the store says)
            "partial": bool(e["partial"]),
            "coverage": round(e["coverage"], 4),
            # a top-k job's accuracy estimate, once computed off the loop (else null)
            "accuracy": e["accuracy"],
            "version": e["version"],
            "term": e["term"],  # the master's term that stored it
            "lacking": list(e["lacking"])[:8],
        }
        for e in job.stored_epochs(tid, MASTER_EPOCHS)
    ]
    return {"committed": job.committed(tid), "epochs": epochs}


# ---- a peer's summary, checked before the picture uses it ------------------------------------


class SummaryError(ValueError):
    """A peer's summary does not have the shape :func:`local_summary` gives (names the
    field); the picture marks the peer and uses nothing of it."""


def _need(ok: bool, what: str) -> None:
    if not ok:
        raise SummaryError(what)


def _int(value: Any, what: str, *, none: bool = False) -> int | None:
    if value is None and none:
        return None
    _need(type(value) is int and -(2**63) <= value < 2**63, f"{what}: not an int64")
    return int(value)


def _num(value: Any, what: str, *, none: bool = False) -> float | None:
    if value is None and none:
        return None
    _need(type(value) in (int, float) and math.isfinite(value), f"{what}: not a finite number")
    return float(value)


def _str(value: Any, what: str, *, none: bool = False, limit: int = 256) -> str | None:
    if value is None and none:
        return None
    _need(isinstance(value, str) and len(value) <= limit, f"{what}: not a string")
    return str(value)


def _hexid(value: Any, what: str, *, none: bool = False) -> str | None:
    text = _str(value, what, none=none, limit=40)
    if text is not None:
        _need(len(text) == 40 and all(c in "0123456789abcdef" for c in text), f"{what}: not an id")
    return text


def _list(value: Any, what: str, limit: int) -> list[Any]:
    _need(isinstance(value, list) and len(value) <= limit, f"{what}: not a list of ≤ {limit}")
    return list(value)


def _map(value: Any, what: str, limit: int) -> dict[str, Any]:
    _need(
        isinstance(value, dict) and len(value) <= limit and all(isinstance(k, str) for k in value),
        f"{what}: not an object of ≤ {limit}",
    )
    return dict(value)


def check_summary(doc: Any) -> dict[str, Any]:
    """``doc`` rebuilt field by field as :func:`local_summary` makes it, within its bounds;
    :class:`SummaryError` naming the first field that is not."""
    d = _map(doc, "summary", 64)
    process = _map(d.get("process", {}), "process", 8)
    lag = _map(d.get("loop_lag") or {}, "loop_lag", 8)
    inputs = _map(d.get("inputs", {}), "inputs", 256)
    jobs = _map(d.get("jobs", {}), "jobs", MAX_JOBS)
    return {
        "node_id": _hexid(d.get("node_id"), "node_id"),
        "overlay": _str(d.get("overlay"), "overlay", none=True),
        "api_url": _str(d.get("api_url"), "api_url", none=True),
        "data_url": _str(d.get("data_url"), "data_url", none=True),
        "uptime_s": _num(d.get("uptime_s"), "uptime_s", none=True),
        "process": {
            "cpu_percent": _num(process.get("cpu_percent"), "cpu_percent", none=True),
            "rss_bytes": _int(process.get("rss_bytes"), "rss_bytes", none=True),
            "rss_peak": bool(process.get("rss_peak")),
        },
        "loop_lag": {
            **{
                k: _num(lag.get(k), f"loop_lag.{k}", none=True)
                for k in ("last_ms", "recent_max_ms", "max_ms")
            },
            "samples": _int(lag.get("samples", 0), "loop_lag.samples"),
        },
        "inputs": {
            _str(name, "input name"): {
                k: _int(_map(v, f"inputs.{name}", 8).get(k, 0), f"inputs.{name}.{k}")
                for k in ("accepted", "rejected")
            }
            for name, v in inputs.items()
        },
        "rejected": _int(d.get("rejected", 0), "rejected"),
        "jobs": {name: _check_job(name, job) for name, job in jobs.items()},
        "jobs_total": _int(d.get("jobs_total", len(jobs)), "jobs_total"),
    }


def _check_job(name: str, doc: Any) -> dict[str, Any]:
    j = _map(doc, f"jobs.{name}", 32)
    worker = j.get("worker")
    where = f"jobs.{name}"
    return {
        "version": _int(j.get("version"), f"{where}.version"),
        "roles": [_str(r, f"{where}.roles", limit=32) for r in _list(j.get("roles"), where, 4)],
        "epoch_seconds": _num(j.get("epoch_seconds"), f"{where}.epoch_seconds", none=True),
        "trees": [_check_tree(where, t) for t in _list(j.get("trees", []), f"{where}.trees", 64)],
        "worker": None
        if worker is None
        else {
            k: _int(_map(worker, f"{where}.worker", 16).get(k), f"{where}.worker.{k}", none=True)
            for k in ("records_in", "records_accepted", "bad_records", "late_dropped", "next_epoch")
        },
        "standby": {
            _hexid(t, f"{where}.standby"): _hexid(n, f"{where}.standby")
            for t, n in _map(j.get("standby", {}), f"{where}.standby", 64).items()
        },
        "replica_of": {
            _hexid(t, f"{where}.replica_of"): _hexid(n, f"{where}.replica_of", none=True)
            for t, n in _map(j.get("replica_of", {}), f"{where}.replica_of", 64).items()
        },
        "active_replica_of": {
            _hexid(t, f"{where}.active_replica_of"): _hexid(n, f"{where}.active_replica_of")
            for t, n in _map(
                j.get("active_replica_of", {}), f"{where}.active_replica_of", 64
            ).items()
        },
        "counters": {
            k: _int(v, f"{where}.counters.{k}")
            for k, v in _map(j.get("counters", {}), f"{where}.counters", 64).items()
        },
        "masters": {
            _hexid(t, f"{where}.masters"): _check_master(f"{where}.masters", m)
            for t, m in _map(j.get("masters", {}), f"{where}.masters", 64).items()
        },
        "membership": check_membership(f"{where}.membership", j.get("membership"), _need),
    }


def _check_tree(where: str, doc: Any) -> dict[str, Any]:
    t = _map(doc, f"{where}.trees[]", 16)
    children = _list(t.get("children", []), f"{where}.children", MAX_CHILDREN)
    at = _list(t.get("children_at", []), f"{where}.children_at", MAX_CHILDREN)
    return {
        "tree": _hexid(t.get("tree"), f"{where}.tree"),
        "state": _str(t.get("state"), f"{where}.state", limit=32),
        "is_root": bool(t.get("is_root")),
        "parent": _hexid(t.get("parent"), f"{where}.parent", none=True),
        "root": _hexid(t.get("root"), f"{where}.root", none=True),
        "parent_at": _str(t.get("parent_at"), f"{where}.parent_at", none=True, limit=300),
        "children": [_hexid(c, f"{where}.children") for c in children],
        "children_at": [_str(a, f"{where}.children_at", none=True, limit=300) for a in at],
        "children_total": _int(t.get("children_total", len(children)), f"{where}.children_total"),
        "last_sent": _int(t.get("last_sent"), f"{where}.last_sent", none=True),
        "next_epoch": _int(t.get("next_epoch"), f"{where}.next_epoch", none=True),
    }


def _check_master(where: str, doc: Any) -> dict[str, Any]:
    m = _map(doc, where, 8)
    epochs = []
    for e in _list(m.get("epochs", []), f"{where}.epochs", MASTER_EPOCHS):
        e = _map(e, f"{where}.epochs[]", 16)
        epochs.append(
            {
                "epoch": _int(e.get("epoch"), f"{where}.epoch"),
                "completed_at": _num(e.get("completed_at"), f"{where}.completed_at", none=True),
                "latency_s": _num(e.get("latency_s"), f"{where}.latency_s"),
                "tentative": bool(e.get("tentative")),
                "partial": bool(e.get("partial")),
                "coverage": _num(e.get("coverage"), f"{where}.coverage"),
                "accuracy": _num(e.get("accuracy"), f"{where}.accuracy", none=True),
                "version": _int(e.get("version", 1), f"{where}.version"),
                "term": _int(e.get("term"), f"{where}.term", none=True),
                "lacking": [
                    _str(x, f"{where}.lacking", limit=40)
                    for x in _list(e.get("lacking", []), f"{where}.lacking", 8)
                ],
            }
        )
    return {
        "committed": _int(m.get("committed"), f"{where}.committed", none=True),
        "epochs": epochs,
    }
