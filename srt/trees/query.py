"""Cross-job queries with a reply: route to the root of a tree id, get its answer back.

Contract: ``TreeManager.query(tree_id, message)`` routes
``{"k": "q", "qid": 8 random bytes, "o": the asker's NodeInfo, "msg": message}`` on the
overlay (application ``"srt"``) toward ``tree_id``; the node it is delivered to — the live
node closest to the id, i.e. that job's master — runs its ``on_query`` handler
``handler(tree_id, message) -> dict`` and sends the result straight back with a direct
request ``srt.qr`` ``{"qid", "ok": true, "reply": {...}}`` (or ``{"qid", "ok": false,
"error": "..."}`` when it has no handler, the handler raised or returned a non-dict, or the
reply does not fit a datagram). The asker matches the reply by ``qid`` and returns it, or
raises :class:`~srt.trees.types.QueryError` with the root's error text, or
:class:`~srt.trees.types.QueryTimeout` if nothing came back within ``timeout``. Late or
unknown replies are counted (``late_query_replies``) and ignored. Both messages must fit one
overlay datagram (:class:`overlay.MessageTooLarge` otherwise, raised before sending). The
default timeout is ``srt.Tunables.query_timeout``.

The query service sees its manager only through :class:`~srt.trees.host.TreeHost` (whether it
runs, this node, counters, background tasks) and the overlay through
:class:`~srt.trees.host.TreeNetwork`.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import os
from typing import Any

from overlay import MessageTooLarge, NodeInfo, OverlayError
from srt.trees import wire as w
from srt.trees.host import TreeHost, TreeNetwork, ensure_accepting
from srt.trees.types import BadTreeMessage, QueryError, QueryTimeout

log = logging.getLogger(__name__)

MAX_ERROR = 500


class QueryService:
    """The query part of a :class:`~srt.trees.manager.TreeManager` (one per manager)."""

    def __init__(self, host: TreeHost, net: TreeNetwork) -> None:
        self.host = host
        self.net = net
        self.handler: Any = None
        self._pending: dict[bytes, asyncio.Future[dict[str, Any]]] = {}

    def close(self) -> None:
        for fut in self._pending.values():
            if not fut.done():
                fut.set_exception(QueryError("the tree manager stopped"))
        self._pending.clear()

    async def query(self, tree_id: int, message: dict, *, timeout: float | None = None) -> dict:
        host = self.host
        ensure_accepting(host)
        timeout = host.tunables.query_timeout if timeout is None else timeout
        if not isinstance(message, dict):
            raise TypeError("a query message must be a dict")
        if timeout <= 0:
            raise ValueError("timeout must be positive")
        qid = os.urandom(w.TOKEN_BYTES)
        fut: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending[qid] = fut
        host.events["queries_sent"] += 1
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        try:
            routed = {"k": "q", "qid": qid, "o": host.me.to_wire(), "msg": message}
            try:
                await asyncio.wait_for(
                    self.net.route(w.APP, tree_id, routed, report=False),
                    timeout,
                )
            except TimeoutError:
                raise QueryTimeout(self._timeout_text(tree_id, timeout, "routing")) from None
            except MessageTooLarge:
                raise
            except OverlayError as exc:
                raise QueryError(f"query for tree {tree_id:040x} not routed: {exc}") from exc
            try:
                return await asyncio.wait_for(asyncio.shield(fut), deadline - loop.time())
            except TimeoutError:
                host.events["query_timeouts"] += 1
                raise QueryTimeout(self._timeout_text(tree_id, timeout, "the reply")) from None
        finally:
            self._pending.pop(qid, None)

    @staticmethod
    def _timeout_text(tree_id: int, timeout: float, what: str) -> str:
        return (
            f"query for tree {tree_id:040x} timed out after {timeout}s waiting for {what} "
            "(the root may be unreachable, busy or slow to answer)"
        )

    def deliver(self, tree_id: int, message: dict[str, Any]) -> None:
        """Routed ``q`` delivered here: this node is the root of ``tree_id``; answer."""
        try:
            qid = w.token(message.get("qid"), "query qid")
            origin = w.node(message.get("o"), "query origin")
            body = w.want_dict(message.get("msg"), "query msg")
        except BadTreeMessage as exc:
            self.host.bad_input["query"] += 1
            raise exc from None
        self.host.events["queries_answered"] += 1
        self.host.spawn(self._answer(tree_id, qid, origin, body), "query answer")

    async def _answer(self, tree_id: int, qid: bytes, origin: NodeInfo, body: dict) -> None:
        reply: dict[str, Any]
        if self.handler is None:
            reply = {"qid": qid, "ok": False, "error": "no query handler at the root"}
        else:
            try:
                result = self.handler(tree_id, body)
                if inspect.isawaitable(result):
                    result = await result
                if not isinstance(result, dict):
                    raise TypeError(f"query handler returned {type(result).__name__}, not dict")
                reply = {"qid": qid, "ok": True, "reply": result}
            except Exception as exc:
                self.host.events["query_handler_errors"] += 1
                log.warning("query handler failed: %r", exc)
                reply = {"qid": qid, "ok": False, "error": _text(f"handler raised {exc!r}")}
        if origin.id == self.host.me.id:
            self._resolve(qid, reply)
            return
        try:
            await self.net.request(origin, w.QR, reply)
        except MessageTooLarge as exc:
            error = _text(f"reply too large for one datagram: {exc}")
            await self.net.request(origin, w.QR, {"qid": qid, "ok": False, "error": error})

    def serve_reply(self, payload: Any, sender: NodeInfo) -> dict[str, Any]:
        """``srt.qr`` handler at the asker."""
        payload = w.want_dict(payload, "query reply")
        qid = w.token(payload.get("qid"), "query reply qid")
        ok = payload.get("ok")
        if ok is True:
            w.want_dict(payload.get("reply"), "query reply body")
        elif ok is False:
            w.text(payload.get("error", ""), "query reply error", MAX_ERROR * 2)
        else:
            raise BadTreeMessage("query reply ok must be true or false")
        return {"ok": self._resolve(qid, payload, sender)}

    def _resolve(self, qid: bytes, payload: dict[str, Any], sender: NodeInfo | None = None) -> bool:
        fut = self._pending.get(qid)
        if fut is None or fut.done():
            self.host.events["late_query_replies"] += 1
            return False
        if payload["ok"] is True:
            fut.set_result(payload["reply"])
        else:
            where = f"root {sender}" if sender is not None else "the root (this node)"
            fut.set_exception(QueryError(f"{where} answered with an error: {payload['error']}"))
        return True


def _text(s: str) -> str:
    return s if len(s) <= MAX_ERROR else s[: MAX_ERROR - 1] + "…"
