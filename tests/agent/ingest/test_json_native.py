"""The C JSON-lines scanner (``json_scan_c.c``, kernel ``json_native.py``) against the msgspec
kernel, the row path (orjson + validation: the reference) and DuckDB.

Properties (hypothesis, the JSON kernel strategies of ``test_columnar_parse``): for valid,
malformed, unicode, huge, empty, deep, duplicate-key, big-number and escaped lines, the native
kernel's table (values and Arrow types), line index and rejects (reasons, messages) are the
row path's and the msgspec kernel's, for several chunkings; the benchmark query's group-by is
DuckDB's over the accepted lines; random bytes and random line bounds never crash the scanner.
The fallback when the extension is not built is tested by hiding it.
"""

from __future__ import annotations

import contextlib
import importlib
import math
import random
import sys
from collections import defaultdict
from typing import Any

import duckdb
import numpy as np
import orjson
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sanitizer.json_scan_valgrind import mutated
from test_columnar_parse import (
    PROJECTABLE,
    check_projected_json,
    number_text,
    parsed,
    projected_json_line,
)

from agent.ingest.columnar import json_native
from agent.ingest.columnar.lines import split_lines
from agent.ingest.columnar.parse import UnsupportedChunk

pytestmark = pytest.mark.skipif(
    json_native.SCANNER is None, reason="the json_scan_c extension is not built (no compiler)"
)
MANY = settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))


def _result(lines: list[bytes], fields: frozenset[str], native: bool) -> Any:
    json_native.use_native(native)
    try:
        got = parsed("json", *lines, fields=fields)
    except UnsupportedChunk:
        return "unsupported"
    finally:
        json_native.use_native(True)
    cols = {name: (got.table.column(name).type, got.table.column(name).to_pylist())
            for name in got.table.column_names}  # fmt: skip
    return cols, got.line_index.to_pylist(), got.rejects, got.repairs


def check_three_ways(lines: list[bytes], fields: frozenset[str]) -> None:
    """native = row path (values, types, rejects, several chunkings) and native = msgspec."""
    check_projected_json(lines, fields)  # the native kernel (on by default) vs the row path
    native, ms = _result(lines, fields, True), _result(lines, fields, False)
    assert native == ms, lines


@MANY
@given(
    st.lists(projected_json_line(), max_size=14),
    st.sets(st.sampled_from(PROJECTABLE), max_size=4),
)
def test_native_equals_the_row_path_and_msgspec(lines: list[bytes], fields: set[str]) -> None:
    check_three_ways(lines, frozenset(fields))


@MANY
@given(st.lists(number_text(), min_size=1, max_size=6), st.booleans())
def test_native_numbers_are_orjsons(numbers: list[str], skipped: bool) -> None:
    """Every number text: the same value and type as orjson, or the row parser decides."""
    key = "b" if skipped else "a"
    lines = [b'{"ts":1,"%s":%s}' % (key.encode(), t.encode()) for t in numbers]
    check_three_ways(lines, frozenset({"a"}))


@MANY
@given(st.lists(st.floats(allow_nan=False, allow_infinity=False), min_size=1, max_size=20))
def test_native_floats_round_as_orjson(values: list[float]) -> None:
    lines = [b'{"ts":%s,"a":%s}' % (orjson.dumps(v), orjson.dumps(v)) for v in values]
    got = parsed("json", *lines, fields=frozenset({"a"}))
    want = [orjson.loads(x)["a"] for x in lines]
    assert got.table.column("a").to_pylist() == want
    assert got.table.column("ts").to_pylist() == want


escapes = st.lists(
    st.sampled_from(['\\"', "\\\\", "\\/", "\\b", "\\f", "\\n", "\\r", "\\t", "\\u0000",
                     "\\u00e9", "\\u20ac", "\\ud83d\\ude00", "\\uD800", "\\udc00", "\\u12",
                     "\\x", "é", "€", "😀", "\x7f", "\x01", "a", " "]),
    max_size=6,
).map("".join)  # fmt: skip


@MANY
@given(st.lists(escapes, min_size=1, max_size=6), st.booleans())
def test_native_strings_and_escapes(texts: list[str], as_key: bool) -> None:
    lines = [(b'{"ts":1,"%s":1}' if as_key else b'{"ts":1,"a":"%s"}') % t.encode() for t in texts]
    check_three_ways(lines, frozenset({"a", "\u00e9", "k y"}))


@pytest.mark.parametrize("depth", [1, 2, 510, 511, 512, 513, 1022, 1023, 1024, 1025, 3000])
@pytest.mark.parametrize("key", ["a", "b"])
def test_native_depth(depth: int, key: str) -> None:
    for open_, close in ((b"[", b"]"), (b'{"x":', b"}")):
        line = b'{"ts":1,"%s":' % key.encode() + open_ * depth + b"1" + close * depth + b"}"
        fields = frozenset({"b"} if depth < 300 else {"c"})
        check_three_ways([line, b'{"ts":2,"b":3}'], fields)


@pytest.mark.parametrize(
    "lines",
    [
        [b'{"ts":1,"a":1,"a":2}', b'{"ts":2,"a":3}'],  # duplicate projected key: last wins
        [b'{"ts":1,"b":1,"b":"x","a":2}'],  # duplicate skipped key
        [b'{"ts":1,"a":9223372036854775807}', b'{"ts":2,"a":-9223372036854775808}'],
        [b'{"ts":1,"a":9223372036854775808}'],  # uint64 to orjson: Arrow refuses the column
        [b'{"ts":1,"a":-9223372036854775809}', b'{"ts":1,"a":1.5}'],  # a float to orjson
        [b'{"ts":1,"a":1}', b'{"ts":2,"a":2.5}'],  # int and float: msgspec decides the chunk
        [b'{"ts":1,"a":"x"}', b'{"ts":2,"a":{"n":1}}'],  # nested: msgspec decides
        [b'{"ts":"bad","a":"x"}', b'{"ts":1}'],  # the only string is on a rejected line
        [b'{"ts":1,"a":true}', b'{"ts":1,"a":false}', b'{"ts":1,"a":null}', b'{"ts":1}'],
        [b'{"ts":1.8e9,"a":0.30000000000000004,"b":1e-30}', b'{"ts":-0,"a":-0.0}'],
        [b'{"ts":1,"a":"' + "é😀".encode() * 5000 + b'"}', b""],  # huge, then blank
        [b"{}", b'{"ts":1}', b" ", b"\x0c", b"[]", b"null", b'"ts"', b"{"],
    ],
)
def test_native_examples(lines: list[bytes]) -> None:
    check_three_ways(lines, frozenset({"a", "b"}))


# ---- DuckDB: the benchmark query over the accepted lines ----------------------------------------

DIRS = ["Books", "Électronique", 'Toys \\"x\\"', "家電", "a\\u00e9"]


@st.composite
def click_line(draw: Any) -> bytes:
    kind = draw(st.integers(0, 9))
    if kind <= 6:
        obj = {
            "ts": draw(st.sampled_from([1.8e9, 1800000000, "2026-11-21T15:00:00Z"])),
            "user": draw(st.text(max_size=5)),
            "big": draw(st.integers(-(2**63), 2**63 - 1)),
            "price": draw(st.floats(0, 1000, allow_nan=False).map(lambda f: round(f, 2))),
        }
        text = orjson.dumps(obj)[:-1]
        directory = draw(st.sampled_from(DIRS))
        action = draw(st.sampled_from(["click", "view", "buy"]))
        return text + b',"directory":"%s","action":"%s"}' % (directory.encode(), action.encode())
    return draw(projected_json_line())


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(click_line(), min_size=1, max_size=30))
def test_native_group_by_equals_duckdb(lines: list[bytes]) -> None:
    """``directory, action, count(*), sum(price)`` from the native table equals DuckDB's
    ``read_json`` over the lines the row path accepts (validity is the row parser's)."""
    fields = frozenset({"directory", "action", "price"})
    try:
        got = parsed("json", *lines, fields=fields)
    except UnsupportedChunk:
        return
    if any(not pa.types.is_string(got.table.column(c).type) and got.table.column(c).null_count
           < got.table.num_rows for c in ("directory", "action")):  # fmt: skip
        return  # a number or object as a directory: not the benchmark's data
    if not pa.types.is_floating(got.table.column("price").type) and got.table.num_rows:
        return
    # the accepted lines as the row path reads them (invalid UTF-8 replaced: DuckDB refuses it)
    accepted = [lines[i].decode("utf-8", "replace").encode() for i in got.line_index.to_pylist()]
    ours: dict[tuple, list[float]] = defaultdict(lambda: [0, 0.0])
    for row in got.table.to_pylist():
        cell = ours[(row["directory"], row["action"])]
        cell[0] += 1
        cell[1] += row["price"] or 0.0
    con = duckdb.connect()
    con.execute("SET threads=1")
    rel = con.read_json(
        _write(accepted),
        format="newline_delimited",
        columns={"directory": "VARCHAR", "action": "VARCHAR", "price": "DOUBLE"},
    ) if accepted else None  # fmt: skip
    theirs = {}
    if rel is not None:
        sql = "SELECT directory, action, count(*), coalesce(sum(price), 0) FROM rel GROUP BY ALL"
        theirs = {(d, a): [c, s] for d, a, c, s in con.sql(sql).fetchall()}
    assert set(ours) == set(theirs), (lines, ours, theirs)
    for key, (count, total) in ours.items():
        assert theirs[key][0] == count
        assert math.isclose(theirs[key][1], total, rel_tol=1e-9, abs_tol=1e-9)


def _write(lines: list[bytes]) -> str:
    import tempfile

    with tempfile.NamedTemporaryFile("wb", suffix=".json", delete=False) as f:
        f.write(b"".join(x + b"\n" for x in lines))
    return f.name


# ---- hostile bytes: never a crash ------------------------------------------------------------


def _scan(chunk: bytes, starts: np.ndarray, ends: np.ndarray, names: tuple[bytes, ...]) -> None:
    n, f = len(starts), len(names)
    out = json_native.SCANNER.scan(  # type: ignore[union-attr]
        chunk, starts, ends, names, np.empty(f * n, np.uint8), np.empty(f * n, np.int64),
        np.empty(f * (n + 1), np.int32), np.empty(n, np.uint8),
    )  # fmt: skip
    assert len(out) == f


json_bytes = st.lists(
    st.sampled_from([b"{", b"}", b"[", b"]", b'"', b":", b",", b"\\", b"\\u", b"d83d", b"dc00",
                     b"0", b"-", b"1e", b"99", b".", b"true", b"nul", b" ", b"\r", b'"a"',
                     b'"ts"', b"\xc3", b"\xa9", b"\xed\xa0\x80", b"\xf4\x90", b"\x00", b"\n"]),
    max_size=40,
).map(b"".join) | st.binary(max_size=80)  # fmt: skip


@settings(max_examples=1500, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(json_bytes, min_size=1, max_size=6), st.randoms(use_true_random=False))
def test_random_bytes_never_crash_the_scanner(pieces: list[bytes], rnd: random.Random) -> None:
    chunk = b"".join(pieces)
    k = len(chunk)
    bounds = sorted(rnd.randint(0, k) for _ in range(2 * rnd.randint(0, 6)))
    starts = np.asarray(bounds[0::2], np.int64)
    ends = np.asarray(bounds[1::2], np.int64)
    _scan(chunk, starts, ends, (b"a", b"ts", b"", b"\xc3\xa9"))


@settings(max_examples=500, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(json_bytes, min_size=1, max_size=6))
def test_random_bytes_as_lines_are_the_row_paths(pieces: list[bytes]) -> None:
    lines = [p.replace(b"\n", b"") for p in pieces]
    with contextlib.suppress(UnicodeDecodeError):
        b"".join(lines).decode()  # invalid UTF-8 never reaches the kernel (the row path repairs)
        check_three_ways(lines, frozenset({"a"}))


def test_mutated_lines_never_crash_the_scanner() -> None:
    """Valid lines with bytes replaced, inserted, deleted and cut short (the valgrind run's
    generator), 100,000 lines per chunk and each line alone (an exact-size buffer)."""
    rnd = random.Random(27)
    for _ in range(2):
        lines = mutated(rnd, 100_000)
        chunk = b"\n".join(lines) + b"\n"
        split = split_lines(chunk)
        _scan(chunk, split.starts, split.ends, (b"a", b"ts", b"b", b"d"))
    for x in lines[:5000]:
        _scan(x, np.zeros(1, np.int64), np.full(1, len(x), np.int64), (b"a", b"ts"))


def test_bad_line_bounds_are_refused_before_any_read() -> None:
    chunk = b'{"ts":1}\n'
    for starts, ends in (([0], [100]), ([-1], [3]), ([5], [3]), ([0, 0], [3])):
        with pytest.raises(ValueError):
            _scan(chunk, np.asarray(starts, np.int64), np.asarray(ends, np.int64), (b"a",))
    with pytest.raises(ValueError):  # output buffers too small
        json_native.SCANNER.scan(  # type: ignore[union-attr]
            chunk, np.zeros(1, np.int64), np.full(1, 8, np.int64), (b"a",),
            np.empty(0, np.uint8), np.empty(1, np.int64), np.empty(2, np.int32),
            np.empty(1, np.uint8),
        )  # fmt: skip


def test_overlapping_line_bounds_are_read_safely() -> None:
    line = b'{"ts":1,"a":"' + b"x" * 1000 + b'"}'
    n = 3000
    starts, ends = np.zeros(n, np.int64), np.full(n, len(line), np.int64)
    _scan(line, starts, ends, (b"a", b"ts"))


# ---- the fallback when the extension is missing ----------------------------------------------


def test_without_the_extension_msgspec_decides(monkeypatch: pytest.MonkeyPatch) -> None:
    lines = [b'{"ts":1,"a":"x"}', b"nope", b'{"ts":2,"a":"y","b":[1]}']
    want = _result(lines, frozenset({"a"}), True)
    monkeypatch.setitem(sys.modules, "agent.ingest.columnar.json_scan_c", None)  # ImportError
    try:
        importlib.reload(json_native)
        assert json_native.SCANNER is None and not json_native.native_in_use()
        assert not json_native.use_native(True)
        got = parsed("json", *lines, fields=frozenset({"a"}))
        assert got.table.column("a").to_pylist() == ["x", "y"]
        assert [r[:2] for r in got.rejects] == [(1, "bad_json")]
        check_projected_json(lines, frozenset({"a"}))
    finally:
        monkeypatch.undo()
        importlib.reload(json_native)
    assert json_native.native_in_use()
    assert _result(lines, frozenset({"a"}), True) == want


def test_split_lines_bounds_are_what_the_scanner_reads() -> None:
    split = split_lines(b'{"ts":1,"a":2}\r\n\n{"ts":3}\n')
    assert split.starts.dtype == np.int64 and split.ends.dtype == np.int64
    got = parsed("json", b'{"ts":1,"a":2}\r', b"", b'{"ts":3}', fields=frozenset({"a"}))
    assert got.table.column("a").to_pylist() == [2, None]


@pytest.mark.parametrize("key", ['q"uote', "back\\slash", "tab\there", "nul\x00", "del\x7f"])
def test_keys_msgspec_cannot_name_are_the_row_parsers(key: str) -> None:
    """A projected key holding ``"``, ``\\`` or a control character (escaped in the line):
    msgspec's ``defstruct`` refuses to name it, so that chunk is the row parser's - on the
    native path and without it, with the same values."""
    lines = [orjson.dumps({"ts": 1, key: 5}), orjson.dumps({"ts": 2, key: "x", "b": 1}), b"{"]
    check_three_ways(lines, frozenset({key, "b"}))
