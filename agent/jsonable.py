"""One conversion of runtime values into JSON-ready data, for result rows and API bodies.

Contract: :func:`jsonable` returns a copy made of dicts (text keys), lists, str, int, float,
bool and None: tuples become lists, sets become lists sorted by ``repr`` (so equal sets print
alike everywhere), bytes become UTF-8 text (invalid bytes replaced). With ``hex_ids`` integers
outside the signed 64-bit range — node and tree ids — become 40-digit hex, as status pages show
ids; result rows keep them as numbers.
"""

from __future__ import annotations

from typing import Any

_INT64 = 1 << 63


def jsonable(value: Any, *, hex_ids: bool = False) -> Any:
    if isinstance(value, dict):
        return {
            str(jsonable(k, hex_ids=hex_ids)): jsonable(v, hex_ids=hex_ids)
            for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [jsonable(v, hex_ids=hex_ids) for v in value]
    if isinstance(value, set | frozenset):
        return sorted((jsonable(v, hex_ids=hex_ids) for v in value), key=repr)
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if hex_ids and isinstance(value, int) and not isinstance(value, bool) and abs(value) >= _INT64:
        return f"{value:040x}"
    return value
