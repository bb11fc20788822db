"""The compiled status/size scan of access-log lines, when it is built.

Contract: :func:`scan` returns, for a chunk's :class:`~agent.ingest.columnar.lines.Lines`,
a :class:`Scan` of per-line arrays from one C pass over the chunk's bytes
(``access_scan_c.c``: the lines it decides, their ``ts``, status, size and repair flag, exactly
as :mod:`~agent.ingest.columnar.access_status`'s numpy kernel decides them), or None when the
extension is not built (no C compiler at install time), is switched off by the environment
variable ``ELF_NO_NATIVE=1``, or by :func:`set_enabled` (tests and benchmarks compare both
kernels in one process). The caller then runs the numpy kernel: same answers, slower.

The scan reads the chunk in place (buffer protocol, no copy), with the GIL released; it never
reads outside a line, whatever its bytes (docs/ingest.md).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from types import ModuleType

import numpy as np

from agent.ingest.columnar.lines import Lines
from agent.ingest.columnar.native import optional_extension

COMPILED: ModuleType | None = optional_extension("access_scan_c")  # None: the numpy kernel

_OK, _NULL_STATUS, _REPAIRED = 1, 2, 4
_enabled = COMPILED is not None and os.environ.get("ELF_NO_NATIVE", "") in ("", "0")


@dataclass(slots=True)
class Scan:
    """Per line of the chunk: ``ok`` (decided by the scan; the others are for the exact
    path), and, meaningful where ``ok``: ``ts``, ``status`` (0 where ``null_status``),
    ``size`` and ``repaired`` (an escaped field the row parser decodes to invalid UTF-8)."""

    ok: np.ndarray
    ts: np.ndarray
    status: np.ndarray
    null_status: np.ndarray
    size: np.ndarray
    repaired: np.ndarray


def available() -> bool:
    """Whether :func:`scan` runs the compiled kernel."""
    return _enabled


def set_enabled(enabled: bool) -> bool:
    """Switch the compiled kernel on (when built) or off; returns the previous setting."""
    global _enabled
    before = _enabled
    _enabled = enabled and COMPILED is not None
    return before


def scan(lines: Lines) -> Scan | None:
    """The compiled scan of ``lines`` (see module docstring), or None when it is off."""
    if not _enabled or COMPILED is None:
        return None
    n = len(lines)
    ts = np.empty(n, np.float64)
    status = np.empty(n, np.int64)
    size = np.empty(n, np.int64)
    flags = np.empty(n, np.uint8)
    starts = np.ascontiguousarray(lines.starts, np.int64)
    ends = np.ascontiguousarray(lines.ends, np.int64)
    COMPILED.scan(lines.chunk, starts, ends, ts, status, size, flags)
    ok = (flags & _OK).view(bool)
    if lines.repaired is not None:  # invalid UTF-8 in the line: the row parser's to repair
        ok &= ~lines.repaired
    return Scan(ok, ts, status, (flags & _NULL_STATUS) != 0, size, (flags & _REPAIRED) != 0)
