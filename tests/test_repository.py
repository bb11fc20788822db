"""Repository-level contracts: CI runs the README's test command, every package states its
role, the CLI answers, and lower layers never import higher ones."""

from __future__ import annotations

import ast
import importlib
import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from agent.cli import cli

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ["cbt", "overlay", "srt", "agent", "apps", "spark_sink"]

# Who may import whom: each layer lists the project packages it is allowed to use.
ALLOWED_IMPORTS = {
    "cbt": set(),
    "overlay": set(),
    "srt": {"cbt", "overlay"},
    "agent": {"cbt", "overlay", "srt", "spark_sink"},
    "apps": {"cbt", "agent", "spark_sink"},
    "spark_sink": {"cbt"},
}


def _readme_test_command() -> str:
    readme = (ROOT / "README.md").read_text()
    commands = re.findall(r"```sh\n(.+?)\n```", readme, flags=re.S)
    matches = [c for c in commands if "pytest" in c and "[test]" in c]
    assert len(matches) == 1, "README must show exactly one test set-up command"
    return matches[0].strip()


def test_ci_runs_exactly_the_readme_test_command() -> None:
    ci_lines = (ROOT / ".ci" / "run").read_text().splitlines()
    assert _readme_test_command() in ci_lines


@pytest.mark.parametrize("name", PACKAGES)
def test_each_package_states_its_role(name: str) -> None:
    module = importlib.import_module(name)
    assert module.__doc__ and len(module.__doc__.split()) >= 15


@pytest.mark.parametrize("name", PACKAGES)
def test_layers_only_import_downward(name: str) -> None:
    others = set(PACKAGES) - {name}
    for path in (ROOT / name).rglob("*.py"):
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                roots = [alias.name.split(".")[0] for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                roots = [node.module.split(".")[0]]
            else:
                continue
            for root in roots:
                if root in others:
                    assert root in ALLOWED_IMPORTS[name], (
                        f"{path.relative_to(ROOT)}:{node.lineno} imports {root!r}, "
                        f"which layer {name!r} may not use"
                    )


# Within apps: job code sees the agent only through its job API (agent.api) and cbt; the
# operator-side programs (the demo, `elf generate`) are clients of the system and may use the
# API client, the local cluster, the CLI's shared options and the lake's Spark jobs.
APPS_JOB_IMPORTS = ("agent.api", "cbt")
APPS_OPERATOR_IMPORTS = {
    "apps/demo": (*APPS_JOB_IMPORTS, "agent.client", "agent.server.cluster", "spark_sink"),
    "apps/workload_cli.py": (*APPS_JOB_IMPORTS, "agent.client", "agent.cli_common"),
}


def test_apps_use_the_agent_only_through_its_job_api() -> None:
    for path in (ROOT / "apps").rglob("*.py"):
        rel = path.relative_to(ROOT).as_posix()
        allowed = next(
            (mods for prefix, mods in APPS_OPERATOR_IMPORTS.items() if rel.startswith(prefix)),
            APPS_JOB_IMPORTS,
        )
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                if name.split(".")[0] not in set(PACKAGES) - {"apps"}:
                    continue
                assert any(name == a or name.startswith(a + ".") for a in allowed), (
                    f"{rel}:{node.lineno} imports {name!r}; apps may use only {allowed}"
                )


def test_cli_version_and_help() -> None:
    runner = CliRunner()
    result = runner.invoke(cli, ["--version"])
    assert result.exit_code == 0
    assert result.output.startswith("elf, version ")
    result = runner.invoke(cli, ["--help"])
    assert result.exit_code == 0
    assert "Usage:" in result.output


def test_console_script_is_installed() -> None:
    elf = Path(sys.executable).parent / "elf"
    if not elf.exists():
        pytest.skip("package not installed into this interpreter's environment")
    out = subprocess.run([str(elf), "--version"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "elf, version" in out.stdout
