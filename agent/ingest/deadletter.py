"""The dead-letter file of one input: bounded samples of the lines its parser rejected.

Contract: :class:`DeadLetterFile` appends one JSON object per sampled line to
``<data_dir>/deadletter/<input>.jsonl``::

    {"time": "2026-11-21T20:11:10.123Z", "input": "web", "reason": "bad_access_line",
     "message": "not a combined/common access-log line: ...", "line_no": 17, "offset": 2048,
     "line": "the raw line, JSON-escaped", "truncated": false}

(``offset``/``message`` are present when the input knows them; undecodable bytes appear as
``\\xNN`` escapes.) It is bounded two ways: at most ``per_reason_per_hour`` samples per reason
per clock hour (the rest are only counted: ``suppressed``), and at most ``max_bytes`` per file:
a full file is renamed to ``<input>.jsonl.1`` (replacing the previous one) and a new one is
started, so the dead letters of one input never take more than ``2 * max_bytes``. A line is
cut to ``max_line_chars`` (``truncated: true``). The samples are raw log lines (they may hold
user data): the directory is created ``0700`` and the files ``0600`` from the start
(:mod:`agent.private_files`; a rotated file keeps its mode). Write errors are counted
(``write_errors``) and never propagate: a full disk costs samples, never the input. Counts by
reason are the :class:`~agent.ingest.records.Quarantine`'s job; this file only holds samples.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from agent.private_files import open_private, private_dir

DEFAULT_PER_REASON_PER_HOUR = 100
DEFAULT_MAX_BYTES = 16 << 20
DEFAULT_MAX_LINE_CHARS = 64 << 10


def _iso(ts: float) -> str:
    t = time.gmtime(ts)
    return time.strftime("%Y-%m-%dT%H:%M:%S", t) + f".{int(ts % 1 * 1000):03d}Z"


class DeadLetterFile:
    """Bounded, rotated samples of rejected lines of one input (see module docstring)."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        input_name: str,
        *,
        per_reason_per_hour: int = DEFAULT_PER_REASON_PER_HOUR,
        max_bytes: int = DEFAULT_MAX_BYTES,
        max_line_chars: int = DEFAULT_MAX_LINE_CHARS,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if per_reason_per_hour < 0 or max_bytes < 1 or max_line_chars < 1:
            raise ValueError("dead-letter bounds must be positive")
        self.path = Path(path)
        self.input_name = input_name
        self.per_reason_per_hour = per_reason_per_hour
        self.max_bytes = max_bytes
        self.max_line_chars = max_line_chars
        self.clock = clock
        self._hour: int | None = None
        self._this_hour: Counter[str] = Counter()
        self._dir_ready = False
        self.counters = {"written": 0, "suppressed": 0, "rotations": 0, "write_errors": 0}

    @classmethod
    def for_input(
        cls, data_dir: str | os.PathLike[str], input_name: str, **kw: Any
    ) -> DeadLetterFile:
        """The dead-letter file of ``input_name`` under ``data_dir``."""
        return cls(Path(data_dir) / "deadletter" / f"{input_name}.jsonl", input_name, **kw)

    def write(
        self,
        reason: str,
        line: bytes | str,
        *,
        line_no: int | None = None,
        offset: int | None = None,
        message: str | None = None,
        fields: dict[str, Any] | None = None,
    ) -> bool:
        """Append one sample unless this hour's quota for ``reason`` is used up; True if
        written. ``fields`` (JSON-able) are added to the entry before ``line`` (a late record's
        job, epoch, origin, event time: agent/runtime/epochs/late.py). Never raises."""
        now = self.clock()
        hour = int(now // 3600)
        if hour != self._hour:
            self._hour, self._this_hour = hour, Counter()
        if self._this_hour[reason] >= self.per_reason_per_hour:
            self.counters["suppressed"] += 1
            return False
        self._this_hour[reason] += 1
        if isinstance(line, bytes | bytearray | memoryview):
            text = bytes(line[: self.max_line_chars * 4]).decode("utf-8", "backslashreplace")
            truncated = len(line) > self.max_line_chars * 4 or len(text) > self.max_line_chars
        else:
            text, truncated = line, len(line) > self.max_line_chars
        entry: dict[str, Any] = {"time": _iso(now), "input": self.input_name, "reason": reason}
        if message is not None:
            entry["message"] = message
        if line_no is not None:
            entry["line_no"] = line_no
        if offset is not None:
            entry["offset"] = offset
        if fields:
            entry.update(fields)
        entry["line"] = text[: self.max_line_chars]
        entry["truncated"] = truncated
        data = orjson.dumps(entry) + b"\n"
        try:
            if not self._dir_ready:
                private_dir(self.path.parent)
                self._dir_ready = True
            try:
                size = self.path.stat().st_size
            except FileNotFoundError:
                size = 0
            if size and size + len(data) > self.max_bytes:
                os.replace(self.path, self.path.with_name(self.path.name + ".1"))
                self.counters["rotations"] += 1
            # raw log lines: the file is created 0600 (and an older, wider one narrowed)
            with os.fdopen(open_private(self.path), "ab") as f:
                f.write(data)
        except OSError:
            self.counters["write_errors"] += 1
            return False
        self.counters["written"] += 1
        return True

    def stats(self) -> dict[str, Any]:
        """Counters plus the file's path."""
        return {"path": str(self.path), **self.counters}
