"""The SRT data plane: named epoch snapshots child → parent over authenticated HTTP.

A snapshot travels as ``POST /srt/v1/snapshot`` with its :class:`SnapshotName` in headers and
``Snapshot.to_bytes()`` (compressed, CRC-checked) as the body; requests and replies are
authenticated with the cluster secret (:mod:`srt.dataplane.auth`). :class:`DataPlaneServer` (one per
agent) verifies, rejects and counts bad requests and hands good snapshots to its handler,
which answers ``"merged"``, ``"duplicate"``, ``"overlap"`` or ``"stale"``;
:class:`DataPlaneClient` (one keep-alive session per agent) sends them, resending on a failed
integrity check (422) and retrying transient failures. Full protocol: ``docs/srt-dataplane.md``.

This module is the facade: the name and its header encoding live in ``srt/dataplane/name.py``,
the server and client in ``srt/dataplane/server.py`` and ``srt/dataplane/client.py``.
"""

from srt.dataplane.client import DataPlaneClient
from srt.dataplane.name import (
    ACK_RESULTS,
    H_EPOCH,
    H_JOB,
    H_SENDER,
    H_TREE,
    REPLICA_SNAPSHOT_PATH,
    SNAPSHOT_PATH,
    SnapshotName,
    name_fields,
)
from srt.dataplane.server import DataPlaneServer

__all__ = [
    "ACK_RESULTS",
    "H_EPOCH",
    "H_JOB",
    "H_SENDER",
    "H_TREE",
    "REPLICA_SNAPSHOT_PATH",
    "SNAPSHOT_PATH",
    "DataPlaneClient",
    "DataPlaneServer",
    "SnapshotName",
    "name_fields",
]
