"""What the demo shows: the live terminal view, the plain periodic lines, the summary and
the Spark table.

Contract: pure functions of a :class:`~apps.demo.state.DemoState` (they read it, never
write it, and make no API call): :func:`render` returns the ``rich`` renderable of the live
view (``rich`` imported only then), :func:`plain_lines` the ``[t=..s] result <job> epoch=..
epochs=.. agents=.. multicast=..`` lines printed when stdout is not a terminal (each
promoted product with its page's p99 from page-latency beside it: ``P000003×45 (p99 212
ms)``; page-latency's own line lists the busiest pages ``P000003 p50 38 ms p99 212 ms
n=123``),
:func:`summary_lines` the closing summary, :func:`spark_lines` the Spark step's table. The
wording of these lines is part of the demo's interface (``docs/demo.md``; tests parse them).
"""

from __future__ import annotations

from typing import Any

from apps.demo.jobs import (
    BUNDLING,
    DATA_JOBS,
    LATENCY,
    PAPER_EPOCH_SECONDS,
    PREDICTION,
    PROMOTION,
    SPAM,
    WINDOW_EPOCHS,
    ZOOM_TEXT,
)
from apps.demo.state import DemoState


def ms(value: Any) -> str:
    """A latency in milliseconds, ``?`` when unknown."""
    return "?" if value is None else f"{float(value):.1f} ms"


def page_latencies(st: DemoState) -> dict[str, list[Any]]:
    """page → [p50, p99] seconds, from page-latency's shown result."""
    return {
        str(r.get("page")): r["latency"]
        for r in st.jobs[LATENCY].rows
        if isinstance(r, dict) and isinstance(r.get("latency"), list) and len(r["latency"]) == 2
    }


def _latency_ms(seconds: Any) -> str:
    return "?" if not isinstance(seconds, int | float) else f"{seconds * 1000:.0f} ms"


def _promoted(rows: list[Any], latency: dict[str, list[Any]], n: int = 5) -> str:
    """Promoted products, each with its page's p99 (page-latency) beside it."""
    out = []
    for r in sorted((r for r in rows if isinstance(r, list)), key=lambda r: (-r[1], r[0]))[:n]:
        p99 = latency.get(str(r[0]), [None, None])[1]
        out.append(f"{r[0]}×{r[1]}" + ("" if p99 is None else f" (p99 {_latency_ms(p99)})"))
    return ", ".join(out)


def _fmt_rows(name: str, rows: list[Any], n: int = 5) -> str:
    if name == LATENCY:
        return ", ".join(
            f"{r.get('page')} p50 {_latency_ms(r['latency'][0])} p99 "
            f"{_latency_ms(r['latency'][1])} n={r.get('requests')}"
            for r in rows[:n]
            if isinstance(r, dict) and isinstance(r.get("latency"), list) and len(r["latency"]) == 2
        )
    if name == SPAM:
        return ", ".join(f"{r['user']}×{r['tweets']}" for r in rows[:n] if isinstance(r, dict))
    if name == BUNDLING:
        bundles = [r for r in rows if isinstance(r, dict)]
        sizes = sorted((int(r.get("size") or 0) for r in bundles), reverse=True)
        biggest = max(bundles, key=lambda r: r.get("size") or 0, default=None)
        if not bundles:
            return "no bundles in this window"
        text = f"{len(bundles)} bundles, sizes {sizes[:6]}"
        if biggest is not None:
            text += f"; largest: {' + '.join(map(str, biggest.get('products', [])[:6]))}"
        return text
    pairs = sorted((r for r in rows if isinstance(r, list)), key=lambda r: (-r[1], r[0]))
    return ", ".join(f"{p}×{c}" for p, c in pairs[:n])


def _job_text(st: DemoState, name: str) -> str:
    """A data job's shown result as one line (promotions with their pages' p99)."""
    if name == PROMOTION:
        return _promoted(st.promoted.get("top") or [], page_latencies(st))
    return _fmt_rows(name, st.jobs[name].rows)


def _prediction_text(p: dict[str, Any]) -> str:
    if not p:
        return "waiting"
    if "error" in p:
        return f"error: {p['error']}"
    promo = f"promoted #{p.get('rank')}" if p.get("promoted") else "not promoted"
    bundle = (
        f"in a {'popular ' if p.get('popular_bundle') else ''}bundle of {p.get('bundle_size')}"
        if p.get("in_bundle")
        else "in no bundle"
    )
    return (
        f"{p.get('product')} → {str(p.get('prediction')).upper()} ({promo}, {bundle}; "
        f"routed query {p.get('ms', 0):.0f} ms)"
    )


def plain_lines(st: DemoState) -> list[str]:
    """The periodic plain-text report (non-terminal output)."""
    t = f"[t={st.elapsed:5.1f}s]"
    lines = []
    for name in DATA_JOBS:
        v = st.jobs[name]
        if v.epoch is None:
            lines.append(f"{t} {name}: {v.error or 'waiting for the first epoch'}")
            continue
        what = {PROMOTION: "promoted (window top)", LATENCY: "busiest pages"}.get(name, "top")
        extra = f" filter={st.spam_filter}" if name == SPAM else ""
        lines.append(
            f"{t} result {name} epoch={v.epoch} epochs={v.epochs_done} agents={v.agents} "
            f"multicast={ms(v.multicast_ms)}{extra} {what}: {_job_text(st, name)}"
        )
    if st.prediction or st.jobs[PREDICTION].error:
        text = st.jobs[PREDICTION].error or _prediction_text(st.prediction)
        lines.append(f"{t} result {PREDICTION}: {text}")
    return lines


def _quality_text(coverage: Any, accuracy: Any) -> str:
    """A tentative result's quality, as the live view shows it."""
    text = "tentative"
    if isinstance(coverage, int | float):
        text += f", coverage {100 * coverage:.0f} %"
    if isinstance(accuracy, int | float):
        text += f", top-k accuracy ≈ {100 * accuracy:.0f} %"
    return text


def render(st: DemoState) -> Any:
    """The rich renderable of the live view."""
    from rich.console import Group
    from rich.markup import escape as esc
    from rich.panel import Panel
    from rich.table import Table
    from rich.text import Text

    cfg = st.config
    total = f"/{cfg.duration:.0f}" if cfg.duration else " (Ctrl-C stops)"
    scale = PAPER_EPOCH_SECONDS / cfg.epoch_seconds
    head = Text.assemble(
        ("ELF demo", "bold magenta"),
        f"  {cfg.agents} agents on loopback · {st.phase} · t={st.running:.0f}{total} s · ",
        f"events written: {st.written.get('clicks', 0)} clicks, "
        f"{st.written.get('tweets', 0)} tweets\n",
        (
            f"epochs of {cfg.epoch_seconds:g} s, windows of {WINDOW_EPOCHS} epochs "
            f"({WINDOW_EPOCHS * cfg.epoch_seconds:g} s): the paper's 30 s / 300 s scaled "
            f"down ×{scale:g} so results come quickly · work dir {st.workdir}",
            "dim",
        ),
        (f"\ndashboard: {st.dashboard_url}" if st.dashboard_url else "", "bold"),
    )
    table = Table(expand=True, show_lines=True)
    table.add_column("job", style="bold cyan", no_wrap=True)
    table.add_column("epoch", justify="right")
    table.add_column("done", justify="right")
    table.add_column("agents", justify="right")
    table.add_column("multicast", justify="right")
    table.add_column("latest result", ratio=1)
    for name in DATA_JOBS:
        v = st.jobs[name]
        if name == PROMOTION:
            body = "promoted (page p99): " + esc(_job_text(st, name) or "-")
            body += f"\n[dim]{esc(v.note)}[/dim]" if v.note else ""
        elif name == LATENCY:
            body = "p50 / p99 per Video Games page (KLL sketch): " + esc(_job_text(st, name) or "-")
        elif name == SPAM:
            body = f"[yellow]filter: {st.spam_filter}[/yellow]\n" + esc(
                _fmt_rows(name, v.rows) or "-"
            )
        else:
            body = esc(_fmt_rows(name, v.rows) or "-")
        if v.tentative:  # PPA: a tentative result, clearly marked, with its quality
            body += f"\n[yellow]{esc(_quality_text(v.coverage, v.accuracy))}[/yellow]"
        if v.error:
            body = f"[dim]{esc(v.error)}[/dim]"
        table.add_row(
            name,
            "-" if v.epoch is None else str(v.epoch),
            str(max(v.epochs_done, 0)),
            str(v.agents),
            ms(v.multicast_ms),
            body,
        )
    pred = st.jobs[PREDICTION].error or _prediction_text(st.prediction)
    table.add_row(PREDICTION, "", "", "master", "", f"asks both masters: {esc(pred)}")
    log = Panel(Text("\n".join(st.history[-4:]) or "-"), title="events", title_align="left")
    return Group(head, table, log)


def summary_lines(st: DemoState, lake: dict[str, int] | None) -> list[str]:
    """The closing summary (printed also after Ctrl-C); ``lake``: Parquet files per job
    (None: the lake could not be read, no line about it)."""
    lines = ["", f"== ELF demo summary ({st.outcome}) =="]
    lines.append(
        f"{st.running:.0f} s of live streams ({st.elapsed:.0f} s in all) on "
        f"{st.config.agents} agents; events written: "
        f"{st.written.get('clicks', 0)} clicks, {st.written.get('tweets', 0)} tweets"
    )
    for name in DATA_JOBS:
        v = st.jobs[name]
        lines.append(
            f"{name}: {max(v.epochs_done, 0)} epochs (last {v.epoch}); {_job_text(st, name)}"
        )
    lines.append(f"{PREDICTION}: {_prediction_text(st.prediction)}")
    if st.gone:
        lines.append(f"agent processes that exited during the run: {sorted(st.gone)}")
    if st.change and "error" not in st.change:
        lines.append(
            f"runtime change: {SPAM} zoomed to {ZOOM_TEXT}, applied on "
            f"{st.change.get('agents_reached')} agents in {ms(st.change.get('applied_ms'))}"
        )
    if lake is not None:
        lines.append(
            f"lake {st.lake_dir}: "
            + (", ".join(f"{j}={n} files" for j, n in sorted(lake.items())) or "no files")
        )
    lines.append(f"work dir (kept): {st.workdir}")
    return lines


def spark_lines(st: DemoState) -> list[str]:
    """The Spark step's result table (or its warning)."""
    lines = ["", st.spark_note]
    if st.spark_rows:
        lines.append(
            f"{'rank':>4}  {'product':<8}  {'name':<22}  {'clicks':>6}  {'units/day':>9}  lift"
        )
        for r in st.spark_rows:
            base, lift = r.get("baseline_units_per_day"), r.get("lift")
            lines.append(
                f"{r.get('rank'):>4}  {r.get('product')!s:<8}  {str(r.get('name'))[:22]:<22}  "
                f"{r.get('promo_clicks') or 0:>6.0f}  "
                f"{'-' if base is None else f'{base:.2f}':>9}  "
                f"{'-' if lift is None else f'{lift:.2f}'}"
            )
    return lines
