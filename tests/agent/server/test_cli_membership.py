"""``elf retire``, ``elf leave`` and ``elf status`` against a real ``elf agent`` process on
loopback: retiring an origin of one job and of every job, the refusals (unknown origin or job,
a malformed id, no token), and ``elf leave`` stopping the process as SIGTERM does. The agent
runs through tests/agent/membership_shim.py, which gives the runtime the membership interface
where it lacks it (and only then)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from agent_helpers import wait_until
from test_cli import read_until

from agent.client import ApiClient
from agent.config import derive_api_token

SHIM = Path(__file__).resolve().parents[1] / "membership_shim.py"
JOB = "wc"


def elf(agent: dict[str, Any], secret: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ELF_")}
    env |= {"ELF_API": agent["api_url"], "ELF_SECRET_FILE": str(secret)}
    return subprocess.run(
        [sys.executable, "-m", "agent.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )


@pytest.fixture
def running(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], dict[str, Any], Path]]:
    secret = tmp_path / "secret"
    secret.write_text("0123456789abcdef0123456789abcdef")
    secret.chmod(0o600)
    errors = (tmp_path / "agent-stderr.log").open("w")
    proc = subprocess.Popen(
        [sys.executable, str(SHIM), "agent", "--secret-file", str(secret), "--api-port", "0"],
        stdout=subprocess.PIPE,
        stderr=errors,
        text=True,
    )
    try:
        ready = read_until(proc, "ELF-READY ", 60)[-1]
        (agent,) = json.loads(ready.split(" ", 1)[1])
        client = ApiClient(agent["api_url"], derive_api_token(secret.read_bytes().strip()))
        client.submit({"name": JOB, "creator": "t", "job_class": "wordcount"})
        wait_until(
            lambda: "master" in client.status()["jobs"].get(JOB, {}).get("roles", []),
            30,
            "the agent to master its job",
        )
        yield proc, agent, secret
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        errors.close()


def test_elf_retire_asks_the_master_and_says_what_it_answered(
    running: tuple[subprocess.Popen[str], dict[str, Any], Path],
) -> None:
    _, agent, secret = running
    me = agent["node_id"]  # the agent reads the job's input: an origin of it
    done = elf(agent, secret, "retire", me, "--job", JOB, "--why", "test")
    assert done.returncode == 0, done.stderr
    reply = json.loads(done.stdout)
    assert reply["complete"] and reply["origin"] == me
    assert [m["status"] for m in reply["masters"]] == [200]
    assert reply["masters"][0]["master"] == agent["data_url"]
    done = elf(agent, secret, "retire", me)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["retired"] == [JOB]

    refused = elf(agent, secret, "retire", "00ff", "--job", JOB)
    assert refused.returncode == 1 and "404" in refused.stderr and "not a member" in refused.stderr
    refused = elf(agent, secret, "retire", "00ff")
    assert refused.returncode == 1 and "no running job" in refused.stderr
    refused = elf(agent, secret, "retire", me, "--job", "nope")
    assert refused.returncode == 1 and "404" in refused.stderr and "nope" in refused.stderr
    refused = elf(agent, secret, "retire", "not-hex", "--job", JOB)
    assert refused.returncode == 1 and "400" in refused.stderr and "origin" in refused.stderr
    assert refused.stdout == ""
    no_token = subprocess.run(
        [sys.executable, "-m", "agent.cli", "retire", me, "--api", agent["api_url"]],
        capture_output=True,
        text=True,
        timeout=60,
        env={k: v for k, v in os.environ.items() if not k.startswith("ELF_")},
    )
    assert no_token.returncode != 0 and "no API token" in no_token.stderr
    on_argv = elf(agent, secret, "retire", me, "--token", "x")
    assert on_argv.returncode != 0 and "--token is refused" in on_argv.stderr

    status = elf(agent, secret, "status")
    assert status.returncode == 0, status.stderr
    assert JOB in json.loads(status.stdout)["jobs"]


def test_elf_leave_stops_the_agent_as_sigterm_does(
    running: tuple[subprocess.Popen[str], dict[str, Any], Path],
) -> None:
    proc, agent, secret = running
    done = elf(agent, secret, "leave")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"leaving": True, "node_id": agent["node_id"]}
    assert proc.wait(60) == 0  # the daemon's graceful stop, then a clean exit
    gone = elf(agent, secret, "status")
    assert gone.returncode == 1 and "cannot reach" in gone.stderr
