"""What a cluster that does not settle says about each agent: one line per jobs-tree view, read
from the ``TreeView.to_dict()`` form the status API serves (no processes needed)."""

from __future__ import annotations

from agent.server.cluster import _view_line
from overlay.nodeinfo import NodeInfo
from srt.trees.types import JOINING, MEMBER, TreeView

PARENT = NodeInfo(0x0D0AEA19 << 128, "127.0.0.1", 7000)


def test_an_attached_member_names_its_parent_and_children() -> None:
    children = {i: NodeInfo(i, "127.0.0.1", 7000 + i) for i in (1, 2)}
    view = TreeView(1, "jobs", PARENT, None, children, {}, True, state=MEMBER)
    assert _view_line(view.to_dict()) == "member, root=False, parent=0d0aea19, children=2"


def test_a_joining_member_and_a_non_member() -> None:
    view = TreeView(1, "jobs", None, None, {}, {}, True, state=JOINING)
    assert _view_line(view.to_dict()) == "joining, root=False, parent=-, children=0"
    assert _view_line(None) == "not a member"
