"""The syslog kernel (RFC 3164 and RFC 5424) in vectorized Arrow compute.

Contract: rows equal :class:`~agent.ingest.formats.SyslogParser`'s, with the columns of
:data:`SCHEMA` (``sd`` as ``map<string, map<string, string>>``); a line whose shape this
kernel does not verify is left to that parser (``KernelResult.fallback``). Shapes are checked
with RE2 matches (its DFA; header tokens printable ASCII, where RE2 and Python's ``\\S``
agree) and the fields cut with splits and fixed slices (capturing ``extract_regex`` runs RE2's
much slower submatch engine):

* RFC 5424 ``<PRI>1 TIMESTAMP HOST APP PROCID MSGID SD[ MSG]``: PRI 0..191 without leading
  zeros, a timestamp (not ``-``: that is the arrival time) that
  :func:`~agent.ingest.formats.parse_rfc3339` reads (strict RFC 3339 shapes with numpy by its
  own rules, others once per distinct value) and that has a ``T``; structured data ``-`` and
  one escape-free element are read here (the element with ``extract_regex``), others by the
  row parser's own :func:`~agent.ingest.formats.structured_data_and_msg` (per line, SD part
  only);
* RFC 3164 ``[<PRI>]Mmm dd hh:mm:ss HOST REST`` (BSD time converted with numpy by the row
  parser's rule: UTC, the valid date of the years around now's closest to now; "now" is read
  once per chunk, where the row parser reads it once per distinct time string) or with an
  RFC 3339 time (rsyslog's high-precision file format); the ``TAG[PID]:`` prefix of REST
  with the row parser's pattern (Python's ``\\s`` spelled out for RE2), cut by splits.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from agent.ingest.columnar.base import KernelResult, duplicate_rows, project, select
from agent.ingest.columnar.lines import Lines
from agent.ingest.formats import (
    FACILITIES,
    MONTHS,
    parse_rfc3339,
    structured_data_and_msg,
)
from agent.ingest.records import RecordError

SD_TYPE = pa.map_(pa.string(), pa.map_(pa.string(), pa.string()))
SCHEMA = pa.schema(
    [
        ("ts", pa.float64()),
        ("source_ip", pa.string()),
        ("body", pa.string()),
        ("syslog_version", pa.int64()),
        ("host", pa.string()),
        ("app", pa.string()),
        ("procid", pa.string()),
        ("msgid", pa.string()),
        ("sd", SD_TYPE),
        ("facility", pa.int64()),
        ("facility_name", pa.string()),
        ("severity", pa.int64()),
        ("priority", pa.int64()),
    ]
)


SPACE_LIMIT = 0x3001


def _python_space_class() -> str:
    """Python's ``\\s`` on text (``str.isspace``) as an RE2 character class body."""
    # every str.isspace code point is at most U+3000 (ideographic space; the test checks it
    # against the whole range): scanning all of Unicode cost 0.2 s at every import
    spaces = [c for c in range(SPACE_LIMIT) if chr(c).isspace()]
    return "".join(f"\\x{{{c:x}}}" for c in spaces)


_S = _python_space_class()
_PRI = r"<(?P<pri>0|[1-9][0-9]{0,2})>"
_RFC3339 = (
    r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]{1,9})?"
    r"(?:Z|[+-][0-9]{2}:[0-9]{2})"
)
_5424_MATCH_RE = (
    r"^<(?:0|[1-9][0-9]{0,2})>1 [!-~]+ [!-~]{1,255} [!-~]{1,48} [!-~]{1,128} [!-~]{1,32} "
)
_3164_MATCH_RE = (
    r"^(?:<(?:0|[1-9][0-9]{0,2})>)?(?:[A-Z][a-z]{2} [ 0-9][0-9] [0-9]{2}:[0-9]{2}:[0-9]{2}|"
    + _RFC3339
    + r") [^ ]+(?: .*)?$"
)
_TAG_NAME = r"[^" + _S + r":\[\]]{1,64}"
_TAG_PID_RE = r"^" + _TAG_NAME + r"\[[^\]" + _S + r"]{1,64}\]:"
_TAG_PLAIN_RE = r"^" + _TAG_NAME + r":"
_SD_NAME_RE = r"[^" + _S + r"=\]\"]{1,32}"
# one SD-ELEMENT without escapes, then the optional MSG (the row parser's block pattern with
# no backslash in any value; Python's \s spelled out)
_SD_SIMPLE_RE = (
    r"^\[(?P<id>" + _SD_NAME_RE + r")(?P<params>(?: " + _SD_NAME_RE + r'="[^"\\]*")*) ?\]'
    r"(?: (?P<msg>.*))?$"
)
_FACILITY_NAMES = pa.array(FACILITIES)
_NULL_STR = pa.scalar(None, pa.string())


def _np(arr: pa.Array) -> np.ndarray:
    return np.asarray(arr.to_numpy(zero_copy_only=False))


def _dash(values: pa.Array) -> pa.Array:
    return pc.if_else(pc.equal(values, "-"), _NULL_STR, values)


def _per_distinct(values: pa.Array, fn: Any) -> pa.Array:
    """float64 ``fn(value)`` once per distinct value (None where it raises RecordError)."""
    enc = values.dictionary_encode()
    out: list[float | None] = []
    for value in enc.dictionary.to_pylist():
        try:
            out.append(None if value is None else fn(value))
        except RecordError:
            out.append(None)
    return pa.array(out, pa.float64()).take(enc.indices)


_STRICT_3339 = "^" + _RFC3339 + "$"


def _slice_int(values: pa.Array, start: int, stop: int) -> np.ndarray:
    return _np(pc.cast(pc.utf8_slice_codeunits(values, start, stop), pa.int64()))


def _rfc3339_times(values: pa.Array) -> pa.Array:
    """:func:`~agent.ingest.formats.parse_rfc3339` on arrays, for strings of the strict
    ``YYYY-MM-DDTHH:MM:SS[.frac](Z|+hh:mm)`` shape (the row parser's own fast path): the
    same validity rules (a real date, hour < 24, minute < 60, second < 61 read as 59, zone
    hours < 24 and minutes < 60), the same float arithmetic (whole seconds, then the
    fraction added); null where the row parser would refuse or take another path."""
    strict = _np(pc.fill_null(pc.match_substring_regex(values, _STRICT_3339), False))
    out = np.full(len(values), np.nan)
    if not strict.any():
        return pa.array(out, pa.float64(), from_pandas=True)
    rows = np.flatnonzero(strict)
    v = values.take(pa.array(rows))
    y, mo, d = _slice_int(v, 0, 4), _slice_int(v, 5, 7), _slice_int(v, 8, 10)
    h, mi, sec = _slice_int(v, 11, 13), _slice_int(v, 14, 16), _slice_int(v, 17, 19)
    rest = pc.utf8_slice_codeunits(v, 19)  # [.frac] zone
    zulu = _np(pc.ends_with(rest, "Z"))
    zone = pc.utf8_slice_codeunits(rest, -6)
    zh = np.where(
        zulu,
        0,
        _np(
            pc.cast(
                pc.if_else(pa.array(zulu), "00", pc.utf8_slice_codeunits(zone, 1, 3)), pa.int64()
            )
        ),
    )
    zm = np.where(
        zulu,
        0,
        _np(
            pc.cast(
                pc.if_else(pa.array(zulu), "00", pc.utf8_slice_codeunits(zone, 4, 6)), pa.int64()
            )
        ),
    )
    east = _np(pc.starts_with(zone, "+"))
    frac_text = pc.if_else(
        pa.array(zulu), pc.utf8_slice_codeunits(rest, 0, -1), pc.utf8_slice_codeunits(rest, 0, -6)
    )
    has_frac = _np(pc.not_equal(frac_text, ""))
    frac = _np(pc.cast(pc.if_else(pa.array(has_frac), frac_text, "0"), pa.float64()))
    leap = (y % 4 == 0) & ((y % 100 != 0) | (y % 400 == 0))
    mo_ok = (mo >= 1) & (mo <= 12)
    dim = _DAYS_IN_MONTH[np.where(mo_ok, mo, 0)] - ((mo == 2) & ~leap)
    ok = mo_ok & (d >= 1) & (d <= dim) & (h < 24) & (mi < 60) & (sec < 61)
    ok &= (zh < 24) & (zm < 60)
    whole = _days_from_civil(y, mo, d) * 86400 + h * 3600 + mi * 60 + np.minimum(sec, 59)
    off = zh * 3600 + zm * 60
    whole = np.where(zulu, whole, np.where(east, whole - off, whole + off))
    value = whole.astype(float) + np.where(has_frac, frac, 0.0)
    out[rows] = np.where(ok, value, np.nan)
    return pa.array(out, pa.float64(), from_pandas=True)


def _times(values: pa.Array, fn: Any) -> pa.Array:
    """Times of ``values``: strict RFC 3339 strings vectorized, the others by ``fn`` once per
    distinct value (null where either refuses)."""
    fast = _rfc3339_times(values)
    slow = _np(pc.and_(pc.is_null(fast), pc.is_valid(values)))
    if not slow.any():
        return fast
    other = _per_distinct(pc.if_else(pa.array(slow), values, _NULL_STR), fn)
    return pc.if_else(pa.array(slow), other, fast)


def _rfc5424_ts(text: str) -> float:
    ts = parse_rfc3339(text)
    if "T" not in text:
        raise RecordError("bad_timestamp", "no time")
    return ts


def _days_from_civil(y: np.ndarray, m: np.ndarray, d: np.ndarray) -> np.ndarray:
    """:func:`agent.ingest.formats.days_from_civil` on arrays."""
    y = y - (m <= 2)
    era = np.where(y >= 0, y, y - 399) // 400
    yoe = y - era * 400
    doy = (153 * (m + np.where(m > 2, -3, 9)) + 2) // 5 + d - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe - 719468


def _bsd_times(m: dict[str, pa.Array]) -> pa.Array:
    """RFC 3164 times (no year, UTC) as :meth:`SyslogParser._bsd_ts` computes them, on
    arrays: of the years before, of and after now's, the valid date closest to now; null
    where the row parser refuses the time (no such date or time)."""
    enc = m["mon"].dictionary_encode()
    month_of = np.array([MONTHS.get(x or "", 0) for x in enc.dictionary.to_pylist()], np.int64)
    month = month_of[_np(enc.indices)]

    def ints(name: str) -> np.ndarray:
        text = pc.utf8_ltrim(m[name], " ")  # "" on the lines with an RFC 3339 time
        return _np(pc.cast(pc.if_else(pc.equal(text, ""), "0", text), pa.int64()))

    day, hh, mm, ss = ints("day"), ints("hh"), ints("mm"), ints("ss")
    now = time.time()
    year = time.gmtime(now).tm_year
    clock_ok = (month > 0) & (hh < 24) & (mm < 60) & (ss < 61)
    secs = hh * 3600 + mm * 60 + np.minimum(ss, 59)
    best = np.full(len(day), np.nan)
    for y in (year - 1, year, year + 1):
        leap = (y % 4 == 0) and (y % 100 != 0 or y % 400 == 0)
        dim = _DAYS_IN_MONTH[month] - ((month == 2) & (not leap))
        valid = clock_ok & (day >= 1) & (day <= dim)
        cand = (_days_from_civil(np.full(len(day), y), month, day) * 86400 + secs).astype(float)
        closer = valid & (np.isnan(best) | (np.abs(cand - now) < np.abs(best - now)))
        best = np.where(closer, cand, best)
    return pa.array(best, pa.float64(), from_pandas=True)  # NaN -> null


_DAYS_IN_MONTH = np.array([0, 31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31], np.int64)


def parse_syslog(lines: Lines, want: frozenset[str] | None) -> KernelResult:
    """The rows of the syslog lines of ``lines`` (see module docstring)."""
    n = len(lines)
    if not n:
        empty = project(SCHEMA, want).empty_table()
        return KernelResult(empty, np.empty(0, np.int64), np.empty(0, np.int64), 0)
    text = lines.text
    parts: list[tuple[np.ndarray, dict[str, pa.Array]]] = []
    is5424 = _np(pc.fill_null(pc.match_substring_regex(text, r"^<[0-9]{1,3}>1 "), False))
    if is5424.any():
        parts.append(_rfc5424(text, np.flatnonzero(is5424)))
    if not is5424.all():
        parts.append(_rfc3164(text, np.flatnonzero(~is5424)))
    rows = np.concatenate([r for r, _ in parts])
    cols = {
        name: pa.concat_arrays([c[name] for _, c in parts]) if len(parts) > 1 else parts[0][1][name]
        for name in parts[0][1]
    }
    if len(parts) > 1:
        order = np.argsort(rows, kind="stable")
        rows = rows[order]
        take = pa.array(order)
        cols = {k: v.take(take) for k, v in cols.items()}
    pri = cols.pop("pri")
    cols["facility"] = pc.shift_right(pri, 3)
    cols["severity"] = cols["priority"] = pc.bit_wise_and(pri, 7)
    cols["facility_name"] = _FACILITY_NAMES.take(cols["facility"])
    cols["source_ip"] = cols["host"]
    repaired = 0 if lines.repaired is None else int(lines.repaired[rows].sum())
    fallback = np.setdiff1d(np.arange(n, dtype=np.int64), rows, assume_unique=True)
    return KernelResult(select(cols, project(SCHEMA, want)), rows, fallback, repaired)


def _keep(rows: np.ndarray, cols: dict[str, pa.Array], ok: np.ndarray) -> tuple[np.ndarray, dict]:
    if ok.all():
        return rows, cols
    mask = pa.array(ok)
    return rows[ok], {k: v.filter(mask) for k, v in cols.items()}


def _pri(values: pa.Array) -> tuple[pa.Array, np.ndarray]:
    """PRI as int64 (null without one) and which rows hold an allowed one (<= 191)."""
    pri = pc.cast(pc.if_else(pc.equal(values, ""), _NULL_STR, values), pa.int64())
    ok = _np(pc.fill_null(pc.less_equal(pri, 191), True))
    return pri, ok


def _rfc5424(text: pa.Array, rows: np.ndarray) -> tuple[np.ndarray, dict[str, pa.Array]]:
    # the shape checked by a match (RE2's fast DFA), the fields taken by one split: capturing
    # submatches (extract_regex) costs several times more
    sub = text.take(pa.array(rows))
    ok = _np(pc.fill_null(pc.match_substring_regex(sub, _5424_MATCH_RE), False))
    rows, sub = rows[ok], sub.filter(pa.array(ok))
    parts = pc.split_pattern(sub, " ", max_splits=6)  # <PRI>1 TS HOST APP PROCID MSGID REST
    start = _np(parts.offsets)[:-1]
    flat = parts.values

    def piece(k: int) -> pa.Array:
        return flat.take(pa.array(start + k))

    pri, ok = _pri(pc.utf8_slice_codeunits(piece(0), 1, -2))
    ts = _times(piece(1), _rfc5424_ts)
    ok &= _np(pc.is_valid(ts))
    cols = {
        "pri": pri,
        "ts": ts,
        "host": _dash(piece(2)),
        "app": _dash(piece(3)),
        "procid": _dash(piece(4)),
        "msgid": _dash(piece(5)),
        "rest": piece(6),
    }
    rows, cols = _keep(rows, cols, ok)
    rest = cols.pop("rest")
    body, sd, ok = _structured_data(rest)
    cols["body"] = body
    cols["sd"] = sd
    cols["syslog_version"] = pa.array(np.ones(len(rest), np.int64))
    return _keep(rows, cols, ok)


def _structured_data(rest: pa.Array) -> tuple[pa.Array, pa.Array, np.ndarray]:
    """MSG, ``sd`` and which rows are valid, from ``SD[ MSG]`` (the rest of a 5424 line):
    ``-`` and one ``[ID NAME="VALUE" ...]`` without escapes or repeated names are read here;
    other structured data by the row parser's own reader, per line."""
    m = len(rest)
    nil = _np(pc.fill_null(pc.match_substring_regex(rest, r"^-(?: |$)"), False))
    simple = ~nil & _np(pc.fill_null(pc.match_substring_regex(rest, _SD_SIMPLE_RE), False))
    body = pc.utf8_slice_codeunits(rest, 2)  # the nil rows' MSG
    pieces: list[tuple[np.ndarray, pa.Array]] = [
        (np.flatnonzero(nil), pa.array([[]] * int(nil.sum()), SD_TYPE))
    ]
    ok = nil | simple
    if simple.any():
        srows = np.flatnonzero(simple)
        ex = pc.extract_regex(rest.take(pa.array(srows)), _SD_SIMPLE_RE)
        params = pc.split_pattern(ex.field("params"), '"')  # ' a=', '1', ' b=', '2', ''
        off = _np(params.offsets)
        count = (np.diff(off) - 1) // 2
        flat = params.values
        first = np.repeat(off[:-1], count) + 2 * (
            np.arange(int(count.sum())) - np.repeat(np.cumsum(count) - count, count)
        )
        names = pc.utf8_slice_codeunits(flat.take(pa.array(first)), 1, -1)
        values = flat.take(pa.array(first + 1))
        pair_row = np.repeat(np.arange(len(srows)), count)
        dup = duplicate_rows(pair_row, names) if len(pair_row) else np.empty(0, np.int64)
        inner_off = np.zeros(len(srows) + 1, np.int32)
        np.cumsum(count, out=inner_off[1:])
        inner = pa.MapArray.from_arrays(pa.array(inner_off), names, values)
        outer = pa.MapArray.from_arrays(
            pa.array(np.arange(len(srows) + 1, dtype=np.int32)), ex.field("id"), inner
        )
        msg = ex.field("msg")
        if len(dup):  # a name given twice: the row parser's reader (last value wins)
            keep = np.ones(len(srows), bool)
            keep[dup] = False
            simple[srows[dup]] = False
            ok[srows[dup]] = False
            srows, outer, msg = (
                srows[keep],
                outer.filter(pa.array(keep)),
                msg.filter(pa.array(keep)),
            )
        pieces.append((srows, outer))
        body = _put(body, srows, msg)
    other = np.flatnonzero(~nil & ~simple)
    if len(other):
        maps: list[Any] = []
        msgs: list[str] = []
        done: list[int] = []
        for i, value in zip(other.tolist(), rest.take(pa.array(other)).to_pylist(), strict=True):
            try:
                sd, msg = structured_data_and_msg(value, 0)
            except RecordError:
                continue
            maps.append([(k, list(v.items())) for k, v in sd.items()])
            msgs.append(msg)
            done.append(i)
            ok[i] = True
        at = np.asarray(done, np.int64)
        pieces.append((at, pa.array(maps, SD_TYPE)))
        body = _put(body, at, pa.array(msgs, pa.string()))
    # a leading BOM is not part of MSG (the row parser's reader already removed it)
    bom = _np(pc.fill_null(pc.starts_with(body, "\ufeff"), False)) & (nil | simple)
    if bom.any():
        body = pc.if_else(pa.array(bom), pc.utf8_slice_codeunits(body, 1), body)
    at = np.concatenate([p for p, _ in pieces])
    maps_all = pa.concat_arrays([x for _, x in pieces])
    order = np.argsort(at, kind="stable")
    sd_col = maps_all.take(pa.array(order))
    if len(at) < m:  # rows refused above: any value, they are dropped with ``ok``
        filled = np.zeros(m, bool)
        filled[at] = True
        sd_col = _spread(sd_col, filled)
    return body, sd_col, ok


def _put(values: pa.Array, at: np.ndarray, new: pa.Array) -> pa.Array:
    """``values`` with ``new`` at the positions ``at`` (ascending)."""
    if not len(at):
        return values
    mask = np.zeros(len(values), bool)
    mask[at] = True
    return pc.replace_with_mask(values, pa.array(mask), new)


def _spread(values: pa.Array, filled: np.ndarray) -> pa.Array:
    """``values`` placed at the true positions of ``filled``, nulls elsewhere."""
    index = np.full(len(filled), -1, np.int64)
    index[filled] = np.arange(int(filled.sum()))
    return values.take(pa.array(index, mask=index < 0))


def _split2(values: pa.Array, sep: str) -> tuple[pa.Array, pa.Array]:
    """``values`` split at the first ``sep``: (before, after; "" when there is none)."""
    parts = pc.split_pattern(values, sep, max_splits=1)
    start = _np(parts.offsets)[:-1]
    two = np.diff(_np(parts.offsets)) == 2
    flat = parts.values
    before = flat.take(pa.array(start))
    after = flat.take(pa.array(np.where(two, start + 1, start)))
    return before, pc.if_else(pa.array(two), after, "")


def _rfc3164(text: pa.Array, rows: np.ndarray) -> tuple[np.ndarray, dict[str, pa.Array]]:
    # the shape checked by a match (RE2's DFA), the fields cut by splits and fixed slices:
    # capturing submatches (extract_regex) cost several times more
    sub = text.take(pa.array(rows))
    ok = _np(pc.fill_null(pc.match_substring_regex(sub, _3164_MATCH_RE), False))
    rows, sub = rows[ok], sub.filter(pa.array(ok))
    has_pri = _np(pc.starts_with(sub, "<"))
    pri_text, after_pri = _split2(sub, ">")
    pri_text = pc.if_else(pa.array(has_pri), pc.utf8_slice_codeunits(pri_text, 1), "")
    rest = pc.if_else(pa.array(has_pri), after_pri, sub)
    pri, ok = _pri(pri_text)
    bsd = ~_np(pc.fill_null(pc.match_substring_regex(rest, "^[0-9]"), False))
    stamp = pc.utf8_slice_codeunits(rest, 0, 15)  # Mmm dd hh:mm:ss
    iso_text, iso_after = _split2(rest, " ")
    after = pc.if_else(pa.array(bsd), pc.utf8_slice_codeunits(rest, 16), iso_after)
    if bsd.any():
        parts = {
            "mon": pc.utf8_slice_codeunits(stamp, 0, 3),
            "day": pc.utf8_slice_codeunits(stamp, 4, 6),
            "hh": pc.utf8_slice_codeunits(stamp, 7, 9),
            "mm": pc.utf8_slice_codeunits(stamp, 10, 12),
            "ss": pc.utf8_slice_codeunits(stamp, 13, 15),
        }
        if not bsd.all():  # the RFC 3339 lines' slices are not a BSD time: zeros, refused
            parts = {k: pc.if_else(pa.array(bsd), v, "") for k, v in parts.items()}
        bsd_ts = _bsd_times(parts)
    if not len(bsd):
        ts = pa.array([], pa.float64())
    elif bsd.all():
        ts = bsd_ts
    else:
        iso = _times(pc.if_else(pa.array(bsd), _NULL_STR, iso_text), parse_rfc3339)
        ts = pc.if_else(pa.array(bsd), bsd_ts, iso) if bsd.any() else iso
    ok &= _np(pc.is_valid(ts))
    host, body = _split2(after, " ")
    app, procid, body = _tags(body)
    count = len(body)
    cols = {
        "pri": pri,
        "ts": ts,
        "host": host,
        "app": app,
        "procid": procid,
        "msgid": pa.nulls(count, pa.string()),
        "body": body,
        "sd": pa.array([[]] * count, SD_TYPE),
        "syslog_version": pa.nulls(count, pa.int64()),
    }
    return _keep(rows, cols, ok)


def _tags(body: pa.Array) -> tuple[pa.Array, pa.Array, pa.Array]:
    """``app``, ``procid`` and the rest of MSG after the row parser's ``TAG[PID]: ?`` prefix
    (None, None, MSG where there is none). The two shapes are told apart by RE2 matches (the
    row parser's pattern tries the ``[PID]`` form first) and cut by splits: APP holds no
    ``:``, ``[`` or ``]`` and PID no ``]``."""
    m = len(body)
    app = procid = pa.nulls(m, pa.string())
    with_pid = _np(pc.fill_null(pc.match_substring_regex(body, _TAG_PID_RE), False))
    plain = ~with_pid & _np(pc.fill_null(pc.match_substring_regex(body, _TAG_PLAIN_RE), False))
    if with_pid.any():
        head, tail = _split2(body, "]")  # APP[PID | : rest
        name, pid = _split2(head, "[")
        mask = pa.array(with_pid)
        app = pc.if_else(mask, name, app)
        procid = pc.if_else(mask, pid, procid)
        body = pc.if_else(mask, _one_space_off(pc.utf8_slice_codeunits(tail, 1)), body)
    if plain.any():
        name, tail = _split2(body, ":")
        mask = pa.array(plain)
        app = pc.if_else(mask, name, app)
        body = pc.if_else(mask, _one_space_off(tail), body)
    return app, procid, body


def _one_space_off(values: pa.Array) -> pa.Array:
    """One leading space removed (the row parser's `` ?`` after the tag's colon)."""
    return pc.if_else(pc.starts_with(values, " "), pc.utf8_slice_codeunits(values, 1), values)
