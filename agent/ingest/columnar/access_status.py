"""The access-log kernel for queries that read only what follows the request: ``status``,
``bytes``, ``priority`` (and ``ts``, always). It parses nothing else.

Contract: :func:`parse_access_projected` is the nginx/Apache kernel of
:mod:`~agent.ingest.columnar.parse`: with a projection inside :data:`NARROW` it runs
:func:`parse_status_size`, otherwise the full kernel
:func:`~agent.ingest.columnar.access.parse_access`.
Either way every row equals :class:`~agent.ingest.formats.AccessLogParser`'s, projected, and
every line is accepted or rejected as that parser does (rejects, their reasons, messages and
line numbers, and the repair count are the row path's): a line is decided here only when its
bytes are verified to be a shape for which the row parser's regex
(``IP IDENT USER [TIME] "REQUEST" STATUS SIZE[ ...]``) can only match one way; every other
line (the *deferred* ones) is parsed by the full kernel, which hands what it cannot verify to
the row parser.

A line is decided here when, reading its raw bytes (numpy over the whole chunk; no Python
per line):

* it holds two ``"`` at least; the first opens the request, and before it the head is
  ``IP IDENT USER [TIME] `` — three printable-ASCII words (RE2 on the heads), a space, and a
  26-byte time in brackets; the time converts by the row parser's own cached
  ``timestamp`` (once per run of equal times);
* the second ``"`` closes the request, i.e. is not preceded by a backslash. nginx writes a
  quote inside a field as ``\\x22``, so its raw ``"`` always ends the field; the row regex's
  quoted field reads ``\\.`` as one unit, so a ``"`` right after a backslash (Apache's
  ``\\"``, or ``\\\\"``) is deferred;
* after it come `` STATUS SIZE`` (ASCII ``[0-9]{3}`` or ``-``, then ``[0-9]{1,18}`` or
  ``-``), then the end of the line or a space: the rest (referer, user agent, an extra
  field) is what the regex's optional groups read, and it always matches one of them;
* its bytes are valid UTF-8, it holds no ``\\r`` where it matters (a ``\\r`` after the size
  is deferred) and no escape of a byte from 0x80 up (``\\x8``-``\\xF``: the only escapes
  whose decoding, which the row parser does in every quoted field whatever the query reads,
  can be invalid UTF-8 and count as a repair). Other escapes (``\\x22``, ``\\x5C``,
  controls) decode to ASCII and change nothing read here.

So the accepted lines repair nothing; the deferred lines' repairs are the full kernel's.

The decisions are made by the compiled scan (:mod:`~agent.ingest.columnar.access_scan`, one
C pass per line) when it is built, else by the numpy passes below: the same values for the
same lines (property-tested), except that the scan defers a line whose escaped field holds a
backslash not starting ``\\xHH`` (nginx never writes one), which the numpy kernel decodes.
"""

from __future__ import annotations

import codecs

import numpy as np
import pyarrow as pa
from numpy.lib.stride_tricks import sliding_window_view

from agent.ingest.columnar.access import SCHEMA, parse_access
from agent.ingest.columnar.access_scan import scan
from agent.ingest.columnar.base import KernelResult, project
from agent.ingest.columnar.lines import Lines, split_lines
from agent.ingest.formats import AccessLogParser, decode_escapes
from agent.ingest.records import RecordError

#: the projections this kernel serves (``ts`` is always wanted)
NARROW = frozenset(("ts", "status", "bytes", "priority"))

_TIME = 26  # dd/Mon/yyyy:HH:MM:SS +zzzz
_HEAD = _TIME + 9  # the shortest head: `a b c [TIME] `
_IDS_MAX = 64  # longer `IP IDENT USER` parts are deferred
_SIZE = 20  # bytes read for the size: up to 18 digits and a terminator
_DIGITS = 18
_POW10 = 10 ** np.arange(_DIGITS, dtype=np.int64)
_HIGH_HEX = np.zeros(256, bool)
_HIGH_HEX[list(b"89ABCDEFabcdef")] = True
# the row parser's cached time conversion (one per process: a bounded cache)
_TS_PARSER = AccessLogParser()


def parse_access_projected(lines: Lines, want: frozenset[str] | None) -> KernelResult:
    """The access-log kernel for ``want`` (see module docstring)."""
    if want is not None and want <= NARROW and len(lines):
        return parse_status_size(lines, want)
    return parse_access(lines, want)


def parse_status_size(lines: Lines, want: frozenset[str]) -> KernelResult:
    """``ts`` and the wanted ones of ``status``, ``bytes`` and ``priority`` of ``lines``: by
    the compiled scan (:mod:`~agent.ingest.columnar.access_scan`) when it is built, else by
    numpy; the same lines are decided, with the same values, either way."""
    got = scan(lines)
    if got is None:
        return _parse_numpy(lines, want)
    rows = np.flatnonzero(got.ok)
    fixed = int(np.count_nonzero(got.repaired[rows]))
    return _result(
        lines, want, got.ok, got.ts[rows], got.status[rows], got.null_status[rows],
        got.size[rows], fixed,
    )  # fmt: skip


def _parse_numpy(lines: Lines, want: frozenset[str]) -> KernelResult:
    """:func:`parse_status_size` by numpy passes over the chunk (see module docstring)."""
    chunk = lines.chunk
    buf = np.frombuffer(chunk, np.uint8)
    escapes = chunk.find(b"\\x") >= 0
    if escapes:  # quotes and backslashes in one pass
        special = np.flatnonzero((buf == 34) | (buf == 92))
        is_quote = buf[special] == 34
        quotes, slashes = special[is_quote], special[~is_quote]
    else:
        quotes, slashes = np.flatnonzero(buf == 34), None
    if len(quotes) < 2:
        return parse_access(lines, want)
    starts, ends = lines.starts, lines.ends
    # each line's first two quotes: the request's opening and closing ones
    at = np.minimum(np.searchsorted(quotes, starts), len(quotes) - 2)
    q1, q2 = quotes[at], quotes[at + 1]
    ok = (q1 >= starts) & (q2 < ends) & (q1 - starts >= _HEAD)
    if lines.repaired is not None:
        ok &= ~lines.repaired
    # the head: `IDS [TIME] "`, then the request closed by a quote no backslash precedes
    head = _windows(buf, q1 - _TIME - 4, _TIME + 4)
    ok &= (head[:, 0] == 32) & (head[:, 1] == 91) & (head[:, -2] == 93) & (head[:, -1] == 32)
    ok &= buf[q2 - 1] != 92
    clean = chunk.isascii() and chunk.find(b"\x7f") < 0 and np.count_nonzero(buf < 32) == len(lines)
    ok &= _ids_ok(buf, starts, q1 - _TIME - 4 - starts, ok, clean)
    # ` STATUS SIZE`, then the end of the line or a space
    sw = _windows(buf, q2 + 1, 5 + _SIZE)
    digit3 = ((sw[:, 1:4] - 48) <= 9).all(axis=1) & (sw[:, 4] == 32)
    dash = (sw[:, 1] == 45) & (sw[:, 2] == 32)
    ok &= (sw[:, 0] == 32) & (digit3 | dash)
    size = sw[:, 5:]
    if dash.any():
        size = size.copy()
        size[dash] = sw[dash, 3 : 3 + _SIZE]
    is_digit = (size - 48) <= 9
    length = np.where(is_digit.all(axis=1), _SIZE, np.argmin(is_digit, axis=1))
    size_dash = (size[:, 0] == 45) & ((size[:, 1] == 32) | (size[:, 1] == 10))
    term = np.take_along_axis(size, np.minimum(length, _SIZE - 1)[:, None], axis=1)[:, 0]
    ok &= ((length >= 1) & (length <= _DIGITS) & ((term == 32) | (term == 10))) | size_dash
    # times: the row parser's conversion once per run of equal strings
    ts = _times(head[:, 2 : 2 + _TIME], ok)
    ok &= ~np.isnan(ts)
    repaired = np.zeros(len(lines), bool)
    if escapes:
        after = q2 + np.where(digit3, 6, 4) + np.maximum(length, 1)  # the size's terminator
        _escape_repairs(lines, buf, quotes, slashes, at, after, ok, repaired)
    rows = np.flatnonzero(ok)
    code = null = values = None
    if want & {"status", "priority"}:
        st = sw[rows, 1:4].astype(np.int64) - 48
        code = st[:, 0] * 100 + st[:, 1] * 10 + st[:, 2]
        null = dash[rows]
    if "bytes" in want:
        values = _size_values(size[rows], length[rows])
    fixed = int(repaired[rows].sum())
    return _result(lines, want, ok, ts[rows], code, null, values, fixed)


def _result(
    lines: Lines,
    want: frozenset[str],
    ok: np.ndarray,
    ts: np.ndarray,
    code: np.ndarray | None,
    null: np.ndarray | None,
    size: np.ndarray | None,
    fixed: int,
) -> KernelResult:
    """The kernel's table of the ``ok`` lines (their ``ts``, status ``code`` with ``null``
    for ``-``, and ``size``: None when not wanted), merged with the deferred lines'."""
    rows = np.flatnonzero(ok)
    cols: dict[str, pa.Array] = {"ts": pa.array(ts, pa.float64())}
    if code is not None and null is not None:
        cols["status"] = pa.array(code, pa.int64(), mask=null)
        prio = np.where(code >= 500, 3, np.where(code >= 400, 4, 6))
        cols["priority"] = pa.array(np.where(null, 6, prio), pa.int64())
    if size is not None:
        cols["bytes"] = pa.array(size, pa.int64())
    table = pa.table({k: cols[k] for k in project(SCHEMA, want).names})
    deferred = np.flatnonzero(~ok)
    if not len(deferred):
        return KernelResult(table, rows.astype(np.int64), deferred.astype(np.int64), fixed)
    return _with_deferred(lines, want, table, rows, deferred, fixed)


def _windows(buf: np.ndarray, pos: np.ndarray, width: int) -> np.ndarray:
    """The ``width`` bytes from each position (clipped to the buffer: a position outside it
    reads the chunk's first or last bytes; callers refuse those lines by other checks)."""
    last = len(buf) - width
    if last < 0:  # a chunk shorter than the window: read it padded with newlines
        buf = np.concatenate([buf, np.full(width, 10, np.uint8)])
        last = len(buf) - width
    view = sliding_window_view(buf, width)
    out = view[np.clip(pos, 0, last)]
    over = np.flatnonzero(pos > last)
    if len(over):  # the chunk's last line: read up to its end, then its final newline
        idx = np.minimum(pos[over, None] + np.arange(width), len(buf) - 1)
        out[over] = buf[idx]
    return out


def _ids_ok(
    buf: np.ndarray, starts: np.ndarray, length: np.ndarray, ok: np.ndarray, clean: bool
) -> np.ndarray:
    """Whether each line's first ``length`` bytes are three printable-ASCII words separated by
    single spaces (RE2's and Python's ``\\S+ \\S+ \\S+`` agree there); only ``ok`` lines are
    checked, lines whose part is longer than :data:`_IDS_MAX` are refused. ``clean``: every
    byte of the chunk is printable ASCII, a space or a newline."""
    good = ok & (length >= 5) & (length <= _IDS_MAX)
    if not good.any():
        return good
    width = int(length[good].max())
    win = _windows(buf, starts, width)
    inside = np.arange(width) < length[:, None]
    space = (win == 32) & inside
    if not clean:  # some byte of the chunk is neither printable ASCII nor a newline
        good &= ~(((win - 33) > 93) & ~space & inside).any(axis=1)
    good &= np.count_nonzero(space, axis=1) == 2
    good &= ~space[:, 0] & ~(space[:, 1:] & space[:, :-1]).any(axis=1)
    last = np.take_along_axis(space, np.clip(length - 1, 0, width - 1)[:, None], axis=1)[:, 0]
    return good & ~last


def _times(text: np.ndarray, ok: np.ndarray) -> np.ndarray:
    """Epoch seconds of each ``ok`` row's 26-byte time (NaN where the row parser refuses it,
    and for the other rows), converted once per run of equal strings."""
    ts = np.full(len(ok), np.nan)
    rows = np.flatnonzero(ok)
    if not len(rows):
        return ts
    strings = np.ascontiguousarray(text[rows]).view(f"S{_TIME}")[:, 0]
    change = np.ones(len(rows), bool)
    np.not_equal(strings[1:], strings[:-1], out=change[1:])
    heads = strings[change].tolist()
    cache: dict[bytes, float] = {}
    values = np.empty(len(heads), np.float64)
    for k, raw in enumerate(heads):
        got = cache.get(raw)
        if got is None:
            try:
                got = _TS_PARSER.timestamp(raw.decode("utf-8"))
            except (RecordError, UnicodeDecodeError):
                got = np.nan
            cache[raw] = got
        values[k] = got
    ts[rows] = values[np.cumsum(change) - 1]
    return ts


def _size_values(size: np.ndarray, length: np.ndarray) -> np.ndarray:
    """The integer of each row's leading ``length`` ASCII digits (0 for length 0: ``-``)."""
    width = int(length.max()) if len(length) else 0
    value = np.zeros(len(size), np.int64)
    for k in range(width):
        digit = size[:, k].astype(np.int64) - 48
        value = np.where(k < length, value * 10 + digit, value)
    return value


def _escape_repairs(
    lines: Lines,
    buf: np.ndarray,
    quotes: np.ndarray,
    slashes: np.ndarray,
    at: np.ndarray,
    after: np.ndarray,
    ok: np.ndarray,
    repaired: np.ndarray,
) -> None:
    """For the ``ok`` lines holding a ``\\x8``-``\\xF`` escape: whether the row parser's
    decoding of their quoted fields (the request; the referer and user agent when the
    combined group matches) is invalid UTF-8 (``repaired``), decided once per distinct field
    value (:func:`_invalid_after_decoding`); lines whose referer or agent might
    end at an escaped quote are refused (``ok`` cleared)."""
    ends = lines.ends
    s = slashes[slashes + 2 < len(buf)]
    hit = s[(buf[s + 1] == 120) & _HIGH_HEX[buf[s + 2]]]
    flagged = np.zeros(len(ok), bool)
    flagged[np.searchsorted(ends, hit)] = True
    rows = np.flatnonzero(flagged & ok)
    if not len(rows):
        return
    nq = len(quotes)
    a = at[rows]
    q = [quotes[np.minimum(a + k, nq - 1)] for k in range(6)]
    end = ends[rows]
    t = after[rows]
    within = (a + 5 < nq) & (q[5] < end)
    # ` "REFERER" "AGENT"` right after the size, then the end of the text or a space; a
    # quote a backslash precedes might be escaped: the line is refused
    quoted = (buf[t] == 32) & (buf[np.minimum(t + 1, len(buf) - 1)] == 34)
    opens = quoted & within & (buf[q[3] + 1] == 32) & (q[4] == q[3] + 2)
    nxt = buf[np.minimum(q[5] + 1, len(buf) - 1)]
    closes = (q[5] + 1 == end) | (nxt == 32) | ((nxt == 13) & (q[5] + 2 == end))
    unsure = quoted & (~within | (buf[q[3] - 1] == 92) | (opens & (buf[q[5] - 1] == 92)))
    combined = opens & closes & ~unsure
    # the fields' byte ranges (empty ones at the request's end when not combined)
    a_ref = np.where(combined, q[2] + 1, q[1])
    b_ref = np.where(combined, q[3], q[1])
    a_ag = np.where(combined, q[4] + 1, q[1])
    b_ag = np.where(combined, q[5], q[1])
    cuts = np.stack([q[0] + 1, q[1], a_ref, b_ref, a_ag, b_ag], axis=1).ravel()
    # the fields holding an escape found above (a cut's even side is inside a field)
    k = np.searchsorted(cuts, hit[np.isin(np.searchsorted(ends, hit), rows)], "right") - 1
    fields = np.unique(k[(k >= 0) & (k % 2 == 0)] // 2)
    if not len(fields):
        ok[rows[unsure]] = False
        return
    chunk = lines.chunk
    spans = zip(cuts[2 * fields].tolist(), cuts[2 * fields + 1].tolist(), strict=True)
    verdicts: dict[bytes, bool] = {}
    bad = np.empty(len(fields), bool)
    for j, (lo, hi) in enumerate(spans):  # ~ one per escaped field: few per chunk
        value = chunk[lo:hi]
        got = verdicts.get(value)
        if got is None:
            got = verdicts[value] = _invalid_after_decoding(value)
        bad[j] = got
    bad_field = np.zeros(3 * len(rows), bool)
    bad_field[fields] = bad
    repaired[rows] = bad_field.reshape(len(rows), 3).any(axis=1)
    ok[rows[unsure]] = False


def _invalid_after_decoding(value: bytes) -> bool:
    """Whether a quoted field's escapes decode to invalid UTF-8 (``decode_escapes``'s flag).
    Fields whose every backslash starts a ``\\xHH`` escape are decided in C: the bytes with
    each escape replaced by its byte have the same validity (an escape decode_escapes keeps
    as text is of a printable ASCII byte: ASCII both ways)."""
    if value.count(b"\\") == value.count(b"\\x"):
        try:
            raw = codecs.escape_decode(value)[0]
        except ValueError:  # a `\x` without two hex digits
            pass
        else:
            try:
                raw.decode("utf-8")
            except UnicodeDecodeError:
                return True
            return False
    return decode_escapes(value.decode("utf-8"))[1]


def _with_deferred(
    lines: Lines,
    want: frozenset[str],
    table: pa.Table,
    rows: np.ndarray,
    deferred: np.ndarray,
    fixed: int,
) -> KernelResult:
    """The deferred lines through the full kernel, merged with ``table`` in line order."""
    chunk = lines.chunk
    starts, ends = lines.starts[deferred].tolist(), lines.ends[deferred].tolist()
    sub = b"".join([chunk[a : b + 1] for a, b in zip(starts, ends, strict=True)])
    out = parse_access(split_lines(sub), want)
    index = np.concatenate([rows, deferred[out.line_index]]).astype(np.int64)
    fallback = deferred[out.fallback].astype(np.int64)
    repaired = fixed + out.repaired
    if not out.table.num_rows:
        return KernelResult(table, rows.astype(np.int64), fallback, repaired)
    other = out.table.select(table.column_names).cast(table.schema)
    merged = pa.concat_tables([table, other])
    order = np.argsort(index, kind="stable")
    return KernelResult(merged.take(pa.array(order)), index[order], fallback, repaired)
