"""The syslog kernel (RFC 3164 and RFC 5424).

Contract: rows equal :class:`~agent.ingest.formats.SyslogParser`'s, with the columns of
:data:`SCHEMA` (``sd`` as ``map<string, map<string, string>>``). Today every syslog line is
parsed by the row parser and converted (``KernelResult.fallback`` holds every line): syslog
files are small next to access logs, and the vectorized kernel is left for a later change
(docs/ingest.md says so, with the measured rate).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from agent.ingest.columnar.base import KernelResult, project
from agent.ingest.columnar.lines import Lines

SD_TYPE = pa.map_(pa.string(), pa.map_(pa.string(), pa.string()))
SCHEMA = pa.schema(
    [
        ("ts", pa.float64()),
        ("source_ip", pa.string()),
        ("body", pa.string()),
        ("syslog_version", pa.int64()),
        ("host", pa.string()),
        ("app", pa.string()),
        ("procid", pa.string()),
        ("msgid", pa.string()),
        ("sd", SD_TYPE),
        ("facility", pa.int64()),
        ("facility_name", pa.string()),
        ("severity", pa.int64()),
        ("priority", pa.int64()),
    ]
)


def parse_syslog(lines: Lines, want: frozenset[str] | None) -> KernelResult:
    """Every line to the row parser (see module docstring)."""
    n = len(lines)
    empty = project(SCHEMA, want).empty_table()
    return KernelResult(empty, np.empty(0, np.int64), np.arange(n, dtype=np.int64), 0)
