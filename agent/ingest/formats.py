"""Line formats of the log inputs: access logs, syslog, raw text and JSON lines.

Contract: every parser implements :class:`~agent.ingest.records.LineParser`: ``parse(line)`` takes
one
line (``bytes`` or ``str``, without its newline; a trailing ``\\r`` is ignored) and returns the
paper's event as a ``dict`` with

* ``ts`` — event time, float seconds since the Unix epoch,
* ``source_ip`` — the client / sending host (``None`` when the format has none),
* ``priority`` — a syslog severity 0..7 (access logs: 3 for 5xx, 4 for 4xx, else 6; ``None``
  when unknown),
* ``body`` — the payload text (access log: the request line; syslog: MSG; raw: the line),

plus the format's own fields (listed per parser below), or raises
:class:`~agent.ingest.records.RecordError` whose ``reason`` says what was wrong
(``bad_access_line``,
``bad_syslog_line``, ``bad_syslog_pri``, ``bad_structured_data``, ``bad_timestamp``,
``bad_encoding``; JSON: the reasons of :class:`~agent.ingest.records.RecordValidator`) and whose
message names the offending part. No parser raises anything else on any input (property-tested
on random garbage). Bytes are decoded as UTF-8; invalid sequences are replaced (U+FFFD), not
rejected - a log line with one bad byte is still an event - and counted in the parser's
``repairs`` (:class:`~agent.ingest.records.EncodingRepairs`; ``make_parser(repairs=)`` shares one).

:func:`make_parser` builds a parser by format name (:data:`FORMATS`). Timestamps are in UTC
unless the line carries an offset (RFC 3164 lines carry neither year nor zone: UTC and the
year that puts the time closest to "now" are assumed).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qsl, unquote

from agent.ingest.records import (
    EncodingRepairs,
    LineParser,
    RecordError,
    RecordValidator,
    decode_line,
)

FORMATS = ("json", "nginx", "apache", "syslog", "raw")

MONTHS = {
    m: i + 1
    for i, m in enumerate(
        ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
    )
}
_DAYS_IN_MONTH = (31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)
_TS_CACHE_MAX = 4096


def line_text(line: bytes | str, repairs: EncodingRepairs | None = None) -> str:
    """The text of one log line as every parser reads it: bytes decoded (invalid UTF-8
    replaced and counted in ``repairs``), one trailing ``\\r`` removed; anything but bytes or
    str is a ``bad_encoding`` :class:`RecordError`."""
    if isinstance(line, str):
        text = line
    else:
        try:
            text = decode_line(line, repairs)
        except TypeError:
            raise RecordError("bad_encoding", "a line must be bytes or str") from None
    return text[:-1] if text.endswith("\r") else text


def matched_line(
    line: bytes | str, repairs: EncodingRepairs, match: Callable[[str], Any], refusal: str
) -> tuple[str, Any, int]:
    """The prologue of the regex line parsers (access logs, custom log formats):
    ``(text, m, before)``: the line's :func:`line_text` (bad bytes replaced and counted in
    ``repairs``), ``match(text)`` (a pattern's ``fullmatch``) and ``repairs.lines`` before
    the line (for :func:`count_repaired`). No match is a ``bad_access_line``
    :class:`RecordError`: ``<refusal>: <the line>``."""
    before = repairs.lines
    text = line_text(line, repairs)
    m = match(text)
    if m is None:
        raise RecordError("bad_access_line", f"{refusal}: {short_repr(text)}")
    return text, m, before


def count_repaired(repairs: EncodingRepairs, before: int, bad: bool) -> None:
    """Count the line once as repaired when a decoded escape held invalid UTF-8 (``bad``) and
    its bytes did not count it already (``repairs.lines`` still ``before``)."""
    if bad and repairs.lines == before:
        repairs.lines += 1


def short_repr(text: str, n: int = 60) -> str:
    """``text`` quoted for an error message, cut to about ``n`` characters."""
    return repr(text) if len(text) <= n else repr(text[: n - 3]) + "..."


def days_from_civil(y: int, m: int, d: int) -> int:
    """Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's algorithm)."""
    y -= m <= 2
    era = (y if y >= 0 else y - 399) // 400
    yoe = y - era * 400
    doy = (153 * (m + (-3 if m > 2 else 9)) + 2) // 5 + d - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe - 719468


def _valid_date(y: int, m: int, d: int) -> bool:
    if not 1 <= m <= 12 or d < 1 or d > _DAYS_IN_MONTH[m - 1]:
        return False
    return not (m == 2 and d == 29 and (y % 4 or (y % 100 == 0 and y % 400)))


def _epoch(y: int, mo: int, d: int, h: int, mi: int, s: int, what: str) -> int:
    if not (_valid_date(y, mo, d) and h < 24 and mi < 60 and s < 61):
        raise RecordError("bad_timestamp", f"{what}: no such date/time")
    return days_from_civil(y, mo, d) * 86400 + h * 3600 + mi * 60 + min(s, 59)


_RFC3339_RE = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(\.\d{1,9})?(Z|[+-]\d{2}:\d{2})"
)
_rfc3339_cache: dict[str, float] = {}


def parse_rfc3339(text: str) -> float:
    """Epoch seconds of an RFC 3339 / ISO-8601 date-time (naive: UTC), else RecordError.
    The common ``YYYY-MM-DDTHH:MM:SS[.frac](Z|±hh:mm)`` form takes a fast path that caches
    the whole seconds per distinct (date-time, zone)."""
    m = _RFC3339_RE.fullmatch(text)
    if m is not None:
        frac, zone = m.group(7), m.group(8)
        key = text[:19] + zone
        base = _rfc3339_cache.get(key)
        if base is None:
            y, mo, d, h, mi, sec = (int(g) for g in m.groups()[:6])
            epoch = _epoch(y, mo, d, h, mi, sec, f"RFC 3339 timestamp {short_repr(text)}")
            if zone != "Z":
                off = int(zone[1:3]) * 3600 + int(zone[4:6]) * 60
                if int(zone[1:3]) > 23 or int(zone[4:6]) > 59:
                    raise RecordError("bad_timestamp", f"bad UTC offset in {short_repr(text)}")
                epoch = epoch - off if zone[0] == "+" else epoch + off
            base = float(epoch)
            if len(_rfc3339_cache) >= _TS_CACHE_MAX:
                _rfc3339_cache.clear()
            _rfc3339_cache[key] = base
        return base + float(frac) if frac else base
    try:
        dt = datetime.fromisoformat(text)
    except ValueError:
        raise RecordError(
            "bad_timestamp", f"not an RFC 3339 timestamp: {short_repr(text)}"
        ) from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return dt.timestamp()


# ---- access logs (nginx / Apache, combined and common) -----------------------------------------

# a quoted field (nginx escapes " as \x22, Apache as \"); the "unrolled loop" form is several
# times faster in ``re`` than ``(?:[^"\\]|\\.)*``
_Q = r'"([^"\\]*(?:\\.[^"\\]*)*)"'
ACCESS_RE = re.compile(
    r"(\S+) (\S+) (\S+) \[([^\]]*)\] "
    + _Q
    + r" (\d{3}|-) (\d+|-)(?: "
    + _Q
    + " "
    + _Q
    + r")?(?: (.*))?"
)
_CLF_TS_RE = re.compile(
    r"(\d{2})/([A-Z][a-z]{2})/(\d{4}):(\d{2}):(\d{2}):(\d{2}) ([+-])(\d{2})(\d{2})"
)


def parse_query(qs: str) -> dict[str, str]:
    """Query-string parameters (``a=1&b=x%20y``), URL-decoded, blank values kept, the last
    value of a repeated name wins; as ``urllib.parse.parse_qsl`` but without its per-pair
    overhead on the common case (no ``%`` or ``+``)."""
    if "%" in qs or "+" in qs or ";" in qs:
        return dict(parse_qsl(qs, keep_blank_values=True))
    out: dict[str, str] = {}
    for pair in qs.split("&"):
        if pair:
            name, _, value = pair.partition("=")
            out[name] = value
    return out


def severity_of_status(status: int | None) -> int:
    """The syslog severity an access-log line gets: 3 (error) for 5xx, 4 (warning) for 4xx,
    6 (informational) otherwise."""
    if status is None:
        return 6
    return 3 if status >= 500 else 4 if status >= 400 else 6


def _dash(value: str) -> str | None:
    return None if value == "-" else value


#: the bytes nginx writes as ``\\xHH`` inside a logged variable (``ngx_http_log_escape``: ``"``,
#: ``\\``, controls and everything from 0x7f up); Apache escapes the same control/high bytes
_ESCAPED_BYTES = frozenset(b'"\\') | frozenset(range(0x20)) | frozenset(range(0x7F, 0x100))
_ESCAPE_RE = re.compile(r'\\(?:x([0-9A-Fa-f]{2})|(["\\]))')


def _escape_piece(m: re.Match[str]) -> str:
    """One escape as a latin-1 character standing for its byte (see :func:`decode_escapes`)."""
    hexa, char = m.groups()
    if char is not None:
        return char  # Apache's \" and \\ (a latin-1 char below 0x80 is its own byte)
    byte = int(hexa, 16)
    # a byte nginx would not escape was written literally: ``\x41`` is four characters
    return chr(byte) if byte in _ESCAPED_BYTES else m.group()


def decode_escapes(value: str) -> tuple[str, bool]:
    """A quoted access-log field with its escapes undone: nginx's ``\\xHH`` (for the bytes it
    escapes: ``"``, ``\\``, controls, 0x7f-0xff) become those bytes and Apache's ``\\"`` /
    ``\\\\`` a quote / backslash; the bytes are then read as UTF-8, invalid sequences
    replaced by U+FFFD. Returns ``(text, repaired)``, ``repaired`` True when a replacement was
    needed. ``\\xHH`` of any other byte is kept as written (nginx never writes it, and keeping
    it keeps the pushdown of :mod:`agent.ql.pushdown` exact: no escape decodes to a printable
    ASCII character other than a quote or backslash)."""
    if "\\" not in value:
        return value, False
    if "\\x" not in value:  # only Apache's two escapes: no bytes to reassemble
        return _ESCAPE_RE.sub(lambda m: m.group(2) or m.group(), value), False
    # characters outside the escapes are UTF-8-encoded, escaped bytes are latin-1 placeholders
    out = bytearray()
    pos = 0
    for m in _ESCAPE_RE.finditer(value):
        out += value[pos : m.start()].encode("utf-8", "surrogatepass")
        out += _escape_piece(m).encode("latin-1") if m.group(1) else m.group(2).encode()
        pos = m.end()
    out += value[pos:].encode("utf-8", "surrogatepass")
    raw = bytes(out)
    try:
        return raw.decode("utf-8"), False
    except UnicodeDecodeError:
        return raw.decode("utf-8", "replace"), True


def _unescape(value: str) -> str:
    """:func:`decode_escapes` without the repair flag (callers that count it use that)."""
    return decode_escapes(value)[0]


#: an absolute-form request target (RFC 9112 3.2.2): ``scheme://authority`` then the path
_ABSOLUTE_RE = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://([^/?#]*)")


def split_target(target: str) -> tuple[str | None, str | None, str]:
    """``(scheme, host, rest)`` of a request target: an absolute-form target
    (``http://example.com:8080/p?x=1``) gives its scheme and authority (host with port, as
    written) and the rest from the path on (``/p?x=1``; ``/`` when it has no path);
    origin-form and anything else give ``(None, None, target)``."""
    if "://" not in target:
        return None, None, target
    m = _ABSOLUTE_RE.match(target)
    if m is None:
        return None, None, target
    rest = target[m.end() :]
    if not rest.startswith("/"):
        rest = "/" + rest
    return m.group(1), m.group(2), rest


ACCESS_REFUSAL = "not a combined/common access-log line"


class AccessLogParser:
    """nginx/Apache access logs, *combined* (with referer and user agent) or *common* format.

    Fields: ``remote_user``, ``ident``, ``request``, ``method``, ``scheme`` and ``host`` (of an
    absolute-form target ``http://host:port/p``, else None), ``path`` (from its ``/``, without
    the query),
    ``query`` (dict of the query-string parameters, URL-decoded, last value wins), ``protocol``,
    ``status`` (int or None for ``-``), ``bytes`` (int, 0 for ``-``), ``referer``,
    ``user_agent`` (None for ``-`` or absent), ``extra`` (anything after the user agent, e.g.
    nginx's ``$http_x_forwarded_for``, else absent). Quoted fields (request, referer, user
    agent) have their escapes decoded (:func:`decode_escapes`: nginx ``\\xHH``, Apache
    ``\\"``), invalid UTF-8 in them replaced and counted like a bad byte of the line. A
    request that is not ``METHOD TARGET PROTOCOL`` (probes send anything) keeps
    ``method``/``path`` None; the line is still an event. Timestamps
    (``[21/Nov/2026:20:11:10 +0100]``) are cached per distinct string, so a busy log parses
    each second once.
    """

    def __init__(self, *, repairs: EncodingRepairs | None = None) -> None:
        self._ts_cache: dict[str, float] = {}
        self._match = ACCESS_RE.fullmatch
        self.repairs = repairs if repairs is not None else EncodingRepairs()

    def timestamp(self, text: str) -> float:
        """Epoch seconds of an access-log time (``21/Nov/2026:20:11:10 +0100``), cached per
        distinct string; a malformed one is a ``bad_timestamp`` :class:`RecordError`."""
        ts = self._ts_cache.get(text)
        if ts is not None:
            return ts
        m = _CLF_TS_RE.fullmatch(text)
        month = MONTHS.get(m.group(2)) if m else None
        if m is None or month is None:
            raise RecordError(
                "bad_timestamp",
                f"access-log time {short_repr(text)} is not dd/Mon/yyyy:HH:MM:SS +zzzz",
            )
        d, _, y, hh, mm, ss, sign, zh, zm = m.groups()
        base = _epoch(int(y), month, int(d), int(hh), int(mm), int(ss), f"time {short_repr(text)}")
        offset = int(zh) * 3600 + int(zm) * 60
        ts = float(base - offset if sign == "+" else base + offset)
        if len(self._ts_cache) >= _TS_CACHE_MAX:
            self._ts_cache.clear()
        self._ts_cache[text] = ts
        return ts

    def parse(self, line: bytes | str) -> dict[str, Any]:
        text, m, before = matched_line(line, self.repairs, self._match, ACCESS_REFUSAL)
        ip, ident, user, ts_text, request, status, size, referer, agent, extra = m.groups()
        bad = False  # an escaped byte sequence that is not UTF-8 (counted once per line)
        if "\\" in text:
            request, bad = decode_escapes(request)
            if referer is not None:
                referer, bad_ref = decode_escapes(referer)
                agent, bad_agent = decode_escapes(agent)
                bad = bad or bad_ref or bad_agent
        count_repaired(self.repairs, before, bad)
        event: dict[str, Any] = {
            "ts": self.timestamp(ts_text),
            "source_ip": ip,
            "body": request,
            "ident": _dash(ident),
            "remote_user": _dash(user),
            "request": request,
        }
        event.update(split_request(request))
        code = None if status == "-" else int(status)
        event["priority"] = severity_of_status(code)
        event["status"] = code
        event["bytes"] = 0 if size == "-" else int(size)
        event["referer"] = None if referer is None else _dash(referer)
        event["user_agent"] = None if agent is None else _dash(agent)
        if extra:
            event["extra"] = extra
        return event


def split_request(request: str, *, query: bool = True) -> dict[str, Any]:
    """``method``, ``scheme``, ``host``, ``path``, ``query`` and ``protocol`` of a (decoded)
    request line ``METHOD TARGET PROTOCOL`` (or ``METHOD /TARGET``, HTTP/0.9); all None (query
    ``{}``) when the request has another shape. ``scheme``/``host`` are set only for an
    absolute-form target (:func:`split_target`); ``path`` is URL-decoded, without the query.
    ``query=False`` skips parsing the query string (``query`` stays ``{}``)."""
    parts = request.split(" ")
    method = path = protocol = scheme = host = None
    params: dict[str, str] = {}
    if len(parts) == 3 or (len(parts) == 2 and parts[1].startswith("/")):
        method, target = parts[0], parts[1]
        protocol = parts[2] if len(parts) == 3 else None
        scheme, host, target = split_target(target)
        path, sep, qs = target.partition("?")
        if sep and query:
            params = parse_query(qs)
        if "%" in path:
            path = unquote(path)
    return {
        "method": method,
        "scheme": scheme,
        "host": host,
        "path": path,
        "query": params,
        "protocol": protocol,
    }


# ---- syslog (RFC 3164 and RFC 5424) ------------------------------------------------------------

_PRI_RE = re.compile(r"<(\d{1,3})>")
_BSD_TS_RE = re.compile(r"([A-Z][a-z]{2}) ([ \d]\d) (\d{2}):(\d{2}):(\d{2}) ")
_ISO_TS_RE = re.compile(
    r"(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d{1,9})?(?:Z|[+-]\d{2}:\d{2})) "
)
_TAG_RE = re.compile(r"([^\s:\[\]]{1,64})(?:\[([^\]\s]{1,64})\])?: ?")
_5424_HEAD_RE = re.compile(r"1 (\S+) (\S{1,255}) (\S{1,48}) (\S{1,128}) (\S{1,32}) ")
_SD_NAME = r'[^\s=\]"]{1,32}'
_SD_VALUE = r'"([^"\\]*(?:\\.[^"\\]*)*)"'  # unrolled: fast in ``re``
# all SD-ELEMENTs at once, then one pass over their tokens: "[SD-ID" or 'NAME="VALUE"'
_SD_BLOCK_RE = re.compile(
    r"(?:\[" + _SD_NAME + r"(?: " + _SD_NAME + "=" + _SD_VALUE.replace("(", "(?:", 1) + r")* ?\])+"
)
_SD_TOKEN_RE = re.compile(r"\[(" + _SD_NAME + r")|(" + _SD_NAME + r")=" + _SD_VALUE)
_SD_UNESCAPE_RE = re.compile(r"\\([\"\\\]])")
_BOM = "\ufeff"
FACILITIES = (
    "kern", "user", "mail", "daemon", "auth", "syslog", "lpr", "news", "uucp", "cron",
    "authpriv", "ftp", "ntp", "security", "console", "solaris-cron",
    "local0", "local1", "local2", "local3", "local4", "local5", "local6", "local7",
)  # fmt: skip


def structured_data_and_msg(text: str, pos: int) -> tuple[dict[str, dict[str, str]], str]:
    """RFC 5424 STRUCTURED-DATA at ``text[pos:]`` (``-`` or ``[ID NAME="VALUE" ...]...``,
    escapes undone) and the MSG after it (a leading BOM removed), else RecordError
    (``bad_structured_data``)."""
    sd: dict[str, dict[str, str]] = {}
    if text.startswith("-", pos):
        pos += 1
    elif text.startswith("[", pos):
        bm = _SD_BLOCK_RE.match(text, pos)
        end = bm.end() if bm is not None else pos
        if bm is None or text.startswith("[", end):
            raise RecordError(
                "bad_structured_data",
                f"malformed structured data at column {end}: {short_repr(text[end:], 40)}",
            )
        params: dict[str, str] = {}
        for sd_id, name, value in _SD_TOKEN_RE.findall(bm.group()):
            if sd_id:
                params = sd[sd_id] = {}
            else:
                params[name] = _SD_UNESCAPE_RE.sub(r"\1", value) if "\\" in value else value
        pos = end
    else:
        raise RecordError(
            "bad_structured_data",
            "expected '-' or '[' for structured data at column "
            f"{pos}: {short_repr(text[pos:], 40)}",
        )
    if pos < len(text):
        if text[pos] != " ":
            raise RecordError(
                "bad_structured_data", f"no space after structured data at column {pos}"
            )
        pos += 1
    msg = text[pos:]
    if msg.startswith(_BOM):
        msg = msg[1:]
    return sd, msg


class SyslogParser:
    """Syslog lines, RFC 5424 (``<PRI>1 TIMESTAMP HOST APP PROCID MSGID SD MSG``) or RFC 3164
    (``<PRI>Mmm dd hh:mm:ss HOST TAG[PID]: MSG``; the ``<PRI>`` is optional, as in files
    rsyslog writes, and an RFC 3339 timestamp in place of the BSD one is accepted, as in
    rsyslog's high-precision file format). Detected per line.

    Fields: ``facility`` (0..23), ``facility_name``, ``severity`` (= ``priority``, 0..7; both
    None without ``<PRI>``), ``syslog_version`` (1 or None for 3164), ``host``, ``app``,
    ``procid``, ``msgid`` (5424; NILVALUE ``-`` gives None), ``sd`` (5424 structured data:
    ``{sd_id: {param: value}}``, escapes undone), ``body`` (MSG with a leading BOM removed).
    ``source_ip`` is the HOST field (syslog has no separate sender address in the line). A 5424
    NILVALUE timestamp means "unknown": ``ts`` is the arrival time. ``clock`` (default
    ``time.time``) gives "now" for that and for the year of 3164 timestamps.
    """

    def __init__(
        self,
        *,
        clock: Callable[[], float] = time.time,
        repairs: EncodingRepairs | None = None,
    ) -> None:
        self.clock = clock
        self._bsd_cache: dict[str, float] = {}
        self.repairs = repairs if repairs is not None else EncodingRepairs()

    def parse(self, line: bytes | str) -> dict[str, Any]:
        text = line_text(line, self.repairs)
        pri: int | None = None
        pos = 0
        if text.startswith("<"):
            m = _PRI_RE.match(text)
            if m is None:
                raise RecordError("bad_syslog_pri", f"bad <PRI> at the start of {short_repr(text)}")
            digits = m.group(1)
            pri = int(digits)
            if pri > 191 or (len(digits) > 1 and digits[0] == "0"):
                raise RecordError(
                    "bad_syslog_pri", f"<PRI> must be 0..191 without leading zeros, got <{digits}>"
                )
            pos = m.end()
        if pri is not None and text.startswith("1 ", pos):
            event = self._rfc5424(text, pos)
        else:
            event = self._rfc3164(text, pos)
        if pri is None:
            event["facility"] = event["facility_name"] = event["severity"] = None
            event["priority"] = None
        else:
            fac = pri >> 3
            event["facility"] = fac
            event["facility_name"] = FACILITIES[fac]
            event["severity"] = event["priority"] = pri & 7
        return event

    # RFC 5424 -----------------------------------------------------------------------------
    def _rfc5424(self, text: str, pos: int) -> dict[str, Any]:
        m = _5424_HEAD_RE.match(text, pos)
        if m is None:
            raise RecordError(
                "bad_syslog_line",
                f"RFC 5424 header (VERSION TIMESTAMP HOST APP PROCID MSGID) malformed in "
                f"{short_repr(text)}",
            )
        ts_text, host, app, procid, msgid = m.groups()
        ts = self.clock() if ts_text == "-" else parse_rfc3339(ts_text)
        if ts_text != "-" and "T" not in ts_text:
            raise RecordError("bad_timestamp", f"RFC 5424 timestamp needs a time: {ts_text!r}")
        sd, msg = structured_data_and_msg(text, m.end())
        return {
            "ts": ts,
            "source_ip": _dash(host),
            "body": msg,
            "syslog_version": 1,
            "host": _dash(host),
            "app": _dash(app),
            "procid": _dash(procid),
            "msgid": _dash(msgid),
            "sd": sd,
        }

    # RFC 3164 -----------------------------------------------------------------------------
    def _bsd_ts(self, mon: str, day: str, hh: str, mm: str, ss: str) -> float:
        key = f"{mon}{day}{hh}{mm}{ss}"
        ts = self._bsd_cache.get(key)
        if ts is not None:
            return ts
        month = MONTHS.get(mon)
        if month is None:
            raise RecordError("bad_timestamp", f"unknown month {mon!r} in an RFC 3164 timestamp")
        now = self.clock()
        year = time.gmtime(now).tm_year
        best: float | None = None
        for y in (year - 1, year, year + 1):  # no year in the line: the one closest to now
            if not _valid_date(y, month, int(day)):
                continue
            cand = float(_epoch(y, month, int(day), int(hh), int(mm), int(ss), "timestamp"))
            if best is None or abs(cand - now) < abs(best - now):
                best = cand
        if best is None:
            raise RecordError("bad_timestamp", f"no such date: {mon} {day.strip()}")
        if len(self._bsd_cache) >= _TS_CACHE_MAX:
            self._bsd_cache.clear()
        self._bsd_cache[key] = best
        return best

    def _rfc3164(self, text: str, pos: int) -> dict[str, Any]:
        m = _BSD_TS_RE.match(text, pos)
        if m is not None:
            ts = self._bsd_ts(*m.groups())
        else:
            m = _ISO_TS_RE.match(text, pos)
            if m is None:
                raise RecordError(
                    "bad_timestamp" if pos else "bad_syslog_line",
                    f"expected an RFC 3164 'Mmm dd hh:mm:ss' or RFC 3339 timestamp at column "
                    f"{pos}: {short_repr(text[pos:], 40)}",
                )
            ts = parse_rfc3339(m.group(1))
        pos = m.end()
        host, sp, rest = text[pos:].partition(" ")
        if not host:
            raise RecordError(
                "bad_syslog_line", f"no HOSTNAME after the timestamp in {short_repr(text)}"
            )
        app = procid = None
        body = rest if sp else ""
        tm = _TAG_RE.match(body)
        if tm is not None:
            app, procid = tm.group(1), tm.group(2)
            body = body[tm.end() :]
        return {
            "ts": ts,
            "source_ip": host,
            "body": body,
            "syslog_version": None,
            "host": host,
            "app": app,
            "procid": procid,
            "msgid": None,
            "sd": {},
        }


# ---- raw text and JSON -------------------------------------------------------------------------


class RawParser:
    """Raw text: the line is the ``body``; ``ts`` is the arrival time (``clock()``), ``source_ip``
    and ``priority`` are None. Never rejects a line (blank lines are skipped by the inputs)."""

    def __init__(
        self,
        *,
        clock: Callable[[], float] = time.time,
        repairs: EncodingRepairs | None = None,
    ) -> None:
        self.clock = clock
        self.repairs = repairs if repairs is not None else EncodingRepairs()

    def parse(self, line: bytes | str) -> dict[str, Any]:
        body = line_text(line, self.repairs)
        return {"ts": self.clock(), "source_ip": None, "priority": None, "body": body}


def make_parser(
    fmt: str,
    *,
    ts_field: str = "ts",
    clock: Callable[[], float] = time.time,
    repairs: EncodingRepairs | None = None,
) -> LineParser:
    """The parser of format ``fmt`` (one of :data:`FORMATS`); ``ts_field`` is the JSON-lines
    timestamp field (the log formats always produce ``ts``); ``repairs`` counts the lines whose
    invalid UTF-8 it replaced (a new counter if None)."""
    if fmt == "json":
        return RecordValidator(ts_field, repairs=repairs)
    if fmt in ("nginx", "apache"):
        return AccessLogParser(repairs=repairs)
    if fmt == "syslog":
        return SyslogParser(clock=clock, repairs=repairs)
    if fmt == "raw":
        return RawParser(clock=clock, repairs=repairs)
    raise ValueError(f"unknown format {fmt!r}; expected one of {FORMATS}")
