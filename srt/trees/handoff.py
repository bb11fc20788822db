"""Leaving and hand-over: a node's graceful exit from its trees, and the other side of it.

Contract. The leaving side (:meth:`Handoff.hand_off`, run for every tree by ``stop()``): a
member tells each child to move to its own parent (``srt.moved`` naming it); a root first asks
the closest other node it knows to take the master role over (``srt.takeover``, up to three
candidates) and moves the children there (none found: the children re-join by routing); then
the parent is told ``srt.leave`` ("left"). :meth:`Handoff.drop_tree` leaves one tree (an
unsubscribed leaf, a pruned forwarder). The receiving side: :meth:`serve_leave` removes the
child, :meth:`serve_moved` re-attaches to the named node via ``srt.adopt`` (which enforces the
loop-freedom invariant; refused or failed → re-join), :meth:`serve_adopt` adopts, and
:meth:`serve_takeover` makes this node the root. A node that announced it left is remembered
for a while so a root does not hand the role straight back to it. Requests to a node that is
gone are best-effort: a lost ``srt.leave`` is repaired by the parent's child timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from overlay import NodeInfo, OverlayError
from srt.trees import wire as w
from srt.trees.host import TreeHost, TreeNetwork
from srt.trees.state import TreeState
from srt.trees.table import TreeTable, now
from srt.trees.types import MEMBER, ROOT, LoopRefused, TreeError

log = logging.getLogger(__name__)

SUCCESSOR_CANDIDATES = 3  # closest known nodes asked to take the master role over


class Handoff:
    """Graceful leaving and its counterpart for one manager (see the module docstring)."""

    def __init__(self, host: TreeHost, table: TreeTable, net: TreeNetwork) -> None:
        self.host = host
        self.table = table
        self.net = net

    # ---- leaving ---------------------------------------------------------------------------

    async def tell_leave(self, target: NodeInfo, tree_id: int, reason: str) -> None:
        with contextlib.suppress(OverlayError):
            await self.net.request(target, w.LEAVE, {"t": w.id_bytes(tree_id), "reason": reason})

    async def drop_tree(self, tree: TreeState) -> None:
        self.table.discard(tree)
        if tree.parent is not None and tree.state == MEMBER:
            await self.tell_leave(tree.parent, tree.tree_id, "left")

    async def hand_off(self, tree: TreeState) -> None:
        """Graceful exit from one tree: move the children to our parent (or, at the root, to
        a successor told to take over), then tell our parent we left."""
        new_parent: NodeInfo | None = None
        if tree.state == ROOT and tree.children:
            new_parent = await self._pick_successor(tree)
        elif tree.state == MEMBER:
            new_parent = tree.parent
        if tree.announced_root:
            tree.announced_root = False
            self.table.fire("tree_root_changed", tree.tree_id, False, new_parent)
        payload = {"t": w.id_bytes(tree.tree_id), "parent": w.wire(new_parent)}
        moves = [
            self.net.request(child, w.MOVED, payload)
            for child in tree.children.values()
            if new_parent is None or child.id != new_parent.id
        ]
        if moves:
            await asyncio.gather(*moves, return_exceptions=True)
        if tree.state == MEMBER and tree.parent is not None:
            await self.tell_leave(tree.parent, tree.tree_id, "left")

    async def _pick_successor(self, tree: TreeState) -> NodeInfo | None:
        """The closest other node we know, told to take the master role over."""
        tid = tree.tree_id
        candidates = sorted(self.net.contacts(), key=lambda n: n.id ^ tid)
        for cand in candidates[:SUCCESSOR_CANDIDATES]:
            try:
                reply = await self.net.request(
                    cand, w.TAKEOVER, {"t": w.id_bytes(tid), "job": tree.job}
                )
            except OverlayError:
                continue
            if isinstance(reply, dict) and reply.get("ok") is True:
                return cand
        return None

    # ---- the other side --------------------------------------------------------------------

    def serve_leave(self, payload: Any, sender: NodeInfo) -> dict[str, Any]:
        tid, reason = w.parse_tree_reason(payload, "leave")
        if reason == "left":
            self.table.note_departure(sender.id)
        tree = self.table.get(tid)
        if tree is not None:
            self.table.remove_child(tree, sender.id, reason)
        return {"ok": True}

    async def serve_moved(self, payload: Any, sender: NodeInfo) -> dict[str, Any]:
        """Our parent is leaving: attach to the node it names (or re-join by routing)."""
        tid, new_parent = w.parse_moved(payload)
        table, host = self.table, self.host
        tree = table.get(tid)
        if tree is None or not tree.has_parent(sender.id):
            return {"ok": False}
        host.events["moved"] += 1
        table.note_departure(sender.id)
        if new_parent is None or new_parent.id == host.me.id:
            if new_parent is None:
                table.rejoin(tree, "parent left")
                tree.next_attempt = now() + host.tunables.heartbeat_interval
            return {"ok": True}
        try:
            table.check_parent_candidate(tree, new_parent)
            reply = await self.net.request(
                new_parent,
                w.ADOPT,
                {"t": w.id_bytes(tid), "job": tree.job, "url": host.data_url},
            )
            if not isinstance(reply, dict) or reply.get("ok") is not True:
                raise TreeError(f"{new_parent} refused to adopt: {reply!r}")
            url = w.text(reply.get("url", ""), "adopt reply url", w.MAX_URL)
            root = w.opt_node(reply.get("root"), "adopt reply root")
        except (OverlayError, TreeError) as exc:
            log.info("moving to %s failed (%s); re-joining", new_parent, exc)
            table.rejoin(tree, "adoption by the new parent failed")
            return {"ok": False}
        if not tree.has_parent(sender.id):
            return {"ok": False}  # something else happened meanwhile
        table.set_parent(tree, new_parent, None)
        table.parent_confirmed(tree, url, root)
        return {"ok": True}

    def serve_adopt(self, payload: Any, sender: NodeInfo) -> dict[str, Any]:
        tid, _job, url = w.parse_adopt(payload)
        tree = self.table.get(tid)
        if tree is None or not self.host.accepting:
            return {"ok": False, "reason": "not on the tree"}
        try:
            self.table.adopt(tree, sender, url)
        except LoopRefused as exc:
            return {"ok": False, "reason": str(exc)}
        root = self.host.me if tree.state == ROOT else tree.root
        return {"ok": True, "url": self.host.data_url, "root": w.wire(root)}

    def serve_takeover(self, payload: Any, sender: NodeInfo) -> dict[str, Any]:
        """The root is leaving and names us its successor."""
        tid, job = w.parse_takeover(payload)
        if not self.host.accepting:
            return {"ok": False}
        table = self.table
        table.note_departure(sender.id)
        tree = table.get(tid)
        if tree is None:
            tree = table.add(tid, job, False)
        if tree.has_parent(sender.id):
            table.lose_parent(tree)  # no goodbye needed: the sender is leaving
        table.remove_child(tree, sender.id, "left")
        table.become_root(tree)
        return {"ok": True}
