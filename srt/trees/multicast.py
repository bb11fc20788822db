"""Multicast down a tree with delivery confirmation aggregated back up.

Contract: the master calls ``TreeManager.multicast(tree_id, message)``; it sends
``srt.mc`` to each of its children *concurrently*; every member that receives it starts the
copies to its own children at once, runs the local ``on_multicast`` handlers, waits for its
children's confirmations (each within the time budget it was given, shrunk by 20 % per level so
a subtree always answers before its parent gives up on it) and replies with the number of
members of its subtree that confirmed and the ids of those that did not. The master's
:class:`~srt.trees.types.MulticastResult` thus counts every member including itself, once: a
second copy of the same ``mid`` (a stale parent still listing a node that re-attached
elsewhere) is neither delivered nor counted again.

Message (direct request ``srt.mc``): ``{"t": tree id (20 B), "mid": 8 random bytes,
"msg": the message (a map), "budget": seconds}`` → ``{"reached": int, "missing": [id (20 B),
…]}``. A repeated ``mid`` is answered ``{"reached": 0, "missing": []}`` and never
delivered twice. The whole datagram must fit the overlay's limit (8 KiB with the default
tunables): larger messages raise :class:`overlay.MessageTooLarge` before anything is sent —
bulk data belongs on the data plane. A child that does not confirm in time is reported in
``missing`` (its subtree is then unknown, not counted as reached); ``missing`` lists at most
``MAX_MISSING`` ids per reply. The largest budget and the per-level shrink factor are
tunables (``srt.Tunables.multicast_max_budget``, ``multicast_shrink``).

The multicaster sees its manager only through :class:`~srt.trees.host.TreeHost` (tree views,
whether it runs, counters) and the overlay through :class:`~srt.trees.host.TreeNetwork`.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import math
import os
from collections import OrderedDict
from typing import Any

import msgpack

from overlay import MessageTooLarge, NodeInfo, OverlayError
from srt.trees import wire as w
from srt.trees.host import TreeHost, TreeNetwork, ensure_accepting
from srt.trees.types import BadTreeMessage, MulticastResult, NotRoot, TreeError, TreeView

log = logging.getLogger(__name__)

MAX_MISSING = 256
WIRE_OVERHEAD = 160  # header, MAC, request framing, sender NodeInfo, the srt.mc envelope
_SEEN = 1024


async def _failed(exc: OverlayError) -> Any:
    raise exc


class Multicaster:
    """The multicast part of a :class:`~srt.trees.manager.TreeManager` (one per manager)."""

    def __init__(self, host: TreeHost, net: TreeNetwork) -> None:
        self.host = host
        self.net = net
        self.handlers: list[Any] = []
        self._seen: OrderedDict[bytes, None] = OrderedDict()  # recent mids, oldest first

    async def multicast(
        self, tree_id: int, message: dict, *, timeout: float | None = None
    ) -> MulticastResult:
        host = self.host
        ensure_accepting(host)
        if not isinstance(message, dict):
            raise TypeError("a multicast message must be a dict")
        max_budget = host.tunables.multicast_max_budget
        timeout = host.tunables.multicast_timeout if timeout is None else timeout
        if not 0 < timeout <= max_budget:
            raise ValueError(f"timeout must be in (0, {max_budget}]")
        tree = host.view(tree_id)
        if tree is None or not tree.is_root:
            raise NotRoot(f"this node is not the root of tree {tree_id:040x}")
        self._check_size(message)
        mid = os.urandom(w.TOKEN_BYTES)
        loop = asyncio.get_running_loop()
        start = loop.time()
        host.events["mc_sent"] += 1
        reached, missing = await self._run(tree, mid, message, timeout)
        return MulticastResult(reached=reached, elapsed_s=loop.time() - start, missing=missing)

    def _check_size(self, message: dict) -> None:
        try:
            size = len(msgpack.packb(message, use_bin_type=True))
        except (TypeError, ValueError, OverflowError) as exc:
            raise TypeError(f"multicast message is not msgpack-encodable: {exc}") from None
        limit = self.net.tunables.max_datagram - WIRE_OVERHEAD
        if size > limit:
            raise MessageTooLarge(
                f"multicast message is {size} bytes; at most {limit} fit one overlay datagram "
                "(send bulk data over the data plane)"
            )

    async def _run(
        self, tree: TreeView, mid: bytes, message: dict, budget: float
    ) -> tuple[int, list[int]]:
        """Copy to the children, then deliver locally, then collect the children's
        confirmations: (reached, missing) for the subtree rooted here (this node included).
        The copies leave before the local handlers run, so a slow handler here never delays
        the subtree below."""
        children, replies = self._fan_out(tree, mid, message, budget)
        await self._deliver(tree.tree_id, message)
        reached, missing = await self._collect(children, replies)
        return reached + 1, missing

    async def _deliver(self, tree_id: int, message: dict) -> None:
        for handler in list(self.handlers):
            try:
                result = handler(tree_id, message)
                if inspect.isawaitable(result):
                    await result
            except Exception:
                self.host.events["mc_handler_errors"] += 1
                log.exception("multicast handler failed")

    def _fan_out(
        self, tree: TreeView, mid: bytes, message: dict, budget: float
    ) -> tuple[list[NodeInfo], list[Any]]:
        """Send the copies now (synchronously); the replies are awaitables."""
        children = list(tree.children.values())
        payload = {
            "t": w.id_bytes(tree.tree_id),
            "mid": mid,
            "msg": message,
            "budget": budget * self.host.tunables.multicast_shrink,
        }
        replies = []
        for child in children:
            try:
                replies.append(self.net.request_now(child, w.MC, payload, timeout=budget))
            except MessageTooLarge:
                for pending in replies:
                    pending.close()
                raise
            except OverlayError as exc:  # e.g. the node is stopping: this child is missing
                replies.append(_failed(exc))
        return children, replies

    async def _collect(self, children: list[NodeInfo], replies: list[Any]) -> tuple[int, list[int]]:
        results = await asyncio.gather(
            *(self._reply(child, r) for child, r in zip(children, replies, strict=True))
        )
        reached = 0
        missing: list[int] = []
        for child, (count, lost) in zip(children, results, strict=True):
            if count is None:
                missing.append(child.id)
            else:
                reached += count
                missing.extend(lost)
        return reached, missing

    async def _reply(self, child: NodeInfo, pending: Any) -> tuple[int | None, list[int]]:
        try:
            reply = await pending
        except OverlayError as exc:
            self.host.events["mc_child_missing"] += 1
            log.info("multicast to %s failed: %s", child, exc)
            return None, []
        try:
            reply = w.want_dict(reply, "multicast reply")
            count = reply.get("reached")
            lost = reply.get("missing")
            if not isinstance(count, int) or count < 0 or not isinstance(lost, list):
                raise BadTreeMessage("multicast reply needs reached (int) and missing (list)")
            return count, [w.tree_id(x, "missing id") for x in lost[:MAX_MISSING]]
        except BadTreeMessage as exc:
            self.host.bad_input["mc_reply"] += 1
            log.info("bad multicast reply from %s: %s", child, exc)
            return None, []

    async def serve(self, payload: Any, sender: NodeInfo) -> dict[str, Any]:
        """``srt.mc`` handler at a non-root member."""
        payload = w.want_dict(payload, "multicast")
        tid = w.tree_id(payload.get("t"))
        mid = w.token(payload.get("mid"), "multicast mid")
        message = w.want_dict(payload.get("msg"), "multicast msg")
        budget = payload.get("budget")
        max_budget = self.host.tunables.multicast_max_budget
        if (
            not isinstance(budget, int | float)
            or isinstance(budget, bool)
            or not math.isfinite(budget)
            or not 0 < budget <= max_budget
        ):
            raise BadTreeMessage(f"multicast budget must be a number in (0, {max_budget}]")
        if mid in self._seen:
            # A second copy: a retry, or a stale parent that still lists us while we already
            # re-attached elsewhere. Whoever came first counts our subtree; this one adds 0.
            self.host.events["mc_duplicates"] += 1
            return {"reached": 0, "missing": []}
        tree = self.host.view(tid)
        if tree is None or not self.host.accepting:
            raise TreeError(f"not on tree {tid:040x}")
        self._seen[mid] = None
        while len(self._seen) > _SEEN:
            self._seen.popitem(last=False)
        self.host.events["mc_received"] += 1
        reached, missing = await self._run(tree, mid, message, float(budget))
        return {"reached": reached, "missing": [w.id_bytes(x) for x in missing[:MAX_MISSING]]}
