"""The kinds of Arrow columns for the columnar path (shared by :mod:`agent.ql.arrow_eval`,
:mod:`agent.ql.arrow_funcs` and :mod:`agent.ql.arrow_plan`).

Contract: :func:`kind` names the Python kind an array's or scalar's values would have on the
row path: integers ``int``, floating point ``float``, strings ``str``, booleans ``bool``, the
null type ``null``, anything else (lists, structs) ``other``. :func:`has_nan` and
:func:`max_abs` say where Arrow's arithmetic or order would part from Python's.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

Value = pa.Array | pa.Scalar


def kind(x: Value) -> str:
    """The Python kind of the values of an array or scalar (see module docstring)."""
    t = x.type
    if pa.types.is_integer(t):
        return "int"
    if pa.types.is_floating(t):
        return "float"
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return "str"
    if pa.types.is_boolean(t):
        return "bool"
    if pa.types.is_null(t):
        return "null"
    return "other"


def has_nan(x: Value) -> bool:
    """Whether a float array or scalar holds a NaN (Python and Arrow order NaN differently)."""
    if kind(x) != "float":
        return False
    if isinstance(x, pa.Scalar):
        v = x.as_py()
        return v is not None and v != v
    return bool(pc.any(pc.is_nan(x)).as_py())


def max_abs(x: Value) -> int:
    """The largest absolute value of a numeric array or scalar (0 when all NULL)."""
    if isinstance(x, pa.Scalar):
        v = x.as_py()
        return 0 if v is None else abs(v)
    mm = pc.min_max(x).as_py()
    lo, hi = mm["min"], mm["max"]
    return 0 if lo is None else max(abs(lo), abs(hi))
