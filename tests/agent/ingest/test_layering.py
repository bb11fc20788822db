"""Ingest sits below the runtime and the server: no module of ``agent/ingest`` imports
``agent.runtime`` or ``agent.server`` (TYPE_CHECKING and function-local imports included), so
inputs and parsers can be used and tested without an agent."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
FORBIDDEN = ("agent.runtime", "agent.server")


def _imported_modules(path: Path) -> list[tuple[int, str]]:
    out: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module == "agent":  # ``from agent import runtime``
                out += [(node.lineno, f"agent.{alias.name}") for alias in node.names]
            else:
                out.append((node.lineno, node.module))
        elif isinstance(node, ast.ImportFrom) and node.level > 0:
            raise AssertionError(f"{path}:{node.lineno}: use absolute imports in agent/ingest")
    return out


def test_ingest_imports_neither_the_runtime_nor_the_server() -> None:
    paths = sorted((ROOT / "agent" / "ingest").glob("*.py"))
    assert len(paths) >= 5
    for path in paths:
        for line, module in _imported_modules(path):
            assert not module.startswith(FORBIDDEN), (
                f"{path.relative_to(ROOT)}:{line} imports {module}"
            )
