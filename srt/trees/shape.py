"""The tree a set of nodes forms toward a tree id once every node knows every other (sans-IO).

Contract: :func:`predicted_parents` returns, for each node id, the node it takes as its
parent in tree ``tree_id`` - its overlay next hop toward ``tree_id`` (``None`` for the root,
the node XOR-closest to it) - computed with the overlay's own routing code
(:class:`overlay.neighbourhood.Neighbourhood`: the prefix table's rendezvous-designated
entries, its slot capacity, the leaf set and its fallback) as it is once every node has
admitted every other. A JOIN takes each hop's next hop as that node's parent (Scribe,
``srt/trees/formation.py``), so with complete, stable tables this *is* the tree; while
tables are incomplete (joins racing discovery) or after failures the real tree may differ,
which is why a caller that relies on a shape checks it on the live cluster too.
:func:`children_of` inverts the map. Cost: O(n²) admissions; meant for small clusters.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from overlay.config import Tunables
from overlay.neighbourhood import Neighbourhood
from overlay.nodeinfo import NodeInfo


def predicted_parents(
    node_ids: Sequence[int], tree_id: int, tunables: Tunables | None = None
) -> dict[int, int | None]:
    """node id → its parent's id in ``tree_id`` (None: the root) with complete tables."""
    if len(set(node_ids)) != len(node_ids) or not node_ids:
        raise ValueError("node ids must be distinct and non-empty")
    tun = tunables or Tunables()
    out: dict[int, int | None] = {}
    for me in node_ids:
        hood = Neighbourhood(me, tun.slot_capacity, tun.leaf_set_size)
        for other in node_ids:
            if other != me:  # the address is irrelevant to routing decisions
                hood.admit(NodeInfo(other, "127.0.0.1", 1))
        hop = hood.next_hop(tree_id)
        out[me] = None if hop is None else hop.id
    return out


def children_of(parents: Mapping[int, int | None]) -> dict[int, list[int]]:
    """node id → its children (sorted), every node listed."""
    out: dict[int, list[int]] = {v: [] for v in parents}
    for v, p in parents.items():
        if p is not None:
            out[p].append(v)
    return {v: sorted(c) for v, c in out.items()}
