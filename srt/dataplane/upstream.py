"""UpstreamSender: one (job, tree)'s ordered, acknowledged stream of snapshots to the parent.

Contract: :meth:`UpstreamSender.enqueue` (or :meth:`~UpstreamSender.send` with a full
:class:`SnapshotName`) adds a named snapshot (this node's merged result of
one epoch); the sender delivers queued snapshots **one at a time in epoch order** to the
current parent URL with :meth:`DataPlaneClient.send_snapshot` and keeps each one until the
parent acknowledges it (``"merged"``, ``"duplicate"`` or ``"stale"`` - all mean the parent
is done with that name). Failures are retried for ever with exponential backoff
(``srt.Tunables.upstream_backoff`` doubling up to ``upstream_max_backoff``); a 422 (damaged
in transit) is resent at once.
:meth:`set_parent` re-targets: the attempt in flight (if any) finishes where it went - an
acknowledgement from the old parent counts - and every later attempt, including the very next
one (the backoff wait is cut short), goes to the new URL. With no parent (``None``, e.g. this
node is the root or is re-joining) snapshots wait in the queue. :meth:`pending` shows the
queue for status; :meth:`close` stops sending (unacknowledged snapshots stay listed).
One in flight at a time keeps per-sender delivery ordered, which the parent's barrier relies
on (:mod:`srt.dataplane.barrier`).

A sender to a **replica** of the parent's position (``path`` =
:data:`~srt.dataplane.name.REPLICA_SNAPSHOT_PATH`) is a redundant copy of the stream, not
the authoritative one: it is given ``max_queued``, and past that many unacknowledged epochs
it drops the oldest (counted ``dropped``) rather than hold memory for a replica that is gone;
the replica then lacks those epochs and, should it take over, says so (lineage).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter
from collections.abc import Callable
from typing import Any, Protocol

from sortedcontainers import SortedDict
from yarl import URL

from cbt import Snapshot
from srt.config import DEFAULT_TUNABLES, Tunables
from srt.dataplane.client import DataPlaneClient
from srt.dataplane.name import SNAPSHOT_PATH, SnapshotName
from srt.errors import DataPlaneError

log = logging.getLogger(__name__)


class SnapshotShortcut(Protocol):
    """A cheaper way to the parent for small snapshots (:class:`~srt.dataplane.datagram.
    SnapshotDatagrams`): ``send`` returns the acknowledgement, raises ``DataPlaneError`` as the
    HTTP post would, or returns None for no reply (the sender posts over HTTP at once)."""

    def fits(self, size: int) -> bool: ...

    async def send(self, node: Any, name: SnapshotName, body: bytes, path: str) -> str | None: ...


def check_url(url: str | None) -> None:
    """Raise ``ValueError`` unless ``url`` is None or an absolute ``http(s)://host:port``."""
    if url is not None:
        u = URL(url)
        if not u.absolute or u.scheme not in ("http", "https"):
            raise ValueError(f"parent URL must be http(s)://host:port, got {url!r}")


class UpstreamSender:
    """Ordered, acknowledged delivery of one (job, tree)'s snapshots (see module docstring).

    ``sender`` is this node's id (the names' sender field); if omitted, the first
    :meth:`send` sets it. ``path`` and ``max_queued``: a sender to a replica of the parent's
    position (module contract); ``max_queued`` None keeps every epoch until acknowledged."""

    def __init__(
        self,
        client: DataPlaneClient,
        *,
        job: str,
        tree: int,
        sender: int | None = None,
        parent_url: str | None = None,
        tunables: Tunables = DEFAULT_TUNABLES,
        path: str = SNAPSHOT_PATH,
        max_queued: int | None = None,
        shortcut: SnapshotShortcut | None = None,
    ) -> None:
        SnapshotName(job, tree, 0, 0 if sender is None else sender)  # validates the fields
        check_url(parent_url)
        if max_queued is not None and max_queued < 1:
            raise ValueError(f"max_queued must be >= 1 or None, got {max_queued!r}")
        self.path = path
        self.max_queued = max_queued
        self.client = client
        self.shortcut = shortcut
        self._via: Any = None  # the parent's overlay node, for the shortcut (set_parent)
        self.job = job
        self.tree = tree
        self.sender = sender
        self.backoff = tunables.upstream_backoff
        self.max_backoff = tunables.upstream_max_backoff
        self._parent = parent_url
        self._queue: SortedDict = SortedDict()  # epoch -> payload bytes
        self._in_flight: int | None = None
        self._attempts = 0
        self._last_error: str | None = None
        self._last_ack: float | None = None
        self._task: asyncio.Task | None = None
        self._wake: asyncio.Event | None = None
        self._retarget: asyncio.Event | None = None
        self._progress: asyncio.Event | None = None
        #: called with the parent URL when a send was refused (nothing listens there: the
        #: parent's process is gone) - the owner can re-join at once instead of waiting for
        #: heartbeat timeouts
        self.on_refused: Callable[[str], None] | None = None
        self._closed = False
        self.counters: Counter[str] = Counter()
        #: the newest epoch a receiver acknowledged (None: none yet)
        self.acked_epoch: int | None = None

    # ---- API ----------------------------------------------------------------------------
    @property
    def parent_url(self) -> str | None:
        return self._parent

    def enqueue(self, epoch: int, payload: bytes | Snapshot) -> None:
        """Queue this node's snapshot of ``epoch`` (bytes from ``Snapshot.to_bytes()`` or a
        snapshot). A second enqueue of a queued epoch is ignored (a name is sent once)."""
        if self._closed:
            raise RuntimeError("UpstreamSender is closed")
        if self.sender is None:
            raise ValueError("no sender id: pass sender= or use send(name, payload)")
        SnapshotName(self.job, self.tree, epoch, self.sender)
        if epoch in self._queue:
            self.counters["enqueued_twice"] += 1
            return
        self._queue[epoch] = payload.to_bytes() if isinstance(payload, Snapshot) else payload
        self.counters["enqueued"] += 1
        while self.max_queued is not None and len(self._queue) > self.max_queued:
            oldest = self._queue.keys()[0]
            if oldest == self._in_flight:  # its attempt may still be acknowledged
                oldest = self._queue.keys()[1]
            del self._queue[oldest]
            self.counters["dropped"] += 1
        self._kick()

    def send(self, name: SnapshotName, payload: bytes | Snapshot) -> None:
        """Queue a named snapshot: the name must be this sender's (job, tree); its sender
        field becomes this sender's id if none was given, and must match it otherwise."""
        if (name.job, name.tree) != (self.job, self.tree):
            raise ValueError(f"{name} does not belong to the queue of {self.job!r}/{self.tree:x}")
        if self.sender is None:
            self.sender = name.sender
        elif name.sender != self.sender:
            raise ValueError(
                f"{name} has sender {name.sender:x}, this queue sends as {self.sender:x}"
            )
        self.enqueue(name.epoch, payload)

    def set_parent(self, url: str | None, via: Any = None) -> None:
        """Send every unacknowledged snapshot to ``url`` from now on (None: hold them);
        ``via``: the parent's overlay node, where the ``shortcut`` sends small snapshots
        (None: every snapshot goes to ``url``)."""
        self._via = via if url is not None else None
        if url == self._parent:
            return
        check_url(url)
        self._parent = url
        self.counters["retargets"] += 1
        self._kick()
        if self._retarget is not None:
            self._retarget.set()

    def pending(self) -> dict:
        """Status: parent, queued epochs, the one in flight, its attempts and last error."""
        return {
            "job": self.job,
            "tree": self.tree,
            "parent": self._parent,
            "queued": list(self._queue.keys()),
            "queued_bytes": sum(map(len, self._queue.values())),
            "in_flight": self._in_flight,
            "attempts": self._attempts,
            "last_error": self._last_error,
            "last_ack_age_s": None if self._last_ack is None else time.monotonic() - self._last_ack,
            "counters": dict(self.counters),
        }

    def take_queued(self, upto: int | None = None) -> list[tuple[int, bytes]]:
        """Remove and return every unacknowledged ``(epoch, payload)`` (with ``upto``: every
        one of an epoch ``<= upto``; later ones stay queued), oldest first (this node became
        the root: it keeps what it would have sent). The attempt in flight, if any, is
        returned too and may still be acknowledged where it went, so a receiver must
        tolerate the copy (lineage makes the second one a duplicate)."""
        taken = [(e, self._queue.pop(e)) for e in list(self._queue.irange(maximum=upto))]
        self.counters["taken"] += len(taken)
        if self._progress is not None:
            self._progress.set()
        return taken

    async def flush(self, timeout: float | None = None) -> bool:
        """Wait until the queue is empty; False if ``timeout`` passed first."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self._queue:
            self._ensure_loop_objects()
            assert self._progress is not None
            self._progress.clear()
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return False
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._progress.wait(), left)
        return True

    async def acked_past(self, epoch: int, timeout: float) -> bool:
        """Wait until a receiver acknowledged an epoch after ``epoch``; False if ``timeout``
        passed first."""
        deadline = time.monotonic() + timeout
        while self.acked_epoch is None or self.acked_epoch <= epoch:
            self._ensure_loop_objects()
            assert self._progress is not None
            self._progress.clear()
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._progress.wait(), left)
        return True

    async def close(self) -> None:
        """Stop sending; unacknowledged snapshots stay in :meth:`pending`."""
        self._closed = True
        if self._task is not None:
            task, self._task = self._task, None
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    # ---- the sending loop ---------------------------------------------------------------
    def _ensure_loop_objects(self) -> None:
        if self._wake is None:
            self._wake = asyncio.Event()
            self._retarget = asyncio.Event()
            self._progress = asyncio.Event()

    def _kick(self) -> None:
        if self._closed:
            return
        self._ensure_loop_objects()
        assert self._wake is not None
        self._wake.set()
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        assert self._wake is not None and self._retarget is not None
        delay = self.backoff
        while not self._closed:
            url = self._parent
            if not self._queue or url is None:
                self._wake.clear()
                await self._wake.wait()
                continue
            epoch, payload = self._queue.peekitem(0)
            assert self.sender is not None
            name = SnapshotName(self.job, self.tree, epoch, self.sender)
            self._in_flight = epoch
            self._attempts += 1
            self._retarget.clear()
            try:
                result = await self._deliver(url, name, payload)
            except DataPlaneError as e:
                self._in_flight = None
                self._last_error = str(e)
                self.counters["failed_attempts"] += 1
                if e.reason == "refused" and self.on_refused is not None:
                    try:
                        self.on_refused(url)
                    except Exception:
                        log.exception("on_refused callback failed")
                if e.status == 422:
                    continue  # damaged in transit: resend at once
                if not e.transient:
                    log.warning("parent %s refused %s: %s (retrying)", url, name, e)
                if self._parent != url:
                    delay = self.backoff
                    continue
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._retarget.wait(), delay)
                delay = min(self.max_backoff, delay * 2)
                continue
            except RuntimeError:  # the client was closed under us
                self._in_flight = None
                self._last_error = "client closed"
                return
            except Exception as e:  # a bug must not silently stop the queue: log, back off
                log.exception("sending %s to %s failed", name, url)
                self._in_flight = None
                self._last_error = f"{type(e).__name__}: {e}"
                self.counters["failed_attempts"] += 1
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._retarget.wait(), self.max_backoff)
                continue
            self._in_flight = None
            self._queue.pop(epoch, None)
            self._attempts = 0
            self._last_error = None
            self._last_ack = time.monotonic()
            self.acked_epoch = epoch if self.acked_epoch is None else max(self.acked_epoch, epoch)
            self.counters[result] += 1
            delay = self.backoff
            assert self._progress is not None
            self._progress.set()

    async def _deliver(self, url: str, name: SnapshotName, payload: bytes) -> str:
        """One attempt: by the shortcut when it takes the snapshot and answers, else HTTP."""
        shortcut, via = self.shortcut, self._via
        if shortcut is not None and via is not None and shortcut.fits(len(payload)):
            result = await shortcut.send(via, name, payload, self.path)
            if result is not None:
                self.counters["by_datagram"] += 1
                return result
            self.counters["datagram_unanswered"] += 1
        return await self.client.send_snapshot(url, name, payload, attempts=1, path=self.path)
