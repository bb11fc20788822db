"""nginx's ``\\xHH`` escapes are decoded in quoted access-log fields (then read as UTF-8, bad
sequences replaced and counted) on the row path, the projected parser and the columnar path,
property-tested against an escaper written from nginx's rule; absolute-form request targets
get their own ``scheme`` and ``host`` fields."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.ingest.columnar.parse import parse_chunk
from agent.ingest.formats import AccessLogParser, decode_escapes, split_target
from agent.ingest.projection import ProjectedAccessLogParser
from agent.ingest.records import EncodingRepairs


def nginx_escape(raw: bytes) -> str:
    """``ngx_http_log_escape`` (ngx_http_log_module.c, default ``escape=default``): ``"``,
    ``\\``, bytes below 0x20 and from 0x7f up are written ``\\xHH`` (upper-case hex); every
    other byte as itself."""
    return "".join(
        f"\\x{b:02X}" if b in (0x22, 0x5C) or b < 0x20 or b >= 0x7F else chr(b) for b in raw
    )


def line_with(request: str = "GET / HTTP/1.1", referer: str = "-", agent: str = "ua") -> bytes:
    return (
        f'1.2.3.4 - - [01/Jan/2024:00:00:00 +0000] "{request}" 200 5 "{referer}" "{agent}"'
    ).encode()


def all_paths(line: bytes) -> list[tuple[dict[str, Any], int]]:
    """(record, repaired lines) from the row parser, the projected parser (every field it
    builds itself) and the columnar path."""
    out = []
    repairs = EncodingRepairs()
    out.append((AccessLogParser(repairs=repairs).parse(line), repairs.lines))
    repairs = EncodingRepairs()
    fields = ("method", "scheme", "host", "path", "query", "protocol", "request", "body")
    out.append((ProjectedAccessLogParser(fields, repairs=repairs).parse(line), repairs.lines))
    got = parse_chunk("nginx", line + b"\n")
    (row,) = got.table.to_pylist()
    row["query"] = dict(row["query"])
    out.append((row, got.repairs))
    return out


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=40))
def test_an_escaped_user_agent_reads_back_as_its_bytes(raw: bytes) -> None:
    """Whatever bytes a client sends as its User-Agent, nginx logs them escaped and every
    path reads back the bytes as UTF-8 (invalid sequences: U+FFFD, one repaired line)."""
    line = line_with(agent=nginx_escape(raw))
    want = raw.decode("utf-8", "replace")
    for record, repaired in all_paths(line)[::2]:  # the projected parser has no user_agent
        assert record["user_agent"] == (None if want == "-" else want)
        assert repaired == int(not _valid(raw))


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=30).map(lambda b: b.replace(b" ", b"")), st.binary(max_size=10))
def test_an_escaped_path_reads_back_as_its_bytes(path: bytes, agent: bytes) -> None:
    """A request path with any bytes (but spaces, which end the target): the decoded path;
    a bad sequence in the user agent alone still counts the line once on every path."""
    raw_target = b"/" + path
    line = line_with(request=f"GET {nginx_escape(raw_target)} HTTP/1.1", agent=nginx_escape(agent))
    target = raw_target.decode("utf-8", "replace")
    invalid = not (_valid(raw_target) and _valid(agent))
    results = all_paths(line)
    for record, repaired in results:
        assert record["request"] == f"GET {target} HTTP/1.1"
        assert repaired == int(invalid)
    (full, _), (projected, _), (columnar, _) = results
    assert full["path"] == projected["path"] == columnar["path"]
    assert full["query"] == projected["query"] == columnar["query"]


def _valid(raw: bytes) -> bool:
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


@pytest.mark.parametrize(
    ("escaped", "decoded", "repaired"),
    [
        ("caf\\xC3\\xA9", "café", False),
        ("\\xE2\\x98\\x83", "☃", False),
        ("a\\x5Cb", "a\\b", False),
        ("say \\x22hi\\x22", 'say "hi"', False),
        ('apache \\"q\\" \\\\', 'apache "q" \\', False),
        ("\\xC3", "\ufffd", True),
        ("\\x41", "\\x41", False),  # nginx never escapes "A": kept as written (pushdown exact)
        ("\\xc3\\xa9", "é", False),  # lower-case hex too
        ("\\\\x22", "\\x22", False),  # an escaped backslash, then text
        ("no escapes", "no escapes", False),
    ],
)
def test_decode_escapes(escaped: str, decoded: str, repaired: bool) -> None:
    assert decode_escapes(escaped) == (decoded, repaired)


@pytest.mark.parametrize(
    ("target", "want"),
    [
        ("http://host:8080/product/P1?x=1", ("http", "host:8080", "/product/P1?x=1")),
        ("https://example.com", ("https", "example.com", "/")),
        ("http://h?x=1", ("http", "h", "/?x=1")),
        ("/plain?x=1", (None, None, "/plain?x=1")),
        ("http:/nope", (None, None, "http:/nope")),
        ("*", (None, None, "*")),
    ],
)
def test_split_target(target: str, want: tuple[Any, ...]) -> None:
    assert split_target(target) == want


def test_an_absolute_form_request_gets_scheme_and_host() -> None:
    line = line_with(request="GET http://shop.example:8080/product/P1?id=7&a=b HTTP/1.1")
    for record, _ in all_paths(line):
        assert record["scheme"] == "http"
        assert record["host"] == "shop.example:8080"
        assert record["path"] == "/product/P1"
        assert record["query"] == {"id": "7", "a": "b"}
        assert record["method"] == "GET" and record["protocol"] == "HTTP/1.1"


def test_origin_form_has_no_scheme_or_host() -> None:
    for record, _ in all_paths(line_with(request="GET /a%20b?q=1 HTTP/1.1")):
        assert (record["scheme"], record["host"], record["path"]) == (None, None, "/a b")


pieces = st.sampled_from(
    ["/product", "/pro", "duct", "\\x64", "\\x2F", "\\x5C", "\\x22", "\\xC3\\xA9", "%64", "?",
     "action=", "click", "cli\\x63k", "&", "c", "url", "\\x63url", "curl"]
)  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(
    st.lists(pieces, max_size=6).map("".join),
    st.lists(pieces, max_size=4).map("".join),
)
def test_escapes_never_make_the_fast_path_skip_a_match(target: str, agent: str) -> None:
    """The pushdown (agent.ql.pushdown) stays exact with escape decoding: a line whose decoded
    record matches a WHERE is always kept by the prefilter, whatever ``\\xHH`` it holds
    (escapes of bytes nginx never escapes, like ``\\x64``, stay as written)."""
    from agent.ingest.fastpath import LinePrefilter
    from agent.ql import compile_query
    from agent.ql.pushdown import line_needles

    q = compile_query(
        "SELECT count(*) FROM x WHERE path = '/product' AND query.action = 'click' "
        "AND user_agent LIKE 'curl%'"
    )
    pre = LinePrefilter([line_needles(q.query.where, "nginx")])
    line = line_with(request=f"GET {target or '/'} HTTP/1.1", agent=agent or "-")
    for record, _ in all_paths(line):
        if q.map(record):
            assert pre.may_match(line), line
    record = AccessLogParser().parse(line)
    if "\\x64" in target and "%" not in target:
        assert "d" not in record["path"] or "d" in target.replace("\\x64", "")
