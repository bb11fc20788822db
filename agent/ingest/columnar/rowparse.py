"""The reference chunk parser: the row parser per line, then one Arrow table.

Contract: :func:`parse_chunk_rows` has the signature of the vectorized kernels'
``parse_chunk`` (:class:`~agent.ingest.columnar.chunk.ParsedChunk`): ``chunk`` holds whole
lines, each ending in ``b"\\n"``; every line goes through the format's row parser
(:func:`agent.ingest.parsers.make_parser`), so values, rejection reasons and messages are the
row path's by construction. ``fields`` (None: all) projects the columns (``ts`` always kept).
``ts`` is float64 when its values mix ints and floats. Any other projected column whose
values are not all of one kind (``int`` and ``float`` mixed, a nested object or array)
cannot say exactly what each row held: the chunk raises
:class:`~agent.ql.fallback.Unsupported` and the caller takes the row path for it. It is
the stand-in until the vectorized kernels land and stays the reference they are tested
against.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from agent.ingest.columnar.chunk import ParsedChunk
from agent.ingest.parsers import Format, make_parser
from agent.ingest.records import EncodingRepairs, rejection
from agent.ql.fallback import Unsupported

_SCALARS = {str: pa.string(), int: pa.int64(), float: pa.float64(), bool: pa.bool_()}


def parse_chunk_rows(
    fmt: Format,
    chunk: bytes,
    fields: frozenset[str] | None = None,
    repairs: EncodingRepairs | None = None,
) -> ParsedChunk:
    """``chunk``'s lines parsed by the row parser into one table (see module docstring)."""
    # repairs counted on a private counter, handed over only if the chunk is accepted (a
    # chunk raising Unsupported is parsed again by the row path, which counts them then)
    mine = EncodingRepairs()
    parser = make_parser(fmt, repairs=mine)
    lines = chunk.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    records: list[dict[str, Any]] = []
    index: list[int] = []
    rejects: list[tuple[int, str, str, bytes]] = []
    parse = parser.parse
    for i, line in enumerate(lines):
        try:
            records.append(parse(line))
            index.append(i)
        except Exception as exc:  # a parser bug costs one line, as on the row path
            if not line.strip():
                continue  # blank: skipped silently
            reason, message = rejection(exc)
            rejects.append((i, reason, message, line))
    table = records_table(records, fields)
    if repairs is not None:
        repairs.lines += mine.lines
    return ParsedChunk(table, pa.array(index, pa.int32()), rejects, len(lines), mine.lines)


def records_table(records: list[dict[str, Any]], fields: frozenset[str] | None) -> pa.Table:
    """Records as a table of scalar columns, one kind per column; :class:`Unsupported` when a
    column's values mix kinds or nest (see module docstring)."""
    names: dict[str, None] = {}
    for rec in records:
        for k in rec:
            if fields is None or k in fields or k == "ts":
                names[k] = None
    columns = {}
    for name in names:
        values = [rec.get(name) for rec in records]
        kinds = {type(v) for v in values if v is not None}
        if name == "ts" and kinds == {int, float}:
            kinds = {float}  # event time is float64 seconds (the interface), exact to 2**53
            values = [None if v is None else float(v) for v in values]
        if len(kinds) > 1 or (kinds and next(iter(kinds)) not in _SCALARS):
            raise Unsupported(f"column {name!r} holds {sorted(k.__name__ for k in kinds)}")
        t = _SCALARS[next(iter(kinds))] if kinds else pa.null()
        try:
            columns[name] = pa.array(values, t)
        except (pa.ArrowException, OverflowError, UnicodeEncodeError) as exc:
            raise Unsupported(f"column {name!r}: {exc}") from None
    if not columns:  # no record, or none with a projected field
        return pa.table({"ts": pa.nulls(len(records), pa.float64())})
    return pa.table(columns)
