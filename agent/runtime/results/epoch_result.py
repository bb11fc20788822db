"""One stored epoch result at a job master, and its wire form for a hand-over or a replica.

Contract: :class:`EpochResult` is what a master holds for one (tree, epoch): the snapshot (or
where it was spilled), the origins it covers and the ones it expected, and from these its
state — ``final``, ``tentative`` (an expected origin is still missing, or the result is a
preview or doubtful) or ``partial`` (it lacks only origins given up on) — and its rate-weighted
``coverage`` (``docs/fault-tolerance.md``). :class:`HeldContributions` are late contributions
waiting for an epoch the barrier has not emitted yet. :data:`EPOCH_LIMIT`,
:data:`MEMORY_BUDGET`, :data:`SPILL_BUDGET` and :data:`SPILL_FAILED` name the bound that dropped
an epoch (the results API's 410 and the store's ``dropped`` counts say them).

:func:`result_item`/:func:`held_item` give the wire item of a stored result or of held
contributions (without the snapshot bytes, which the caller adds); :func:`parse_item` reads one
back, checking its shape (``ValueError``/``SnapshotError`` on a malformed item). Origins travel
as hex ids, record counts as hex id → count; a malformed count entry is left out (that count
stays unknown), malformed origins read as unknown (None). The store
(:mod:`agent.runtime.results.store`) decides what the items mean when it absorbs them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from cbt import Snapshot
from srt.dataplane.lineage import Lineage, counted, covered, describe

#: why an epoch was dropped from a master (:meth:`~agent.runtime.results.store.ResultStore.gone`).
#: EPOCH_LIMIT: past the store's ``max_epochs`` per tree. Its word stays "retention": the 410
#: message and the job status's ``dropped`` counts have always said so.
EPOCH_LIMIT = "retention"
MEMORY_BUDGET = "memory budget"
SPILL_BUDGET = "spill budget"
SPILL_FAILED = "spill file unreadable"


@dataclass
class EpochResult:
    """One tree's result for one epoch at its master. ``snapshot`` is None while the epoch
    is spilled to disk (``spilled`` holds its size there; the store's ``load`` reads it)."""

    snapshot: Snapshot | None
    completed_at: float
    late_names: set[tuple[int, int]] = field(default_factory=set)  # (origin node, epoch)
    nbytes: int = 0  # resident bytes accounted for this epoch
    spilled: int | None = None
    spilling: bool = False
    origins: Lineage | None = None  # the origins it covers (None: unknown lineage)
    expected: Lineage | None = None  # the origins the master expected (None: unknown)
    version: int = 1  # +1 on every fold after the first store
    #: the master could not know all of the job's origins when it stored this (it became the
    #: root after being a member - a partition's minority side, say - with no state handed
    #: over): tentative until a fuller result replaces it
    doubtful: bool = False
    #: covered origin → the input records it folded into this result (where known)
    records: dict[int, int] | None = None
    #: the rate-weighted coverage the store computed (None: the share of origins applies)
    weighted: float | None = None
    #: a tentative preview (what had arrived by the tentative deadline), not the barrier's
    #: result: always tentative; the barrier's result replaces it (module docstring)
    preview: bool = False
    #: expected origins whose share of this epoch will never come (retired, or their repair
    #: came back empty while they live on): lacking them makes the result *partial*
    given_up: Lineage = frozenset()
    #: the fencing term of the master that produced this version (docs/fault-tolerance.md)
    term: int = 0
    #: the job's fault-tolerance policy when this version was produced (``passive``,
    #: ``replicated:r``; agent/jobs/fault_policy.py)
    policy: str = "passive"

    @property
    def updated(self) -> bool:
        return self.version > 1 or bool(self.late_names)

    @property
    def missing(self) -> Lineage:
        """Expected origins it does not cover yet (an origin marked absent is missing)."""
        if self.expected is None or self.origins is None:
            return frozenset()
        return self.expected - covered(self.origins)

    @property
    def lacking(self) -> tuple[str, ...]:
        """:attr:`missing` as hex ids (results API, lake); ``"?"`` stands for origins a
        doubtful master cannot name."""
        return tuple(describe(self.missing)) + (("?",) if self.doubtful else ())

    @property
    def tentative(self) -> bool:
        """Not final, and may still become final: it lacks an origin not given up on."""
        return bool(self.missing - self.given_up) or self.doubtful or self.preview

    @property
    def partial(self) -> bool:
        """Lacks only origins given up on (retired, or past repair): never exact, for good
        unless one of them comes back after all."""
        return bool(self.missing) and not self.tentative

    @property
    def state(self) -> str:
        """``final``, ``tentative`` or ``partial``."""
        return "tentative" if self.tentative else "partial" if self.missing else "final"

    @property
    def coverage(self) -> float:
        """Rate-weighted share of the epoch's input records covered (module docstring); the
        share of the expected origins covered where no rate or count is known; 1.0 when
        nothing is missing, nothing was expected or the lineage is unknown."""
        if not self.expected or self.origins is None or not self.missing:
            return 1.0
        if self.weighted is not None:
            return self.weighted
        return len(self.expected & covered(self.origins)) / len(self.expected)


@dataclass
class HeldContributions:
    """Late contributions held for an epoch the barrier has not emitted here yet: the
    store's ``put`` merges them into the barrier's result when it comes."""

    snapshot: Snapshot
    names: set[tuple[int, int]]
    origins: set[int] | None  # None: something without lineage is held
    records: dict[int, int] | None = None


def result_item(epoch: int, r: EpochResult) -> dict[str, Any]:
    """The wire item of a stored result, without its ``snapshot`` bytes."""
    return {"epoch": epoch, "completed_at": r.completed_at, "version": r.version,
            "doubtful": r.doubtful, "term": r.term, "policy": r.policy,
            "given_up": _ids(r.given_up),
            "late": [list(n) for n in sorted(r.late_names)],
            "origins": _ids(r.origins), "expected": _ids(r.expected),
            "records": _counts(r.records)}  # fmt: skip


def held_item(epoch: int, held: HeldContributions) -> dict[str, Any]:
    """The wire item of contributions held for an epoch, without its ``snapshot`` bytes."""
    return {"epoch": epoch, "late": [list(n) for n in sorted(held.names)],
            "early": True, "origins": _ids(held.origins),
            "records": _counts(held.records)}  # fmt: skip


@dataclass
class HandedOver:
    """One wire item read back (:func:`parse_item`); ``item`` is the raw item, for the fields
    the store reads only when it takes the result (``early``, ``doubtful``, ``version``,
    ``given_up``: :func:`given_up_of`)."""

    epoch: int
    snapshot: Snapshot
    completed_at: float
    late: set[tuple[int, int]]
    origins: Lineage | None
    expected: Lineage | None
    item: dict[str, Any]


def parse_item(item: Any, check: Callable[[int, Snapshot], Snapshot] | None = None) -> HandedOver:
    """Read one wire item: its snapshot decoded (and passed through ``check(epoch, snap)``,
    which returns the snapshot to keep), its origins counted with their record counts.
    Raises ``ValueError``/``SnapshotError`` on a malformed item, or what ``check`` raises."""
    epoch = item.get("epoch") if isinstance(item, dict) else None
    if type(epoch) is not int:
        raise ValueError("hand-over item without an integer epoch")
    snap = Snapshot.from_bytes(item["snapshot"])
    if check is not None:
        snap = check(epoch, snap)
    late = {(int(a), int(b)) for a, b in item.get("late", [])}
    origins = _from_ids(item.get("origins"))
    if origins is not None:
        origins = counted(origins, _from_counts(item.get("records")))
    expected = _from_ids(item.get("expected"))
    return HandedOver(
        epoch, snap, float(item.get("completed_at", 0.0)), late, origins, expected, item
    )


def given_up_of(item: dict[str, Any]) -> Lineage:
    """The origins a handed-over result had given up on (none when absent or malformed)."""
    return _from_ids(item.get("given_up")) or frozenset()


def _counts(records: dict[int, int] | None) -> dict[str, int] | None:
    return None if records is None else {format(o, "x"): n for o, n in records.items()}


def _from_counts(value: Any) -> dict[int, int] | None:
    """Record counts from a hand-over item (hex id → count); None when absent, and the
    malformed entries left out (their counts stay unknown)."""
    if not isinstance(value, dict):
        return None
    out = {}
    for key, n in value.items():
        try:
            if type(n) is int and n >= 0:
                out[int(key, 16)] = n
        except (TypeError, ValueError):
            continue
    return out


def _ids(origins: Lineage | set[int] | None) -> list[str] | None:
    return None if origins is None else describe(origins)


def _from_ids(value: Any) -> Lineage | None:
    """Origins from a hand-over item (hex ids); None when absent or malformed."""
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        return None
    try:
        return frozenset(int(v, 16) for v in value)
    except ValueError:
        return None
