"""What the demo shows: the live terminal view, the plain periodic lines, the summary and
the Spark table.

Contract: pure functions of a :class:`~apps.demo.state.DemoState` (they read it, never
write it, and make no API call): :func:`render` returns the ``rich`` renderable of the live
view (``rich`` imported only then), :func:`plain_lines` the ``[t=..s] result <job> epoch=..
epochs=.. agents=.. multicast=..`` lines printed when stdout is not a terminal,
:func:`summary_lines` the closing summary, :func:`spark_lines` the Spark step's table. The
wording of these lines is part of the demo's interface (``docs/demo.md``; tests parse them).
"""

from __future__ import annotations

from typing import Any

from apps.demo.jobs import (
    BUNDLING,
    DATA_JOBS,
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


def _fmt_rows(name: str, rows: list[Any], n: int = 5) -> str:
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
        rows = st.promoted.get("top") or [] if name == PROMOTION else v.rows
        what = "promoted (window top)" if name == PROMOTION else "top"
        extra = f" filter={st.spam_filter}" if name == SPAM else ""
        lines.append(
            f"{t} result {name} epoch={v.epoch} epochs={v.epochs_done} agents={v.agents} "
            f"multicast={ms(v.multicast_ms)}{extra} {what}: {_fmt_rows(name, rows)}"
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
            body = "promoted: " + esc(_fmt_rows(name, st.promoted.get("top") or []) or "-")
            body += f"\n[dim]{esc(v.note)}[/dim]" if v.note else ""
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
        rows = st.promoted.get("top") or [] if name == PROMOTION else v.rows
        lines.append(
            f"{name}: {max(v.epochs_done, 0)} epochs (last {v.epoch}); {_fmt_rows(name, rows)}"
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
