"""Makes the helper modules in tests/agent and its subfolders importable (pytest runs with
--import-mode=importlib and tests/ has no packages, so a tests/agent package would shadow the
real ``agent``; the subfolders mirror the package's subpackages and share these helpers), and
holds the fixtures they share: ``sent``, the specs ``elf submit`` sent to a recording client."""

import sys
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).parent
for folder in [HERE, *sorted(p for p in HERE.iterdir() if p.is_dir() and p.name != "__pycache__")]:
    sys.path.insert(0, str(folder))


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """``elf submit`` talks to a client that records each spec it submits (no agent)."""
    import agent.cli as cli_module

    specs: list[dict[str, Any]] = []

    class Client:
        def submit(self, spec: dict[str, Any]) -> dict[str, Any]:
            specs.append(spec)
            return {"ok": True}

    monkeypatch.setattr(cli_module, "api_client", lambda *a: Client())
    return specs
