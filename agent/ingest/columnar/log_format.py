"""The custom access-log format kernel (nginx ``log_format``, Apache ``LogFormat``) in Arrow.

Contract: for every line it parses itself, the row equals
:class:`~agent.ingest.log_format.LogFormatParser`'s; every other line is left to that parser
(``KernelResult.fallback``: lines the format's regex does not match, times that name no real
time, integers of more than 18 digits). The compiled format's pattern is written in the
common subset of ``re`` and RE2, so Arrow's ``extract_regex`` (RE2) splits a line exactly as
the row parser's ``re`` does; the values are then converted column by column: integers and
floats by Arrow casts (decimal strings: correctly rounded, as Python's ``float``), ``-`` to
null, time strings, escaped text and nginx's upstream lists once per distinct value by the
row parser's own converters, the request line by the combined kernel's splitter. Column
types: ``ts`` and times float64, integers int64, text string, ``query``
``map<string, string>``.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from agent.ingest.columnar.access import QUERY_TYPE, dash_as_null, per_distinct, request_fields
from agent.ingest.columnar.base import KernelResult, UnsupportedChunk, project, select
from agent.ingest.columnar.lines import Lines
from agent.ingest.formats import decode_escapes
from agent.ingest.log_format import TEXT_KINDS, TS_KINDS, CompiledFormat, compile_format, convert
from agent.ingest.records import RecordError
from agent.log_format import LogFormat

_TYPES = {"str": pa.string(), "int": pa.int64(), "float": pa.float64(), "query": QUERY_TYPE}
_DECODED = pa.struct([("t", pa.string()), ("b", pa.bool_())])
_MAX_DIGITS = 18  # int64 holds every 18-digit number
#: kinds whose text has escapes decoded (and their invalid UTF-8 counted as a repair)
_ESCAPED = TEXT_KINDS | {"request"}


def _captured(compiled: CompiledFormat, names: frozenset[str], escapes: bool) -> frozenset[int]:
    """The slots whose text the kernel needs: those filling the wanted fields, every time (the
    row parser refuses a line with any impossible time) and, in a chunk with escapes, every
    text slot (their invalid UTF-8 is a repair whatever the query reads). RE2 extracts only
    these groups: a projected query does not pay for the others."""
    keep = {s.slot for f, s in compiled.sources.items() if f in names}
    for slot, var in enumerate(compiled.slots):
        if var.kind in TS_KINDS or (escapes and var.kind in _ESCAPED):
            keep.add(slot)
    return frozenset(keep)


def _np(arr: pa.Array) -> np.ndarray:
    return np.asarray(arr.to_numpy(zero_copy_only=False))


def schema_of(compiled: CompiledFormat) -> pa.Schema:
    """The Arrow schema of the format's records (every field, in record order)."""
    return pa.schema([(f, _TYPES[compiled.kind_of(f)]) for f in compiled.fields])


def _decode_struct(value: str) -> dict[str, Any]:
    text, bad = decode_escapes(value)
    return {"t": text, "b": bad}


def _converted(kind: str, value: str) -> Any:
    """``convert`` with a time that names no real time as None (its line falls back)."""
    try:
        return convert(kind, value)
    except RecordError:
        return None


class _Columns:
    """The matched lines' group texts and the per-slot conversions of one chunk."""

    def __init__(self, compiled: CompiledFormat, groups: pa.StructArray, escapes: bool) -> None:
        self.compiled = compiled
        self.n = len(groups)
        # the captured slots' texts (the kernel captures only the slots it reads)
        self.raw = {
            int(groups.type.field(k).name[1:]): groups.field(k)
            for k in range(groups.type.num_fields)
        }
        self.fallback = np.zeros(self.n, bool)  # rows the row parser must take
        self.repaired = np.zeros(self.n, bool)
        if escapes:
            for i, values in self.raw.items():
                if compiled.slots[i].kind in _ESCAPED:
                    self.raw[i] = self._decoded(values)
        self._values: dict[int, pa.Array] = {}

    def _decoded(self, values: pa.Array) -> pa.Array:
        """Escapes decoded once per distinct value; invalid UTF-8 in them is a repair."""
        has = _np(pc.match_substring(values, "\\"))
        if not has.any():
            return values
        out, _ = per_distinct(values, has, _decode_struct, _DECODED)
        self.repaired[np.flatnonzero(has)] |= _np(out.field("b"))
        return pc.replace_with_mask(values, pa.array(has), out.field("t"))

    def _per_value(self, slot: int, out_type: pa.DataType) -> pa.Array:
        """The row converter of slot ``slot`` applied once per distinct text; a null result
        of a time (no such time) sends the row to the row parser."""
        kind = self.compiled.slots[slot].kind
        values = self.raw[slot]
        enc = values.dictionary_encode()
        results = [_converted(kind, v) for v in enc.dictionary.to_pylist()]
        try:
            out = pa.array(results, out_type).take(enc.indices)
        except (pa.ArrowInvalid, OverflowError) as exc:  # a sum beyond int64
            raise UnsupportedChunk(f"values do not fit the chunk's Arrow columns: {exc}") from None
        if kind.startswith("ts_") and out.null_count:
            self.fallback |= _np(pc.is_null(out))
        return out

    def _list_sums(self, slot: int, out_type: pa.DataType) -> pa.Array:
        """nginx upstream lists: a single number (most lines: one upstream, no retry) cast
        as a column, ``-`` null; only real lists (and numbers of more than 18 digits) are
        summed by the row converter, once per distinct text."""
        values = self.raw[slot]
        many = pc.or_(
            pc.or_(pc.match_substring(values, ", "), pc.match_substring(values, " : ")),
            pc.greater(pc.utf8_length(values), _MAX_DIGITS),
        )
        null = pa.scalar(None, pa.string())
        out = pc.cast(pc.if_else(pc.or_(many, pc.equal(values, "-")), null, values), out_type)
        mask = _np(many)
        if not mask.any():
            return out
        kind = self.compiled.slots[slot].kind
        try:
            sums, _ = per_distinct(values, mask, lambda v: convert(kind, v), out_type)
        except (pa.ArrowInvalid, OverflowError) as exc:  # a sum beyond int64
            raise UnsupportedChunk(f"values do not fit the chunk's Arrow columns: {exc}") from None
        return pc.replace_with_mask(out, many, sums)

    def _integers(self, slot: int, dash_zero: bool) -> pa.Array:
        """``[0-9]+`` or ``-`` as int64; a number int64 may not hold (over 18 digits) is
        cast as 0 here and its row sent to the row parser."""
        values = self.raw[slot]
        too_long = pc.greater(pc.utf8_length(values), _MAX_DIGITS)
        self.fallback |= _np(too_long)
        values = pc.if_else(too_long, "0", values)
        dash = pc.equal(values, "-")
        blank = pa.scalar("0") if dash_zero else pa.scalar(None, pa.string())
        return pc.cast(pc.if_else(dash, blank, values), pa.int64())

    def value(self, slot: int) -> pa.Array:
        """Slot ``slot``'s primary values (as :func:`~agent.ingest.log_format.convert`)."""
        got = self._values.get(slot)
        if got is not None:
            return got
        kind = self.compiled.slots[slot].kind
        values = self.raw[slot]
        if kind in ("str", "text"):
            out = dash_as_null(_empty_as_null(values))
        elif kind == "str_list":
            out = dash_as_null(values)
        elif kind == "request":
            out = values
        elif kind in ("int", "status", "usec", "msec"):
            out = self._integers(slot, dash_zero=False)
        elif kind == "bytes":
            out = self._integers(slot, dash_zero=True)
        elif kind == "float":
            null = pa.scalar(None, pa.string())
            out = pc.cast(pc.if_else(pc.equal(values, "-"), null, values), pa.float64())
        elif kind == "ts_epoch":
            out = pc.cast(values, pa.float64())
        elif kind in ("time_list", "int_list"):
            out = self._list_sums(slot, pa.float64() if kind == "time_list" else pa.int64())
        else:  # the other times
            out = self._per_value(slot, pa.float64())
        self._values[slot] = out
        return out


def _empty_as_null(values: pa.Array) -> pa.Array:
    """Apache's empty ``%q`` as ``-``: both are None."""
    return pc.if_else(pc.equal(values, ""), "-", values)


def _priority(status: pa.Array) -> pa.Array:
    """combined's severity of a status: 3 for 5xx, 4 for 4xx, else (and for null) 6."""
    return pc.if_else(
        pc.fill_null(pc.greater_equal(status, 500), False),
        3,
        pc.if_else(pc.fill_null(pc.greater_equal(status, 400), False), 4, 6),
    )


def parse_log_format(fmt: LogFormat, lines: Lines, want: frozenset[str] | None) -> KernelResult:
    """The rows of the ``fmt`` lines of ``lines`` (see module docstring)."""
    compiled = compile_format(fmt)
    n = len(lines)
    schema = project(schema_of(compiled), want)
    escapes = b"\\" in lines.chunk
    keep = _captured(compiled, frozenset(schema.names), escapes)
    matched = pc.extract_regex(lines.text, compiled.pattern_for(keep))
    ok = _np(pc.is_valid(matched))
    rows = np.flatnonzero(ok)
    groups = matched.filter(pa.array(ok)) if len(rows) < n else matched
    if isinstance(groups, pa.ChunkedArray):
        groups = groups.combine_chunks()
    m = len(rows)
    if not m:
        return KernelResult(schema.empty_table(), rows, np.arange(n, dtype=np.int64), 0)
    cols = _Columns(compiled, groups, escapes)
    for slot, var in enumerate(compiled.slots):
        if var.kind in TS_KINDS:  # any time the row parser would refuse: that row falls back
            cols.value(slot)
    names = set(schema.names)
    out: dict[str, pa.Array] = {}
    parts: dict[str, pa.Array] | None = None
    for field, src in compiled.sources.items():
        if field not in names:
            continue
        role = src.role
        if role == "value":
            out[field] = cols.value(src.slot)
        elif role == "raw":
            out[field] = dash_as_null(cols.raw[src.slot])
        elif role == "request":
            out[field] = cols.raw[src.slot]
        elif role == "priority":
            out[field] = _priority(cols.value(src.slot))
        elif role == "seconds":
            scale = 1e6 if compiled.slots[src.slot].kind == "usec" else 1e3
            out[field] = pc.divide(pc.cast(cols.value(src.slot), pa.float64()), scale)
        else:  # a part of the request line, all split at once
            if parts is None:
                parts = request_fields(cols.raw[src.slot], names, lines.chunk)
            out[field] = parts[role]
    if "ts" not in compiled.sources:
        out["ts"] = pa.array(np.full(m, time.time()))
    text = lines.text if m == n else lines.text.filter(pa.array(ok))
    out.setdefault("body", text)
    out.setdefault("source_ip", pa.nulls(m, pa.string()))
    out.setdefault("priority", pa.nulls(m, pa.int64()))
    accepted = ~cols.fallback
    repaired = cols.repaired
    if lines.repaired is not None:
        repaired = repaired | lines.repaired[rows]
    if not accepted.all():
        sel = pa.array(accepted)
        out = {k: v.filter(sel) for k, v in out.items() if k in names}
        rows, repaired = rows[accepted], repaired[accepted]
    fallback = np.setdiff1d(np.arange(n, dtype=np.int64), rows, assume_unique=True)
    return KernelResult(select(out, schema), rows.astype(np.int64), fallback, int(repaired.sum()))
