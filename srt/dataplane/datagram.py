"""Snapshot datagrams: a small snapshot goes to its parent as one overlay request, not HTTP.

Why: most snapshots of a quiet job are tiny - an empty one is 130 bytes, plus 29 bytes of
lineage per origin - yet each was an HTTP POST: a signed request and reply through aiohttp on
both sides, several times the CPU of an overlay request and its reply (docs/agent-runtime.md,
"Benchmark"). Every agent sends one per job and epoch, so on a host of many logical agents
this was the largest per-epoch cost of an idle job.

Contract:

* **Sender** (:class:`SnapshotDatagrams`, given to :class:`~srt.dataplane.upstream.
  UpstreamSender` as its ``shortcut``): :meth:`~SnapshotDatagrams.fits` says whether a body
  of that many bytes may go by datagram (at most ``Tunables.snapshot_datagram_bytes``; 0 turns
  the shortcut off). :meth:`~SnapshotDatagrams.send` makes **one** overlay request to the
  parent's node and returns the acknowledgement (``"merged"``, ``"duplicate"``, ``"overlap"``
  or ``"stale"``), raises :class:`~srt.errors.DataPlaneError` with the status and reason the
  HTTP endpoint would have answered (409 ``incompatible``, 503 ``epoch_ahead``, ...), or
  returns None when no reply came (lost, timed out, or a peer without the handler): the caller
  then posts the same snapshot over HTTP at once. A snapshot that arrived after all is then
  acknowledged ``duplicate`` by name or lineage, as any re-send is.
* **Receiver** (:meth:`DataPlaneServer.serve_datagram <srt.dataplane.server.DataPlaneServer.
  serve_datagram>`, the overlay handler of :data:`DATAGRAM_KIND`): :func:`parse_request`
  checks the request as strictly as the HTTP door checks its headers (400 ``bad_name`` for a
  non-canonical name, a path not a snapshot door, a body that is not bytes); then the door's
  handler takes it, with the same answers and counters as a POST.
* **Security.** The overlay authenticates every datagram with the cluster secret (HMAC over
  the whole datagram), bounds its timestamp and rejects replays (:mod:`overlay.wire`), so a
  datagram snapshot is as authenticated and as intact as a signed POST; a damaged datagram is
  dropped, which the sender sees as no reply and answers with the HTTP post. Nothing in it is
  unpickled: msgpack of plain values.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

from overlay.errors import OverlayError
from srt.dataplane.name import (
    ACK_RESULTS,
    H_EPOCH,
    H_JOB,
    H_SENDER,
    H_TREE,
    POSITION_QUERY,
    SNAPSHOT_PATHS,
    SnapshotName,
    parse_position,
)
from srt.errors import DataPlaneError, SnapshotNameError

#: the overlay request kind of a snapshot datagram
DATAGRAM_KIND = "srt.snapshot"
#: bytes a request's fields other than the body take at most (job name of 256 characters
#: percent-encoded, two 40-digit ids, an epoch, a path) plus msgpack framing: with the
#: overlay's own header and MAC, a body of ``snapshot_datagram_bytes`` must still fit
FIELDS_ALLOWANCE = 1200


#: one overlay request: (node, kind, payload, timeout) -> the handler's reply; raises
#: :class:`overlay.errors.OverlayError` (timeout, no handler there, too large): "no reply"
Requester = Callable[[Any, str, dict[str, Any], float], Awaitable[Any]]


def request_of(name: SnapshotName, path: str, body: bytes) -> dict[str, Any]:
    """The wire form of one snapshot datagram: the name as its canonical header values."""
    return {"name": list(name.to_headers().values()), "path": path, "body": body}


def parse_request(payload: Any) -> tuple[str, int | None, SnapshotName, bytes]:
    """``(door path, position, name, body)`` of a datagram; raises :class:`SnapshotNameError`
    naming what is wrong (the HTTP door's 400 ``bad_name``)."""
    if not isinstance(payload, dict):
        raise SnapshotNameError("a snapshot datagram is a map")
    fields, path, body = payload.get("name"), payload.get("path"), payload.get("body")
    if not isinstance(body, bytes):
        raise SnapshotNameError("a snapshot datagram's body must be bytes")
    if not isinstance(path, str):
        raise SnapshotNameError("a snapshot datagram's path must be text")
    door, _, query = path.partition("?")
    if door not in SNAPSHOT_PATHS:
        raise SnapshotNameError(f"not a snapshot door: {path[:80]!r}")
    position = None
    if query:
        key, _, value = query.partition("=")
        if key != POSITION_QUERY:
            raise SnapshotNameError(f"unknown query {query[:80]!r}")
        position = parse_position(value)
    if (
        not isinstance(fields, list)
        or len(fields) != 4
        or not all(isinstance(f, str) for f in fields)
    ):
        raise SnapshotNameError("a snapshot datagram's name is four texts")
    headers = dict(zip((H_JOB, H_TREE, H_EPOCH, H_SENDER), fields, strict=True))
    return door, position, SnapshotName.from_headers(headers), body


class SnapshotDatagrams:
    """The sending side (module contract). ``limit`` is the largest body sent this way
    (bytes; 0: never), ``timeout`` the seconds to wait for the reply before the HTTP post."""

    def __init__(self, request: Requester, *, limit: int, timeout: float) -> None:
        if limit < 0 or not timeout > 0:
            raise ValueError("need limit >= 0 and timeout > 0")
        self._request = request
        self.limit = limit
        self.timeout = timeout
        self.counters: Counter[str] = Counter()

    def fits(self, size: int) -> bool:
        """May a body of ``size`` bytes go by datagram?"""
        return self.limit > 0 and size <= self.limit

    async def send(self, node: Any, name: SnapshotName, body: bytes, path: str) -> str | None:
        """One datagram to ``node`` (module contract): the acknowledgement, a raised
        :class:`DataPlaneError`, or None for no reply (post it over HTTP)."""
        self.counters["sent"] += 1
        try:
            payload = request_of(name, path, body)
            reply = await self._request(node, DATAGRAM_KIND, payload, self.timeout)
        except OverlayError:  # timed out, no handler there, too large, stopping: no reply
            self.counters["no_reply"] += 1
            return None
        status = reply.get("status") if isinstance(reply, dict) else None
        if status == 200 and reply.get("result") in ACK_RESULTS:
            self.counters["acknowledged"] += 1
            return str(reply["result"])
        if type(status) is not int or not 400 <= status < 600:
            self.counters["bad_reply"] += 1
            raise DataPlaneError(0, "bad_reply", f"unexpected datagram reply {str(reply)[:100]}")
        self.counters["refused"] += 1
        raise DataPlaneError(status, str(reply.get("error")), str(reply.get("detail", ""))[:300])
