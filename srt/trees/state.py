"""The per-tree state record of one node, and its read-only view (pure: no I/O, no clock).

Contract: :class:`TreeState` is the mutable record a :class:`~srt.trees.table.TreeTable` keeps
for each tree this node is on; only the table and the tree layer's parts change it, and
callers outside the layer only ever see :func:`view_of` copies (:class:`TreeView`).
:func:`closer` is the loop-freedom order: a node's parent must be strictly closer to the tree
id than the node itself.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from overlay import NodeInfo
from srt.trees.types import JOINING, ROOT, TreeView


@dataclass(eq=False)
class TreeState:
    """Mutable state of one tree at this node (identity matters: a dropped and re-created
    tree is a new record, so a task holding the old one can tell it is stale)."""

    tree_id: int
    job: str
    subscriber: bool
    state: str = JOINING
    parent: NodeInfo | None = None
    parent_url: str | None = None
    parent_ok: float = 0.0  # last time the parent confirmed us (attach or heartbeat reply)
    parent_since: float = 0.0  # when we took the current parent
    #: the parent a re-join left (silent, failed or refusing us): told ``moved`` once we
    #: attach elsewhere - a paused parent reads that when it resumes, instead of waiting a
    #: child timeout (widened by its own pause) for children that went
    left_parent: NodeInfo | None = None
    announced_parent: int | None = None  # parent last reported to listeners
    announced_root: bool = False  # listeners were told we are the root (and not since told not)
    root: NodeInfo | None = None
    children: dict[int, NodeInfo] = field(default_factory=dict)
    child_urls: dict[int, str] = field(default_factory=dict)
    child_seen: dict[int, float] = field(default_factory=dict)
    own_jid: bytes | None = None  # the JOIN this node originated and still waits for
    old_jids: deque[bytes] = field(default_factory=lambda: deque(maxlen=4))  # superseded ones
    via_jid: bytes | None = None  # the JOIN through which this node took its parent
    joining: bool = False  # an attempt is running
    next_attempt: float = 0.0
    backoff: float = 0.0
    touched: float = 0.0  # created / made root: not pruned for a while after this

    def has_parent(self, node_id: int) -> bool:
        """True if ``node_id`` is this node's current parent in the tree."""
        return self.parent is not None and self.parent.id == node_id


def closer(a: int, b: int, tree_id: int) -> bool:
    """True if node id ``a`` is strictly XOR-closer to ``tree_id`` than node id ``b``."""
    return a ^ tree_id < b ^ tree_id


def view_of(tree: TreeState, me: NodeInfo) -> TreeView:
    """A copy of ``tree`` for callers (``me``: this node, the root when ``tree`` is a root)."""
    return TreeView(
        tree_id=tree.tree_id,
        job=tree.job,
        parent=tree.parent,
        parent_url=tree.parent_url,
        children=dict(tree.children),
        child_urls=dict(tree.child_urls),
        subscriber=tree.subscriber,
        state=tree.state,
        root=me if tree.state == ROOT else tree.root,
    )
