"""ELF QL scalar functions and aggregates: signatures for the checker, closures for the
compiler.

Contract: :data:`FUNCTIONS` maps a lower-case name to a :class:`Function` (argument count and
types, result type, and ``build(args, literals) -> closure``). Every function is NULL-safe: a
NULL or wrongly typed argument gives NULL, never an exception. :data:`AGGREGATES` maps an
aggregate name to its CBT aggregator and argument rules. Types are the strings ``"num"``,
``"str"``, ``"bool"``, ``"list"``, ``"any"`` (unknown until run time: record fields) and
``"null"``; an argument type ``"lit:str"`` / ``"lit:int"`` must be a literal (patterns are
compiled once).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agent.ql import casts, urls
from agent.ql.regex import compile_regex

Fn = Callable[[Any], Any]
NUMBER_TYPES = (int, float)


@dataclass(frozen=True)
class Function:
    """A scalar function's signature and closure factory."""

    name: str
    min_args: int
    max_args: int | None  # None: any number
    arg_types: tuple[str, ...]  # per position; the last one repeats
    returns: str
    build: Callable[[list[Fn], list[Any]], Fn]

    def arg_type(self, i: int) -> str:
        return self.arg_types[min(i, len(self.arg_types) - 1)]


def _text(v: Any) -> str | None:
    t = type(v)
    if t is str:
        return v
    if t is bool:
        return "true" if v else "false"
    if t is int or t is float:
        return repr(v)
    return None


def _case(method: Callable[[str], str]) -> Callable[[list[Fn], list[Any]], Fn]:
    def build(args: list[Fn], lits: list[Any]) -> Fn:
        (a,) = args

        def f(r: Any) -> Any:
            v = a(r)
            return method(v) if type(v) is str else None

        return f

    return build


def _length(args: list[Fn], lits: list[Any]) -> Fn:
    (a,) = args

    def f(r: Any) -> Any:
        v = a(r)
        return len(v) if type(v) is str or type(v) is list else None

    return f


def substr(s: Any, pos: Any, length: Any = -1) -> Any:
    """Hive ``substr``: 1-based ``pos`` (0 counts as 1, negative counts from the end)."""
    if type(s) is not str or type(pos) is not int or type(length) is not int:
        return None
    n = len(s)
    if pos > 0:
        start = pos - 1
    elif pos < 0:
        if -pos > n:
            return ""
        start = n + pos
    else:
        start = 0
    if length == -1:
        return s[start:]
    return s[start : start + length] if length > 0 else ""


def _substr(args: list[Fn], lits: list[Any]) -> Fn:
    if len(args) == 2:
        a, b = args
        return lambda r: substr(a(r), b(r))
    a, b, c = args

    def f(r: Any) -> Any:
        ln = c(r)
        if type(ln) is int and ln < 0:
            return ""
        return substr(a(r), b(r), ln)

    return f


def _concat(args: list[Fn], lits: list[Any]) -> Fn:
    def f(r: Any) -> Any:
        out = []
        for a in args:
            t = _text(a(r))
            if t is None:
                return None
            out.append(t)
        return "".join(out)

    return f


def _regexp_extract(args: list[Fn], lits: list[Any]) -> Fn:
    a = args[0]
    search = compile_regex(lits[1]).search  # linear time (RE2); refused at compile if not
    group = lits[2] if len(lits) > 2 else 1

    def f(r: Any) -> Any:
        v = a(r)
        if type(v) is not str:
            return None
        try:
            m = search(v)
        except UnicodeEncodeError:  # a lone surrogate has no UTF-8 form for RE2: NULL
            return None
        return m.group(group) if m else None

    return f


def _split(args: list[Fn], lits: list[Any]) -> Fn:
    a, d = args

    def f(r: Any) -> Any:
        v, sep = a(r), d(r)
        if type(v) is not str or type(sep) is not str or not sep:
            return None
        return v.split(sep)

    return f


def _trim(args: list[Fn], lits: list[Any]) -> Fn:
    (a,) = args

    def f(r: Any) -> Any:
        v = a(r)
        return v.strip() if type(v) is str else None

    return f


def _abs(args: list[Fn], lits: list[Any]) -> Fn:
    (a,) = args

    def f(r: Any) -> Any:
        v = a(r)
        return abs(v) if type(v) in NUMBER_TYPES else None

    return f


def _round(args: list[Fn], lits: list[Any]) -> Fn:
    a = args[0]
    digits = max(-30, min(30, lits[1])) if len(lits) > 1 else 0  # beyond: no effect anyway

    def f(r: Any) -> Any:
        v = a(r)
        if type(v) not in NUMBER_TYPES:
            return None
        return round(v, digits) if digits else (round(v) if type(v) is float else v)

    return f


def _coalesce(args: list[Fn], lits: list[Any]) -> Fn:
    def f(r: Any) -> Any:
        for a in args:
            v = a(r)
            if v is not None:
                return v
        return None

    return f


def _if(args: list[Fn], lits: list[Any]) -> Fn:
    # the condition arrives as a value (TRUE / FALSE / NULL): only TRUE picks ``a``
    c, a, b = args
    return lambda r: a(r) if c(r) is True else b(r)


def _same_kind(v: Any, w: Any) -> bool:
    """SQL ``=`` compares numbers with numbers (1 = 1.0), and other kinds only with their own
    (booleans are not numbers)."""
    tv, tw = type(v), type(w)
    return tv is tw or (tv in NUMBER_TYPES and tw in NUMBER_TYPES)


def _nullif(args: list[Fn], lits: list[Any]) -> Fn:
    a, b = args

    def f(r: Any) -> Any:
        v, w = a(r), b(r)
        if v is None or w is None:
            return v
        return None if _same_kind(v, w) and v == w else v

    return f


def _str_test(method: Callable[[str, str], bool]) -> Callable[[list[Fn], list[Any]], Fn]:
    def build(args: list[Fn], lits: list[Any]) -> Fn:
        a, b = args

        def f(r: Any) -> Any:
            s, p = a(r), b(r)
            return method(s, p) if type(s) is str and type(p) is str else None

        return f

    return build


def _contains(s: str, p: str) -> bool:
    return p in s


def _date_trunc(args: list[Fn], lits: list[Any]) -> Fn:
    unit = casts.trunc_unit(lits[0])  # a literal, checked by the checker
    assert unit is not None
    b = args[1]
    return lambda r: casts.date_trunc(unit, b(r))


def _unary(fn: Callable[[Any], Any]) -> Callable[[list[Fn], list[Any]], Fn]:
    def build(args: list[Fn], lits: list[Any]) -> Fn:
        (a,) = args
        return lambda r: fn(a(r))

    return build


def _url_parameter(args: list[Fn], lits: list[Any]) -> Fn:
    a, b = args
    return lambda r: urls.url_extract_parameter(a(r), b(r))


FUNCTIONS: dict[str, Function] = {
    f.name: f
    for f in (
        Function("lower", 1, 1, ("str",), "str", _case(str.lower)),
        Function("upper", 1, 1, ("str",), "str", _case(str.upper)),
        Function("length", 1, 1, ("any",), "num", _length),
        Function("substr", 2, 3, ("str", "num"), "str", _substr),
        Function("substring", 2, 3, ("str", "num"), "str", _substr),
        Function("concat", 1, None, ("any",), "str", _concat),
        Function("regexp_extract", 2, 3, ("str", "lit:str", "lit:int"), "str", _regexp_extract),
        Function("split", 2, 2, ("str", "str"), "list", _split),
        Function("trim", 1, 1, ("str",), "str", _trim),
        Function("abs", 1, 1, ("num",), "num", _abs),
        Function("round", 1, 2, ("num", "lit:int"), "num", _round),
        Function("coalesce", 1, None, ("any",), "any", _coalesce),
        # issue 26: conditionals, string tests, event time, request lines
        Function("if", 3, 3, ("bool", "any", "any"), "any", _if),
        Function("nullif", 2, 2, ("any", "any"), "any", _nullif),
        Function("starts_with", 2, 2, ("str", "str"), "bool", _str_test(str.startswith)),
        Function("ends_with", 2, 2, ("str", "str"), "bool", _str_test(str.endswith)),
        Function("contains", 2, 2, ("str", "str"), "bool", _str_test(_contains)),
        Function("date_trunc", 2, 2, ("lit:str", "any"), "str", _date_trunc),
        Function("from_unixtime", 1, 1, ("num",), "str", _unary(casts.from_unixtime)),
        Function("url_extract_path", 1, 1, ("str",), "str", _unary(urls.url_extract_path)),
        Function("url_extract_parameter", 2, 2, ("str", "str"), "str", _url_parameter),
    )
}


@dataclass(frozen=True)
class Aggregate:
    """An aggregate function: the CBT aggregator behind it and what it accepts."""

    name: str
    cbt: str  # CBT aggregator name
    numeric: bool  # its argument must be a number
    result: str  # result type
    empty: Any = None  # the value of a group where no argument was non-NULL


AGGREGATES: dict[str, Aggregate] = {
    a.name: a
    for a in (
        Aggregate("count", "count", False, "num", 0),
        Aggregate("sum", "sum", True, "num"),
        Aggregate("avg", "avg", True, "num"),
        Aggregate("min", "min", True, "num"),
        Aggregate("max", "max", True, "num"),
        Aggregate("topk", "topk", False, "list"),
        Aggregate("distinct", "distinct", False, "num", 0),
        Aggregate("collect_set", "collect_set", False, "list"),
        Aggregate("approx_distinct", "approx_distinct", False, "num", 0.0),
        # the DataSketches aggregates (cbt/sketches.py); approx_percentile's type is "list"
        # with an ARRAY of percentages (the checker says which)
        Aggregate("approx_percentile", "approx_percentile", True, "num"),
        Aggregate("approx_quantiles", "approx_percentile", True, "list"),
        Aggregate("approx_top_k", "approx_top_k", False, "list", ()),
    )
}
