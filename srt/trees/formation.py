"""Tree formation: JOINs routed toward a tree id, adopted hop by hop; finding the master.

Contract: :meth:`Formation.attempt` routes one JOIN for a tree (routing application
``"srt"``); every node it passes through runs :meth:`Formation.forward_join` (adopt the
previous hop as a child, take the next hop as parent, and either pass the JOIN on with itself
as ``prev`` or stop it there if it was already on the tree — Scribe); the node it is delivered
to runs :meth:`Formation.deliver_join` and becomes the root. A JOIN whose path already holds
this node, or whose sender is not farther from the tree id, is refused
(:class:`~srt.trees.types.LoopRefused`); a malformed one is counted in ``bad_input["join"]``
and rejected. A failed attempt backs off (half a heartbeat, doubling to four heartbeats, with
jitter); superseded attempts (this node re-joined meanwhile) are dropped quietly.
:meth:`Formation.locate_root` asks the overlay where a tree id is delivered now.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
from typing import Any

from overlay import NodeInfo, OverlayError
from srt.trees import wire as w
from srt.trees.host import TreeEffects, TreeHost, TreeNetwork
from srt.trees.state import TreeState
from srt.trees.table import TreeTable, now
from srt.trees.types import JOINING, MEMBER, ROOT, BadTreeMessage, LoopRefused, TreeError

log = logging.getLogger(__name__)


class Formation:
    """Joining and JOIN routing for one manager (see the module docstring)."""

    def __init__(
        self,
        host: TreeHost,
        table: TreeTable,
        net: TreeNetwork,
        effects: TreeEffects,
        rng: random.Random,
    ) -> None:
        self.host = host
        self.table = table
        self.net = net
        self.effects = effects
        self.rng = rng  # shared with maintenance, which seeds it with the node id

    # ---- this node's JOIN ------------------------------------------------------------------

    async def attempt(self, tree: TreeState) -> bool:
        """Route one JOIN for ``tree``; True once attached (as member or root)."""
        if tree.joining or not self.host.accepting:
            return False
        tree.joining = True
        jid = os.urandom(w.TOKEN_BYTES)
        if tree.own_jid is not None:
            tree.old_jids.append(tree.own_jid)
        tree.own_jid = jid
        events = self.host.events
        events["join_attempts"] += 1
        try:
            await self.net.route(w.APP, tree.tree_id, w.join_message(tree.job, jid))
        except (OverlayError, TreeError) as exc:
            events["join_failures"] += 1
            log.info("JOIN for tree %x failed: %s", tree.tree_id, exc)
            if tree.own_jid == jid and tree.state != ROOT:
                if tree.parent is not None:  # it may have adopted us before the route failed
                    self.effects.spawn_leave(tree.parent, tree.tree_id, "moved")
                self.table.lose_parent(tree)
                tree.state = JOINING
                tree.own_jid = None
            hb = self.host.tunables.heartbeat_interval
            tree.backoff = min(max(tree.backoff * 2, hb / 2), 4 * hb)
            tree.next_attempt = now() + tree.backoff * (0.5 + self.rng.random())
            return False
        finally:
            tree.joining = False
        if tree.own_jid != jid:  # superseded (re-join) or made root meanwhile
            return tree.state != JOINING
        tree.own_jid = None
        tree.backoff = 0.0
        if tree.state == MEMBER and tree.parent is not None:
            self.effects.spawn_heartbeat(tree.parent, [tree])
        return tree.state != JOINING

    # ---- the master ------------------------------------------------------------------------

    async def announce_demotion(self, tree: TreeState) -> None:
        self.host.events["handovers"] += 1
        new_root = await self.locate_root(tree.tree_id)
        if new_root is not None and new_root.id == self.host.me.id:
            new_root = None
        if new_root is not None:
            tree.root = new_root
        self.table.fire("tree_root_changed", tree.tree_id, False, new_root)

    async def locate_root(self, tree_id: int, tries: int | None = None) -> NodeInfo | None:
        """The node a message for ``tree_id`` is delivered to now (one routed message per
        try; a failed try is repeated after a heartbeat interval). None if not found."""
        tunables = self.host.tunables
        for attempt in range(tunables.locate_root_tries if tries is None else tries):
            if attempt:
                await asyncio.sleep(tunables.heartbeat_interval)
            try:
                result = await self.net.route(w.APP, tree_id, {"k": "where"})
            except OverlayError:
                continue
            if result is not None and result.status == "delivered":
                return result.node
        return None

    # ---- JOINs passing through or delivered here -------------------------------------------

    def _reject(self, exc: BadTreeMessage) -> BadTreeMessage:
        self.host.bad_input["join"] += 1
        return exc

    def _accept_join(self, message: dict[str, Any]) -> w.Join:
        """Parse a routed JOIN (malformed: counted and rejected) while this layer runs."""
        try:
            j = w.parse_join(message)
        except BadTreeMessage as exc:
            raise self._reject(exc) from None
        if not self.host.accepting:
            raise TreeError("this node is leaving the tree layer")
        return j

    def forward_join(self, key: int, message: dict[str, Any], next_hop: NodeInfo) -> Any:
        j = self._accept_join(message)
        me = self.host.me
        if me.id in j.path:
            self.host.events["loops_refused"] += 1
            raise LoopRefused(f"JOIN for {key:040x} already passed through {me}")
        table = self.table
        tree = table.get(key)
        if j.prev is None:  # our own JOIN, leaving the origin
            self._check_own(tree, j)
            assert tree is not None
            table.set_parent(tree, next_hop, j.jid)
            return self._relay(message)
        table.check_child(key, j.prev)
        if tree is not None and tree.via_jid == j.jid and tree.state == MEMBER:
            table.set_parent(tree, next_hop, j.jid)  # the first next hop was dead
            return self._relay(message)
        if tree is None:  # not on the tree: become a forwarder and pass the JOIN on
            tree = table.add(key, j.job, False)
            table.adopt(tree, j.prev, j.url)
            table.set_parent(tree, next_hop, j.jid)
            self.host.events["forwarders_created"] += 1
            return self._relay(message)
        table.adopt(tree, j.prev, j.url)
        if tree.state == ROOT:  # a closer node exists: hand the master role over
            table.set_parent(tree, next_hop, j.jid)
            return self._relay(message)
        self.host.events["joins_stopped"] += 1
        return None  # already on the tree (member or re-joining): stop here (Scribe)

    def deliver_join(self, key: int, message: dict[str, Any]) -> None:
        j = self._accept_join(message)
        table = self.table
        tree = table.get(key)
        if j.prev is None:  # our own JOIN: nobody is closer, we are the root
            self._check_own(tree, j)
            assert tree is not None
        else:
            me = self.host.me
            if me.id in j.path:
                self.host.events["loops_refused"] += 1
                raise LoopRefused(f"JOIN for {key:040x} already passed through {me}")
            table.check_child(key, j.prev)
            if tree is None:
                tree = table.add(key, j.job, False)
            table.adopt(tree, j.prev, j.url)
        table.become_root(tree)

    def _check_own(self, tree: TreeState | None, j: w.Join) -> None:
        """A JOIN without a sender must be the one this node is waiting for. One of our
        superseded attempts (re-routed after we had already re-joined) is stopped quietly;
        anything else is malformed."""
        if tree is not None and tree.own_jid == j.jid:
            return
        if tree is not None and j.jid in tree.old_jids:
            self.host.events["stale_joins"] += 1
            raise TreeError("superseded JOIN attempt dropped")
        raise self._reject(BadTreeMessage("JOIN without a sender"))

    def _relay(self, message: dict[str, Any]) -> dict[str, Any]:
        me = self.host.me
        out = dict(message)
        out["prev"] = me.to_wire()
        out["url"] = self.host.data_url
        out["path"] = [*message["path"], w.id_bytes(me.id)]
        return out
