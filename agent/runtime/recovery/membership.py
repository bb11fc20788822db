"""Membership: which origins a job's master expects in each epoch, and which are absent,
left or retired (``docs/fault-tolerance.md``, "The guarantee").

Contract. An **origin** is an agent that reads the job's input; the lineage of each stored
result (:mod:`srt.dataplane.lineage`) says which origins it covers. The master feeds every
result's lineage to :meth:`Membership.observe` and every origin announcement to
:meth:`Membership.join`; :meth:`Membership.expected` then answers, for epoch e, the origins
that had joined by e (first contribution or announced start <= e) and were not *out* in e:

* **Absent is not gone.** An origin that stops contributing without leaving (kill -9, a crash,
  SIGSTOP, a partition, a host down) stays expected: every epoch it misses is tentative,
  naming it, until it comes back (its re-sent epochs fold in: final, a new version) or it is
  retired. :meth:`declare_absent` records the master's evidence (a refused probe, the overlay's
  failure detector) for the operator's view and for the commit rule, but changes no
  expectation. An absent origin is present again once it contributes to an epoch newer than
  any it had contributed when it was declared, or announces itself.
* **Leaving** (:meth:`leave`: a graceful stop, ``elf leave``) declares the origin's end: it is
  not expected from the epoch after the last one it delivered; those later epochs are final
  without it.
* **Retiring** (:meth:`retire`: ``elf retire``, or the job's ``retire_after`` seconds of
  silence, :meth:`retire_due`) is an operator's decision: the origin is not expected from the
  first epoch that begins after the decision; the epochs before it that lack it are *partial*
  for good (:meth:`retired_before`: the result store marks them; never presented as exact).
* **Coming back** after a leave or a retirement: the origin is expected again from the first
  epoch it contributes to or announces; its data for earlier epochs folds in as new versions.

It is pure state: no clock (times are arguments), no I/O. :meth:`export` / :meth:`restore`
carry it to a new master (standby replica, hand-over); :meth:`members` /
:meth:`restore_members` let a master persist who the origins are, so a restarted master still
expects them. **Bound**: one entry per origin of the job; an origin that left or was retired
more than ``forget_after_epochs`` epochs before the newest observed epoch is forgotten (and
at most :data:`MAX_RANGES` out-ranges are kept per origin).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from srt.dataplane.lineage import Lineage, plain

#: out-ranges (left or retired, then back) kept per origin; older ones merge into "expected"
MAX_RANGES = 8
LEFT = "left"
RETIRED = "retired"


class Membership:
    """Per job at its master: each origin's first and last epoch, when it was last heard of,
    and the epoch ranges it is out (left or retired); see the module contract."""

    def __init__(self, forget_after_epochs: int = 4096) -> None:
        if forget_after_epochs < 1:
            raise ValueError("forget_after_epochs must be >= 1")
        self.forget_after_epochs = forget_after_epochs
        self._first: dict[int, int] = {}
        self._last: dict[int, int] = {}
        self._heard: dict[int, float] = {}  # wall time it was last heard of here
        #: origin -> [start, end, kind]: not expected in epochs start <= e < end (end None: open)
        self._out: dict[int, list[list[Any]]] = {}
        #: origin currently retired -> {"from_epoch", "at", "why"}
        self._retired: dict[int, dict[str, Any]] = {}
        #: origin declared absent -> {"since", "why", "last"} (``last``: its newest epoch then)
        self._absent: dict[int, dict[str, Any]] = {}
        self._restored: set[int] = set()  # members restored, not heard of since
        #: None, or this master's own id while it doubts it knows every origin (it became
        #: the root of a running job with nothing handed over): cleared only by knowledge of
        #: the members - a hand-over, a standby replica, a successor's copy, its own persisted
        #: members - never by one origin's news (that one origin is not all of them)
        self.doubt: int | None = None

    # ---- news --------------------------------------------------------------------------------

    def observe(self, epoch: int, origins: Lineage | None, now: float) -> bool:
        """The result of ``epoch`` covers ``origins`` (None: unknown, ignored); True when an
        origin was seen for the first time (the members changed)."""
        if origins is None:
            return False
        new = False
        ids = plain(origins)
        for o in ids:
            new = new or o not in self._first
            self._first[o] = min(self._first.get(o, epoch), epoch)
            self._last[o] = max(self._last.get(o, epoch), epoch)
            self._heard[o] = max(self._heard.get(o, now), now)
            self._restored.discard(o)
            self._back(o, epoch)
        self._forget_old()
        return new

    def join(self, origin: int, from_epoch: int, now: float) -> bool:
        """``origin`` announced it reads the job's input from ``from_epoch`` on: expected from
        then; present again if it was absent, left or retired. True if it was not a member."""
        new = origin not in self._first
        self._first[origin] = min(self._first.get(origin, from_epoch), from_epoch)
        self._last[origin] = max(self._last.get(origin, from_epoch), from_epoch)
        self._heard[origin] = max(self._heard.get(origin, now), now)
        self._restored.discard(origin)
        self._absent.pop(origin, None)
        self._back(origin, from_epoch, announced=True)
        return new

    def _back(self, origin: int, epoch: int, announced: bool = False) -> None:
        """``origin`` contributes to (or announced) ``epoch``: an open out-range ends there,
        and it is no longer absent if ``epoch`` is newer than what it had when declared."""
        absent = self._absent.get(origin)
        if absent is not None and (announced or epoch > absent["last"]):
            del self._absent[origin]
        ranges = self._out.get(origin)
        if not ranges or ranges[-1][1] is not None:
            return
        start = ranges[-1][0]
        if epoch < start and not announced:
            return  # an old epoch re-sent (a repair, a re-issue): not back in the later ones
        if epoch <= start:
            ranges.pop()  # back before the range began: expected throughout
        else:
            ranges[-1][1] = epoch
        self._retired.pop(origin, None)
        if not ranges:
            del self._out[origin]

    def declare_absent(self, origin: int, why: str, now: float) -> bool:
        """The master has evidence ``origin`` stopped without leaving (module contract): it
        stays expected. True if it is a member not already declared absent, left or retired."""
        if origin not in self._first or origin in self._absent or self.is_out(origin):
            return False
        self._absent[origin] = {"since": now, "why": why, "last": self._last.get(origin, -1)}
        return True

    def leave(self, origin: int, from_epoch: int) -> bool:
        """``origin`` declared its end: not expected from ``from_epoch``. True if it was a
        member still expected then."""
        if origin not in self._first:
            return False
        self._absent.pop(origin, None)
        return self._open(origin, from_epoch, LEFT)

    def retire(self, origin: int, from_epoch: int, now: float, why: str) -> bool:
        """The operator (or ``retire_after``) retired ``origin``: not expected from
        ``from_epoch``; the epochs before it that lack it are partial (:meth:`retired_before`).
        True if it was a member not already out."""
        if origin not in self._first or self.is_out(origin):
            return False
        self._absent.pop(origin, None)
        self._retired[origin] = {"from_epoch": from_epoch, "at": now, "why": why}
        return self._open(origin, from_epoch, RETIRED)

    def _open(self, origin: int, from_epoch: int, kind: str) -> bool:
        ranges = self._out.setdefault(origin, [])
        if ranges and ranges[-1][1] is None:
            return False
        ranges.append([from_epoch, None, kind])
        del ranges[:-MAX_RANGES]
        return True

    def doubt_until_told(self, self_id: int) -> None:
        """This master may not know every origin: doubt until it is told who they are."""
        if not any(o != self_id for o in self._first):
            self.doubt = self_id

    def _learned(self, origins: Iterable[int]) -> None:
        if self.doubt is not None and any(o != self.doubt for o in origins):
            self.doubt = None

    # ---- questions ---------------------------------------------------------------------------

    def expected(self, epoch: int) -> Lineage | None:
        """The origins epoch ``epoch`` should cover (None: no member known yet)."""
        if not self._first:
            return None
        return frozenset(
            o for o, first in self._first.items() if first <= epoch and not self._out_in(o, epoch)
        )

    def _out_in(self, origin: int, epoch: int) -> bool:
        for start, end, _ in self._out.get(origin, ()):
            if start <= epoch and (end is None or epoch < end):
                return True
        return False

    def is_out(self, origin: int) -> bool:
        """Left or retired, and not back since."""
        ranges = self._out.get(origin)
        return bool(ranges) and ranges[-1][1] is None

    def is_member(self, origin: int) -> bool:
        return origin in self._first

    def retired_before(self) -> dict[int, int]:
        """Origins retired now -> the first epoch they are not expected in: their absence from
        any earlier epoch is for good (partial)."""
        return {o: r["from_epoch"] for o, r in self._retired.items()}

    def absent(self) -> dict[int, dict[str, Any]]:
        """Origins declared absent (and not back, left or retired) -> since, why."""
        return {o: dict(a) for o, a in self._absent.items()}

    def retire_due(self, now: float, retire_after: float) -> list[int]:
        """Members still expected that nobody heard of for ``retire_after`` seconds."""
        return sorted(
            o
            for o in self._first
            if not self.is_out(o) and self._heard.get(o, now) <= now - retire_after
        )

    def heard(self, origin: int) -> float | None:
        return self._heard.get(origin)

    def last_epoch(self, origin: int) -> int | None:
        return self._last.get(origin)

    def members_set(self) -> frozenset[int]:
        return frozenset(self._first)

    def origins(self) -> int:
        return len(self._first)

    def status(self, retire_after: float | None) -> dict[str, list[dict[str, Any]]]:
        """The operator's view (``membership`` in the job's status): absent, retired, left."""
        absent = [
            {
                "origin": format(o, "x"),
                "since": a["since"],
                "last_epoch": self._last.get(o),
                "why": a["why"],
                "retire_at": (
                    None
                    if retire_after is None or o not in self._heard
                    else self._heard[o] + retire_after
                ),
            }
            for o, a in sorted(self._absent.items())
        ]
        retired = [
            {
                "origin": format(o, "x"),
                "at": r["at"],
                "from_epoch": r["from_epoch"],
                "why": r["why"],
            }
            for o, r in sorted(self._retired.items())
        ]
        left = [
            {"origin": format(o, "x"), "from_epoch": ranges[-1][0]}
            for o, ranges in sorted(self._out.items())
            if ranges[-1][1] is None and ranges[-1][2] == LEFT
        ]
        return {"absent": absent, "retired": retired, "left": left}

    # ---- bound -------------------------------------------------------------------------------

    def _forget_old(self) -> None:
        newest = max(self._last.values(), default=0)
        for o in [
            o
            for o, ranges in self._out.items()
            if ranges[-1][1] is None and ranges[-1][0] < newest - self.forget_after_epochs
        ]:
            for table in (self._first, self._last, self._heard, self._out, self._retired):
                table.pop(o, None)
            self._absent.pop(o, None)
            self._restored.discard(o)

    # ---- persistence and hand-over -----------------------------------------------------------

    def members(self) -> dict[str, Any]:
        """Origin (hex) -> the first epoch it contributed to, and the open out-ranges: what
        a master persists."""
        return {format(o, "x"): [first, self._open_range(o)] for o, first in self._first.items()}

    def _open_range(self, origin: int) -> list[Any] | None:
        ranges = self._out.get(origin)
        return list(ranges[-1]) if ranges and ranges[-1][1] is None else None

    def restore_members(self, members: Any, now: float) -> None:
        """Members persisted by an earlier run of this master (malformed entries skipped):
        expected again, each heard of ``now`` (its ``retire_after`` counts from the restart)."""
        if not isinstance(members, dict):
            return
        for key, value in members.items():
            try:
                origin = int(key, 16)
                first, out = (value, None) if isinstance(value, int) else value
                first = int(first)
            except (TypeError, ValueError):
                continue
            if origin in self._first:
                continue
            self._first[origin] = first
            self._heard[origin] = now
            self._restored.add(origin)
            self._learned((origin,))
            if _valid_range(out):
                self._out[origin] = [[int(out[0]), None, out[2]]]
                if out[2] == RETIRED:
                    self._retired[origin] = {
                        "from_epoch": int(out[0]),
                        "at": now,
                        "why": "restored",
                    }

    def export(self) -> dict[str, Any]:
        """JSON-able state for a new master."""
        return {
            "origins": {
                format(o, "x"): {
                    "first": first,
                    "last": self._last.get(o, first),
                    "heard": self._heard.get(o),
                    "out": self._out.get(o, []),
                }
                for o, first in self._first.items()
            },
            "retired": {format(o, "x"): r for o, r in self._retired.items()},
            "absent": {format(o, "x"): a for o, a in self._absent.items()},
        }

    def restore(self, state: Any) -> None:
        """Merge an exported state (malformed entries are skipped): what the other master knew
        adds to what this one knows; an origin this one heard of more recently keeps its
        state here."""
        if not isinstance(state, dict) or not isinstance(state.get("origins"), dict):
            return
        for key, value in state["origins"].items():
            try:
                origin = int(key, 16)
                first, last = int(value["first"]), int(value["last"])
                heard = float(value["heard"]) if value.get("heard") is not None else None
                out = [r for r in value.get("out") or () if _valid_range(r, closed_ok=True)]
            except (TypeError, ValueError, KeyError, AttributeError):
                continue
            mine = origin in self._first
            self._first[origin] = min(self._first.get(origin, first), first)
            self._last[origin] = max(self._last.get(origin, last), last)
            if heard is not None:
                self._heard[origin] = max(self._heard.get(origin, heard), heard)
            self._learned((origin,))
            if not mine or origin in self._restored:
                self._restored.discard(origin)
                if out:
                    self._out[origin] = [[int(s), e, k] for s, e, k in out[-MAX_RANGES:]]
        for table, key in ((self._retired, "retired"), (self._absent, "absent")):
            got = state.get(key)
            for hexid, entry in got.items() if isinstance(got, dict) else ():
                try:
                    origin = int(hexid, 16)
                except (TypeError, ValueError):
                    continue
                if isinstance(entry, dict) and origin in self._first and origin not in table:
                    if key == "retired" and not self.is_out(origin):
                        continue  # back since, by what this master saw
                    if key == "absent" and self.is_out(origin):
                        continue
                    table[origin] = dict(entry)


def _valid_range(value: Any, closed_ok: bool = False) -> bool:
    return (
        isinstance(value, list | tuple)
        and len(value) == 3
        and type(value[0]) is int
        and (value[1] is None or (closed_ok and type(value[1]) is int))
        and value[2] in (LEFT, RETIRED)
    )
