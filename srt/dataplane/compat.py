"""What a (job, tree) accepts for an epoch, checked before a peer's snapshot touches any state.

Contract: an :class:`Expectation` names the aggregator (name and parameters, compared with
``Aggregator.__eq__``), the key hash function and, optionally, a key check (``key_check(snap)``
returns a problem text or None; a job with a key schema - an ELF QL query's GROUP BY width -
supplies one). :func:`admit` returns the snapshot to merge or raises
:class:`~srt.errors.Incompatible` (409 ``incompatible`` on the data plane):

* a **non-empty** snapshot must match all three exactly;
* an **empty** snapshot merges with any aggregator (``Snapshot.merge``: an idle epoch around a
  runtime change of aggregate is empty in either form), so it is always admitted - as an empty
  snapshot *of the expected aggregator*, so a foreign aggregator never even reaches the
  barrier's filler for empty epochs;
* ``expected=None`` (nothing known about the epoch) admits the snapshot unchanged.

The expectation is per epoch because a job may switch aggregator from an epoch on
(``docs/job-changes.md``). Pure functions; no I/O.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from cbt import Aggregator, Snapshot
from srt.errors import Incompatible

KeyCheck = Callable[[Snapshot], "str | None"]


@dataclass(frozen=True)
class Expectation:
    """What snapshots of one (job, tree, epoch) must be (see the module contract)."""

    aggregator: Aggregator
    hash_name: str = "xxh3_64"
    key_check: KeyCheck | None = None


def admit(expected: Expectation | None, snap: Snapshot) -> Snapshot:
    """``snap`` if it may merge under ``expected`` (an empty one re-typed to the expected
    aggregator), else :class:`~srt.errors.Incompatible` naming the mismatch."""
    if expected is None:
        return snap
    if not len(snap):
        if snap.agg == expected.aggregator:
            return snap
        return Snapshot.empty(expected.aggregator)
    if snap.agg != expected.aggregator:
        raise Incompatible(
            f"snapshot aggregator {snap.agg!r} does not match the job's {expected.aggregator!r}"
        )
    if snap.hash_name != expected.hash_name:
        raise Incompatible(
            f"snapshot keys hashed with {snap.hash_name!r}, the job uses {expected.hash_name!r}"
        )
    if expected.key_check is not None:
        problem = expected.key_check(snap)
        if problem is not None:
            raise Incompatible(f"snapshot keys do not fit the job: {problem}")
    return snap
