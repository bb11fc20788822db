"""Inputs with log formats: tails of nginx/syslog files across rotation and truncation,
dead-letter files (contents, per-reason quota, size rotation), the stdin/stream input (a pipe
and a real subprocess), ``open_input`` and the ``format`` config key. Each checked against
the lines written (an independent Counter/list), waiting on conditions, never fixed sleeps."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.config import InputConfig, load_config
from agent.errors import ConfigError
from agent.ingest.deadletter import DeadLetterFile
from agent.ingest.formats import AccessLogParser, SyslogParser
from agent.ingest.inputs import open_input
from agent.ingest.records import Quarantine
from agent.ingest.stream import IngestQueue, StreamInput
from agent.ingest.tail import FileTail
from apps.workload import ClickstreamGenerator, access_line

SECRET = {"ELF_SECRET": "inputs-formats-secret-0123456789"}


def drain(src: Any, want: int, timeout: float = 5.0) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout
    while len(out) < want:
        out.extend(src.poll())
        assert time.monotonic() < deadline, f"got {len(out)} of {want} records"
    return out


def append(path: Path, lines: list[str]) -> None:
    with open(path, "a") as f:
        f.write("".join(line + "\n" for line in lines))


def clicks(n: int, seed: int = 1) -> list[dict[str, Any]]:
    return ClickstreamGenerator(seed=seed, start=1_763_000_000, users=50, products=30).take(n)


def key(ev: dict[str, Any]) -> tuple[Any, ...]:
    return (ev["query"]["id"], ev["query"]["action"], ev["query"]["user"], ev["ts"])


def want_keys(events: list[dict[str, Any]]) -> Counter:
    return Counter(
        (e["product_id"], e["action"], e["user_id"], float(int(e["ts"]))) for e in events
    )


# ---- file tails with formats ----------------------------------------------------------------


def test_nginx_tail_follows_rotation_and_truncation(tmp_path: Path) -> None:
    path = tmp_path / "access.log"
    events = clicks(90)
    a, b, c = events[:30], events[30:60], events[60:]
    append(path, [access_line(e) for e in a])
    tail = open_input(InputConfig("web", path=str(path), format="nginx"))
    assert isinstance(tail, FileTail) and isinstance(tail.parser, AccessLogParser)
    got = drain(tail, 30)
    os.replace(path, tmp_path / "access.log.1")  # logrotate's rename mode
    append(tmp_path / "access.log.1", [access_line(e) for e in b[:10]])  # a last write
    append(path, [access_line(e) for e in b[10:]])
    got += drain(tail, 30)
    with open(path, "w"):
        pass  # copytruncate
    append(path, [access_line(e) for e in c[:5]])
    got += drain(tail, 5)
    append(path, [access_line(e) for e in c[5:]])
    got += drain(tail, 25)
    assert Counter(map(key, got)) == want_keys(events)
    st = tail.stats()
    assert (st["rotations"], st["truncations"], st["rejected"]) == (1, 1, 0)
    tail.close()


def test_syslog_tail_resumes_from_state(tmp_path: Path) -> None:
    path = tmp_path / "messages"
    lines = [f"<13>1 2026-11-21T10:00:{i:02d}Z web-1 app {i} - - message {i}" for i in range(20)]
    append(path, lines[:10])
    cfg = InputConfig("sys", path=str(path), format="syslog")
    first = open_input(cfg)
    assert isinstance(first.parser, SyslogParser)
    got = drain(first, 10)
    state = first.state()  # type: ignore[union-attr]
    first.close()
    append(path, lines[10:])
    second = open_input(cfg, state=state)
    got += drain(second, 10)
    assert [e["body"] for e in got] == [f"message {i}" for i in range(20)]
    assert [e["procid"] for e in got] == [str(i) for i in range(20)]


# ---- dead letters -----------------------------------------------------------------------------


def test_dead_letter_file_holds_samples_with_reason_position_and_raw_line(tmp_path: Path) -> None:
    path = tmp_path / "access.log"
    good = [access_line(e) for e in clicks(3)]
    bad = ["garbage one", 'x - - [99/Foo/2024:00:00:00 +0000] "GET / HTTP/1.1" 200 1', "\x01\x02"]
    lines = [good[0], bad[0], good[1], bad[1], bad[2], good[2]]
    with open(path, "wb") as f:
        f.write(b"".join(line.encode() + b"\n" for line in lines))
        f.write(b'\xff\xfe broken "bytes"\n')
    src = open_input(InputConfig("web", path=str(path), format="nginx"), tmp_path / "data")
    assert len(drain(src, 3)) == 3
    stats = src.stats()["quarantine"]
    assert stats["by_reason"] == {"bad_access_line": 3, "bad_timestamp": 1}
    dl = tmp_path / "data" / "deadletter" / "web.jsonl"
    entries = [orjson.loads(x) for x in dl.read_bytes().splitlines()]
    assert [e["reason"] for e in entries] == [
        "bad_access_line", "bad_timestamp", "bad_access_line", "bad_access_line",
    ]  # fmt: skip
    assert [e["line_no"] for e in entries] == [2, 4, 5, 7]
    data = path.read_bytes()
    for e in entries:  # the offset points at the raw line in the file
        raw = data[e["offset"] :].split(b"\n", 1)[0]
        assert raw.decode("utf-8", "backslashreplace") == e["line"]
        assert e["input"] == "web" and e["message"] and e["time"].endswith("Z")
        assert e["truncated"] is False
    assert entries[0]["line"] == "garbage one"
    assert entries[-1]["line"] == '\\xff\\xfe broken "bytes"'
    assert "access-log time" in entries[1]["message"]
    assert stats["dead_letter"]["written"] == 4


def test_dead_letter_quota_per_reason_per_hour_and_size_rotation(tmp_path: Path) -> None:
    now = [7200.0]
    dl = DeadLetterFile(
        tmp_path / "d.jsonl", "in", per_reason_per_hour=3, max_bytes=600, clock=lambda: now[0]
    )
    q = Quarantine(limit=0, dead_letter=dl)
    for i in range(5):
        q.add("in", i, "bad_json", f"line {i}")
    q.add("in", 9, "bad_timestamp", "other")
    assert q.counts == Counter({"bad_json": 5, "bad_timestamp": 1})  # counting is not sampled
    assert dl.counters["written"] == 4 and dl.counters["suppressed"] == 2
    now[0] += 3600  # a new hour: a fresh quota
    for i in range(3):
        q.add("in", 10 + i, "bad_json", "y" * 100)
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == ["d.jsonl", "d.jsonl.1"] and dl.counters["rotations"] >= 1
    assert dl.counters["written"] == 7  # older rotated samples are dropped: bounded disk
    newest = orjson.loads((tmp_path / "d.jsonl").read_bytes().splitlines()[-1])
    assert newest["line_no"] == 12
    assert all(p.stat().st_size <= 600 for p in tmp_path.iterdir())
    big = DeadLetterFile(tmp_path / "big.jsonl", "in", max_line_chars=10)
    big.write("r", "z" * 50)
    entry = orjson.loads((tmp_path / "big.jsonl").read_bytes())
    assert entry["line"] == "z" * 10 and entry["truncated"] is True


def test_dead_letter_write_errors_never_reach_the_input(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    dl = DeadLetterFile(blocker / "deadletter" / "x.jsonl", "x")
    q = Quarantine(dead_letter=dl)
    q.add("x", 1, "bad_json", "{")
    assert q.stats()["by_reason"] == {"bad_json": 1}
    assert dl.counters["write_errors"] == 1


def test_ingest_queue_with_a_log_format(tmp_path: Path) -> None:
    src = open_input(InputConfig("logs", type="ingest", format="syslog"), tmp_path)
    assert isinstance(src, IngestQueue)
    res = src.put_lines([b"<13>Nov 21 10:00:00 h app: hi", b"nope"])
    assert (res.accepted, res.rejected) == (1, 1)
    assert src.poll()[0]["body"] == "hi"
    res = src.put_records([{"ts": 1}])
    assert res.rejected == 1 and res.errors[0]["reason"] == "not_lines"


# ---- stdin / streams --------------------------------------------------------------------------


def test_stream_input_reads_a_pipe_to_eof() -> None:
    r, w = os.pipe()
    reader = os.fdopen(r, "rb")
    src = StreamInput(reader, parser=SyslogParser(), name="stdin", max_line_bytes=100)
    lines = [f"<14>Nov 21 10:00:{i:02d} h app: m{i}".encode() for i in range(50)]
    payload = b"\n".join(lines[:25]) + b"\n" + b"x" * 250 + b"\n\nbad line\n"
    payload += b"\n".join(lines[25:])  # no final newline
    os.write(w, payload)
    os.close(w)

    async def collect() -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        async for batch in src.batches():
            out.extend(batch)
        return out

    got = asyncio.run(asyncio.wait_for(collect(), 10))
    assert [e["body"] for e in got] == [f"m{i}" for i in range(50)]
    st = src.stats()
    assert st["eof"] is True and st["records"] == 50 and st["blank_lines"] == 1
    assert st["quarantine"]["by_reason"] == {"line_too_long": 1, "bad_syslog_line": 1}
    src.close()
    reader.close()


def test_agent_reads_stdin_of_a_subprocess(tmp_path: Path) -> None:
    """``open_input`` with path '-' in a child process reading a real stdin pipe."""
    script = (
        "import asyncio, json\n"
        "from agent.config import InputConfig\n"
        "from agent.ingest.inputs import open_input\n"
        "src = open_input(InputConfig('in', path='-', format='raw'))\n"
        "async def main():\n"
        "    n = 0\n"
        "    async for batch in src.batches():\n"
        "        n += len(batch)\n"
        "    print(json.dumps({'records': n, 'eof': src.stats()['eof']}))\n"
        "asyncio.run(main())\n"
    )
    data = "".join(f"line {i}\n" for i in range(1000))
    proc = subprocess.run(
        [sys.executable, "-c", script],
        input=data.encode(),
        capture_output=True,
        timeout=60,
        cwd=Path(__file__).resolve().parents[3],
    )
    assert proc.returncode == 0, proc.stderr.decode()
    assert orjson.loads(proc.stdout) == {"records": 1000, "eof": True}


# ---- config -------------------------------------------------------------------------------------


def test_config_format_key_and_flags(tmp_path: Path) -> None:
    toml = tmp_path / "agent.toml"
    toml.write_text(
        '[[inputs]]\nname = "web"\npath = "/var/log/nginx/access.log"\nformat = "nginx"\n'
        '[[inputs]]\nname = "sys"\ntype = "ingest"\nformat = "syslog"\n'
    )
    cfg = load_config(toml, env=SECRET, overrides={"inputs": ("raw:raw=-", "j=/x.jsonl")})
    by_name = {i.name: i for i in cfg.inputs}
    assert by_name["web"].format == "nginx" and by_name["sys"].format == "syslog"
    assert (by_name["raw"].path, by_name["raw"].format) == ("-", "raw")
    assert by_name["j"].format == "json"


@pytest.mark.parametrize(
    ("inputs", "message"),
    [
        ([{"name": "a", "path": "/x", "format": "xml"}], "format: must be one of"),
        ([{"name": "a", "path": "/x", "format": "nginx", "timestamp_field": "t"}], "always"),
        ([{"name": "a", "path": "-"}, {"name": "b", "path": "-"}], "only one input"),
        ([{"name": "a", "type": "file"}], "needs a file path"),
    ],
)
def test_bad_input_configs(tmp_path: Path, inputs: list[dict[str, Any]], message: str) -> None:
    toml = tmp_path / "agent.toml"
    toml.write_text(
        "".join(
            "[[inputs]]\n" + "".join(f"{k} = {orjson.dumps(v).decode()}\n" for k, v in i.items())
            for i in inputs
        )
    )
    with pytest.raises(ConfigError, match=message):
        load_config(toml, env=SECRET)


def test_stdin_input_needs_a_single_logical_agent() -> None:
    with pytest.raises(ConfigError, match="logical_agents = 1"):
        load_config(env=SECRET, overrides={"inputs": ("in:raw=-",), "logical_agents": 2})


@settings(max_examples=25, deadline=None)
@given(cuts=st.lists(st.integers(0, 20_000), max_size=12), seed=st.integers(0, 1000))
def test_nginx_tail_yields_every_event_whatever_the_write_boundaries(
    tmp_path_factory: pytest.TempPathFactory, cuts: list[int], seed: int
) -> None:
    path = tmp_path_factory.mktemp("tail") / "access.log"
    events = clicks(60, seed=seed)
    data = "".join(access_line(e) + "\n" for e in events).encode()
    tail = FileTail(path, parser=AccessLogParser())
    got: list[dict[str, Any]] = []
    prev = 0
    for cut in [*sorted(c % (len(data) + 1) for c in cuts), len(data)]:
        with open(path, "ab") as f:
            f.write(data[prev:cut])
        prev = max(prev, cut)
        got.extend(tail.poll())
    got.extend(drain(tail, len(events) - len(got)))
    assert Counter(map(key, got)) == want_keys(events)
    tail.close()
