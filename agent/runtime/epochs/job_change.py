"""What a runtime job change does to a worker's open epochs (docs/control.md), apart from the
worker's happy path.

Contract: pure functions over the worker's open-epoch state, passed as plain mappings
(epoch -> :class:`~cbt.CompressedBufferTree` for the trees, epoch -> :class:`~cbt.Snapshot`
for data already flushed and carried), never the worker itself.

* :func:`clock_changed`: whether a spec change reaches the epoch clock (lateness, idle
  timeout, future limit, epoch lengths).
* :func:`closed_before`: whether a change taking effect from an epoch comes after this worker
  closed that epoch (logged at WARNING: what it emitted stays as it was).
* :func:`discard_from`: a change of aggregate drops what open epochs from its first epoch on
  hold (mapped for the old aggregate: it cannot be re-mapped); returns the keys dropped.
* :func:`rebucket`: a new epoch length re-cuts open epochs from its first epoch on; each
  tree's data moves to the epoch its start falls in under the new lengths; returns how many
  epochs moved.
"""

from __future__ import annotations

import logging
from collections.abc import MutableMapping
from typing import Protocol

from agent.jobs.schedule import EpochSchedule
from agent.jobs.spec import JobSpec
from cbt import Snapshot

log = logging.getLogger(__name__)


class OpenTree(Protocol):
    """What a job change needs of an open epoch's tree."""

    def flush(self) -> Snapshot: ...

    def close(self) -> None: ...


def clock_changed(old: JobSpec, new: JobSpec) -> bool:
    """Whether ``new`` changes what the epoch clock decides."""
    return (new.allowed_lateness, new.effective_idle_timeout, new.max_future, new.schedule) != (
        old.allowed_lateness,
        old.effective_idle_timeout,
        old.max_future,
        old.schedule,
    )


def closed_before(job: str, what: str, first: int | None, next_epoch: int | None) -> int:
    """1 (logged at WARNING) when ``what`` changes from epoch ``first`` but this worker's next
    epoch to close is already after it; else 0."""
    if first is None or next_epoch is None or next_epoch <= first:
        return 0
    log.warning(
        "job %s: %s changes from epoch %d but this worker closed up to %d",
        job,
        what,
        first,
        next_epoch - 1,
    )
    return 1


def discard_from(
    trees: MutableMapping[int, OpenTree], carried: MutableMapping[int, Snapshot], first: int
) -> int:
    """Drop the open epochs from ``first`` on; the number of keys they held."""
    discarded = 0
    for epoch in [e for e in trees if e >= first]:
        tree = trees.pop(epoch)
        discarded += len(tree.flush())
        tree.close()
    for epoch in [e for e in carried if e >= first]:
        discarded += len(carried.pop(epoch))
    return discarded


def rebucket(
    trees: MutableMapping[int, OpenTree],
    carried: MutableMapping[int, Snapshot],
    old: EpochSchedule,
    new: EpochSchedule,
    changed_from: int,
) -> int:
    """Move each open epoch from ``changed_from`` on that ``new`` cuts differently into the
    epoch its start falls in (merged into ``carried``); the number of epochs moved."""
    moved_epochs = 0
    for epoch in sorted(e for e in trees if e >= changed_from):
        target = new.epoch_of(old.start(epoch))
        if target == epoch:
            continue
        tree = trees.pop(epoch)
        moved = tree.flush()
        tree.close()
        prior = carried.get(target)
        carried[target] = moved if prior is None else prior.merge(moved)
        moved_epochs += 1
    return moved_epochs
