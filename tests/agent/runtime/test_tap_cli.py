"""``elf tap JOB [--agent A] [--limit N]`` against an in-process agent serving on loopback
(its own event loop in a thread; the command runs in this one, as a user's would): records
one JSON object per line on stdout, the summary on stderr, ``--agent`` by node id prefix or
API URL, and a one-line error for an agent it cannot find or a job that does not run."""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from agent_helpers import lines
from click.testing import CliRunner
from live_agent import LiveAgent

from agent.cli import cli

WORDS = ["x y", "y z", "z z x"]


async def submit_wordcount(agent: Any) -> None:
    await agent.submit({"name": "wc", "creator": "t", "job_class": "wordcount"})


def feed_when_tapped(live: LiveAgent, texts: list[str]) -> threading.Thread:
    """Ingest ``texts`` into ``ingest`` as soon as a tap of ``wc`` is open."""

    def feed() -> None:
        taps = live.agent.runtimes["wc"].taps
        deadline = time.monotonic() + 30
        while not taps.active and time.monotonic() < deadline:
            time.sleep(0.02)  # another thread's state: polled, bounded by the deadline
        fed = lines(math.floor(time.time()) + 0.1, texts)
        live.run_coroutine(live.agent.ingest("ingest", fed))

    thread = threading.Thread(target=feed, daemon=True)
    thread.start()
    return thread


@pytest.fixture(scope="module")
def live() -> Iterator[LiveAgent]:
    """One agent with a running wordcount job ``wc``."""
    with LiveAgent(submit_wordcount, name="tap-agent") as agent:
        yield agent


@pytest.fixture()
def token_file(tmp_path: Path, live: LiveAgent) -> str:
    path = tmp_path / "token"
    path.write_text(live.agent.config.api_token)
    path.chmod(0o600)
    return str(path)


def tap(live: LiveAgent, token_file: str, *extra: str) -> Any:
    args = ["tap", "wc", "--api", live.agent.api.url, "--token-file", token_file, *extra]
    return CliRunner().invoke(cli, args)


def test_elf_tap_prints_the_records_one_per_line(live: LiveAgent, token_file: str) -> None:
    feeder = feed_when_tapped(live, WORDS)
    result = tap(live, token_file, "--limit", "2", "--timeout", "30")
    feeder.join(30)
    assert result.exit_code == 0, result.output
    out = [json.loads(line) for line in result.stdout.splitlines()]
    assert [r["record"]["line"] for r in out] == WORDS[:2]
    node = f"{live.agent.overlay.id:040x}"
    assert {(r["input"], r["origin"]) for r in out} == {("ingest", node)}
    assert all(r["epoch"] == math.floor(r["record"]["ts"]) for r in out)
    assert f"tap wc on {node[:8]}: 2 records (limit reached)" in result.stderr


@pytest.mark.parametrize("how", ["prefix", "url"])
def test_elf_tap_agent_picks_the_agent(live: LiveAgent, token_file: str, how: str) -> None:
    which = f"{live.agent.overlay.id:040x}"[:6] if how == "prefix" else live.agent.api.url
    feeder = feed_when_tapped(live, WORDS[:1])
    result = tap(live, token_file, "--agent", which, "--limit", "1", "--timeout", "30")
    feeder.join(30)
    assert result.exit_code == 0, result.output
    assert [json.loads(x)["record"]["line"] for x in result.stdout.splitlines()] == WORDS[:1]


def test_elf_tap_errors_are_one_line(live: LiveAgent, token_file: str) -> None:
    result = tap(live, token_file, "--agent", "ffffffffff0000", "--timeout", "0.1")
    assert result.exit_code == 1 and "no agent of the cluster picture" in result.stderr
    result = tap(live, token_file, "--agent", "not-hex", "--timeout", "0.1")
    assert result.exit_code == 2 and "node id prefix (hex) or an API URL" in result.stderr
    result = tap(live, token_file, "--limit", "1001")
    assert result.exit_code == 2 and "--limit" in result.stderr
    args = ["tap", "gone", "--api", live.agent.api.url, "--token-file", token_file]
    result = CliRunner().invoke(cli, [*args, "--timeout", "0.1"])
    assert result.exit_code == 1 and "404: no running job named 'gone'" in result.stderr
