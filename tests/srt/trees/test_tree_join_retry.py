"""join() gives up with a clear JoinTimeout when the tree cannot be reached, and the manager
keeps retrying in the background until it can."""

from __future__ import annotations

import dataclasses

import pytest
from srt_helpers import (
    FAST,
    HB,
    PARENT_TIMEOUT,
    SECRET,
    check_tree,
    start_cluster,
    wait_clean,
    wait_for,
)

from overlay import OverlayNode
from overlay.sim import agreement
from srt.config import Tunables
from srt.ids import app_id
from srt.trees.manager import TreeManager
from srt.trees.types import JoinTimeout


async def test_join_timeout_then_background_retry() -> None:
    cluster = await start_cluster(5)
    tid = app_id("unreachable", "quinn")
    # the node closest to the tree id runs the overlay but no tree layer (yet)
    bare = OverlayNode(SECRET, tunables=FAST, node_id=tid ^ 1)
    await bare.start([cluster.nodes[0].info.address])
    try:
        overlays = [*cluster.nodes, bare]
        await wait_for(lambda: agreement(overlays, [tid]) == 1.0, 20, what="agreement")

        # The joiner must route straight to the bare node: a JOIN relayed through another
        # node leaves a forwarder there (Scribe), which adopts the joiner's next attempt.
        def direct() -> TreeManager | None:
            for mgr in cluster.mgrs:
                hop = mgr.overlay.next_hop(tid)
                if hop is not None and hop.id == bare.id:
                    return mgr
            return None

        await wait_for(lambda: direct() is not None, 20, what="a node routing straight to the root")
        joiner = direct()
        assert joiner is not None
        joiner.tunables = dataclasses.replace(joiner.tunables, join_timeout=0.6)
        with pytest.raises(JoinTimeout, match=f"{tid:040x} not joined within 0.6s; retrying"):
            await joiner.join(tid, job="late")
        assert joiner.view(tid).state == "joining"
        assert joiner.events["join_failures"] >= 1
        # the tree layer comes up on the root: the background retries attach the joiner
        late = TreeManager(
            bare,
            data_url="",
            tunables=Tunables(heartbeat_interval=HB, parent_timeout=PARENT_TIMEOUT),
        )
        await late.start()
        cluster.mgrs.append(late)
        cluster.nodes.append(bare)
        cluster.recorders.append(None)  # type: ignore[arg-type]
        await wait_clean(lambda: check_tree(cluster, tid, {joiner.overlay.id}), 10)
        assert late.view(tid).is_root and not late.view(tid).subscriber
    finally:
        await cluster.close()
        await bare.stop()
