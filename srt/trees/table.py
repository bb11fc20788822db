"""TreeTable: this node's trees and their local state changes (no network I/O of its own).

Contract: the table owns the :class:`~srt.trees.state.TreeState` records of every tree this
node is on, the registered :class:`~srt.trees.types.TreeListener` s and the memory of nodes
that said they are leaving. Every change of a parent, child or role goes through it, which is
where the loop-freedom invariant is enforced: a child must be strictly farther from the tree
id than this node and a parent strictly closer (:class:`~srt.trees.types.LoopRefused`
otherwise, counted in ``events["loops_refused"]``). Listeners are told of each change exactly
once, synchronously; a listener that raises is logged and counted (``listener_errors``), never
propagated. A change that needs the network (telling an old parent we moved, re-joining,
finding the new master after a demotion) is handed to :class:`TreeEffects`, which runs it in
the background: the table itself never awaits.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from typing import Any

from overlay import NodeInfo
from srt.trees.host import TreeEffects, TreeHost
from srt.trees.state import TreeState, closer
from srt.trees.types import JOINING, MEMBER, ROOT, LoopRefused, TreeListener

log = logging.getLogger(__name__)

DEPARTED_TIMEOUTS = 4  # a departed node is remembered this many parent timeouts


def now() -> float:
    """The event loop's clock (every timestamp in a :class:`TreeState` uses it)."""
    return asyncio.get_running_loop().time()


class TreeTable:
    """This node's trees (see the module docstring for the contract)."""

    def __init__(self, host: TreeHost, effects: TreeEffects) -> None:
        self.host = host
        self.effects = effects
        self.trees: dict[int, TreeState] = {}
        self.listeners: list[TreeListener] = []
        self._departed: dict[int, float] = {}  # nodes that told us they are leaving -> when

    # ---- records -------------------------------------------------------------------------

    def get(self, tree_id: int) -> TreeState | None:
        return self.trees.get(tree_id)

    def add(self, tree_id: int, job: str, subscriber: bool) -> TreeState:
        """A new record for ``tree_id`` (replacing none: the caller checked there is none)."""
        tree = self.trees[tree_id] = TreeState(tree_id, job, subscriber, touched=now())
        return tree

    def current(self, tree: TreeState) -> bool:
        """True if ``tree`` is still this node's record of its tree (not dropped/replaced)."""
        return self.trees.get(tree.tree_id) is tree

    def discard(self, tree: TreeState) -> None:
        if self.current(tree):
            del self.trees[tree.tree_id]

    def counts(self) -> dict[str, int]:
        states = Counter(t.state for t in self.trees.values())
        return {
            "trees": len(self.trees),
            "roots": states[ROOT],
            "members": states[MEMBER],
            "joining": states[JOINING],
            "children": sum(len(t.children) for t in self.trees.values()),
        }

    # ---- listeners -----------------------------------------------------------------------

    def fire(self, method: str, *args: Any) -> None:
        for listener in list(self.listeners):
            fn = getattr(listener, method, None)
            if fn is None:
                continue
            try:
                fn(*args)
            except Exception:
                self.host.events["listener_errors"] += 1
                log.exception("tree listener %s failed", method)

    # ---- departed nodes ------------------------------------------------------------------

    def note_departure(self, node_id: int) -> None:
        """``node_id`` told us it is leaving (stop hand-off): a root ignores it as a "closer
        node" for a while, so the successor it named does not hand the role straight back."""
        self._departed[node_id] = now()

    def departed_ids(self, at: float) -> list[int]:
        horizon = DEPARTED_TIMEOUTS * self.host.tunables.tree_parent_timeout
        for node_id in [i for i, t in self._departed.items() if at - t > horizon]:
            del self._departed[node_id]
        return list(self._departed)

    # ---- the invariant -------------------------------------------------------------------

    def check_child(self, tree_id: int, child: NodeInfo) -> None:
        """The invariant: a child is strictly farther from the tree id than its parent (so a
        node can never adopt itself or any of its ancestors)."""
        me = self.host.me.id
        if child.id == me or not closer(me, child.id, tree_id):
            self.host.events["loops_refused"] += 1
            raise LoopRefused(
                f"refusing child {child} for tree {tree_id:040x}: it is not farther from the "
                "tree id than this node (parents must be strictly closer)"
            )

    def check_parent_candidate(self, tree: TreeState, parent: NodeInfo) -> None:
        if not closer(parent.id, self.host.me.id, tree.tree_id):
            self.host.events["loops_refused"] += 1
            raise LoopRefused(f"{parent} is not closer to the tree id than this node")

    # ---- children ------------------------------------------------------------------------

    def adopt(self, tree: TreeState, child: NodeInfo, url: str) -> None:
        self.check_child(tree.tree_id, child)
        known = child.id in tree.children
        tree.children[child.id] = child
        if url:
            tree.child_urls[child.id] = url
        tree.child_seen[child.id] = now()
        if not known:
            self.host.events["children_added"] += 1
            self.fire("tree_child_added", tree.tree_id, child)

    def remove_child(self, tree: TreeState, child_id: int, reason: str) -> None:
        if tree.children.pop(child_id, None) is None:
            return
        tree.child_urls.pop(child_id, None)
        tree.child_seen.pop(child_id, None)
        self.host.events[f"children_{reason}"] += 1
        self.fire("tree_child_removed", tree.tree_id, child_id, reason)

    # ---- parent and role -----------------------------------------------------------------

    def set_parent(self, tree: TreeState, parent: NodeInfo, jid: bytes | None) -> None:
        """Take ``parent`` (strictly closer, by the invariant) as this node's parent."""
        if not closer(parent.id, self.host.me.id, tree.tree_id):
            self.host.events["loops_refused"] += 1
            raise LoopRefused(f"next hop {parent} is not closer to the tree id")
        if parent.id in tree.children:  # cannot happen with the invariant; belt and braces
            self.remove_child(tree, parent.id, "moved")
        old = tree.parent or tree.left_parent
        tree.left_parent = None
        if old is not None and old.id != parent.id:
            # a replacement next hop, a hand-off, or a re-join away from a silent parent:
            # the old parent may count us, tell it
            self.effects.spawn_leave(old, tree.tree_id, "moved")
        if not tree.has_parent(parent.id):
            tree.parent_url = None
        tree.parent = parent
        tree.state = MEMBER
        tree.via_jid = jid
        tree.parent_ok = tree.parent_since = now()
        if tree.announced_root:  # we were the master: a closer node has the role now
            tree.announced_root = False
            self.effects.spawn_demotion(tree)

    def parent_confirmed(self, tree: TreeState, url: str, root: NodeInfo | None) -> None:
        tree.parent_ok = now()
        if url:
            tree.parent_url = url
        if root is not None:
            tree.root = root
        assert tree.parent is not None
        if tree.announced_parent != tree.parent.id:
            tree.announced_parent = tree.parent.id
            self.fire("tree_parent_changed", tree.tree_id, tree.parent)

    def lose_parent(self, tree: TreeState) -> None:
        tree.parent = None
        tree.parent_url = None
        tree.via_jid = None
        if tree.announced_parent is not None:
            tree.announced_parent = None
            self.fire("tree_parent_changed", tree.tree_id, None)

    def become_root(self, tree: TreeState) -> None:
        if tree.state == ROOT:
            return
        old = tree.parent or tree.left_parent
        tree.left_parent = None
        self.lose_parent(tree)
        tree.state = ROOT
        tree.root = self.host.me
        tree.touched = now()
        tree.own_jid = None
        tree.backoff = 0.0
        self.host.events["became_root"] += 1
        tree.announced_root = True
        if old is not None:  # we were attached below someone: tell them we moved
            self.effects.spawn_leave(old, tree.tree_id, "moved")
        self.fire("tree_root_changed", tree.tree_id, True, None)

    def rejoin(self, tree: TreeState, why: str) -> None:
        """Lose the parent and join again (children are kept)."""
        if not self.current(tree) or not self.host.accepting:
            return
        self.host.events["rejoins"] += 1
        log.debug("re-joining tree %x: %s", tree.tree_id, why)
        if tree.parent is not None:
            tree.left_parent = tree.parent
        self.lose_parent(tree)
        tree.state = JOINING
        if tree.own_jid is not None:  # an attempt in flight is superseded
            tree.old_jids.append(tree.own_jid)
        tree.own_jid = None
        tree.next_attempt = now()
        if not tree.joining:
            self.effects.spawn_attempt(tree)
