"""ELF QL ``CAST`` and timestamps on the row path: Python values to Python values.

Contract: :func:`cast(value, type)` converts one value to ``BIGINT`` (int), ``DOUBLE``
(float), ``VARCHAR`` (str), ``BOOLEAN`` (bool) or ``TIMESTAMP`` (timestamp text); a value that
cannot be converted gives NULL, like DuckDB's ``TRY_CAST`` (a failed cast is never an error:
a record is not dropped, and a job does not fail, on one odd value). NULL gives NULL.

ELF QL has no timestamp kind of value: a TIMESTAMP is its text, ``YYYY-MM-DD HH:MM:SS`` in
UTC with ``.ffffff`` (trailing zeros dropped) when it has a fraction of a second - exactly how
DuckDB prints a TIMESTAMP cast to VARCHAR - so it is a readable GROUP BY key, sorts in time
order (years 1-9999), and survives JSON. :func:`from_unixtime` and :func:`date_trunc` make
one from epoch seconds (or, for date_trunc and CAST, parse ISO 8601 text).
"""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime, timedelta
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation
from typing import Any

_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1
# DuckDB reads a BIGINT from text as a decimal number (rounded half away from zero)
_DECIMAL_TEXT = re.compile(r"\s*[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?\s*")
_TRUE_TEXT = frozenset(("true", "t", "yes", "y", "1"))
_FALSE_TEXT = frozenset(("false", "f", "no", "n", "0"))
_EPOCH = datetime(1970, 1, 1)
#: date_trunc units, as DuckDB names them (plural forms accepted too)
TRUNC_UNITS = ("second", "minute", "hour", "day", "week", "month", "quarter", "year")


def _float_text(v: float) -> str:
    return repr(v)  # DuckDB prints doubles shortest-round-trip too: 0.1, 1e+16, -0.0, inf


def cast(v: Any, to: str) -> Any:
    """``TRY_CAST(v AS to)`` (see module docstring)."""
    if v is None:
        return None
    t = type(v)
    if to == "VARCHAR":
        if t is str:
            return v
        if t is bool:
            return "true" if v else "false"
        if t is int:
            return str(v)
        if t is float:
            return _float_text(v)
        return None
    if to == "BIGINT":
        if t is bool:
            return int(v)
        if t is int:
            return v if _INT64_MIN <= v <= _INT64_MAX else None
        if t is float:
            if not math.isfinite(v):
                return None
            r = round(v)  # DuckDB: nearbyint, ties to even - Python's round()
            return r if _INT64_MIN <= r <= _INT64_MAX else None
        if t is str:
            if not _DECIMAL_TEXT.fullmatch(v):
                return None
            try:
                d = Decimal(v.strip())
                # "1e999999999" would take forever to quantize: beyond int64 anyway; tiny
                # magnitudes round to 0
                if d.adjusted() > 40:
                    return None
                if d.adjusted() < -40:
                    return 0
                r = int(d.quantize(Decimal(1), rounding=ROUND_HALF_UP))
            except (InvalidOperation, ValueError):
                return None
            return r if _INT64_MIN <= r <= _INT64_MAX else None
        return None
    if to == "DOUBLE":
        if t is float:
            return v
        if t is bool or t is int:
            try:
                return float(v)
            except OverflowError:
                return None
        if t is str:
            try:
                return float(v)
            except ValueError:
                return None
        return None
    if to == "BOOLEAN":
        if t is bool:
            return v
        if t is int or t is float:
            return v != 0
        if t is str:
            low = v.lower()
            if low in _TRUE_TEXT:
                return True
            if low in _FALSE_TEXT:
                return False
        return None
    if to == "TIMESTAMP":
        if t is str:
            dt = parse_timestamp(v)
            return None if dt is None else timestamp_text(dt)
        if t is int or t is float:
            return from_unixtime(v)
        return None
    raise ValueError(f"unknown cast type {to!r}")  # the parser admits only the five


def timestamp_text(dt: datetime) -> str:
    """A naive UTC datetime as TIMESTAMP text (see module docstring)."""
    text = dt.isoformat(" ", "seconds")  # four-digit years, also before 1000
    if dt.microsecond:
        text += f".{dt.microsecond:06d}".rstrip("0")
    return text


def parse_timestamp(text: str) -> datetime | None:
    """ISO 8601 text (``2024-05-01``, ``2024-05-01 10:00:00.5``, ``…T…Z``, ``…+02:00``) to
    a naive UTC datetime; None when it is not one."""
    try:
        dt = datetime.fromisoformat(text.strip())
    except ValueError:
        return None
    if dt.tzinfo is not None:
        try:
            dt = dt.astimezone(UTC).replace(tzinfo=None)
        except OverflowError:
            return None
    return dt


def _from_seconds(v: Any) -> datetime | None:
    if type(v) is not int and type(v) is not float:
        return None
    if type(v) is float and not math.isfinite(v):
        return None
    us = round(v * 1_000_000) if type(v) is float else v * 1_000_000
    try:
        return _EPOCH + timedelta(microseconds=us)
    except OverflowError:
        return None  # beyond years 1-9999


def from_unixtime(v: Any) -> str | None:
    """Epoch seconds (int or float, microsecond precision) to TIMESTAMP text; NULL for
    anything else or beyond years 1-9999."""
    dt = _from_seconds(v)
    return None if dt is None else timestamp_text(dt)


def truncate(dt: datetime, unit: str) -> datetime:
    """``dt`` rounded down to the start of its ``unit`` (weeks start on Monday, ISO)."""
    if unit == "second":
        return dt.replace(microsecond=0)
    if unit == "minute":
        return dt.replace(second=0, microsecond=0)
    if unit == "hour":
        return dt.replace(minute=0, second=0, microsecond=0)
    day = dt.replace(hour=0, minute=0, second=0, microsecond=0)
    if unit == "day":
        return day
    if unit == "week":
        return day - timedelta(days=day.weekday())
    if unit == "month":
        return day.replace(day=1)
    if unit == "quarter":
        return day.replace(month=(day.month - 1) // 3 * 3 + 1, day=1)
    return day.replace(month=1, day=1)


def trunc_unit(text: str) -> str | None:
    """The canonical date_trunc unit of ``text`` (``'Minutes'`` -> minute), or None."""
    u = text.strip().lower()
    u = u[:-1] if u.endswith("s") and u[:-1] in TRUNC_UNITS else u
    return u if u in TRUNC_UNITS else None


def date_trunc(unit: str, v: Any) -> str | None:
    """``v`` (epoch seconds or TIMESTAMP / ISO text) truncated to ``unit``, as TIMESTAMP text;
    NULL for anything else."""
    dt = parse_timestamp(v) if type(v) is str else _from_seconds(v)
    if dt is None:
        return None
    try:
        return timestamp_text(truncate(dt, unit))
    except (OverflowError, ValueError):
        return None  # a week start before year 1
