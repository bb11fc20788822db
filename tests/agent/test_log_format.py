"""The grammar of custom log formats (agent/log_format.py) and its check when an agent's
configuration is loaded: a malformed format or an unknown variable is a ``ConfigError`` naming
the input and the problem, never a failure once the agent runs; a file input with a custom
format parses its lines and quarantines (dead-letters) the malformed ones."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from agent.config import InputConfig, load_config
from agent.errors import ConfigError
from agent.ingest.formats import AccessLogParser
from agent.ingest.inputs import open_input
from agent.ingest.log_format import LogFormatParser
from agent.log_format import LogFormat, LogFormatError, Variable, check_format, format_items

SECRET = {"ELF_SECRET": "log-format-secret-0123456789abcdef"}
MAIN = (
    '$remote_addr - $remote_user [$time_local] "$request" $status $body_bytes_sent '
    '"$http_referer" "$http_user_agent" $request_time $upstream_response_time'
)


def variables(dialect: str, text: str) -> list[tuple[str, str, str]]:
    items = format_items(LogFormat(dialect, text))
    return [(v.token, v.kind, v.field) for v in items if isinstance(v, Variable)]


def test_nginx_variables_braces_and_families() -> None:
    assert variables("nginx", "${request_time}s $upstream_response_time|$http_x_real_ip") == [
        ("${request_time}", "float", "request_time"),
        ("$upstream_response_time", "time_list", "upstream_response_time"),
        ("$http_x_real_ip", "text", "http_x_real_ip"),
    ]
    assert variables("nginx", "$Status $cookie_sid")[0] == ("$Status", "status", "status")


def test_apache_directives() -> None:
    got = variables("apache", '%h %>s %b \\"%{X-Forwarded-For}i\\" %{sec}t %D %T %%')
    assert got == [
        ("%h", "str", "source_ip"),
        ("%>s", "status", "status"),
        ("%b", "bytes", "bytes"),
        ("%{X-Forwarded-For}i", "text", "http_x_forwarded_for"),
        ("%{sec}t", "ts_epoch_int", "ts"),
        ("%D", "usec", "request_time_us"),
        ("%T", "float", "request_time"),
    ]
    items = format_items(LogFormat("apache", '\\"%r\\"\\t%%'))
    assert items[0].text == '"' and items[-1].text == '"\t%'  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("dialect", "text", "message"),
    [
        ("nginx", "$remote_addr $nope", "unknown nginx variable '$nope'"),
        ("nginx", "$remote_addr$status", "no literal text between them"),
        ("nginx", "${status", "malformed variable"),
        ("nginx", "cost: $ 5", "not followed by a variable name"),
        ("nginx", "no variables", "no variable"),
        ("nginx", "", "empty"),
        ("nginx", "$status\n$status", "newline"),
        ("apache", "%h %Z", "unknown Apache directive '%Z'"),
        ("apache", "%{%d/%b/%Y}t", "only %t"),
        ("apache", "%h %400{Referer}i", "status conditions"),
        ("apache", "%h\\n", "newline"),
        ("apache", "%h \\", "lone backslash"),
        ("json", "$status", "nginx or apache"),
    ],
)
def test_malformed_formats_are_refused(dialect: str, text: str, message: str) -> None:
    with pytest.raises(LogFormatError, match=message.replace("$", r"\$").replace("(", r"\(")):
        check_format(dialect, text)


def test_predefined_formats() -> None:
    assert format_items(LogFormat("nginx", "combined"))[0] == Variable(
        "$remote_addr", "str", "source_ip"
    )
    assert len(format_items(LogFormat("apache", "common"))) == 13


def _config(tmp_path: Path, entry: str) -> list[InputConfig]:
    toml = tmp_path / "agent.toml"
    toml.write_text('[[inputs]]\nname = "web"\npath = "/var/log/access.log"\n' + entry)
    return list(load_config(toml, env=SECRET).inputs)


def test_config_takes_a_log_format(tmp_path: Path) -> None:
    (web,) = _config(tmp_path, f"format = \"nginx\"\nlog_format = '{MAIN}'\n")
    assert (web.format, web.log_format) == ("nginx", MAIN)
    (web,) = _config(tmp_path, 'format = "apache"\nlog_format = "combined"\n')
    assert web.log_format is None  # the built-in combined parser
    assert isinstance(open_input(web).parser, AccessLogParser)  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ("format = \"nginx\"\nlog_format = '$remote_addr $bogus'\n", "unknown nginx variable"),
        ("format = \"apache\"\nlog_format = '%h%u'\n", "no literal text"),
        ("format = \"json\"\nlog_format = '$status'\n", "only an nginx or apache input"),
        ('format = "nginx"\nlog_format = 5\n', "must be a string"),
    ],
)
def test_config_refuses_a_bad_log_format(tmp_path: Path, entry: str, message: str) -> None:
    with pytest.raises(ConfigError, match=r"inputs\[0\]\.log_format: .*" + message):
        _config(tmp_path, entry)


def test_file_input_parses_and_dead_letters(tmp_path: Path) -> None:
    path = tmp_path / "access.log"
    good = (
        '203.0.113.9 - - [21/Nov/2026:20:11:10 +0100] "GET /a HTTP/1.1" 200 12 "-" "ua" '
        "0.050 0.010, 0.040"
    )
    path.write_text(f"{good}\nnot a line\n{good.replace('0.050', '-')}\n")
    cfg = InputConfig("web", path=str(path), format="nginx", log_format=MAIN)
    src = open_input(cfg, tmp_path / "data")
    assert isinstance(src.parser, LogFormatParser)  # type: ignore[union-attr]
    records: list[dict] = []
    for _ in range(50):
        records.extend(src.poll())
        if len(records) == 2:
            break
    assert [r["request_time"] for r in records] == [0.05, None]
    assert [r["upstream_response_time"] for r in records] == [0.05, 0.05]
    assert src.stats()["quarantine"]["by_reason"] == {"bad_access_line": 1}
    dead = (tmp_path / "data" / "deadletter" / "web.jsonl").read_bytes().splitlines()
    assert orjson.loads(dead[0])["line"] == "not a line"
    # without a log_format the input keeps the built-in combined parser
    plain = open_input(InputConfig("web", path=str(path), format="nginx"))
    assert isinstance(plain.parser, AccessLogParser)  # type: ignore[union-attr]
