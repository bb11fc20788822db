"""ELF QL expressions to Python closures (no eval/exec of query text), and the per-record
pipeline ``map(record) -> [(key, value)]``.

Contract: :class:`ExprCompiler` turns a checked expression into a closure over one argument
(a record, or at the master a group's ``(key values, aggregate values)``; a ``resolve`` hook
decides what leaves mean). ``value(node)`` returns the value, ``None`` being SQL NULL;
``pred(node, want)`` returns a closure that is true exactly when the condition's three-valued
result is ``want`` (TRUE or FALSE; UNKNOWN is neither), so WHERE keeps a record when
``pred(where, True)`` holds, and NOT / AND / OR keep SQL semantics without a third value.

Semantics: a missing field or a non-object on a dotted path is NULL. Comparisons with NULL
are UNKNOWN; values of different kinds (number, string, boolean, other) are never equal
(``=`` FALSE) and ordering them is UNKNOWN. Arithmetic takes numbers only (anything else, or a
division by zero, is NULL); ``%`` is Python's (floored) modulo. LIKE (``%``, ``_``, ``\\``
escapes; whole string) and RLIKE/REGEXP (search anywhere) patterns are compiled once, on
RE2 (:mod:`agent.ql.regex`: linear time; a pattern RE2 cannot run is a ``QLError`` here, at
submission); a non-string operand is UNKNOWN.

:func:`build_map` assembles WHERE, the GROUP BY key (:mod:`agent.ql.keys`) and the aggregate
value(s) into one closure, specialized for the common shapes (a conjunction of
``field = 'literal'``, a single top-level GROUP BY field, ``count(*)``) so that the per-record
cost stays close to a hand-written function.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import re2

from agent.ql import keys
from agent.ql import nodes as n
from agent.ql.casts import cast
from agent.ql.checker import AggSpec, Analysis
from agent.ql.errors import QLError
from agent.ql.functions import FUNCTIONS
from agent.ql.regex import Regex, RegexRefused, compile_regex

Fn = Callable[[Any], Any]
Resolver = Callable[[n.Node], Fn | None]
NUMT = frozenset((int, float))
_OPS = {
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
    "=": operator.eq,
    "!=": operator.ne,
}
_FLIP = {"<": ">", "<=": ">=", ">": "<", ">=": "<=", "=": "=", "!=": "!="}
_NEGATE = {"<": ">=", "<=": ">", ">": "<=", ">=": "<", "=": "!=", "!=": "="}


def _true(r: Any) -> bool:
    return True


def _false(r: Any) -> bool:
    return False


def _and2(a: Fn, b: Fn) -> Fn:
    return lambda r: a(r) and b(r)


def _or2(a: Fn, b: Fn) -> Fn:
    return lambda r: a(r) or b(r)


def field_getter(path: tuple[str, ...]) -> Fn:
    """``record[p0][p1]...``, NULL when a step is missing or not an object."""
    if len(path) == 1:
        name = path[0]
        return lambda r: r.get(name)
    if len(path) == 2:
        a, b = path

        def get2(r: Any) -> Any:
            v = r.get(a)
            return v.get(b) if type(v) is dict else None

        return get2

    def get(r: Any) -> Any:
        v = r
        for p in path:
            if type(v) is not dict:
                return None
            v = v.get(p)
        return v

    return get


def _case_of_field(path: tuple[str, ...], lower: bool) -> Fn:
    """``lower(field)`` / ``upper(field)`` in one frame for one- and two-step paths."""
    if len(path) == 1:
        (a,) = path
        if lower:
            return lambda r: v.lower() if type(v := r.get(a)) is str else None
        return lambda r: v.upper() if type(v := r.get(a)) is str else None
    get = field_getter(path)
    if len(path) == 2:
        a, b = path

        def case2(r: Any) -> Any:
            v = r.get(a)
            if type(v) is not dict:
                return None
            v = v.get(b)
            if type(v) is not str:
                return None
            return v.lower() if lower else v.upper()

        return case2
    if lower:
        return lambda r: v.lower() if type(v := get(r)) is str else None
    return lambda r: v.upper() if type(v := get(r)) is str else None


def _kind(v: Any) -> int:
    t = type(v)
    if t is int or t is float:
        return 0
    if t is str:
        return 1
    if t is bool:
        return 2
    return 3


def eq3(a: Any, b: Any) -> bool | None:
    """SQL ``a = b``: None (UNKNOWN) with a NULL; different kinds are unequal."""
    if a is None or b is None:
        return None
    return a == b and _kind(a) == _kind(b)


def like_plan(pattern: str) -> tuple[str, Any]:
    """How to match a LIKE pattern (``%`` any run, ``_`` one char, ``\\x`` literal x) against
    a whole string: ``("eq" | "prefix" | "suffix" | "contains", text)`` for the common shapes
    (str methods), else ``("call", test)``: ``test(text) -> bool``, a whole-string match on
    RE2 (DOTALL)."""
    if "\\" not in pattern and "_" not in pattern:
        inner = pattern.strip("%")
        if "%" not in inner:
            starts, ends = pattern.startswith("%"), pattern.endswith("%") and len(pattern) > 1
            if not starts and not ends:
                return "eq", pattern
            if starts and ends:
                return "contains", inner
            return ("prefix", inner) if ends else ("suffix", inner)
    # RE2 too: a LIKE with many ``%`` would backtrack polynomially on Python's re.
    return "call", compile_regex(like_regex(pattern), dotall=True).whole


def like_regex(pattern: str) -> str:
    """The RE2 text of a LIKE pattern (unanchored; the callers match it whole)."""
    out, i = [], 0
    while i < len(pattern):
        c = pattern[i]
        if c == "\\" and i + 1 < len(pattern):
            out.append(re2.escape(pattern[i + 1]))
            i += 2
            continue
        out.append(".*" if c == "%" else "." if c == "_" else re2.escape(c))
        i += 1
    return "".join(out)


def _string_test(kind: str, arg: Any, f: Fn | None, name: str | None) -> Fn:
    """A closure true when the string value (``record.get(name)`` or ``f(record)``) passes
    the test; non-strings fail. Specialized so that a match costs one Python frame."""
    if name is not None:
        if kind == "eq":
            return lambda r: type(v := r.get(name)) is str and v == arg
        if kind == "prefix":
            return lambda r: type(v := r.get(name)) is str and v.startswith(arg)
        if kind == "suffix":
            return lambda r: type(v := r.get(name)) is str and v.endswith(arg)
        if kind == "contains":
            return lambda r: type(v := r.get(name)) is str and arg in v
        return lambda r: type(v := r.get(name)) is str and arg(v)
    assert f is not None
    if kind == "eq":
        return lambda r: type(v := f(r)) is str and v == arg
    if kind == "prefix":
        return lambda r: type(v := f(r)) is str and v.startswith(arg)
    if kind == "suffix":
        return lambda r: type(v := f(r)) is str and v.endswith(arg)
    if kind == "contains":
        return lambda r: type(v := f(r)) is str and arg in v
    return lambda r: type(v := f(r)) is str and arg(v)


class ExprCompiler:
    """Expressions to closures (see module docstring)."""

    def __init__(self, resolve: Resolver | None = None) -> None:
        self.resolve = resolve or (lambda node: None)

    # ---- values ---------------------------------------------------------------------------
    def value(self, node: n.Node) -> Fn:
        got = self.resolve(node)
        if got is not None:
            return got
        if isinstance(node, n.Literal):
            const = node.value
            return lambda r: const
        if isinstance(node, n.Field):
            return field_getter(node.path)
        if isinstance(node, n.Call):
            fn = FUNCTIONS[node.name]
            if node.name in ("lower", "upper") and isinstance(node.args[0], n.Field):
                return _case_of_field(node.args[0].path, node.name == "lower")
            args = [self.value(a) for a in node.args]
            lits = [a.value if isinstance(a, n.Literal) else None for a in node.args]
            if node.name == "regexp_extract":
                groups = self._regex(node.args[1]).groups
                group = lits[2] if len(lits) > 2 else 1
                if not 0 <= group <= groups:
                    raise QLError(
                        node.args[-1].line,
                        node.args[-1].column,
                        f"expected a group index in [0, {groups}] for this pattern, got {group}",
                    )
            return fn.build(args, lits)
        if isinstance(node, n.Unary) and node.op == "-":
            f = self.value(node.operand)

            def neg(r: Any) -> Any:
                v = f(r)
                return -v if type(v) in NUMT else None

            return neg
        if isinstance(node, n.Binary) and node.op in ("+", "-", "*", "/", "%"):
            x, y = self._top_field(node.left), self._top_field(node.right)
            if x is not None and y is not None and node.op in ("+", "-", "*"):
                opf = {"+": operator.add, "-": operator.sub, "*": operator.mul}[node.op]

                def fields(r: Any) -> Any:
                    a, b = r.get(x), r.get(y)
                    return opf(a, b) if type(a) in NUMT and type(b) in NUMT else None

                return fields
            return self._arith(node.op, self.value(node.left), self.value(node.right))
        if isinstance(node, n.Index):
            return self._index(self.value(node.expr), self.value(node.index))
        if isinstance(node, n.Case):
            return self._case(node)
        if isinstance(node, n.Cast):
            g, to = self.value(node.expr), node.type
            return lambda r: cast(g(r), to)
        # a condition used as a value: TRUE / FALSE / NULL
        t, f = self.pred(node, True), self.pred(node, False)
        return lambda r: True if t(r) else (False if f(r) else None)

    def _case(self, node: n.Case) -> Fn:
        """The first branch whose WHEN is TRUE (searched) or equal to the operand (simple:
        SQL ``=``, so NULL never matches); else ELSE, else NULL."""
        if node.operand is None:
            tests = [self.pred(w, True) for w in node.whens]
        else:
            tests = [self._compare("=", node.operand, w) for w in node.whens]
        branches = tuple(zip(tests, [self.value(x) for x in node.results], strict=True))
        default = self.value(node.default) if node.default is not None else (lambda r: None)
        if len(branches) == 1:
            ((t0, v0),) = branches
            return lambda r: v0(r) if t0(r) else default(r)

        def case(r: Any) -> Any:
            for test, val in branches:
                if test(r):
                    return val(r)
            return default(r)

        return case

    @staticmethod
    def _arith(op: str, fa: Fn, fb: Fn) -> Fn:
        if op == "+":

            def add(r: Any) -> Any:
                a, b = fa(r), fb(r)
                return a + b if type(a) in NUMT and type(b) in NUMT else None

            return add
        if op == "-":

            def sub(r: Any) -> Any:
                a, b = fa(r), fb(r)
                return a - b if type(a) in NUMT and type(b) in NUMT else None

            return sub
        if op == "*":

            def mul(r: Any) -> Any:
                a, b = fa(r), fb(r)
                return a * b if type(a) in NUMT and type(b) in NUMT else None

            return mul
        div = operator.truediv if op == "/" else operator.mod

        def divide(r: Any) -> Any:
            a, b = fa(r), fb(r)
            if type(a) in NUMT and type(b) in NUMT and b != 0:
                return div(a, b)
            return None

        return divide

    @staticmethod
    def _index(fb: Fn, fi: Fn) -> Fn:
        def index(r: Any) -> Any:
            b, i = fb(r), fi(r)
            if type(b) is list and type(i) is int:
                return b[i] if 0 <= i < len(b) else None
            if type(b) is dict and type(i) is str:
                return b.get(i)
            return None

        return index

    @staticmethod
    def _regex(node: n.Node) -> Regex:
        assert isinstance(node, n.Literal) and isinstance(node.value, str)
        try:
            return compile_regex(node.value)
        except RegexRefused as exc:
            raise QLError(node.line, node.column, f"expected a regular expression: {exc}") from None

    # ---- conditions -----------------------------------------------------------------------
    def pred(self, node: n.Node, want: bool) -> Fn:
        """A closure true exactly when ``node`` evaluates to ``want`` (see module docstring)."""
        if self.resolve(node) is None:
            if isinstance(node, n.Literal):
                return _true if node.value is want else _false
            if isinstance(node, n.Unary) and node.op == "NOT":
                return self.pred(node.operand, not want)
            if isinstance(node, n.Binary) and node.op in ("AND", "OR"):
                return self._junction(node, want)
            if isinstance(node, n.Binary) and node.op in _OPS:
                op = node.op if want else _NEGATE[node.op]
                return self._compare(op, node.left, node.right)
            if isinstance(node, n.IsNull):
                f = self.value(node.expr)
                if want != node.negated:
                    return lambda r: f(r) is None
                return lambda r: f(r) is not None
            if isinstance(node, n.InList):
                return self._in(node, want != node.negated)
            if isinstance(node, n.Match):
                return self._match(node, want != node.negated)
            if isinstance(node, n.Between):
                both = n.Binary(
                    "AND",
                    n.Binary(">=", node.expr, node.low),
                    n.Binary("<=", node.expr, node.high),
                )
                return self.pred(both, want != node.negated)
        f = self.value(node)
        return lambda r: f(r) is want

    def _junction(self, node: n.Binary, want: bool) -> Fn:
        # AND is TRUE when all parts are TRUE, FALSE when any is FALSE (OR: the reverse)
        all_of = (node.op == "AND") == want
        parts: list[n.Node] = []

        def flatten(x: n.Node) -> None:
            if isinstance(x, n.Binary) and x.op == node.op and self.resolve(x) is None:
                flatten(x.left)
                flatten(x.right)
            else:
                parts.append(x)

        flatten(node)
        fns: list[Fn] = []
        if all_of:
            fused, rest = [], []
            for p in parts:
                lit = self._field_eq_string(p, want)
                (fused if lit is not None else rest).append(lit or p)
            if fused:
                fns.append(self._eq_all(fused))
            fns.extend(self.pred(p, want) for p in rest)
        else:
            fns = [self.pred(p, want) for p in parts]
        if len(fns) == 3:  # flat closures: one frame for the junction itself
            a, b, c = fns
            return (
                (lambda r: a(r) and b(r) and c(r)) if all_of else (lambda r: a(r) or b(r) or c(r))
            )
        while len(fns) > 1:  # a balanced tree of two-argument closures
            pairs = []
            for i in range(0, len(fns) - 1, 2):
                a, b = fns[i], fns[i + 1]
                pairs.append(_and2(a, b) if all_of else _or2(a, b))
            if len(fns) % 2:
                pairs.append(fns[-1])
            fns = pairs
        return fns[0]

    def eq_conjunction(self, node: n.Node) -> list[tuple[str, str]] | None:
        """``[(name, literal), ...]`` when ``node`` is TRUE exactly when every
        ``record.get(name) == literal`` (an AND of top-level fields = string literals)."""
        if isinstance(node, n.Binary) and node.op == "AND" and self.resolve(node) is None:
            left, right = self.eq_conjunction(node.left), self.eq_conjunction(node.right)
            return None if left is None or right is None else left + right
        item = self._field_eq_string(node, True)
        return None if item is None else [item]

    def _field_eq_string(self, node: n.Node, want: bool) -> tuple[str, str] | None:
        """``(name, literal)`` when ``node`` is TRUE exactly when ``record.get(name) ==
        literal`` (a top-level field compared to a string literal)."""
        if not want or not isinstance(node, n.Binary) or node.op != "=":
            return None
        if self.resolve(node) is not None:
            return None
        for f, lit in ((node.left, node.right), (node.right, node.left)):
            if (
                isinstance(f, n.Field)
                and len(f.path) == 1
                and self.resolve(f) is None
                and isinstance(lit, n.Literal)
                and type(lit.value) is str
            ):
                return f.path[0], lit.value
        return None

    @staticmethod
    def _eq_all(items: list[tuple[str, str]]) -> Fn:
        if len(items) == 1:
            ((a, la),) = items
            return lambda r: r.get(a) == la
        if len(items) == 2:
            (a, la), (b, lb) = items
            return lambda r: r.get(a) == la and r.get(b) == lb
        if len(items) == 3:
            (a, la), (b, lb), (c, lc) = items
            return lambda r: r.get(a) == la and r.get(b) == lb and r.get(c) == lc
        pairs = tuple(items)

        def eq_all(r: Any) -> bool:
            get = r.get
            for k, v in pairs:  # noqa: SIM110 (a plain loop beats all() over a generator)
                if get(k) != v:
                    return False
            return True

        return eq_all

    def _compare(self, op: str, left: n.Node, right: n.Node) -> Fn:
        """A closure true exactly when ``left op right`` is TRUE."""
        if isinstance(left, n.Literal) and not isinstance(right, n.Literal):
            op, left, right = _FLIP[op], right, left
        if isinstance(right, n.Literal) and self.resolve(right) is None:
            lit = right.value
            if lit is None:
                return _false
            f = self.value(left)
            lt = type(lit)
            if lt is str and op == "=":
                if isinstance(left, n.Field) and len(left.path) == 1 and self.resolve(left) is None:
                    name = left.path[0]
                    return lambda r: r.get(name) == lit
                return lambda r: f(r) == lit
            if lt is str and op == "!=":
                return lambda r: (v := f(r)) is not None and v != lit
            opf = _OPS[op]
            if lt is str:
                return lambda r: type(v := f(r)) is str and opf(v, lit)
            if lt is int or lt is float:
                if op == "!=":
                    return lambda r: (v := f(r)) is not None and (type(v) not in NUMT or v != lit)
                if op == ">":
                    return lambda r: type(v := f(r)) in NUMT and v > lit
                if op == "<":
                    return lambda r: type(v := f(r)) in NUMT and v < lit
                return lambda r: type(v := f(r)) in NUMT and opf(v, lit)
        fa, fb = self.value(left), self.value(right)
        if op in ("=", "!="):
            want_equal = op == "="

            def eq(r: Any) -> bool:
                res = eq3(fa(r), fb(r))
                return res is want_equal

            return eq
        opf = _OPS[op]

        def cmp(r: Any) -> bool:
            a, b = fa(r), fb(r)
            if a is None or b is None or (type(a) is bool) != (type(b) is bool):
                return False
            try:
                return bool(opf(a, b))
            except TypeError:
                return False

        return cmp

    def _in(self, node: n.InList, want_in: bool) -> Fn:
        """TRUE exactly when ``expr IN (...)`` is ``want_in``."""
        f = self.value(node.expr)
        items = node.items
        literal = all(isinstance(i, n.Literal) and self.resolve(i) is None for i in items)
        if literal:
            vals = [i.value for i in items]  # type: ignore[attr-defined]
            has_null = any(v is None for v in vals)
            kinds = {_kind(v) for v in vals if v is not None}
            if kinds == {1}:  # strings: a set lookup
                strings = frozenset(v for v in vals if v is not None)
                if want_in:
                    return lambda r: type(v := f(r)) is str and v in strings
                if has_null:
                    return _false
                return lambda r: (
                    (v := f(r)) is not None and (type(v) is not str or v not in strings)
                )
        fns = [self.value(i) for i in items]

        def in3(r: Any) -> bool:
            a = f(r)
            unknown = False
            for g in fns:
                res = eq3(a, g(r))
                if res:
                    return want_in
                if res is None:
                    unknown = True
            return not unknown and not want_in

        return in3

    def _match(self, node: n.Match, want_match: bool) -> Fn:
        pattern = node.pattern
        assert isinstance(pattern, n.Literal) and isinstance(pattern.value, str)
        if node.op == "LIKE":
            kind, arg = like_plan(pattern.value)
        else:
            kind, arg = "call", self._regex(pattern).found
        if want_match:
            name = self._top_field(node.expr)
            f = None if name is not None else self.value(node.expr)
            return _string_test(kind, arg, f, name)
        test = _string_test(kind, arg, lambda s: s, None)
        f = self.value(node.expr)
        return lambda r: type(v := f(r)) is str and not test(v)

    def _top_field(self, node: n.Node) -> str | None:
        """The name when ``node`` is a top-level record field (read inline as r.get(name))."""
        if isinstance(node, n.Field) and len(node.path) == 1 and self.resolve(node) is None:
            return node.path[0]
        return None


# ---- the per-record pipeline --------------------------------------------------------------
def part_value(spec: AggSpec, comp: ExprCompiler) -> Fn | None:
    """The closure giving one aggregate's value for a record (None: the constant 1)."""
    if not spec.args:
        return None  # count(*)
    if spec.kind.name == "count":
        f = comp.value(spec.args[0])
        return lambda r: None if f(r) is None else 1
    if len(spec.args) == 2:  # topk(item, weight, k)
        fi, fw = comp.value(spec.args[0]), comp.value(spec.args[1])

        def pair(r: Any) -> Any:
            i, w = fi(r), fw(r)
            return None if i is None or w is None else (i, w)

        return pair
    return comp.value(spec.args[0])


MapFn = Callable[[dict[str, Any]], list[tuple[Any, Any]]]
KeysFn = Callable[[dict[str, Any]], list[Any]]


def build_map(an: Analysis) -> MapFn:
    """The per-record function ``map(record) -> [(key, value)]`` (see module docstring)."""
    return build_pipeline(an)[0]


def build_pipeline(an: Analysis) -> tuple[MapFn, KeysFn | None]:
    """``map`` and, when every value is the count 1 (``count(*)`` alone, or GROUP BY without
    aggregates), ``keys(record) -> [key]``: the same pipeline without pair tuples, for the
    worker's counting fast path (``Job.map_keys``)."""
    comp = ExprCompiler()
    where = comp.pred(an.query.where, True) if an.query.where is not None else None
    enc = keys.encode
    group = an.group_by
    top_field = (
        group[0].path[0]
        if len(group) == 1 and isinstance(group[0], n.Field) and len(group[0].path) == 1
        else None
    )
    key: Fn
    if not group:
        key = lambda r: ()  # noqa: E731
    elif len(group) == 1:
        g = comp.value(group[0])

        def key(r: Any) -> Any:
            k = g(r)
            return k if type(k) is str else enc(k)

    else:
        gs = tuple(comp.value(x) for x in group)
        key = lambda r: tuple([enc(g(r)) for g in gs])  # noqa: E731
    parts = [part_value(spec, comp) for spec in an.aggregates]
    if len(parts) == 1 and parts[0] is None and an.aggregates:
        value: Fn | None = None  # count(*): every value is 1
    elif len(parts) == 1 and an.aggregates:
        value = parts[0]
    elif not an.aggregates:
        value = None  # GROUP BY without aggregates: count the groups' records
    else:
        value = _composite_value(parts)
    composite = len(an.aggregates) > 1
    if value is not None:
        return _assemble(where, key, top_field, value, composite), None
    keys_fn = _keys(where, key)
    if an.query.where is not None and top_field is not None:
        items = comp.eq_conjunction(an.query.where)
        if items is not None and len(items) <= 2:
            return _count_field_where_eq(top_field, items), _field_where_eq_keys(top_field, items)
    return _assemble(where, key, top_field, value, composite), keys_fn


def _keys(where: Fn | None, key: Fn) -> KeysFn:
    if where is None:
        return lambda r: [key(r)]
    return lambda r: [key(r)] if where(r) else []


def _field_where_eq_keys(g: str, items: list[tuple[str, str]]) -> KeysFn:
    """The keys-only twin of :func:`_count_field_where_eq`."""
    enc = keys.encode
    if len(items) == 1:
        ((a, la),) = items

        def keys1(r: Any) -> list:
            if r.get(a) == la:
                k = r.get(g)
                return [k if type(k) is str else enc(k)]
            return []

        return keys1
    (a, la), (b, lb) = items

    def keys2(r: Any) -> list:
        if r.get(a) == la and r.get(b) == lb:
            k = r.get(g)
            return [k if type(k) is str else enc(k)]
        return []

    return keys2


def _composite_value(parts: list[Fn | None]) -> Fn:
    """The tuple of part values (None in ``parts``: the constant 1 of count(*))."""
    if len(parts) == 2:
        f0, f1 = parts
        if f0 is None and f1 is not None:
            return lambda r: (1, f1(r))
        if f1 is None and f0 is not None:
            return lambda r: (f0(r), 1)
        if f0 is not None and f1 is not None:
            return lambda r: (f0(r), f1(r))
    fns = [p if p is not None else (lambda r: 1) for p in parts]
    return lambda r: tuple([f(r) for f in fns])


def _count_field_where_eq(
    g: str, items: list[tuple[str, str]]
) -> Callable[[dict[str, Any]], list[tuple[Any, Any]]]:
    """``WHERE a = 'x' [AND b = 'y'] GROUP BY g`` counting: one Python frame per record."""
    enc = keys.encode
    if len(items) == 1:
        ((a, la),) = items

        def count1(r: Any) -> list:
            if r.get(a) == la:
                k = r.get(g)
                return [(k if type(k) is str else enc(k), 1)]
            return []

        return count1
    (a, la), (b, lb) = items

    def count2(r: Any) -> list:
        if r.get(a) == la and r.get(b) == lb:
            k = r.get(g)
            return [(k if type(k) is str else enc(k), 1)]
        return []

    return count2


def _assemble(
    where: Fn | None, key: Fn, top_field: str | None, value: Fn | None, composite: bool
) -> Callable[[dict[str, Any]], list[tuple[Any, Any]]]:
    enc = keys.encode
    if value is None:
        if top_field is not None:
            g = top_field
            if where is None:

                def count_field(r: Any) -> list:
                    k = r.get(g)
                    return [(k if type(k) is str else enc(k), 1)]

                return count_field

            def filter_count_field(r: Any) -> list:
                if where(r):
                    k = r.get(g)
                    return [(k if type(k) is str else enc(k), 1)]
                return []

            return filter_count_field
        if where is None:
            return lambda r: [(key(r), 1)]
        return lambda r: [(key(r), 1)] if where(r) else []
    if composite:
        if where is None:
            return lambda r: [(key(r), value(r))]
        return lambda r: [(key(r), value(r))] if where(r) else []

    def single(r: Any) -> list:
        if where is not None and not where(r):
            return []
        v = value(r)
        return [] if v is None else [(key(r), v)]

    return single
