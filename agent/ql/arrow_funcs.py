"""Vectorized kernels of the issue-26 expressions for the columnar path: CASE, IF, NULLIF,
CAST, starts_with / ends_with / contains, from_unixtime and date_trunc.

Contract: each function takes the :class:`~agent.ql.arrow_eval.ArrowEval` of the table (typed
here as the :class:`ArrowEval` protocol) and the node, and returns the column the row path's
closures would give on the same rows (the row path, :mod:`agent.ql.compiler` /
:mod:`agent.ql.casts`, is the reference). Where no kernel
has exactly that meaning for the kinds at hand - branches of different kinds, a float cast to
text (Python's repr), text parsed as a number or a time, a pattern that is a column, URLs -
the expression alone runs row by row (``ev.row_value``), as the rest of the columnar path
falls back.
"""

from __future__ import annotations

from typing import Any, Protocol

import pyarrow as pa
import pyarrow.compute as pc

from agent.ql import nodes as n
from agent.ql.arrow_kinds import has_nan, kind, max_abs
from agent.ql.casts import trunc_unit

Value = pa.Array | pa.Scalar


class ArrowEval(Protocol):
    """What these kernels use of :class:`agent.ql.arrow_eval.ArrowEval` (a protocol, so this
    module does not import the evaluator that dispatches to it)."""

    n: int

    def value(self, node: n.Node) -> Value: ...

    def pred(self, node: n.Node) -> Value: ...

    def full(self, x: Value) -> pa.Array: ...

    def row_value(self, node: n.Node) -> pa.Array: ...


_TYPES = {"int": pa.int64(), "float": pa.float64(), "str": pa.string(), "bool": pa.bool_()}
_EXACT_INT_IN_FLOAT = 1 << 53
# TIMESTAMP text covers years 1000-9999 here (Arrow's %Y pads no further; below: row path)
_MIN_US = -30610224000 * 1_000_000  # 1000-01-01 00:00:00
_MAX_US = 253402300799999999  # 9999-12-31 23:59:59.999999
_ARROW_UNITS = {"second": "second", "minute": "minute", "hour": "hour", "day": "day",
                "week": "week", "month": "month", "quarter": "quarter", "year": "year"}  # fmt: skip


def case(ev: ArrowEval, node: n.Case) -> Value:
    """``CASE``: Arrow's ``case_when`` over the WHENs' TRUE masks (UNKNOWN is not TRUE),
    when every branch has one kind (or is NULL)."""
    if node.operand is None:
        conds = [ev.pred(w) for w in node.whens]
    else:
        conds = [ev.pred(n.Binary("=", node.operand, w)) for w in node.whens]
    values = [ev.value(x) for x in node.results]
    default = ev.value(node.default) if node.default is not None else None
    kinds = {kind(v) for v in values} | ({kind(default)} if default is not None else set())
    kinds.discard("null")
    if len(kinds) > 1 or not kinds <= set(_TYPES):
        return ev.row_value(node)  # kinds mix: Python values decide (or Unsupported)
    if not kinds:
        return pa.nulls(ev.n)
    t = _TYPES[kinds.pop()]
    masks = [pc.fill_null(ev.full(c), False) for c in conds]
    cols = [_typed(ev, v, t) for v in values]
    cols.append(_typed(ev, default, t) if default is not None else pa.nulls(ev.n, t))
    names = [f"c{i}" for i in range(len(masks))]
    return pc.case_when(pc.make_struct(*masks, field_names=names), *cols)


def _typed(ev: ArrowEval, v: Value, t: pa.DataType) -> pa.Array:
    col = ev.full(v)
    return col if col.type == t else col.cast(t)


def if_(ev: ArrowEval, node: n.Call) -> Value:
    """``IF(c, a, b)`` is ``CASE WHEN c THEN a ELSE b END``."""
    c, a, b = node.args
    return case(ev, n.Case(None, (c,), (a,), b))


def nullif(ev: ArrowEval, node: n.Call) -> Value:
    """``NULLIF(a, b)`` is ``CASE WHEN a = b THEN NULL ELSE a END`` (SQL ``=``)."""
    a, b = node.args
    return case(ev, n.Case(None, (n.Binary("=", a, b),), (n.Literal(None),), a))


def string_test(ev: ArrowEval, node: n.Call) -> Value:
    """``starts_with`` / ``ends_with`` / ``contains`` with a literal (scalar) pattern."""
    s, p = (ev.value(a) for a in node.args)
    if kind(s) != "str" or kind(p) != "str":
        return pa.nulls(ev.n, pa.bool_())  # a NULL or a non-string: NULL
    if not isinstance(p, pa.Scalar):
        return ev.row_value(node)  # Arrow's kernels take the pattern as an option
    if not p.is_valid:
        return pa.nulls(ev.n, pa.bool_())
    pattern = p.as_py()
    s = ev.full(s)
    if node.name == "starts_with":
        return pc.starts_with(s, pattern)
    if node.name == "ends_with":
        return pc.ends_with(s, pattern)
    return pc.match_substring(s, pattern)


def cast(ev: ArrowEval, node: n.Cast) -> Value:
    """``CAST`` where Arrow's cast means what :func:`agent.ql.casts.cast` means."""
    x = ev.value(node.expr)
    k, to = kind(x), node.type
    target = {"BIGINT": "int", "DOUBLE": "float", "VARCHAR": "str", "BOOLEAN": "bool"}.get(to)
    if k == "null":
        return pa.nulls(ev.n, _TYPES.get(target or "str"))
    if target == k:
        return x  # already that kind
    if to == "VARCHAR" and k in ("int", "bool"):
        return pc.cast(x, pa.string())  # Python's str(int) and 'true' / 'false'
    if to == "BIGINT" and k == "bool":
        return pc.cast(x, pa.int64())
    if to == "DOUBLE" and k == "bool":
        return pc.cast(x, pa.float64())
    if to == "DOUBLE" and k == "int" and max_abs(x) <= _EXACT_INT_IN_FLOAT:
        return pc.cast(x, pa.float64())
    if to == "BOOLEAN" and k in ("int", "float"):
        return pc.not_equal(x, 0)  # NaN != 0 is TRUE in Python too
    if to == "TIMESTAMP" and k in ("int", "float"):
        return from_unixtime_values(ev, x, node)
    return ev.row_value(node)


def from_unixtime(ev: ArrowEval, node: n.Call) -> Value:
    """``from_unixtime(x)`` over a numeric column."""
    x = ev.value(node.args[0])
    if kind(x) not in ("int", "float"):
        return pa.nulls(ev.n, pa.string())  # NULL or not a number: NULL
    return from_unixtime_values(ev, x, node)


def from_unixtime_values(ev: ArrowEval, x: Value, node: n.Node) -> Value:
    ts = _timestamps(ev, x)
    return ev.row_value(node) if ts is None else _text(ts)


def date_trunc(ev: ArrowEval, node: n.Call) -> Value:
    """``date_trunc(unit, x)`` over epoch seconds: Arrow's ``floor_temporal`` (ISO weeks)."""
    unit_lit, arg = node.args
    assert isinstance(unit_lit, n.Literal)
    unit = trunc_unit(unit_lit.value)
    x = ev.value(arg)
    k = kind(x)
    if k == "null":
        return pa.nulls(ev.n, pa.string())
    if k not in ("int", "float"):
        return ev.row_value(node)  # TIMESTAMP / ISO text: parsed row by row
    ts = _timestamps(ev, x)
    if ts is None or unit is None:
        return ev.row_value(node)
    floored = pc.floor_temporal(ts, unit=_ARROW_UNITS[unit], week_starts_monday=True)
    if unit == "week" and pc.any(pc.less(pc.cast(floored, pa.int64()), _MIN_US)).as_py():
        return ev.row_value(node)
    return _text(floored)


def _timestamps(ev: ArrowEval, x: Value) -> pa.Array | None:
    """Epoch seconds to timestamp[us] (floats rounded half to even, as Python's round); None
    when a value is NaN, infinite or outside years 1000-9999 (the row path then decides: it
    gives NULL, or text for years 1-999)."""
    col = ev.full(x)
    if kind(col) == "float":
        if has_nan(col) or pc.any(pc.is_inf(col)).as_py():
            return None
        us_f = pc.round(pc.multiply(col, 1_000_000.0), ndigits=0, round_mode="half_to_even")
        lo_hi = pc.min_max(us_f).as_py()
        if lo_hi["min"] is not None and (lo_hi["min"] < _MIN_US or lo_hi["max"] > _MAX_US):
            return None
        us = pc.cast(us_f, pa.int64())
    else:
        if max_abs(col) > _MAX_US // 1_000_000:
            return None
        us = pc.multiply(pc.cast(col, pa.int64()), 1_000_000)
        lo = pc.min(us).as_py()
        if lo is not None and lo < _MIN_US:
            return None
    return pc.cast(us, pa.timestamp("us"))


def _text(ts: Any) -> pa.Array:
    """timestamp[us] to TIMESTAMP text (:func:`agent.ql.casts.timestamp_text`)."""
    s = pc.strftime(ts, format="%Y-%m-%d %H:%M:%S")  # seconds as SS.ffffff at us precision
    s = pc.replace_substring_regex(s, r"\.0+$", "")
    return pc.replace_substring_regex(s, r"(\.\d*?)0+$", r"\1")


# The URLs whose path a regex finds exactly as urllib.parse.urlsplit does: an origin-form
# target ("/a/b?x", not "//host…") or "scheme://host…" with a plain ASCII host (printable, no
# brackets: urlsplit validates IPv6 hosts and may raise), no tab, CR or LF anywhere (urlsplit
# deletes them); the first character is "/" or a letter, so urlsplit strips nothing in front.
_PLAIN_URL = (
    r"^(?:/(?:[^/\t\r\n][^\t\r\n]*)?"
    r'|[A-Za-z][A-Za-z0-9+.\-]*://[!-"$-.0->@-Z\\^-~]*(?:[/?#][^\t\r\n]*)?)$'
)
_PATH = r"^(?:[A-Za-z][A-Za-z0-9+.\-]*://[^/?#]*)?(?P<path>[^?#]*)"


def url_extract_path(ev: ArrowEval, node: n.Call) -> Value:
    """``url_extract_path(url)`` by ``extract_regex`` when every URL of the column has a plain
    shape (:data:`_PLAIN_URL`); else row by row (urlsplit's rules for the rest)."""
    x = ev.value(node.args[0])
    if kind(x) != "str":
        return pa.nulls(ev.n, pa.string())  # a NULL or a non-string: NULL
    col = _targets(ev.full(x))
    if pc.all(pc.match_substring_regex(col, _PLAIN_URL)).as_py() is False:
        return ev.row_value(node)
    return pc.struct_field(pc.extract_regex(col, _PATH), "path")


# a request line, as agent.ql.urls.target reads it: three space-separated parts, or two whose
# second starts with "/"
_THREE_PARTS = r"^[^ ]* [^ ]* [^ ]*$"
_TWO_PARTS = r"^[^ ]* /[^ ]*$"
_SECOND = r"^[^ ]* (?P<t>[^ ]*)"


def _targets(col: pa.Array) -> pa.Array:
    """Each request line's target (:func:`agent.ql.urls.target`); other values unchanged."""
    if not pc.any(pc.match_substring(col, " ")).as_py():
        return col
    line = pc.or_(
        pc.match_substring_regex(col, _THREE_PARTS), pc.match_substring_regex(col, _TWO_PARTS)
    )
    second = pc.struct_field(pc.extract_regex(col, _SECOND), "t")
    return pc.if_else(pc.fill_null(line, False), second, col)
