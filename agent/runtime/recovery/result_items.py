"""Result items and own snapshots on the wire: one encoding, one decoding.

Contract. A **result item** is one stored epoch as ``ResultStore.export_plan`` /
``encode_plan`` give it (epoch, version, lineage, flags, snapshot bytes); the master's standby
replica (``POST /agent/v1/replica``) and a hand-over to the next master
(``POST /agent/v1/handover``) carry lists of them, the snapshot as base64 text.
:func:`encode_items` and :func:`decode_items` are their only encoder and decoder.
:func:`decode_items` raises ``ValueError`` (a 400 for the caller) on a malformed list: not a
list, longer than ``max_items``, an item that is not an object or lacks an integer epoch, a
non-integer version, a snapshot that is not base64 text; nothing is decoded past the first
fault.

An origin's **own snapshots** (repair by pull's ``/agent/v1/resend`` answer, a leaving
origin's ``/agent/v1/leave``) travel as ``{"<epoch>": base64}`` maps:
:func:`encode_snapshots` / :func:`decode_snapshots`.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable
from typing import Any

from cbt import Snapshot


def encode_items(exported: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Encoded result items (snapshot bytes → base64 text), JSON-ready."""
    return [dict(item, snapshot=base64.b64encode(item["snapshot"]).decode()) for item in exported]


def decode_items(raw: Any, max_items: int | None = None) -> list[dict[str, Any]]:
    """The items of a replica or hand-over body, snapshots as bytes (module contract)."""
    if not isinstance(raw, list) or (max_items is not None and len(raw) > max_items):
        bound = "" if max_items is None else f" of at most {max_items} epochs"
        raise ValueError(f"items must be a list{bound}")
    items = []
    for item in raw:
        if not isinstance(item, dict) or type(item.get("epoch")) is not int:
            raise ValueError("every item needs an integer epoch")
        if type(item.get("version", 1)) is not int:
            raise ValueError("an item's version must be an integer")
        if not isinstance(item.get("snapshot"), str):
            raise ValueError("every item needs its snapshot as base64 text")
        items.append(dict(item, snapshot=base64.b64decode(item["snapshot"], validate=True)))
    return items


def encode_snapshots(found: Iterable[tuple[int, Snapshot]]) -> dict[str, str]:
    """``{"<epoch>": base64}`` of own snapshots (run it in a thread: it serializes)."""
    return {str(e): base64.b64encode(s.to_bytes()).decode() for e, s in found}


def decode_snapshot(value: Any) -> Snapshot:
    if not isinstance(value, str):
        raise ValueError("snapshot must be base64 text")
    return Snapshot.from_bytes(base64.b64decode(value, validate=True))


def decode_snapshots(raw: dict[str, Any]) -> dict[int, Snapshot]:
    """Epoch → snapshot of a ``{"<epoch>": base64}`` map (``ValueError``/``SnapshotError``
    on a malformed one)."""
    return {int(k): decode_snapshot(v) for k, v in raw.items()}
