"""Custom access-log formats (nginx ``log_format``, Apache ``LogFormat``): real lines with
``$request_time $upstream_response_time`` (``-`` and retry lists), and property tests over
random formats: lines rendered exactly as the server writes them parse back to their typed
values, the columnar path equals the row path, malformed lines are rejected (counted), never
a crash."""

from __future__ import annotations

import contextlib
import datetime as dt
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.ingest.columnar.parse import parse_chunk
from agent.ingest.formats import AccessLogParser, split_request
from agent.ingest.log_format import LogFormatParser, compile_format, list_sum
from agent.ingest.parsers import input_format, make_parser
from agent.ingest.records import EncodingRepairs, RecordError
from agent.log_format import LogFormat
from tests.agent.ingest.columnar_reference import assert_same

MAIN = LogFormat(
    "nginx",
    '$remote_addr - $remote_user [$time_local] "$request" $status $body_bytes_sent '
    '"$http_referer" "$http_user_agent" $request_time $upstream_response_time',
)
T0 = 1795288270.0  # 21/Nov/2026:20:11:10 +0100

REAL_LINES = [
    b'203.0.113.9 - - [21/Nov/2026:20:11:10 +0100] "GET /product/P1?id=7 HTTP/1.1" 200 5123 '
    b'"https://shop.example/" "Mozilla/5.0 (X11; Linux x86_64)" 0.123 0.120',
    b'203.0.113.9 - alice [21/Nov/2026:20:11:10 +0100] "POST /cart HTTP/2.0" 502 157 "-" '
    b'"curl/8.5.0" 3.002 1.001, 2.000',
    b'198.51.100.7 - - [21/Nov/2026:20:11:10 +0100] "GET /static/app.js HTTP/1.1" 304 0 "-" '
    b'"Mozilla/5.0" 0.000 -',
    b'198.51.100.7 - - [21/Nov/2026:20:11:10 +0100] "GET /a HTTP/1.1" 200 10 "-" "Mozilla/5.0" '
    b"0.030 0.010, 0.015 : 0.005",
    b'198.51.100.7 - - [21/Nov/2026:20:11:10 +0100] "GET /b HTTP/1.1" 504 0 "-" "Mozilla/5.0" '
    b"60.001 -, 0.001",
    b'2001:db8::1 - - [21/Nov/2026:20:11:10 +0100] "GET /caf\\xC3\\xA9 HTTP/1.1" 404 12 "-" '
    b'"Bot \\x22quoted\\x22" 0.001 0.001',
]


def test_real_main_lines() -> None:
    parser = make_parser(MAIN)
    rows = [parser.parse(line) for line in REAL_LINES]
    assert [r["request_time"] for r in rows] == [0.123, 3.002, 0.0, 0.03, 60.001, 0.001]
    assert [r["upstream_response_time"] for r in rows] == [0.12, 3.001, None, 0.03, 0.001, 0.001]
    assert [r["upstream_response_time_raw"] for r in rows] == [
        "0.120", "1.001, 2.000", None, "0.010, 0.015 : 0.005", "-, 0.001", "0.001",
    ]  # fmt: skip
    first = rows[0]
    assert first["ts"] == T0
    assert first["source_ip"] == "203.0.113.9"
    assert (first["method"], first["path"], first["query"]) == ("GET", "/product/P1", {"id": "7"})
    assert (first["status"], first["priority"], first["bytes"]) == (200, 6, 5123)
    assert first["referer"] == "https://shop.example/"
    assert first["body"] == first["request"] == "GET /product/P1?id=7 HTTP/1.1"
    assert rows[1]["remote_user"] == "alice" and rows[1]["priority"] == 3
    assert rows[5]["path"] == "/café" and rows[5]["user_agent"] == 'Bot "quoted"'
    assert rows[5]["source_ip"] == "2001:db8::1" and rows[5]["priority"] == 4


def test_main_format_keeps_combineds_fields() -> None:
    """A ``main`` line gives every field the built-in combined parser gives (but ``ident``,
    which nginx's combined writes as a literal ``-``), with the same values."""
    line = REAL_LINES[0]
    combined_line = line.rsplit(b'" ', 1)[0] + b'"'
    combined = AccessLogParser().parse(combined_line)
    mine = make_parser(MAIN).parse(line)
    for key, value in combined.items():
        if key != "ident":
            assert mine[key] == value, key


def test_real_main_lines_columnar_equals_row() -> None:
    assert_same(MAIN, [*REAL_LINES, b"garbage", b"", b"1.2.3.4 - - [x] broken"])
    assert_same(MAIN, REAL_LINES, fields=frozenset({"upstream_response_time", "status"}))
    got = parse_chunk(MAIN, b"".join(x + b"\n" for x in REAL_LINES))
    assert got.table.column("upstream_response_time").type == "double"
    assert got.table.column("request_time").to_pylist()[:2] == [0.123, 3.002]


def test_apache_formats() -> None:
    fmt = LogFormat(
        "apache", '%h %l %u %t \\"%r\\" %>s %b \\"%{Referer}i\\" \\"%{User-agent}i\\" %D %T'
    )
    line = (
        b'10.0.0.1 - bob [21/Nov/2026:20:11:10 +0100] "GET /x?a=1 HTTP/1.1" 200 - "-" '
        b'"say \\"hi\\"" 1234 0'
    )
    rec = make_parser(fmt).parse(line)
    assert rec["ts"] == T0 and rec["source_ip"] == "10.0.0.1" and rec["ident"] is None
    assert rec["bytes"] == 0 and rec["user_agent"] == 'say "hi"' and rec["referer"] is None
    assert rec["request_time_us"] == 1234
    assert rec["request_time"] == 0.001234  # %D (first in the format) beats %T
    assert_same(fmt, [line, line.replace(b" 1234 ", b" - ")])
    # %a alone is the source address; %{sec}t a time
    fmt = LogFormat("apache", "%a %{sec}t %>s %B %{ms}T")
    rec = make_parser(fmt).parse(b"10.0.0.2 1763752270 500 17 25")
    assert rec["source_ip"] == rec["client_ip"] == "10.0.0.2"
    assert (rec["ts"], rec["status"], rec["priority"], rec["bytes"]) == (1763752270.0, 500, 3, 17)
    assert rec["request_time_ms"] == 25 and rec["request_time"] == 0.025
    assert rec["body"] == "10.0.0.2 1763752270 500 17 25"  # no %r: the line
    assert_same(fmt, [b"10.0.0.2 1763752270 500 17 25", b"x 1 2 3 4"])


def test_named_fields_beat_request_parts() -> None:
    fmt = LogFormat("nginx", '$host "$request" $scheme')
    rec = make_parser(fmt).parse(b'shop.example "GET http://other:81/p HTTP/1.1" https')
    assert (rec["host"], rec["scheme"], rec["path"]) == ("shop.example", "https", "/p")
    line = b'shop.example "GET http://other:81/p HTTP/1.1" https'
    assert_same(fmt, [line], skip=frozenset({"ts"}))


def test_format_without_time_takes_the_arrival_time() -> None:
    fmt = LogFormat("nginx", "$status $request_time")
    rec = LogFormatParser(fmt, clock=lambda: 42.0).parse("200 0.5")
    assert rec == {"ts": 42.0, "source_ip": None, "priority": 6, "body": "200 0.5",
                   "status": 200, "request_time": 0.5}  # fmt: skip
    assert_same(fmt, [b"200 0.5", b"- -", b"x"], skip=frozenset({"ts"}))


def test_malformed_lines_are_rejected_with_their_reason() -> None:
    parser = make_parser(MAIN)
    with pytest.raises(RecordError) as bad:
        parser.parse(b"not an access line")
    assert bad.value.reason == "bad_access_line" and "log format" in str(bad.value)
    with pytest.raises(RecordError) as bad:
        parser.parse(REAL_LINES[0].replace(b"21/Nov", b"31/Feb"))
    assert bad.value.reason == "bad_timestamp"
    got = parse_chunk(MAIN, b"junk\n" + REAL_LINES[0] + b"\n\n")
    assert [r[:2] for r in got.rejects] == [(0, "bad_access_line")]
    assert got.line_index.to_pylist() == [1] and got.lines == 3


def test_bad_utf8_in_escapes_is_repaired_and_counted() -> None:
    line = REAL_LINES[0].replace(b"Mozilla", b"Moz\\xFFilla")
    repairs = EncodingRepairs()
    rec = make_parser(MAIN, repairs=repairs).parse(line)
    assert rec["user_agent"].startswith("Moz\ufffdilla") and repairs.lines == 1
    assert_same(MAIN, [line, REAL_LINES[1], line.replace(b"GET", b"G\xffT")])


def test_list_sum_is_exact_in_decimal() -> None:
    assert list_sum("0.010, 0.020 : 0.005", float) == 0.035
    assert list_sum("-", float) is None and list_sum("-, -", float) is None
    assert list_sum("10, - : 5", int) == 15


def test_input_format_of_a_config() -> None:
    @dataclass
    class Cfg:
        format: str
        log_format: str | None = None

    assert input_format(Cfg("nginx")) == "nginx"
    assert input_format(Cfg("nginx", "$status")) == LogFormat("nginx", "$status")
    assert input_format(Cfg("json")) == "json"


def test_big_numbers_take_the_row_path() -> None:
    fmt = LogFormat("nginx", "$status $bytes_sent")
    from agent.ingest.columnar.base import UnsupportedChunk

    with pytest.raises(UnsupportedChunk):
        parse_chunk(fmt, b"200 1234567890123456789012\n" * 3)
    assert make_parser(fmt).parse("200 1234567890123456789012")["bytes_sent"] > 2**64


# written by nginx 1.22.1 (an upstream pool whose first server is down: a retry list; a dead
# upstream; an error_page redirect; a user agent and referer nginx escaped; basic auth)
REAL_NGINX_FORMAT = LogFormat(
    "nginx",
    '$remote_addr - $remote_user [$time_local] "$request" $status $body_bytes_sent '
    '"$http_referer" "$http_user_agent" $request_time $upstream_response_time '
    '"$upstream_addr" $upstream_status $msec ${time_iso8601}',
)
REAL_NGINX_LINES = [
    b'127.0.0.1 - - [06/Dec/2026:17:53:05 +0000] "GET /a?x=1&y=%20z HTTP/1.1" 200 2 "-" '
    b'"curl/7.88.1" 0.000 - "-" - 1796579585.893 2026-12-06T17:53:05+00:00',
    b'127.0.0.1 - - [06/Dec/2026:17:53:05 +0000] "GET /caf%C3%A9 HTTP/1.1" 200 2 '
    b'"http://ref/\\xC3\\xA9" "M\\xC3\\xBCller \\x22quoted\\x22 \\x5C agent" 0.000 - "-" - '
    b"1796579585.903 2026-12-06T17:53:05+00:00",
    b'127.0.0.1 - - [06/Dec/2026:17:53:05 +0000] "GET /up HTTP/1.1" 200 3 "-" "curl/7.88.1" '
    b'0.001 0.000, 0.000 "127.0.0.1:18991, 127.0.0.1:18992" 502, 200 1796579585.913 '
    b"2026-12-06T17:53:05+00:00",
    b'127.0.0.1 - - [06/Dec/2026:17:53:05 +0000] "GET /dead HTTP/1.1" 502 157 "-" '
    b'"curl/7.88.1" 0.000 0.000 "127.0.0.1:18993" 502 1796579585.933 '
    b"2026-12-06T17:53:05+00:00",
    b'127.0.0.1 - - [06/Dec/2026:17:53:05 +0000] "GET /redir HTTP/1.1" 200 3 "-" '
    b'"curl/7.88.1" 0.000 0.000 "127.0.0.1:18992" 200 1796579585.943 '
    b"2026-12-06T17:53:05+00:00",
    b'127.0.0.1 - bob [06/Dec/2026:17:53:05 +0000] "GET /u HTTP/1.1" 200 2 "-" '
    b'"curl/7.88.1" 0.000 - "-" - 1796579585.954 2026-12-06T17:53:05+00:00',
]


def test_lines_written_by_nginx() -> None:
    rows = [make_parser(REAL_NGINX_FORMAT).parse(x) for x in REAL_NGINX_LINES]
    assert rows[0]["query"] == {"x": "1", "y": " z"} and rows[0]["upstream_response_time"] is None
    assert rows[1]["path"] == "/café" and rows[1]["referer"] == "http://ref/é"
    assert rows[1]["user_agent"] == 'Müller "quoted" \\ agent'
    retry = rows[2]
    assert retry["upstream_response_time_raw"] == "0.000, 0.000"
    assert retry["upstream_response_time"] == 0.0 and retry["request_time"] == 0.001
    assert retry["upstream_addr"] == "127.0.0.1:18991, 127.0.0.1:18992"
    assert retry["upstream_status"] == "502, 200"
    assert (rows[3]["status"], rows[3]["upstream_status"]) == (502, "502")
    assert rows[5]["remote_user"] == "bob"
    assert all(r["ts"] == 1796579585.0 for r in rows)  # $time_local: the first time wins
    assert_same(REAL_NGINX_FORMAT, REAL_NGINX_LINES)


# ---- property tests: random formats, lines rendered as the servers write them ----------------


def nginx_escape(raw: bytes) -> str:
    """``ngx_http_log_escape`` (default ``escape=default``): ``"``, ``\\``, bytes below 0x20
    and from 0x7f up as ``\\xHH``."""
    return "".join(
        f"\\x{b:02X}" if b in (0x22, 0x5C) or b < 0x20 or b >= 0x7F else chr(b) for b in raw
    )


def apache_escape(raw: bytes) -> str:
    """``ap_escape_logitem``: ``"`` and ``\\`` backslashed, control and high bytes ``\\xhh``."""
    out = []
    for b in raw:
        if b in (0x22, 0x5C):
            out.append("\\" + chr(b))
        elif b < 0x20 or b >= 0x7F:
            out.append(f"\\x{b:02x}")
        else:
            out.append(chr(b))
    return "".join(out)


# characters literal separators are made of, and the ones unquoted values may hold: disjoint,
# so a rendered line has one reading (any real format needs that too)
SEPARATORS = st.text(alphabet=' |;[]#~^*"\t', min_size=1, max_size=3)
TOKEN = st.text(alphabet="abcXYZ019._/:@=+", min_size=1, max_size=12)
ANY_TEXT = st.text(st.characters(codec="utf-8", exclude_characters="\n\r"), min_size=1, max_size=20)
MONTHS = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]


@dataclass
class Rendered:
    """One variable's text in a line and the record values it must parse back to."""

    text: str
    expect: dict[str, Any]


def _millis(draw: st.DrawFn) -> str:
    ms = draw(st.integers(0, 10**7))
    return f"{ms // 1000}.{ms % 1000:03d}"


def _clf(draw: st.DrawFn) -> tuple[str, float]:
    epoch = draw(st.integers(0, 4102444799))
    off = draw(st.integers(-14 * 60, 14 * 60))
    local = dt.datetime.fromtimestamp(epoch, dt.UTC) + dt.timedelta(minutes=off)
    sign = "+" if off >= 0 else "-"
    zone = f"{sign}{abs(off) // 60:02d}{abs(off) % 60:02d}"
    text = (
        f"{local.day:02d}/{MONTHS[local.month - 1]}/{local.year:04d}:"
        f"{local.hour:02d}:{local.minute:02d}:{local.second:02d} {zone}"
    )
    return text, float(epoch)


def _text_value(draw: st.DrawFn, quoted: bool, dialect: str) -> tuple[str, str]:
    """(as written, as parsed back) of a text value; "-" is written for an empty value."""
    if not quoted:
        value = draw(TOKEN)
        return value, value
    value = draw(ANY_TEXT)
    escape = nginx_escape if dialect == "nginx" else apache_escape
    return escape(value.encode()), value


def _list(draw: st.DrawFn, item: Any, number: type) -> tuple[str, Any]:
    """An nginx upstream list (``-`` entries among them) and its sum."""
    count = draw(st.integers(1, 4))
    items = ["-" if draw(st.integers(0, 3)) == 0 else item(draw) for _ in range(count)]
    seps = [draw(st.sampled_from([", ", " : "])) for _ in items[1:]]
    text = items[0] + "".join(s + x for s, x in zip(seps, items[1:], strict=True))
    numbers = [Decimal(x) for x in items if x != "-"]
    if not numbers:
        return text, None
    return text, (float(sum(numbers)) if number is float else int(sum(numbers)))


def render(draw: st.DrawFn, dialect: str, token: str, quoted: bool) -> Rendered:
    """A value of variable ``token`` written as the server writes it."""
    name = token.strip("$%{}>")
    if token in ("$time_local", "%t"):
        text, epoch = _clf(draw)
        return Rendered(f"[{text}]" if token == "%t" else text, {"ts": epoch})
    if token == "$msec":
        text = _millis(draw)
        return Rendered(text, {"ts": float(text)})
    if token == "%{usec}t":
        us = draw(st.integers(0, 4 * 10**15))
        return Rendered(str(us), {"ts": us / 1e6})
    if token in ("$status", "%>s"):
        code = draw(st.one_of(st.just(None), st.integers(100, 599)))
        prio = 6 if code is None else (3 if code >= 500 else 4 if code >= 400 else 6)
        return Rendered("-" if code is None else str(code), {"status": code, "priority": prio})
    if token in ("$body_bytes_sent", "%b"):
        size = draw(st.integers(0, 10**12))
        text = "-" if size == 0 and token == "%b" else str(size)
        return Rendered(text, {"bytes": size})
    if token in ("$request_length", "%I", "$remote_port"):
        field = {"%I": "bytes_received"}.get(token, name)
        value = draw(st.one_of(st.just(None), st.integers(0, 10**15)))
        return Rendered("-" if value is None else str(value), {field: value})
    if token == "$request_time":
        text = "-" if draw(st.integers(0, 4)) == 0 else _millis(draw)
        return Rendered(text, {"request_time": None if text == "-" else float(text)})
    if token == "%D":
        us = draw(st.integers(0, 10**12))
        return Rendered(str(us), {"request_time_us": us, "request_time": us / 1e6})
    if token in ("$upstream_response_time", "$upstream_connect_time"):
        text, total = _list(draw, _millis, float)
        return Rendered(text, {name: total, name + "_raw": None if text == "-" else text})
    if token == "$upstream_bytes_received":
        text, total = _list(draw, lambda d: str(d(st.integers(0, 10**9))), int)
        return Rendered(text, {name: total, name + "_raw": None if text == "-" else text})
    if token in ("$request", "%r"):
        method = draw(st.sampled_from(["GET", "POST", "HEAD"]))
        path = "/" + draw(st.text(alphabet="abc/%20é?=&", max_size=15))
        request = f"{method} {path} HTTP/1.1"
        escape = nginx_escape if dialect == "nginx" else apache_escape
        parts = split_request(request)
        return Rendered(escape(request.encode()), {"request": request, "body": request, **parts})
    # text variables: addresses, users, headers
    written, value = _text_value(draw, quoted, dialect)
    if draw(st.booleans()):
        written, value = "-", None
    field = {
        "$remote_addr": "source_ip", "%h": "source_ip", "$remote_user": "remote_user",
        "%u": "remote_user", "$http_user_agent": "user_agent", "%{User-Agent}i": "user_agent",
        "$http_x_forwarded_for": "http_x_forwarded_for",
        "%{X-Forwarded-For}i": "http_x_forwarded_for", "$upstream_addr": "upstream_addr",
    }[token]  # fmt: skip
    return Rendered(written, {field: value})


NGINX_POOL = [
    "$remote_addr", "$remote_user", "$time_local", "$msec", "$request", "$status",
    "$body_bytes_sent", "$request_length", "$remote_port", "$request_time",
    "$upstream_response_time", "$upstream_connect_time", "$upstream_bytes_received",
    "$http_user_agent", "$http_x_forwarded_for",
]  # fmt: skip
APACHE_POOL = [
    "%h", "%u", "%t", "%{usec}t", "%r", "%>s", "%b", "%I", "%D", "%{User-Agent}i",
    "%{X-Forwarded-For}i",
]  # fmt: skip
#: variables whose values hold spaces or any text: always quoted, as servers' formats do
ALWAYS_QUOTED = {"$request", "%r"}
TIMES = {"$time_local", "$msec", "%t", "%{usec}t"}


@st.composite
def format_and_lines(draw: st.DrawFn) -> tuple[LogFormat, list[bytes], list[dict[str, Any]]]:
    dialect = draw(st.sampled_from(["nginx", "apache"]))
    pool = NGINX_POOL if dialect == "nginx" else APACHE_POOL
    tokens = draw(st.lists(st.sampled_from(pool), min_size=1, max_size=7, unique=True))
    if sum(t in TIMES for t in tokens) > 1:  # one time per format (the first would win)
        first = next(t for t in tokens if t in TIMES)
        tokens = [t for t in tokens if t not in TIMES or t == first]
    quoted = [t in ALWAYS_QUOTED or draw(st.booleans()) for t in tokens]
    seps = [draw(SEPARATORS).replace('"', "") or " " for _ in range(len(tokens) + 1)]
    # a quoted variable: '"' closes it (the next literal starts with it) and opens it
    pieces: list[str] = []
    for i, token in enumerate(tokens):
        lead = seps[i] if i else draw(st.sampled_from(["", "^"]))
        pieces.append(lead + ('"' if quoted[i] else "") + "\0" + token + "\0")
        if quoted[i]:
            pieces.append('"')
    pieces.append(draw(st.sampled_from(["", " ", "#"])))
    template = "".join(pieces)
    written_format = template.replace("\0", "")
    if dialect == "apache":
        written_format = written_format.replace('"', '\\"')
    fmt = LogFormat(dialect, written_format)
    lines, expected = [], []
    for _ in range(draw(st.integers(1, 4))):
        parts = template.split("\0")
        expect: dict[str, Any] = {}
        for j in range(1, len(parts), 2):
            k = j // 2
            got = render(draw, dialect, parts[j], quoted[k])
            parts[j] = got.text
            expect.update(got.expect)
        lines.append("".join(parts).encode())
        expected.append(expect)
    return fmt, lines, expected


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(format_and_lines(), st.data())
def test_random_formats_round_trip(
    case: tuple[LogFormat, list[bytes], list[dict[str, Any]]], data: st.DataObject
) -> None:
    fmt, lines, expected = case
    parser = LogFormatParser(fmt, clock=lambda: 7.0)
    compiled = compile_format(fmt)
    for line, expect in zip(lines, expected, strict=True):
        rec = parser.parse(line)
        for key, value in expect.items():
            assert rec[key] == value, (fmt, line, key)
        assert set(rec) == set(compiled.fields)
    skip = frozenset() if "ts" in compiled.sources else frozenset({"ts"})
    assert_same(fmt, lines, chunk_sizes=(1 << 20, 1), skip=skip)
    # a projection (a query reading some fields): only those groups are extracted
    fields = frozenset(data.draw(st.sets(st.sampled_from(compiled.fields), max_size=4)))
    assert_same(fmt, lines, chunk_sizes=(1 << 20,), fields=fields, skip=skip)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(format_and_lines(), st.data())
def test_damaged_lines_are_rejected_not_crashing(case: Any, data: st.DataObject) -> None:
    fmt, lines, _ = case
    damaged = []
    for line in lines:
        cut = data.draw(st.integers(0, len(line)))
        junk = data.draw(st.binary(max_size=6)).replace(b"\n", b"")  # one line stays one
        damaged.append(line[:cut] + junk + line[cut + data.draw(st.integers(0, 3)) :])
    parser = make_parser(fmt)
    for line in damaged:
        with contextlib.suppress(RecordError):  # counted and quarantined by the input
            parser.parse(line)
    assert_same(fmt, damaged + lines, chunk_sizes=(1 << 20,), skip=frozenset({"ts"}))


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(["nginx", "apache"]), st.text(max_size=40))
def test_any_format_text_compiles_or_is_refused(dialect: str, text: str) -> None:
    from agent.log_format import LogFormatError, check_format

    try:
        fmt = check_format(dialect, text)
    except LogFormatError:
        return
    parser = make_parser(fmt)
    with contextlib.suppress(RecordError):
        parser.parse(text)


def test_a_tail_with_a_custom_format_takes_the_columnar_path(tmp_path: Path) -> None:
    """An input configured with a ``log_format`` gets a chunk reader of that format, no
    prefilter (no pushdown rules for custom formats) and its own parser, not a projection."""
    import agent.jobs.ql_job  # noqa: F401  (registers the "ql" job class)
    from agent.ingest.base import ColumnarBatch
    from agent.ingest.columnar.reader import install_columnar
    from agent.ingest.fastpath import install_prefilters
    from agent.ingest.tail import FileTail
    from agent.jobs.job import create_job, parse_spec
    from agent.jobs.ql_job import spec_from_query
    from agent.runtime.epochs.worker import Worker

    path = tmp_path / "access.log"
    path.write_bytes(b"".join(x + b"\n" for x in REAL_LINES * 10))
    query = (
        "SELECT status, count(*), max(upstream_response_time) FROM * "
        "WHERE path LIKE '/%' GROUP BY status"
    )
    job = create_job(parse_spec(spec_from_query("q", "t", query)))

    class Runtime:
        inputs = ("web",)
        worker = Worker(job, wall_clock=lambda: 0.0)

    @dataclass
    class Cfg:
        format: str = "nginx"
        log_format: str = MAIN.text
        timestamp_field: str = "ts"

    tail = FileTail(path, parser=make_parser(MAIN))
    install_prefilters({"web": tail}, {"web": Cfg()}, [Runtime()])
    install_columnar({"web": tail}, {"web": Cfg()}, [Runtime()])
    assert tail.prefilter is None and isinstance(tail.parser, LogFormatParser)
    assert tail.columnar is not None and tail.columnar.fmt == MAIN
    assert tail.columnar.describe()["format"] == {"dialect": "nginx", "log_format": MAIN.text}
    tail.columnar.min_rows = 1
    batch = tail.poll()
    assert isinstance(batch, ColumnarBatch) and len(batch) == 60
    Runtime.worker.process(batch)
    assert Runtime.worker.stats()["columnar_rows"] == 60


def test_formats_that_could_backtrack_run_on_re2() -> None:
    """Two unquoted free-text variables, or tokens split by something else than a space,
    would let ``re`` backtrack for minutes on a crafted long line: those formats take RE2
    (linear time); the usual ones keep ``re`` (faster per line)."""
    import time

    assert compile_format(MAIN).regex.__class__.__module__ == "re"
    slow = LogFormat("nginx", "$http_a $http_b $http_c $status")
    assert compile_format(slow).regex.__class__.__module__ != "re"
    parser = make_parser(slow)
    assert parser.parse("a b c d 200")["http_c"] == "c d"  # leftmost-first, as in re
    started = time.process_time()
    with pytest.raises(RecordError):
        parser.parse("a " * 200_000 + "x")
    assert time.process_time() - started < 2.0
    ipv6 = make_parser(LogFormat("nginx", "$remote_addr:$remote_port $status"))
    assert ipv6.parse("2001:db8::1:443 200")["source_ip"] == "2001:db8::1"
