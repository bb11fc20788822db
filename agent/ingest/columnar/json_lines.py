"""The JSON-lines kernel: msgspec for a query's fields, else ``pyarrow.json`` (where enabled)
or the row parser, each checked against the row parser.

Contract: rows equal :class:`~agent.ingest.records.RecordValidator`'s (timestamp field ``ts``)
for every line; columns are the union of the chunk's top-level keys (a key a line lacks is
null), or, with ``fields``, exactly those fields (null columns for fields no line has).

Projected chunks (``want`` names the fields, valid UTF-8) go to
:func:`~agent.ingest.columnar.json_native.parse_fields` (the C scanner, or msgspec's
:func:`~agent.ingest.columnar.json_msgspec.parse_projected` where it is not built) in agents
and in ``elf run`` alike (faster than both other paths, and no reader that has crashed on
crafted input).
Otherwise, where :func:`use_arrow_reader` enabled it:

How: Arrow's C++ JSON reader (single-threaded) parses the whole chunk at once. Its answer is
used only where it provably equals orjson's (the row parser's decoder):

* a chunk with invalid UTF-8 (the row path repairs such lines), or whose reading fails for a
  reason other than bad lines (duplicate keys, a field of two types), or where the reader
  inferred a timestamp type below the top level, goes to the row parser whole (its records
  are converted with ``pa.Table.from_pylist``; values that cannot form one column raise
  :class:`~agent.ingest.columnar.parse.UnsupportedChunk`);
* when the reader refuses the chunk, each line is checked with orjson: the lines that are not
  JSON objects go to the row parser (they are rejected with its reason), the rest are read
  again;
* blank lines are left out before reading (the row path skips them), and so are lines that
  do not open an object (``{`` after JSON whitespace): a top-level ``null`` line crashes
  Arrow 26's reader (a segfault, found by the properties), and non-objects are the row
  parser's to reject anyway;
* top-level columns the reader typed as timestamps (it infers them from ISO-8601 strings) are
  read again as strings, so values stay the line's text;
* Arrow 26's reader mis-builds lists whose elements start as null (apache/arrow#51305:
  ``[null, 1]`` reads as ``[1, 0]``, ``[null, "x"]`` crashes ``to_pylist``): when the table
  has list columns and the chunk a null list element (``[null`` / ``, null`` in its bytes,
  strings included: a false alarm only costs speed), the table is dropped untouched (only its
  schema was looked at) and the row parser reads the chunk; a nested null-typed column that
  does not validate too;
* a float column holding a magnitude of 2**53 or more may hold an integer Arrow widened (the
  row parser keeps Python ints exact): row parser for the chunk;
* ``ts``: numbers are taken as float64 (an integer beyond 2**53 raises
  :class:`~agent.ingest.columnar.parse.UnsupportedChunk`: float64 cannot hold it exactly);
  strings are converted once per distinct value by
  :func:`~agent.ingest.records.parse_iso8601`; a null, missing, unparsable or other-typed
  ``ts`` sends its line to the row parser, which rejects it with the exact reason.
"""

from __future__ import annotations

import re

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from agent.ingest.columnar.base import KernelResult, UnsupportedChunk
from agent.ingest.columnar.json_native import parse_fields
from agent.ingest.columnar.lines import Lines
from agent.ingest.records import RecordError, parse_iso8601

TS_FIELD = "ts"
_JSON_SPACE = np.frombuffer(b" \t\r", np.uint8)
# a null list element (or the text of one inside a string: a false alarm only costs speed)
_LIST_NULL = re.compile(rb"[\[,][ \t\r]*null")
_EXACT_INT = float(2**53)


#: Arrow's C++ JSON reader on the bytes of a log line: a *known* crash (a segfault, not an
#: exception) was found by the properties and is guarded, but a line anyone can write reaching a
#: reader that has crashed before is a risk an agent beside a webserver must not take: off by
#: default in the agent (JSON lines are decoded by orjson, then made one Arrow table), on in
#: ``elf run`` (the user's own finished file, a one-shot process) and in the benchmark.
_ARROW_READER = False


def use_arrow_reader(enabled: bool) -> None:
    """Let this process parse JSON chunks with ``pyarrow.json`` (module docstring)."""
    global _ARROW_READER
    _ARROW_READER = bool(enabled)


def _everything_to_rows(n: int) -> KernelResult:
    return KernelResult(pa.table({}), np.empty(0, np.int64), np.arange(n, dtype=np.int64), 0)


def _read(data: bytes, schema: pa.Schema | None = None) -> pa.Table:
    read = pj.ReadOptions(use_threads=False, block_size=max(len(data), 1 << 16) + 1)
    parse = (
        pj.ParseOptions(explicit_schema=schema, unexpected_field_behavior="infer")
        if schema is not None
        else None
    )
    return pj.read_json(pa.BufferReader(data), read_options=read, parse_options=parse)


def _has_type(t: pa.DataType, pred) -> bool:
    if pred(t):
        return True
    if pa.types.is_struct(t):
        return any(_has_type(t.field(i).type, pred) for i in range(t.num_fields))
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return _has_type(t.value_type, pred)
    return False


def _is_list(t: pa.DataType) -> bool:
    return pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t)


def _valid_nested_nulls(table: pa.Table) -> bool:
    """Whether the columns with a null type below the top level (a list of nulls) are valid:
    Arrow 26's JSON reader can build a ``list<null>`` whose child is too short."""
    for col in table.columns:
        t = col.type
        if not pa.types.is_null(t) and _has_type(t, pa.types.is_null):
            try:
                for chunk in col.chunks:
                    chunk.validate(full=True)
            except pa.ArrowException:
                return False
    return True


def _wide_floats(arr: pa.Array) -> bool:
    """Whether a float inside ``arr`` (nested too) has a magnitude of 2**53 or more."""
    t = arr.type
    if pa.types.is_floating(t):
        big = pc.max(pc.abs(arr)).as_py()
        return big is not None and big >= _EXACT_INT
    if pa.types.is_struct(t):
        return any(_wide_floats(arr.field(i)) for i in range(t.num_fields))
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return _wide_floats(pc.list_flatten(arr))
    return False


def parse_json(lines: Lines, want: frozenset[str] | None) -> KernelResult:
    """The rows of the JSON lines of ``lines`` (see module docstring)."""
    n = len(lines)
    if lines.repaired is not None or not n:
        return _everything_to_rows(n)
    if want is not None and TS_FIELD in want:
        # a query's fields: the C scanner (json_native; msgspec where it is not built) decodes
        # only those, faster than both the row parser and Arrow's reader, everywhere
        out = parse_fields(lines, want)
        return _everything_to_rows(n) if out is None else out
    if not _ARROW_READER:
        return _everything_to_rows(n)
    blank = lines.blank
    # only lines that open an object reach the reader: a top-level ``null`` line crashes
    # Arrow 26's reader (segfault, found by the properties), other values are not records
    # anyway (the row parser rejects them with its reason)
    first = np.frombuffer(lines.chunk, np.uint8)[lines.starts] if n else np.empty(0, np.uint8)
    opens = first == ord("{")
    for i in np.flatnonzero(~opens & np.isin(first, _JSON_SPACE)).tolist():
        opens[i] = lines.raw(i).lstrip(b" \t\r").startswith(b"{")
    fed = np.flatnonzero(opens & ~blank)  # line index of each line given to the reader
    fallback = np.flatnonzero(~opens & ~blank)
    if not len(fed):
        return _everything_to_rows(n)
    data = lines.chunk if len(fed) == n else _join(lines, fed)
    try:
        table = _read(data)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        bad = np.array([not _is_object(lines.raw(i)) for i in fed.tolist()], bool)
        if not bad.any():
            return _everything_to_rows(n)  # duplicate keys, a field of two types, ...
        fallback = np.union1d(fallback, fed[bad])
        fed = fed[~bad]
        data = _join(lines, fed)
        try:
            table = _read(data) if len(fed) else pa.table({})
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            return _everything_to_rows(n)
    if table.num_rows != len(fed):
        return _everything_to_rows(n)
    stamped = [f.name for f in table.schema if pa.types.is_timestamp(f.type)]
    if stamped:
        try:
            table = _read(data, pa.schema([(name, pa.string()) for name in stamped]))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            return _everything_to_rows(n)
    if any(_has_type(f.type, pa.types.is_timestamp) for f in table.schema):
        return _everything_to_rows(n)
    if any(_has_type(f.type, _is_list) for f in table.schema) and _LIST_NULL.search(data):
        # apache/arrow#51305: a list whose elements start with null is built with offsets past
        # its values (reading it is undefined: wrong values, crashes): the table is dropped
        # untouched (only its schema was read) and the row parser reads the chunk
        return _everything_to_rows(n)
    if not _valid_nested_nulls(table):
        return _everything_to_rows(n)
    if any(_wide_floats(chunk) for col in table.columns for chunk in col.chunks):
        return _everything_to_rows(n)
    ts_col, ok = _timestamps(table)
    if ts_col is None:
        return _everything_to_rows(n)
    if not ok.all():
        fallback = np.union1d(fallback, fed[~ok])
        table = table.filter(pa.array(ok))
        ts_col = ts_col.filter(pa.array(ok))
        fed = fed[ok]
    table = table.set_column(table.schema.get_field_index(TS_FIELD), TS_FIELD, ts_col)
    if want is not None:
        cols = {name: table.column(name) for name in table.column_names if name in want}
        for name in sorted(want - set(cols)):
            cols[name] = pa.nulls(table.num_rows)
        table = pa.table(cols)
    return KernelResult(table, fed.astype(np.int64), fallback.astype(np.int64), 0)


def _join(lines: Lines, index: np.ndarray) -> bytes:
    return b"".join(lines.raw(i) + b"\n" for i in index.tolist())


def _is_object(line: bytes) -> bool:
    try:
        return isinstance(orjson.loads(line), dict)
    except orjson.JSONDecodeError:
        return False


def _exact_float_ts(col: pa.Array) -> None:
    """Refuse integer timestamps a float64 cannot hold exactly (beyond 2**53 seconds, some
    285 million years: garbage, but the row path keeps the int exact)."""
    big = pc.max(pc.abs(col)).as_py()
    if big is not None and big > 2**53:
        raise UnsupportedChunk(f"integer timestamp {big} is not exact as float64")


def _timestamps(table: pa.Table) -> tuple[pa.Array | None, np.ndarray]:
    """The ``ts`` column as float64 and which rows hold a valid one (None: no row does)."""
    if TS_FIELD not in table.column_names:
        return None, np.zeros(table.num_rows, bool)
    col = table.column(TS_FIELD).combine_chunks()
    t = col.type
    if pa.types.is_integer(t):
        _exact_float_ts(col)
        ts = col.cast(pa.float64())
    elif pa.types.is_floating(t):
        ts = col.cast(pa.float64())
    elif pa.types.is_string(t):
        enc = col.dictionary_encode()
        values: list[float | None] = []
        for text in enc.dictionary.to_pylist():
            try:
                values.append(parse_iso8601(text))
            except RecordError:
                values.append(None)
        ts = pa.array(values, pa.float64()).take(enc.indices)
    else:
        return None, np.zeros(table.num_rows, bool)
    ok = np.asarray(pc.is_valid(ts).to_numpy(zero_copy_only=False))
    return ts, ok
