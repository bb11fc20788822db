"""Issue 26's expressions: the row path, the columnar path and DuckDB agree.

For random typed tables (strings with an empty one and prefixes of each other, ints, floats
without NaN - DuckDB's NaN = NaN is TRUE, Python's is not -, booleans, NULLs everywhere,
numeric-looking text, epoch seconds, ISO timestamps) each expression is evaluated per row by
the row path's closure (:class:`ExprCompiler`), by the columnar path (:class:`ArrowEval`; it
may decline with ``Unsupported``, then the row path takes the chunk) and by DuckDB over the
same Arrow table with the DuckDB spelling beside each ELF QL one; in WHERE (the rows kept) and
as a GROUP BY key (the keys and counts, through ``compile_query`` and ``ArrowPlan``) too.
The URL functions have no DuckDB counterpart: fixed examples pin them to Python's urllib.
"""

from __future__ import annotations

import math
from datetime import datetime
from typing import Any

import duckdb
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.ql import QLError, compile_query
from agent.ql.arrow_eval import ArrowEval
from agent.ql.arrow_plan import ArrowPlan
from agent.ql.checker import analyze
from agent.ql.compiler import ExprCompiler
from agent.ql.fallback import Unsupported
from agent.ql.parser import parse
from cbt import CompressedBufferTree

# (ELF QL, DuckDB) - the same expression in both dialects
PAIRS: list[tuple[str, str]] = [
    ("CASE WHEN n > 2 THEN 'hi' WHEN n IS NULL THEN 'none' ELSE s END", ""),
    ("CASE s WHEN 'a' THEN 1 WHEN 'ab' THEN 2 ELSE n END", ""),
    ("CASE WHEN b THEN f END", ""),
    ("CASE WHEN s = p OR n < 0 THEN n * 2 ELSE 0 END", ""),
    ("CASE WHEN NOT b THEN 'no' END", ""),
    ("IF(n > 1, s, p)", ""),
    ("IF(b AND n > 0, 1, 0)", ""),
    ("NULLIF(s, p)", ""),
    ("NULLIF(n, 0)", ""),
    ("NULLIF(f, 1.5)", ""),
    ("starts_with(s, p)", ""),
    ("ends_with(s, 'b')", ""),
    ("contains(s, p)", ""),
    ("starts_with(s, '')", ""),
    ("CAST(n AS VARCHAR)", "TRY_CAST(n AS VARCHAR)"),
    ("CAST(b AS VARCHAR)", "TRY_CAST(b AS VARCHAR)"),
    ("CAST(f AS VARCHAR)", "TRY_CAST(f AS VARCHAR)"),
    ("CAST(f AS BIGINT)", "TRY_CAST(f AS BIGINT)"),
    ("CAST(n AS DOUBLE)", "TRY_CAST(n AS DOUBLE)"),
    ("CAST(b AS BIGINT)", "TRY_CAST(b AS BIGINT)"),
    ("CAST(n AS BOOLEAN)", "TRY_CAST(n AS BOOLEAN)"),
    ("CAST(f AS BOOLEAN)", "TRY_CAST(f AS BOOLEAN)"),
    ("CAST(txt AS BIGINT)", "TRY_CAST(txt AS BIGINT)"),
    ("CAST(txt AS DOUBLE)", "TRY_CAST(txt AS DOUBLE)"),
    ("CAST(txt AS BOOLEAN)", "TRY_CAST(txt AS BOOLEAN)"),
    ("CAST(stamp AS TIMESTAMP)", "CAST(TRY_CAST(stamp AS TIMESTAMP) AS VARCHAR)"),
    ("from_unixtime(ts)", "CAST(CAST(to_timestamp(ts) AS TIMESTAMP) AS VARCHAR)"),
    ("from_unixtime(sec)", "CAST(CAST(to_timestamp(sec) AS TIMESTAMP) AS VARCHAR)"),
    *[
        (
            f"date_trunc('{u}', ts)",
            f"CAST(date_trunc('{u}', CAST(to_timestamp(ts) AS TIMESTAMP)) AS VARCHAR)",
        )
        for u in ("second", "minute", "hour", "day", "week", "month", "quarter", "year")
    ],
    (
        "date_trunc('hour', stamp)",
        "CAST(date_trunc('hour', TRY_CAST(stamp AS TIMESTAMP)) AS VARCHAR)",
    ),
]
PAIRS = [(e, d or e) for e, d in PAIRS]
CONDITIONS = [
    (e, d)
    for e, d in PAIRS
    if e.startswith(("starts_with", "ends_with", "contains", "CAST(txt AS BOOLEAN"))
] + [
    ("CASE WHEN n > 2 THEN b ELSE NOT b END", ""),
    ("IF(s = 'a', b, n > 0)", ""),
    ("NULLIF(b, TRUE)", ""),
    (
        "date_trunc('day', ts) = '1970-01-01 00:00:00'",
        "CAST(date_trunc('day', CAST(to_timestamp(ts) AS TIMESTAMP)) AS VARCHAR)"
        " = '1970-01-01 00:00:00'",
    ),
]
GROUP_KEYS = [
    (e, d)
    for e, d in PAIRS
    if e.startswith(("CASE WHEN n > 2", "date_trunc('minute'", "CAST(txt AS BIGINT"))
] + [
    ("IF(starts_with(s, 'a'), 'a', 'other')", ""),
    ("NULLIF(s, '')", ""),
]
CONDITIONS = [(e, d or e) for e, d in CONDITIONS]
GROUP_KEYS = [(e, d or e) for e, d in GROUP_KEYS]

TEXT = st.sampled_from(["", "a", "ab", "b", "ba", "é", "aé", "A"])
NUMERIC_TEXT = st.one_of(
    st.sampled_from(
        [
            "1",
            "-2",
            " 12 ",
            "1.5",
            "2.5",
            "-0.5",
            "1e3",
            "+5",
            "",
            "x",
            "1.4999",
            "00",
            "true",
            "FALSE",
            "t",
            "f",
            "yes",
            "no",
            "0",
            "1.",
            ".5",
            "9223372036854775807",
            "9223372036854775808",
            "nan",
            "inf",
            "-inf",
            "1e400",
        ]
    ),
    st.integers(-(10**6), 10**6).map(str),
    st.floats(-1e6, 1e6, allow_nan=False).map(repr),
)
STAMPS = st.one_of(
    st.datetimes(min_value=datetime(1971, 1, 1)).map(lambda d: d.isoformat(" ")),
    st.sampled_from(["2024-02-29", "2024-02-29 23:59:59.5", "2024-02-30", "x", ""]),
)
EPOCH = st.one_of(
    st.floats(-2e9, 4e9, allow_nan=False), st.sampled_from([0.0, -0.5, 59.9999995, 1e9 + 0.25])
)
COLUMNS: dict[str, tuple[pa.DataType, st.SearchStrategy[Any]]] = {
    "s": (pa.string(), TEXT),
    "p": (pa.string(), TEXT),
    "n": (pa.int64(), st.integers(-5, 5)),
    "f": (
        pa.float64(),
        st.one_of(
            st.floats(-1e20, 1e20, allow_nan=False, allow_infinity=False),
            st.sampled_from([0.5, 1.5, 2.5, -2.5, -0.0, 1e16, 0.1]),
        ),
    ),
    "b": (pa.bool_(), st.booleans()),
    "txt": (pa.string(), NUMERIC_TEXT),
    "ts": (pa.float64(), EPOCH),
    "sec": (pa.int64(), st.integers(-(2**33), 2**34)),
    "stamp": (pa.string(), STAMPS),
}


@st.composite
def tables(draw: st.DrawFn) -> pa.Table:
    rows = draw(st.integers(1, 8))
    cols = {"i": pa.array(range(rows), pa.int64())}
    for name, (t, values) in COLUMNS.items():
        cols[name] = pa.array(
            draw(st.lists(st.one_of(st.none(), values), min_size=rows, max_size=rows)), t
        )
    return pa.table(cols)


def same(a: Any, b: Any) -> bool:
    """Equal values of the same kind (ints and floats apart; -0.0 equals 0.0 as in SQL)."""
    if isinstance(a, float) and isinstance(b, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    return a == b and type(a) is type(b)


_CON: list[Any] = []


def duck(table: pa.Table, sql: str) -> list[Any]:
    if not _CON:
        _CON.append(duckdb.connect())
        _CON[0].execute("SET threads = 1")
        _CON[0].execute("SET TimeZone = 'UTC'")
    con = _CON[0]
    con.register("t", table)
    rows = con.execute(sql).fetchall()
    return [r[0] if len(r) == 1 else r for r in rows]


def row_values(table: pa.Table, text: str) -> list[Any]:
    node = parse(f"SELECT count(*) FROM t WHERE {text}").where
    f = ExprCompiler().value(node)
    return [f(r) for r in table.to_pylist()]


def columnar_values(table: pa.Table, text: str) -> list[Any] | None:
    node = parse(f"SELECT count(*) FROM t WHERE {text}").where
    ev = ArrowEval(table)
    try:
        return ev.full(ev.value(node)).to_pylist()
    except Unsupported:
        return None  # declined: the row path runs the chunk


def check(got: list[Any], want: list[Any], what: str, table: pa.Table) -> None:
    bad = [(i, g, w) for i, (g, w) in enumerate(zip(got, want, strict=True)) if not same(g, w)]
    assert not bad, f"{what}: (row, got, want) {bad[:3]} over {table.to_pylist()[bad[0][0]]}"


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tables())
def test_select_values_agree_with_duckdb(table: pa.Table) -> None:
    """Every expression of PAIRS in one DuckDB query per table (one connection, one scan)."""
    cols = ", ".join(f"{sql} AS c{j}" for j, (_, sql) in enumerate(PAIRS))
    rows = duck(table, f"SELECT {cols} FROM t ORDER BY i")
    for j, (elf, _) in enumerate(PAIRS):
        want = [r[j] for r in rows] if len(PAIRS) > 1 else rows
        check(row_values(table, elf), want, f"{elf}: row path vs DuckDB", table)
        col = columnar_values(table, elf)
        if col is not None:
            check(col, want, f"{elf}: columnar path vs DuckDB", table)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tables())
@pytest.mark.parametrize(("cond", "sql"), CONDITIONS, ids=[e for e, _ in CONDITIONS])
def test_where_keeps_the_rows_duckdb_keeps(cond: str, sql: str, table: pa.Table) -> None:
    want = duck(table, f"SELECT i FROM t WHERE {sql} ORDER BY i")
    q = compile_query(f"SELECT count(*) FROM t WHERE {cond}")
    assert [r["i"] for r in table.to_pylist() if q.map(r)] == want
    node = parse(f"SELECT count(*) FROM t WHERE {cond}").where
    ev = ArrowEval(table)
    try:
        mask = ev.full(ev.pred(node)).to_pylist()
    except Unsupported:
        return
    assert [i for i, m in enumerate(mask) if m is True] == want


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tables())
@pytest.mark.parametrize(("key", "sql"), GROUP_KEYS, ids=[e for e, _ in GROUP_KEYS])
def test_group_by_keys_agree_with_duckdb(key: str, sql: str, table: pa.Table) -> None:
    want = dict(duck(table, f"SELECT {sql}, count(*) FROM t GROUP BY {sql}").__iter__())
    q = compile_query(f"SELECT {key} AS k, count(*) AS c FROM t GROUP BY {key}")
    tree = CompressedBufferTree(q.make_aggregator())
    for r in table.to_pylist():
        for k, v in q.map(r):
            tree.insert(k, v)
    rows = q.rows(tree.flush())
    assert {r["k"]: r["c"] for r in rows} == want
    plan = ArrowPlan(analyze(q.query), q.make_aggregator())
    try:
        keys, states = plan.partials(table)
    except Unsupported:
        return
    merged = CompressedBufferTree(q.make_aggregator())
    merged.merge_states(keys, states)
    assert {r["k"]: r["c"] for r in q.rows(merged.flush())} == want


# ---- fixed examples -------------------------------------------------------------------------
def one(expr: str, record: dict[str, Any]) -> Any:
    return row_values(pa.Table.from_pylist([record]) if record else pa.table({"i": [0]}), expr)[0]


@pytest.mark.parametrize(
    ("expr", "record", "want"),
    [
        ("url_extract_path(u)", {"u": "/a/b?x=1&y=2#frag"}, "/a/b"),
        ("url_extract_path(u)", {"u": "http://h.example"}, ""),
        ("url_extract_path(u)", {"u": "https://h.example:8443/p%2Fq?x"}, "/p%2Fq"),
        ("url_extract_path(u)", {"u": "?only=query"}, ""),
        ("url_extract_path(u)", {"u": ""}, ""),
        ("url_extract_path(u)", {"u": "http://[::1"}, None),
        ("url_extract_path(u)", {"u": None}, None),
        ("url_extract_path(u)", {"u": "GET /a/b?x=1 HTTP/1.1"}, "/a/b"),  # a request line
        ("url_extract_path(u)", {"u": "GET /a/b"}, "/a/b"),  # HTTP/0.9
        ("url_extract_path(u)", {"u": "GET http://h/p?x HTTP/1.1"}, "/p"),
        ("url_extract_parameter(u, 'x')", {"u": "GET /a?x=1&x=2 HTTP/1.1"}, "1"),
        ("url_extract_parameter(u, 'a')", {"u": "/p?a=1&a=2"}, "1"),  # the first one
        ("url_extract_parameter(u, 'a')", {"u": "/p?b=1&a"}, ""),  # a name without '='
        ("url_extract_parameter(u, 'a')", {"u": "/p?b=1"}, None),
        ("url_extract_parameter(u, 'a')", {"u": "/p"}, None),
        ("url_extract_parameter(u, 'q')", {"u": "/s?q=caf%C3%A9+au+lait"}, "café au lait"),
        ("url_extract_parameter(u, 'q')", {"u": "/s?q=%zz"}, "%zz"),  # invalid: as written
        ("url_extract_parameter(u, 'a b')", {"u": "/s?a+b=1"}, "1"),  # names decoded too
        ("url_extract_parameter(u, 'a')", {"u": "/p?a=1#a=2"}, "1"),
        ("CAST(x AS BIGINT)", {"x": "abc"}, None),  # a failed cast is NULL (TRY_CAST)
        ("CAST(x AS BIGINT)", {"x": 1e30}, None),
        ("CAST(x AS BIGINT)", {"x": float("nan")}, None),
        ("CAST(x AS DOUBLE)", {"x": [1]}, None),
        ("CAST(x AS VARCHAR)", {"x": {"a": 1}}, None),
        ("CAST(x AS TIMESTAMP)", {"x": "2024-05-01T10:00:00+02:00"}, "2024-05-01 08:00:00"),
        ("CAST(x AS TIMESTAMP)", {"x": 1.5}, "1970-01-01 00:00:01.5"),
        ("from_unixtime(x)", {"x": 1e20}, None),  # beyond year 9999
        ("from_unixtime(x)", {"x": "12"}, None),
        ("date_trunc('MINUTES', x)", {"x": 119.5}, "1970-01-01 00:01:00"),
        ("NULLIF(x, 1)", {"x": 1.0}, None),  # 1 = 1.0
        ("NULLIF(x, 1)", {"x": True}, True),  # booleans are not numbers
        ("NULLIF(x, NULL)", {"x": "a"}, "a"),
        ("IF(x, 'y', 'n')", {"x": None}, "n"),  # UNKNOWN is not TRUE
        ("IF(x, 'y', 'n')", {"x": 1}, "n"),  # a non-boolean condition neither
        ("CASE x WHEN NULL THEN 'null' ELSE 'other' END", {"x": None}, "other"),
        ("CASE WHEN x > 1 THEN 'big' END", {}, None),
        ("contains(x, '')", {"x": ""}, True),
        ("starts_with(x, 'a')", {"x": 1}, None),
    ],
)
def test_fixed_examples(expr: str, record: dict[str, Any], want: Any) -> None:
    node = parse(f"SELECT count(*) FROM t WHERE {expr}").where
    assert same(ExprCompiler().value(node)(record), want)


@pytest.mark.parametrize(
    ("query", "fragment"),
    [
        ("SELECT count(*) FROM t WHERE IF(a, b)", "if() takes 3 arguments, got 2"),
        ("SELECT count(*) FROM t WHERE IF('x', 1, 2) = 1", "if() expects a boolean"),
        ("SELECT count(*) FROM t WHERE NULLIF(a) = 1", "nullif() takes 2 arguments"),
        ("SELECT count(*) FROM t WHERE starts_with(a, 1)", "starts_with() expects a string"),
        ("SELECT count(*) FROM t WHERE contains(1, a)", "contains() expects a string"),
        ("SELECT count(*) FROM t WHERE ends_with(a)", "ends_with() takes 2 arguments"),
        ("SELECT count(*) FROM t GROUP BY date_trunc('fortnight', ts)", "date_trunc unit"),
        ("SELECT count(*) FROM t GROUP BY date_trunc(u, ts)", "expects a string literal"),
        ("SELECT count(*) FROM t GROUP BY from_unixtime('x')", "from_unixtime() expects a number"),
        ("SELECT count(*) FROM t GROUP BY url_extract_path(1)", "expects a string"),
        ("SELECT count(*) FROM t GROUP BY url_extract_parameter(u)", "takes 2 arguments"),
        ("SELECT count(*) FROM t GROUP BY CAST(x AS DATE)", "a type after AS"),
        ("SELECT count(*) FROM t GROUP BY CAST(x BIGINT)", "AS in CAST"),
        ("SELECT count(*) FROM t GROUP BY CASE END", "WHEN in CASE"),
        ("SELECT count(*) FROM t GROUP BY CASE WHEN a THEN 1", "WHEN, ELSE or END in CASE"),
        ("SELECT count(*) FROM t GROUP BY CASE WHEN 1 THEN 1 END", "CASE WHEN expects a condition"),
        ("SELECT count(*) FROM t GROUP BY CASE a WHEN 'x' THEN 1 END + 1", ""),
        ("SELECT count(*) FROM t GROUP BY CASE 1 WHEN 'x' THEN 1 END", "cannot compare"),
        ("SELECT count(*) FROM t WHERE CASE WHEN a THEN 'x' END", "WHERE expects a condition"),
        ("SELECT count(*) FROM t GROUP BY CAST(x AS VARCHAR) + 1", "expects numbers"),
        ("SELECT count(*) FROM t WHERE IF(a, 1, 2) + 'x' = 1", "expects numbers"),
        ("SELECT count(*) FROM t WHERE date_trunc('day', ts) + 1 = 2", "expects numbers"),
    ],
)
def test_checker_errors(query: str, fragment: str) -> None:
    if not fragment:  # accepted: a CASE of numbers is a number
        compile_query(query)
        return
    with pytest.raises(QLError, match=fragment.replace("(", r"\(").replace(")", r"\)")):
        compile_query(query)


def test_case_and_cast_print_back() -> None:
    text = (
        "SELECT CASE WHEN a = 1 THEN 'x' WHEN b THEN CAST(c AS VARCHAR) ELSE NULL END AS k, "
        "count(*) FROM t GROUP BY CASE a WHEN 1 THEN 'x' END, CAST(c AS int)"
    )
    q = parse(text)
    assert parse(q.to_sql()) == q
    assert "CAST(c AS BIGINT)" in q.to_sql()
    assert parse("SELECT count(*) FROM t GROUP BY `cast`, cast").group_by[0].path == ("cast",)


@pytest.mark.parametrize("fmt", ["json", "nginx"])
@pytest.mark.parametrize(
    ("call", "like"),
    [
        ("starts_with(path, '/api')", "path LIKE '/api%'"),
        ("ends_with(path, '.png')", "path LIKE '%.png'"),
        ("contains(path, 'cart')", "path LIKE '%cart%'"),
        ("starts_with(path, '')", "path LIKE '%'"),  # no needle: every line parsed
    ],
)
def test_string_tests_push_down_as_their_like_shapes(call: str, like: str, fmt: str) -> None:
    from agent.ql.pushdown import line_needles

    def needles(cond: str) -> Any:
        got = line_needles(parse(f"SELECT count(*) FROM t WHERE {cond} AND a = 'x'").where, fmt)
        return None if got is None else got.clauses

    assert needles(call) == needles(like)


URLISH = st.one_of(
    st.text(alphabet=st.sampled_from("/?#:=&[]@.ahtps% \t\né+-"), max_size=14),
    st.builds(
        lambda scheme, host, rest: f"{scheme}://{host}{rest}",
        st.sampled_from(["http", "https", "h2+x", "1x"]),
        st.text(alphabet=st.sampled_from("ab.:@[]1é%"), max_size=5),
        st.text(alphabet=st.sampled_from("/?#=&ab%2F é\t"), max_size=8),
    ),
    st.builds(lambda rest: "/" + rest, st.text(alphabet=st.sampled_from("/?#=&ab%é "), max_size=8)),
)
URLISH = st.one_of(
    URLISH,
    st.builds(  # request lines: "METHOD TARGET [PROTOCOL]" and near misses
        lambda method, url, proto: f"{method} {url}{proto}",
        st.sampled_from(["GET", "POST", ""]),
        URLISH,
        st.sampled_from(["", " HTTP/1.1", " a b", " "]),
    ),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.none(), URLISH), min_size=1, max_size=6))
def test_url_extract_path_columnar_equals_urlsplit(urls: list[str | None]) -> None:
    """The columnar path's regex (for plain URLs) and row fallback give urlsplit's path."""
    table = pa.table({"u": pa.array(urls, pa.string())})
    want = row_values(table, "url_extract_path(u)")
    assert columnar_values(table, "url_extract_path(u)") == want


def test_new_expressions_over_aggregates_at_the_master() -> None:
    """SELECT / HAVING / ORDER BY expressions over aggregates (evaluated on result rows)."""
    q = compile_query(
        "SELECT k, CASE WHEN count(*) > 1 THEN 'many' ELSE 'one' END AS size, "
        "IF(sum(x) > 2, 'hi', 'lo') AS s, CAST(count(*) AS VARCHAR) AS c, "
        "NULLIF(max(x), 3) AS m FROM t GROUP BY k "
        "HAVING starts_with(CASE WHEN count(*) > 0 THEN 'yes' END, 'y') "
        "ORDER BY CAST(sum(x) AS VARCHAR) DESC"
    )
    tree = CompressedBufferTree(q.make_aggregator())
    for r in [{"k": "a", "x": 1}, {"k": "a", "x": 2}, {"k": "b", "x": 3}]:
        for k, v in q.map(r):
            tree.insert(k, v)
    assert q.rows(tree.flush()) == [
        {"k": "a", "size": "many", "s": "hi", "c": "2", "m": 2},
        {"k": "b", "size": "one", "s": "hi", "c": "1", "m": None},
    ]


def test_elf_run_on_an_access_log_columnar_equals_row_path(tmp_path: Any) -> None:
    """End to end over an nginx file (``elf run``'s engine): event time by the minute, request
    paths and a parameter, a CASE over the status - the columnar path as the row path."""
    from agent.runtime.local.oneshot import run_file

    lines = []
    for i in range(600):
        minute, second = divmod(i // 5, 60)
        status = (200, 404, 500, 301)[i % 4]
        target = f"/shop/{('cart', 'item', 'pay')[i % 3]}?id={i % 7}&q=caf%C3%A9+{i % 2}"
        lines.append(
            f"10.0.0.{i % 9} - - [15/Jan/2027:08:{minute:02d}:{second:02d} +0000] "
            f'"GET {target} HTTP/1.1" {status} {i} "-" "ua"'
        )
    path = tmp_path / "access.log"
    path.write_text("\n".join(lines) + "\n")
    query = (
        "SELECT date_trunc('minute', ts) AS m, url_extract_path(request) AS p, "
        "CASE WHEN status >= 500 THEN 'error' WHEN status >= 400 THEN 'miss' ELSE 'ok' END AS c, "
        "count(*) AS n, collect_set(url_extract_parameter(request, 'q')) AS q "
        "FROM t WHERE NOT ends_with(url_extract_path(request), 'pay') "
        "GROUP BY date_trunc('minute', ts), url_extract_path(request), "
        "CASE WHEN status >= 500 THEN 'error' WHEN status >= 400 THEN 'miss' ELSE 'ok' END"
    )
    col = run_file(query, path, "nginx", epoch_seconds=3600)
    row = run_file(query, path, "nginx", epoch_seconds=3600, columnar=False)
    assert col.epochs == row.epochs
    rows = [r for _, rs in col.epochs for r in rs]
    assert {r["p"] for r in rows} == {"/shop/cart", "/shop/item"}
    assert {r["m"] for r in rows} == {"2027-01-15 08:00:00", "2027-01-15 08:01:00"}
    assert sum(r["n"] for r in rows) == 400
    assert {v for r in rows for v in r["q"]} == {"café 0", "café 1"}
