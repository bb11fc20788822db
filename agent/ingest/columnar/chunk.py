"""What a chunk parser returns: :class:`ParsedChunk` (the shared interface of issue 15).

Contract: ``table`` has one row per accepted line, in line order; ``line_index`` (int32) is
each row's line within the chunk; ``rejects`` are ``(line index, reason, message, line)`` per
bad line (the row parser's reasons and messages); ``lines`` counts every line of the chunk
(accepted + rejected + blank-skipped); ``repairs`` the lines whose invalid UTF-8 was replaced;
``aggregated``: set by a parse helper that pre-aggregated the rows
(:class:`~agent.ingest.columnar.aggregate.AggregatedChunk`; ``table`` and ``line_index`` are
then None: the rows stayed in the helper);
``longest``: the longest line's length (newline excluded) where a parse helper measured it
(-1: not measured), so the tail need not find the chunk's newlines again; ``digest``: the
xxh3-64 of a range a helper read that the tail did not (-1: none; ``handed.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pyarrow as pa


@dataclass(slots=True)
class ParsedChunk:
    """One chunk of whole lines parsed into an Arrow table (see module docstring)."""

    table: pa.Table | None
    line_index: pa.Array | None
    rejects: list[tuple[int, str, str, bytes]]
    lines: int
    repairs: int
    aggregated: Any = None
    longest: int = -1
    digest: int = -1
