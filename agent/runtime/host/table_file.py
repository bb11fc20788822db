"""The job table on disk, so a restarted agent runs its jobs before it reads a line.

Contract: :meth:`JobTableFile.save` writes the table's entries and tombstones (their wire
form, the same JSON the anti-entropy exchange sends) to ``<data_dir>/jobs.json``, atomically
(temporary file, fsync, rename) and ``0600``; :meth:`JobTableFile.load` reads them back. A
missing file is an empty table; an unreadable or malformed one is logged at WARNING and read
as empty (the agent then learns the table from its peers, as a new agent does). Entries read
back are merged like a peer's snapshot: newer versions from the cluster still win, and the
tombstones keep stopped jobs stopped.

Why: after ``kill -9`` and a restart, an agent that waited for the jobs-tree root to tell it
its jobs re-read its log files with only the jobs it had learnt so far (up to a resync period
later for the others, which then counted those lines as missed). Loaded before the inputs
open, every job is installed when the first line is read again. Bound: the table itself
(``MAX_TOMBSTONES`` tombstones, specs of bounded size); written only when it changed.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import orjson

from agent.runtime.recovery.offsets import write_atomically

log = logging.getLogger(__name__)

FILE_NAME = "jobs.json"


class JobTableFile:
    """``jobs.json`` in one agent's data directory (see the module contract)."""

    def __init__(self, data_dir: str | Path) -> None:
        self.path = Path(data_dir) / FILE_NAME
        self._written: bytes | None = None

    def load(self) -> tuple[list[Any], list[Any]]:
        """(entries, tombstones) in wire form; empty lists if there is no usable file."""
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return [], []
        except OSError as exc:
            log.warning("job table file %s unreadable: %r; learning the table from peers",
                        self.path, exc)  # fmt: skip
            return [], []
        try:
            doc = orjson.loads(raw)
            jobs, removed = doc["jobs"], doc["removed"]
            if not isinstance(jobs, list) or not isinstance(removed, list):
                raise ValueError("jobs and removed must be lists")
        except (ValueError, KeyError, TypeError) as exc:
            log.warning("job table file %s malformed: %r; learning the table from peers",
                        self.path, exc)  # fmt: skip
            return [], []
        self._written = raw
        return jobs, removed

    def save(self, jobs: list[Any], removed: list[Any]) -> bool:
        """Write the table if it differs from what this file holds; True if written.
        Raises ``OSError`` (the caller logs it and tries again on the next change)."""
        data = orjson.dumps({"jobs": jobs, "removed": removed})
        if data == self._written:
            return False
        write_atomically(self.path, data)
        self._written = data
        return True
