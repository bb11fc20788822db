"""JobRuntime's parts (agent/runtime/job/) reach it only through job/host.py's protocols.

As srt/trees/ does for the TreeManager: no part imports the runtime's module (which imports
them all), so a part can be read, and tested, on its own.
"""

from __future__ import annotations

import ast
from pathlib import Path

JOB = Path(__file__).resolve().parents[3] / "agent" / "runtime" / "job"


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return names


def test_no_part_imports_the_runtime() -> None:
    parts = [p for p in JOB.glob("*.py") if p.name not in ("runtime.py", "__init__.py")]
    assert {p.name for p in parts} >= {"host.py", "pipeline.py", "queries.py", "report.py"}
    offenders = [p.name for p in parts if "agent.runtime.job.runtime" in _imports(p)]
    assert not offenders, f"parts importing job/runtime.py: {offenders}"
