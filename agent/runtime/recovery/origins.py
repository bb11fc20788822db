"""Origins: who a job's master expects, kept true across joins, leaves, retirements and restarts.

Contract (``docs/fault-tolerance.md``, "The guarantee", "Absence, leaving and retiring", "Who
the origins are, across a master's restart"). Over the pure state of
:class:`~agent.runtime.recovery.membership.Membership` and
:class:`~agent.runtime.recovery.absence.Absence`, this part does the messaging and the I/O:

* as origin, :meth:`Origins.announce` tells the tree's master this agent reads the job's
  input from its first epoch on (retried with back-off until the master answered);
* as master, :meth:`joined` (``POST /agent/v1/origin``), :meth:`left` (a graceful stop's
  end), :meth:`retire` (``elf retire``) and :meth:`status`; one absence loop per job retires
  origins silent for ``retire_after`` and shares the membership and term with the tree's
  closest agents every :data:`MEMBERS_SHARE_PERIOD` (:meth:`accept_members` keeps such a copy
  at a likely next master);
* persistence: the members and terms are written to ``<data_dir>/origins/<node>-<app>.json``
  one write at a time (:meth:`members_changed`) and read back at start (:meth:`load`), so a
  restarted master still expects the job's origins.
"""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path
from typing import Any

import orjson

from agent.runtime.recovery.backoff import backoff
from agent.runtime.recovery.host import RecoveryParts
from agent.runtime.recovery.offsets import write_atomically
from agent.runtime.services import NetworkService, Spawner
from srt.dataplane.lineage import Lineage

log = logging.getLogger(__name__)

ANNOUNCE_ATTEMPTS = 30  # ~1 min with back-off
SHARE_TIMEOUT = 3.0  # seconds per lookup and per post of a members share
MEMBERS_SHARED = 3  # the tree's closest agents a master shares its membership with
MEMBERS_SHARE_PERIOD = 5.0  # seconds between those shares (a new successor learns in time)


def _write_json(path: Path, body: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(path, orjson.dumps(body))


class Origins:
    """The origins of one job on one agent, as origin and as master (module contract)."""

    def __init__(
        self,
        parts: RecoveryParts,
        network: NetworkService,
        tasks: Spawner,
        *,
        app_id: int,
        identity: list[Any],
        data_dir: str | None,
    ) -> None:
        self.parts = parts
        self.network = network
        self.tasks = tasks
        self.app_id = app_id
        self.identity = identity  # the job as submitted: name, creator, start epoch
        self.data_dir = data_dir
        self._dirty = False
        self._writing = False
        self._watching = False
        #: as a likely next master: the current master's membership and term, per tree
        #: (shared with the tree's closest agents: a root that inherits no state learns who
        #: the origins are from it, even when the master and its standby died together)
        self.copies: dict[int, tuple[Any, int]] = {}
        self._shared_at = 0.0

    # ---- as origin ---------------------------------------------------------------------------

    async def announce(self, tid: int) -> None:
        """Tell the tree's master this agent reads the job's input from its first epoch on,
        before any of its epochs can close: the master then expects it from that epoch, and a
        result that lacks it is tentative - even the job's first, even before the tree
        reached this agent. Retried (the master may not run the job yet) until it answered."""
        host = self.parts.host
        start = host.spec.start_epoch
        if start is None:
            return
        node, data_url = self.network.node_id, self.network.data_url
        body = {
            "job": self.parts.name,
            "tree": tid,
            "origin": f"{node:x}",
            "from": start,
            "url": data_url,  # the master probes and pulls it directly
        }
        async for _ in backoff(ANNOUNCE_ATTEMPTS, 0.1):
            if host.stopped:
                return
            try:
                url = await host.master_url(tid)
                if url == data_url:
                    self.joined(tid, node, start, data_url)
                else:
                    await self.network.client.post_json(url, "/agent/v1/origin", body)
                return
            except Exception as exc:
                host.forget_master_url(tid, exc)
                log.info(
                    "job %s: announcing this origin failed: %r; retrying", self.parts.name, exc
                )
        host.count("origin_announce_failed")

    # ---- as master ---------------------------------------------------------------------------

    def joined(self, tid: int, origin: int, start: int, url: Any = None) -> None:
        """As master (``POST /agent/v1/origin``): ``origin`` reads the job's input from
        epoch ``start`` on (its data-plane ``url``, if given, is where it is probed)."""
        parts = self.parts
        parts.host.known_tree(tid)
        parts.loss.learn_url(origin, url)
        if parts.membership.join(origin, start, time.time()):
            parts.host.count("origins_announced")
            self.members_changed()
        if parts.host.is_root(tid):
            parts.replicate(tid)

    def given_up_for(self, epoch: int) -> Lineage:
        """Origins retired from a later epoch on: their absence from ``epoch`` is for good."""
        retired = self.parts.membership.retired_before()
        return frozenset(o for o, first_out in retired.items() if epoch < first_out)

    def left(self, tid: int, origin: int, through: int) -> bool:
        """As master (``POST /agent/v1/leave``): ``origin`` stopped gracefully after
        delivering its epochs up to ``through`` (absence.py). True if it was expected."""
        host = self.parts.host
        host.known_tree(tid)
        left = self.parts.absence.left(origin, through)
        for t in host.tree_list:
            if host.is_root(t):
                self.parts.replicate(t)
        return left

    def masters_any(self) -> bool:
        host = self.parts.host
        return any(host.is_root(t) for t in host.tree_list)

    def retire(self, origin: int, why: str) -> dict[str, Any]:
        """As master of the job: retire ``origin`` now (``elf retire``; absence.py).
        Raises ``KeyError`` if it is not a member, ``LookupError`` if this agent masters
        none of the job's trees."""
        if not self.masters_any():
            raise LookupError(f"this agent masters none of job {self.parts.name!r}'s trees")
        return self.parts.absence.retire(origin, why, time.time())

    def status(self) -> dict[str, Any]:
        """As master: the absent, retired and left origins (empty elsewhere)."""
        if not self.masters_any():
            return {"absent": [], "retired": [], "left": []}
        return self.parts.membership.status(self.parts.host.spec.retire_after)

    def watch_absence(self) -> None:
        """As master: one loop retiring origins silent for ``retire_after`` (absence.py)."""
        if not self._watching:
            self._watching = True
            self.tasks.spawn(self._absence_loop(), f"{self.parts.name} retire_after")

    async def _absence_loop(self) -> None:
        host = self.parts.host
        try:
            while not host.stopped and self.masters_any():
                now = time.time()
                if now - self._shared_at >= MEMBERS_SHARE_PERIOD:
                    self._shared_at = now
                    for tid in host.tree_list:
                        if host.is_root(tid):
                            self.tasks.spawn(self._share(tid), f"{self.parts.name} members")
                await asyncio.sleep(min(1.0, host.spec.retire_after / 4))
                self.parts.absence.check(time.time())
        finally:
            self._watching = False

    async def _share(self, tid: int) -> None:
        """As master: the membership and term to the tree's closest other agents - the next
        masters if this one and its standby die - so none of them becomes a root that does
        not know who the origins are (best effort, bounded: MEMBERS_SHARED agents)."""
        parts = self.parts
        body = {
            "job": parts.name,
            "tree": tid,
            "term": parts.fence.term(tid),
            "membership": parts.membership.export(),
        }

        async def send(node: Any) -> None:
            try:
                url = await asyncio.wait_for(self.network.data_url_of(node), SHARE_TIMEOUT)
                await asyncio.wait_for(
                    self.network.client.post_json(url, "/agent/v1/members", body), SHARE_TIMEOUT
                )
            except Exception as exc:  # it may be down: the next round tries again
                log.info("job %s: members to %x: %r", parts.name, node.id, exc)

        await asyncio.gather(*(send(n) for n in parts.next_roots(tid, MEMBERS_SHARED)))

    def accept_members(self, tid: int, body: dict[str, Any]) -> None:
        """As a likely next master (``POST /agent/v1/members``): keep the master's membership
        and term (replacing an older copy). Raises ``ValueError`` on a malformed body."""
        self.parts.host.known_tree(tid)
        term, state = body.get("term"), body.get("membership")
        if type(term) is not int or term < 0 or not isinstance(state, dict):
            raise ValueError("term must be a non-negative integer and membership an object")
        held = self.copies.get(tid)
        if held is None or held[1] <= term:
            self.copies[tid] = (state, term)
        self.parts.fence.hear(tid, term)

    def knowledge_gained(self, tid: int) -> None:
        """This master learnt who the origins are (a hand-over, a replica, a copy): its
        doubtful results expect them now - new versions, flagged for whom they lack."""
        parts = self.parts
        if parts.membership.doubt is not None or not parts.host.is_root(tid):
            return
        changed = parts.store.resolve_doubt(tid, parts.membership.expected)
        if changed:
            parts.host.count("doubts_resolved", len(changed))
            self.versions_changed([(tid, e) for e in changed])
            parts.schedule_repair(tid)

    def versions_changed(self, changed: list[tuple[int, int]]) -> None:
        """New versions of stored results (a retirement, a share past repair): publish,
        replicate, commit."""
        for tid, epoch in changed:
            self.parts.publish(tid, epoch)
        for tid in {t for t, _ in changed}:
            self.parts.replicate(tid)

    def observe(self, epoch: int, origins: Lineage | None) -> None:
        """As master: note who a result covers; persist the members when they change."""
        if self.parts.membership.observe(epoch, origins, time.time()):
            self.members_changed()

    # ---- persistence -------------------------------------------------------------------------

    def path(self) -> Path | None:
        if self.data_dir is None:
            return None
        # per node: logical agents of one process may share a data directory
        name = f"{self.network.node_id:040x}-{self.app_id:040x}.json"
        return Path(self.data_dir) / "origins" / name

    async def load(self) -> None:
        """A restarted master still knows the job's origins (else its first results, holding
        only what reached it since, would look complete)."""
        path = self.path()
        if path is None:
            return
        try:
            raw = await asyncio.to_thread(path.read_bytes)
            state = orjson.loads(raw)
        except FileNotFoundError:
            return
        except (OSError, orjson.JSONDecodeError) as exc:
            log.warning(
                "job %s: origins file %s unreadable (%r); ignored", self.parts.name, path, exc
            )
            return
        if isinstance(state, dict) and state.get("identity") == self.identity:
            self.parts.membership.restore_members(state.get("members"), time.time())
            self.parts.fence.restore(state.get("terms"))

    def members_changed(self) -> None:
        """Persist the members, one write at a time (a change during a write is written
        after it: concurrent writers would race on the temporary file); share them with the
        likely next masters at the absence loop's next round."""
        self._shared_at = 0.0
        if self.path() is None:
            return
        self._dirty = True
        if not self._writing:
            self._writing = True
            self.tasks.spawn(self._write(), f"{self.parts.name} origins")

    async def _write(self) -> None:
        path = self.path()
        assert path is not None
        parts = self.parts
        try:
            while self._dirty and not parts.host.stopped:
                self._dirty = False
                body = {
                    "identity": self.identity,
                    "members": parts.membership.members(),
                    "terms": parts.fence.export(),
                }
                try:
                    await asyncio.to_thread(_write_json, path, body)
                except OSError as exc:  # disk full, say: the next change tries again
                    parts.host.count("origins_write_errors")
                    log.warning("job %s: origins file %s not written: %r", parts.name, path, exc)
                    return
        finally:
            self._writing = False

    async def forget(self) -> None:
        """The job is over here: who its origins were no longer matters."""
        path = self.path()
        if path is not None:
            await asyncio.to_thread(path.unlink, missing_ok=True)
