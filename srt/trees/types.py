"""Public data types and errors of the tree layer (srt.trees.manager, srt.trees.multicast,
srt.trees.query).

Contract: :class:`TreeView` is a *snapshot* of one node's local view of one tree (callers get
a copy; changing it changes nothing); :class:`TreeListener` lists the optional callbacks a
listener may implement (sync, called on the event loop, exceptions logged and swallowed);
:class:`MulticastResult` is the aggregated confirmation of one multicast. Every error raised
by the tree layer derives from :class:`TreeError`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from overlay import NodeInfo
from srt.errors import SRTError

# TreeView.state values
ROOT = "root"  # this node is the master of the tree
MEMBER = "member"  # attached below a parent
JOINING = "joining"  # (re-)joining: no parent yet, JOIN in flight or due


class TreeError(SRTError):
    """Base class of the tree layer's errors (an :class:`~srt.errors.SRTError`)."""


class BadTreeMessage(TreeError, ValueError):
    """A tree message from the network is malformed (counted in ``stats()["bad_input"]``
    and answered with an error; never crashes the node)."""


class LoopRefused(TreeError):
    """A JOIN or adoption would break the loop-freedom rule (see docs/srt-trees.md)."""


class NotRoot(TreeError):
    """A master-only operation (multicast) was called on a node that is not the tree's root."""


class JoinTimeout(TreeError):
    """``join`` could not attach in time; the manager keeps retrying in the background."""


class QueryError(TreeError):
    """The root answered a query with an error (no handler, handler raised, reply too big)."""


class QueryTimeout(QueryError, TimeoutError):
    """No reply to a query within its timeout."""


@dataclass
class TreeView:
    """This node's local view of one tree (a snapshot; read-only for callers).

    ``parent`` is ``None`` iff the node is the root (the master) *or* still joining: use
    :attr:`is_root` (``state == "root"``). ``root`` is the last master this node heard of
    (itself when it is the root; learnt from heartbeat replies otherwise, may be ``None``)."""

    tree_id: int
    job: str
    parent: NodeInfo | None
    parent_url: str | None
    children: dict[int, NodeInfo]
    child_urls: dict[int, str]
    subscriber: bool
    state: str = JOINING
    root: NodeInfo | None = None

    @property
    def is_root(self) -> bool:
        return self.state == ROOT

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form for status pages (ids as 40-digit hex)."""

        def node(info: NodeInfo | None) -> dict[str, Any] | None:
            if info is None:
                return None
            return {"id": f"{info.id:040x}", "host": info.host, "port": info.port}

        return {
            "tree_id": f"{self.tree_id:040x}",
            "job": self.job,
            "state": self.state,
            "is_root": self.is_root,
            "subscriber": self.subscriber,
            "parent": node(self.parent),
            "parent_url": self.parent_url,
            "root": node(self.root),
            "children": [
                dict(node(c) or {}, url=self.child_urls.get(cid))
                for cid, c in sorted(self.children.items())
            ],
        }


class TreeListener(Protocol):
    """Callbacks about tree changes; every method is optional (implement what you need)."""

    def tree_parent_changed(self, tree_id: int, parent: NodeInfo | None) -> None: ...

    def tree_child_added(self, tree_id: int, child: NodeInfo) -> None: ...

    def tree_child_removed(self, tree_id: int, child_id: int, reason: str) -> None:
        """``reason``: ``"failed"`` (silent / declared failed), ``"left"`` (told us it left)
        or ``"moved"`` (re-attached elsewhere)."""

    def tree_root_changed(self, tree_id: int, is_root: bool, new_root: NodeInfo | None) -> None:
        """``is_root`` True: this node became the master (``new_root`` None). False: it lost
        the master role to ``new_root`` (None if it could not be located)."""


@dataclass(frozen=True)
class MulticastResult:
    """Aggregated confirmation of one multicast."""

    reached: int  # agents (tree members, root included) that confirmed
    elapsed_s: float  # master's send -> last confirmation aggregated back
    missing: list[int] = field(default_factory=list)  # ids that did not confirm in time
