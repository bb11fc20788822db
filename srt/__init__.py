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
