"""The compiled status/size scan (``agent/ingest/columnar/access_scan_c.c``, wrapped by
``access_scan.py``) against the numpy kernel it replaces, the full kernel, the row parser (the
reference) and DuckDB — on the lines of ``test_access_status.py`` (escapes of every kind,
odd heads and times, huge, blank, garbage, invalid UTF-8) —, both kernels run in each
example (the numpy one by switching the compiled one off, as a machine without a compiler
runs); its time conversion against the row parser's on every shape of time; and fuzzing:
random bytes, random line boundaries and hostile offset arrays never crash it, and its
arguments are checked."""

from __future__ import annotations

import os
import sysconfig
from collections.abc import Iterator
from shutil import which
from typing import Any

import numpy as np
import pytest
from columnar_reference import assert_same
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_access_status import line, lines_st, projections

from agent.ingest.columnar import access_scan
from agent.ingest.columnar.access import parse_access
from agent.ingest.columnar.access_status import parse_status_size
from agent.ingest.columnar.lines import split_lines
from agent.ingest.columnar.parse import merge_fallback
from agent.ingest.formats import MONTHS, AccessLogParser
from agent.ingest.records import RecordError

SETTINGS = settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
# ELF_FUZZ_EXAMPLES: fewer for a run under valgrind (docs/ingest.md)
FUZZ = settings(SETTINGS, max_examples=int(os.environ.get("ELF_FUZZ_EXAMPLES", "500")))
compiled = pytest.mark.skipif(access_scan.COMPILED is None, reason="extension not built")


@pytest.fixture(params=["compiled", "numpy"])
def kernel(request: pytest.FixtureRequest) -> Iterator[str]:
    """Each test runs with the compiled scan on (when built) and off."""
    if request.param == "compiled" and access_scan.COMPILED is None:
        pytest.skip("extension not built")
    before = access_scan.set_enabled(request.param == "compiled")
    try:
        yield request.param
    finally:
        access_scan.set_enabled(before)


def _merged(chunk: bytes, want: frozenset[str], *, native: bool | None = None) -> Any:
    """``parse_status_size`` (compiled or numpy; None: the full kernel) after the row
    parser's merge, as ``parse_chunk`` does it."""
    lines = split_lines(chunk)
    if native is None:
        out = parse_access(lines, want)
    else:
        before = access_scan.set_enabled(native)
        try:
            out = parse_status_size(lines, want)
        finally:
            access_scan.set_enabled(before)
    got = merge_fallback("nginx", lines, out, want)
    return (got.table.to_pylist(), got.line_index.to_pylist(), got.rejects, got.repairs,
            got.table.schema)  # fmt: skip


def test_the_extension_is_built_where_a_compiler_is() -> None:
    """``pip install -e .`` builds it (setup.py); only a machine without one falls back."""
    cc = (sysconfig.get_config_var("CC") or "cc").split()[0]
    if which(cc) is None:
        pytest.skip("no C compiler: the numpy kernel runs")
    assert access_scan.COMPILED is not None


@compiled
@SETTINGS
@given(lines_st, projections)
def test_compiled_equals_numpy_and_the_full_kernel(lines: list[bytes], fields: set[str]) -> None:
    chunk = b"".join(x + b"\n" for x in lines)
    want = frozenset(fields) | {"ts"}
    ours = _merged(chunk, want, native=True)
    assert ours == _merged(chunk, want, native=False)
    assert ours == _merged(chunk, want)


@SETTINGS
@given(lines_st, projections, st.sampled_from(["nginx", "apache"]))
def test_both_kernels_equal_the_row_path(
    kernel: str, lines: list[bytes], fields: set[str], fmt: str
) -> None:
    assert_same(fmt, lines, chunk_sizes=(1 << 20, 200, 1), fields=frozenset(fields))


@compiled
def test_clean_nginx_lines_are_all_decided_by_the_scan() -> None:
    lines = [
        b'10.0.0.1 - - [21/Nov/2026:20:11:10 +0100] "GET /a HTTP/1.1" 200 512 "-" "x"',
        b'::1 - bob [21/Nov/2026:20:11:11 +0100] "GET /\\xC3\\xB6 HTTP/1.1" 404 - "-" '
        b'"\\xE5\\xB0\\x8F" "1.2.3.4"',
        b'10.0.0.1 - - [21/Nov/2026:20:11:11 +0100] "GET /\\xC3 HTTP/1.1" - 7 "-" "\\x22q"',
        b'10.0.0.1 - - [29/Feb/2024:00:00:60 -0130] "-" 400 123456789012345678',
    ]
    got = access_scan.scan(split_lines(b"".join(x + b"\n" for x in lines)))
    assert got is not None
    assert got.ok.tolist() == [True] * 4
    assert got.status[~got.null_status].tolist() == [200, 404, 400]
    assert got.null_status.tolist() == [False, False, True, False]
    assert got.size.tolist() == [512, 0, 7, 123456789012345678]
    assert got.repaired.tolist() == [False, False, True, False]
    parser = AccessLogParser()
    assert got.ts[3] == parser.timestamp("29/Feb/2024:00:00:60 -0130")


# ---- times --------------------------------------------------------------------------------

two = st.integers(0, 99).map("{:02d}".format)
months = st.sampled_from([*MONTHS, "jan", "NOV", "Foo", "Nov"])
times = st.one_of(
    st.builds(
        "{}/{}/{}:{}:{}:{} {}{}{}".format,
        st.one_of(two, st.sampled_from(["29", "31", "30", "00"])),
        months,
        st.one_of(
            st.integers(0, 9999).map("{:04d}".format),
            st.sampled_from(["2024", "1900", "2000", "2100", "0000"]),
        ),
        st.one_of(two, st.sampled_from(["23", "24"])),
        st.one_of(two, st.sampled_from(["59", "60"])),
        st.one_of(two, st.sampled_from(["59", "60", "61"])),
        st.sampled_from(["+", "-", "x", " "]),
        two,
        two,
    ),
    st.text(st.characters(min_codepoint=32, max_codepoint=126), min_size=26, max_size=26),
)


@compiled
@SETTINGS
@given(st.lists(times, min_size=1, max_size=8))
def test_times_convert_as_the_row_parser_converts_them(texts: list[str]) -> None:
    """Each line's time is the row parser's ``timestamp`` (undecided when it refuses it)."""
    lines = [f'1.2.3.4 - - [{t}] "GET / HTTP/1.1" 200 5'.encode() for t in texts]
    got = access_scan.scan(split_lines(b"".join(x + b"\n" for x in lines)))
    assert got is not None
    parser = AccessLogParser()
    for i, text in enumerate(texts):
        try:
            want = parser.timestamp(text)
        except RecordError:
            assert not got.ok[i], text
            continue
        assert got.ok[i], text
        assert got.ts[i] == want, text


# ---- fuzzing ------------------------------------------------------------------------------

pieces = st.one_of(
    st.sampled_from([b'"', b"\\", b"\\x", b"C3", b"a9", b"E2", b"8", b"[", b"] ", b" ", b"-",
                     b"200", b"12345", b"\n", b"\r", b"\xff", b"\xc3", b"\xa9", b" - - ",
                     b"21/Nov/2026:20:11:10 +0100", b"GET / HTTP/1.1", b"10.0.0.1 - -"]),
    st.binary(max_size=6),
    line(),
)  # fmt: skip
garbage = st.lists(pieces, max_size=40).map(b"".join)


@compiled
@FUZZ
@given(garbage)
def test_random_bytes_parse_as_the_numpy_kernel_parses_them(data: bytes) -> None:
    chunk = data if data.endswith(b"\n") else data + b"\n"
    want = frozenset({"ts", "status", "bytes"})
    assert _merged(chunk, want, native=True) == _merged(chunk, want, native=False)


offsets = st.integers(-(2**63), 2**63 - 1) | st.integers(-3, 80)


@compiled
@FUZZ
@given(garbage, st.lists(st.tuples(offsets, offsets), max_size=20), st.booleans())
def test_hostile_offsets_never_read_outside_the_chunk(
    data: bytes, spans: list[tuple[int, int]], view: bool
) -> None:
    """Any offsets (negative, past the end, reversed, overflowing): lines outside the chunk
    are undecided, nothing crashes; a memoryview of a slice is read in place."""
    chunk: Any = memoryview(b"#" + data)[1:] if view else data
    n = len(spans)
    starts = np.array([a for a, _ in spans], np.int64)
    ends = np.array([b for _, b in spans], np.int64)
    ts, status, size = np.empty(n), np.empty(n, np.int64), np.empty(n, np.int64)
    flags = np.empty(n, np.uint8)
    decided = access_scan.COMPILED.scan(chunk, starts, ends, ts, status, size, flags)
    inside = (starts >= 0) & (ends >= starts) & (ends <= len(data))
    assert decided == np.count_nonzero(flags)
    assert not (flags.astype(bool) & ~inside).any()


@compiled
def test_arguments_are_checked() -> None:
    scan = access_scan.COMPILED.scan
    chunk = b'1.2.3.4 - - [21/Nov/2026:20:11:10 +0100] "GET / HTTP/1.1" 200 5\n' * 2
    n = 2
    ends = np.array([len(chunk) // 2 - 1, len(chunk) - 1], np.int64)
    good = [chunk, np.array([0, len(chunk) // 2]), ends, np.empty(n), np.empty(n, np.int64),
            np.empty(n, np.int64), np.empty(n, np.uint8)]  # fmt: skip
    assert scan(*good) == 2
    bad = {
        1: np.zeros(n, np.int32),  # wrong item size
        2: np.zeros(3, np.int64),  # wrong length
        3: np.empty(n, np.float32),
        4: np.empty((n, 1), np.int64),  # 2-d
        5: np.empty(2 * n, np.int64)[::2],  # not contiguous
        6: np.empty(n, np.int64),
        0: np.zeros(len(chunk), np.int16),
    }
    for k, arg in bad.items():
        args = list(good)
        args[k] = arg
        with pytest.raises((ValueError, BufferError)):
            scan(*args)
    readonly = np.empty(n)
    readonly.flags.writeable = False
    with pytest.raises((ValueError, BufferError)):
        scan(*good[:3], readonly, *good[4:])
    with pytest.raises(TypeError):
        scan("text", *good[1:])
    with pytest.raises(TypeError):
        scan(*good[:6])
