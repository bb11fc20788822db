"""``elf cluster`` and ``elf agent`` as real processes: start, report, stop cleanly; commands
plugged in through the ``elf.commands`` entry-point group."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import threading
import urllib.parse
from importlib.metadata import EntryPoint
from pathlib import Path

import pytest

from agent.client import ApiClient
from agent.config import derive_api_token


def read_until(proc: subprocess.Popen[str], marker: str, timeout: float) -> list[str]:
    """Lines of ``proc``'s stdout up to the one containing ``marker`` (fails on timeout)."""
    seen: list[str] = []
    done = threading.Event()

    def reader() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            seen.append(line)
            if marker in line:
                done.set()
                return

    threading.Thread(target=reader, daemon=True).start()
    assert done.wait(timeout), f"no {marker!r} within {timeout}s; got {seen!r}"
    return seen


@pytest.mark.parametrize("stop_signal", [signal.SIGINT, signal.SIGTERM])
def test_elf_cluster_starts_agents_and_stops_on_ctrl_c(tmp_path: Path, stop_signal: int) -> None:
    errors = tmp_path / "cluster-stderr.log"
    with errors.open("w") as err:  # a file, not a pipe nobody reads (it could fill and block)
        proc = subprocess.Popen(
            [sys.executable, "-m", "agent.cli", "cluster", "--agents", "2",
             "--workdir", str(tmp_path / "cluster")],
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
        )  # fmt: skip
    try:
        out = read_until(proc, "Ctrl-C stops the cluster.", 90)
        agents = [line.split() for line in out if line.startswith("agent ")]
        assert len(agents) == 2
        token = derive_api_token((tmp_path / "cluster" / "secret").read_bytes().strip())
        status = ApiClient(agents[0][-1], token).status()
        assert status["node_id"].startswith(agents[0][1])
        proc.send_signal(stop_signal)
        try:
            code = proc.wait(60)
        except subprocess.TimeoutExpired:
            logs = "".join(p.read_text() for p in sorted(tmp_path.rglob("*stderr.log")))
            raise AssertionError(f"elf cluster did not stop in 60 s; stderr:\n{logs}") from None
        assert code == 0
        for agent in agents:  # the agents stopped with the cluster: nothing listens any more
            url = urllib.parse.urlsplit(agent[-1])
            with pytest.raises(OSError):
                socket.create_connection((url.hostname, url.port), timeout=2).close()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_elf_agent_reports_ready_and_rejects_bad_config(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text("0123456789abcdef0123456789abcdef")
    secret.chmod(0o600)
    cfg = tmp_path / "agent.toml"
    cfg.write_text(f'[agent]\nsecret_file = "{secret}"\nlogical_agents = 2\n')
    proc = subprocess.Popen(
        [sys.executable, "-m", "agent.cli", "agent", "--config", str(cfg)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        ready = read_until(proc, "ELF-READY ", 60)[-1]
        agents = json.loads(ready.split(" ", 1)[1])
        assert len(agents) == 2 and agents[0]["api_url"] != agents[1]["api_url"]
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    bad = subprocess.run(
        [sys.executable, "-m", "agent.cli", "agent", "--config", str(cfg), "--port", "x"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode != 0 and "--port" in bad.stderr
    bad = subprocess.run(
        [sys.executable, "-m", "agent.cli", "agent", "--secret-file", str(tmp_path / "none")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode != 0 and "cannot read" in bad.stderr


def test_plugged_in_commands_load_and_a_broken_one_is_only_logged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import click
    from click.testing import CliRunner

    import agent.cli as cli_module

    (tmp_path / "elf_plugin_demo.py").write_text(
        "import click\n"
        "@click.command()\n"
        "def hello():\n"
        "    click.echo('hello from a plugin')\n"
        "not_a_command = 42\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    group = "elf.test-commands"
    eps = [
        EntryPoint("hello", "elf_plugin_demo:hello", group),
        EntryPoint("broken", "elf_plugin_missing_module:cmd", group),
        EntryPoint("odd", "elf_plugin_demo:not_a_command", group),
        EntryPoint("status", "elf_plugin_demo:hello", group),  # would shadow a built-in
    ]
    monkeypatch.setattr(cli_module, "entry_points", lambda group: eps)
    target = click.Group("elf", commands={"status": click.Command("status")})
    with caplog.at_level("WARNING", logger="agent.cli"):
        assert cli_module.load_commands(target, group) == ["hello"]
    assert sorted(target.commands) == ["hello", "status"]
    assert target.commands["status"].callback is None  # the built-in one stays
    logged = caplog.text
    assert "'broken'" in logged and "'odd'" in logged and "'status'" in logged
    result = CliRunner().invoke(target, ["hello"])
    assert result.exit_code == 0 and result.output == "hello from a plugin\n"


def test_elf_demo_and_generate_are_plugged_in() -> None:
    from agent.cli import cli

    assert {"demo", "generate"} <= set(cli.commands)
