"""ELF QL expressions evaluated over an Arrow table: one column per expression, not one
closure call per record.

Contract: :class:`ArrowEval` (over one ``pyarrow.Table``) gives ``value(node) -> pa.Array``
and ``pred(node) -> pa.Array`` of booleans whose NULL is SQL's UNKNOWN (Kleene logic), with
exactly the semantics of :mod:`agent.ql.compiler` on the same rows (the row path is the
reference): NULLs, kinds that never compare equal, ordering across kinds UNKNOWN, arithmetic
on numbers only, division by zero NULL, LIKE / RLIKE on RE2.

An expression runs on a ``pyarrow.compute`` kernel where one has the row path's meaning
(:data:`VECTORIZED`); otherwise that expression alone is evaluated row by row with the row
path's own closure over the Arrow column and converted back (:data:`ROW_FALLBACK`, listed
in docs/ql.md). Where neither can be exact - a column whose Python values would mix kinds,
an int64 overflow, a NaN where Python and Arrow order differently, nested values a kernel
would not compare like Python - :class:`Unsupported` is raised and the caller runs that
chunk on the row path: exact or not at all, never approximately.

Kinds: an array's Arrow type is its values' Python kind for the whole column: integers
``int``, floating point ``float``, strings ``str``, booleans ``bool``, the null type
``null``, anything else (lists, structs) ``other``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from agent.ql import arrow_funcs
from agent.ql import nodes as n
from agent.ql.arrow_kinds import has_nan, kind, max_abs
from agent.ql.compiler import ExprCompiler, like_plan, like_regex
from agent.ql.fallback import Unsupported
from agent.ql.regex import compile_regex, re2_spelling

Value = pa.Array | pa.Scalar

#: functions and operators with a vectorized kernel (others: :data:`ROW_FALLBACK`)
VECTORIZED = (
    "fields (also nested, on struct columns)",
    "literals",
    "= != < <= > >= (numbers, strings, booleans)",
    "AND OR NOT",
    "IS [NOT] NULL",
    "[NOT] IN (…)",
    "[NOT] BETWEEN",
    "[NOT] LIKE",
    "[NOT] RLIKE / REGEXP",
    "+ - * / and unary - on numbers",
    "lower, upper (ASCII-only columns)",
    "length",
    "trim",
    "abs",
    "concat (string arguments)",
    "coalesce (arguments of one kind)",
    "CASE, IF, NULLIF (branches of one kind)",
    "CAST (bool/int to VARCHAR, BIGINT, DOUBLE; numbers to BOOLEAN, TIMESTAMP)",
    "starts_with, ends_with, contains (literal pattern)",
    "from_unixtime, date_trunc (epoch seconds, years 1000-9999)",
    "url_extract_path (origin-form targets and scheme://host URLs with a plain host)",
)
#: evaluated row by row with the row path's closure, then converted back to a column
ROW_FALLBACK = (
    "% (floored modulo)",
    "substr / substring",
    "regexp_extract",
    "split",
    "round",
    "expr[index]",
    "lower / upper on non-ASCII text (Python's Unicode case mapping)",
    "concat with non-string arguments (Python's number formatting)",
    "coalesce over arguments of different kinds",
    "comparisons of lists or objects",
    "CASE / IF / NULLIF whose branches differ in kind",
    "CAST of text to a number, boolean or timestamp; of floats to VARCHAR or BIGINT",
    "date_trunc over TIMESTAMP / ISO text",
    "url_extract_path of other URLs; url_extract_parameter",
)

_INT64 = pa.int64()
_F64 = pa.float64()
_EXACT_INT_IN_FLOAT = 1 << 53
# Python's str.strip() whitespace: every code point with str.isspace(), all at most U+3000
# (the test checks it against the whole range; scanning it cost 0.15 s at every import)
_PY_SPACE = "".join(chr(c) for c in range(0x3001) if chr(c).isspace())
_CMP = {"=": "equal", "!=": "not_equal", "<": "less", "<=": "less_equal", ">": "greater",
        ">=": "greater_equal"}  # fmt: skip
_FLIP = {"<": ">", "<=": ">=", ">": "<", ">=": "<=", "=": "=", "!=": "!="}


def _numeric(k: str) -> bool:
    return k in ("int", "float")


def to_arrow(values: list[Any]) -> pa.Array:
    """Python values of one expression as a column of one kind; :class:`Unsupported` when
    they mix kinds (the column could not say what each value was) or do not fit."""
    kinds = {type(v) for v in values if v is not None}
    try:
        if not kinds:
            return pa.nulls(len(values))
        if kinds == {str}:
            return pa.array(values, pa.string())
        if kinds == {int}:
            return pa.array(values, _INT64)
        if kinds == {float}:
            return pa.array(values, _F64)
        if kinds == {bool}:
            return pa.array(values, pa.bool_())
        if kinds == {list} and all(type(x) is str for v in values if v is not None for x in v):
            return pa.array(values, pa.list_(pa.string()))
    except (pa.ArrowException, OverflowError, UnicodeEncodeError) as exc:
        raise Unsupported(f"values do not fit an Arrow column: {exc}") from None
    raise Unsupported(f"an expression's values mix kinds {sorted(t.__name__ for t in kinds)}")


def _scalar_literal(v: Any) -> pa.Scalar:
    if v is None:
        return pa.scalar(None, pa.null())
    if type(v) is bool:
        return pa.scalar(v, pa.bool_())
    if type(v) is int:
        if not -(1 << 63) <= v < 1 << 63:
            raise Unsupported("an integer literal beyond int64")
        return pa.scalar(v, _INT64)
    if type(v) is float:
        return pa.scalar(v, _F64)
    if type(v) is str:
        return pa.scalar(v, pa.string())
    raise Unsupported(f"a literal of type {type(v).__name__}")


class ArrowEval:
    """Expressions over one table (see module docstring)."""

    def __init__(self, table: pa.Table) -> None:
        self.table = table
        self.n = table.num_rows
        self._rows: list[dict[str, Any]] | None = None
        #: the row path's compiler, for expressions evaluated row by row (the fallback)
        self.closures = ExprCompiler()
        self.fallbacks = 0  # expressions evaluated row by row (for stats and tests)

    # ---- helpers --------------------------------------------------------------------------
    def rows(self) -> list[dict[str, Any]]:
        if self._rows is None:
            self._rows = self.table.to_pylist()
        return self._rows

    def _nulls(self, t: pa.DataType | None = None) -> pa.Array:
        return pa.nulls(self.n, t or pa.null())

    def full(self, x: Value) -> pa.Array:
        """``x`` as an array of the table's n values (a scalar repeated n times)."""
        if isinstance(x, pa.Scalar):
            return pa.array([x.as_py()] * self.n, x.type) if x.is_valid else self._nulls(x.type)
        return x

    def row_value(self, node: n.Node) -> pa.Array:
        self.fallbacks += 1
        f = self.closures.value(node)
        return to_arrow([f(r) for r in self.rows()])

    def _row_pred(self, node: n.Node) -> pa.Array:
        self.fallbacks += 1
        t, f = self.closures.pred(node, True), self.closures.pred(node, False)
        return pa.array(
            [True if t(r) else (False if f(r) else None) for r in self.rows()], pa.bool_()
        )

    # ---- values ---------------------------------------------------------------------------
    def value(self, node: n.Node) -> Value:
        if isinstance(node, n.Literal):
            return _scalar_literal(node.value)
        if isinstance(node, n.Field):
            return self._field(node.path)
        if isinstance(node, n.Call):
            return self._call(node)
        if isinstance(node, n.Unary) and node.op == "-":
            x = self.value(node.operand)
            k = kind(x)
            if k == "int":
                try:
                    return pc.negate_checked(x)
                except pa.ArrowInvalid:
                    return self.row_value(node)
            if k == "float":
                return pc.negate(x)
            return self._nulls()
        if isinstance(node, n.Binary) and node.op in ("+", "-", "*", "/"):
            return self._arith(node)
        if isinstance(node, n.Binary) and node.op == "%":
            return self.row_value(node)
        if isinstance(node, n.Index):
            return self.row_value(node)
        if isinstance(node, n.Case):
            return arrow_funcs.case(self, node)
        if isinstance(node, n.Cast):
            return arrow_funcs.cast(self, node)
        return self.pred(node)  # a condition used as a value: TRUE / FALSE / NULL

    def _field(self, path: tuple[str, ...]) -> pa.Array:
        if path[0] not in self.table.column_names:
            return self._nulls()
        col = self.table.column(path[0])
        arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
        for name in path[1:]:
            if pa.types.is_map(arr.type):
                # e.g. an access log's query string, syslog's structured data (the columnar
                # kernels' map columns): a name absent from a row's map is NULL, as dict.get;
                # the last of a repeated name wins, as in the row parser's dict
                if not pa.types.is_string(arr.type.key_type):
                    return self._nulls()
                arr = pc.map_lookup(arr, pa.scalar(name, arr.type.key_type), "last")
                continue
            if not pa.types.is_struct(arr.type):
                return self._nulls()  # a step into a non-object is NULL
            if arr.type.get_field_index(name) < 0:
                return self._nulls()
            arr = pc.struct_field(arr, name)
        return arr

    def _arith(self, node: n.Binary) -> Value:
        a, b = self.value(node.left), self.value(node.right)
        ka, kb = kind(a), kind(b)
        if not (_numeric(ka) and _numeric(kb)):
            return self._nulls()
        if ka != kb or node.op == "/":
            # int -> float as Python converts it, exact only below 2**53
            if (ka == "int" and max_abs(a) > _EXACT_INT_IN_FLOAT) or (
                kb == "int" and max_abs(b) > _EXACT_INT_IN_FLOAT
            ):
                return self.row_value(node)
            a, b = pc.cast(a, _F64), pc.cast(b, _F64)
        if node.op == "/":
            zero = pc.equal(b, 0.0)
            safe_b = pc.if_else(zero, 1.0, b)
            return pc.if_else(zero, pa.scalar(None, _F64), pc.divide(a, safe_b))
        name = {"+": "add", "-": "subtract", "*": "multiply"}[node.op]
        if ka == kb == "int":
            try:
                return pc.call_function(name + "_checked", [a, b])
            except pa.ArrowInvalid:  # overflow: Python's ints are unbounded
                return self.row_value(node)
        return pc.call_function(name, [a, b])

    def _call(self, node: n.Call) -> Value:
        name = node.name
        if name in ("lower", "upper", "trim", "length", "abs"):
            x = self.value(node.args[0])
            k = kind(x)
            if name == "length":
                if k == "str":
                    return pc.cast(pc.utf8_length(x), _INT64)
                if pa.types.is_list(x.type):
                    return pc.cast(pc.list_value_length(x), _INT64)
                return self._nulls(_INT64)
            if name == "abs":
                if k == "int":
                    try:
                        return pc.abs_checked(x)
                    except pa.ArrowInvalid:
                        return self.row_value(node)
                return pc.abs(x) if k == "float" else self._nulls()
            if k != "str":
                return self._nulls(pa.string())
            if name == "trim":
                return pc.utf8_trim(x, characters=_PY_SPACE)
            ascii_only = pc.all(pc.string_is_ascii(x)).as_py()
            if ascii_only is False:
                return self.row_value(node)  # Python's Unicode case mapping (ß -> SS, ...)
            return pc.ascii_lower(x) if name == "lower" else pc.ascii_upper(x)
        if name == "concat":
            args = [self.value(a) for a in node.args]
            if all(kind(a) == "str" for a in args):
                return pc.binary_join_element_wise(*args, pa.scalar(""))
            return self.row_value(node)
        if name == "coalesce":
            args = [self.value(a) for a in node.args]
            kinds = {kind(a) for a in args} - {"null"}
            if not kinds:
                return self._nulls()
            if len(kinds) == 1 and kinds <= {"str", "int", "float", "bool"}:
                typed = [a for a in args if kind(a) != "null"]
                return pc.coalesce(*typed)
            return self.row_value(node)
        new = _NEW_KERNELS.get(name)
        if new is not None:
            return new(self, node)
        return self.row_value(node)  # substr, regexp_extract, split, round, url_*

    # ---- conditions -----------------------------------------------------------------------
    def pred(self, node: n.Node) -> Value:
        """The condition's three-valued result: TRUE, FALSE or NULL (UNKNOWN) per row."""
        if isinstance(node, n.Literal):
            v = node.value
            return pa.scalar(v if type(v) is bool else None, pa.bool_())
        if isinstance(node, n.Unary) and node.op == "NOT":
            return pc.invert(self.pred(node.operand))
        if isinstance(node, n.Binary) and node.op in ("AND", "OR"):
            a, b = self.pred(node.left), self.pred(node.right)
            return pc.and_kleene(a, b) if node.op == "AND" else pc.or_kleene(a, b)
        if isinstance(node, n.Binary) and node.op in _CMP:
            return self._compare(node)
        if isinstance(node, n.IsNull):
            x = self.value(node.expr)
            res = pc.is_null(self.full(x))
            return pc.invert(res) if node.negated else res
        if isinstance(node, n.InList):
            acc: Value = pa.scalar(False, pa.bool_())
            for item in node.items:
                acc = pc.or_kleene(acc, self._compare(n.Binary("=", node.expr, item)))
            return pc.invert(acc) if node.negated else acc
        if isinstance(node, n.Between):
            both = n.Binary(
                "AND", n.Binary(">=", node.expr, node.low), n.Binary("<=", node.expr, node.high)
            )
            res = self.pred(both)
            return pc.invert(res) if node.negated else res
        if isinstance(node, n.Match):
            return self._match(node)
        x = self.value(node)
        if kind(x) == "bool":
            return x
        return self._nulls(pa.bool_())  # a non-boolean value is neither TRUE nor FALSE

    def _compare(self, node: n.Binary) -> Value:
        op = node.op
        a, b = self.value(node.left), self.value(node.right)
        ka, kb = kind(a), kind(b)
        if ka == "null" or kb == "null":
            return self._nulls(pa.bool_())
        if "other" in (ka, kb):
            return self._row_pred(node)
        if has_nan(a) or has_nan(b):
            return self._row_pred(node)  # NaN: Python's comparisons are all false
        same = ka == kb or (_numeric(ka) and _numeric(kb))
        if not same:
            # different kinds: never equal; ordering them is UNKNOWN
            if op in ("=", "!="):
                valid = pc.and_(pc.is_valid(self.full(a)), pc.is_valid(self.full(b)))
                const = pa.scalar(op == "!=", pa.bool_())
                return pc.if_else(valid, const, pa.scalar(None, pa.bool_()))
            return self._nulls(pa.bool_())
        if ka != kb:  # int against float: Python compares exactly; floats hold ints to 2**53
            if (ka == "int" and max_abs(a) > _EXACT_INT_IN_FLOAT) or (
                kb == "int" and max_abs(b) > _EXACT_INT_IN_FLOAT
            ):
                return self._row_pred(node)
            a, b = pc.cast(a, _F64), pc.cast(b, _F64)
        if isinstance(a, pa.Scalar) and isinstance(b, pa.Scalar):
            return self.full(pc.call_function(_CMP[op], [a, b]))
        return pc.call_function(_CMP[op], [a, b])

    def _match(self, node: n.Match) -> Value:
        pattern = node.pattern
        assert isinstance(pattern, n.Literal) and isinstance(pattern.value, str)
        x = self.value(node.expr)
        if kind(x) != "str":
            return self._nulls(pa.bool_())  # a non-string operand is UNKNOWN
        x = self.full(x)
        if node.op == "LIKE":
            how, arg = like_plan(pattern.value)
            if how == "eq":
                res = pc.equal(x, pa.scalar(arg, pa.string()))
            elif how == "prefix":
                res = pc.starts_with(x, arg)
            elif how == "suffix":
                res = pc.ends_with(x, arg)
            elif how == "contains":
                res = pc.match_substring(x, arg)
            else:
                res = pc.match_substring_regex(x, "(?s)\\A(?:" + like_regex(pattern.value) + ")\\z")
        else:
            compile_regex(pattern.value)  # refused at submission already; same engine here
            res = pc.match_substring_regex(x, re2_spelling(pattern.value))
        return pc.invert(res) if node.negated else res


Evaluator = Callable[[pa.Table], ArrowEval]
#: the issue-26 functions with kernels in :mod:`agent.ql.arrow_funcs`
_NEW_KERNELS: dict[str, Callable[[ArrowEval, n.Call], Value]] = {
    "if": arrow_funcs.if_,
    "nullif": arrow_funcs.nullif,
    "starts_with": arrow_funcs.string_test,
    "ends_with": arrow_funcs.string_test,
    "contains": arrow_funcs.string_test,
    "from_unixtime": arrow_funcs.from_unixtime,
    "date_trunc": arrow_funcs.date_trunc,
    "url_extract_path": arrow_funcs.url_extract_path,
}
