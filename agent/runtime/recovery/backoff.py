"""One retry loop with exponential back-off, for recovery's messages to other agents.

Contract: ``async for attempt in backoff(attempts, first):`` runs its body at most
``attempts`` times; after each pass that neither returns nor breaks it waits ``first``
seconds, doubling each time up to ``cap`` (so a loop that gives up has waited after its
last attempt too, as the hand-written loops it replaces did). The body decides what a
success is (``return``/``break``) and when to stop early (a stopping job); what a loop does
once its attempts are spent follows the ``async for``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator


async def backoff(attempts: int, first: float, cap: float = 2.0) -> AsyncIterator[int]:
    """Yield attempt numbers 0, 1, ... (at most ``attempts``), sleeping between them."""
    delay = first
    for attempt in range(attempts):
        yield attempt
        await asyncio.sleep(delay)
        delay = min(cap, delay * 2)
