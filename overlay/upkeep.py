"""Filling and refreshing the routing table and the leaf set with single ``find_node`` calls.

Contract: after the kademlia join crawl, :meth:`TableUpkeep.fill_slots` looks up every empty
slot of the rows worth filling once (Pastry fills its table from the nodes on its join route;
this is the Kademlia way to the same end) and :meth:`TableUpkeep.announce` pings every contact
so the nodes that should route to us learn us directly. Periodically,
:meth:`TableUpkeep.refresh_slot` looks up one slot (an empty one if any, else a random filled
one) and :meth:`TableUpkeep.refresh_leaves` asks one leaf-set member for the nodes closest to
us. Answers are learnt through the protocol's host like every ``find_node`` reply; nothing
here changes the tables directly. Lookups whose peer is silent simply end (the failure detector
hears of the silence through the protocol).
"""

from __future__ import annotations

import asyncio
import contextlib
import random

from overlay.config import Tunables
from overlay.errors import OverlayError
from overlay.neighbourhood import Neighbourhood
from overlay.ports import Call, Contacts


class TableUpkeep:
    """Table and leaf-set lookups of the node ``self_id`` (``rng``: the node's seeded source)."""

    def __init__(
        self,
        self_id: int,
        tunables: Tunables,
        hood: Neighbourhood,
        contacts: Contacts,
        *,
        call: Call,
        rng: random.Random,
    ) -> None:
        self._self_id = self_id
        self._t = tunables
        self._hood = hood
        self._contacts = contacts
        self._call = call
        self._rng = rng

    async def fill_slots(self) -> None:
        """Look up every empty slot once (after the join crawl)."""
        empty = self._hood.empty_slots()
        if empty:
            await asyncio.gather(*(self._lookup_slot(r, c) for r, c in empty))

    async def announce(self) -> None:
        """Ping every contact once so nodes that should route to us learn us directly."""
        t = self._t
        calls = []
        for n in self._hood.contacts():
            with contextlib.suppress(OverlayError):
                calls.append(self._call(n.address, "ping", [[]], t.probe_timeout))
        if calls:
            await asyncio.gather(*calls)

    async def refresh_slot(self) -> None:
        """Periodic table upkeep: an empty slot if any (new nodes may have appeared there),
        else a random filled one (finds closer designated entries)."""
        empty = self._hood.empty_slots()
        if empty:
            row, col = self._rng.choice(empty)
        else:
            filled = self._hood.table.designated_slots()
            if not filled:
                return
            row, col = self._rng.choice(filled)
        await self._lookup_slot(row, col)

    async def refresh_leaves(self) -> None:
        """Ask one leaf-set member for the nodes closest to us: learns joins next to us and
        refills the leaf set after failures."""
        members = self._hood.leaves.members() or self._hood.contacts()
        if not members:
            return
        peer = self._rng.choice(members)
        await self._contacts.find_node(peer, self._self_id)

    async def _lookup_slot(self, row: int, col: int) -> None:
        """One find_node for a random id of the slot, asked of the contact closest to it (a
        single RPC, not a full crawl): this is how slots get (re)filled."""
        target = self._hood.slot_target(row, col, self._rng)
        pool = self._hood.contacts()
        if not pool:
            return
        peer = min(pool, key=lambda n: n.id ^ target)
        await self._contacts.find_node(peer, target)
