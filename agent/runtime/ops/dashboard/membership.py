"""The dashboard's picture of a job's origins that stopped contributing: absent, retired, left.

Contract: :func:`local_membership` reads a master's ``Recovery.membership_status()`` into a
bounded, JSON-ready block for this agent's summary (at most :data:`MAX_ORIGINS` origins per
state, ids as 40 hex digits, reasons cut to :data:`MAX_WHY` characters); None where the runtime
keeps no membership (not a master, or a runtime without the model). :func:`check_membership`
rebuilds a *peer's* block field by field within the same bounds (raising the summary's
:class:`~agent.runtime.ops.dashboard.summary.SummaryError` through the ``need`` callback naming the
field). :func:`merge_membership` joins the blocks of a job's masters (one per tree: the same
origin is usually named by each) into the job's section of the picture: each origin once per
state, the earliest ``since``/``at`` and the latest ``retire_at`` kept, sorted by origin.
Pure functions: no I/O, no clock.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

MAX_ORIGINS = 32  # origins per state in one master's block
MAX_WHY = 120  # characters of a reason shown
STATES = ("absent", "retired", "left")
#: the fields of each state's entries, and whether each is a number (else text)
FIELDS: dict[str, dict[str, str]] = {
    "absent": {"since": "num", "last_epoch": "int", "why": "str", "retire_at": "num"},
    "retired": {"at": "num", "from_epoch": "int", "why": "str"},
    "left": {"from_epoch": "int"},
}


def _hex40(origin: Any) -> str | None:
    """An origin id as 40 lower-case hex digits (ints, or hex text without leading zeros)."""
    if isinstance(origin, int) and not isinstance(origin, bool) and 0 <= origin < 1 << 160:
        return f"{origin:040x}"
    if isinstance(origin, str) and 1 <= len(origin) <= 40:
        text = origin.lower()
        if all(c in "0123456789abcdef" for c in text):
            return text.rjust(40, "0")
    return None


def _value(kind: str, value: Any) -> Any:
    """``value`` if it is a well-formed field of ``kind``, else None."""
    if value is None or isinstance(value, bool):
        return None
    if kind == "int":
        return value if isinstance(value, int) and -(2**63) <= value < 2**63 else None
    if kind == "num":
        ok = isinstance(value, int | float) and math.isfinite(value)
        return float(value) if ok else None
    return value[:MAX_WHY] if isinstance(value, str) else None


def _entries(state: str, items: Any) -> list[dict[str, Any]]:
    out = []
    for item in items if isinstance(items, list) else ():
        origin = _hex40(item.get("origin")) if isinstance(item, dict) else None
        if origin is None:
            continue
        fields = FIELDS[state]
        out.append({"origin": origin, **{k: _value(t, item.get(k)) for k, t in fields.items()}})
        if len(out) == MAX_ORIGINS:
            break
    return out


def local_membership(runtime: Any) -> dict[str, Any] | None:
    """A master's block (module contract); None where there is nothing to read."""
    read = getattr(runtime, "membership_status", None)
    if read is None:  # a runtime without the membership model
        return None
    status = read()
    if not isinstance(status, dict):
        return None
    return {state: _entries(state, status.get(state)) for state in STATES}


def check_membership(
    where: str, doc: Any, need: Callable[[bool, str], None]
) -> dict[str, Any] | None:
    """A peer's block rebuilt within the bounds; ``need(ok, what)`` raises for a bad field."""
    if doc is None:
        return None
    need(isinstance(doc, dict) and len(doc) <= len(STATES), f"{where}: not a membership block")
    out = {}
    for state in STATES:
        items = doc.get(state, [])
        need(
            isinstance(items, list) and len(items) <= MAX_ORIGINS,
            f"{where}.{state}: not a list of ≤ {MAX_ORIGINS}",
        )
        for item in items:
            need(isinstance(item, dict) and len(item) <= 8, f"{where}.{state}[]: not an object")
            need(_hex40(item.get("origin")) == item.get("origin"), f"{where}.{state}: not an id")
            for key, kind in FIELDS[state].items():
                value = item.get(key)
                need(value is None or _value(kind, value) == value, f"{where}.{state}.{key}")
        out[state] = [
            {"origin": i["origin"], **{k: i.get(k) for k in FIELDS[state]}} for i in items
        ]
    return out


def merge_membership(blocks: list[dict[str, Any] | None]) -> dict[str, Any]:
    """The job's section: each state's origins over its masters' blocks (module contract)."""
    merged: dict[str, dict[str, dict[str, Any]]] = {state: {} for state in STATES}
    for block in blocks:
        for state in STATES:
            for entry in (block or {}).get(state) or ():
                seen = merged[state].get(entry["origin"])
                merged[state][entry["origin"]] = entry if seen is None else _join(seen, entry)
    # an origin retired by one master and still absent at another (its retirement reaching
    # the masters one by one) is shown as retired: the retirement is what the operator asked
    for origin in merged["retired"]:
        merged["absent"].pop(origin, None)
    return {state: [merged[state][o] for o in sorted(merged[state])] for state in STATES}


def _join(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    out = dict(a)
    for key in ("since", "at"):
        if key in a:
            values = [v for v in (a.get(key), b.get(key)) if v is not None]
            out[key] = min(values) if values else None
    for key in ("retire_at", "last_epoch"):
        if key in a:
            values = [v for v in (a.get(key), b.get(key)) if v is not None]
            out[key] = max(values) if values else None
    for key in ("why", "from_epoch"):
        if key in a and out.get(key) is None:
            out[key] = b.get(key)
    return out
