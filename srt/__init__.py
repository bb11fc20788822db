"""Shared reducer trees (SRT): one (or m) aggregation trees per job over the overlay.

Agents route a JOIN toward the job's id; the union of the paths is the tree and the node
closest to the id is the job master. This package forms and maintains the trees, rolls up
CBT snapshots epoch by epoch through a combining-tree barrier over an authenticated HTTP data
plane, and multicasts control from the master down the tree.
"""

# Data plane: named snapshots child → parent over authenticated HTTP (docs/srt-dataplane.md).
from srt.dataplane import DataPlaneClient as DataPlaneClient
from srt.dataplane import DataPlaneServer as DataPlaneServer
from srt.dataplane import SnapshotName as SnapshotName
from srt.dataplane.barrier import EpochCombiner as EpochCombiner
from srt.dataplane.barrier import snapshot_handler as snapshot_handler
from srt.dataplane.operators import GroupByOperator as GroupByOperator
from srt.dataplane.operators import LevelOperator as LevelOperator
from srt.dataplane.operators import TopKOperator as TopKOperator
from srt.dataplane.upstream import UpstreamSender as UpstreamSender
from srt.errors import DataPlaneError as DataPlaneError
from srt.errors import Reject as Reject
from srt.errors import RetryLater as RetryLater
from srt.errors import SnapshotNameError as SnapshotNameError
from srt.errors import SRTError as SRTError

# isort: split
# Configuration: timings and bounds of the trees and the data plane.
from srt.config import Tunables as Tunables

# isort: split
# Trees: formation, maintenance, multicast and cross-job queries (docs/srt-trees.md).
from srt.ids import app_id as app_id
from srt.ids import key_tree_index as key_tree_index
from srt.ids import placement_id as placement_id
from srt.ids import tree_ids as tree_ids
from srt.ids import tree_index as tree_index
from srt.trees.balance import roots_per_agent as roots_per_agent
from srt.trees.balance import two_choice_tree_ids as two_choice_tree_ids
from srt.trees.manager import TreeManager as TreeManager
from srt.trees.types import BadTreeMessage as BadTreeMessage
from srt.trees.types import JoinTimeout as JoinTimeout
from srt.trees.types import LoopRefused as LoopRefused
from srt.trees.types import MulticastResult as MulticastResult
from srt.trees.types import NotRoot as NotRoot
from srt.trees.types import QueryError as QueryError
from srt.trees.types import QueryTimeout as QueryTimeout
from srt.trees.types import TreeError as TreeError
from srt.trees.types import TreeListener as TreeListener
from srt.trees.types import TreeView as TreeView
