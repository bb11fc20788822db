"""SimTreeNode: an overlay node carrying its TreeManager, for the overlay simulator.

Contract. ``overlay.sim.start_cluster(..., node_factory=SimTreeNode)`` starts nodes whose
unchanged :class:`srt.trees.manager.TreeManager` runs over the simulated network on virtual
time (``overlay/sim.py``): the manager starts before the node joins the overlay, so no routed
tree message finds it missing. Simulated nodes serve no data plane: their data URL only has
to be well-formed and distinct. For tests and benchmarks at scale (1,280 agents); the agent
itself wires its TreeManager in ``agent/runtime/host/agent.py``.
"""

from __future__ import annotations

from typing import Any

from overlay import OverlayNode
from srt.config import Tunables
from srt.trees.manager import TreeManager

# Faster than the defaults: simulated trees settle within a few virtual seconds.
SIM_TUNABLES = Tunables(heartbeat_interval=1.0, parent_timeout=3.5)


class SimTreeNode(OverlayNode):
    """An overlay node that carries its TreeManager as ``trees`` (module contract)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.trees = TreeManager(self, data_url="", tunables=SIM_TUNABLES)

    async def start(self, bootstrap: Any = ()) -> None:
        await self.trees.start()
        await super().start(bootstrap)
        self.trees.data_url = f"http://{self.info.host}:{self.info.port}"
