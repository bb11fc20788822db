"""The master side of a query: final ``(key, value)`` pairs to named result rows.

Contract: :func:`build_rows` returns ``rows(pairs) -> list[dict]`` for a checked query. Pairs
are what a snapshot of the query's aggregator yields (finalized values) or the same after a
trip through JSON (tuples as lists), possibly concatenated from the job's m trees (they own
disjoint keys). Each pair is one group: its key is decoded back to the GROUP BY values
(:mod:`agent.ql.keys`), its value split into the aggregates' results (an aggregate that saw
only NULLs is NULL, or 0 for count / distinct / approx_distinct); HAVING keeps groups whose
condition is TRUE; ORDER BY sorts (NULLs last in both directions; values of different kinds
by kind: numbers, strings, booleans, others); ties, and queries without ORDER BY, are
ordered by the GROUP BY values ascending, so results are deterministic; LIMIT cuts. Rows map
the output column names to JSON-ready values (``topk(x, k)`` gives the k largest values,
``topk(item, weight, k)`` ``[item, weight]`` pairs, ``collect_set`` a list sorted by repr).
For the lake, ``rows(pairs, sketches)`` also gives each sketch aggregate's DataSketches binary
as ``<column>_sketch`` (bytes) beside its estimate. :func:`build_row` gives ``row(key, value)``:
one group's row, or None when HAVING drops it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from agent.jsonable import jsonable
from agent.ql import keys
from agent.ql import nodes as n
from agent.ql.checker import AggSpec, Analysis
from agent.ql.compiler import ExprCompiler, Fn
from cbt.sketches import SKETCH_NAMES

Env = tuple[tuple[Any, ...], tuple[Any, ...]]
RowsFn = Callable[..., list[dict[str, Any]]]


def _order_key(v: Any, desc: bool) -> tuple:
    if v is None or (type(v) is float and v != v):
        return (-1,) if desc else (1,)
    t = type(v)
    if t is int or t is float:
        return (0, 0, v)
    if t is str:
        return (0, 1, v)
    if t is bool:
        return (0, 2, int(v))
    return (0, 3, repr(v))


def _part_output(spec: AggSpec) -> Callable[[Any], Any]:
    empty = spec.kind.empty
    name = spec.kind.name
    if name == "topk":
        if len(spec.args) == 1:
            return lambda v: [] if v is None else [p[0] for p in v]
        return lambda v: [] if v is None else [[p[0], p[1]] for p in v]
    if name == "collect_set":
        return lambda v: [] if v is None else sorted(jsonable(list(v)), key=repr)
    return lambda v: empty if v is None else v


def _sketch_columns(an: Analysis) -> list[tuple[str, int, int]]:
    """``(sketch column name, SELECT position, aggregate index)`` for every SELECT column
    that is a sketch aggregate itself: ``p99`` gets ``p99_sketch`` (``_`` prefixes while the
    name is taken)."""
    taken = set(an.columns)
    out = []
    for pos, (name, expr) in enumerate(zip(an.columns, an.select, strict=True)):
        for j, spec in enumerate(an.aggregates):
            if expr == spec.call and spec.kind.cbt in SKETCH_NAMES:
                col = f"{name}_sketch"
                while col in taken:
                    col = f"_{col}"
                taken.add(col)
                out.append((col, pos, j))
    return out


class _Rendering:
    """What turns one pair into an output row: the compiled SELECT, HAVING and ORDER BY over
    ``(GROUP BY values, aggregate values)`` environments."""

    def __init__(self, an: Analysis) -> None:
        group = an.group_by
        self.width = len(group)
        aggs = an.aggregates

        def resolve(node: n.Node) -> Fn | None:
            for i, g in enumerate(group):
                if node == g:
                    return lambda e, i=i: e[0][i]
            for j, spec in enumerate(aggs):
                if node == spec.call:
                    return lambda e, j=j: e[1][j]
            return None

        comp = ExprCompiler(resolve)
        self.select = [comp.value(x) for x in an.select]
        self.having = comp.pred(an.having, True) if an.having is not None else None
        self.order = [(comp.value(x), desc) for x, desc in an.order]
        self.outs = [_part_output(s) for s in aggs]
        self.columns = list(an.columns)

    def values(self, v: Any) -> tuple:
        outs = self.outs
        if not outs:
            return ()
        if len(outs) == 1:
            return (outs[0](v),)
        if not isinstance(v, list | tuple) or len(v) != len(outs):
            raise ValueError(f"expected {len(outs)} aggregate values, got {v!r}")
        return tuple(o(x) for o, x in zip(outs, v, strict=True))

    def env(self, k: Any, v: Any) -> Env | None:
        """The group's environment, or None when HAVING drops it."""
        env = (keys.decode_key(k, self.width), self.values(v))
        return env if self.having is None or self.having(env) else None

    def row(self, env: Env) -> dict[str, Any]:
        return {name: jsonable(f(env)) for name, f in zip(self.columns, self.select, strict=True)}


def build_row(an: Analysis) -> Callable[[Any, Any], dict[str, Any] | None]:
    """``row(key, value)``: one group's named row, or None when HAVING drops it (no ORDER BY
    or LIMIT: a single group; what a closed session is, ``agent.ql.sessions``)."""
    r = _Rendering(an)

    def row(k: Any, v: Any) -> dict[str, Any] | None:
        env = r.env(k, v)
        return None if env is None else r.row(env)

    return row


def build_rows(an: Analysis, limit: int | None) -> RowsFn:
    """``rows(pairs, sketches=None)`` for the analysed query (see module docstring).

    ``sketches`` (the lake's form), aligned with ``pairs``: per pair a tuple of each
    aggregate's DataSketches binary or None (``cbt.sketches.sketch_binaries``); then every
    SELECT column that is a sketch aggregate gets a ``<column>_sketch`` field beside it."""
    r = _Rendering(an)
    order = r.order
    sketch_cols = _sketch_columns(an)

    def rows(pairs: Iterable[Any], sketches: Sequence[Any] | None = None) -> list[dict[str, Any]]:
        envs: list[Env] = []
        binaries: dict[int, Any] = {}  # id(env) -> that group's sketch binaries
        for i, (k, v) in enumerate(pairs):
            env = r.env(k, v)
            if env is not None:
                envs.append(env)
                if sketches is not None:
                    binaries[id(env)] = sketches[i]
        envs.sort(key=lambda e: tuple(_order_key(x, False) for x in e[0]))
        for f, desc in reversed(order):
            envs.sort(key=lambda e, f=f, desc=desc: _order_key(f(e), desc), reverse=desc)
        if limit is not None:
            del envs[limit:]
        out = [r.row(e) for e in envs]
        if sketches is not None and sketch_cols:
            for row, e in zip(out, envs, strict=True):
                parts = binaries[id(e)] or ()
                for col, _pos, j in sketch_cols:
                    row[col] = parts[j] if j < len(parts) else None
        return out

    return rows
