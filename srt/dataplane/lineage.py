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

**Record counts** (wire form 2). A lineage may also say how many input records each origin
folded into the contribution: a :class:`Counted` lineage (a ``frozenset`` of ids, so every
use of a plain lineage is unchanged) with a parallel ``records`` mapping origin → records
(origins absent from it: count unknown; an absence marker carries none). :func:`encode`
writes it as ``b"ELFLIN2\\0"``, the u32 count n, then n pairs of (21-byte id, little-endian
u64 records, :data:`UNKNOWN` for "not known"), ids ascending; :func:`decode` reads both forms
(form 1: counts unknown) and returns a :class:`Counted` for form 2. Counts of disjoint
lineages are disjoint, so merging two contributions unions their counts
(:func:`merge_records`). Set operations on a :class:`Counted` return plain frozensets: code
that combines lineages carries the counts itself (the barrier, the master's result store).
"""

from __future__ import annotations

import itertools
import struct
from collections.abc import Iterable

from cbt.errors import SnapshotError

MAGIC = b"ELFLINE\x00"
MAGIC2 = b"ELFLIN2\x00"  # wire form 2: ids with record counts
ID_BYTES = 21
UNKNOWN = (1 << 64) - 1  # form 2's "count not known"
ABSENT = 1 << 160
LIMIT = 1 << 161  # ids, absence markers included, are below this
MAX_ORIGINS = 65_536  # 1.3 MB of ids: far above any job's fan-in
_COUNT = struct.Struct("<I")
_RECORDS = struct.Struct("<Q")
PAIR_BYTES = ID_BYTES + _RECORDS.size

Lineage = frozenset[int]


class Counted(frozenset[int]):
    """A lineage that also knows how many records each covered origin folded (module
    docstring): ``records`` maps origin → records (a subset of the ids; read-only by
    convention). Equal to, and hashed like, the plain frozenset of its ids."""

    records: dict[int, int]

    def __new__(cls, origins: Iterable[int] = (), records: dict[int, int] | None = None):
        self = super().__new__(cls, origins)
        self.records = {o: int(n) for o, n in (records or {}).items() if o in self}
        return self

    def __reduce__(self):  # copies keep the counts (frozenset's own would drop them)
        return (Counted, (frozenset(self), dict(self.records)))


def counted(origins: Iterable[int], records: dict[int, int] | None) -> Lineage:
    """``origins`` as a :class:`Counted` lineage when ``records`` is given, else a plain one."""
    if records is None:
        return frozenset(origins)
    return Counted(origins, records)


def records_of(origins: Lineage | None) -> dict[int, int] | None:
    """The record counts a lineage carries (None: a plain lineage, counts unknown)."""
    return getattr(origins, "records", None)


def merge_records(a: dict[int, int] | None, b: dict[int, int] | None) -> dict[int, int]:
    """The counts of two merged (disjoint) contributions; an unknown side adds nothing."""
    out = dict(a or {})
    for o, n in (b or {}).items():
        out[o] = out.get(o, 0) + n
    return out


NEW = "new"
DUPLICATE = "duplicate"
OVERLAP = "overlap"


class LineageError(SnapshotError):
    """A lineage prefix that is truncated, unsorted, oversized or out of range (answered like a
    damaged snapshot: 422 ``corrupt``)."""


def classify(held: Iterable[int], offered: Lineage) -> str:
    """:data:`NEW`, :data:`DUPLICATE` or :data:`OVERLAP` (module docstring). An empty
    ``offered`` set adds nothing: a duplicate. Nor does an absence marker of an origin whose
    real share is held (a restarted window job's re-sent short windows, say): it is left out
    before classifying."""
    held_set = held if isinstance(held, set | frozenset) else set(held)
    if any(o & ABSENT for o in offered):
        offered = frozenset(o for o in offered if not (o & ABSENT and o ^ ABSENT in held_set))
    if offered <= held_set:
        return DUPLICATE
    if offered.isdisjoint(held_set):
        return NEW
    return OVERLAP


def encode(origins: Iterable[int], payload: bytes) -> bytes:
    """``payload`` prefixed with the lineage of ``origins`` (form 2, with the counts, for a
    :class:`Counted` lineage)."""
    records = records_of(origins)  # type: ignore[arg-type]
    ids = sorted(set(origins))
    if len(ids) > MAX_ORIGINS:
        raise LineageError(f"{len(ids)} origins > {MAX_ORIGINS}")
    if ids and (not isinstance(ids[0], int) or ids[0] < 0 or ids[-1] >= LIMIT):
        raise LineageError("origin ids must be ints in [0, 2**161)")
    try:
        body = b"".join(i.to_bytes(ID_BYTES, "big") for i in ids)
    except (OverflowError, AttributeError) as exc:
        raise LineageError(f"origin ids must be 161-bit non-negative ints: {exc}") from None
    if records is None:
        return MAGIC + _COUNT.pack(len(ids)) + body + payload
    pairs = []
    for i in ids:
        n = records.get(i, UNKNOWN)
        if type(n) is not int or not 0 <= n <= UNKNOWN:
            raise LineageError(f"record count {n!r} of origin {i:x} out of range")
        pairs.append(i.to_bytes(ID_BYTES, "big") + _RECORDS.pack(n))
    return MAGIC2 + _COUNT.pack(len(ids)) + b"".join(pairs) + payload


def decode(body: bytes) -> tuple[Lineage | None, bytes]:
    """``(origins, snapshot bytes)``; ``origins`` is None for a body without lineage, a
    :class:`Counted` for form 2."""
    if body.startswith(MAGIC2):
        return _decode2(body)
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


def _decode2(body: bytes) -> tuple[Lineage, bytes]:
    head = len(MAGIC2) + _COUNT.size
    if len(body) < head:
        raise LineageError("lineage prefix truncated")
    (n,) = _COUNT.unpack_from(body, len(MAGIC2))
    if n > MAX_ORIGINS:
        raise LineageError(f"{n} origins > {MAX_ORIGINS}")
    end = head + n * PAIR_BYTES
    if len(body) < end:
        raise LineageError(f"lineage of {n} origins truncated")
    ids, records = [], {}
    for p in range(head, end, PAIR_BYTES):
        origin = int.from_bytes(body[p : p + ID_BYTES], "big")
        (count,) = _RECORDS.unpack_from(body, p + ID_BYTES)
        ids.append(origin)
        if count != UNKNOWN:
            records[origin] = count
    if any(a >= b for a, b in itertools.pairwise(ids)):
        raise LineageError("lineage origins must be strictly ascending")
    if ids and ids[-1] >= LIMIT:
        raise LineageError("a lineage origin id is out of range")
    return Counted(ids, records), body[end:]


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
