"""The projected JSON-lines kernel in C: one strict pass over the chunk into Arrow buffers.

Contract: :func:`parse_fields` ``(lines, want)`` has the contract of
:func:`~agent.ingest.columnar.json_msgspec.parse_projected` (the same table, line index,
fallback lines, ``None`` and :class:`~agent.ingest.columnar.base.UnsupportedChunk` for the same
chunks: the row path's answer). Where the compiled scanner ``json_scan_c`` (``json_scan_c.c``,
built by ``setup.py`` when a C compiler is there) is missing, or switched off by
:func:`use_native`, it *is* ``parse_projected`` (msgspec).

How: the scanner reads the chunk in place (buffer protocol, GIL released) and decides each
line: one JSON object per RFC 8259 that orjson reads with the same values (strict UTF-8, no
lone surrogates, depth, no number where orjson could overflow or make a float, projected
integers within int64, projected keys unescaped and given once), whose projected top-level
values it writes per field as a kind per line, an int64/float64 slot per line and Arrow string
offsets and bytes. Every other line — invalid, blank, or merely undecided — is left to the row
parser (orjson + validation), as the msgspec kernel leaves its screened lines: its records are
merged back in line order, the lines it refuses are ``fallback``. Columns are wrapped with
``pa.Array.from_buffers`` (no Python object per value) and typed as the row path's
``pa.array`` would type them: int64, float64 (correctly rounded as orjson's: Clinger's exact
fast path, else glibc's ``strtod_l``, else Python's ``float``), bool, string, null.
A chunk where a projected field holds a nested value or values of two kinds, or whose merged
row-parser values do not have the column's type, is handed to ``parse_projected`` whole
(mixed kinds fall back per chunk as before). ``ts``: numbers as float64 (an integer beyond
2**53 raises ``UnsupportedChunk``), strings by :func:`~agent.ingest.records.parse_iso8601`
once per distinct value, anything else to the row parser for its reason.

Bounds: the chunk is not copied; per field, a byte and 8 bytes per line and 4-byte offsets;
string bytes at most the chunk's size (grown as needed, copied once into the result).
"""

from __future__ import annotations

import math
from types import ModuleType
from typing import Any

import numpy as np
import pyarrow as pa

from agent.ingest.columnar.base import KernelResult, UnsupportedChunk
from agent.ingest.columnar.json_msgspec import float_timestamps, parse_projected, row_records
from agent.ingest.columnar.lines import Lines
from agent.ingest.columnar.native import optional_extension
from agent.ingest.records import RecordError, parse_iso8601

TS_FIELD = "ts"
# the scanner's value kinds (json_scan_c.c)
K_MISSING, K_NULL, K_FALSE, K_TRUE, K_INT, K_FLOAT, K_FLOAT_TEXT, K_STR, K_NESTED = range(9)
_KINDS = 9
_GROUPS = {  # the Arrow type the row path's pa.array gives a column of these kinds
    K_FALSE: pa.bool_(),
    K_TRUE: pa.bool_(),
    K_INT: pa.int64(),
    K_FLOAT: pa.float64(),
    K_FLOAT_TEXT: pa.float64(),
    K_STR: pa.string(),
}
_EXACT_INT = 2**53
_MAX_FIELDS = 64
_MAX_CHUNK = (1 << 31) - 1  # Arrow's int32 string offsets


SCANNER: ModuleType | None = optional_extension("json_scan_c")
_enabled = SCANNER is not None


def use_native(enabled: bool) -> bool:
    """Switch the C scanner on or off for this process (tests run both paths); returns whether
    it is now in use (never when the extension is not built)."""
    global _enabled
    _enabled = bool(enabled) and SCANNER is not None
    return _enabled


def native_in_use() -> bool:
    """Whether :func:`parse_fields` runs the C scanner."""
    return _enabled


def parse_fields(lines: Lines, want: frozenset[str]) -> KernelResult | None:
    """The rows of ``lines`` projected to ``want`` (see module docstring)."""
    n = len(lines)
    if not _enabled or len(want) > _MAX_FIELDS or len(lines.chunk) > _MAX_CHUNK or not n:
        return parse_projected(lines, want)
    names = tuple(want)  # the row path's column order: iteration order of ``want``
    f = len(names)
    kinds = np.empty((f, n), np.uint8)
    vals = np.empty((f, n), np.int64)
    offs = np.empty((f, n + 1), np.int32)
    status = np.empty(n, np.uint8)
    strs = SCANNER.scan(  # type: ignore[union-attr]
        lines.chunk,
        np.ascontiguousarray(lines.starts, np.int64),
        np.ascontiguousarray(lines.ends, np.int64),
        tuple(name.encode() for name in names),
        kinds,
        vals,
        offs,
        status,
    )
    ok = status == 0
    for k in range(f):  # numbers left as text: Python's float (first: it may drop lines)
        _float_texts(lines.chunk, kinds[k], vals[k], ok)
    ts = _timestamps(names.index(TS_FIELD), kinds, vals, offs, strs, ok)
    every = bool(ok.all())
    types: dict[str, pa.DataType] = {}
    for k, name in enumerate(names):
        if name == TS_FIELD:
            continue
        counts = np.bincount(kinds[k] if every else kinds[k][ok], minlength=_KINDS)
        found = {_GROUPS[c] for c in range(K_FALSE, K_NESTED) if counts[c]}
        if counts[K_NESTED] or len(found) > 1:
            return parse_projected(lines, want)  # nested or mixed: msgspec decides (exact)
        types[name] = found.pop() if found else pa.null()
    index = np.flatnonzero(ok)
    keep = None if every else pa.array(ok)
    arrays: dict[str, pa.Array] = {}
    for k, name in enumerate(names):
        if name == TS_FIELD:
            arr = pa.Array.from_buffers(pa.float64(), n, [None, pa.py_buffer(ts)], 0)
        else:
            arr = _column(types[name], n, kinds[k], vals[k], offs[k], strs[k])
        arrays[name] = arr if keep is None else arr.filter(keep)
    table = pa.table(arrays)
    to_rows = [] if every else np.flatnonzero(~ok & ~lines.blank).tolist()
    fallback: list[int] = []
    if to_rows:
        extra, fallback = row_records(lines, to_rows)
        if extra:
            merged = _merge(table, index, extra, names)
            if merged is None:
                return parse_projected(lines, want)  # kinds differ: msgspec decides (exact)
            table, index = merged
    return KernelResult(table, index.astype(np.int64), np.asarray(fallback, np.int64), 0)


def _float_texts(chunk: bytes, kinds: np.ndarray, vals: np.ndarray, ok: np.ndarray) -> None:
    """Convert the numbers the scanner left as text (by Python's correctly rounded ``float``,
    as orjson rounds) into ``vals``; a line whose value would not be finite leaves ``ok``
    (cannot happen for what the scanner accepts: a safeguard)."""
    rows = np.flatnonzero(kinds == K_FLOAT_TEXT)
    if not len(rows):
        return
    shift = SCANNER.TEXT_BITS  # type: ignore[union-attr]
    mask = (1 << shift) - 1
    out = vals.view(np.float64)
    for i in rows.tolist():
        packed = int(vals[i])
        at = packed >> shift
        value = float(chunk[at : at + (packed & mask)])
        if math.isfinite(value):
            out[i] = value
        else:
            ok[i] = False


def _timestamps(
    k: int,
    kinds: np.ndarray,
    vals: np.ndarray,
    offs: np.ndarray,
    strs: list[bytes],
    ok: np.ndarray,
) -> np.ndarray:
    """``ts`` per line as float64; lines without a number or an ISO-8601 string leave ``ok``
    (the row parser's to judge)."""
    kind = kinds[k]
    is_int = kind == K_INT
    ts = vals[k].view(np.float64).copy()
    if is_int.any():
        ints = vals[k][is_int]
        big = ints[(ints > _EXACT_INT) | (ints < -_EXACT_INT)]
        if len(big):  # the row path keeps the int, which float64 cannot hold exactly
            raise UnsupportedChunk(f"integer timestamp {abs(int(big[0]))} is not exact as float64")
        ts[is_int] = ints
    text = (kind == K_STR) & ok
    if text.any():
        arr = _column(pa.string(), len(kind), kind, vals[k], offs[k], strs[k])
        rows = np.flatnonzero(text)
        enc = arr.take(pa.array(rows)).dictionary_encode()
        parsed: list[float] = []
        for value in enc.dictionary.to_pylist():
            try:
                parsed.append(parse_iso8601(value))
            except RecordError:
                parsed.append(math.nan)  # the row parser rejects it with its reason
        ts[rows] = np.asarray(parsed, np.float64)[enc.indices.to_numpy()]
    numeric = (kind == K_FLOAT) | (kind == K_FLOAT_TEXT) | is_int
    ok &= numeric | (text & ~np.isnan(ts))
    return ts


def _bits(mask: np.ndarray) -> pa.Buffer:
    return pa.py_buffer(np.packbits(mask, bitorder="little"))


def _column(
    t: pa.DataType,
    n: int,
    kinds: np.ndarray,
    vals: np.ndarray,
    offs: np.ndarray,
    data: bytes,
) -> pa.Array:
    """One field's values over all ``n`` lines as an Arrow array of type ``t`` (lines of
    other kinds null), over the scanner's buffers."""
    if pa.types.is_null(t):
        return pa.nulls(n)
    if pa.types.is_boolean(t):
        valid = (kinds == K_TRUE) | (kinds == K_FALSE)
        nulls = n - int(np.count_nonzero(valid))
        bufs = [_bits(valid) if nulls else None, _bits(kinds == K_TRUE)]
        return pa.Array.from_buffers(t, n, bufs, nulls)
    if pa.types.is_string(t):
        valid = kinds == K_STR
    elif pa.types.is_integer(t):
        valid = kinds == K_INT
    else:
        valid = (kinds == K_FLOAT) | (kinds == K_FLOAT_TEXT)
    nulls = n - int(np.count_nonzero(valid))
    validity = _bits(valid) if nulls else None
    if pa.types.is_string(t):
        return pa.Array.from_buffers(
            t, n, [validity, pa.py_buffer(offs), pa.py_buffer(data)], nulls
        )
    return pa.Array.from_buffers(t, n, [validity, pa.py_buffer(vals)], nulls)


def _merge(
    table: pa.Table, index: np.ndarray, extra: list[tuple[int, dict[str, Any]]], names: tuple
) -> tuple[pa.Table, np.ndarray] | None:
    """The scanner's rows and the row parser's, in line order; None when a field's row-parser
    values do not have the scanner column's type (msgspec then decides the chunk)."""
    ts, bad = float_timestamps([r[TS_FIELD] for _, r in extra])
    if bad:  # cannot happen: the row parser leaves numbers only
        raise UnsupportedChunk("row parser timestamps are not numbers")
    cols: dict[str, pa.Array] = {}
    for name in names:
        ours = table.column(name).combine_chunks()
        try:
            theirs = (
                pa.array(ts, pa.float64())
                if name == TS_FIELD
                else pa.array([r.get(name) for _, r in extra])
            )
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError):
            return None
        if pa.types.is_null(ours.type):
            ours = pa.nulls(len(ours), theirs.type)
        elif pa.types.is_null(theirs.type):
            theirs = pa.nulls(len(theirs), ours.type)
        if ours.type != theirs.type:
            return None
        cols[name] = pa.concat_arrays([ours, theirs])
    all_index = np.concatenate([index, np.asarray([i for i, _ in extra], np.int64)])
    order = np.argsort(all_index, kind="stable")
    return pa.table(cols).take(pa.array(order)), all_index[order]
