"""Inputs: the JSON-lines file tail (appends, partial lines, rotation, truncation, resume,
garbage) and the ingest queue, on real files in tmp_path. Synchronisation is by polling with a
deadline, never by sleeping a fixed time."""

from __future__ import annotations

import asyncio
import calendar
import io
import json
import os
import tempfile
import time
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.ingest.base import Input, Resumable
from agent.ingest.records import Quarantine, RecordError, RecordValidator, parse_iso8601
from agent.ingest.stream import IngestQueue, StreamInput
from agent.ingest.tail import FileTail


def drain(tail: FileTail, want: int, timeout: float = 5.0) -> list[dict[str, Any]]:
    """Poll until ``want`` records arrived (or fail after ``timeout``)."""
    out: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout
    while len(out) < want:
        out.extend(tail.poll())
        assert time.monotonic() < deadline, f"got {len(out)} of {want} records"
    assert tail.poll() == []
    return out


def write(path: Path, lines: list[str], mode: str = "a") -> None:
    with open(path, mode) as f:
        f.write("".join(line + "\n" for line in lines))


def rec(i: int) -> str:
    return json.dumps({"ts": 1000 + i, "line": f"word{i}"})


# ---- validation ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        (b"{not json", "bad_json"),
        (b"[1, 2]", "not_object"),
        (b'"text"', "not_object"),
        (b'{"line": "x"}', "missing_timestamp"),
        (b'{"ts": "yesterday"}', "bad_timestamp"),
        (b'{"ts": true}', "bad_timestamp"),
        (b'{"ts": null}', "bad_timestamp"),
        (b'{"ts": [1]}', "bad_timestamp"),
        (b"\xff\xfe{}", "bad_json"),
        (b'{"ts": NaN}', "bad_json"),
    ],
)
def test_validator_reasons(line: bytes, reason: str) -> None:
    with pytest.raises(RecordError) as info:
        RecordValidator().parse(line)
    assert info.value.reason == reason


def test_validator_accepts_numbers_and_iso_strings() -> None:
    v = RecordValidator()
    assert v.parse(b'{"ts": 12}')["ts"] == 12
    assert v.parse('{"ts": 12.5, "a": 1}') == {"ts": 12.5, "a": 1}
    assert v.parse(b'{"ts": "1970-01-01T00:01:00Z"}')["ts"] == 60.0
    assert v.parse(b'{"ts": "1970-01-01T01:00:00+01:00"}')["ts"] == 0.0
    assert v.parse(b'{"ts": "1970-01-01 00:00:10"}')["ts"] == 10.0  # naive = UTC
    assert RecordValidator("time").parse(b'{"time": 5}') == {"time": 5}
    with pytest.raises(RecordError):
        RecordValidator(allow_iso=False).parse(b'{"ts": "1970-01-01T00:01:00Z"}')
    assert parse_iso8601("2026-11-21T15:00:00Z") == calendar.timegm((2026, 11, 21, 15, 0, 0))


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=60) | st.text(max_size=60).map(str.encode))
def test_validator_never_raises_anything_but_record_error(data: bytes) -> None:
    try:
        out = RecordValidator().parse(data)
    except RecordError as exc:
        assert exc.reason in {"bad_json", "not_object", "missing_timestamp", "bad_timestamp"}
    else:
        assert isinstance(out, dict) and isinstance(out["ts"], int | float)


def test_quarantine_sink_sees_every_entry_and_its_errors_are_contained() -> None:
    seen: list[dict[str, Any]] = []
    q = Quarantine(limit=0, on_reject=seen.append)
    q.add("f", 1, "bad_json", b"\xffabc")
    assert seen == [{"source": "f", "line_no": 1, "reason": "bad_json", "text": "\ufffdabc"}]
    assert q.entries() == []

    def broken(entry: dict[str, Any]) -> None:
        raise OSError("disk full")

    q = Quarantine(on_reject=broken)
    q.add("f", 2, "not_object", "[]")
    assert q.stats() == {"total": 1, "by_reason": {"not_object": 1}, "sink_errors": 1}


def test_quarantine_is_bounded_and_cuts_text() -> None:
    q = Quarantine(limit=3)
    for i in range(5):
        q.add("f", i, "bad_json", "x" * 500)
    assert q.total == 5 and q.stats() == {"total": 5, "by_reason": {"bad_json": 5}}
    entries = q.entries()
    assert [e["line_no"] for e in entries] == [2, 3, 4]
    assert all(len(e["text"]) == 200 and e["source"] == "f" for e in entries)


# ---- file tail ----------------------------------------------------------------------------


def test_only_the_file_tail_is_resumable(tmp_path: Path) -> None:
    """The runtime persists the position of ``Resumable`` inputs only: a file tail's; a
    stream cannot be re-read and the ingest queue lives in memory."""
    tail, queue = FileTail(tmp_path / "log.jsonl"), IngestQueue()
    stream = StreamInput(io.BytesIO(b""))
    for src in (tail, queue, stream):
        assert isinstance(src, Input)
    assert isinstance(tail, Resumable)
    assert not isinstance(queue, Resumable) and not isinstance(stream, Resumable)
    want = {"path": str(tmp_path / "log.jsonl"), "inode": None, "offset": 0, "line_no": 0}
    assert tail.state() == want  # no file yet: no position
    for src in (tail, queue, stream):
        src.close()


def test_unchanged_says_a_poll_would_find_nothing(tmp_path: Path) -> None:
    """What the agent's tick loop checks before it wakes the record thread
    (ticks.py ``quiet``): True only while the file read to its end is still the file at the
    path, at the same size; any doubt is False."""
    path = tmp_path / "log.jsonl"
    tail = FileTail(path)
    assert not tail.unchanged()  # never polled
    tail.poll()  # missing file
    assert not tail.unchanged()
    write(path, [rec(0)])
    assert not tail.unchanged()
    assert [r["line"] for r in tail.poll()] == ["word0"]
    assert tail.unchanged()  # that poll read the file to its end (a trickle's one poll)
    assert tail.poll() == []
    assert tail.unchanged()
    with open(path, "a") as f:
        f.write('{"ts": 5, "li')  # a partial line is news too
    assert not tail.unchanged()
    assert tail.poll() == []
    assert tail.unchanged()  # the partial line waits for its newline, read already
    with open(path, "a") as f:
        f.write('ne": "w"}\n')
    assert not tail.unchanged()
    assert [r["line"] for r in drain(tail, 1)] == ["w"]
    assert tail.unchanged()
    os.rename(path, tmp_path / "log.jsonl.1")  # rotated away
    assert not tail.unchanged()
    write(path, [])  # a new, empty file at the path: another inode
    assert not tail.unchanged()
    assert tail.poll() == [] and tail.poll() == []
    assert tail.unchanged()
    write(path, [rec(1)], mode="w")
    assert not tail.unchanged()
    assert [r["line"] for r in drain(tail, 1)] == ["word1"]


def test_tail_reads_appends_and_waits_for_partial_lines(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    tail = FileTail(path)
    assert isinstance(tail, Input)
    assert tail.poll() == []  # missing file: waited for
    write(path, [rec(0), rec(1)])
    assert [r["line"] for r in drain(tail, 2)] == ["word0", "word1"]
    with open(path, "a") as f:
        f.write('{"ts": 5, "li')
    assert tail.poll() == []
    offset = tail.state()["offset"]
    with open(path, "a") as f:
        f.write('ne": "late"}\n\n')
    assert drain(tail, 1) == [{"ts": 5, "line": "late"}]
    assert tail.state()["offset"] > offset
    assert tail.stats()["blank_lines"] == 1
    tail.close()


def test_tail_quarantines_garbage_and_keeps_going(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    write(path, [rec(0), "garbage", "[1]", '{"line": "no ts"}', '{"ts": "soon"}', rec(1)])
    q = Quarantine()
    tail = FileTail(path, quarantine=q, name="web1")
    assert [r["ts"] for r in drain(tail, 2)] == [1000, 1001]
    assert q.stats()["by_reason"] == {
        "bad_json": 1,
        "not_object": 1,
        "missing_timestamp": 1,
        "bad_timestamp": 1,
    }
    assert [(e["source"], e["line_no"], e["reason"]) for e in q.entries()] == [
        ("web1", 2, "bad_json"),
        ("web1", 3, "not_object"),
        ("web1", 4, "missing_timestamp"),
        ("web1", 5, "bad_timestamp"),
    ]
    assert q.entries()[0]["text"] == "garbage"
    assert tail.stats()["rejected"] == 4


def test_tail_skips_over_long_lines(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    tail = FileTail(path, max_line_bytes=100)
    write(path, [rec(0)])
    with open(path, "a") as f:
        f.write("x" * 150)  # incomplete and already too long
    assert len(drain(tail, 1)) == 1
    with open(path, "a") as f:
        f.write("y" * 150 + "\n" + rec(1) + "\n" + "z" * 120 + "\n")
    assert [r["ts"] for r in drain(tail, 1)] == [1001]
    assert tail.quarantine.stats()["by_reason"] == {"line_too_long": 2}
    assert tail.state()["offset"] == path.stat().st_size


def test_tail_survives_a_parser_bug(tmp_path: Path) -> None:
    class Buggy:
        def parse(self, line: bytes | str) -> dict[str, Any]:
            if b"crash" in line:
                raise ZeroDivisionError("bug")
            return RecordValidator().parse(line)

    path = tmp_path / "log.jsonl"
    write(path, [rec(0), "crash", rec(1)])
    tail = FileTail(path, parser=Buggy())
    assert [r["ts"] for r in drain(tail, 2)] == [1000, 1001]
    assert tail.quarantine.stats()["by_reason"] == {"parser_error": 1}


def test_tail_follows_rotation(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    write(path, [rec(i) for i in range(3)])
    tail = FileTail(path)
    assert len(drain(tail, 3)) == 3
    with open(path, "a") as f:  # last lines of the old file, one without newline
        f.write(rec(3) + "\n" + rec(4))
    os.rename(path, tmp_path / "log.jsonl.1")
    write(path, [rec(5), rec(6)], mode="w")
    got = drain(tail, 4)
    assert [r["ts"] for r in got] == [1003, 1004, 1005, 1006]
    assert tail.stats()["rotations"] == 1
    write(path, [rec(7)])
    assert [r["ts"] for r in drain(tail, 1)] == [1007]


def test_tail_waits_when_rotated_away_then_picks_up_the_new_file(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    write(path, [rec(0)])
    tail = FileTail(path)
    assert len(drain(tail, 1)) == 1
    os.rename(path, tmp_path / "old")
    assert tail.poll() == []
    write(path, [rec(1)], mode="w")
    assert [r["ts"] for r in drain(tail, 1)] == [1001]


def test_tail_restarts_after_truncation(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    write(path, [rec(i) for i in range(5)])
    tail = FileTail(path)
    assert len(drain(tail, 5)) == 5
    with open(path, "r+") as f:  # copytruncate
        f.truncate(0)
    write(path, [rec(10)])
    assert [r["ts"] for r in drain(tail, 1)] == [1010]
    assert tail.stats()["truncations"] == 1
    assert tail.state()["line_no"] == 1


def test_tail_resumes_from_state_without_loss_or_duplicates(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    write(path, [rec(i) for i in range(4)])
    with open(path, "a") as f:
        f.write('{"ts": 9')  # partial: not consumed, must be read after the restart
    first = FileTail(path)
    assert len(drain(first, 4)) == 4
    state = json.loads(json.dumps(first.state()))
    first.close()
    with open(path, "a") as f:
        f.write("9}\n" + rec(5) + "\n")
    second = FileTail(path, state=state)
    assert [r["ts"] for r in drain(second, 2)] == [99, 1005]
    assert second.state()["line_no"] == 6
    # a state for another inode (the file was replaced meanwhile) reads from the start
    os.rename(path, tmp_path / "old")
    write(path, [rec(7)], mode="w")
    third = FileTail(path, state=state)
    assert [r["ts"] for r in drain(third, 1)] == [1007]


def test_tail_start_at_end(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    write(path, [rec(0)])
    tail = FileTail(path, start_at_end=True)
    assert tail.poll() == []
    write(path, [rec(1)])
    assert [r["ts"] for r in drain(tail, 1)] == [1001]


async def test_tail_batches_async(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    tail = FileTail(path, poll_interval=0.01)
    got: list[dict[str, Any]] = []

    async def consume() -> None:
        async for batch in tail.batches():
            got.extend(batch)
            if len(got) >= 6:
                return

    task = asyncio.create_task(consume())
    for chunk in range(3):
        write(path, [rec(2 * chunk), rec(2 * chunk + 1)])
        await asyncio.sleep(0)
    await asyncio.wait_for(task, 5)
    assert [r["ts"] for r in got] == [1000 + i for i in range(6)]
    tail.close()


# ---- ingest queue -------------------------------------------------------------------------


def test_ingest_validates_and_quarantines() -> None:
    q = IngestQueue(maxsize=10)
    res = q.put_body(b'{"ts": 1, "line": "a"}\nnope\n\n{"ts": 2}\n', source="10.0.0.1")
    assert (res.accepted, res.rejected, res.queue_full) == (2, 1, False)
    assert res.errors == [{"line_no": 2, "reason": "bad_json", "message": res.errors[0]["message"]}]
    assert q.quarantine.entries()[0]["source"] == "10.0.0.1"
    res = q.put_records([{"ts": 3}, 7, {"ts": "x"}])
    assert (res.accepted, res.rejected) == (1, 2)
    assert [r["ts"] for r in q.poll()] == [1, 2, 3]
    assert q.stats()["accepted"] == 3 and q.stats()["rejected"] == 3


def test_ingest_is_all_or_nothing_when_full() -> None:
    q = IngestQueue(maxsize=3)
    assert q.put_lines([b'{"ts": 1}', b'{"ts": 2}']).accepted == 2
    res = q.put_lines([b'{"ts": 3}', b'{"ts": 4}'])
    assert res.queue_full and res.accepted == 0 and len(q) == 2
    assert res.to_dict()["queue_full"] is True
    assert q.poll(1) == [{"ts": 1}]
    assert q.put_lines([b'{"ts": 3}', b'{"ts": 4}']).accepted == 2


async def test_ingest_get_batch_wakes_up_and_times_out() -> None:
    q = IngestQueue()
    assert await q.get_batch(timeout=0.01) == []
    waiter = asyncio.create_task(q.get_batch(timeout=5))
    await asyncio.sleep(0)
    q.put_lines(['{"ts": 1}'])
    assert await asyncio.wait_for(waiter, 5) == [{"ts": 1}]


line_st = st.one_of(
    st.builds(
        lambda i, w: json.dumps({"ts": i, "w": w}), st.integers(0, 10**6), st.text(max_size=8)
    ),
    st.sampled_from(["garbage", "[1]", '{"w": 1}', '{"ts": "bad"}', "{", "\u00e9\u00e8"]),
)


@settings(max_examples=60, deadline=None)
@given(
    lines=st.lists(line_st, max_size=30),
    cuts=st.lists(st.integers(0, 400), max_size=10),
    read_size=st.sampled_from([3, 7, 64, 1 << 16]),
)
def test_tail_any_chunking_gives_the_same_records(
    lines: list[str], cuts: list[int], read_size: int
) -> None:
    data = "".join(line + "\n" for line in lines).encode()
    points = sorted({min(c, len(data)) for c in cuts} | {0, len(data)})
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "log.jsonl"
        path.touch()
        tail = FileTail(path, read_size=read_size)
        got: list[dict[str, Any]] = []
        for a, b in pairwise(points):
            with open(path, "ab") as f:
                f.write(data[a:b])
            got.extend(tail.poll())
        for _ in range(len(data) // read_size + 2):
            got.extend(tail.poll())
        want = []
        bad = 0
        for line in lines:
            try:
                want.append(RecordValidator().parse(line))
            except RecordError:
                bad += 1
        assert got == want
        assert tail.quarantine.total == bad
        assert tail.state()["offset"] == len(data)
        assert tail.state()["line_no"] == len(lines)
        tail.close()


async def test_ingest_batches_end_after_close() -> None:
    q = IngestQueue()
    q.put_lines(['{"ts": 1}', '{"ts": 2}'])
    batches = []

    async def consume() -> None:
        async for batch in q.batches():
            batches.append(batch)

    task = asyncio.create_task(consume())
    await asyncio.sleep(0)
    q.close()
    await asyncio.wait_for(task, 5)
    assert batches == [[{"ts": 1}, {"ts": 2}]]
