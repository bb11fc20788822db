"""Parse-ahead (agent/ingest/columnar/pool.py): a file tail whose later chunks are parsed on a
helper process gives exactly what the same tail parsing every chunk itself gives — records in
order, counters, quarantined lines (line numbers, offsets, reasons), the resume state — on a
finished file, on a file that grows between polls, across a truncation, and when the helper
process is killed (kill -9) in the middle."""

from __future__ import annotations

import os
import random
import signal
from pathlib import Path
from typing import Any

from columnar_reference import norm

from agent.ingest.columnar.pool import ChunkParsePool
from agent.ingest.columnar.reader import ChunkReader
from agent.ingest.formats import make_parser
from agent.ingest.records import Quarantine
from agent.ingest.tail import FileTail
from apps.workload import ClickstreamGenerator, access_line

MAX_LINE = 2048
FIELDS = frozenset({"status", "bytes", "path", "user_agent"})


def _lines(n: int, seed: int) -> list[bytes]:
    """Access lines with bad, blank, unicode, escaped and over-long ones mixed in."""
    rng = random.Random(seed)
    out = []
    for e in ClickstreamGenerator(seed=seed, start=1_700_000_000.0, rate=50.0).take(n):
        line = access_line(e).encode()
        roll = rng.random()
        if roll < 0.01:
            line = line[: rng.randrange(len(line))]  # cut: a bad line
        elif roll < 0.015:
            line = b""
        elif roll < 0.02:
            line = line.replace(b'"Mozilla', b'"' + b"M" * 3000 + b"ozilla", 1)  # too long
        elif roll < 0.03:
            line = line.replace(b"Mozilla", "Möz\\x22illa ☃".encode(), 1)
        out.append(line)
    return out


def _tail(path: Path, pool: ChunkParsePool | None) -> FileTail:
    tail = FileTail(
        path,
        parser=make_parser("nginx"),
        quarantine=Quarantine(limit=10_000),
        read_size=1 << 13,
        max_line_bytes=MAX_LINE,
    )
    tail.columnar = ChunkReader("nginx", FIELDS, tail.parser.repairs)  # type: ignore[attr-defined]
    tail.columnar.min_rows = 1
    tail.parse_pool = pool
    return tail


def _drain(tail: FileTail) -> list[Any]:
    records: list[Any] = []
    while batch := tail.poll():
        records += [norm(r) for r in batch]
    return records


def _outcome(tail: FileTail, records: list[Any]) -> dict[str, Any]:
    entries = [
        (e["line_no"], e["offset"], e["reason"], e.get("message"))
        for e in tail.quarantine.entries()
    ]
    state = {k: v for k, v in tail.state().items() if k in ("offset", "line_no")}
    skip = ("columnar_chunks", "row_chunks", "ahead_chunks")
    counters = {k: v for k, v in tail.counters.items() if k not in skip}
    return {"records": records, "rejects": entries, "state": state, "counters": counters}


def test_a_finished_file_parsed_ahead_equals_parsing_every_chunk_here(
    tmp_path: Path, pool: ChunkParsePool
) -> None:
    path = tmp_path / "access.log"
    path.write_bytes(b"\n".join(_lines(3000, seed=1)) + b"\n")
    alone = _tail(path, None)
    want = _outcome(alone, _drain(alone))
    before = pool.chunks
    ahead = _tail(path, pool)
    got = _outcome(ahead, _drain(ahead))
    assert got == want
    assert pool.chunks - before > 10  # the helper process parsed many of the chunks
    assert want["counters"]["rejected"] > 20


def test_a_growing_file_and_a_truncation(tmp_path: Path, pool: ChunkParsePool) -> None:
    lines = _lines(2400, seed=2)
    outcomes = []
    for helper in (None, pool):
        path = tmp_path / f"grow-{helper is not None}.log"
        path.write_bytes(b"")
        tail = _tail(path, helper)
        records: list[Any] = []
        with path.open("ab") as f:
            for part in range(6):  # appends between polls, one ending mid-line
                piece = b"\n".join(lines[part * 400 : (part + 1) * 400]) + b"\n"
                cut = len(piece) - 7 if part == 2 else len(piece)
                f.write(piece[:cut])
                f.flush()
                records += _drain(tail)
                f.write(piece[cut:])
                f.flush()
        records += _drain(tail)
        path.write_bytes(b"\n".join(lines[:500]) + b"\n")  # truncated, then rewritten
        records += _drain(tail)
        outcomes.append(_outcome(tail, records))
        tail.close()
    assert outcomes[0] == outcomes[1]
    assert outcomes[0]["counters"]["truncations"] == 1


def test_a_killed_helper_process_costs_nothing(tmp_path: Path) -> None:
    path = tmp_path / "access.log"
    path.write_bytes(b"\n".join(_lines(3000, seed=3)) + b"\n")
    alone = _tail(path, None)
    want = _outcome(alone, _drain(alone))
    helper = ChunkParsePool(1)
    try:
        helper.warm()
        tail = _tail(path, helper)
        records = [norm(r) for r in tail.poll()]
        assert helper._pool is not None
        for pid in list(helper._pool._processes):  # kill -9 the helper mid-file
            os.kill(pid, signal.SIGKILL)
        records += _drain(tail)
        assert _outcome(tail, records) == want
        assert helper.restarts >= 1  # the next chunks went to a new helper process
    finally:
        helper.close()


def test_a_tail_keeping_up_hands_nothing_over(tmp_path: Path, pool: ChunkParsePool) -> None:
    """Appends shorter than a read, polled as they come: every read is the file's end, so the
    record thread parses it (a helper would only add a round trip); a backlog then is dealt."""
    path = tmp_path / "trickle.log"
    path.write_bytes(b"")
    tail = _tail(path, pool)
    lines = _lines(1200, seed=5)
    records: list[Any] = []
    with path.open("ab") as f:
        for part in range(120):  # 10 lines (a few KiB, under the 8 KiB read) per poll
            f.write(b"\n".join(lines[part * 10 : (part + 1) * 10]) + b"\n")
            f.flush()
            records += _drain(tail)
    assert tail.counters["ahead_chunks"] == 0
    assert tail.counters["lines"] == 1200
    f_backlog = b"\n".join(_lines(3000, seed=6)) + b"\n"  # then a backlog of many reads
    with path.open("ab") as f:
        f.write(f_backlog)
    _drain(tail)
    assert tail.counters["ahead_chunks"] > 0
    tail.close()
