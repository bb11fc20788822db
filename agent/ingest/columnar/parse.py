"""Parse a chunk of log lines of any input format into one Arrow table.

Contract (the interface shared with the columnar execution; docs/ingest.md):
:func:`parse_chunk` ``(fmt, chunk, fields=, repairs=)`` takes whole lines (each ending in
``b"\\n"``; a trailing ``\\r`` is ignored) of format ``fmt`` (a name of
:data:`agent.ingest.formats.FORMATS`, or a custom :class:`~agent.log_format.LogFormat`) and
returns a :class:`ParsedChunk`: one table row per accepted line in line order, the index of
each row's line, the rejected lines with the row parser's reason and message, the number of
lines, and the number of lines whose invalid UTF-8 was replaced (also added to ``repairs`` when
given, like the row parsers' counter).

The row parsers (:mod:`agent.ingest.formats`, :mod:`agent.ingest.records`) are the reference:
the table's columns are the keys their dicts have for the format (a key a row's dict lacks is
null), with the same values; ``fields`` keeps only those columns (``ts`` always; a field the
format does not have is a null column). Over-long lines are the input's to cut out
(:class:`~agent.ingest.tail.FileTail`), as it does before the row parser. A line the
row parser refuses is rejected with its reason and message; a blank line (empty or ASCII
whitespace) it refuses is counted in ``lines`` only, as the inputs skip it. Each format's
kernel (:mod:`~agent.ingest.columnar.access` — :mod:`~agent.ingest.columnar.access_status`
when a query reads only what follows the request —, :mod:`~agent.ingest.columnar.log_format`,
:mod:`~agent.ingest.columnar.syslog`,
:mod:`~agent.ingest.columnar.json_lines`, :mod:`~agent.ingest.columnar.raw`) parses the lines
whose shape it can verify with vectorized Arrow compute, and hands every other line to the row
parser (:func:`row_fallback`), whose rows are converted and merged back in line order: exact
by construction, and fast as long as such lines are rare.

JSON lines whose values cannot form one Arrow column per field (a field that is a number on
one line and a string on another, lists of mixed types), or whose integer timestamp float64
cannot hold exactly (beyond 2**53), raise :class:`UnsupportedChunk`: the caller parses that
chunk on the row path. Nothing else is raised on any input.

Arrow types: ``ts`` float64; integers int64; text string; custom formats' times and
seconds float64; access-log ``query`` ``map<string, string>``; syslog ``sd``
``map<string, map<string, string>>``; JSON lines: as inferred by Arrow (ints, floats,
strings, bools, structs, lists).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from agent.ingest.columnar.access_status import parse_access_projected
from agent.ingest.columnar.base import KernelResult, UnsupportedChunk, rows_to_table
from agent.ingest.columnar.chunk import ParsedChunk
from agent.ingest.columnar.json_lines import parse_json
from agent.ingest.columnar.lines import Lines, split_lines
from agent.ingest.columnar.log_format import parse_log_format
from agent.ingest.columnar.raw import parse_raw
from agent.ingest.columnar.syslog import parse_syslog
from agent.ingest.formats import FORMATS
from agent.ingest.parsers import Format, make_parser
from agent.ingest.records import EncodingRepairs, LineParser, rejection
from agent.log_format import LogFormat

__all__ = ["KernelResult", "ParsedChunk", "UnsupportedChunk", "parse_chunk"]

Reject = tuple[int, str, str, bytes]


def parse_chunk(
    fmt: Format,
    chunk: bytes,
    *,
    fields: frozenset[str] | None = None,
    repairs: EncodingRepairs | None = None,
    ends: np.ndarray | None = None,
) -> ParsedChunk:
    """Parse ``chunk`` as ``fmt`` lines into Arrow (see module docstring); ``ends``: the
    chunk's newline offsets when the caller already found them."""
    if not isinstance(fmt, LogFormat) and fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}; expected one of {FORMATS}")
    want = None if fields is None else frozenset(fields) | {"ts"}
    lines = split_lines(chunk, ends)
    kernel = _kernel(fmt)
    out = kernel(lines, want)
    parsed = merge_fallback(fmt, lines, out, want)
    parsed.table = _with_float_ts(parsed.table)
    if want is not None:  # a field the format does not have: a null column, as dict.get
        for name in sorted(want - set(parsed.table.column_names)):
            parsed.table = parsed.table.append_column(name, pa.nulls(parsed.table.num_rows))
    if repairs is not None:
        repairs.lines += parsed.repairs
    return parsed


Kernel = Callable[[Lines, frozenset[str] | None], KernelResult]
KERNELS: dict[str, Kernel] = {
    "nginx": parse_access_projected,
    "apache": parse_access_projected,
    "syslog": parse_syslog,
    "raw": parse_raw,
    "json": parse_json,
}


def _with_float_ts(table: pa.Table) -> pa.Table:
    """``table`` with a float64 ``ts`` (row-parser JSON records may hold int timestamps; a
    chunk without rows may have no columns at all)."""
    names = table.column_names
    if "ts" not in names:
        return table.add_column(0, "ts", pa.nulls(table.num_rows, pa.float64()))
    i = names.index("ts")
    col = table.column(i)
    if col.type != pa.float64():
        if pa.types.is_integer(col.type):
            big = pc.max(pc.abs(col)).as_py()
            if big is not None and big > 2**53:
                raise UnsupportedChunk(f"integer timestamp {big} is not exact as float64")
        return table.set_column(i, "ts", col.cast(pa.float64()))
    return table


def _kernel(fmt: Format) -> Kernel:
    if isinstance(fmt, LogFormat):  # a custom access-log format: its compiled kernel
        return functools.partial(parse_log_format, fmt)
    return KERNELS[fmt]


def row_parser(fmt: Format, repairs: EncodingRepairs) -> LineParser:
    """The reference row parser of ``fmt`` counting into ``repairs``."""
    return make_parser(fmt, repairs=repairs)


def merge_fallback(
    fmt: Format, lines: Lines, out: KernelResult, want: frozenset[str] | None
) -> ParsedChunk:
    """The kernel's rows plus the row parser's for the lines it left, in line order."""
    n = len(lines)
    if not len(out.fallback):
        return ParsedChunk(out.table, pa.array(out.line_index, pa.int32()), [], n, out.repaired)
    counter = EncodingRepairs()
    parser = row_parser(fmt, counter)
    rows: list[dict[str, Any]] = []
    row_index: list[int] = []
    rejects: list[Reject] = []
    blank = lines.blank
    for i in out.fallback.tolist():
        raw = lines.raw(i)
        try:
            record = parser.parse(raw)
        except Exception as exc:  # the row path's rule: a parser bug costs one line
            if blank[i]:
                continue
            reason, message = rejection(exc)
            rejects.append((i, reason, message, raw))
            continue
        rows.append(record if want is None else {k: record.get(k) for k in want})
        row_index.append(i)
    table = out.table
    index = out.line_index
    if rows:
        extra = rows_to_table(rows, table.schema)
        table = pa.concat_tables([table, extra]) if table.num_rows else extra
        index = np.concatenate([index, np.asarray(row_index, np.int64)])
        if len(out.line_index):
            order = np.argsort(index, kind="stable")
            table = table.take(pa.array(order))
            index = index[order]
    return ParsedChunk(table, pa.array(index, pa.int32()), rejects, n, out.repaired + counter.lines)
