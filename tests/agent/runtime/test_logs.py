"""Structured logs: ``elf agent --log-format json`` writes one JSON object per line naming the
agent (and the job and epoch where known); the plain format stays the default."""

from __future__ import annotations

import io
import json
import logging
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

import orjson

from agent.runtime.ops.logs import AGENT, EPOCH, AgentName, configure, job_context

FIELDS = {"ts", "time", "level", "logger", "message", "agent", "job", "epoch", "thread"}


def test_json_lines_carry_extra_then_context() -> None:
    out = io.StringIO()
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    try:
        configure("json", "INFO", out)
        log = logging.getLogger("elf.test")
        holder = AgentName()
        token = AGENT.set(holder)
        log.info("before the id is known")
        holder.value = "ab" * 20
        with job_context("wc"):
            log.warning("job %s closed %d", "wc", 3)
            log.warning("explicit", extra={"job": "other", "epoch": 42})
            epoch = EPOCH.set(7)
            log.error("with context epoch")
            EPOCH.reset(epoch)
        try:
            raise ValueError("boom\nline two")
        except ValueError:
            log.exception("failed %r", object())
        log.info("bad args %d", "x")  # a formatting error still gives a line
        AGENT.reset(token)
    finally:
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])
    rows = [orjson.loads(line) for line in out.getvalue().splitlines()]
    assert len(rows) == 6 and all(set(r) >= FIELDS for r in rows)
    assert rows[0]["agent"] is None and rows[0]["job"] is None
    assert rows[1]["message"] == "job wc closed 3" and rows[1]["agent"] == "ab" * 20
    assert (rows[1]["job"], rows[1]["epoch"], rows[1]["level"]) == ("wc", None, "WARNING")
    assert (rows[2]["job"], rows[2]["epoch"]) == ("other", 42)
    assert (rows[3]["job"], rows[3]["epoch"]) == ("wc", 7)
    assert rows[4]["job"] is None and "ValueError: boom" in rows[4]["exc"]
    assert rows[5]["message"] == "bad args %d"


def test_plain_is_the_default_format() -> None:
    out = io.StringIO()
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    try:
        configure(stream=out)
        logging.getLogger("elf.test").warning("hello %s", "there")
    finally:
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])
    stamp, line = out.getvalue().split(" ", 2)[:2], out.getvalue().split(" ", 2)[2]
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}", " ".join(stamp))
    assert line == "WARNING:elf.test:hello there\n"  # basicConfig's format after the time


def test_elf_agent_log_format_json_names_the_agent(tmp_path: Path) -> None:
    """A real agent process with two logical agents: every stderr line is a JSON object; each
    agent's records name its own node id (as its ELF-READY line reports it)."""
    secret = tmp_path / "secret"
    secret.write_text("0123456789abcdef0123456789abcdef")
    secret.chmod(0o600)
    errors = tmp_path / "stderr.log"
    with errors.open("w") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "agent.cli", "agent", "--secret-file", str(secret),
             "--log-format", "json", "--log-level", "INFO", "--agents", "2"],
            stdout=subprocess.PIPE, stderr=err, text=True,
        )  # fmt: skip
    try:
        ready = threading.Event()
        seen: list[str] = []

        def read() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                seen.append(line)
                if line.startswith("ELF-READY "):
                    ready.set()
                    return

        threading.Thread(target=read, daemon=True).start()
        assert ready.wait(60), f"no ELF-READY; stdout {seen!r}; stderr {errors.read_text()!r}"
        ids = {a["node_id"] for a in json.loads(seen[-1].split(" ", 1)[1])}
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    rows = [orjson.loads(line) for line in errors.read_text().splitlines()]
    assert rows, "INFO logging produced no line"
    assert all(set(r) >= FIELDS for r in rows)
    started = {r["agent"] for r in rows if r["message"].startswith("agent started")}
    assert started == ids  # each logical agent's records name it, not the other one
    assert {r["agent"] for r in rows} <= {*ids, None}
