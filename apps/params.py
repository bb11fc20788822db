"""Parameter validation and ranking helpers shared by the apps' job classes.

Contract: each ``*_param`` function reads one key of a job's ``params`` dict, returns the
default when it is absent, and raises ``ValueError("params.<key>: ...")`` naming what was
expected and what came otherwise (``Job.setup`` lets it propagate: the submission's dry run,
``agent.jobs.job.dry_run``, turns it into a 400 whose ``field`` is ``params.<key>``). Every
value is bounded: integers by ``high`` (default the signed 64-bit maximum; the apps pass
tighter ones for sizes such as k), numbers (:func:`float_param`) to ``[low, high]``, strings
to ``MAX_STR`` characters, lists to ``MAX_LIST`` items.
:func:`ranked` orders ``(key, count)`` pairs the way every app ranks: count descending, then
key ascending (so ties are broken the same way on every agent and in tests).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

INT64_MAX = 2**63 - 1
#: a size the apps rank or keep per epoch (k, bundle replies): like a spec's top_k
MAX_K = 10_000
#: a window of epochs an app keeps (like a spec's window_size)
MAX_WINDOW = 10_000
#: products per basket: a basket of n products yields n(n-1)/2 pairs at the master
MAX_BASKET = 500
MAX_STR = 1024
MAX_LIST = 1024


def int_param(
    params: dict[str, Any], key: str, default: int, *, low: int = 0, high: int = INT64_MAX
) -> int:
    """An integer in ``[low, high]``."""
    v = params.get(key, default)
    if isinstance(v, bool) or not isinstance(v, int) or not low <= v <= high:
        raise ValueError(f"params.{key}: must be an integer in [{low}, {high}], got {v!r}")
    return v


def float_param(
    params: dict[str, Any], key: str, default: float, *, low: float, high: float
) -> float:
    """A finite number (an int is taken as a float) in ``[low, high]``."""
    v = params.get(key, default)
    if isinstance(v, bool) or not isinstance(v, int | float) or not low <= v <= high:
        raise ValueError(f"params.{key}: must be a number in [{low:g}, {high:g}], got {v!r:.80}")
    return float(v)


def optional_int_param(
    params: dict[str, Any], key: str, *, low: int = 0, high: int = INT64_MAX
) -> int | None:
    """An integer in ``[low, high]`` or null/absent (None)."""
    if params.get(key) is None:
        return None
    return int_param(params, key, 0, low=low, high=high)


def str_param(params: dict[str, Any], key: str, default: str) -> str:
    """A non-empty string of at most ``MAX_STR`` characters."""
    v = params.get(key, default)
    if not isinstance(v, str) or not v or len(v) > MAX_STR:
        raise ValueError(
            f"params.{key}: must be a non-empty string of at most {MAX_STR} characters, "
            f"got {v!r:.80}"
        )
    return v


def str_list_param(
    params: dict[str, Any], key: str, default: Iterable[str] | None, *, allow_null: bool = False
) -> tuple[Any, ...] | None:
    """A non-empty list of at most ``MAX_LIST`` non-empty strings of at most ``MAX_STR``
    characters (``allow_null``: null items allowed too); None when absent and ``default`` is
    None."""
    v = params.get(key, None if default is None else list(default))
    if v is None:
        return None
    ok = isinstance(v, list) and 0 < len(v) <= MAX_LIST
    if ok:
        ok = all(
            (isinstance(x, str) and 0 < len(x) <= MAX_STR) or (allow_null and x is None) for x in v
        )
    if not ok:
        what = "strings (or null)" if allow_null else "non-empty strings"
        raise ValueError(
            f"params.{key}: must be a non-empty list of at most {MAX_LIST} {what}, got {v!r:.80}"
        )
    return tuple(v)


def ranked(pairs: Iterable[tuple[Any, Any]], k: int | None = None) -> list[tuple[Any, Any]]:
    """``pairs`` sorted by value descending, then key ascending; the first ``k`` (all: None)."""
    out = sorted(pairs, key=lambda kv: (-kv[1], kv[0]))
    return out if k is None else out[:k]
