"""``elf top``: a live terminal view of the cluster for operators without a browser.

Contract: :class:`TopView` folds the dashboard's event feed (``cluster``, ``job`` and
``gone`` events of ``GET /api/v1/dashboard/events``, :meth:`agent.client.ApiClient.events`)
into the current picture; :func:`render` turns a picture into rich renderables — a header
(serving agent, agents alive / listed / known), a jobs table (version and whether every agent
asked applied it, masters, newest epoch, the worst epoch lag in the trees, throughput and
roll-up latency of the newest point, tentative epochs among the masters' newest ones with
their lowest coverage) and an agents table (status, roles, CPU, RSS, rejected input). It
reads the same feed as the web page, so both show the same cluster. :func:`run_top` drives a
``rich.live.Live`` until Ctrl-C (or, with ``once``, prints the first full picture and returns).
This module only reads; it holds no secrets (the client carries the token).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

from agent.client import ApiClient

STATUS_STYLE = {"alive": "green", "unreachable": "yellow", "failed": "bold red"}


class TopView:
    """The picture built from feed events (module contract)."""

    def __init__(self) -> None:
        self.cluster: dict[str, Any] | None = None
        self.jobs: dict[str, dict[str, Any]] = {}

    def apply(self, event: str, data: Any) -> None:
        if event == "cluster" and isinstance(data, dict):
            self.cluster = data
            for name in set(self.jobs) - set(data.get("job_names", [])):
                del self.jobs[name]
        elif event == "job" and isinstance(data, dict):
            self.jobs[data["name"]] = data
        elif event == "gone" and isinstance(data, dict):
            self.jobs.pop(data.get("name"), None)

    @property
    def complete(self) -> bool:
        """A cluster event arrived and every job it names has its own event."""
        return self.cluster is not None and set(self.cluster.get("job_names", [])) <= set(self.jobs)

    @classmethod
    def from_snapshot(cls, snapshot: dict[str, Any]) -> TopView:
        """A picture from ``GET /api/v1/dashboard/cluster`` (same content as the feed)."""
        view = cls()
        head = {k: v for k, v in snapshot.items() if k != "jobs"}
        head["job_names"] = sorted(snapshot.get("jobs", {}))
        view.apply("cluster", head)
        for job in snapshot.get("jobs", {}).values():
            view.apply("job", job)
        return view


def _short(node: str | None) -> str:
    return (node or "?")[:8]


def _num(value: float | None, fmt: str, unit: str = "") -> str:
    return "-" if value is None else f"{value:{fmt}}{unit}"


def _masters(job: dict[str, Any]) -> str:
    return ", ".join(sorted({_short(m["node"]) for m in job.get("masters", {}).values()})) or "-"


def _tentative(job: dict[str, Any]) -> tuple[int, float | None]:
    epochs = [e for m in job.get("masters", {}).values() for e in m.get("epochs", [])]
    tentative = [e for e in epochs if e.get("tentative")]
    return len(tentative), min((e["coverage"] for e in tentative), default=None)


def _lag(job: dict[str, Any]) -> int | None:
    lags = [n["lag"] for n in job.get("nodes", []) if n.get("lag") is not None]
    return max(lags) if lags else None


def jobs_table(jobs: Iterable[dict[str, Any]]) -> Table:
    table = Table(title="jobs", title_justify="left", expand=False)
    for col in (
        "job",
        "version",
        "masters",
        "newest epoch",
        "max lag",
        "records/s",
        "latency",
        "tentative",
    ):
        table.add_column(col, justify="right" if col not in ("job", "masters") else "left")
    for job in sorted(jobs, key=lambda j: j["name"]):
        series = job.get("series") or []
        rate = series[-1][1] if series else None
        latency = series[-1][2] if series else None
        count, coverage = _tentative(job)
        applied = "" if job.get("applied_everywhere") else " (applying)"
        lag = _lag(job)
        table.add_row(
            job["name"],
            f"{job['version']}{applied}",
            _masters(job),
            str(job.get("newest_epoch") if job.get("newest_epoch") is not None else "-"),
            Text("-" if lag is None else str(lag), style="red" if (lag or 0) > 3 else ""),
            _num(rate, ".1f"),
            _num(latency, ".3f", " s"),
            Text(f"{count} (min {coverage:.0%})", style="yellow") if count else Text("0"),
        )
    return table


def agents_table(agents: Iterable[dict[str, Any]], serving: str | None) -> Table:
    table = Table(title="agents", title_justify="left", expand=False)
    for col in ("agent", "status", "roles", "CPU", "RSS", "rejected"):
        table.add_column(col, justify="right" if col in ("CPU", "RSS", "rejected") else "left")
    for a in agents:
        roles = "; ".join(
            f"{job}: {'+'.join(r) or '-'}" for job, r in sorted(a.get("roles", {}).items())
        )
        rss = a.get("rss_bytes")
        table.add_row(
            _short(a["node_id"]) + (" *" if a["node_id"] == serving else ""),
            Text(a["status"], style=STATUS_STYLE.get(a["status"], "")),
            roles or a.get("error", "") or "",
            _num(a.get("cpu_percent"), ".1f", " %"),
            "-" if rss is None else f"{rss / 1048576:.0f} MB",
            str(a.get("rejected", "-")),
        )
    return table


def render(view: TopView) -> RenderableType:
    """The whole screen for ``view`` (module contract)."""
    c = view.cluster
    if c is None:
        return Text("waiting for the agent's first picture ...")
    alive = sum(1 for a in c["agents"] if a["status"] == "alive")
    head = Text(
        f"ELF top · serving agent {_short(c['serving'])} · {alive} alive of "
        f"{len(c['agents'])} listed ({c['known']} known, {c['asked']} asked"
        f"{', capped' if c.get('truncated') else ''}) · refresh {c['period_s']} s"
    )
    parts: list[RenderableType] = [head, jobs_table(view.jobs.values())]
    parts.append(agents_table(c["agents"], c.get("serving")))
    events = c.get("timeline") or []
    if events:
        parts.append(Text("recent: " + " | ".join(e["text"] for e in events[-3:]), style="dim"))
    return Group(*parts)


def run_top(client: ApiClient, console: Console, *, once: bool = False) -> None:
    """Follow the feed and redraw (module contract)."""
    view = TopView()
    if once:
        for event, data in client.events():
            view.apply(event, data)
            if view.complete:
                console.print(render(view))
                return
        return
    from rich.live import Live

    with Live(render(view), console=console, refresh_per_second=2) as live:
        for event, data in client.events():
            view.apply(event, data)
            live.update(render(view))
    console.print("the agent ended the feed (it is stopping)", style="yellow")
