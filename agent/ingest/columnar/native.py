"""The optional compiled extensions of the columnar path, loaded where they were built.

Contract: :func:`optional_extension` ``(name)`` returns the extension module
``agent.ingest.columnar.<name>`` or None when it is not there (``setup.py`` builds each with
``optional=True``: an install without a C compiler succeeds without them, and each caller then
runs its Python kernel - numpy's newline search, the numpy access-log kernel, msgspec).
"""

from __future__ import annotations

import importlib
from types import ModuleType


def optional_extension(name: str) -> ModuleType | None:
    """``agent.ingest.columnar.<name>``, or None where it was not built."""
    try:
        return importlib.import_module(f"agent.ingest.columnar.{name}")
    except ImportError:
        return None
