"""The chunker and ``parse_chunk`` together equal the row path's file tail on the same file:
the same records in order, the same quarantined lines (reason, line number, offset, message)
including over-long ones, and the same resume offset — for any read size and chunk size
(hypothesis)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from columnar_reference import norm
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_columnar_parse import access_lines

from agent.ingest.columnar.chunks import Chunk, LineChunker
from agent.ingest.columnar.parse import parse_chunk
from agent.ingest.formats import make_parser
from agent.ingest.records import EncodingRepairs, Quarantine
from agent.ingest.tail import FileTail

MAX_LINE = 400


def row_tail(path: Path, read_size: int) -> dict[str, Any]:
    repairs = EncodingRepairs()
    quarantine = Quarantine(limit=10_000)
    tail = FileTail(
        path,
        parser=make_parser("nginx", repairs=repairs),
        quarantine=quarantine,
        read_size=read_size,
        max_line_bytes=MAX_LINE,
    )
    records: list[dict[str, Any]] = []
    size = path.stat().st_size
    while tail.counters["bytes"] < size:  # a poll reads read_size bytes at most
        records += tail.poll()
    records += tail.poll()
    rejects = [(e["line_no"], e["reason"], e["offset"], e["message"]) for e in quarantine.entries()]
    state = tail.state()
    tail.close()
    return {
        "records": [norm(r) for r in records],
        "rejects": rejects,
        "offset": state["offset"],
        "line_no": state["line_no"],
        "repairs": repairs.lines,
    }


def columnar_tail(data: bytes, read_size: int, chunk_bytes: int) -> dict[str, Any]:
    chunker = LineChunker(chunk_bytes=chunk_bytes, max_line_bytes=MAX_LINE, allow_small=True)
    repairs = EncodingRepairs()
    records: list[dict[str, Any]] = []
    rejects: list[tuple[int, str, int, str]] = []
    line_no = 0
    for at in range(0, len(data), read_size):
        for piece in chunker.feed(data[at : at + read_size]):
            if isinstance(piece, Chunk):
                got = parse_chunk("nginx", piece.data, repairs=repairs)
                starts = [0, *(i + 1 for i, b in enumerate(piece.data) if b == 10)]
                records += [norm(r) for r in got.table.to_pylist()]
                rejects += [
                    (line_no + i + 1, reason, piece.start + starts[i], message)
                    for i, reason, message, _ in got.rejects
                ]
                line_no += got.lines
            elif piece.first:
                line_no += 1
                rejects.append(
                    (line_no, "line_too_long", piece.start, f"line longer than {MAX_LINE} bytes")
                )
    return {
        "records": records,
        "rejects": rejects,
        "offset": chunker.offset,
        "line_no": line_no,
        "repairs": repairs.lines,
    }


long_line = st.integers(MAX_LINE - 2, MAX_LINE * 3).map(
    lambda n: b'1.2.3.4 - - [01/Jan/2026:00:00:00 +0000] "GET /' + b"x" * n + b' HTTP/1.1" 200 1'
)


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    st.lists(st.one_of(access_lines().map(tuple), st.lists(long_line, max_size=2).map(tuple))),
    st.integers(50, 5000),
    st.integers(1, 3000),
    st.booleans(),
)
def test_chunked_columnar_parse_equals_the_file_tail(
    tmp_path_factory: Any, groups: list[tuple[bytes, ...]], read_size: int, chunk: int,
    unterminated: bool,
) -> None:  # fmt: skip
    lines = [x for g in groups for x in g]
    data = b"".join(x + b"\n" for x in lines) + (b"1.2.3.4 partial" if unterminated else b"")
    path = tmp_path_factory.mktemp("tail") / "access.log"
    path.write_bytes(data)
    want = row_tail(path, read_size)
    got = columnar_tail(data, read_size, chunk)
    assert got["rejects"] == want["rejects"]
    assert got["records"] == want["records"]
    assert (got["offset"], got["line_no"], got["repairs"]) == (
        want["offset"],
        want["line_no"],
        want["repairs"],
    )
