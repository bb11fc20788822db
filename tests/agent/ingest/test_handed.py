"""Ranges a tail hands to a parse helper unread (agent/ingest/columnar/handed.py): the cut at
a read's last newline, the helper's proof that it read what the tail holds, and the rows read
again after a rotation or refused after a truncation. The tail-level equivalence (parse-ahead
equals parsing every chunk here) is tests/agent/ingest/test_parse_pool.py's and
test_ahead_partials.py's."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import xxhash
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.ingest.columnar.handed import (
    CUT_WINDOW,
    HandedRange,
    RangeRows,
    cut_read,
    handed_source,
    pread_exact,
    read_handed,
)


def _file(tmp_path: Path, data: bytes) -> tuple[Path, int]:
    path = tmp_path / "log"
    path.write_bytes(data)
    return path, os.open(path, os.O_RDONLY)


@settings(max_examples=200, deadline=None)
@given(
    data=st.binary(max_size=300).map(lambda b: b.replace(b"x", b"\n")),
    start=st.integers(0, 300),
    length=st.integers(0, 300),
)
def test_the_cut_is_just_past_the_last_newline_of_the_range(
    tmp_path_factory: pytest.TempPathFactory, data: bytes, start: int, length: int
) -> None:
    _, fd = _file(tmp_path_factory.mktemp("cut"), data)
    try:
        end = start + length
        got = cut_read(fd, start, end)
        if end > len(data):
            assert got is None  # the file is shorter than the read
        else:
            nl = data.rfind(b"\n", max(start, end - CUT_WINDOW), end)
            assert got == (None if nl < 0 else (nl + 1, data[nl + 1 : end]))
    finally:
        os.close(fd)


def test_a_newline_only_before_the_window_is_not_looked_for(tmp_path: Path) -> None:
    data = b"a\n" + b"b" * (CUT_WINDOW + 10)
    _, fd = _file(tmp_path, data)
    try:
        assert cut_read(fd, 0, len(data)) is None  # this thread reads such a read
        assert cut_read(fd, 0, 5) == (2, b"bbb")
    finally:
        os.close(fd)


def test_the_helper_proves_it_read_what_the_tail_carries(tmp_path: Path) -> None:
    data = b"partial line\nwhole line\nnext"
    path, fd = _file(tmp_path, data)
    try:
        end = data.rindex(b"\n") + 1
        carried = b"partial line\n"[:7]
        src = handed_source(str(path), 0, end, carried)
        assert src == (str(path), 0, end, 7, xxhash.xxh3_64_intdigest(b"partial"))
        got = read_handed(fd, *src[1:])
        assert got == (data[:end], xxhash.xxh3_64_intdigest(data[:end]))
        # the tail holds other bytes than the file now: refused, the tail reads it itself
        assert read_handed(fd, 0, end, 7, xxhash.xxh3_64_intdigest(b"PARTIAL")) is None
        # not ending with a newline (rewritten meanwhile), or beyond the file's end
        assert read_handed(fd, 0, end + 2, 7, src[4]) is None
        assert read_handed(fd, 0, len(data) + 5, 7, src[4]) is None
        assert pread_exact(fd, 3, 4) == data[3:7] and pread_exact(fd, 3, 400) is None
    finally:
        os.close(fd)


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_rows_are_read_again_after_a_rotation(tmp_path: Path) -> None:
    data = b"one\ntwo\nthree\n"
    path, fd = _file(tmp_path, data)
    rng = HandedRange(4, 4, len(data), len(data), b"", None, None)  # type: ignore[arg-type]
    rng.digest = xxhash.xxh3_64_intdigest(data[4:])
    before = _open_fds()
    rows = RangeRows(fd, rng, lambda b: b.split())
    os.close(fd)  # the tail closed the file and the path names another one now
    path.rename(tmp_path / "log.1")
    path.write_bytes(b"other\n")
    (tmp_path / "log.1").unlink()
    assert rows() == [b"two", b"three"]
    assert _open_fds() == before - 1  # its duplicate closed when used


def test_rows_of_a_truncated_file_are_refused_and_unused_ones_closed(tmp_path: Path) -> None:
    data = b"one\ntwo\nthree\n"
    path, fd = _file(tmp_path, data)
    rng = HandedRange(0, 0, len(data), len(data), b"", None, None)  # type: ignore[arg-type]
    rng.digest = xxhash.xxh3_64_intdigest(data)
    before = _open_fds()
    rows = RangeRows(fd, rng, lambda b: b)
    path.write_bytes(b"one\n")  # truncated
    with pytest.raises(OSError, match="no longer holds"):
        rows()
    path.write_bytes(b"one\ntwo\nthrie\n")  # same length, other bytes
    again = RangeRows(fd, rng, lambda b: b)
    with pytest.raises(OSError):
        again()
    never = RangeRows(fd, rng, lambda b: b)
    assert _open_fds() == before + 1
    del never  # never needed: closed when collected
    assert _open_fds() == before
    os.close(fd)
