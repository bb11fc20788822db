"""Lineage: which origins a contribution covers, and how a receiver classifies a new one.

Every agent that reads a job's input is an **origin**: its own closed epoch (the barrier's
local snapshot) covers exactly itself. A node's merged result of epoch e covers the union of
the origins it merged, and it travels up the tree with that set. A receiver holding the set H
for epoch e and offered a contribution covering O classifies it (:func:`classify`):

* ``O ⊆ H`` — **duplicate**: every record in it is already counted (a re-send after a lost
  acknowledgement, a tree change, a restart): acknowledged, not merged.
* ``O ∩ H = ∅`` — **new**: merged; the receiver now holds ``H ∪ O``.
* otherwise — **overlap**: merging would count ``O ∩ H`` twice and a merged snapshot cannot
  be split, so it is *not* merged, counted and logged; the origins in ``O − H`` stay missing
  until their own (singleton) contributions arrive, and the master reports the epoch as
  tentative, lacking them, meanwhile. Never silently wrong.

**Absence markers.** An origin that knows its share of an epoch is incomplete (its job started
on an input other jobs had already read) contributes no records for it and the marker
:func:`absent` ``(origin)`` - the id with bit 160 set - instead of its id. A marker is a
pseudo-origin: it carries no data and classifies like any other id (a re-sent marker is a
duplicate; the origin's real, complete share later is new), and it tells the master that the
origin exists and is missing from that epoch (:func:`plain` recovers the id).

Because classification depends only on sets, re-sends after any sequence of tree changes,
lost acknowledgements and restarts are harmless (``docs/fault-tolerance.md``; the hypothesis
state machine in ``tests/srt/dataplane/test_lineage_machine.py``).

**Wire form.** A snapshot body may be prefixed with its lineage (:func:`encode` /
:func:`decode`): ``b"ELFLINE\\0"``, a little-endian u32 count n, then n origin ids as 21-byte
big-endian integers in ascending order (160-bit overlay ids; bit 160 marks an absence), then
the snapshot bytes. A body without the prefix (a peer from before lineage) has unknown
lineage (``None``): the receiver then falls back to deduplication by name. The body's
signed digest covers the prefix. At most :data:`MAX_ORIGINS` origins; anything malformed
raises :class:`LineageError` (a 422).
"""

from __future__ import annotations

import itertools
import struct
from collections.abc import Iterable

from cbt.errors import SnapshotError

MAGIC = b"ELFLINE\x00"
ID_BYTES = 21
ABSENT = 1 << 160
LIMIT = 1 << 161  # ids, absence markers included, are below this
MAX_ORIGINS = 65_536  # 1.3 MB of ids: far above any job's fan-in
_COUNT = struct.Struct("<I")

Lineage = frozenset[int]

NEW = "new"
DUPLICATE = "duplicate"
OVERLAP = "overlap"


class LineageError(SnapshotError):
    """A lineage prefix that is truncated, unsorted, oversized or out of range (answered like a
    damaged snapshot: 422 ``corrupt``)."""


def classify(held: Iterable[int], offered: Lineage) -> str:
    """:data:`NEW`, :data:`DUPLICATE` or :data:`OVERLAP` (module docstring). An empty
    ``offered`` set adds nothing: a duplicate."""
    held_set = held if isinstance(held, set | frozenset) else set(held)
    if offered <= held_set:
        return DUPLICATE
    if offered.isdisjoint(held_set):
        return NEW
    return OVERLAP


def encode(origins: Iterable[int], payload: bytes) -> bytes:
    """``payload`` prefixed with the lineage of ``origins``."""
    ids = sorted(set(origins))
    if len(ids) > MAX_ORIGINS:
        raise LineageError(f"{len(ids)} origins > {MAX_ORIGINS}")
    if ids and (not isinstance(ids[0], int) or ids[0] < 0 or ids[-1] >= LIMIT):
        raise LineageError("origin ids must be ints in [0, 2**161)")
    try:
        body = b"".join(i.to_bytes(ID_BYTES, "big") for i in ids)
    except (OverflowError, AttributeError) as exc:
        raise LineageError(f"origin ids must be 161-bit non-negative ints: {exc}") from None
    return MAGIC + _COUNT.pack(len(ids)) + body + payload


def decode(body: bytes) -> tuple[Lineage | None, bytes]:
    """``(origins, snapshot bytes)``; ``origins`` is None for a body without lineage."""
    if not body.startswith(MAGIC):
        return None, body
    head = len(MAGIC) + _COUNT.size
    if len(body) < head:
        raise LineageError("lineage prefix truncated")
    (n,) = _COUNT.unpack_from(body, len(MAGIC))
    if n > MAX_ORIGINS:
        raise LineageError(f"{n} origins > {MAX_ORIGINS}")
    end = head + n * ID_BYTES
    if len(body) < end:
        raise LineageError(f"lineage of {n} origins truncated")
    ids = [int.from_bytes(body[p : p + ID_BYTES], "big") for p in range(head, end, ID_BYTES)]
    if any(a >= b for a, b in itertools.pairwise(ids)):
        raise LineageError("lineage origins must be strictly ascending")
    if ids and ids[-1] >= LIMIT:
        raise LineageError("a lineage origin id is out of range")
    return frozenset(ids), body[end:]


def absent(origin: int) -> int:
    """The absence marker of ``origin`` (module docstring)."""
    return origin | ABSENT


def plain(origins: Iterable[int]) -> Lineage:
    """The origin ids a lineage names, covered or marked absent."""
    return frozenset(o & (ABSENT - 1) for o in origins)


def covered(origins: Iterable[int]) -> Lineage:
    """The origins whose records a lineage includes (absence markers left out)."""
    return frozenset(o for o in origins if not o & ABSENT)


def describe(origins: Iterable[int]) -> list[str]:
    """Origins as sorted lowercase hex (status pages, results, logs)."""
    return [format(o, "x") for o in sorted(origins)]
