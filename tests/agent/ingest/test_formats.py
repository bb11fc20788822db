"""Line formats: generated lines parse back to their fields (property tests), real sample
lines from nginx, Apache, rsyslog and RFC 5424 parse as documented, garbage only ever raises
RecordError with a known reason."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any
from urllib.parse import quote

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.ingest.formats import (
    FACILITIES,
    AccessLogParser,
    RawParser,
    SyslogParser,
    days_from_civil,
    make_parser,
)
from agent.ingest.records import REASONS, RecordError, RecordValidator

MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
NOW = datetime(2026, 11, 21, 12, 0, 0, tzinfo=UTC).timestamp()

# ---- strategies ---------------------------------------------------------------------------------

ips = st.tuples(*[st.integers(0, 255)] * 4).map(lambda t: ".".join(map(str, t)))
tokens = st.text("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-", min_size=1,
                 max_size=12)  # fmt: skip
times = st.datetimes(
    min_value=datetime(1971, 1, 1), max_value=datetime(2099, 12, 31), timezones=st.just(UTC)
).map(lambda d: d.replace(microsecond=0))
offsets = st.integers(-12 * 60, 14 * 60).map(lambda m: timezone(timedelta(minutes=m)))
free_text = st.text(
    st.characters(blacklist_categories=("Cc", "Cs", "Zl", "Zp"), blacklist_characters='"\\'),
    max_size=40,
)


def clf(dt: datetime) -> str:
    off = dt.utcoffset() or timedelta(0)
    minutes = int(off.total_seconds() // 60)
    sign = "+" if minutes >= 0 else "-"
    hh, mm = divmod(abs(minutes), 60)
    return (
        f"{dt.day:02d}/{MONTHS[dt.month - 1]}/{dt.year:04d}:{dt.hour:02d}:{dt.minute:02d}:"
        f"{dt.second:02d} {sign}{hh:02d}{mm:02d}"
    )


@st.composite
def access_lines(draw: Any) -> tuple[str, dict[str, Any]]:
    dt = draw(times).astimezone(draw(offsets))
    method = draw(st.sampled_from(["GET", "POST", "PUT", "DELETE", "HEAD"]))
    path = "/" + "/".join(draw(st.lists(tokens, max_size=3)))
    query = draw(st.dictionaries(tokens, st.text(max_size=8), max_size=3))
    target = path + ("?" + "&".join(f"{k}={quote(v, safe='')}" for k, v in query.items())
                     if query else "")  # fmt: skip
    status = draw(st.integers(100, 599))
    size = draw(st.integers(0, 10**9))
    user = draw(st.none() | tokens.filter(lambda s: s != "-"))
    combined = draw(st.booleans())
    referer = draw(st.none() | free_text.filter(lambda s: s not in ("", "-")))
    agent = draw(st.none() | free_text.filter(lambda s: s not in ("", "-")))
    ip = draw(ips)
    line = f'{ip} - {user or "-"} [{clf(dt)}] "{method} {target} HTTP/1.1" {status} {size}'
    if combined:
        line += f' "{referer or "-"}" "{agent or "-"}"'
    want = {
        "ts": dt.timestamp(),
        "source_ip": ip,
        "remote_user": user,
        "method": method,
        "path": path,
        "query": query,
        "protocol": "HTTP/1.1",
        "status": status,
        "bytes": size,
        "referer": referer if combined else None,
        "user_agent": agent if combined else None,
        "priority": 3 if status >= 500 else 4 if status >= 400 else 6,
    }
    return line, want


sd_names = st.text("abcdefghijklmnopqrstuvwxyz0123456789@.", min_size=1, max_size=16)
sd_values = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)


def sd_escape(v: str) -> str:
    return v.replace("\\", "\\\\").replace('"', '\\"').replace("]", "\\]")


@st.composite
def rfc5424_lines(draw: Any) -> tuple[str, dict[str, Any]]:
    pri = draw(st.integers(0, 191))
    dt = draw(times).astimezone(draw(offsets))
    micros = draw(st.integers(0, 999_999))
    dt = dt.replace(microsecond=micros)
    ts_text = dt.isoformat()
    if dt.utcoffset() == timedelta(0) and draw(st.booleans()):
        ts_text = ts_text.replace("+00:00", "Z")
    nil = st.none() | tokens.filter(lambda s: s != "-")
    host, app, procid, msgid = draw(nil), draw(nil), draw(nil), draw(nil)
    sd = draw(st.dictionaries(sd_names, st.dictionaries(sd_names, sd_values, max_size=3),
                              max_size=3))  # fmt: skip
    msg = draw(st.text(st.characters(blacklist_categories=("Cs", "Zl", "Zp"),
                                     blacklist_characters="\r\n"), max_size=40))  # fmt: skip
    bom = draw(st.booleans())
    sd_text = (
        "".join(
            f"[{sid}" + "".join(f' {k}="{sd_escape(v)}"' for k, v in params.items()) + "]"
            for sid, params in sd.items()
        )
        or "-"
    )
    line = f"<{pri}>1 {ts_text} {host or '-'} {app or '-'} {procid or '-'} {msgid or '-'} {sd_text}"
    if msg or bom:
        line += " " + ("\ufeff" if bom else "") + msg
    want = {
        "ts": dt.timestamp(),
        "facility": pri >> 3,
        "severity": pri & 7,
        "priority": pri & 7,
        "host": host,
        "source_ip": host,
        "app": app,
        "procid": procid,
        "msgid": msgid,
        "sd": sd,
        "body": msg,
        "syslog_version": 1,
    }
    return line, want


@st.composite
def rfc3164_lines(draw: Any) -> tuple[str, dict[str, Any]]:
    # within ~five months of NOW, so the year the parser assumes is the right one
    dt = datetime.fromtimestamp(NOW, UTC) + timedelta(seconds=draw(st.integers(-150, 150)) * 86400
                                                      + draw(st.integers(0, 86399)))  # fmt: skip
    pri = draw(st.none() | st.integers(0, 191))
    host = draw(tokens)
    app = draw(st.none() | st.text("abcdefghijklmnopqrstuvwxyz-_/", min_size=1, max_size=10))
    pid = draw(st.none() | st.integers(1, 99999).map(str)) if app else None
    msg = draw(st.text(st.characters(blacklist_categories=("Cs", "Zl", "Zp", "Cc")),
                       max_size=40).filter(lambda m: ":" not in m.split(" ")[0]))  # fmt: skip
    stamp = f"{MONTHS[dt.month - 1]} {dt.day:2d} {dt:%H:%M:%S}"
    tag = f"{app}[{pid}]: " if app and pid else f"{app}: " if app else ""
    line = ("" if pri is None else f"<{pri}>") + f"{stamp} {host} {tag}{msg}"
    want = {
        "ts": dt.timestamp(),
        "host": host,
        "app": app,
        "procid": pid,
        "priority": None if pri is None else pri & 7,
        "facility": None if pri is None else pri >> 3,
    }
    if app:
        want["body"] = msg
    return line, want


# ---- round trips ------------------------------------------------------------------------


@settings(max_examples=150, deadline=None)
@given(access_lines())
def test_access_lines_parse_back_to_their_fields(case: tuple[str, dict[str, Any]]) -> None:
    line, want = case
    for data in (line, line.encode(), line + "\r"):
        got = AccessLogParser().parse(data)
        assert {k: got[k] for k in want} == want
        assert got["body"] == got["request"]


@settings(max_examples=150, deadline=None)
@given(rfc5424_lines())
def test_rfc5424_lines_parse_back_to_their_fields(case: tuple[str, dict[str, Any]]) -> None:
    line, want = case
    got = SyslogParser(clock=lambda: NOW).parse(line.encode())
    assert got["ts"] == pytest.approx(want.pop("ts"), abs=1e-6)
    assert {k: got[k] for k in want} == want
    assert got["facility_name"] == FACILITIES[want["facility"]]


@settings(max_examples=150, deadline=None)
@given(rfc3164_lines())
def test_rfc3164_lines_parse_back_to_their_fields(case: tuple[str, dict[str, Any]]) -> None:
    line, want = case
    got = SyslogParser(clock=lambda: NOW).parse(line)
    assert {k: got[k] for k in want} == want
    assert got["syslog_version"] is None and got["source_ip"] == want["host"]


@given(st.integers(-719_162, 2_932_896))
def test_days_from_civil_matches_datetime(days: int) -> None:
    d = datetime(1970, 1, 1) + timedelta(days=days)
    assert days_from_civil(d.year, d.month, d.day) == days


# ---- garbage ------------------------------------------------------------------------------------

PARSERS = {
    "nginx": lambda: AccessLogParser(),
    "syslog": lambda: SyslogParser(clock=lambda: NOW),
    "json": lambda: RecordValidator(),
}


@pytest.mark.parametrize("fmt", sorted(PARSERS))
@settings(max_examples=150, deadline=None)
@given(data=st.binary(max_size=120) | st.text(max_size=120))
def test_garbage_raises_only_record_error_with_a_known_reason(fmt: str, data: Any) -> None:
    try:
        out = PARSERS[fmt]().parse(data)
    except RecordError as exc:
        assert exc.reason in REASONS and str(exc)
    else:
        assert isinstance(out["ts"], float | int)


@settings(max_examples=150, deadline=None)
@given(
    case=access_lines() | rfc5424_lines() | rfc3164_lines(),
    cut=st.integers(0, 200),
    junk=st.text(max_size=3),
    which=st.sampled_from(["nginx", "syslog"]),
)
def test_damaged_valid_lines_raise_only_record_error(
    case: tuple[str, dict[str, Any]], cut: int, junk: str, which: str
) -> None:
    line = case[0]
    damaged = line[:cut] + junk + line[cut + 1 :]
    try:
        PARSERS[which]().parse(damaged)
    except RecordError as exc:
        assert exc.reason in REASONS


# ---- real sample lines ------------------------------------------------------------------------


def test_real_nginx_and_apache_lines() -> None:
    p = make_parser("nginx")
    nginx = (
        '93.180.71.3 - - [17/May/2015:08:05:32 +0000] "GET /downloads/product_1 HTTP/1.1" 304 0 '
        '"-" "Debian APT-HTTP/1.3 (0.8.16~exp12ubuntu10.21)"'
    )
    ev = p.parse(nginx)
    assert ev["ts"] == datetime(2015, 5, 17, 8, 5, 32, tzinfo=UTC).timestamp()
    assert (ev["source_ip"], ev["method"], ev["path"], ev["status"], ev["bytes"]) == (
        "93.180.71.3", "GET", "/downloads/product_1", 304, 0,
    )  # fmt: skip
    assert ev["referer"] is None and ev["user_agent"].startswith("Debian APT")
    apache_common = (
        '127.0.0.1 - frank [10/Oct/2000:13:55:36 -0700] "GET /apache_pb.gif HTTP/1.0" 200 2326'
    )
    ev = make_parser("apache").parse(apache_common)
    assert ev["remote_user"] == "frank" and ev["user_agent"] is None
    assert ev["ts"] == datetime(2000, 10, 10, 20, 55, 36, tzinfo=UTC).timestamp()
    apache_combined = (
        '192.168.2.20 - - [28/Jul/2006:10:27:10 -0300] "GET /cgi-bin/try/?a=1&b=x%20y HTTP/1.0" '
        '200 3395 "http://example.com/start.html" "Mozilla/4.08 [en] (Win98; I ;Nav)"'
    )
    ev = make_parser("apache").parse(apache_combined)
    assert ev["path"] == "/cgi-bin/try/" and ev["query"] == {"a": "1", "b": "x y"}
    assert ev["referer"] == "http://example.com/start.html"
    # escaped quotes (Apache \" and nginx \x22), a probe with no proper request, an extra field
    esc = '1.2.3.4 - - [01/Jan/2024:00:00:00 +0000] "GET /a HTTP/1.1" 200 5 "-" "say \\"hi\\""'
    assert p.parse(esc)["user_agent"] == 'say "hi"'
    esc = '1.2.3.4 - - [01/Jan/2024:00:00:00 +0000] "GET /a HTTP/1.1" 200 5 "-" "x\\x22y"'
    assert p.parse(esc)["user_agent"] == 'x"y'
    probe = '5.6.7.8 - - [01/Jan/2024:00:00:01 +0000] "\\x16\\x03\\x01" 400 157 "-" "-"'
    ev = p.parse(probe)
    assert ev["method"] is None and ev["status"] == 400 and ev["priority"] == 4
    extra = '1.2.3.4 - - [01/Jan/2024:00:00:00 +0000] "GET / HTTP/2.0" 502 0 "-" "curl" "10.0.0.9"'
    ev = p.parse(extra)
    assert ev["extra"] == '"10.0.0.9"' and ev["priority"] == 3


def test_real_syslog_lines() -> None:
    p = SyslogParser(clock=lambda: NOW)
    # RFC 3164 section 5.4 example
    ev = p.parse("<34>Oct 11 22:14:15 mymachine su: 'su root' failed for lonvick on /dev/pts/8")
    assert (ev["facility"], ev["facility_name"], ev["severity"]) == (4, "auth", 2)
    assert (ev["host"], ev["app"], ev["procid"]) == ("mymachine", "su", None)
    assert ev["body"] == "'su root' failed for lonvick on /dev/pts/8"
    assert ev["ts"] == datetime(2026, 10, 11, 22, 14, 15, tzinfo=UTC).timestamp()
    # rsyslog's traditional file format (no PRI) and its high-precision format
    ev = p.parse(b"Nov  1 06:25:01 web-1 CRON[12345]: (root) CMD (run-parts /etc/cron.daily)")
    assert (ev["app"], ev["procid"], ev["priority"]) == ("CRON", "12345", None)
    assert ev["ts"] == datetime(2026, 11, 1, 6, 25, 1, tzinfo=UTC).timestamp()
    ev = p.parse("2026-11-21T10:00:00.123456+01:00 web-1 sshd[99]: Accepted publickey for ann")
    assert ev["ts"] == pytest.approx(datetime(2026, 11, 21, 9, 0, 0, 123456, UTC).timestamp())
    assert ev["body"] == "Accepted publickey for ann"
    # a Dec 31 line read on Jan 1 belongs to last year
    jan1 = datetime(2027, 1, 1, 0, 0, 5, tzinfo=UTC).timestamp()
    ev = SyslogParser(clock=lambda: jan1).parse("Dec 31 23:59:59 h app: x")
    assert ev["ts"] == datetime(2026, 12, 31, 23, 59, 59, tzinfo=UTC).timestamp()
    # RFC 5424 section 6.5 examples
    ev = p.parse(
        "<34>1 2003-10-11T22:14:15.003Z mymachine.example.com su - ID47 - "
        "\ufeff'su root' failed for lonvick on /dev/pts/8"
    )
    assert (ev["app"], ev["procid"], ev["msgid"], ev["sd"]) == ("su", None, "ID47", {})
    assert ev["body"].startswith("'su root'")
    assert ev["ts"] == pytest.approx(1065910455.003)
    ev = p.parse(
        "<165>1 2003-10-11T22:14:15.003Z mymachine.example.com evntslog - ID47 [exampleSDID@32473"
        ' iut="3" eventSource="Application" eventID="1011"][examplePriority@32473 class="high"]'
    )
    assert ev["sd"] == {
        "exampleSDID@32473": {"iut": "3", "eventSource": "Application", "eventID": "1011"},
        "examplePriority@32473": {"class": "high"},
    }
    assert ev["body"] == "" and ev["facility_name"] == "local4" and ev["severity"] == 5
    ev = p.parse('<13>1 2024-01-01T00:00:00Z h a 1 - [x@1 k="a \\"q\\" \\] \\\\"] msg')
    assert ev["sd"] == {"x@1": {"k": 'a "q" ] \\'}} and ev["body"] == "msg"
    ev = p.parse("<0>1 - - - - - -")
    assert ev["ts"] == NOW and ev["host"] is None and ev["priority"] == 0


@pytest.mark.parametrize(
    ("line", "reason", "says"),
    [
        ("<192>1 - - - - - -", "bad_syslog_pri", "0..191"),
        ("<013>Oct 11 22:14:15 h x", "bad_syslog_pri", "leading zeros"),
        ("<1x>Oct 11 22:14:15 h x", "bad_syslog_pri", "PRI"),
        ("<13>Foo 11 22:14:15 h x", "bad_timestamp", "timestamp"),
        ("<13>Feb 30 22:14:15 h x", "bad_timestamp", "no such date"),
        ("<13>1 2024-13-01T00:00:00Z h a p m -", "bad_timestamp", "RFC 3339"),
        ("<13>1 2024-01-01T00:00:00Z h a p m [bad", "bad_structured_data", "column"),
        ("<13>1 2024-01-01T00:00:00Z h a p m x", "bad_structured_data", "expected '-'"),
        ("<13>1 2024-01-01T00:00:00Z h a", "bad_syslog_line", "header"),
        ("just some text", "bad_syslog_line", "timestamp"),
    ],
)
def test_bad_syslog_lines_name_what_is_wrong(line: str, reason: str, says: str) -> None:
    with pytest.raises(RecordError, match=says) as info:
        SyslogParser(clock=lambda: NOW).parse(line)
    assert info.value.reason == reason


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ("not an access line", "bad_access_line"),
        ('1.2.3.4 - - [01/Foo/2024:00:00:00 +0000] "GET / HTTP/1.1" 200 1', "bad_timestamp"),
        ('1.2.3.4 - - [31/Feb/2024:00:00:00 +0000] "GET / HTTP/1.1" 200 1', "bad_timestamp"),
        ('1.2.3.4 - - [01/Jan/2024:00:00:00] "GET / HTTP/1.1" 200 1', "bad_timestamp"),
        ('1.2.3.4 - - [01/Jan/2024:00:00:00 +0000] "GET / HTTP/1.1" 2000 1', "bad_access_line"),
    ],
)
def test_bad_access_lines(line: str, reason: str) -> None:
    with pytest.raises(RecordError) as info:
        AccessLogParser().parse(line)
    assert info.value.reason == reason and str(info.value)


def test_access_timestamps_are_cached_per_distinct_string() -> None:
    p = AccessLogParser()
    line = '1.2.3.4 - - [01/Jan/2024:00:00:00 +0100] "GET / HTTP/1.1" 200 1'
    assert p.parse(line)["ts"] == p.parse(line)["ts"] == 1704063600.0
    assert len(p._ts_cache) == 1


def test_raw_and_json_and_factory() -> None:
    raw = RawParser(clock=lambda: 42.0)
    assert raw.parse(b"hello \xff world\r") == {
        "ts": 42.0, "source_ip": None, "priority": None, "body": "hello \ufffd world",
    }  # fmt: skip
    assert make_parser("json", ts_field="t").parse(b'{"t": 1}') == {"t": 1}
    assert isinstance(make_parser("raw"), RawParser)
    with pytest.raises(ValueError, match="unknown format"):
        make_parser("xml")
