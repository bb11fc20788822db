"""The cluster's job table, replicated on every agent.

Contract: a job is submitted to the root of the well-known *jobs tree* (every agent is a member),
which gives each change a version and multicasts it down the tree; every agent applies changes
with :meth:`JobTable.apply`, which is idempotent and ignores anything older than what it holds,
so duplicated or reordered multicasts converge to the same table. A newcomer (or a new jobs-tree
root) catches up by merging a peer's :meth:`snapshot`. No agent is a coordinator: any agent can
take over the jobs-tree root and already has the table.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

RUNNING = "running"
STOPPED = "stopped"


@dataclass(frozen=True)
class JobEntry:
    """One job as the cluster knows it: its spec (a validated JSON dict), state and version."""

    name: str
    spec: dict[str, Any]
    state: str
    version: int

    def to_wire(self) -> dict[str, Any]:
        return {"name": self.name, "spec": self.spec, "state": self.state, "version": self.version}

    @classmethod
    def from_wire(cls, obj: Any) -> JobEntry:
        if not isinstance(obj, dict):
            raise ValueError("job entry must be a map")
        name, spec, state, version = (obj.get(k) for k in ("name", "spec", "state", "version"))
        if not isinstance(name, str) or not isinstance(spec, dict):
            raise ValueError("job entry needs a name and a spec map")
        if state not in (RUNNING, STOPPED) or not isinstance(version, int) or version < 1:
            raise ValueError(f"job entry {name!r}: bad state or version")
        return cls(name, spec, state, version)


class JobTable:
    """Name → :class:`JobEntry`, newest version wins (see module contract)."""

    def __init__(self) -> None:
        self._entries: dict[str, JobEntry] = {}

    def __contains__(self, name: str) -> bool:
        return name in self._entries

    def get(self, name: str) -> JobEntry | None:
        return self._entries.get(name)

    def entries(self) -> list[JobEntry]:
        return sorted(self._entries.values(), key=lambda e: e.name)

    def running(self) -> list[JobEntry]:
        return [e for e in self.entries() if e.state == RUNNING]

    def next_version(self, name: str) -> int:
        entry = self._entries.get(name)
        return 1 if entry is None else entry.version + 1

    def apply(self, entry: JobEntry) -> bool:
        """Adopt ``entry`` if it is newer than ours; returns whether anything changed."""
        current = self._entries.get(entry.name)
        if current is not None and current.version >= entry.version:
            return False
        self._entries[entry.name] = entry
        return True

    def snapshot(self) -> list[dict[str, Any]]:
        return [e.to_wire() for e in self.entries()]

    def merge(self, items: Any) -> list[JobEntry]:
        """Apply a peer's snapshot; returns the entries that changed. Malformed items raise
        ``ValueError`` before anything is applied."""
        if not isinstance(items, list):
            raise ValueError("job table snapshot must be a list")
        parsed = [JobEntry.from_wire(i) for i in items]
        return [e for e in parsed if self.apply(e)]
