"""pyarrow without pandas: pyarrow's "is this a pandas object?" probe must not load pandas.

Contract: :func:`answer_pandas_probe` (idempotent, cheap) makes pyarrow's pandas probe - run
once per process, by the first ``pa.array``/``pa.table`` of a Python list - find no pandas,
so that the process does not load pandas just to answer it. If pyarrow is loaded already it
probes at once; otherwise right after pyarrow's own import (a one-shot meta-path finder that
wraps pyarrow's loader, then leaves ``sys.meta_path``). pyarrow is never imported by this
module: an agent that never needs pyarrow still does not load it. Where pandas is already
loaded, nothing changes. The agent daemon, its parse helpers, the parallel ingest's workers
and ``elf run`` call it at start, as they call
:func:`~agent.ingest.columnar.allocator.keep_chunk_memory`.

What still works: code that uses pandas with pyarrow (``Table.to_pandas``,
``Table.from_pandas``, a job class importing pandas) - those import pandas themselves, and
pyarrow then knows it. One difference until one of them ran: ``pa.array`` of a pandas
object reads it as a plain sequence (a categorical Series becomes strings, not a dictionary
array). The agent's own code never hands pandas objects to pyarrow.

Why: pyarrow answers the probe by importing pandas (``pa.array`` -> ``_is_array_like``),
which costs 40 MB of RSS per process (measured: pyarrow and numpy 61 MB, with pandas 101 MB):
a fifth of the parse helper's budget, a quarter of a master's RSS (issues 25 and 27).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import Any

_PANDAS = "pandas"
_PYARROW = "pyarrow"
_answered = False


class _NoPandas(importlib.abc.MetaPathFinder):
    """Refuses pandas while pyarrow probes for it (only then: it is removed right after)."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname == _PANDAS or fullname.startswith(_PANDAS + "."):
            raise ImportError(f"{fullname} is held back while pyarrow probes for it")
        return None


class _AfterPyarrow(importlib.abc.MetaPathFinder):
    """Finds pyarrow with the other finders, once, and probes right after it executed."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != _PYARROW:
            return None
        _leave(self)
        spec = importlib.util.find_spec(fullname)  # the other finders (this one left)
        loader: Any = None if spec is None else spec.loader
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        execute = loader.exec_module

        def exec_then_probe(module: ModuleType) -> None:
            execute(module)
            _probe(module)

        loader.exec_module = exec_then_probe  # this spec's own loader: pyarrow's only
        return spec


def _leave(finder: importlib.abc.MetaPathFinder) -> None:
    if finder in sys.meta_path:
        sys.meta_path.remove(finder)


def _probe(pa: Any) -> None:
    if _PANDAS in sys.modules:
        return  # loaded already: pyarrow finds it, nothing to save
    guard = _NoPandas()
    sys.meta_path.insert(0, guard)
    try:
        pa.array([0])  # the probe runs once; its "no pandas" is remembered
    finally:
        _leave(guard)


def answer_pandas_probe() -> None:
    """Make pyarrow's pandas probe find no pandas (see module docstring)."""
    global _answered
    if _answered:
        return
    _answered = True
    pa = sys.modules.get(_PYARROW)
    if pa is not None:
        _probe(pa)
    else:
        sys.meta_path.insert(0, _AfterPyarrow())
