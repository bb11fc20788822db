"""Parameter validation and ranking helpers shared by the apps' job classes.

Contract: each ``*_param`` function reads one key of a job's ``params`` dict, returns the
default when it is absent, and raises ``ValueError("params.<key>: ...")`` naming what was
expected and what came otherwise (``Job.setup`` lets it propagate: the spec is refused).
:func:`ranked` orders ``(key, count)`` pairs the way every app ranks: count descending, then
key ascending (so ties are broken the same way on every agent and in tests).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


def int_param(params: dict[str, Any], key: str, default: int, *, low: int = 0) -> int:
    """An integer ``>= low``."""
    v = params.get(key, default)
    if isinstance(v, bool) or not isinstance(v, int) or v < low:
        raise ValueError(f"params.{key}: must be an integer >= {low}, got {v!r}")
    return v


def optional_int_param(params: dict[str, Any], key: str, *, low: int = 0) -> int | None:
    """An integer ``>= low`` or null/absent (None)."""
    if params.get(key) is None:
        return None
    return int_param(params, key, 0, low=low)


def str_param(params: dict[str, Any], key: str, default: str) -> str:
    """A non-empty string."""
    v = params.get(key, default)
    if not isinstance(v, str) or not v:
        raise ValueError(f"params.{key}: must be a non-empty string, got {v!r}")
    return v


def str_list_param(
    params: dict[str, Any], key: str, default: Iterable[str] | None, *, allow_null: bool = False
) -> tuple[Any, ...] | None:
    """A non-empty list of non-empty strings (``allow_null``: null items allowed too); None
    when absent and ``default`` is None."""
    v = params.get(key, None if default is None else list(default))
    if v is None:
        return None
    ok = isinstance(v, list) and v
    if ok:
        ok = all((isinstance(x, str) and x) or (allow_null and x is None) for x in v)
    if not ok:
        what = "strings (or null)" if allow_null else "non-empty strings"
        raise ValueError(f"params.{key}: must be a non-empty list of {what}, got {v!r}")
    return tuple(v)


def ranked(pairs: Iterable[tuple[Any, Any]], k: int | None = None) -> list[tuple[Any, Any]]:
    """``pairs`` sorted by value descending, then key ascending; the first ``k`` (all: None)."""
    out = sorted(pairs, key=lambda kv: (-kv[1], kv[0]))
    return out if k is None else out[:k]
