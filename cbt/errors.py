"""Exceptions raised by the cbt package.

Every failure that comes from untrusted or stored bytes (a snapshot received from another
machine, a spill file read back from disk) is reported as one of these, with a message naming
what is wrong, so callers never silently get garbage.
"""

from __future__ import annotations


class CBTError(Exception):
    """Base class of all cbt errors."""


class SnapshotError(CBTError, ValueError):
    """Snapshot bytes are corrupt, truncated, of an unsupported version or otherwise unusable."""


class SpillError(CBTError, OSError):
    """A spill file is missing, truncated or fails its checksum."""
