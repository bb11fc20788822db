"""The agent's ``lake`` setting: default under the data directory, shared by logical agents,
``off`` disables it, environment and flags override."""

from __future__ import annotations

from agent.config import load_config

ENV = {"ELF_SECRET": "lake-config-secret-0123456789"}


def test_default_lake_is_under_the_data_dir_and_shared_by_logical_agents() -> None:
    cfg = load_config(env=ENV, overrides={"data_dir": "/d", "logical_agents": 3})
    assert cfg.lake == "/d/lake"
    assert cfg.for_logical(2).lake == "/d/lake"  # not /d/agent-2/lake
    assert cfg.for_logical(2).data_dir == "/d/agent-2"


def test_no_data_dir_means_no_lake_and_off_disables() -> None:
    assert load_config(env=ENV).lake is None
    assert load_config(env=ENV, overrides={"data_dir": "/d", "lake": "off"}).lake is None


def test_environment_and_flags_name_the_lake() -> None:
    assert load_config(env={**ENV, "ELF_LAKE": "s3://b/elf"}).lake == "s3://b/elf"
    cfg = load_config(env={**ENV, "ELF_LAKE": "s3://b/elf"}, overrides={"lake": "/x"})
    assert cfg.lake == "/x"
