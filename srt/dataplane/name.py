"""Snapshot names and their HTTP header encoding (the identity the data plane dedupes by).

A :class:`SnapshotName` (job, tree, epoch, sender) travels in four headers; only the canonical
encoding is accepted, so one name has exactly one header form (``docs/srt-dataplane.md``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import quote, unquote

from srt.errors import SnapshotNameError

SNAPSHOT_PATH = "/srt/v1/snapshot"
#: the same named snapshots, addressed to a *replica* of the parent's position rather than
#: to the parent itself (active redundancy: ``docs/fault-tolerance.md``, "Replicated
#: masters"); a receiver keeps the two apart because one agent can be both a tree node
#: and a replica of another node's position in the same tree
REPLICA_SNAPSHOT_PATH = "/srt/v1/replica-snapshot"
#: a replicated *inner* position's epochs, sent to the position holder's parent by a replica
#: of the position, named as the holder (the parent takes the first arrival of the name)
POSITION_SNAPSHOT_PATH = "/srt/v1/position-snapshot"
SNAPSHOT_PATHS = (SNAPSHOT_PATH, REPLICA_SNAPSHOT_PATH, POSITION_SNAPSHOT_PATH)
#: the query parameter of :data:`REPLICA_SNAPSHOT_PATH` naming the position's holder (hex id;
#: signed with the path)
POSITION_QUERY = "position"


def replica_path(holder: int) -> str:
    """The replica door's path for a member of ``holder``'s position."""
    return f"{REPLICA_SNAPSHOT_PATH}?{POSITION_QUERY}={holder:x}"


def parse_position(raw: str | None) -> int | None:
    """The holder named by a replica door's query (None: not given); raises
    :class:`SnapshotNameError` unless it is a canonical lowercase hex 160-bit id."""
    if raw is None:
        return None
    try:
        value = int(raw, 16)
    except ValueError:
        raise SnapshotNameError(f"bad position {raw[:50]!r}: not a hex id") from None
    if raw != format(value, "x") or value > MAX_ID:
        raise SnapshotNameError(f"bad position {raw[:50]!r}: not a canonical 160-bit hex id")
    return value


H_JOB = "X-Elf-Job"
H_TREE = "X-Elf-Tree"
H_EPOCH = "X-Elf-Epoch"
H_SENDER = "X-Elf-Sender"
MAX_JOB_NAME = 256
MAX_ID = (1 << 160) - 1
MAX_EPOCH = (1 << 63) - 1
ACK_RESULTS = ("merged", "duplicate", "overlap", "stale")

_ID_RE = re.compile(r"[0-9a-f]{1,40}")
_EPOCH_RE = re.compile(r"(0|[1-9][0-9]{0,18})")
_JOB_RE = re.compile(r"[A-Za-z0-9%._~\-]{1," + str(3 * 4 * MAX_JOB_NAME) + "}")


@dataclass(frozen=True)
class SnapshotName:
    """Identity of one snapshot: a parent merges each name at most once.

    ``job``: the job name (1-256 characters, no control characters); ``tree``: the tree id
    (160-bit int); ``epoch``: 0 ≤ epoch < 2⁶³; ``sender``: the sending node's id (160-bit)."""

    job: str
    tree: int
    epoch: int
    sender: int

    def __post_init__(self) -> None:
        if not isinstance(self.job, str) or not 1 <= len(self.job) <= MAX_JOB_NAME:
            raise SnapshotNameError(f"job name must be 1-{MAX_JOB_NAME} characters: {self.job!r}")
        if any(ord(c) < 32 or ord(c) == 127 for c in self.job):
            raise SnapshotNameError(f"job name contains control characters: {self.job!r}")
        for field, value, top in (
            ("tree", self.tree, MAX_ID),
            ("epoch", self.epoch, MAX_EPOCH),
            ("sender", self.sender, MAX_ID),
        ):
            if type(value) is not int or not 0 <= value <= top:
                raise SnapshotNameError(f"{field} must be an int in [0, {top}], got {value!r}")

    def to_headers(self) -> dict[str, str]:
        """The four name headers (job percent-encoded UTF-8, ids lowercase hex)."""
        return {
            H_JOB: quote(self.job, safe=""),
            H_TREE: format(self.tree, "x"),
            H_EPOCH: str(self.epoch),
            H_SENDER: format(self.sender, "x"),
        }

    @classmethod
    def from_headers(cls, headers: Mapping[str, str]) -> SnapshotName:
        """Parse the name headers strictly; raises :class:`SnapshotNameError` naming the problem."""
        raw = name_fields(headers)
        job, tree, epoch, sender = raw
        if not all(raw):
            missing = [
                h for h, v in zip((H_JOB, H_TREE, H_EPOCH, H_SENDER), raw, strict=True) if not v
            ]
            raise SnapshotNameError(f"missing snapshot name headers: {', '.join(missing)}")
        if not _JOB_RE.fullmatch(job):
            raise SnapshotNameError(f"{H_JOB} must be percent-encoded UTF-8: {job[:80]!r}")
        try:
            job_name = unquote(job, errors="strict")
        except UnicodeDecodeError:
            raise SnapshotNameError(f"{H_JOB} is not valid UTF-8 once decoded") from None
        if quote(job_name, safe="") != job:
            raise SnapshotNameError(f"{H_JOB} is not in canonical percent-encoding: {job[:80]!r}")
        if not _ID_RE.fullmatch(tree) or (len(tree) > 1 and tree[0] == "0"):
            raise SnapshotNameError(f"{H_TREE} must be lowercase hex, no leading 0: {tree!r}")
        if not _ID_RE.fullmatch(sender) or (len(sender) > 1 and sender[0] == "0"):
            raise SnapshotNameError(f"{H_SENDER} must be lowercase hex, no leading 0: {sender!r}")
        if not _EPOCH_RE.fullmatch(epoch):
            raise SnapshotNameError(f"{H_EPOCH} must be a non-negative decimal integer: {epoch!r}")
        return cls(job_name, int(tree, 16), int(epoch), int(sender, 16))


def name_fields(headers: Mapping[str, str]) -> tuple[str, str, str, str]:
    """The raw name header values as signed by :mod:`srt.dataplane.auth` ("" when absent)."""
    return (
        headers.get(H_JOB, ""),
        headers.get(H_TREE, ""),
        headers.get(H_EPOCH, ""),
        headers.get(H_SENDER, ""),
    )
