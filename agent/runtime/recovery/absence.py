"""Absence: a job master's decisions about origins that do not deliver - retire, leave, and
shares past repair (``docs/fault-tolerance.md``, "Absence, leaving and retiring").

Contract. At a job's master, beside :class:`~agent.runtime.recovery.membership.Membership` (who is
expected) and the result store (what each epoch holds):

* :meth:`Absence.retire` - ``elf retire`` or ``retire_after`` seconds of silence
  (:meth:`Absence.check`, run every few seconds by the master): the origin is no longer
  expected from the first epoch that begins after the decision; every stored epoch before it
  that lacks the origin becomes **partial** (a new version: the lake and a stream see the new
  state), logged at WARNING with job, epochs and origin, counted (``origins_retired``,
  ``partial_epochs``).
* :meth:`Absence.left` - an origin's graceful stop declared its end: the last epoch it
  delivered; later epochs are final without it.
* :meth:`Absence.pulled` - a repair pull of an origin that lives on (it contributed to later
  epochs) came back without an epoch :data:`UNREPAIRABLE_AFTER` times in a row: its share of
  that epoch cannot be had any more (an input that cannot be re-read, a retained snapshot
  dropped by its bound), so the epoch gives it up: partial, logged at WARNING with job,
  epoch and origin, counted (``unrepairable``). Never for an origin that may still re-send it.

Bounded: at most :data:`MAX_TRACKED` (tree, epoch, origin) empty-pull counts.
"""

from __future__ import annotations

import logging
from typing import Any, Protocol

from agent.runtime.recovery.membership import Membership
from srt.dataplane.lineage import Lineage

log = logging.getLogger(__name__)

UNREPAIRABLE_AFTER = 3  # empty repair answers in a row before a share is past repair
MAX_TRACKED = 4096


class GiveUpStore(Protocol):
    """What :class:`Absence` changes in the master's result store."""

    def retire(self, origin: int, before: int) -> list[tuple[int, int]]: ...

    def give_up(self, tree: int, epoch: int, origins: Lineage) -> bool: ...


class AbsenceHost(Protocol):
    """What :class:`Absence` needs of its job runtime."""

    name: str

    def retire_after(self) -> float: ...

    def first_epoch_after(self, t: float) -> int: ...

    def versions_changed(self, changed: list[tuple[int, int]]) -> None:
        """New versions of these (tree, epoch): publish, replicate, commit."""
        ...

    def members_changed(self) -> None: ...

    def count(self, what: str, n: int = 1) -> None: ...


class Absence:
    """Per job at its master: retirements, leaves and shares past repair (module contract)."""

    def __init__(self, membership: Membership, store: GiveUpStore, host: AbsenceHost) -> None:
        self.membership = membership
        self.store = store
        self.host = host
        self._empty: dict[tuple[int, int, int], int] = {}  # (tree, epoch, origin) -> count

    def retire(self, origin: int, why: str, now: float) -> dict[str, Any]:
        """Retire ``origin`` now (module contract). Raises ``KeyError`` if it is not a member
        of the job; retiring an origin already out changes nothing."""
        if not self.membership.is_member(origin):
            raise KeyError(f"{origin:x} is not an origin of job {self.host.name!r}")
        from_epoch = self.host.first_epoch_after(now)
        if not self.membership.retire(origin, from_epoch, now, why):
            before = self.membership.retired_before().get(origin, from_epoch)
            return {"origin": f"{origin:x}", "from_epoch": before, "partial_epochs": 0}
        changed = self.store.retire(origin, from_epoch)
        self.host.count("origins_retired")
        self.host.count("partial_epochs", len(changed))
        log.warning(
            "job %s: origin %x retired (%s): not expected from epoch %d on; %d stored epochs "
            "that lack it are partial for good (%s)",
            self.host.name,
            origin,
            why,
            from_epoch,
            len(changed),
            ", ".join(str(e) for _, e in changed[:16]) or "none",
        )
        self.host.members_changed()
        self.host.versions_changed(changed)
        return {"origin": f"{origin:x}", "from_epoch": from_epoch, "partial_epochs": len(changed)}

    def check(self, now: float) -> list[int]:
        """Retire every origin nobody heard of for the job's ``retire_after``."""
        after = self.host.retire_after()
        due = self.membership.retire_due(now, after)
        for origin in due:
            self.retire(origin, f"absent for {after:g} s (retire_after)", now)
        return due

    def left(self, origin: int, through: int) -> bool:
        """``origin`` stopped gracefully after delivering epochs up to ``through``."""
        if not self.membership.leave(origin, through + 1):
            return False
        self.host.count("origins_left")
        log.info(
            "job %s: origin %x left after epoch %d: later epochs are final without it",
            self.host.name,
            origin,
            through,
        )
        self.host.members_changed()
        return True

    def pulled(self, tree: int, origin: int, asked: list[int], got: set[int]) -> int:
        """A repair pull of ``origin`` for ``asked`` returned ``got``: count the empty
        answers of an origin that lives on; give up the shares past repair. Returns how many
        epochs were given up."""
        newest = self.membership.last_epoch(origin)
        given_up: list[tuple[int, int]] = []
        for epoch in asked:
            key = (tree, epoch, origin)
            if epoch in got:
                self._empty.pop(key, None)
                continue
            if newest is None or newest <= epoch:
                continue  # it has not moved past the epoch: it may still send it
            n = self._empty.get(key, 0) + 1
            if n < UNREPAIRABLE_AFTER:
                if key in self._empty or len(self._empty) < MAX_TRACKED:
                    self._empty[key] = n
                continue
            self._empty.pop(key, None)
            if self.store.give_up(tree, epoch, frozenset({origin})):
                given_up.append((tree, epoch))
                log.warning(
                    "job %s tree %x epoch %d: origin %x lives on (it delivered epoch %d) but "
                    "no longer holds its share of this epoch: past repair, the epoch is "
                    "partial, lacking it",
                    self.host.name,
                    tree,
                    epoch,
                    origin,
                    newest,
                )
        if given_up:
            self.host.count("unrepairable", len(given_up))
            self.host.count("partial_epochs", len(given_up))
            self.host.versions_changed(given_up)
        return len(given_up)
