"""CommittedEpochs: what the tree's masters - this one or an earlier one - committed.

Contract (``docs/fault-tolerance.md``, "Commit" and "A master and its standby dying
together"). A master commits epoch ``W`` when every stored epoch up to ``W`` is final or
partial, or tentative lacking only absent origins (``commit.py``): its version of each is in
the lake, and for each such absent origin the commit multicast names the first epoch it
lacks (``held``). This records, per tree, the highest such ``W`` heard - as master from our
own commits, as member from the multicasts, as new master from a predecessor's hand-over -
and the ``held`` entries heard with any of them (merged: the earliest per origin, so an
origin once held back stays held back from there, which only ever keeps a contribution).

:meth:`covers` answers the question a master without an epoch asks of a contribution for
it: is it a **duplicate** of a share the committed version in the lake already holds? An
agent killed before its read position passed a commit re-reads its records and contributes
those epochs again after a restart; a new master that never held the epoch (its master and
standby died together) would otherwise store that share alone, lacking every other origin,
and publish it under a newer term above the lake's committed version - a worse result
replacing a better one by the reader rule. Only contributions whose origins all have a share
in the committed version are duplicates; an origin held back there (absent when it was
committed) is not, and its share is folded in as before.

Pure state; bounded by the job's trees times its origins.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


class CommittedEpochs:
    """Per tree: the highest commit watermark heard and the origins held back below it."""

    def __init__(self) -> None:
        self._watermark: dict[int, int] = {}
        self._held: dict[int, dict[int, int]] = {}  # tree -> origin -> first epoch it lacks

    def hear(self, tree: int, epoch: Any, held: Any = None) -> None:
        """A commit of ``tree`` up to ``epoch`` with its ``held`` map (origin hex -> first
        epoch lacked), as multicast or handed over; malformed parts are ignored."""
        if type(epoch) is not int or epoch < 0:
            return
        if epoch > self._watermark.get(tree, -1):
            self._watermark[tree] = epoch
        mine = self._held.setdefault(tree, {})
        for key, first in held.items() if isinstance(held, dict) else ():
            try:
                origin = int(key, 16)
            except (TypeError, ValueError):
                continue
            if type(first) is int and first < mine.get(origin, first + 1):
                mine[origin] = first

    def watermark(self, tree: int) -> int | None:
        return self._watermark.get(tree)

    def export(self, tree: int) -> dict[str, Any] | None:
        """What a hand-over carries (None: nothing committed heard)."""
        if tree not in self._watermark:
            return None
        held = {format(o, "x"): e for o, e in self._held.get(tree, {}).items()}
        return {"epoch": self._watermark[tree], "held": held}

    def covers(self, tree: int, epoch: int, origins: Iterable[int]) -> bool:
        """Whether the committed version of (``tree``, ``epoch``) holds a share of every one
        of ``origins`` (a non-empty set): a contribution from them is a duplicate."""
        origins = list(origins)
        if not origins or epoch > self._watermark.get(tree, -1):
            return False
        held = self._held.get(tree, {})
        return all(held.get(o, epoch + 1) > epoch for o in origins)
