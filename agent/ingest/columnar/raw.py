"""The raw-text kernel: each line is the ``body``.

Contract: as :class:`~agent.ingest.formats.RawParser`: columns ``ts`` (the arrival time: one
``time.time()`` read per chunk, where the row parser reads the clock per line — the same
instant up to the chunk's parse time), ``source_ip`` and ``priority`` (null), ``body`` (the
line, decoded as the row path decodes it). No line is refused, so nothing falls back.
"""

from __future__ import annotations

import time

import numpy as np
import pyarrow as pa

from agent.ingest.columnar.base import KernelResult, project, select
from agent.ingest.columnar.lines import Lines

SCHEMA = pa.schema(
    [
        ("ts", pa.float64()),
        ("source_ip", pa.string()),
        ("priority", pa.int64()),
        ("body", pa.string()),
    ]
)


def parse_raw(lines: Lines, want: frozenset[str] | None) -> KernelResult:
    """Every line as a row (see module docstring)."""
    n = len(lines)
    now = time.time()
    columns = {
        "ts": pa.array(np.full(n, now)),
        "source_ip": pa.nulls(n, pa.string()),
        "priority": pa.nulls(n, pa.int64()),
        "body": lines.text,
    }
    repaired = 0 if lines.repaired is None else int(lines.repaired.sum())
    return KernelResult(
        select(columns, project(SCHEMA, want)),
        np.arange(n, dtype=np.int64),
        np.empty(0, np.int64),
        repaired,
    )
