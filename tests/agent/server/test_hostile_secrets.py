"""Hostile-input suite, secrets and bad bytes (issue 13, findings 8 and 7's invalid UTF-8), on
real ``elf agent`` processes (:class:`~agent.server.cluster.LocalCluster`) and the real ``elf``
command:

* a secret or token file others may read is refused by the agent process and by the CLI;
* ``--token`` is refused; ``--token-file`` and ``ELF_TOKEN`` work;
* no command line the CLI or LocalCluster builds carries the secret or the token (read from
  ``/proc`` as ``ps`` would), and no ``/status`` body or log line (at DEBUG) does;
* files holding raw lines (dead letters, the agent's stderr log) and the state files are 0600,
  the dead-letter directory 0700; LocalCluster's secret is created 0600 from the start;
* a JSON line with an invalid UTF-8 byte is counted and kept: its event reaches the job's
  result, which equals a Counter over the lines;
* ``repr`` of the config and the client show neither value.
"""

from __future__ import annotations

import json
import math
import os
import stat
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from agent_helpers import wait_until
from click.testing import CliRunner
from hostile_helpers import StatusWatch

from agent.cli import cli
from agent.client import ApiClient, ApiError
from agent.config import derive_api_token, load_config
from agent.jobs.ql_job import spec_from_query
from agent.private_files import insecure_mode
from agent.server.cluster import LocalCluster

QUERY = "SELECT m, count(*) AS n FROM web GROUP BY m"


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalCluster, Path]]:
    root = tmp_path_factory.mktemp("secrets")
    web = root / "web.jsonl"
    web.touch()
    # DEBUG: the most the agents ever log, so "no log line carries a secret" covers every line
    local = LocalCluster(
        2, root / "cluster", inputs={0: {"web": str(web)}}, extra_args=["--log-level", "DEBUG"]
    )
    local.start(timeout=90)
    local.wait_settled(60)
    yield local, web
    local.stop()


def secrets_of(local: LocalCluster) -> tuple[str, str]:
    return local.secret_file.read_text().strip(), local.token


# ---- the agent refuses secret and token files others can read --------------------------------


def run_agent(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agent.cli", "agent", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={k: v for k, v in os.environ.items() if not k.startswith("ELF_")},
    )


@pytest.mark.parametrize("bad_mode", [0o644, 0o604, 0o660])
def test_agent_process_refuses_a_secret_file_others_can_read(tmp_path: Path, bad_mode: int) -> None:
    secret = tmp_path / "secret"
    secret.write_text("0123456789abcdef0123456789abcdef\n")
    secret.chmod(bad_mode)
    done = run_agent("--secret-file", str(secret), "--api-port", "0")
    assert done.returncode != 0
    assert "readable by others" in done.stderr and f"chmod 600 {secret}" in done.stderr
    assert "ELF-READY" not in done.stdout
    assert "0123456789abcdef" not in done.stderr  # the refusal names the file, not its content


def test_agent_process_refuses_a_token_file_others_can_read(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text("0123456789abcdef0123456789abcdef\n")
    secret.chmod(0o600)
    token = tmp_path / "token"
    token.write_text("a-token-of-our-own\n")
    token.chmod(0o644)
    done = run_agent("--secret-file", str(secret), "--token-file", str(token))
    assert done.returncode != 0 and "--token-file" in done.stderr
    assert "readable by others" in done.stderr and "a-token-of-our-own" not in done.stderr


def test_the_permission_rule() -> None:
    """Owner-only always passes; group/other bits fail, except a root-owned 0640 (PostgreSQL's
    rule for keys an administrator hands to a service's group)."""

    def st(mode: int, uid: int) -> os.stat_result:
        return os.stat_result((stat.S_IFREG | mode, 0, 0, 1, uid, 0, 0, 0, 0, 0))

    assert not insecure_mode(st(0o600, 1000)) and not insecure_mode(st(0o400, 1000))
    assert insecure_mode(st(0o640, 1000)) and insecure_mode(st(0o644, 1000))
    assert insecure_mode(st(0o602, 1000)) and insecure_mode(st(0o620, 1000))
    assert not insecure_mode(st(0o640, 0)) and not insecure_mode(st(0o440, 0))
    assert insecure_mode(st(0o644, 0)) and insecure_mode(st(0o660, 0))


# ---- the CLI: tokens only from files or the environment ---------------------------------------


def test_cli_refuses_a_token_flag_before_calling_anything(cluster: Any) -> None:
    local, _ = cluster
    _, token = secrets_of(local)
    done = subprocess.run(
        [sys.executable, "-m", "agent.cli", "status", "--api", local.procs[0].api_url,
         "--token", token],
        capture_output=True,
        text=True,
        timeout=60,
    )  # fmt: skip
    assert done.returncode == 2, done
    assert "--token is refused" in done.stderr and "--token-file" in done.stderr
    assert "ELF_TOKEN" in done.stderr and done.stdout == ""


def test_cli_takes_the_token_from_a_private_file_or_the_environment(
    cluster: Any, tmp_path: Path
) -> None:
    local, _ = cluster
    _, token = secrets_of(local)
    api = ["--api", local.procs[1].api_url]
    runner = CliRunner()
    clean = {"ELF_TOKEN": None, "ELF_TOKEN_FILE": None, "ELF_SECRET_FILE": None}
    token_file = tmp_path / "token"
    token_file.write_text(token + "\n")
    token_file.chmod(0o600)
    by_file = runner.invoke(cli, ["status", *api, "--token-file", str(token_file)], env=clean)
    assert by_file.exit_code == 0, by_file.output
    assert json.loads(by_file.output)["node_id"] == local.procs[1].agents[0]["node_id"]
    by_env = runner.invoke(cli, ["jobs", *api], env={**clean, "ELF_TOKEN": token})
    assert by_env.exit_code == 0, by_env.output
    by_secret = runner.invoke(cli, ["jobs", *api, "--secret-file", str(local.secret_file)])
    assert by_secret.exit_code == 0, by_secret.output
    wrong = runner.invoke(cli, ["jobs", *api], env={**clean, "ELF_TOKEN": "not-the-token"})
    assert wrong.exit_code != 0 and "401" in wrong.output
    token_file.chmod(0o644)
    shared = runner.invoke(cli, ["jobs", *api, "--token-file", str(token_file)], env=clean)
    assert shared.exit_code != 0 and "readable by others" in shared.output
    assert token not in shared.output
    none = runner.invoke(cli, ["jobs", *api], env=clean)
    assert none.exit_code != 0 and "no API token" in none.output


# ---- no command line, status page or log line carries a secret ---------------------------------


def test_no_agent_command_line_holds_the_secret_or_the_token(cluster: Any) -> None:
    """What ``ps`` shows every local user: each agent process's argv (and any child's)."""
    local, _ = cluster
    secret, token = secrets_of(local)
    seen = 0
    for proc in local.procs:
        p = psutil.Process(proc.process.pid)
        for q in [p, *p.children(recursive=True)]:
            cmdline = " ".join(q.cmdline())
            assert secret not in cmdline and token not in cmdline, cmdline
            assert str(local.secret_file) in cmdline or q is not p  # the path, not the value
            seen += 1
    assert seen >= len(local.procs)


def test_status_and_logs_of_real_agents_hold_neither_secret_nor_token(cluster: Any) -> None:
    local, _ = cluster
    secret, token = secrets_of(local)
    for proc in local.procs:
        for path in ("/api/v1/status", "/api/v1/jobs", "/api/v1/health"):
            req = urllib.request.Request(proc.api_url + path)
            req.add_header("Authorization", f"Bearer {token}")
            with urllib.request.urlopen(req, timeout=30) as resp:
                body = resp.read().decode()
            assert body and secret not in body and token not in body, path
        # a wrong token's 401 does not echo what was sent, nor the right one
        req = urllib.request.Request(proc.api_url + "/api/v1/status")
        req.add_header("Authorization", "Bearer guess-0123")
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(req, timeout=30)
        text = refused.value.read().decode()
        assert refused.value.code == 401 and token not in text and "guess-0123" not in text
    for proc in local.procs:
        log = (proc.data_dir / "stderr.log").read_text()
        assert log, "the agents log at DEBUG: an empty log would prove nothing"
        assert secret not in log and token not in log


def test_repr_of_config_and_client_hide_secret_and_token() -> None:
    secret, token = "s3cret-value-0123456789", "t0ken-value-abcdef"
    cfg = load_config(env={"ELF_SECRET": secret, "ELF_TOKEN": token})
    assert cfg.secret == secret.encode() and cfg.api_token == token
    for text in (repr(cfg), str(cfg), repr(cfg.for_logical(1))):
        assert secret not in text and token not in text
    derived = load_config(env={"ELF_SECRET": secret})
    assert derive_api_token(secret.encode()) not in repr(derived)
    client = ApiClient("http://127.0.0.1:1", token)
    assert token not in repr(client) and "redacted" in repr(client)


# ---- files holding raw lines; bad bytes in a real agent ---------------------------------------


def test_raw_line_files_are_private_and_a_bad_byte_keeps_its_event(cluster: Any) -> None:
    local, web = cluster
    client = local.client(0)
    e = math.floor(time.time()) + 2
    client.submit(
        spec_from_query("words", "tests", QUERY, start_epoch=e, epoch_seconds=1,
                        allowed_lateness=0.5, inputs=["web"])
    )  # fmt: skip
    wait_until(lambda: "words" in client.status()["jobs"], 30, "the job to start on agent 0")
    lines = [json.dumps({"ts": e + 0.1 * i, "m": f"w{i % 3}"}).encode() for i in range(8)]
    lines.insert(3, b'{"ts": %d.5, "m": "bad \xff byte"}' % e)  # one invalid UTF-8 byte
    lines.insert(5, b"not json at all")  # a rejected line: goes to the dead-letter file
    lines.append(json.dumps({"ts": e + 3, "m": "later"}).encode())  # moves the watermark on
    want = Counter({"w0": 3, "w1": 3, "w2": 2, "bad \ufffd byte": 1})
    with StatusWatch(local.procs[0].api_url, local.token) as watch:
        with web.open("ab") as f:
            f.write(b"\n".join(lines) + b"\n")

        def rows() -> Counter | None:
            try:
                res = local.client(1).results("words", e)
            except ApiError:
                return None
            return Counter({r["m"]: r["n"] for r in res["rows"]}) if res["complete"] else None

        got = wait_until(rows, 60, "the epoch's complete result")
    watch.assert_responsive()
    assert got == want
    web_stats = client.status()["inputs"]["web"]
    assert web_stats["bad_encoding_repaired"] == 1
    assert web_stats["quarantine"]["by_reason"] == {"bad_json": 1}
    agent_dir = local.procs[0].data_dir / "agent-0"
    dead = agent_dir / "deadletter" / "web.jsonl"
    wait_until(dead.exists, 10, "the dead-letter sample")
    assert b"not json at all" in dead.read_bytes()
    assert mode(dead) == 0o600 and mode(dead.parent) == 0o700
    wait_until((agent_dir / "offsets.json").exists, 10, "the offsets file")
    assert mode(agent_dir / "offsets.json") == 0o600
    for proc in local.procs:
        assert mode(proc.data_dir / "stderr.log") == 0o600
    assert mode(local.secret_file) == 0o600


def test_ingest_endpoint_keeps_lines_with_a_bad_byte(cluster: Any) -> None:
    """Before: the whole body was a 400 ("not UTF-8"); now each line is decoded on its own."""
    local, _ = cluster
    client = local.client(1)
    before = client.status()["inputs"]["ingest"]["bad_encoding_repaired"]
    result = client.ingest(
        "ingest", [b'{"ts": 1, "m": "caf\xe9"}', b'{"ts": 2, "m": "ok"}', b'{"ts": 3, "m": "\xc3"}']
    )
    assert (result["accepted"], result["rejected"]) == (3, 0), result
    assert client.status()["inputs"]["ingest"]["bad_encoding_repaired"] == before + 2


def test_local_cluster_creates_its_secret_0600_from_the_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Even with umask 000 the file is 0600, and it is created by one ``open`` with that mode
    and ``O_EXCL`` (no write-then-chmod window, no following a planted file)."""
    calls: list[tuple[str, int, int]] = []
    real_open = os.open

    def spy(path: Any, flags: int, mode: int = 0o777, *a: Any, **kw: Any) -> int:
        calls.append((str(path), flags, mode))
        return real_open(path, flags, mode, *a, **kw)

    local = LocalCluster(1, tmp_path / "c")
    monkeypatch.setattr(os, "open", spy)
    old = os.umask(0)
    try:
        path = local.ensure_secret()
    finally:
        os.umask(old)
    assert mode(path) == 0o600 and len(path.read_text().strip()) == 64
    created = [c for c in calls if c[0] == str(path)]
    assert len(created) == 1
    _, flags, file_mode = created[0]
    assert flags & os.O_CREAT and flags & os.O_EXCL and file_mode == 0o600
    first = path.read_text()
    assert local.ensure_secret() == path and path.read_text() == first  # kept, not rewritten
