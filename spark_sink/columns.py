"""The rollup lake's columns: the fixed schema every epoch file has, and the typed key and
value columns a result's rows become.

Contract (the layout and the reader rule are in ``spark_sink/lake.py``; see
``docs/spark-sink.md``): :data:`FIXED_FIELDS` come first on every row; then
:func:`key_value_columns` (a job's (key, value) pairs) or :func:`named_columns` (a job's named
rows) type each column when pyarrow infers one of the plain types for all its values, and hold
JSON text (:func:`to_json`) otherwise. A column name never collides with a fixed column, a
partition column (``date``, ``hour``), ``accuracy`` or ``late_records``: it gets ``_`` prefixes
instead.

pyarrow only; no agent import.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any

import orjson
import pyarrow as pa

TS = pa.timestamp("us", tz="UTC")
FIXED_FIELDS: tuple[pa.Field, ...] = (
    pa.field("job", pa.string(), nullable=False),
    pa.field("tree", pa.int32(), nullable=False),
    pa.field("trees", pa.int32(), nullable=False),
    pa.field("epoch", pa.int64(), nullable=False),
    pa.field("term", pa.int64(), nullable=False),
    pa.field("version", pa.int64(), nullable=False),
    pa.field("epoch_start", TS, nullable=False),
    pa.field("epoch_end", TS, nullable=False),
    pa.field("tentative", pa.bool_(), nullable=False),
    pa.field("partial", pa.bool_(), nullable=False),
    pa.field("coverage", pa.float64(), nullable=False),
    pa.field("lacking", pa.list_(pa.string()), nullable=False),
    pa.field("written_at", TS, nullable=False),
    pa.field("key_json", pa.string(), nullable=False),
    pa.field("value_json", pa.string(), nullable=False),
)
FIXED_NAMES = frozenset(f.name for f in FIXED_FIELDS)
ACCURACY = pa.field("accuracy", pa.float64(), nullable=True)  # top-k jobs only (module doc)
#: records refused as late for the epoch, as the job's master knew when it wrote the file (the
#: first tree's files only; null where unknown: other trees, files from before the column)
LATE_RECORDS = pa.field("late_records", pa.int64(), nullable=True)
OPTIONAL_NAMES = frozenset({ACCURACY.name, LATE_RECORDS.name})
PARTITION_NAMES = frozenset({"date", "hour"})

# ---- values → columns ------------------------------------------------------------------------


def normalize(value: Any) -> Any:
    """JSON-ready form: tuples → lists, sets → lists sorted by repr, bytes → UTF-8 text,
    non-finite floats → None."""
    if isinstance(value, dict):
        return {str(normalize(k)): normalize(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [normalize(v) for v in value]
    if isinstance(value, set | frozenset):
        return sorted((normalize(v) for v in value), key=repr)
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _json_default(value: Any) -> Any:
    if isinstance(value, set | frozenset | bytes):
        return normalize(value)
    if type(value).__module__ == "numpy" and hasattr(value, "tolist"):  # numpy scalars
        return value.tolist()
    raise TypeError(type(value).__name__)


def to_json(value: Any) -> str:
    """Compact JSON of :func:`normalize` (value) (orjson fast path; ints beyond 64 bits and
    non-text dict keys take the json module's path)."""
    try:
        return orjson.dumps(value, default=_json_default).decode()
    except (orjson.JSONEncodeError, TypeError):
        return json.dumps(normalize(value), ensure_ascii=False, separators=(",", ":"))


def _shape(values: Sequence[Any]) -> tuple[str, int]:
    """('scalar'|'tuple'|'list'|'dict'|'mixed', arity) of a column of keys or values."""
    kinds = set()
    arity = set()
    for v in values:
        if isinstance(v, tuple):
            kinds.add("tuple")
            arity.add(len(v))
        elif isinstance(v, list | set | frozenset):
            kinds.add("list")
        elif isinstance(v, dict):
            kinds.add("dict")
        else:
            kinds.add("scalar")
    if len(kinds) != 1 or len(arity) > 1:
        return ("mixed" if kinds else "scalar", 0)
    kind = kinds.pop()
    return kind, (arity.pop() if arity else 1)


def _typed(values: list[Any]) -> pa.Array:
    """A typed Arrow array if pyarrow infers one of the plain types, else JSON text."""
    prepared = [sorted(v, key=repr) if isinstance(v, set | frozenset) else v for v in values]
    try:
        arr = pa.array(prepared)
    except (pa.ArrowException, OverflowError, TypeError, ValueError):
        return pa.array([None if v is None else to_json(v) for v in values], pa.string())
    if pa.types.is_null(arr.type):  # all None: text, so files agree with typed epochs
        return pa.nulls(len(arr), pa.string())
    if pa.types.is_list(arr.type) and pa.types.is_null(arr.type.value_type):
        return arr.cast(pa.list_(pa.string()))
    if _plain(arr.type):
        return arr
    return pa.array([None if v is None else to_json(v) for v in values], pa.string())


def _plain(t: pa.DataType) -> bool:
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return _plain(t.value_type) and not pa.types.is_list(t.value_type)
    return (
        pa.types.is_null(t)
        or pa.types.is_boolean(t)
        or pa.types.is_int64(t)
        or pa.types.is_float64(t)
        or pa.types.is_string(t)
        or pa.types.is_binary(t)
    )


def _column_name(name: str, taken: set[str]) -> str:
    name = str(name) or "_"
    while name in taken or name in FIXED_NAMES or name in PARTITION_NAMES or name in OPTIONAL_NAMES:
        name = f"_{name}"
    taken.add(name)
    return name


def key_value_columns(
    rows: Sequence[tuple[Any, Any]],
    key_names: Sequence[str] | None = None,
    value_names: Sequence[str] | None = None,
) -> tuple[list[tuple[str, pa.Array]], list[tuple[str, pa.Array]]]:
    """The typed (key columns, value columns) for ``rows`` (module contract); a
    ``key_names`` / ``value_names`` of the wrong arity is ignored (default names used)."""
    if not rows:  # an empty epoch: fixed columns only (no column typed from nothing)
        return [], []
    keys = [k for k, _ in rows]
    values = [v for _, v in rows]
    taken: set[str] = set()
    out: list[tuple[str, pa.Array]] = []
    kind, arity = _shape(keys)
    if kind == "tuple":
        names = list(key_names) if key_names and len(key_names) == arity else None
        for i in range(arity):
            name = _column_name(names[i] if names else f"key_{i}", taken)
            out.append((name, _typed([k[i] for k in keys])))
    elif kind == "scalar":
        name = key_names[0] if key_names and len(key_names) == 1 else "key"
        out.append((_column_name(name, taken), _typed(keys)))
    keys_done = len(out)
    kind, arity = _shape(values)
    if kind == "dict":
        fields: dict[str, None] = {}
        for v in values:
            fields.update(dict.fromkeys(str(k) for k in v))
        for f in fields:
            col = [next((x for k, x in v.items() if str(k) == f), None) for v in values]
            out.append((_column_name(f, taken), _typed(col)))
    elif kind == "tuple":
        names = list(value_names) if value_names and len(value_names) == arity else None
        for i in range(arity):
            name = _column_name(names[i] if names else f"value_{i}", taken)
            out.append((name, _typed([v[i] for v in values])))
    elif kind in ("scalar", "list"):
        name = value_names[0] if value_names and len(value_names) == 1 else "value"
        out.append((_column_name(name, taken), _typed(values)))
    return out[:keys_done], out[keys_done:]


def named_columns(rows: Sequence[dict[str, Any]]) -> list[tuple[str, pa.Array]]:
    """One typed column per field of the job's named rows (union of fields, first-seen
    order; a field a row lacks is null there)."""
    fields: dict[str, None] = {}
    for row in rows:
        fields.update(dict.fromkeys(str(k) for k in row))
    taken: set[str] = set()
    out = []
    for f in fields:
        values = [next((v for k, v in row.items() if str(k) == f), None) for row in rows]
        out.append((_column_name(f, taken), _typed(values)))
    return out
