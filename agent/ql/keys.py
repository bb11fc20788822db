"""GROUP BY values as CBT keys and back.

Contract: :func:`encode` maps any JSON value to a valid CBT key (str, int or tuples of those)
and :func:`decode` inverts it, also after a trip through JSON (tuples as lists). Strings and
64-bit ints stay themselves (the common, fast case); every other value becomes a tagged pair
``(tag, payload)`` that no string or int can collide with: NULL ``(0, 0)``, float
``(1, float.hex())``, bool ``(2, 0|1)``, object/array ``(3, canonical JSON)``, a larger int
``(4, decimal digits)``. Equal JSON values give equal keys (object members are sorted).
:func:`keys_problem` says whether a whole column of keys decodes for a GROUP BY width (what
the data plane checks a peer's snapshot with before it merges).
"""

from __future__ import annotations

from typing import Any

import orjson

_INT_LO, _INT_HI = -(1 << 63), (1 << 63) - 1
NULL_KEY = (0, 0)


def encode(v: Any) -> Any:
    """The CBT key of one GROUP BY value."""
    t = type(v)
    if t is str:
        return v
    if t is int:
        return v if _INT_LO <= v <= _INT_HI else (4, str(v))
    if v is None:
        return NULL_KEY
    if t is float:
        return (1, v.hex())
    if t is bool:
        return (2, int(v))
    try:
        return (3, orjson.dumps(v, option=orjson.OPT_SORT_KEYS).decode())
    except TypeError:
        return (3, orjson.dumps(repr(v)).decode())


def decode(k: Any) -> Any:
    """The GROUP BY value of one encoded key part (tuples or lists accepted)."""
    if type(k) is str or type(k) is int:
        return k
    if isinstance(k, list | tuple) and len(k) == 2:
        tag, payload = k
        if tag == 0:
            return None
        if tag == 1 and isinstance(payload, str):
            return float.fromhex(payload)
        if tag == 2:
            return bool(payload)
        if tag == 3 and isinstance(payload, str):
            return orjson.loads(payload)
        if tag == 4 and isinstance(payload, str):
            return int(payload)
    raise ValueError(f"not an ELF QL group key: {k!r}")


def decode_key(key: Any, width: int) -> tuple:
    """The ``width`` GROUP BY values of a whole key (width 1: a bare part; 0: ``()``)."""
    if width == 0:
        return ()
    if width == 1:
        return (decode(key),)
    if not isinstance(key, list | tuple) or len(key) != width:
        raise ValueError(f"expected a group key of {width} parts, got {key!r}")
    return tuple(decode(p) for p in key)


def keys_problem(keys: list[Any], width: int) -> str | None:
    """The first reason one of ``keys`` is not a key of a ``width``-column GROUP BY (so
    ``decode_key`` and the result rows would fail on it), or None when every key fits.
    Width 0 (no GROUP BY) has the single key ``()``."""
    for key in keys:
        try:
            if width == 0:
                if key != ():
                    raise ValueError(
                        f"expected the key () of a query without GROUP BY, got {key!r}"
                    )
            else:
                decode_key(key, width)
        except (ValueError, TypeError) as exc:  # orjson's decode error is a ValueError
            return str(exc)[:200]
    return None
