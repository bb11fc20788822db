"""``elf tap JOB [--agent A] [--limit N]`` against an in-process agent serving on loopback
(its own event loop in a thread; the command runs in this one, as a user's would): records
one JSON object per line on stdout, the summary on stderr, ``--agent`` by node id prefix or
API URL, and a one-line error for an agent it cannot find or a job that does not run."""

from __future__ import annotations

import asyncio
import json
import math
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from agent_helpers import lines, running_agents
from click.testing import CliRunner

from agent.cli import cli

WORDS = ["x y", "y z", "z z x"]


class LiveAgent:
    """One agent with a running wordcount job ``wc``, on its own loop in a thread."""

    def __init__(self) -> None:
        self.agent: Any = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="tap-agent", daemon=True)

    def _run(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as exc:
            self._error = exc
            self._ready.set()

    async def _main(self) -> None:
        self.loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
        async with running_agents(1) as (agent,):
            await agent.submit({"name": "wc", "creator": "t", "job_class": "wordcount"})
            self.agent = agent
            self._ready.set()
            await self._stop.wait()

    def __enter__(self) -> LiveAgent:
        self._thread.start()
        assert self._ready.wait(60), "the agent did not start in 60 s"
        if self._error is not None:
            raise self._error
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.loop is not None and self._stop is not None:
            self.loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(60)

    def feed_when_tapped(self, texts: list[str]) -> threading.Thread:
        """Ingest ``texts`` into ``ingest`` as soon as a tap of ``wc`` is open."""

        def feed() -> None:
            taps = self.agent.runtimes["wc"].taps
            deadline = time.monotonic() + 30
            while not taps.active and time.monotonic() < deadline:
                time.sleep(0.02)  # another thread's state: polled, bounded by the deadline
            fed = lines(math.floor(time.time()) + 0.1, texts)
            assert self.loop is not None
            asyncio.run_coroutine_threadsafe(self.agent.ingest("ingest", fed), self.loop).result(30)

        thread = threading.Thread(target=feed, daemon=True)
        thread.start()
        return thread


@pytest.fixture(scope="module")
def live() -> Iterator[LiveAgent]:
    with LiveAgent() as agent:
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
    feeder = live.feed_when_tapped(WORDS)
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
    feeder = live.feed_when_tapped(WORDS[:1])
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
