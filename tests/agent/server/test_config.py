"""Agent configuration: file < environment < flags, and errors that name the culprit."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.config import AgentConfig, derive_api_token, load_config
from agent.errors import ConfigError
from agent.runtime.recovery.offsets import OffsetKeeper
from agent.tunables import RuntimeTunables

SECRET = "s" * 32


@pytest.fixture
def secret_file(tmp_path: Path) -> Path:
    path = tmp_path / "secret"
    path.write_text(SECRET + "\n")
    path.chmod(0o600)  # a secret file others may read is refused
    return path


def test_file_then_environment_then_flags(tmp_path: Path, secret_file: Path) -> None:
    cfg_file = tmp_path / "agent.toml"
    cfg_file.write_text(
        f"""
[agent]
host = "10.0.0.5"
overlay_port = 7400
api_port = 7480
domain = "rack-1"
bootstrap = ["10.0.0.1:7400"]
secret_file = "{secret_file}"

[[inputs]]
name = "web"
path = "/var/log/web.jsonl"

[tunables]
probe_interval = 0.25
"""
    )
    cfg = load_config(cfg_file, env={})
    assert cfg.host == "10.0.0.5" and cfg.overlay_port == 7400 and cfg.domain == "rack-1"
    assert cfg.bootstrap == (("10.0.0.1", 7400),)
    assert cfg.secret == SECRET.encode()
    assert cfg.api_token == derive_api_token(SECRET.encode())
    assert cfg.inputs[0].name == "web" and cfg.inputs[0].timestamp_field == "ts"
    assert cfg.tunables.probe_interval == 0.25

    env = {"ELF_DOMAIN": "rack-2", "ELF_BOOTSTRAP": "a:1,b:2", "ELF_TOKEN": "tok"}
    cfg = load_config(cfg_file, env=env, overrides={"domain": "rack-3", "api_port": None})
    assert cfg.domain == "rack-3"  # flag beats environment
    assert cfg.bootstrap == (("a", 1), ("b", 2))  # environment beats file
    assert cfg.api_token == "tok" and cfg.api_port == 7480


def test_logical_agents_get_their_own_ports_and_directories(secret_file: Path) -> None:
    cfg = load_config(
        env={},
        overrides={"secret_file": str(secret_file), "overlay_port": 7000, "data_dir": "/d"},
    )
    second = cfg.for_logical(2)
    assert isinstance(second, AgentConfig)
    assert second.overlay_port == 7002 and second.api_port == 0
    assert second.data_dir == "/d/agent-2"


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({}, "no cluster secret"),
        ({"secret_file": "/nonexistent/secret"}, "flag --secret-file: cannot read"),
        ({"bootstrap": ["nohost"]}, "expected host:port"),
        ({"overlay_port": "x"}, "overlay_port must be an integer"),
        ({"overlay_port": 70000}, "overlay_port out of range"),
        ({"inputs": ["nopath"]}, "expected NAME=PATH"),
        ({"inputs": ["a=/x", "a=/y"]}, "duplicate input names"),
    ],
)
def test_bad_values_name_the_key_and_its_origin(
    secret_file: Path, overrides: dict, message: str
) -> None:
    if "secret_file" not in overrides and message != "no cluster secret":
        overrides = {**overrides, "secret_file": str(secret_file)}
    with pytest.raises(ConfigError, match=message):
        load_config(env={}, overrides=overrides)


def test_bad_file_is_reported_with_its_path(tmp_path: Path, secret_file: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("[agent\nhost=1")
    with pytest.raises(ConfigError, match=str(bad)):
        load_config(bad, env={})
    unknown = tmp_path / "unknown.toml"
    unknown.write_text(f'[agent]\nsecret_file = "{secret_file}"\nhots = "x"\n')
    with pytest.raises(ConfigError, match="unknown setting 'hots'"):
        load_config(unknown, env={})
    short = tmp_path / "short"
    short.write_text("abc")
    short.chmod(0o600)
    with pytest.raises(ConfigError, match="shorter than 16 bytes"):
        load_config(env={}, overrides={"secret_file": str(short)})


def test_runtime_tunables_come_from_the_runtime_table(tmp_path: Path, secret_file: Path) -> None:
    assert load_config(env={}, overrides={"secret_file": str(secret_file)}).runtime == (
        RuntimeTunables()
    )
    cfg_file = tmp_path / "agent.toml"
    cfg_file.write_text(
        f'[agent]\nsecret_file = "{secret_file}"\n\n'
        "[runtime]\ntick_seconds = 0.05\nlate_attempts = 3\nmax_pending = 16\n"
    )
    cfg = load_config(cfg_file, env={})
    assert cfg.runtime.tick_seconds == 0.05 and cfg.runtime.late_attempts == 3
    assert cfg.runtime.max_pending == 16
    assert cfg.runtime.resync_seconds == RuntimeTunables().resync_seconds  # the rest: defaults
    assert cfg.for_logical(1).runtime == cfg.runtime
    for body, message in [
        ("[runtime]\ntick_secs = 1\n", r"\[runtime\]: .*tick_secs"),
        ("[runtime]\nlate_attempts = 0\n", r"\[runtime\]: late_attempts must be a positive"),
        ("[runtime]\nquery_timeout = -1.0\n", r"\[runtime\]: query_timeout must be a positive"),
        ('[runtime]\ntick_seconds = "fast"\n', r"\[runtime\]: tick_seconds must be a positive"),
        ("runtime = 3\n", r"\[runtime\] must be a table"),
    ]:
        cfg_file.write_text(f'{body}\n[agent]\nsecret_file = "{secret_file}"\n')
        with pytest.raises(ConfigError, match=message):
            load_config(cfg_file, env={})


def test_runtime_tunables_validate_on_construction() -> None:
    with pytest.raises(ValueError, match="resync_fanout must be a positive integer"):
        RuntimeTunables(resync_fanout=1.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="master_url_ttl"):
        RuntimeTunables(master_url_ttl=float("inf"))
    assert RuntimeTunables(tick_seconds=1).tick_seconds == 1
    assert OffsetKeeper(None).max_pending == RuntimeTunables().max_pending  # same default


def test_srt_tunables_come_from_the_srt_table(tmp_path: Path, secret_file: Path) -> None:
    import srt

    assert load_config(env={}, overrides={"secret_file": str(secret_file)}).srt == srt.Tunables()
    cfg_file = tmp_path / "agent.toml"
    cfg_file.write_text(
        f'[agent]\nsecret_file = "{secret_file}"\nheartbeat_interval = 0.5\n\n'
        "[srt]\nrequest_timeout = 2.5\nsend_attempts = 6\n"
    )
    cfg = load_config(cfg_file, env={})
    assert cfg.srt.request_timeout == 2.5 and cfg.srt.send_attempts == 6
    assert cfg.srt.query_timeout == srt.Tunables().query_timeout  # the rest: defaults
    assert cfg.heartbeat_interval == 0.5
    for body, message in [
        ("[srt]\nrequest_timeout = 0\n", r"\[srt\]: request_timeout must be positive"),
        ("[srt]\nsend_tries = 2\n", r"\[srt\]: .*send_tries"),
        ("[srt]\nheartbeat_interval = 2.0\n", r"\[srt\]: heartbeat_interval is the agent's own"),
    ]:
        cfg_file.write_text(f'{body}\n[agent]\nsecret_file = "{secret_file}"\n')
        with pytest.raises(ConfigError, match=message):
            load_config(cfg_file, env={})
