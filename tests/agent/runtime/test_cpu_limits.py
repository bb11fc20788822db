"""``max_cores`` and ``nice`` cap the agent's own CPU: applied in a fresh process (they cannot
be undone), read from ``[runtime]`` in the TOML config, and bad values refused by name."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agent.config import load_config
from agent.errors import ConfigError


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity"), reason="Linux CPU affinity")
def test_limits_apply_to_the_process() -> None:
    code = (
        "import json, os; from agent.runtime.host.cpu_limits import apply_cpu_limits; "
        "r = apply_cpu_limits(1, 3); "
        "print(json.dumps({**r, 'affinity': sorted(os.sched_getaffinity(0))}))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    got = json.loads(out.stdout)
    assert len(got["cores"]) == 1 and got["affinity"] == got["cores"]
    assert got["nice"] >= 3


def test_settings_come_from_the_runtime_table(tmp_path: Path) -> None:
    path = tmp_path / "agent.toml"
    path.write_text("[runtime]\nmax_cores = 1\nnice = 10\ncolumnar = false\n")
    cfg = load_config(path, env={"ELF_SECRET": "s" * 32})
    assert (cfg.runtime.max_cores, cfg.runtime.nice, cfg.runtime.columnar) == (1, 10, False)


@pytest.mark.parametrize(
    ("line", "field"), [("nice = 25", "nice"), ("max_cores = -2", "max_cores"),
                        ("columnar = 1", "columnar")],
)  # fmt: skip
def test_bad_values_are_refused_by_name(tmp_path: Path, line: str, field: str) -> None:
    path = tmp_path / "agent.toml"
    path.write_text(f"[runtime]\n{line}\n")
    with pytest.raises(ConfigError, match=field):
        load_config(path, env={"ELF_SECRET": "s" * 32})
