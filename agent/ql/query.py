"""Compile a query text: :func:`compile_query` -> :class:`CompiledQuery`.

Contract: ``compile_query(text)`` lexes, parses, checks and compiles, raising
:class:`~agent.ql.errors.QLError` (line, column, what was expected) for any problem; the text
is never evaluated as Python. The result carries:

* the job-spec fields the query implies (:meth:`CompiledQuery.spec_fields`): ``aggregator`` /
  ``aggregator_params`` (one aggregate: its CBT aggregator; several: ``composite`` of them;
  none, i.e. GROUP BY only: ``count``), ``epoch_seconds``, ``mode``, ``window_size``,
  ``window_slide``, ``trees`` (PARTITIONS, default 1), ``inputs`` (FROM; ``*`` = all) and
  ``top_k`` / ``top_k_largest`` when the query ranks its only aggregate (``ORDER BY agg
  [DESC] LIMIT k``, no HAVING: then the reducer trees may cut to k exactly), and ``emit``
  (``"final"`` / ``"changes"``) only when the query has an ``EMIT`` clause (without one the
  spec's own ``emit`` applies, default ``changes``);
* ``map(record) -> [(key, value)]``: the per-record pipeline (``agent.ql.compiler``), and
  ``keys(record) -> [key]`` when every value is the count 1 (``count(*)`` alone, GROUP BY
  only), else None: the worker's counting fast path;
* ``rows(pairs) -> [dict]``: the master's named rows (``agent.ql.rows``).

Timing: no WINDOW: 1-second epochs. ``WINDOW SESSION(gap) [EVERY step]``: epochs of step
(default the gap; it divides the gap), each epoch its own pane (as a tumbling WINDOW step); the
master closes sessions from them (``agent.ql.sessions``); ORDER BY, LIMIT and PARTITIONS are
refused with it. ``WINDOW w`` (tumbling): epochs of w, one epoch per result. ``WINDOW w EVERY
s`` (sliding): epochs of gcd(w, s) (to the millisecond), windows of w/gcd epochs sliding by
s/gcd. ``MODE SYNC`` (the default for tumbling windows) is the runtime's ``batch`` mode: the
state is emptied every epoch; ``MODE ASYNC``, and every sliding window, is ``window`` mode.
``MODE SYNC`` with a sliding window is an error.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from agent.ql import nodes as n
from agent.ql.checker import Analysis, analyze
from agent.ql.compiler import build_pipeline
from agent.ql.errors import QLError
from agent.ql.parser import parse
from agent.ql.rows import build_row, build_rows
from agent.ql.sessions import SESSION_COLUMNS, SESSION_FLAGS
from cbt import Aggregator, get_aggregator

MAX_EPOCH_SECONDS = 86_400.0
MAX_WINDOW_EPOCHS = 10_000
MAX_PARTITIONS = 64
_RANKABLE = ("count", "sum", "avg", "min", "max", "distinct", "approx_distinct")


@dataclass(frozen=True)
class CompiledQuery:
    """A compiled query (see module docstring)."""

    text: str
    query: n.Query
    columns: tuple[str, ...]
    aggregator: str
    aggregator_params: dict[str, Any]
    epoch_seconds: float
    mode: str
    window_size: int
    window_slide: int
    trees: int
    inputs: tuple[str, ...]
    top_k: int | None
    top_k_largest: bool
    map: Callable[[dict[str, Any]], list[tuple[Any, Any]]] = field(repr=False)
    #: ``rows(pairs, sketches=None)``: named rows (``agent.ql.rows``)
    rows: Callable[..., list[dict[str, Any]]] = field(repr=False)
    #: ``row(key, value)``: one group's named row, None when HAVING drops it (sessions)
    row: Callable[[Any, Any], dict[str, Any] | None] = field(default=lambda k, v: None, repr=False)
    #: ``keys(record) -> [key]`` when every value is the count 1 (else None): ``map_keys``
    keys: Callable[[dict[str, Any]], list[Any]] | None = field(default=None, repr=False)
    #: the number of GROUP BY columns (the shape of every key: see ``agent.ql.keys``)
    group_width: int = 0
    #: ``WINDOW SESSION(gap)``: the gap in epochs (the epoch is the gap: 1), else None
    session_gap_epochs: int | None = None

    @property
    def output_columns(self) -> tuple[str, ...]:
        """The columns of a result row: a session query's rows lead with its bounds and
        end with its flags (``agent.ql.sessions``)."""
        if self.session_gap_epochs is None:
            return self.columns
        return (*SESSION_COLUMNS, *self.columns, SESSION_FLAGS)

    @property
    def partitions(self) -> int | None:
        """PARTITIONS as written (None: the query does not fix the number of trees)."""
        return self.query.partitions

    def make_aggregator(self) -> Aggregator:
        return get_aggregator(self.aggregator, self.aggregator_params or None)

    def spec_fields(self) -> dict[str, Any]:
        """The job-spec fields this query implies (JSON-able)."""
        emit = {} if self.query.emit is None else {"emit": self.query.emit.lower()}
        return {
            "aggregator": self.aggregator,
            "aggregator_params": self.aggregator_params,
            "epoch_seconds": self.epoch_seconds,
            "mode": self.mode,
            "window_size": self.window_size,
            "window_slide": self.window_slide,
            "trees": self.trees,
            "inputs": list(self.inputs),
            "top_k": self.top_k,
            "top_k_largest": self.top_k_largest,
            **emit,
        }


def compile_query(text: str) -> CompiledQuery:
    """Compile ``text`` (see module docstring); raises QLError."""
    query = parse(text)
    an = analyze(query)
    epoch, mode, size, slide = _timing(query)
    aggregator, params = _aggregator(an)
    top_k, largest = _top_k(an)
    pos = query.positions.get("PARTITIONS", (1, 1))
    trees = query.partitions or 1
    map_fn, keys_fn = build_pipeline(an)
    if trees > MAX_PARTITIONS:
        raise QLError(*pos, f"expected PARTITIONS in [1, {MAX_PARTITIONS}], got {trees}")
    session = _session_rules(query, an.columns)
    return CompiledQuery(
        text=text,
        query=query,
        columns=tuple(an.columns),
        aggregator=aggregator,
        aggregator_params=params,
        epoch_seconds=epoch,
        mode=mode,
        window_size=size,
        window_slide=slide,
        trees=trees,
        inputs=query.inputs,
        top_k=top_k,
        top_k_largest=largest,
        map=map_fn,
        rows=build_rows(an, query.limit),
        row=build_row(an),
        keys=keys_fn,
        group_width=len(an.group_by),
        session_gap_epochs=session,
    )


def _session_rules(q: n.Query, columns: list[str]) -> int | None:
    """``WINDOW SESSION(gap) [EVERY step]``: the gap in epochs, after refusing the clauses a
    session stream cannot honour; None for other queries."""
    if q.window is None or not q.window.session:
        return None
    _, gap_epochs = _session_epochs(q.window)
    for clause, why in (
        ("ORDER", "sessions are emitted as they close, ordered by window_start and key"),
        ("LIMIT", "sessions are emitted as they close; there is no last set of rows to cut"),
        ("PARTITIONS", "a key's sessions close at one master, in epoch order"),
    ):
        if clause in q.positions:
            label = "ORDER BY" if clause == "ORDER" else clause
            raise QLError(
                *q.positions[clause], f"expected no {label} with WINDOW SESSION(gap): {why}"
            )
    for item in q.select:
        if item.name in (*SESSION_COLUMNS, SESSION_FLAGS):
            raise QLError(
                item.expr.line,
                item.expr.column,
                f"expected another column name than {item.name!r}: a session row has its own "
                f"{', '.join((*SESSION_COLUMNS, SESSION_FLAGS))}",
            )
    return gap_epochs


def _whole_ms(w: n.Window, what: str) -> tuple[int, int]:
    """A window's size and EVERY (default: the size) in milliseconds, both whole and >= 1;
    ``what`` names the size in the errors (``WINDOW``, ``a SESSION gap``)."""
    size_ms = round(w.size * 1000)
    slide_ms = size_ms if w.slide is None else round(w.slide * 1000)
    if size_ms < 1 or slide_ms < 1:
        raise QLError(w.line, w.column, f"expected {what} and EVERY of at least 1 ms")
    if abs(size_ms - w.size * 1000) > 1e-6 or abs(slide_ms - (w.slide or w.size) * 1000) > 1e-6:
        raise QLError(w.line, w.column, f"expected {what} and EVERY in whole milliseconds")
    return size_ms, slide_ms


def _session_epochs(w: n.Window) -> tuple[float, int]:
    """A session window's epoch length (EVERY, default the gap) and its gap in epochs."""
    gap_ms, step_ms = _whole_ms(w, "a SESSION gap")
    if gap_ms % step_ms:
        raise QLError(
            w.line,
            w.column,
            f"expected EVERY to divide the SESSION gap ({w.size:g} s) into whole epochs, "
            f"got {step_ms / 1000:g} s",
        )
    epoch, gap_epochs = step_ms / 1000, gap_ms // step_ms
    if epoch > MAX_EPOCH_SECONDS:
        raise QLError(w.line, w.column, f"expected epochs of at most {MAX_EPOCH_SECONDS:g} s")
    if gap_epochs > MAX_WINDOW_EPOCHS:
        raise QLError(
            w.line,
            w.column,
            f"this SESSION gap spans {gap_epochs} epochs of {epoch:g} s; at most "
            f"{MAX_WINDOW_EPOCHS} (make EVERY a larger share of the gap)",
        )
    return epoch, gap_epochs


def _timing(q: n.Query) -> tuple[float, str, int, int]:
    w = q.window
    mode_pos = q.positions.get("MODE", (1, 1))
    if w is None:
        return 1.0, "window" if q.mode == "ASYNC" else "batch", 1, 1
    if w.session:  # each epoch its own pane, as a tumbling WINDOW of EVERY (the gap)
        return _session_epochs(w)[0], "window" if q.mode == "ASYNC" else "batch", 1, 1
    size_ms, slide_ms = _whole_ms(w, "WINDOW")
    if slide_ms > size_ms:
        raise QLError(
            w.line,
            w.column,
            f"expected EVERY at most the WINDOW size ({w.size:g} s), got {slide_ms / 1000:g} s",
        )
    g = math.gcd(size_ms, slide_ms)
    epoch = g / 1000
    if epoch > MAX_EPOCH_SECONDS:
        raise QLError(w.line, w.column, f"expected a WINDOW of at most {MAX_EPOCH_SECONDS:g} s")
    size, slide = size_ms // g, slide_ms // g
    if size > MAX_WINDOW_EPOCHS:
        raise QLError(
            w.line,
            w.column,
            f"this WINDOW spans {size} epochs of {epoch:g} s; at most {MAX_WINDOW_EPOCHS} "
            "(make WINDOW a small multiple of EVERY)",
        )
    if size == 1:  # tumbling, and sessions (epochs of the gap, each epoch its own pane)
        return epoch, "window" if q.mode == "ASYNC" else "batch", 1, 1
    if q.mode == "SYNC":
        raise QLError(
            *mode_pos,
            "expected MODE ASYNC (or no MODE) with a sliding WINDOW ... EVERY: MODE SYNC "
            "empties the state every epoch",
        )
    return epoch, "window", size, slide


def _aggregator(an: Analysis) -> tuple[str, dict[str, Any]]:
    if not an.aggregates:
        return "count", {}
    parts = [[s.kind.cbt, dict(s.params)] for s in an.aggregates]
    if len(parts) == 1:
        return parts[0][0], parts[0][1]  # type: ignore[return-value]
    return "composite", {"parts": parts}


def _top_k(an: Analysis) -> tuple[int | None, bool]:
    q = an.query
    if (
        q.limit is None
        or q.having is not None
        or len(an.aggregates) != 1
        or len(an.order) != 1
        or an.aggregates[0].kind.name not in _RANKABLE
        or an.order[0][0] != an.aggregates[0].call
    ):
        return None, True
    return q.limit, an.order[0][1]
