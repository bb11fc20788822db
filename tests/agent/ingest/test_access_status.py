"""The status/size access-log kernel (``agent/ingest/columnar/access_status.py``) against the
full access kernel, the row parser (the reference) and DuckDB: for random nginx/Apache lines
built to hit its edges — escapes of every kind in every quoted field (``\\x22``, high bytes
that are and are not UTF-8, Apache's ``\\"``), odd heads and times, ``-`` and huge sizes,
unicode digits, ``\\r``, invalid UTF-8, blank, huge and garbage lines — its rows, rejects
(reasons, messages, line numbers) and repair count are the row path's, and its group-by of
``status, count(*), sum(bytes)`` is DuckDB's over the accepted lines."""

from __future__ import annotations

from collections import Counter
from typing import Any

import duckdb
import pyarrow as pa
from columnar_reference import assert_same, row_path
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.ingest.columnar.access import parse_access
from agent.ingest.columnar.access_status import NARROW, parse_status_size
from agent.ingest.columnar.lines import split_lines
from agent.ingest.columnar.parse import merge_fallback, parse_chunk

SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def nginx_escape(raw: bytes) -> str:
    """nginx's escaping of a logged variable: ``"``, ``\\``, controls and 0x7f up as ``\\xHH``."""
    return "".join(
        f"\\x{b:02X}" if b in (0x22, 0x5C) or b < 0x20 or b >= 0x7F else chr(b) for b in raw
    )


quoted = st.one_of(
    st.sampled_from(["-", "GET / HTTP/1.1", "Mozilla/5.0 (X11)", "", "a b", "https://t.co/x"]),
    st.binary(max_size=10).map(nginx_escape),  # high escapes, valid UTF-8 or not
    st.text(max_size=6).map(lambda t: nginx_escape(t.encode())),  # nginx-escaped UTF-8
    st.sampled_from(['a\\"b', "x\\\\", "\\", "\\x22", "\\xC3\\xA9", "\\xC3", "\\\\xC3", "é"]),
)
heads = st.sampled_from(
    ["10.0.0.1 - -", "::1 - alice", "2001:db8::ff00:42:8329 - -", "a b c", "a  b c", "a\tb c",
     "b\xe9b - -", "x - " + "u" * 70, "[a - -", " a - -", "a - - x", "-"]
)  # fmt: skip
times = st.sampled_from(
    ["21/Nov/2026:20:11:10 +0100", "21/Nov/2026:20:11:11 +0100", "31/Feb/2026:20:11:10 +0000",
     "21/Foo/2026:20:11:10 +0000", "21/Nov/2026:20:11:10", "٢١/Nov/2026:20:11:10 +0000",
     "21/Nov/2026:20:11:10 +0000] [x", "1/Nov/2026:20:11:10 +0000"]
)  # fmt: skip
statuses = st.sampled_from(["200", "404", "503", "-", "2000", "20", "٢٠٠", "20x", ""])
sizes = st.sampled_from(
    ["0", "512", "-", "123456789012345678", "1234567890123456789", "12a", "٣", "", "-1"]
)
rests = st.one_of(
    st.sampled_from(["", " ", " extra", ' "-"', " 1.2.3.4", "\r", " \r", '"x"', "x"]),
    st.tuples(quoted, quoted, st.sampled_from(["", " x", "x", "\r", ' "z"'])).map(
        lambda t: f' "{t[0]}" "{t[1]}"{t[2]}'
    ),
)


@st.composite
def line(draw: Any) -> bytes:
    text = (
        f'{draw(heads)} [{draw(times)}] "{draw(quoted)}" {draw(statuses)} {draw(sizes)}'
        f"{draw(rests)}"
    )
    data = text.encode("utf-8", "surrogatepass")
    kind = draw(st.integers(0, 9))
    if kind == 0:  # an invalid UTF-8 byte
        i = draw(st.integers(0, len(data)))
        data = data[:i] + draw(st.sampled_from([b"\xff", b"\xc3", b"\xe2\x98"])) + data[i:]
    elif kind == 1:  # a character removed
        i = draw(st.integers(0, max(0, len(data) - 1)))
        data = data[:i] + data[i + 1 :]
    elif kind == 2:  # huge
        data = data.replace(b'"', b'"' + b"u" * 5000, 1)
    return data.replace(b"\n", b"")


lines_st = st.lists(
    st.one_of(line(), line(), line(), line(), st.sampled_from([b"", b" ", b"\r"]),
              st.binary(max_size=30).map(lambda b: b.replace(b"\n", b""))),
    max_size=15,
)  # fmt: skip
projections = st.sets(st.sampled_from(sorted(NARROW - {"ts"})), max_size=3)


def _merged(kernel: Any, chunk: bytes, want: frozenset[str]) -> tuple[Any, ...]:
    """The chunk through ``kernel``, its deferred lines through the row parser, as
    ``parse_chunk`` does."""
    lines = split_lines(chunk)
    got = merge_fallback("nginx", lines, kernel(lines, want), want)
    return (got.table.to_pylist(), got.line_index.to_pylist(), got.rejects, got.repairs,
            got.table.schema)  # fmt: skip


@SETTINGS
@given(lines_st, projections)
def test_status_size_kernel_equals_the_full_kernel(lines: list[bytes], fields: set[str]) -> None:
    chunk = b"".join(x + b"\n" for x in lines)
    want = frozenset(fields) | {"ts"}
    assert _merged(parse_status_size, chunk, want) == _merged(parse_access, chunk, want)


@SETTINGS
@given(lines_st, projections, st.sampled_from(["nginx", "apache"]))
def test_status_size_projection_equals_the_row_path(
    lines: list[bytes], fields: set[str], fmt: str
) -> None:
    assert_same(fmt, lines, chunk_sizes=(1 << 20, 200, 1), fields=frozenset(fields))


@SETTINGS
@given(lines_st)
def test_status_size_group_by_equals_duckdb(lines: list[bytes]) -> None:
    """``status, count(*), sum(bytes) GROUP BY status`` over the accepted lines: the kernel's
    answer is DuckDB's ``regexp_extract`` of the two fields over the lines the row path
    accepts (DuckDB decides no line's validity: that is the row parser's; RE2's ``\\d`` is
    ASCII, so lines whose status or size are other digits are left out on both sides)."""
    chunk = b"".join(x + b"\n" for x in lines)
    got = parse_chunk("nginx", chunk, fields=frozenset({"status", "bytes"}))
    ref = row_path("nginx", lines)
    assert len(got.rejects) == len(ref["rejects"])
    assert got.repairs == ref["repairs"]
    accepted = [i for i, _ in ref["rows"]]
    assert got.line_index.to_pylist() == accepted
    con = duckdb.connect()
    con.execute("SET threads = 1")
    text = [lines[i].decode("utf-8", "replace") for i in accepted]
    con.register("t", pa.table({"i": pa.array(accepted, pa.int64()), "line": text}))
    sql = (
        "SELECT i, CASE WHEN m.status = '-' THEN NULL ELSE m.status::BIGINT END, "
        "CASE WHEN m.size = '-' THEN 0 ELSE m.size::BIGINT END FROM ("
        'SELECT i, regexp_extract(line, \'^[^"]*"(?:[^"\\\\]|\\\\.)*" (\\d{3}|-) '
        "(\\d+|-)', ['status', 'size']) AS m FROM t) WHERE m.size <> ''"
    )
    theirs: Counter[Any] = Counter()
    read = set()
    for i, status, size in con.execute(sql).fetchall():
        read.add(i)
        theirs[(status, "n")] += 1
        theirs[(status, "b")] += size
    ours: Counter[Any] = Counter()
    for i, row in zip(accepted, got.table.to_pylist(), strict=True):
        if i in read:
            ours[(row["status"], "n")] += 1
            ours[(row["status"], "b")] += row["bytes"]
    assert +ours == +theirs


def test_clean_nginx_lines_are_decided_by_the_kernel() -> None:
    """Lines as nginx writes them, high escapes included, take none of the full kernel."""
    ua = nginx_escape("Mozilla/5.0 (Linux; 小米 13) 微信".encode())
    lines = [
        b'10.0.0.1 - - [21/Nov/2026:20:11:10 +0100] "GET /a HTTP/1.1" 200 512 "-" "x"',
        f'::1 - bob [21/Nov/2026:20:11:11 +0100] "GET /{nginx_escape("ö".encode())} HTTP/1.1"'
        f' 404 - "https://t.co/x" "{ua}" "1.2.3.4"'.encode(),
        b'10.0.0.1 - - [21/Nov/2026:20:11:11 +0100] "GET /\\xC3 HTTP/1.1" - 7 "-" "\\x22q\\x22"',
        b'10.0.0.1 - - [21/Nov/2026:20:11:11 +0100] "-" 400 0',
    ]
    chunk = b"".join(x + b"\n" for x in lines)
    calls: list[int] = []
    import agent.ingest.columnar.access_status as mod

    real = mod.parse_access
    mod.parse_access = lambda lines, want: calls.append(len(lines)) or real(lines, want)  # type: ignore[assignment,func-returns-value]
    try:
        got = parse_status_size(split_lines(chunk), frozenset({"ts", "status", "bytes"}))
    finally:
        mod.parse_access = real  # type: ignore[assignment]
    assert calls == []
    assert got.table.column("status").to_pylist() == [200, 404, None, 400]
    assert got.table.column("bytes").to_pylist() == [512, 0, 7, 0]
    assert got.repaired == 1  # the lone \xC3 in the third request is invalid UTF-8
    assert_same("nginx", lines, fields=frozenset({"status", "bytes"}))
