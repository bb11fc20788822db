"""ELF QL semantic and type checks: a parsed query to an :class:`Analysis`, or a QLError.

Contract: :func:`analyze` checks what the grammar cannot: known functions and their arity and
argument types (e.g. ``sum('x')``, ``lower(1)``), aggregates only in SELECT / HAVING / ORDER BY
and never nested, every SELECT / HAVING / ORDER BY column either a GROUP BY expression or
inside an aggregate, ORDER BY naming a known column, WHERE / HAVING being conditions, literal
patterns and parameters. Record fields have the type ``any`` (known only at run time), so
only mismatches visible in the text are type errors; run-time mismatches are NULLs.

The :class:`Analysis` lists the distinct aggregates (each with the CBT aggregator it needs),
and the SELECT, HAVING and ORDER BY expressions with output-column aliases resolved, ready
for ``agent.ql.compiler``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, NoReturn

from agent.ql import nodes as n
from agent.ql.casts import TRUNC_UNITS, trunc_unit
from agent.ql.errors import QLError
from agent.ql.functions import AGGREGATES, FUNCTIONS, Aggregate
from cbt.sketches import (
    DEFAULT_KLL_K,
    MAX_KLL_K,
    MAX_LG_K,
    MAX_TOP_K,
    MIN_KLL_K,
    MIN_LG_K,
)

TYPE_NAMES = {
    "num": "a number",
    "str": "a string",
    "bool": "a boolean",
    "list": "an array",
    "any": "a value",
    "null": "NULL",
}
MAX_TOPK = 10_000
MAX_QUANTILES = 1_000  # approx_quantiles(x, n): n + 1 values
_CMP = ("=", "!=", "<", "<=", ">", ">=")
_CAST_RESULT = {"BIGINT": "num", "DOUBLE": "num", "VARCHAR": "str", "BOOLEAN": "bool",
                "TIMESTAMP": "str"}  # fmt: skip
_ARITH = ("+", "-", "*", "/", "%")


@dataclass(frozen=True)
class AggSpec:
    """One distinct aggregate of the query: its call, kind, CBT params and record-side args."""

    call: n.Call
    kind: Aggregate
    params: dict[str, Any]
    args: tuple[n.Node, ...]  # () for count(*); (item, weight) for topk pairs


@dataclass
class Analysis:
    """A checked query (see module docstring)."""

    query: n.Query
    group_by: tuple[n.Node, ...]
    aggregates: list[AggSpec] = field(default_factory=list)
    columns: list[str] = field(default_factory=list)
    select: list[n.Node] = field(default_factory=list)
    having: n.Node | None = None
    order: list[tuple[n.Node, bool]] = field(default_factory=list)


def _fail(node: Any, detail: str) -> NoReturn:
    raise QLError(getattr(node, "line", 1) or 1, getattr(node, "column", 1) or 1, detail)


def literal_type(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, int | float):
        return "num"
    return "str"


def _fits(t: str, want: str) -> bool:
    return want == "any" or t in (want, "any", "null")


def unify(types: list[str]) -> str:
    """The common type of alternative results (CASE branches, IF's two values): NULLs do not
    count; ``any`` when they differ."""
    known = {t for t in types if t != "null"}
    if not known:
        return "null"
    return known.pop() if len(known) == 1 else "any"


def analyze(query: n.Query) -> Analysis:
    """Check ``query`` (see module docstring)."""
    return _Checker(query).run()


class _Checker:
    def __init__(self, query: n.Query) -> None:
        self.q = query
        self.an = Analysis(query, query.group_by)

    # ---- clauses --------------------------------------------------------------------------
    def run(self) -> Analysis:
        q, an = self.q, self.an
        if not q.group_by and not any(
            isinstance(x, n.Call) and x.name in AGGREGATES
            for item in q.select
            for x in n.walk(item.expr)
        ):
            _fail(
                q.select[0].expr,
                "expected an aggregate (count, sum, avg, min, max, topk, distinct, "
                "collect_set, approx_distinct, approx_percentile, approx_quantiles, "
                "approx_top_k) or GROUP BY: queries aggregate records per window",
            )
        if q.where is not None:
            self.condition(q.where, "WHERE")
        for g in q.group_by:
            self.typ(g, "GROUP BY", post=False)
        names: dict[str, n.SelectItem] = {}
        for item in q.select:
            self.typ(item.expr, "SELECT", post=True)
            if item.name in names:
                _fail(item.expr, f"duplicate output column name {item.name!r}; use AS to rename")
            names[item.name] = item
            an.columns.append(item.name)
            an.select.append(item.expr)
        aliases = {item.alias: item.expr for item in q.select if item.alias is not None}
        if q.having is not None:
            having = self.resolve_aliases(q.having, aliases)
            self.condition(having, "HAVING", post=True)
            an.having = having
        for o in q.order_by:
            expr = o.expr
            if isinstance(expr, n.Field) and len(expr.path) == 1 and expr.path[0] in aliases:
                expr = aliases[expr.path[0]]
            elif isinstance(expr, n.Literal) and literal_type(expr.value) == "num":
                _fail(expr, "expected a column in ORDER BY, got a number (name the column)")
            elif isinstance(expr, n.Field) and expr not in q.group_by:
                known = ", ".join(an.columns)
                _fail(
                    expr,
                    f"unknown column {expr.to_sql()!r} in ORDER BY; expected an output column "
                    f"({known}), a GROUP BY expression or an aggregate",
                )
            else:
                expr = self.resolve_aliases(expr, aliases)  # e.g. ORDER BY revenue / clicks
            self.typ(expr, "ORDER BY", post=True)
            an.order.append((expr, o.descending))
        self.one_sketch_size()
        return an

    def one_sketch_size(self) -> None:
        """One KLL ``k`` and one HLL ``lg_k`` per job: every agent's sketches of a kind have
        the same size, so merges never mix sizes (DataSketches' HLL union had a regression
        with mixed lg_k, datasketches-cpp #512 / #522; a KLL merge would drop to the
        smaller k)."""
        for cbt_name, param in (("approx_percentile", "k"), ("approx_distinct", "lg_k")):
            seen: dict[Any, AggSpec] = {}
            for spec in self.an.aggregates:
                if spec.kind.cbt == cbt_name:
                    seen.setdefault(spec.params.get(param), spec)
            if len(seen) > 1:
                first, other = list(seen.values())[:2]
                _fail(
                    other.call,
                    f"expected one {param} for every {cbt_name} sketch of a query (one "
                    f"sketch size per job): {other.call.to_sql()} differs from "
                    f"{first.call.to_sql()}",
                )

    def condition(self, node: n.Node, clause: str, *, post: bool = False) -> None:
        t = self.typ(node, clause, post=post)
        if t not in ("bool", "any", "null"):
            _fail(node, f"{clause} expects a condition, got {TYPE_NAMES[t]}")

    def resolve_aliases(self, node: n.Node, aliases: dict[str, n.Node]) -> n.Node:
        if isinstance(node, n.Field) and len(node.path) == 1 and node.path[0] in aliases:
            return aliases[node.path[0]]
        changes: dict[str, Any] = {}
        for f in dataclasses.fields(node):
            v = getattr(node, f.name)
            if isinstance(v, n.Node):
                changes[f.name] = self.resolve_aliases(v, aliases)
            elif isinstance(v, tuple) and v and isinstance(v[0], n.Node):
                changes[f.name] = tuple(self.resolve_aliases(x, aliases) for x in v)
        return dataclasses.replace(node, **changes) if changes else node

    # ---- expressions ----------------------------------------------------------------------
    def typ(self, node: n.Node, clause: str, *, post: bool, in_agg: bool = False) -> str:
        """The static type of ``node``; ``post``: evaluated over groups (SELECT/HAVING/ORDER)."""
        if post and not in_agg and node in self.q.group_by:
            return self.typ(node, "GROUP BY", post=False)
        if isinstance(node, n.Literal):
            return literal_type(node.value)
        if isinstance(node, n.Field):
            if post and not in_agg:
                _fail(
                    node,
                    f"column {node.to_sql()!r} in {clause} must appear in GROUP BY "
                    "or inside an aggregate",
                )
            return "any"
        if isinstance(node, n.Star):
            _fail(node, "'*' is only allowed in count(*)")
        if isinstance(node, n.Call):
            return self.call(node, clause, post=post, in_agg=in_agg)

        def sub(x: n.Node) -> str:
            return self.typ(x, clause, post=post, in_agg=in_agg)

        if isinstance(node, n.Unary):
            t = sub(node.operand)
            if node.op == "NOT":
                if t not in ("bool", "any", "null"):
                    _fail(node, f"NOT expects a condition, got {TYPE_NAMES[t]}")
                return "bool"
            if not _fits(t, "num"):
                _fail(node, f"'-' expects a number, got {TYPE_NAMES[t]}")
            return "num"
        if isinstance(node, n.Binary):
            lt, rt = sub(node.left), sub(node.right)
            if node.op in ("AND", "OR"):
                for t, side in ((lt, node.left), (rt, node.right)):
                    if t not in ("bool", "any", "null"):
                        _fail(side, f"{node.op} expects conditions, got {TYPE_NAMES[t]}")
                return "bool"
            if node.op in _CMP:
                self.comparable(node, lt, rt)
                return "bool"
            for t, side in ((lt, node.left), (rt, node.right)):
                if not _fits(t, "num"):
                    _fail(side, f"operator {node.op} expects numbers, got {TYPE_NAMES[t]}")
            return "num"
        if isinstance(node, n.InList):
            t = sub(node.expr)
            for item in node.items:
                self.comparable(item, t, sub(item))
            return "bool"
        if isinstance(node, n.Match):
            t = sub(node.expr)
            if not _fits(t, "str"):
                _fail(node.expr, f"{node.op} expects a string, got {TYPE_NAMES[t]}")
            p = node.pattern
            if not (isinstance(p, n.Literal) and isinstance(p.value, str)):
                _fail(p, f"expected a string literal as the {node.op} pattern")
            return "bool"
        if isinstance(node, n.IsNull):
            sub(node.expr)
            return "bool"
        if isinstance(node, n.Between):
            t = sub(node.expr)
            self.comparable(node.low, t, sub(node.low))
            self.comparable(node.high, t, sub(node.high))
            return "bool"
        if isinstance(node, n.Case):
            return self.case(node, sub)
        if isinstance(node, n.Cast):
            sub(node.expr)
            return _CAST_RESULT[node.type]
        if isinstance(node, n.Index):
            bt, it = sub(node.expr), sub(node.index)
            if bt not in ("list", "any", "null"):
                _fail(node, f"[] expects an array or object, got {TYPE_NAMES[bt]}")
            if it not in ("num", "str", "any", "null"):
                _fail(node.index, f"expected a number or string index, got {TYPE_NAMES[it]}")
            return "any"
        _fail(node, f"unsupported expression {type(node).__name__}")

    def case(self, node: n.Case, sub: Any) -> str:
        """CASE: searched WHENs are conditions; simple WHENs compare with the operand; the
        result's type is the branches' common type (``any`` when they differ)."""
        op_t = sub(node.operand) if node.operand is not None else None
        for w in node.whens:
            t = sub(w)
            if op_t is None:
                if t not in ("bool", "any", "null"):
                    _fail(w, f"CASE WHEN expects a condition, got {TYPE_NAMES[t]}")
            else:
                self.comparable(w, op_t, t)
        branches = [*node.results, *([node.default] if node.default is not None else [])]
        return unify([sub(x) for x in branches])

    @staticmethod
    def comparable(node: n.Node, a: str, b: str) -> None:
        if "any" in (a, b) or "null" in (a, b) or a == b:
            return
        _fail(node, f"cannot compare {TYPE_NAMES[a]} with {TYPE_NAMES[b]}")

    def call(self, node: n.Call, clause: str, *, post: bool, in_agg: bool) -> str:
        name = node.name
        if name in AGGREGATES:
            if in_agg:
                _fail(node, f"aggregate {name}() cannot be nested inside another aggregate")
            if not post:
                _fail(node, f"aggregate {name}() is not allowed in {clause}")
            spec = self.aggregate(node, clause)
            return "list" if spec.params.get("array") else spec.kind.result
        if name == "array":
            _fail(node, "ARRAY[...] is only allowed as approx_percentile's percentages")
        fn = FUNCTIONS.get(name)
        if fn is None:
            known = ", ".join(sorted({*FUNCTIONS, *AGGREGATES}))
            _fail(node, f"unknown function {name!r}; expected one of: {known}")
        if node.distinct:
            _fail(node, "DISTINCT is only allowed in count(DISTINCT x)")
        nargs = len(node.args)
        if nargs < fn.min_args or (fn.max_args is not None and nargs > fn.max_args):
            want = (
                str(fn.min_args)
                if fn.min_args == fn.max_args
                else f"{fn.min_args} or more"
                if fn.max_args is None
                else f"{fn.min_args} to {fn.max_args}"
            )
            _fail(node, f"{name}() takes {want} arguments, got {nargs}")
        types = []
        for i, arg in enumerate(node.args):
            want = fn.arg_type(i)
            if want.startswith("lit:"):
                value = self.literal_arg(node, i, want[4:])
                if name == "date_trunc" and trunc_unit(value) is None:
                    _fail(
                        arg,
                        f"expected a date_trunc unit ({', '.join(TRUNC_UNITS)}), got {value!r}",
                    )
                types.append("str" if want == "lit:str" else "num")
                continue
            t = self.typ(arg, clause, post=post, in_agg=in_agg)
            if not _fits(t, want):
                _fail(
                    arg,
                    f"{name}() expects {TYPE_NAMES[want]} as argument {i + 1}, got {TYPE_NAMES[t]}",
                )
            types.append(t)
        if name == "if":
            return unify(types[1:])
        if name == "nullif":
            return types[0]
        return fn.returns

    @staticmethod
    def literal_arg(node: n.Call, i: int, kind: str) -> Any:
        arg = node.args[i]
        ok = isinstance(arg, n.Literal) and (
            isinstance(arg.value, str)
            if kind == "str"
            else isinstance(arg.value, int) and not isinstance(arg.value, bool)
        )
        if not ok:
            what = "a string literal" if kind == "str" else "an integer literal"
            _fail(arg, f"{node.name}() expects {what} as argument {i + 1}")
        return arg.value  # type: ignore[union-attr]

    def aggregate(self, node: n.Call, clause: str) -> AggSpec:
        for spec in self.an.aggregates:
            if spec.call == node:
                return spec
        name, args = node.name, node.args
        kind = AGGREGATES[name]
        params: dict[str, Any] = {}
        if node.distinct and name != "count":
            _fail(node, "DISTINCT is only allowed in count(DISTINCT x)")
        star = len(args) == 1 and isinstance(args[0], n.Star)
        if star and name != "count":
            _fail(args[0], "'*' is only allowed in count(*)")
        if name == "count":
            if len(args) != 1:
                _fail(node, f"count() takes 1 argument (* or an expression), got {len(args)}")
            if node.distinct:
                if star:
                    _fail(args[0], "expected an expression in count(DISTINCT ...), got '*'")
                kind = AGGREGATES["distinct"]
            value_args: tuple[n.Node, ...] = () if star else args
        elif name == "topk":
            if len(args) not in (2, 3):
                _fail(
                    node,
                    f"topk() takes 2 or 3 arguments (value, k or item, weight, k), got {len(args)}",
                )
            k = self.literal_arg(node, len(args) - 1, "int")
            if not 1 <= k <= MAX_TOPK:
                _fail(args[-1], f"expected k in [1, {MAX_TOPK}] for topk(), got {k}")
            params = {"k": k}
            value_args = args[:-1]
            weight = value_args[-1]
            t = self.typ(weight, clause, post=False, in_agg=True)
            if not _fits(t, "num"):
                _fail(weight, f"topk() expects a number as weight, got {TYPE_NAMES[t]}")
        elif name == "approx_distinct":
            if len(args) not in (1, 2):
                _fail(node, f"approx_distinct() takes 1 or 2 arguments, got {len(args)}")
            if len(args) == 2:
                p = self.literal_arg(node, 1, "int")
                if not MIN_LG_K <= p <= MAX_LG_K:
                    _fail(args[1], f"expected lg_k in [{MIN_LG_K}, {MAX_LG_K}], got {p}")
                params = {"lg_k": p}
            value_args = args[:1]
        elif name in ("approx_percentile", "approx_quantiles"):
            params = self.quantile_params(node)
            value_args = args[:1]
        elif name == "approx_top_k":
            if len(args) != 2:
                _fail(node, f"approx_top_k() takes 2 arguments (value, k), got {len(args)}")
            k = self.literal_arg(node, 1, "int")
            if not 1 <= k <= MAX_TOP_K:
                _fail(args[1], f"expected k in [1, {MAX_TOP_K}] for approx_top_k(), got {k}")
            params = {"k": k}
            value_args = args[:1]
        else:
            if len(args) != 1:
                _fail(node, f"{name}() takes 1 argument, got {len(args)}")
            value_args = args
        for arg in value_args:
            t = self.typ(arg, clause, post=False, in_agg=True)
            if kind.numeric and not _fits(t, "num"):
                _fail(arg, f"{name}() expects a number, got {TYPE_NAMES[t]}")
        spec = AggSpec(node, kind, params, value_args)
        self.an.aggregates.append(spec)
        return spec

    def quantile_params(self, node: n.Call) -> dict[str, Any]:
        """``approx_percentile(x, p | ARRAY[p, ...] [, k])`` / ``approx_quantiles(x, n [, k])``
        to the KLL aggregator's params (ranks in [0, 1], k in [8, 65535])."""
        name, args = node.name, node.args
        if len(args) not in (2, 3):
            what = "p or ARRAY[p, ...]" if name == "approx_percentile" else "n"
            _fail(node, f"{name}() takes 2 or 3 arguments (value, {what} [, k]), got {len(args)}")
        k = DEFAULT_KLL_K
        if len(args) == 3:
            k = self.literal_arg(node, 2, "int")
            if not MIN_KLL_K <= k <= MAX_KLL_K:
                _fail(args[2], f"expected k in [{MIN_KLL_K}, {MAX_KLL_K}] for {name}(), got {k}")
        if name == "approx_quantiles":
            q = self.literal_arg(node, 1, "int")
            if not 1 <= q <= MAX_QUANTILES:
                _fail(
                    args[1], f"expected n in [1, {MAX_QUANTILES}] for approx_quantiles(), got {q}"
                )
            return {"k": k, "ranks": [i / q for i in range(q + 1)], "array": True}
        p = args[1]
        items = p.args if isinstance(p, n.Call) and p.name == "array" else None
        ranks = []
        for item in items if items is not None else (p,):
            v = item.value if isinstance(item, n.Literal) else None
            if isinstance(item, n.Unary) and item.op == "-" and isinstance(item.operand, n.Literal):
                v = item.operand.value
                v = -v if isinstance(v, int | float) and not isinstance(v, bool) else None
            if not isinstance(v, int | float) or isinstance(v, bool) or not 0 <= v <= 1:
                _fail(
                    item,
                    f"expected a percentage in [0, 1] as a number literal, got {item.to_sql()}",
                )
            ranks.append(float(v))
        if items is not None and not ranks:
            _fail(p, "expected at least one percentage in ARRAY[...]")
        return {"k": k, "ranks": ranks, "array": items is not None}
