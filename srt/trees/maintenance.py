"""Tree maintenance: heartbeats to parents, parent and child timeouts, re-joins, pruning.

Contract: :meth:`Maintenance.run` ticks every ``heartbeat_interval`` (±10 % jitter, from a
random phase) once the overlay runs, until the owner stops accepting work. Each tick:

* drops children silent for ``child_timeout`` (``tree_child_removed(..., "failed")``);
* prunes a tree this node neither subscribes to nor forwards for (no children) once it has
  been idle for ``parent_timeout``;
* for a member: re-joins if the parent has not confirmed it for ``parent_timeout``, otherwise
  sends one ``srt.hb`` per parent node covering up to ``MAX_HB_TREES`` trees;
* for a root: starts a JOIN toward a closer node if one exists now (master hand-over);
* for a joining tree: retries the JOIN when its backoff has passed.

Both timeouts widen by ``lag_slack`` × the recent event-loop lag (an overloaded host delays
heartbeats as much as a dead peer would). The heartbeat reply carries the parent's data URL,
the trees in which it no longer counts this node as a child (→ re-join) and the root it knows.
:meth:`Maintenance.serve_hb` is the parent's side; :meth:`Maintenance.node_failed` reacts to
the overlay declaring a node failed. A tick that raises is logged and counted
(``tick_errors``); the loop goes on.
"""

from __future__ import annotations

import asyncio
import logging
import random
from typing import Any

import msgpack

from overlay import NodeInfo, OverlayError, RemoteError
from srt.trees import wire as w
from srt.trees.host import TreeEffects, TreeHost, TreeNetwork
from srt.trees.state import TreeState
from srt.trees.table import TreeTable, now
from srt.trees.types import JOINING, MEMBER, ROOT, BadTreeMessage, LoopRefused

log = logging.getLogger(__name__)

HB_REPLY_MARGIN = 256  # datagram header, MAC and response framing around a heartbeat reply
LAG_DECAY = 0.9  # the lag estimate keeps this fraction per interval


class Maintenance:
    """Heartbeats and timeouts of one manager's trees (see the module docstring)."""

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
        self.rng = rng  # shared with formation (join backoff jitter)
        self.lag = 0.0  # recent event-loop lag (s), widens heartbeat timeouts

    async def run(self) -> None:
        host = self.host
        while not self.net.running and host.accepting:
            await asyncio.sleep(host.tunables.heartbeat_interval)
        self.rng.seed(self.net.id)  # deterministic per node in the simulator
        await asyncio.sleep(self.rng.uniform(0, host.tunables.heartbeat_interval))
        while host.accepting:
            try:
                self.tick()
            except Exception:
                host.events["tick_errors"] += 1
                log.exception("tree maintenance tick failed")
            pause = host.tunables.heartbeat_interval * self.rng.uniform(0.9, 1.1)
            started = now()
            await asyncio.sleep(pause)
            # Event-loop lag (an overloaded host) delays our heartbeats and their replies as
            # much as a dead peer would: widen the timeouts by it instead of re-joining every
            # tree at once, which would only add load. Decays ~10 % per interval.
            lag = max(0.0, now() - started - pause)
            self.lag = max(lag, self.lag * LAG_DECAY)

    def tick(self) -> None:
        if not self.net.running:
            return
        at = now()
        table, tunables = self.table, self.host.tunables
        departed = table.departed_ids(at)
        by_parent: dict[int, tuple[NodeInfo, list[TreeState]]] = {}
        slack = tunables.lag_slack * self.lag
        child_timeout, parent_timeout = tunables.tree_child_timeout, tunables.tree_parent_timeout
        for tree in list(table.trees.values()):
            for cid, seen in list(tree.child_seen.items()):
                if at - seen > child_timeout + slack:
                    table.remove_child(tree, cid, "failed")
            idle = at - tree.touched > parent_timeout  # (children may be on their way)
            if not tree.subscriber and not tree.children and not tree.joining and idle:
                self.host.events["pruned"] += 1
                self.effects.spawn_drop(tree)
                continue
            if tree.state == MEMBER and tree.parent is not None:
                if at - tree.parent_ok > parent_timeout + slack:
                    table.rejoin(tree, "parent silent")
                    continue
                if not tree.joining:  # our JOIN may still be on its way to the parent
                    by_parent.setdefault(tree.parent.id, (tree.parent, []))[1].append(tree)
            elif tree.state == ROOT:
                closer = self.net.next_hop(tree.tree_id, departed)
                if not tree.joining and closer is not None:
                    self.effects.spawn_attempt(tree)  # a closer node exists: hand over
            elif tree.state == JOINING and not tree.joining and at >= tree.next_attempt:
                self.effects.spawn_attempt(tree)
        for parent, trees in by_parent.values():
            for i in range(0, len(trees), w.MAX_HB_TREES):
                self.effects.spawn_heartbeat(parent, trees[i : i + w.MAX_HB_TREES])

    async def heartbeat(self, parent: NodeInfo, trees: list[TreeState]) -> None:
        host, table = self.host, self.table
        payload = {"url": host.data_url, "trees": [w.id_bytes(t.tree_id) for t in trees]}
        host.events["hb_sent"] += 1
        try:
            raw = await self.net.request(
                parent, w.HB, payload, timeout=host.tunables.heartbeat_interval, retries=0
            )
            reply = w.parse_hb_reply(raw, len(trees))
        except RemoteError as exc:  # the parent has no tree layer / rejects us: re-join
            host.events["hb_rejected"] += 1
            log.info("heartbeat to %s rejected: %s", parent, exc)
            for t in trees:
                if t.has_parent(parent.id):
                    table.rejoin(t, "parent rejected heartbeat")
            return
        except OverlayError:
            host.events["hb_missed"] += 1
            return
        except BadTreeMessage as exc:
            host.bad_input["hb_reply"] += 1
            log.info("bad heartbeat reply from %s: %s", parent, exc)
            return
        for t, root in zip(trees, reply.roots, strict=True):
            if not table.current(t) or not t.has_parent(parent.id):
                # we moved while the heartbeat was on its way, and it (re-)adopted us
                if t.tree_id not in reply.lost:
                    reason = "moved" if table.current(t) else "left"
                    self.effects.spawn_leave(parent, t.tree_id, reason)
                continue
            if t.tree_id in reply.lost:
                if now() - t.parent_since < host.tunables.heartbeat_interval:
                    # the heartbeat may have overtaken the JOIN that makes us its child
                    host.events["hb_lost_early"] += 1
                    continue
                table.rejoin(t, "parent does not count us as a child")
            else:
                table.parent_confirmed(t, reply.url, root)

    def node_failed(self, info: NodeInfo) -> None:
        if not self.host.accepting:
            return
        table = self.table
        for tree in list(table.trees.values()):
            if info.id in tree.children:
                table.remove_child(tree, info.id, "failed")
            if tree.has_parent(info.id):
                table.rejoin(tree, "parent failed")

    def serve_hb(self, payload: Any, sender: NodeInfo) -> dict[str, Any]:
        """``srt.hb`` at the parent: re-adopt the sender in each tree we are still on."""
        hb = w.parse_hb(payload)
        host, table = self.host, self.table
        lost: list[bytes] = []
        roots: list[Any] = []
        for tid in hb.trees:
            tree = table.get(tid)
            ok = tree is not None  # (while stopping too: the children are about to be moved)
            if ok:
                assert tree is not None
                try:
                    table.adopt(tree, sender, hb.url)  # re-adopts a child we had dropped
                except LoopRefused:
                    ok = False
            if ok:
                assert tree is not None
                roots.append(w.wire(host.me if tree.state == ROOT else tree.root))
            else:
                lost.append(w.id_bytes(tid))
                roots.append(None)
        reply = {"url": host.data_url, "lost": lost, "roots": roots}
        if len(msgpack.packb(reply)) > self.net.tunables.max_datagram - HB_REPLY_MARGIN:
            reply["roots"] = [None] * len(roots)  # the roots are a hint; the rest must fit
        return reply
