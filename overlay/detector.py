"""Failure detection: who is alive, as one node sees it (the I/O around :mod:`overlay.membership`).

Contract:

* **Learning.** Every authenticated message teaches its sender (``direct``); ``find_node``
  replies teach second-hand news, ignored for known or tombstoned nodes. A node is tracked only
  if it would enter the :class:`~overlay.neighbourhood.Neighbourhood` (leaf set or table); a
  contact that the table evicts and the leaf set does not hold is forgotten again.
* **Probes and suspicion.** Each :meth:`FailureDetector.tick` (every ``probe_interval``) takes
  one watched contact (leaf set ∪ designated entries, round-robin in a shuffled order) and
  pings it - unless it was heard from (a request or a reply of any kind: its own probe of us,
  a tree's heartbeat) within the last half round (``probe_interval`` × the round's length ×
  :data:`HEARD_LATELY_SHARE`): of a pair that watches each other, the one whose turn comes
  in the half round after the other's probe skips, and the other, not heard from since its
  own probe a round ago, probes - one probe a round instead of two - and a parent and child
  of a tree, which talk every heartbeat, none. The price: a contact that dies just after it
  was heard is probed half a round later at most (detection within 1.5 rounds, not one).
  Every suspected contact is pinged at every tick. After ``misses_before_suspect``
  consecutive missed replies — probes, routed hops or requests, reported through
  :meth:`on_missed_reply` — a node is suspected and leaves routing at once; any reply
  (:meth:`on_reply_from`) revives it.
* **Local health.** A reply that comes after its request timed out (a *late reply*, reported
  through :meth:`on_late_reply`) counts as a reply - the peer is revived, its misses reset -
  and raises the node's :class:`~overlay.health.LocalHealth`: the probe timeout, the
  detection tick and ``fail_timeout`` are multiplied by ``1 + level``
  (:meth:`FailureDetector.timeout`). An overloaded node (its event loop behind) or a slow
  network stretches them instead of declaring live peers failed; a silent peer still fails.
* **Failure.** Suspected for ``fail_timeout`` → declared failed: removed everywhere (kademlia's
  k-buckets included), tombstoned, put on the failed list, ``failed`` fires. A ``leave`` RPC
  does the same without the failed list.
* **Rumours.** Every removal is piggybacked on the next pings and pongs; a received rumour
  removes the node unless this node heard from it lately (:class:`Membership` decides). A
  failure declared on evidence (:meth:`FailureDetector.declare_failed`) is also told at once,
  as a ``GONE`` rumour believed even by nodes that heard from the peer lately, to the
  ``evidence_fanout`` contacts closest to the dead node's id: they hold its keys next (a
  job's standby master among them), so they route around it - and take over its roots -
  within a round trip instead of after their own probes and ``fail_timeout``.
* **The failed list.** Failed nodes are re-pinged now and then (:meth:`rejoin`, also the
  bootstrap addresses while this node knows nobody): after a partition heals each side finds
  the other again this way; an answer revives the node and asks it for our neighbourhood.

The detector owns the :class:`Membership` state, the probe order and the failed list. It
reaches the network only through the ``call`` callable and the :class:`Contacts` it is given.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from overlay import ids
from overlay.config import Tunables
from overlay.health import LocalHealth
from overlay.membership import FAILED, GONE, LEFT, Membership
from overlay.metrics import Metrics
from overlay.neighbourhood import Neighbourhood
from overlay.nodeinfo import NodeInfo
from overlay.ports import Address, Call, Contacts, Spawn
from overlay.protocol import OK, TIMEOUT

log = logging.getLogger(__name__)

RUMOURS_PER_MESSAGE = 32  # read at most this many rumours from one ping or pong
#: a watched contact heard from within this share of a probe round is not probed in it. A half:
#: of a pair probing each other exactly one skips (the one whose turn comes within half a
#: round after the other's probe), and a contact silent since just after it was heard is
#: probed within 1.5 rounds; 0.9 cut probes further (0.91 a second against 1.24 in the 60-node
#: simulation) but took a partitioned simulation 31 s to separate (15 s without the skip, the
#: test's bound 30 s) and its heal over 120 s
HEARD_LATELY_SHARE = 0.5

Event = Callable[[NodeInfo], None]


class FailureDetector:
    """Membership and failure detection of the node ``me``; see the module docstring.

    ``running()`` says whether the node runs, ``call(address, name, args, timeout)`` sends one
    RPC (resolving to ``(status, result)``), ``spawn(coro, what)`` runs a background task the
    node owns, ``joined(info)``/``failed(info)`` tell the node's listeners, ``rng`` is the
    node's seeded random source (shared, so the simulator's runs repeat) and ``bootstrap`` the
    addresses to try again when this node knows nobody."""

    def __init__(
        self,
        me: NodeInfo,
        tunables: Tunables,
        metrics: Metrics,
        hood: Neighbourhood,
        contacts: Contacts,
        *,
        call: Call,
        running: Callable[[], bool],
        spawn: Spawn,
        joined: Event,
        failed: Event,
        rng: random.Random,
        bootstrap: list[Address],
    ) -> None:
        self._me = me
        self._t = tunables
        self._metrics = metrics
        self._hood = hood
        self._contacts = contacts
        self._call = call
        self._running = running
        self._spawn = spawn
        self._joined = joined
        self._failed = failed
        self._rng = rng
        self._bootstrap = bootstrap
        self.membership = Membership(me.id, tunables)
        self.health = LocalHealth(tunables.health_max_level, tunables.health_decay_after)
        self._probe_queue: list[int] = []
        # a contact heard from within this many seconds (half the round the probe queue was
        # filled for) needs no probe in it (module docstring)
        self._heard_lately = 0.0
        self._probing: set[int] = set()  # peers with a probe in flight
        # Failed nodes, re-pinged now and then: after a partition heals each side finds the
        # other again this way (tombstones stop second-hand news of them meanwhile).
        self._graveyard: OrderedDict[int, tuple[NodeInfo, float]] = OrderedDict()

    # ---- learning ------------------------------------------------------------------------------

    def learn(self, info: NodeInfo, direct: bool) -> None:
        """``info`` spoke to us (``direct``) or was mentioned by another node."""
        if not self._running():
            return
        membership = self.membership
        if not direct and info.id in membership.peers:
            return  # second-hand news of a known peer changes nothing (Membership.learn)
        if membership.get(info.id) is None and not self._hood.wanted(
            info, direct, membership.tombstones
        ):
            return  # would not enter any table: not worth tracking
        change = membership.learn(info, _now(), direct)
        if change is None:
            return
        self._admit(info)
        if change == "new" and info.id in membership.peers:
            self._metrics.event("nodes_joined")
            self._joined(info)

    def _admit(self, info: NodeInfo) -> None:
        kept, dropped = self._hood.admit(info)
        if dropped is not None:
            self._forget(dropped)
        if kept:
            self._contacts.welcome(info)
            self._probe_queue.clear()  # the watched set changed
        else:
            self._forget(info)

    def _forget(self, info: NodeInfo) -> None:
        self.membership.forget(info.id)
        self._contacts.remove(info)

    # ---- replies and silences ------------------------------------------------------------------

    def timeout(self, base: float) -> float:
        """``base`` (a probe or request timeout) stretched by the local health."""
        return base * self.health.multiplier

    def on_late_reply(self, address: Address) -> None:
        """A reply from ``address`` came after its request timed out: the peer lives, and
        this node's timeouts are too short for the round trips it sees now."""
        self.health.late_reply()
        node_id = self.membership.at_address(address)
        if node_id is not None:
            self._revive(node_id)

    def on_reply_from(self, node_id: int) -> None:
        """``node_id`` answered a request of ours: a suspected node is revived."""
        self.health.reply_in_time()
        self._revive(node_id)

    def _revive(self, node_id: int) -> None:
        state = self.membership.get(node_id)
        if state is not None and self.membership.heard(node_id, _now()):
            self._metrics.event("nodes_revived")
            self._admit(state.info)

    def on_missed_reply(self, node_id: int) -> None:
        """``node_id`` did not answer in time: enough misses in a row make it suspected."""
        if self.membership.missed(node_id, _now()):
            state = self.membership.get(node_id)
            if state is not None:
                self._metrics.event("nodes_suspected")
                self._hood.retire(state.info.id, suspected=True)
                self._probe_queue.clear()

    def routable(self, node_id: int) -> bool:
        """Not known to be failed, departed or suspected (an unknown node - a route's
        origin, say - gets the benefit of the doubt)."""
        if node_id in self.membership.tombstones:
            return False
        return not self.membership.is_suspected(node_id)

    def declare_failed(self, node_id: int) -> bool:
        """Another layer has proof ``node_id``'s process is gone (its TCP port refuses
        connections): fail it now instead of after the probe misses and ``fail_timeout``.
        A reply from it later revives it as usual. True if it was a member."""
        state = self.membership.get(node_id)
        if state is None:
            return False
        self._metrics.event("nodes_failed_by_evidence")
        self._declare_failed(node_id, FAILED)
        self._tell_neighbours(state.info)
        return True

    def _tell_neighbours(self, info: NodeInfo) -> None:
        """Send the proof of ``info``'s death to the contacts that take over its keys."""
        k = self._t.evidence_fanout
        targets = self._hood.neighbours_of(info.id, exclude=info.id, k=k) if k > 0 else []
        rumour = [[GONE, ids.to_bytes(info.id)]]
        for target in targets:
            self._metrics.event("evidence_rumours_sent")
            self._spawn(self._ping_with(target, rumour), "evidence rumour")

    async def _ping_with(self, target: NodeInfo, rumours: list[Any]) -> None:
        status, result = await self._call(
            target.address, "ping", [rumours], self.timeout(self._t.probe_timeout)
        )
        if status != TIMEOUT:
            self.on_reply_from(target.id)
            if status == OK and isinstance(result, list) and len(result) == 2:
                self._apply_rumours(result[1])

    def _declare_failed(self, node_id: int, kind: str) -> None:
        if self.membership.get(node_id) is None:
            return
        state = self.membership.remove(node_id, _now(), kind)
        assert state is not None
        info = state.info
        self._hood.retire(info.id)
        self._contacts.remove(info)
        self._probe_queue.clear()
        if kind == FAILED:
            self._bury(info)
        self._metrics.event("nodes_failed" if kind == FAILED else "nodes_left")
        self._failed(info)

    # ---- pings, leaves and rumours -------------------------------------------------------------

    async def ping_address(self, addr: Address) -> NodeInfo | None:
        """Bootstrap ping: learn who listens at ``addr`` (``None``: nobody answered)."""
        t = self._t
        for _ in range(t.request_retries + 1):
            status, result = await self._call(
                addr, "ping", [self.membership.take_rumours()], t.request_timeout
            )
            if status == OK:
                try:
                    info = NodeInfo.from_wire(result[0])
                except (ValueError, TypeError, IndexError):
                    self._metrics.drop("malformed_reply")
                    return None
                self.learn(info, direct=True)
                self._apply_rumours(result[1] if len(result) > 1 else [])
                return info
        return None

    def serve_ping(self, sender: NodeInfo, rumours: Any) -> list[Any]:
        """The ``ping`` RPC: take the sender's rumours, answer with ours."""
        self._apply_rumours(rumours)
        return [self._me.to_wire(), self.membership.take_rumours()]

    def serve_leave(self, sender: NodeInfo) -> bool:
        """The ``leave`` RPC: the sender is going away gracefully."""
        self._declare_failed(sender.id, LEFT)
        return True

    def _apply_rumours(self, rumours: Any) -> None:
        if not isinstance(rumours, list):
            return
        now = _now()
        for item in rumours[:RUMOURS_PER_MESSAGE]:
            try:
                kind, raw = item
                node_id = ids.from_bytes(raw)
            except (TypeError, ValueError):
                self._metrics.drop("malformed_rumour")
                continue
            if kind not in (FAILED, LEFT, GONE):
                continue
            state = self.membership.get(node_id)
            if (
                self.membership.accept_rumour(
                    kind, node_id, now, self.timeout(self._t.fail_timeout)
                )
                and state is not None
            ):
                self._metrics.event("rumours_applied")
                self._hood.retire(state.info.id)
                self._contacts.remove(state.info)
                self._probe_queue.clear()
                if kind != LEFT:
                    self._bury(state.info)
                self._failed(state.info)

    # ---- the failed list -----------------------------------------------------------------------

    def _bury(self, info: NodeInfo) -> None:
        self._graveyard.pop(info.id, None)
        self._graveyard[info.id] = (info, _now())
        while len(self._graveyard) > self._t.graveyard_size:
            self._graveyard.popitem(last=False)

    async def rejoin(self) -> None:
        """Re-ping a few failed nodes (and the bootstrap addresses if we know nobody); any
        answer revives the node directly and we ask it for our neighbourhood."""
        t = self._t
        now = _now()
        for node_id in [i for i, (_, at) in self._graveyard.items() if now - at > t.graveyard_ttl]:
            del self._graveyard[node_id]
        targets = [info.address for info, _ in self._graveyard.values()]
        if not self._hood.contacts():
            targets.extend(self._bootstrap)
        if not targets:
            return
        picks = self._rng.sample(targets, min(t.rejoin_batch, len(targets)))
        for addr in picks:
            status, result = await self._call(
                addr, "ping", [self.membership.take_rumours()], self.timeout(t.probe_timeout)
            )
            if status != OK:
                continue
            try:
                info = NodeInfo.from_wire(result[0])
            except (ValueError, TypeError, IndexError):
                continue
            self._graveyard.pop(info.id, None)
            self.learn(info, direct=True)
            self._metrics.event("rejoined")
            if info.id in self.membership.peers:
                await self._contacts.find_node(info, self._me.id)

    # ---- probing -------------------------------------------------------------------------------

    def tick(self) -> None:
        """One round of detection: declare overdue suspects failed, probe every suspect and
        the next watched contact, now and then prune old tombstones."""
        now = _now()
        for node_id in self.membership.due_failures(now, self.timeout(self._t.fail_timeout)):
            self._declare_failed(node_id, FAILED)
        # One probe in flight per peer: stretched timeouts (overlay/health.py) outlast the
        # tick, and a second probe to a slow peer would only add to what makes it slow.
        for info in self.membership.suspected():
            if info.id not in self._probing:
                self._spawn(self._probe(info), "probe")
        if not self._probe_queue:
            self._probe_queue = self._probe_order()
            round_s = self.timeout(self._t.probe_interval) * len(self._probe_queue)
            self._heard_lately = HEARD_LATELY_SHARE * round_s
        while self._probe_queue:
            node_id = self._probe_queue.pop()
            state = self.membership.get(node_id)
            if state is not None and state.suspected_since is None:
                heard = state.last_heard
                if heard is not None and now - heard < self._heard_lately:
                    self._metrics.event("probes_skipped")  # it spoke lately: its turn passes
                elif node_id not in self._probing:
                    self._spawn(self._probe(state.info), "probe")
                break
        if self._rng.random() < 0.05:
            self.membership.prune_tombstones(now)

    def suspected_count(self) -> int:
        return len(self.membership.suspected())

    def _probe_order(self) -> list[int]:
        order = [n.id for n in self._hood.watched()]
        self._rng.shuffle(order)
        return order

    async def _probe(self, info: NodeInfo) -> None:
        """Probe until a reply or until the peer is suspected (misses are consecutive)."""
        self._probing.add(info.id)
        try:
            await self._probe_until_answered(info)
        finally:
            self._probing.discard(info.id)

    async def _probe_until_answered(self, info: NodeInfo) -> None:
        t = self._t
        for _ in range(t.misses_before_suspect):
            if not self._running() or self.membership.get(info.id) is None:
                return
            status, result = await self._call(
                info.address,
                "ping",
                [self.membership.take_rumours()],
                self.timeout(t.probe_timeout),
            )
            if status != TIMEOUT:
                self.on_reply_from(info.id)
                if status == OK and isinstance(result, list) and len(result) == 2:
                    self._apply_rumours(result[1])
                return
            self.on_missed_reply(info.id)
            if self.membership.is_suspected(info.id):
                return


def _now() -> float:
    """The event loop's clock (virtual in the simulator)."""
    return asyncio.get_running_loop().time()
