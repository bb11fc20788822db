"""The line chunker: pieces cover the stream exactly (no gap, no overlap), chunks hold whole
lines within the size bound, over-long lines are cut out as the row path cuts them, and any
way of feeding the bytes gives the same pieces' lines (hypothesis)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.ingest.columnar.chunks import Chunk, LineChunker, Overlong, iter_chunks

line_bytes = st.binary(max_size=30).map(lambda b: b.replace(b"\n", b"x"))
streams = (
    st.lists(line_bytes, max_size=30)
    .flatmap(
        lambda ls: st.tuples(st.just(b"".join(x + b"\n" for x in ls)), st.booleans(), line_bytes)
    )
    .map(lambda t: t[0] + (t[2] if t[1] else b""))
)  # maybe an unterminated last line


def feed_all(data: bytes, cuts: list[int], **kw: Any) -> tuple[list[Any], LineChunker]:
    chunker = LineChunker(allow_small=True, **kw)
    pieces: list[Any] = []
    prev = 0
    for cut in [*sorted(set(cuts)), len(data)]:
        pieces += chunker.feed(data[prev:cut])
        prev = cut
    return pieces, chunker


def lines_of(pieces: list[Any]) -> list[bytes]:
    """Lines the pieces carry, an over-long line as a marker (its head is what was buffered
    when it was found too long, as in the row path: a prefix of the line)."""
    out: list[bytes] = []
    for p in pieces:
        if isinstance(p, Chunk):
            out += p.data.split(b"\n")[:-1]
        elif p.first:
            out.append(b"<long>")
    return out


@settings(max_examples=300, deadline=None)
@given(
    streams,
    st.lists(st.integers(0, 400), max_size=6),
    st.integers(1, 64),
    st.integers(1, 40),
)
def test_pieces_cover_the_stream_exactly(
    data: bytes, cuts: list[int], chunk_bytes: int, max_line: int
) -> None:
    cuts = [c for c in cuts if c <= len(data)]
    pieces, chunker = feed_all(data, cuts, chunk_bytes=chunk_bytes, max_line_bytes=max_line)
    pos = 0
    for p in pieces:
        assert p.start == pos
        assert p.end > p.start
        if isinstance(p, Chunk):
            assert p.data == data[p.start : p.end]
            assert p.data.endswith(b"\n")
            assert len(p.data) <= chunk_bytes or p.data.count(b"\n") == 1
            assert all(len(x) <= max_line for x in p.data.split(b"\n")[:-1])
        else:
            assert data[p.start : p.start + len(p.head)] == p.head
        pos = p.end
    assert chunker.offset == pos
    assert pos + chunker.pending == len(data)
    assert b"\n" not in data[pos:]  # only an incomplete line is held back
    # the lines are the stream's lines, over-long ones replaced by their marker
    want: list[bytes] = []
    for line in data[:pos].split(b"\n")[: data[:pos].count(b"\n")]:
        want.append(b"<long>" if len(line) > max_line else line)
    got = lines_of(pieces)
    if pieces and isinstance(pieces[-1], Overlong) and not data[:pos].endswith(b"\n"):
        want.append(got[-1])  # an over-long line still arriving: counted once already
    assert got == want


@settings(max_examples=200, deadline=None)
@given(streams, st.lists(st.integers(0, 400), max_size=6), st.integers(1, 64))
def test_feeding_order_does_not_change_the_lines(
    data: bytes, cuts: list[int], chunk_bytes: int
) -> None:
    whole, _ = feed_all(data, [], chunk_bytes=chunk_bytes, max_line_bytes=1000)
    split, _ = feed_all(data, [c for c in cuts if c <= len(data)], chunk_bytes=chunk_bytes,
                        max_line_bytes=1000)  # fmt: skip
    assert lines_of(whole) == lines_of(split)


@settings(max_examples=200, deadline=None)
@given(streams, st.integers(1, 64), st.integers(0, 400))
def test_resuming_at_the_offset_neither_loses_nor_repeats_a_line(
    data: bytes, chunk_bytes: int, stop: int
) -> None:
    """A restart at ``offset`` (the persisted resume point) reads the rest of the stream:
    the lines before plus the lines after are the stream's lines."""
    stop = min(stop, len(data))
    first = LineChunker(chunk_bytes=chunk_bytes, allow_small=True)
    before = first.feed(data[:stop])
    second = LineChunker(chunk_bytes=chunk_bytes, allow_small=True, offset=first.offset)
    after = second.feed(data[first.offset :]) + second.finish()
    every = list(iter_chunks(data, chunk_bytes=chunk_bytes, allow_small=True))
    assert lines_of(before) + lines_of(after) == lines_of(every)
    assert [p.start for p in after][:1] in ([], [first.offset])


def test_finish_turns_an_unterminated_last_line_into_a_line() -> None:
    chunker = LineChunker(chunk_bytes=16, allow_small=True)
    assert chunker.feed(b"abc\nde") == [Chunk(0, 4, b"abc\n")]
    assert chunker.pending == 2
    assert chunker.finish() == [Chunk(4, 6, b"de\n")]
    assert chunker.offset == 6 and chunker.pending == 0


def test_an_overlong_line_arriving_in_pieces_counts_once() -> None:
    chunker = LineChunker(chunk_bytes=64, max_line_bytes=5, allow_small=True)
    a = chunker.feed(b"ok\n0123456789")
    assert a == [Chunk(0, 3, b"ok\n"), Overlong(3, 13, b"0123456789", True)]
    b = chunker.feed(b"abc")
    assert b == [Overlong(13, 16, b"", False)]
    c = chunker.feed(b"def\nnext\n")
    assert c == [Overlong(16, 20, b"", False), Chunk(20, 25, b"next\n")]
    assert chunker.offset == 25


def test_chunks_are_bounded_and_whole() -> None:
    data = b"".join(b"line %d\n" % i for i in range(100_000))
    pieces = list(iter_chunks(data, chunk_bytes=1 << 20))
    assert all(isinstance(p, Chunk) and len(p.data) <= 1 << 20 for p in pieces)
    assert b"".join(p.data for p in pieces) == data
    assert len(pieces) == -(-len(data) // (1 << 20)) or len(pieces) == len(data) // (1 << 20) + 1


def test_chunk_size_is_bounded() -> None:
    with pytest.raises(ValueError, match="chunk_bytes"):
        LineChunker(chunk_bytes=16)
    with pytest.raises(ValueError, match="chunk_bytes"):
        LineChunker(chunk_bytes=9 << 20)
