"""The syslog kernel (RFC 3164 and RFC 5424) in vectorized Arrow compute.

Contract: rows equal :class:`~agent.ingest.formats.SyslogParser`'s, with the columns of
:data:`SCHEMA` (``sd`` as ``map<string, map<string, string>>``); a line whose shape this
kernel does not verify is left to that parser (``KernelResult.fallback``). Verified here, with
RE2 ``extract_regex`` on the lines (header tokens printable ASCII, where RE2 and Python's
``\\S`` agree):

* RFC 5424 ``<PRI>1 TIMESTAMP HOST APP PROCID MSGID SD[ MSG]``: PRI 0..191 without leading
  zeros, a timestamp (not ``-``: that is the arrival time) that
  :func:`~agent.ingest.formats.parse_rfc3339` reads (once per distinct value) and that has a
  ``T``; structured data ``-`` is read here, ``[...]`` by the row parser's own
  :func:`~agent.ingest.formats.structured_data_and_msg` (per line, SD part only);
* RFC 3164 ``[<PRI>]Mmm dd hh:mm:ss HOST REST`` (BSD time converted with numpy by the row
  parser's rule: UTC, the valid date of the years around now's closest to now; "now" is read
  once per chunk, where the row parser reads it once per distinct time string) or with an
  RFC 3339 time (rsyslog's high-precision file format); the ``TAG[PID]:`` prefix of REST
  with the row parser's pattern, Python's ``\\s`` spelled out for RE2.
"""

from __future__ import annotations

import sys
import time
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from agent.ingest.columnar.base import KernelResult, project, select
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


def _python_space_class() -> str:
    """Python's ``\\s`` on text (``str.isspace``) as an RE2 character class body."""
    spaces = [c for c in range(sys.maxunicode + 1) if chr(c).isspace()]
    return "".join(f"\\x{{{c:x}}}" for c in spaces)


_S = _python_space_class()
_PRI = r"<(?P<pri>0|[1-9][0-9]{0,2})>"
_RFC3339 = (
    r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]{1,9})?"
    r"(?:Z|[+-][0-9]{2}:[0-9]{2})"
)
_5424_RE = (
    "^" + _PRI + r"1 (?P<ts>[!-~]+) (?P<host>[!-~]{1,255}) (?P<app>[!-~]{1,48}) "
    r"(?P<procid>[!-~]{1,128}) (?P<msgid>[!-~]{1,32}) (?P<rest>.*)$"
)
_3164_RE = (
    "^(?:" + _PRI + r")?(?:(?P<mon>[A-Z][a-z]{2}) (?P<day>[ 0-9][0-9]) "
    r"(?P<hh>[0-9]{2}):(?P<mm>[0-9]{2}):(?P<ss>[0-9]{2})|(?P<iso>" + _RFC3339 + r")) "
    r"(?P<host>[^ ]+)(?: (?P<body>.*))?$"
)
_TAG_RE = (
    r"^(?P<app>[^" + _S + r":\[\]]{1,64})(?:\[(?P<procid>[^\]" + _S + r"]{1,64})\])?: ?"
    r"(?P<body>.*)$"
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


def _bsd_times(m: pa.StructArray) -> pa.Array:
    """RFC 3164 times (no year, UTC) as :meth:`SyslogParser._bsd_ts` computes them, on
    arrays: of the years before, of and after now's, the valid date closest to now; null
    where the row parser refuses the time (no such date or time)."""
    enc = m.field("mon").dictionary_encode()
    month_of = np.array([MONTHS.get(x or "", 0) for x in enc.dictionary.to_pylist()], np.int64)
    month = month_of[_np(enc.indices)]

    def ints(name: str) -> np.ndarray:
        text = pc.utf8_ltrim(m.field(name), " ")  # "" on the lines with an RFC 3339 time
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
    m = pc.extract_regex(text.take(pa.array(rows)), _5424_RE)
    ok = _np(pc.is_valid(m))
    rows, m = rows[ok], m.filter(pa.array(ok))
    pri, ok = _pri(m.field("pri"))
    ts = _per_distinct(m.field("ts"), _rfc5424_ts)
    ok &= _np(pc.is_valid(ts))
    cols = {
        "pri": pri,
        "ts": ts,
        "host": _dash(m.field("host")),
        "app": _dash(m.field("app")),
        "procid": _dash(m.field("procid")),
        "msgid": _dash(m.field("msgid")),
        "rest": m.field("rest"),
    }
    rows, cols = _keep(rows, cols, ok)
    rest = cols.pop("rest")
    # structured data "-": MSG after one space (a leading BOM removed); "[...]": the row
    # parser's own SD reader, per line
    nil = _np(pc.fill_null(pc.match_substring_regex(rest, r"^-(?: |$)"), False))
    body = pc.utf8_slice_codeunits(rest, 2)
    sd_rows = np.flatnonzero(~nil)
    sd_maps: list[Any] = [[] for _ in range(len(rest))]
    ok = nil.copy()
    if len(sd_rows):
        texts = rest.take(pa.array(sd_rows)).to_pylist()
        msgs = body.to_pylist()
        for i, value in zip(sd_rows.tolist(), texts, strict=True):
            try:
                sd, msg = structured_data_and_msg(value, 0)
            except RecordError:
                continue
            sd_maps[i] = [(k, list(v.items())) for k, v in sd.items()]
            msgs[i] = msg
            ok[i] = True
        body = pa.array(msgs, pa.string())
    bom = _np(pc.fill_null(pc.starts_with(body, "\ufeff"), False)) & nil
    if bom.any():
        body = pc.if_else(pa.array(bom), pc.utf8_slice_codeunits(body, 1), body)
    cols["body"] = body
    cols["sd"] = pa.array(sd_maps, SD_TYPE)
    cols["syslog_version"] = pa.array(np.ones(len(rest), np.int64))
    return _keep(rows, cols, ok)


def _rfc3164(text: pa.Array, rows: np.ndarray) -> tuple[np.ndarray, dict[str, pa.Array]]:
    m = pc.extract_regex(text.take(pa.array(rows)), _3164_RE)
    ok = _np(pc.is_valid(m))
    rows, m = rows[ok], m.filter(pa.array(ok))
    pri, ok = _pri(m.field("pri"))
    bsd = _np(pc.not_equal(m.field("mon"), ""))
    if bsd.all():
        ts = _bsd_times(m)
    else:
        iso = _per_distinct(pc.if_else(pa.array(bsd), _NULL_STR, m.field("iso")), parse_rfc3339)
        ts = pc.if_else(pa.array(bsd), _bsd_times(m), iso) if bsd.any() else iso
    ok &= _np(pc.is_valid(ts))
    body = m.field("body")  # "" when the line ends after HOST (the regex's group is optional)
    tag = pc.extract_regex(body, _TAG_RE)
    tagged = _np(pc.is_valid(tag))
    mask = pa.array(tagged)
    if tagged.any():
        app = pc.if_else(mask, tag.field("app"), _NULL_STR)
        procid = pc.if_else(mask, tag.field("procid"), _NULL_STR)
        # an absent optional group is "" in extract_regex: the row parser gives None
        procid = pc.if_else(pc.equal(procid, ""), _NULL_STR, procid)
        body = pc.if_else(mask, tag.field("body"), body)
    else:
        app = procid = pa.nulls(len(body), pa.string())
    count = len(body)
    cols = {
        "pri": pri,
        "ts": ts,
        "host": m.field("host"),
        "app": app,
        "procid": procid,
        "msgid": pa.nulls(count, pa.string()),
        "body": body,
        "sd": pa.array([[]] * count, SD_TYPE),
        "syslog_version": pa.nulls(count, pa.int64()),
    }
    return _keep(rows, cols, ok)
