"""Custom access-log formats from the command line: ``elf run --format nginx|apache
--log-format STRING`` parses a finished file with the server's own format (row, columnar and
multi-process paths alike), and ``elf agent --input-log-format NAME=STRING`` gives an input of
``--input`` its ``log_format``; both are checked as a configuration file's ``log_format`` is,
with the same ConfigError messages."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import agent.cli as cli_module
from agent.config import load_config
from agent.errors import ConfigError

MAIN = (
    '$remote_addr - $remote_user [$time_local] "$request" $status $body_bytes_sent '
    '"$http_referer" "$http_user_agent" $request_time $upstream_response_time'
)
APACHE = '%h %l %u %t \\"%r\\" %>s %b %D'
ENV = {"ELF_SECRET": "x" * 32}
# (status, request_time) of each line below: the reference the results are checked against
LINES = [
    (200, "0.125"),
    (502, "3.000"),
    (200, "0.250"),
    (404, "0.001"),
    (200, "1.500"),
]


def nginx_file(tmp_path: Path) -> Path:
    path = tmp_path / "access.log"
    path.write_text(
        "".join(
            f'203.0.113.{i} - - [21/Nov/2026:20:11:1{i} +0100] "GET /p{i} HTTP/1.1" {status} '
            f'{100 + i} "-" "curl/8.5.0" {rt} 0.100\n'
            for i, (status, rt) in enumerate(LINES)
        )
    )
    return path


def run(*args: str) -> Any:
    return CliRunner().invoke(cli_module.cli, ["run", *args])


QUERY = "SELECT status, count(*) AS n, sum(request_time) AS t FROM web GROUP BY status"


@pytest.mark.parametrize("how", [[], ["--row-path"], ["--cores", "2"]])
def test_elf_run_parses_with_the_servers_log_format(tmp_path: Path, how: list[str]) -> None:
    path = nginx_file(tmp_path)
    r = run(QUERY, "--file", str(path), "--format", "nginx", "--log-format", MAIN,
            "--epoch-seconds", "3600", "--output", "jsonl", *how)  # fmt: skip
    assert r.exit_code == 0, r.output
    rows = [json.loads(x) for x in r.stdout.splitlines()]
    assert Counter({x["status"]: x["n"] for x in rows}) == Counter(s for s, _ in LINES)
    want: dict[int, float] = {}
    for status, rt in LINES:
        want[status] = want.get(status, 0.0) + float(rt)
    assert {x["status"]: x["t"] for x in rows} == pytest.approx(want)
    assert "5 records, 0 rejected" in r.stderr


def test_elf_run_log_format_errors_are_the_configs(tmp_path: Path) -> None:
    path = str(nginx_file(tmp_path))
    bad = MAIN.replace("$request_time", "$reqest_time")
    # the reference: the same string as a configuration file's input's log_format
    toml = tmp_path / "agent.toml"
    toml.write_text(
        f"[[inputs]]\nname = 'web'\npath = '{path}'\nformat = 'nginx'\nlog_format = '{bad}'\n"
    )
    with pytest.raises(ConfigError) as config_error:
        load_config(toml, env=ENV)
    where, _, problem = str(config_error.value).partition(": ")
    assert where == "inputs[0].log_format" and "$reqest_time" in problem
    r = run(QUERY, "--file", path, "--format", "nginx", "--log-format", bad)
    assert r.exit_code == 1
    # the same message, after the name of where the string came from
    assert f"Error: --log-format: {problem}" in r.stderr
    r = run(QUERY, "--file", path, "--format", "json", "--log-format", MAIN)
    assert r.exit_code == 1
    assert "--log-format: only an nginx or apache input has one" in r.stderr
    r = run(QUERY, "--file", path, "--log-format", MAIN)
    assert r.exit_code == 2 and "--log-format needs --format nginx or --format apache" in r.stderr


def test_elf_agent_input_log_format_sets_the_inputs_log_format(tmp_path: Path) -> None:
    path = str(nginx_file(tmp_path))
    over = {"inputs": (f"web:nginx={path}", f"other={path}"), "input_log_format": (f"web={MAIN}",)}
    cfg = load_config(env=ENV, overrides=over)
    assert [(i.name, i.format, i.log_format) for i in cfg.inputs] == [
        ("web", "nginx", MAIN),
        ("other", "json", None),
    ]
    over["input_log_format"] = ("web=combined",)  # the built-in parser's own format
    assert load_config(env=ENV, overrides=over).inputs[0].log_format is None
    apache = {"inputs": (f"a:apache={path}",), "input_log_format": (f"a={APACHE}",)}
    assert load_config(env=ENV, overrides=apache).inputs[0].log_format == APACHE


@pytest.mark.parametrize(
    ("flag", "message"),
    [
        ("nope=$status", "flag --input-log-format: no input named 'nope'"),
        ("web", "flag --input-log-format: expected NAME=LOG_FORMAT"),
        ("other=$status", "inputs[1].log_format: only an nginx or apache input has one"),
        ("web=$reqest_time", "inputs[0].log_format: unknown nginx variable '$reqest_time'"),
    ],
)
def test_elf_agent_input_log_format_errors(tmp_path: Path, flag: str, message: str) -> None:
    path = str(nginx_file(tmp_path))
    over = {"inputs": (f"web:nginx={path}", f"other={path}"), "input_log_format": (flag,)}
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_config(env=ENV, overrides=over)
    # the same check and message through `elf agent` (it fails before starting anything)
    r = CliRunner().invoke(
        cli_module.cli,
        ["agent", "--input", f"web:nginx={path}", "--input", f"other={path}",
         "--input-log-format", flag],
        env=ENV,
    )  # fmt: skip
    assert r.exit_code == 1 and message in r.stderr


def test_elf_agent_passes_input_log_format_to_the_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import agent.server.daemon as daemon

    got: list[Any] = []

    async def fake_run(config: Any) -> None:
        got.append(config)

    monkeypatch.setattr(daemon, "run", fake_run)
    path = str(nginx_file(tmp_path))
    r = CliRunner().invoke(
        cli_module.cli,
        ["agent", "--input", f"web:nginx={path}", "--input-log-format", f"web={MAIN}"],
        env=ENV,
    )
    assert r.exit_code == 0, r.output
    assert got[0].inputs[0].log_format == MAIN


def test_the_config_file_keeps_its_own_key_for_log_formats(tmp_path: Path) -> None:
    toml = tmp_path / "a.toml"
    toml.write_text(f"[agent]\ninput_log_format = ['web={MAIN}']\n")
    with pytest.raises(ConfigError, match="unknown setting 'input_log_format'"):
        load_config(toml, env=ENV)
