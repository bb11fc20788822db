"""The access-log kernel (nginx / Apache, combined and common) in vectorized Arrow compute.

Contract: for every line it parses itself, the row equals
:class:`~agent.ingest.formats.AccessLogParser`'s; every other line is left to that parser
(``KernelResult.fallback``). A line is parsed here only when its shape is verified to be one
the row parser's regex reads the same way:

* split on ``"``: combined lines have at least 7 pieces (head, request, `` STATUS SIZE ``,
  referer, `` ``, user agent, rest), common lines exactly 3 (head, request,
  `` STATUS SIZE[ EXTRA]``);
* the head is ``IP IDENT USER [TIME] `` with printable-ASCII tokens (RE2 and Python's ``\\S``
  agree there), the status/size part ``[0-9]{3}|-`` and ``[0-9]{1,18}|-`` (ASCII digits,
  int64), the rest of a combined line empty or starting with a space (the ``extra`` field);
* no quoted piece ends with a backslash (an Apache ``\\"`` inside a field: row parser).

Values: time strings are parsed once per distinct value by the row parser's own cached
``_ts`` (a bad one sends its lines to the row parser for the exact message); escapes in
quoted fields are decoded once per distinct value by
:func:`~agent.ingest.formats.decode_escapes`; the request is split with ``split_pattern``;
absolute-form targets, ``%``-encoded paths and query strings with ``%``, ``+`` or ``;`` are
decoded per distinct value by the row parser's helpers; other query strings are split into a
``map<string, string>`` with list kernels (a row naming a parameter twice takes the
row parser's helper, whose last value wins).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from agent.ingest.columnar.base import KernelResult, duplicate_rows, project, select
from agent.ingest.columnar.lines import Lines
from agent.ingest.formats import (
    AccessLogParser,
    decode_escapes,
    parse_query,
    split_target,
)
from agent.ingest.records import RecordError

QUERY_TYPE = pa.map_(pa.string(), pa.string())
SCHEMA = pa.schema(
    [
        ("ts", pa.float64()),
        ("source_ip", pa.string()),
        ("body", pa.string()),
        ("ident", pa.string()),
        ("remote_user", pa.string()),
        ("request", pa.string()),
        ("method", pa.string()),
        ("scheme", pa.string()),
        ("host", pa.string()),
        ("path", pa.string()),
        ("query", QUERY_TYPE),
        ("protocol", pa.string()),
        ("priority", pa.int64()),
        ("status", pa.int64()),
        ("bytes", pa.int64()),
        ("referer", pa.string()),
        ("user_agent", pa.string()),
        ("extra", pa.string()),
    ]
)
_REQUEST = frozenset(("method", "scheme", "host", "path", "query", "protocol"))

_HEAD_RE = r"^[!-~]+ [!-~]+ [!-~]+ \[[^\]]*\] $"
_MID_RE = r"^ ([0-9]{3}|-) ([0-9]{1,18}|-) $"
_COMMON_REST_RE = r"^ ([0-9]{3}|-) ([0-9]{1,18}|-)( .*)?$"

# the row parser's cached time-string conversion (one per process: a bounded cache)
_TS_PARSER = AccessLogParser()


def _np(arr: pa.Array | pa.ChunkedArray) -> np.ndarray:
    return np.asarray(arr.to_numpy(zero_copy_only=False))


def _piece(parts: pa.ListArray, k: int, rows: np.ndarray | None = None) -> pa.Array:
    """Piece ``k`` of each list (of the lists ``rows``, else all); every list has > k."""
    starts = _np(parts.offsets)[:-1]
    if rows is not None:
        starts = starts[rows]
    return parts.values.take(pa.array(starts + k))


class QuotePieces:
    """Each line of a chunk split on ``"`` (what ``pc.split_pattern(lines.text, '"')`` gives):
    ``count[i]`` is line ``i``'s number of pieces, ``piece(k, rows)`` piece ``k`` of those
    lines (all when None; every one has more than ``k``), ``lists`` the split as a list array
    when it was made by ``split_pattern`` (None otherwise).

    Made by :func:`split_on_quotes`, without copying the text when it can: numpy finds the
    quotes and newlines, and every piece, quote and newline of the chunk becomes one value of
    a single string array over the chunk's own buffer (its offsets are the cut points, so the
    values tile the buffer; piece ``k`` of a line is its ``2k``-th value). That needs a chunk
    the row path reads byte for byte as its text: valid UTF-8 (``Lines`` without repairs) and
    no ``\r`` (a trailing one is not part of the row parser's line); other chunks take
    ``split_pattern`` (piece ``k`` is the ``k``-th value of the line's list)."""

    __slots__ = ("base", "count", "lists", "segments", "stride")

    def __init__(
        self,
        segments: pa.StringArray,
        base: np.ndarray,
        count: np.ndarray,
        stride: int,
        lists: pa.ListArray | None = None,
    ) -> None:
        self.segments = segments
        self.base = base  # index of each line's first piece in ``segments``
        self.count = count
        self.stride = stride
        self.lists = lists

    def piece(self, k: int, rows: np.ndarray | None = None) -> pa.Array:
        """Piece ``k`` of each line (of the lines ``rows``, else all)."""
        base = self.base if rows is None else self.base[rows]
        return self.segments.take(pa.array(base + self.stride * k))


def split_on_quotes(lines: Lines) -> QuotePieces:
    """The chunk's lines split on ``"`` (see :class:`QuotePieces`)."""
    chunk = lines.chunk
    if lines.repaired is not None or chunk.find(b"\r") >= 0 or len(chunk) >= 2**31:
        parts = pc.split_pattern(lines.text, '"')
        count = _np(pc.list_value_length(parts))
        return QuotePieces(parts.values, _np(parts.offsets)[:-1], count, 1, parts)
    n = len(lines)
    buf = np.frombuffer(chunk, np.uint8)
    quotes = np.flatnonzero(buf == 34)
    # a line's cut points: its start, each quote and the byte after it, its newline; the
    # next line starts after that newline, so the values tile the buffer exactly
    line_of = np.searchsorted(lines.ends, quotes)
    per_line = np.bincount(line_of, minlength=n)
    width = 2 * per_line + 2
    base = np.zeros(n, np.int64)
    np.cumsum(width[:-1], out=base[1:])
    cuts = np.empty(int(width.sum()) + 1, np.int64)
    cuts[base] = lines.starts
    cuts[base + width - 1] = lines.ends
    first_quote = np.zeros(n, np.int64)
    np.cumsum(per_line[:-1], out=first_quote[1:])
    at = base[line_of] + 1 + 2 * (np.arange(len(quotes)) - first_quote[line_of])
    cuts[at] = quotes
    cuts[at + 1] = quotes + 1
    cuts[-1] = len(chunk)
    segments = pa.StringArray.from_buffers(
        len(cuts) - 1, pa.py_buffer(cuts.astype(np.int32)), pa.py_buffer(chunk)
    )
    return QuotePieces(segments, base, per_line + 1, 2)


def per_distinct(
    values: pa.Array, mask: np.ndarray, fn: Callable[[str], Any], out_type: pa.DataType
) -> tuple[pa.Array, list[Any]]:
    """``fn`` applied once per distinct value among ``values[mask]``: (the results for the
    masked rows, in order, as ``out_type``, and the distinct results)."""
    sub = values.filter(pa.array(mask))
    enc = sub.dictionary_encode()
    results = [fn(v) for v in enc.dictionary.to_pylist()]
    return pa.array(results, out_type).take(enc.indices), results


def _keep(arrays: dict[str, pa.Array], mask: np.ndarray) -> dict[str, pa.Array]:
    """Each array filtered by ``mask`` (no copy when it keeps everything)."""
    if mask.all():
        return arrays
    sel = pa.array(mask)
    return {k: v.filter(sel) for k, v in arrays.items()}


def parse_access(lines: Lines, want: frozenset[str] | None) -> KernelResult:
    """The rows of the access-log lines of ``lines`` (see module docstring)."""
    n = len(lines)
    pieces = split_on_quotes(lines)
    count = pieces.count
    combined = count >= 7
    # the format of the chunk's first candidate line decides which shape is read here: a
    # chunk mixes them only in odd files, whose other lines take the row parser
    n_combined = int(combined.sum())
    is_combined = n_combined * 2 >= n
    shape = combined if is_combined else count == 3
    rows = np.flatnonzero(shape)
    sub = None if len(rows) == n else rows

    def piece(k: int) -> pa.Array:
        return pieces.piece(k, sub)

    p: dict[str, pa.Array] = {
        "head": piece(0),
        "request": piece(1),
        "mid": piece(2),
    }
    good = _np(pc.match_substring_regex(p["head"], _HEAD_RE))
    good &= ~_np(pc.ends_with(p["request"], "\\"))
    good &= _np(pc.match_substring_regex(p["mid"], _MID_RE if is_combined else _COMMON_REST_RE))
    if is_combined:
        p["referer"] = piece(3)
        p["agent"] = piece(5)
        if (count[rows] == 7).all():
            p["rest"] = piece(6)
        else:  # an extra field with quotes in it: the rest of the line, quotes included
            lists = pieces.lists
            if lists is None:
                lists = pc.split_pattern(lines.text, '"')
            p["rest"] = pc.binary_join(
                pc.list_slice(lists if sub is None else lists.take(pa.array(rows)), 6), '"'
            )
        good &= _np(pc.equal(piece(4), " "))
        good &= ~_np(pc.ends_with(p["referer"], "\\"))
        good &= ~_np(pc.ends_with(p["agent"], "\\"))
        good &= _np(pc.or_(pc.equal(p["rest"], ""), pc.starts_with(p["rest"], " ")))
    p = _keep(p, good)
    rows = rows[good]
    # timestamps: the row parser's conversion, once per distinct string
    head_parts = pc.split_pattern(p["head"], " [", max_splits=1)
    p["ids"] = _piece(head_parts, 0)  # "IP IDENT USER", split only when a query reads them
    ts_text = pc.utf8_slice_codeunits(_piece(head_parts, 1), 0, -2)
    enc = ts_text.dictionary_encode()
    ts_values: list[float | None] = []
    for value in enc.dictionary.to_pylist():
        try:
            ts_values.append(_TS_PARSER.timestamp(value))
        except RecordError:
            ts_values.append(None)  # the row parser rejects these lines with its message
    p["ts"] = pa.array(ts_values, pa.float64()).take(enc.indices)
    if p["ts"].null_count:
        ts_ok = _np(pc.is_valid(p["ts"]))
        p = _keep(p, ts_ok)
        rows = rows[ts_ok]
    fallback = np.setdiff1d(np.arange(n, dtype=np.int64), rows, assume_unique=True)
    return _columns(lines, rows, is_combined, p, want, fallback)


_DECODED = pa.struct([("t", pa.string()), ("b", pa.bool_())])


def _decode_struct(value: str) -> dict[str, Any]:
    text, bad = decode_escapes(value)
    return {"t": text, "b": bad}


def _null_where(values: pa.Array, null: pa.Array) -> pa.Array:
    """``values`` with nulls where ``null`` (a boolean array without nulls) is true; the
    strings are not copied (a new validity bitmap over the same buffers)."""
    if not pc.any(null).as_py():
        return values
    valid = pc.invert(null)
    if values.null_count:
        valid = pc.and_(valid, pc.is_valid(values))
    if values.offset or valid.offset or values.type != pa.string():
        return pc.if_else(null, pa.scalar(None, values.type), values)
    _, offsets, data = values.buffers()
    return pa.Array.from_buffers(pa.string(), len(values), [valid.buffers()[1], offsets, data])


def dash_as_null(values: pa.Array) -> pa.Array:
    """``-`` as null."""
    return _null_where(values, pc.fill_null(pc.equal(values, "-"), False))


def _columns(
    lines: Lines,
    rows: np.ndarray,
    is_combined: bool,
    p: dict[str, pa.Array],
    want: frozenset[str] | None,
    fallback: np.ndarray,
) -> KernelResult:
    m = len(rows)
    schema = project(SCHEMA, want)
    names = set(schema.names)
    cols: dict[str, pa.Array] = {"ts": p["ts"]}
    repaired = np.zeros(m, bool) if lines.repaired is None else lines.repaired[rows].copy()
    escapes = b"\\" in lines.chunk

    # quoted fields: escapes decoded once per distinct value; their bad UTF-8 is a repair
    def decoded(values: pa.Array) -> pa.Array:
        if not escapes:
            return values
        has = _np(pc.match_substring(values, "\\"))
        if not has.any():
            return values
        out, _ = per_distinct(values, has, _decode_struct, _DECODED)
        repaired[np.flatnonzero(has)] |= _np(out.field("b"))
        return pc.replace_with_mask(values, pa.array(has), out.field("t"))

    request = decoded(p["request"])
    # every quoted field is decoded when the chunk has escapes (their bad UTF-8 counts as a
    # repair whether or not the query reads them); other columns only when read
    if is_combined and (escapes or names & {"referer", "user_agent"}):
        cols["referer"] = dash_as_null(decoded(p["referer"]))
        cols["user_agent"] = dash_as_null(decoded(p["agent"]))
    elif not is_combined:
        cols["referer"] = cols["user_agent"] = pa.nulls(m, pa.string())
    if names & {"status", "priority", "bytes", "extra"}:
        if is_combined:
            status_size = pc.split_pattern(p["mid"], " ")
            status_text, size_text = _piece(status_size, 1), _piece(status_size, 2)
            extra = pc.utf8_slice_codeunits(p["rest"], 1)
        else:
            tail = pc.split_pattern(p["mid"], " ", max_splits=3)
            tail_len = _np(pc.list_value_length(tail))
            status_text, size_text = _piece(tail, 1), _piece(tail, 2)
            starts = _np(tail.offsets)[:-1]
            idx = np.where(tail_len == 4, starts + 3, 0)
            extra = tail.values.take(pa.array(idx, mask=tail_len != 4))
        status = pc.cast(dash_as_null(status_text), pa.int64())
        cols["status"] = status
        if "priority" in names:
            cols["priority"] = pc.if_else(
                pc.is_null(status),
                6,
                pc.if_else(
                    pc.greater_equal(status, 500),
                    3,
                    pc.if_else(pc.greater_equal(status, 400), 4, 6),
                ),
            )
        if "bytes" in names:
            cols["bytes"] = pc.cast(
                pc.if_else(pc.equal(size_text, "-"), "0", size_text), pa.int64()
            )
        if "extra" in names:
            cols["extra"] = _null_where(extra, pc.fill_null(pc.equal(extra, ""), False))
    cols["body"] = cols["request"] = request
    if names & {"source_ip", "ident", "remote_user"}:
        ids = pc.split_pattern(p["ids"], " ")
        cols["source_ip"] = _piece(ids, 0)
        cols["ident"] = dash_as_null(_piece(ids, 1))
        cols["remote_user"] = dash_as_null(_piece(ids, 2))
    if names & _REQUEST:
        cols.update(request_fields(request, names, lines.chunk))
    return KernelResult(select(cols, schema), rows.astype(np.int64), fallback, int(repaired.sum()))


def request_fields(request: pa.Array, names: set[str], chunk: bytes) -> dict[str, pa.Array]:
    """method, scheme, host, path, query and protocol of the decoded request lines."""
    m = len(request)
    parts = pc.split_pattern(request, " ")
    count = _np(pc.list_value_length(parts))
    starts = _np(parts.offsets)[:-1]
    second = np.where(count >= 2, starts + 1, 0)
    target = parts.values.take(pa.array(second, mask=count < 2))
    ok = (count == 3) | ((count == 2) & _np(pc.fill_null(pc.starts_with(target, "/"), False)))
    none = ~ok
    method = parts.values.take(pa.array(starts, mask=none))
    target = _null_where(target, pa.array(~ok))
    proto_at = np.where(count == 3, starts + 2, 0)
    protocol = parts.values.take(pa.array(proto_at, mask=none | (count != 3)))
    out: dict[str, pa.Array] = {"method": method, "protocol": protocol}
    scheme = host = pa.nulls(m, pa.string())
    # absolute form: a target that does not start with "/" and holds "://"
    absolute = ~_np(pc.fill_null(pc.starts_with(target, "/"), True))
    if absolute.any():
        absolute &= _np(pc.fill_null(pc.match_substring(target, "://"), False))
    if absolute.any():
        split, _ = per_distinct(
            target,
            absolute,
            lambda t: dict(zip(("s", "h", "r"), split_target(t), strict=True)),
            pa.struct([("s", pa.string()), ("h", pa.string()), ("r", pa.string())]),
        )
        mask = pa.array(absolute)
        scheme = pc.replace_with_mask(scheme, mask, split.field("s"))
        host = pc.replace_with_mask(host, mask, split.field("h"))
        target = pc.replace_with_mask(target, mask, split.field("r"))
    out["scheme"], out["host"] = scheme, host
    pq = pc.split_pattern(target, "?", max_splits=1)
    pq_len = _np(pc.fill_null(pc.list_value_length(pq), 0))
    pq_starts = _np(pq.offsets)[:-1]
    path = (
        pq.values.take(pa.array(pq_starts, mask=pq_len == 0))
        if len(pq.values)
        else (pa.nulls(m, pa.string()))
    )
    if "path" in names:
        pct = _np(pc.fill_null(pc.match_substring(path, "%"), False)) if b"%" in chunk else None
        if pct is not None and pct.any():
            from urllib.parse import unquote

            dec, _ = per_distinct(path, pct, unquote, pa.string())
            path = pc.replace_with_mask(path, pa.array(pct), dec)
        out["path"] = path
    if "query" in names:
        qs_at = np.where(pq_len == 2, pq_starts + 1, 0)
        qs = (
            pq.values.take(pa.array(qs_at, mask=pq_len != 2))
            if len(pq.values)
            else (pa.nulls(m, pa.string()))
        )
        out["query"] = _query_map(qs)
    return out


# a query string every pair of which is NAME=VALUE with nothing to decode: split here
_SIMPLE_QS = r"^[^&=%+;]*=[^&=%+;]*(?:&[^&=%+;]*=[^&=%+;]*)*$"


def _query_map(qs: pa.Array) -> pa.Array:
    """``parse_query`` of each query string (null: ``{}``) as a ``map<string, string>``:
    simple strings (:data:`_SIMPLE_QS`) split with list kernels, the others (``%``, ``+``,
    ``;``, blank pairs, names without ``=``) by ``parse_query`` once per distinct string."""
    m = len(qs)
    has = _np(pc.is_valid(qs))
    simple = has & _np(pc.fill_null(pc.match_substring_regex(qs, _SIMPLE_QS), False))
    special = has & ~simple
    srows = np.flatnonzero(simple)
    sub = qs if len(srows) == m else qs.take(pa.array(srows))
    # NAME=VALUE&NAME=VALUE -> NAME=VALUE=NAME=VALUE: names and values alternate
    pieces = pc.split_pattern(pc.replace_substring(sub, "&", "="), "=")
    pair_row = np.repeat(srows, np.diff(_np(pieces.offsets)) // 2)
    flat = pieces.values
    first = int(_np(pieces.offsets)[0])
    idx = np.arange(first, first + 2 * len(pair_row), 2)
    keys = flat.take(pa.array(idx))
    vals = flat.take(pa.array(idx + 1))
    # a parameter named twice in a row: the helper (last value wins, first position kept)
    if len(pair_row):
        dup_rows = duplicate_rows(pair_row, keys)
        if len(dup_rows):
            special[dup_rows] = True
            keep = ~np.isin(pair_row, dup_rows)
            pair_row, keys, vals = (
                pair_row[keep],
                keys.filter(pa.array(keep)),
                vals.filter(pa.array(keep)),
            )
    if special.any():
        dicts, _ = per_distinct(qs, special, lambda s: list(parse_query(s).items()), QUERY_TYPE)
        srow2 = np.flatnonzero(special)
        off = _np(dicts.offsets)
        sp_len = np.diff(off)
        pair_row = np.concatenate([pair_row, np.repeat(srow2, sp_len)])
        first, size = int(off[0]), int(off[-1] - off[0])
        keys = pa.concat_arrays([keys, dicts.keys.slice(first, size)])
        vals = pa.concat_arrays([vals, dicts.items.slice(first, size)])
        order = np.argsort(pair_row, kind="stable")
        pair_row = pair_row[order]
        keys, vals = keys.take(pa.array(order)), vals.take(pa.array(order))
    offsets = np.zeros(m + 1, np.int32)
    np.cumsum(np.bincount(pair_row, minlength=m), out=offsets[1:])
    return pa.MapArray.from_arrays(pa.array(offsets), keys, vals, type=QUERY_TYPE)
