"""The compressed buffer tree (CBT): the in-memory group-by-aggregate store every agent
pre-reduces into.

Parsed key-value pairs become partial aggregation objects (PAOs) that are inserted into an
(a,b)-tree whose nodes carry zstandard-compressed, hash-ordered buffers. ``flush`` returns the
whole aggregate so far as a :class:`Snapshot` (mergeable, invertible for count/sum/avg, with a
checksummed wire format); ``empty`` starts a new batch. This package knows nothing of jobs,
the overlay or the network.
"""

from cbt.aggregators import (
    Aggregator,
    Avg,
    CollectSet,
    Count,
    Distinct,
    Max,
    Min,
    Sum,
    TopK,
    aggregator_names,
    get_aggregator,
    register_aggregator,
)
from cbt.errors import CBTError, SnapshotError, SpillError
from cbt.hashing import xxh3_64
from cbt.sketches import ApproxDistinct, ApproxQuantiles, ApproxTopK, rejected_binaries
from cbt.snapshot import Snapshot
from cbt.tree import CompressedBufferTree
from cbt.window import EpochWindows, SlidingWindow, TumblingWindow

__all__ = [
    "Aggregator",
    "ApproxDistinct",
    "ApproxQuantiles",
    "ApproxTopK",
    "Avg",
    "CBTError",
    "CollectSet",
    "CompressedBufferTree",
    "Count",
    "Distinct",
    "EpochWindows",
    "Max",
    "Min",
    "SlidingWindow",
    "Snapshot",
    "SnapshotError",
    "SpillError",
    "Sum",
    "TopK",
    "TumblingWindow",
    "aggregator_names",
    "get_aggregator",
    "register_aggregator",
    "rejected_binaries",
    "xxh3_64",
]
