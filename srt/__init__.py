"""Shared reducer trees (SRT): one (or m) aggregation trees per job over the overlay.

Agents route a JOIN toward the job's id; the union of the paths is the tree and the node
closest to the id is the job master. This package forms and maintains the trees, rolls up
CBT snapshots epoch by epoch through a combining-tree barrier over an authenticated HTTP data
plane, and multicasts control from the master down the tree.
"""

# Data plane: named snapshots child → parent over authenticated HTTP (docs/srt-dataplane.md).
from srt.barrier import EpochCombiner as EpochCombiner
from srt.barrier import snapshot_handler as snapshot_handler
from srt.dataplane import DataPlaneClient as DataPlaneClient
from srt.dataplane import DataPlaneServer as DataPlaneServer
from srt.dataplane import SnapshotName as SnapshotName
from srt.errors import DataPlaneError as DataPlaneError
from srt.errors import Reject as Reject
from srt.errors import RetryLater as RetryLater
from srt.errors import SnapshotNameError as SnapshotNameError
from srt.operators import GroupBy as GroupBy
from srt.operators import LevelOperator as LevelOperator
from srt.operators import TopK as TopK
from srt.upstream import UpstreamSender as UpstreamSender

# isort: split
# Trees: formation, maintenance, multicast and cross-job queries (docs/srt-trees.md).
from srt.balance import roots_per_agent as roots_per_agent
from srt.balance import two_choice_tree_ids as two_choice_tree_ids
from srt.ids import app_id as app_id
from srt.ids import key_tree_index as key_tree_index
from srt.ids import placement_id as placement_id
from srt.ids import tree_ids as tree_ids
from srt.ids import tree_index as tree_index
from srt.tree import TreeManager as TreeManager
from srt.tree_types import BadTreeMessage as BadTreeMessage
from srt.tree_types import JoinTimeout as JoinTimeout
from srt.tree_types import LoopRefused as LoopRefused
from srt.tree_types import MulticastResult as MulticastResult
from srt.tree_types import NotRoot as NotRoot
from srt.tree_types import QueryError as QueryError
from srt.tree_types import QueryTimeout as QueryTimeout
from srt.tree_types import TreeError as TreeError
from srt.tree_types import TreeListener as TreeListener
from srt.tree_types import TreeView as TreeView
