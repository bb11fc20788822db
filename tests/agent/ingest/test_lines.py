"""The newline offsets every columnar chunk starts from (``agent/ingest/columnar/lines.py``).

Checked against numpy's ``flatnonzero(chunk == 10)`` on chunks of every newline density:
sparse (the C finder's first guess holds them), dense (lines shorter than its guess: the rest
found by numpy from where it stopped), at every alignment around its 16-byte blocks; and
``split_lines``' UTF-8 flags against per-line decoding, on ASCII and non-ASCII chunks.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.ingest.columnar import lines as lines_module
from agent.ingest.columnar.lines import newline_positions, split_lines

# chunks from a few bytes that make lines of any length, newlines dense or sparse
piece = st.sampled_from([b"\n", b"a", b"ab" * 9, b"x" * 40, b"\xc3\xa9", b"\xff", b"\r\n"])
chunks = st.lists(piece, max_size=200).map(b"".join)


def reference(chunk: bytes) -> list[int]:
    return np.flatnonzero(np.frombuffer(chunk, np.uint8) == 10).tolist()


@settings(max_examples=300, deadline=None)
@given(chunks, st.integers(0, 17))
def test_newline_offsets_equal_numpys(chunk: bytes, shift: int) -> None:
    chunk = b"." * shift + chunk  # every alignment of the 16-byte blocks
    got = newline_positions(chunk)
    assert got.dtype == np.int64
    assert got.tolist() == reference(chunk)


@pytest.mark.parametrize("size", [0, 1, 15, 16, 17, 4096, 100_000])
def test_only_newlines_overflow_the_guess_and_numpy_finds_the_rest(size: int) -> None:
    chunk = b"\n" * size  # 32 times the C finder's guess
    assert newline_positions(chunk).tolist() == list(range(size))


def test_without_the_extension_numpy_finds_them(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lines_module, "_FIND_NEWLINES", None)
    chunk = b"a\nbb\n\n" * 100
    assert newline_positions(chunk).tolist() == reference(chunk)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.binary(max_size=12).map(lambda b: b.replace(b"\n", b"")), max_size=20))
def test_utf8_flags_are_per_line_decoding(raw_lines: list[bytes]) -> None:
    chunk = b"".join(line + b"\n" for line in raw_lines)
    lines = split_lines(chunk)
    bad = []
    for line in raw_lines:
        try:
            line.decode("utf-8")
            bad.append(False)
        except UnicodeDecodeError:
            bad.append(True)
    assert (lines.repaired is not None) == any(bad)
    if lines.repaired is not None:
        assert lines.repaired.tolist() == bad
    assert [lines.raw(i) for i in range(len(lines))] == raw_lines
