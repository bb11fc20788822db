"""``elf results --follow`` (agent/cli_follow.py) on the stream's edges, over a real loopback
HTTP server playing the agent's stream route: a stream cut off without its ``end`` event
exits non-zero naming the cursor to resume from, and so does Ctrl-C (130, quietly); a refusal
(404) is one line; the flags that do not go together are a usage error. (The whole path
against real agents, the job stopping, is in tests/agent/runtime/test_emit_cluster.py.)"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from aiohttp import web
from click.testing import CliRunner

from agent.cli import cli

TOKEN = "t" * 32
LACKING = "ab" * 20


@pytest.fixture
def agent_url() -> Iterator[str]:
    """An aiohttp server in its own thread: the stream of job ``cut`` sends one result and
    closes without ``end``; job ``nope`` is 404."""
    seen: list[str] = []

    async def stream(request: web.Request) -> web.StreamResponse:
        assert request.headers["Authorization"] == f"Bearer {TOKEN}"
        seen.append(request.query_string)
        if request.match_info["name"] == "nope":
            return web.json_response({"error": "no running job named 'nope'"}, status=404)
        resp = web.StreamResponse(headers={"Content-Type": "application/x-ndjson"})
        await resp.prepare(request)
        event = {"event": "result", "cursor": "7:2", "resume": "5:1", "epoch": 7,
                 "state": "tentative", "version": 2, "revision": 2, "lacking": [LACKING],
                 "coverage": 0.5, "rows": []}  # fmt: skip
        await resp.write(orjson.dumps({"event": "keepalive"}) + b"\n")
        await resp.write(orjson.dumps(event) + b"\n")
        if request.match_info["name"] == "hold":  # open until the client goes
            with contextlib.suppress(ConnectionError):
                for _ in range(600):
                    await asyncio.sleep(0.1)  # a keepalive's pace, as the agent's (faster)
                    await resp.write(orjson.dumps({"event": "keepalive"}) + b"\n")
            return resp
        assert request.transport is not None
        request.transport.close()  # cut off: no end event
        return resp

    loop = asyncio.new_event_loop()
    app = web.Application()
    app.router.add_get("/api/v1/jobs/{name}/results/stream", stream)
    runner = web.AppRunner(app)
    loop.run_until_complete(runner.setup())
    site = web.TCPSite(runner, "127.0.0.1", 0)
    loop.run_until_complete(site.start())
    port = runner.addresses[0][1]
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        assert seen[0] == "emit=changes" or seen[0] == ""


def run(*args: str) -> object:
    return CliRunner().invoke(cli, ["results", *args], env={"ELF_TOKEN": TOKEN})


def test_a_cut_stream_names_the_cursor_to_resume_from(agent_url: str) -> None:
    result = run("cut", "--follow", "--emit", "changes", "--api", agent_url)
    assert result.exit_code == 1  # type: ignore[attr-defined]
    out = result.stdout.splitlines()  # type: ignore[attr-defined]
    assert [orjson.loads(x)["cursor"] for x in out] == ["7:2"]
    err = result.stderr  # type: ignore[attr-defined]
    assert "epoch 7: tentative (version 2), coverage 50%, lacking abababab" in err
    assert "resume with --after 5:1" in err  # epoch 5 still unsettled when 7 came


def test_a_refusal_is_one_line(agent_url: str) -> None:
    result = run("nope", "--follow", "--api", agent_url)
    assert result.exit_code == 1  # type: ignore[attr-defined]
    assert "404: no running job named 'nope'" in result.stderr  # type: ignore[attr-defined]


def test_ctrl_c_exits_130_naming_the_cursor(agent_url: str) -> None:
    env = {**os.environ, "ELF_TOKEN": TOKEN, "PYTHONPATH": str(Path(__file__).parents[2])}
    cmd = [sys.executable, "-m", "agent.cli", "results", "hold", "--follow", "--api", agent_url]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert proc.stdout is not None
        assert orjson.loads(proc.stdout.readline())["cursor"] == "7:2"  # following now
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=20)
    finally:
        proc.kill()
    assert proc.returncode == 130, err
    assert "stopped; resume with --after 5:1" in err.decode()
    assert "Traceback" not in err.decode()


@pytest.mark.parametrize("flags", [["--after", "1:2"], ["--follow", "--epoch", "3"]])
def test_flags_that_do_not_go_together(flags: list[str]) -> None:
    result = run("j", *flags, "--api", "http://127.0.0.1:9")
    assert result.exit_code == 2  # type: ignore[attr-defined]
    assert "--follow takes no --epoch" in result.stderr  # type: ignore[attr-defined]
