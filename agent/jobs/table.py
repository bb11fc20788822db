"""The cluster's job table, replicated on every agent, with stopped jobs garbage-collected.

Contract: a job is submitted to the root of the well-known *jobs tree* (every agent is a member),
which gives each change a version and multicasts it down the tree; every agent applies changes
with :meth:`JobTable.apply`, which is idempotent and ignores anything older than what it holds,
so duplicated or reordered multicasts converge to the same table. A newcomer (or a new jobs-tree
root) catches up by merging a peer's :meth:`snapshot` and :meth:`removed`. No agent is a
coordinator: any agent can take over the jobs-tree root and already has the table.

**Garbage collection.** The jobs-tree root stamps a stop with its wall clock (``stopped_at``);
an entry that arrives stopped without a stamp is stamped with the receiver's clock. Every agent
runs :meth:`JobTable.collect` and drops a stopped entry ``stopped_ttl`` seconds after its stamp
(default 600 s, ``RuntimeTunables.stopped_job_ttl``): since the stamp travels with the entry,
all agents drop it at the same time, give or take their clock skew. A dropped entry leaves a
*tombstone* (name, version, ``stopped_at``) for ``tombstone_seconds`` more (default 1 day; at
most ``MAX_TOMBSTONES``, oldest dropped first), which is what keeps anti-entropy from
resurrecting the job: :meth:`apply` ignores every entry of that name whose version is not newer
than the tombstone's (a stale running entry from an agent that missed the stop, a stopped one
from an agent that has not collected yet), tombstones travel with the table on resync
(:meth:`removed` / :meth:`merge_removed`), and :meth:`next_version` continues after the
tombstone, so a new job of the same name submitted afterwards gets a version every agent
accepts. A stopped entry that arrives already past its TTL is not stored: it becomes a
tombstone at once (and still stops the job where it runs).
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

RUNNING = "running"
STOPPED = "stopped"
#: tombstones kept at most (about 100 bytes each); the oldest stop is dropped first
MAX_TOMBSTONES = 10_000
DEFAULT_STOPPED_TTL = 600.0
DEFAULT_TOMBSTONE_SECONDS = 86_400.0


@dataclass(frozen=True)
class JobEntry:
    """One job as the cluster knows it: its spec (a validated JSON dict), state and version;
    ``stopped_at``: when the jobs-tree root stopped it (wall clock; None while running)."""

    name: str
    spec: dict[str, Any]
    state: str
    version: int
    stopped_at: float | None = None

    def to_wire(self) -> dict[str, Any]:
        out = {"name": self.name, "spec": self.spec, "state": self.state, "version": self.version}
        if self.stopped_at is not None:
            out["stopped_at"] = self.stopped_at
        return out

    @classmethod
    def from_wire(cls, obj: Any) -> JobEntry:
        if not isinstance(obj, dict):
            raise ValueError("job entry must be a map")
        name, spec, state, version = (obj.get(k) for k in ("name", "spec", "state", "version"))
        if not isinstance(name, str) or not isinstance(spec, dict):
            raise ValueError("job entry needs a name and a spec map")
        if state not in (RUNNING, STOPPED) or not _is_int(version) or version < 1:
            raise ValueError(f"job entry {name!r}: bad state or version")
        stopped_at = obj.get("stopped_at")
        if stopped_at is not None and not _is_time(stopped_at):
            raise ValueError(f"job entry {name!r}: bad stopped_at {stopped_at!r}")
        return cls(name, spec, state, version, None if stopped_at is None else float(stopped_at))


@dataclass(frozen=True)
class Tombstone:
    """What remains of a collected job: its last version and when it was stopped."""

    name: str
    version: int
    stopped_at: float

    def to_wire(self) -> dict[str, Any]:
        return {"name": self.name, "version": self.version, "stopped_at": self.stopped_at}

    @classmethod
    def from_wire(cls, obj: Any) -> Tombstone:
        if not isinstance(obj, dict):
            raise ValueError("tombstone must be a map")
        name, version, stopped_at = (obj.get(k) for k in ("name", "version", "stopped_at"))
        if not isinstance(name, str) or not _is_int(version) or version < 1:
            raise ValueError("tombstone needs a name and a version")
        if not _is_time(stopped_at):
            raise ValueError(f"tombstone {name!r}: bad stopped_at {stopped_at!r}")
        return cls(name, version, float(stopped_at))


class JobTable:
    """Name → :class:`JobEntry`, newest version wins, stopped jobs collected (see module
    contract). ``clock`` is the wall clock (tests pass their own)."""

    def __init__(
        self,
        *,
        stopped_ttl: float = DEFAULT_STOPPED_TTL,
        tombstone_seconds: float = DEFAULT_TOMBSTONE_SECONDS,
        max_tombstones: int = MAX_TOMBSTONES,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._entries: dict[str, JobEntry] = {}
        self._removed: dict[str, Tombstone] = {}
        self.stopped_ttl = stopped_ttl
        self.tombstone_seconds = tombstone_seconds
        self.max_tombstones = max_tombstones
        self._clock = clock
        self.collected = 0  # stopped entries dropped by this agent (a status counter)
        #: grows with every change of the entries or tombstones (a persister compares it)
        self.revision = 0

    def __contains__(self, name: str) -> bool:
        return name in self._entries

    def get(self, name: str) -> JobEntry | None:
        return self._entries.get(name)

    def entries(self) -> list[JobEntry]:
        return sorted(self._entries.values(), key=lambda e: e.name)

    def running(self) -> list[JobEntry]:
        return [e for e in self.entries() if e.state == RUNNING]

    def tombstone(self, name: str) -> Tombstone | None:
        return self._removed.get(name)

    def next_version(self, name: str) -> int:
        """The version of the next change of ``name``: after its entry, or its tombstone."""
        entry, tomb = self._entries.get(name), self._removed.get(name)
        return 1 + max(entry.version if entry else 0, tomb.version if tomb else 0)

    def apply(self, entry: JobEntry) -> bool:
        """Adopt ``entry`` if it is newer than ours (and than the name's tombstone); returns
        whether anything changed. A stopped entry already past its TTL becomes a tombstone."""
        tomb = self._removed.get(entry.name)
        if tomb is not None and entry.version <= tomb.version:
            return False
        current = self._entries.get(entry.name)
        if current is not None and current.version >= entry.version:
            return False
        if entry.state == STOPPED and entry.stopped_at is None:
            entry = dataclasses.replace(entry, stopped_at=self._clock())
        self.revision += 1
        if entry.state == STOPPED and self._expired(entry, self._clock()):
            self._entries.pop(entry.name, None)
            self._bury(Tombstone(entry.name, entry.version, entry.stopped_at or 0.0))
            return True
        if tomb is not None:  # a newer job of a collected name: the tombstone has done its work
            del self._removed[entry.name]
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

    # ---- garbage collection ----------------------------------------------------------------
    def collect(self, now: float | None = None) -> list[JobEntry]:
        """Drop stopped entries past their TTL (tombstones stay) and tombstones past theirs;
        returns the entries dropped."""
        now = self._clock() if now is None else now
        dropped = [e for e in self._entries.values() if self._expired(e, now)]
        for entry in dropped:
            del self._entries[entry.name]
            self._bury(Tombstone(entry.name, entry.version, entry.stopped_at or 0.0))
        self.collected += len(dropped)
        horizon = now - self.stopped_ttl - self.tombstone_seconds
        expired = [n for n, t in self._removed.items() if t.stopped_at <= horizon]
        for name in expired:
            del self._removed[name]
        if dropped or expired:
            self.revision += 1
        return dropped

    def removed(self) -> list[dict[str, Any]]:
        """The tombstones, in wire form (sent with the snapshot on resync)."""
        return [t.to_wire() for t in sorted(self._removed.values(), key=lambda t: t.name)]

    def merge_removed(self, items: Any) -> list[JobEntry]:
        """Apply a peer's tombstones; returns, as stopped entries, the jobs this removed (a
        job still running here whose stop this agent missed must stop). Malformed items
        raise ``ValueError`` before anything is applied."""
        if not isinstance(items, list):
            raise ValueError("tombstones must be a list")
        parsed = [Tombstone.from_wire(i) for i in items]
        now = self._clock()
        stopped = []
        for tomb in parsed:
            if tomb.stopped_at <= now - self.stopped_ttl - self.tombstone_seconds:
                continue  # expired everywhere: remembering it would only grow the table
            known = self._removed.get(tomb.name)
            if known is not None and known.version >= tomb.version:
                continue
            current = self._entries.get(tomb.name)
            if current is not None and current.version > tomb.version:
                continue  # a newer job of that name
            if current is not None:
                self.revision += 1
                del self._entries[tomb.name]
                stopped.append(
                    JobEntry(tomb.name, current.spec, STOPPED, tomb.version, tomb.stopped_at)
                )
            self._bury(tomb)
        return stopped

    def stats(self) -> dict[str, int]:
        stopped = sum(1 for e in self._entries.values() if e.state == STOPPED)
        return {
            "entries": len(self._entries),
            "stopped": stopped,
            "tombstones": len(self._removed),
            "collected": self.collected,
        }

    def _expired(self, entry: JobEntry, now: float) -> bool:
        return (
            entry.state == STOPPED
            and entry.stopped_at is not None
            and entry.stopped_at + self.stopped_ttl <= now
        )

    def _bury(self, tomb: Tombstone) -> None:
        known = self._removed.get(tomb.name)
        if known is not None and known.version >= tomb.version:
            return
        self._removed[tomb.name] = tomb
        self.revision += 1
        if len(self._removed) > self.max_tombstones:
            oldest = min(self._removed.values(), key=lambda t: (t.stopped_at, t.name))
            del self._removed[oldest.name]


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_time(v: Any) -> bool:
    return not isinstance(v, bool) and isinstance(v, int | float) and math.isfinite(v) and v >= 0
