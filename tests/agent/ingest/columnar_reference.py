"""Shared by the columnar parse tests: the row path's answer for a chunk (the reference) and
a comparison of a :class:`~agent.ingest.columnar.parse.ParsedChunk` with it."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from agent.ingest.columnar.parse import parse_chunk
from agent.ingest.parsers import Format, make_parser
from agent.ingest.records import EncodingRepairs, rejection


def norm(value: Any) -> Any:
    """Values made comparable: Arrow maps (lists of pairs) as dicts, null members dropped
    (Arrow structs have every field; a row's dict lacks the absent ones); an empty map and an
    empty dict are both ``[]``."""
    if (
        isinstance(value, list)
        and value
        and all(isinstance(x, tuple) and len(x) == 2 for x in value)
    ):
        return {k: norm(x) for k, x in value}
    if isinstance(value, dict):
        return {k: norm(x) for k, x in value.items() if x is not None} or []
    if isinstance(value, list):
        return [norm(x) for x in value]
    return value


def row_path(fmt: Format, lines: list[bytes]) -> dict[str, Any]:
    """What the row path makes of ``lines``, as the file tail does it: rows, rejects (blank
    lines the parser refuses are skipped), repaired lines."""
    repairs = EncodingRepairs()
    parser = make_parser(fmt, repairs=repairs)
    rows: list[tuple[int, dict[str, Any]]] = []
    rejects: list[tuple[int, str, str, bytes]] = []
    for i, line in enumerate(lines):
        try:
            rows.append((i, parser.parse(line)))
        except Exception as exc:
            if line.strip():
                rejects.append((i, *rejection(exc), line))
    return {"rows": rows, "rejects": rejects, "repairs": repairs.lines, "lines": len(lines)}


def whole_line_chunks(data: bytes, chunk_bytes: int) -> list[bytes]:
    """``data`` cut into chunks of whole lines of about ``chunk_bytes`` (a line longer than
    that is a chunk by itself); an unterminated last line gets its newline, as a finished
    file's last line is a line."""
    chunks: list[bytes] = []
    start = 0
    while start < len(data):
        end = data.rfind(b"\n", start, start + chunk_bytes)
        if end < 0:  # no newline within chunk_bytes: the line is a chunk by itself
            end = data.find(b"\n", start)
        if end < 0:
            chunks.append(data[start:] + b"\n")
            break
        chunks.append(data[start : end + 1])
        start = end + 1
    return chunks


def columnar_path(
    fmt: Format, data: bytes, chunk_bytes: int, fields: frozenset[str] | None = None
) -> dict[str, Any]:
    """``parse_chunk`` over the chunks of ``data``, line indices made global."""
    rows: list[tuple[int, dict[str, Any]]] = []
    rejects: list[tuple[int, str, str, bytes]] = []
    repairs = EncodingRepairs()
    base = 0
    for chunk in whole_line_chunks(data, chunk_bytes):
        got = parse_chunk(fmt, chunk, fields=fields, repairs=repairs)
        assert got.table.schema.field("ts").type == pa.float64()
        index = got.line_index.to_pylist()
        assert index == sorted(index)
        assert len(index) == got.table.num_rows
        rows += [(base + i, r) for i, r in zip(index, got.table.to_pylist(), strict=True)]
        rejects += [(base + i, reason, msg, line) for i, reason, msg, line in got.rejects]
        base += got.lines
    return {"rows": rows, "rejects": rejects, "repairs": repairs.lines, "lines": base}


def assert_same(
    fmt: Format,
    lines: list[bytes],
    chunk_sizes: tuple[int, ...] = (1 << 20, 200, 1),
    fields: frozenset[str] | None = None,
    skip: frozenset[str] = frozenset(),
) -> None:
    """The columnar path equals the row path on ``lines`` for every chunk size; ``skip``:
    columns not compared (arrival-time timestamps)."""
    data = b"".join(x + b"\n" for x in lines)
    want = row_path(fmt, lines)
    for size in chunk_sizes:
        got = columnar_path(fmt, data, size, fields)
        assert got["lines"] == want["lines"]
        assert got["rejects"] == want["rejects"], size
        assert got["repairs"] == want["repairs"], size
        assert [i for i, _ in got["rows"]] == [i for i, _ in want["rows"]], size
        for (i, row), (_, record) in zip(got["rows"], want["rows"], strict=True):
            if fields is not None:
                assert set(row) == fields | {"ts"}, (set(row), fields)
                row = {k: v for k, v in row.items() if k in record or v is not None}
                record = {k: v for k, v in record.items() if k in fields or k == "ts"}
            a = norm({k: v for k, v in row.items() if k not in skip})
            b = norm({k: v for k, v in record.items() if k not in skip})
            assert a == b, (size, i, lines[i])
