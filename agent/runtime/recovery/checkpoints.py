"""Hot replicas: origins' uncommitted epoch snapshots held by their overlay neighbours.

Contract (``docs/fault-tolerance.md``, "Permanent loss"). ELF's hot replication: every agent
checkpoints, asynchronously, the snapshots of its closed epochs that the job's master has not
committed yet to ``k`` overlay neighbours (the job's ``checkpoint_replicas``, default 2), so
that when the agent dies for good its closed epochs can still be re-issued into the tree
under its own origin identity (lineage then drops whatever the master already has).

* :func:`pick_holders` (pure): the ``k`` live neighbours XOR-closest to the origin, on
  failure domains other than the origin's and each other's when there are enough of them,
  then the closest remaining ones.
* :class:`CheckpointSender` (origin side, one per job): :meth:`~CheckpointSender.closed`
  queues an epoch; a background task waits ``delay`` (so an epoch committed within it - the
  steady state: roll-up and commit take milliseconds - is never sent at all), then sends the
  queued epochs still uncommitted, at most :data:`BATCH` per request, to every holder
  (``POST /agent/v1/checkpoint``), with the tree's commit watermark so holders forget what
  was committed. Each holder has its own queue and sender, so a stalled holder delays only
  its own copies (each request times out after :data:`POST_TIMEOUT`; what it missed is
  re-queued for it with the next round's epochs only if still uncommitted - a failed request
  is counted, not retried). The event loop never waits for it. Nothing is sent while ``k``
  is 0. Bounded by the retained snapshots (``retained_bytes``): only their ids are queued.
* :class:`CheckpointStore` (holder side, one per agent): (origin, job, tree) → epoch →
  snapshot bytes, bounded by ``max_bytes`` (oldest dropped first, logged at WARNING with job,
  tree, epoch and origin) and pruned by the origin's commit watermark; :meth:`fetch` answers a
  master re-issuing a lost origin's epochs (``POST /agent/v1/checkpoint/fetch``).

Bytes stored are snapshot bytes exactly as the origin produced them (``Snapshot.to_bytes``);
a holder never decodes them, the master admits them like any child's snapshot.
"""

from __future__ import annotations

import asyncio
import base64
import logging
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol

log = logging.getLogger(__name__)

BATCH = 16  # epochs per checkpoint request (one origin's, one tree)
POST_TIMEOUT = 5.0  # seconds a holder may take to answer one checkpoint request
MAX_EPOCHS_PER_KEY = 1024  # epochs a holder keeps per (origin, job, tree)
MAX_SEEN = 65_536  # (origin, job) pairs whose newest read epoch a holder remembers


class Peer(Protocol):
    """What :func:`pick_holders` needs of an overlay contact."""

    @property
    def id(self) -> int: ...

    @property
    def domain(self) -> str: ...


def pick_holders(origin: int, domain: str, peers: Iterable[Peer], k: int) -> list[Peer]:
    """The ``k`` holders for ``origin``'s checkpoints (module contract): closest first,
    distinct failure domains (none equal to ``domain``) preferred."""
    if k <= 0:
        return []
    ranked = sorted(
        {p.id: p for p in peers if p.id != origin}.values(), key=lambda p: p.id ^ origin
    )
    chosen: list[Peer] = []
    domains = {domain}
    for peer in ranked:  # first pass: one per domain, never the origin's own
        if len(chosen) == k:
            return chosen
        if peer.domain not in domains:
            chosen.append(peer)
            domains.add(peer.domain)
    for peer in ranked:  # too few domains: the closest of the rest
        if len(chosen) == k:
            break
        if peer not in chosen:
            chosen.append(peer)
    return chosen


class CheckpointStore:
    """Holder side (module contract): checkpoints of other agents' uncommitted epochs."""

    def __init__(self, max_bytes: int = 64 * 2**20) -> None:
        self.max_bytes = max_bytes
        self.bytes = 0
        self.stored = 0
        self.dropped = 0
        self.fetched = 0
        # (origin, job, tree) -> epoch -> bytes; the outer order is least recently written
        self._held: OrderedDict[tuple[int, str, int], dict[int, bytes]] = OrderedDict()
        self._committed: dict[tuple[int, str, int], int] = {}
        self._records: dict[tuple[int, str, int], dict[int, int]] = {}  # epoch record counts
        self._seen: dict[tuple[int, str], int] = {}  # (origin, job) → newest epoch it read

    def keep(
        self,
        origin: int,
        job: str,
        tree: int,
        committed: int | None,
        epochs: dict[int, bytes],
        records: dict[int, int] | None = None,
        seen: int | None = None,
    ) -> int:
        """Hold ``epochs`` of ``origin``; forget its epochs up to ``committed``; remember the
        newest epoch it ``seen`` any record of. Returns how many epochs are newly held."""
        key = (origin, job, tree)
        if (
            seen is not None
            and seen > self._seen.get((origin, job), -1)
            and ((origin, job) in self._seen or len(self._seen) < MAX_SEEN)
        ):
            self._seen[(origin, job)] = seen
        if committed is not None and committed > self._committed.get(key, -1):
            self._committed[key] = committed
        floor = self._committed.get(key, -1)
        held = self._held.pop(key, {})
        self._held[key] = held  # most recently written last
        counts = self._records.setdefault(key, {})
        for epoch in [e for e in held if e <= floor]:
            self.bytes -= len(held.pop(epoch))
            counts.pop(epoch, None)
        new = 0
        for epoch, body in epochs.items():
            if epoch <= floor or epoch in held:
                continue
            held[epoch] = body
            if records and epoch in records:
                counts[epoch] = records[epoch]
            self.bytes += len(body)
            new += 1
        while len(held) > MAX_EPOCHS_PER_KEY:
            self._drop(key, min(held))
        self.stored += new
        self._trim()
        if not held:
            self._held.pop(key, None)
            self._records.pop(key, None)
        return new

    def set_limit(self, limit: int) -> None:
        """The agent's memory budget gave the held checkpoints ``limit`` bytes: shed the
        least recently written origins' oldest epochs past it now (each logged)."""
        self.max_bytes = limit
        self._trim()

    def _trim(self) -> None:
        while self.bytes > self.max_bytes and self._held:
            oldest = next(iter(self._held))
            if not self._held[oldest]:
                del self._held[oldest]
                self._records.pop(oldest, None)
                continue
            self._drop(oldest, min(self._held[oldest]))

    def _drop(self, key: tuple[int, str, int], epoch: int) -> None:
        body = self._held[key].pop(epoch)
        self._records.get(key, {}).pop(epoch, None)
        self.bytes -= len(body)
        self.dropped += 1
        origin, job, tree = key
        log.warning(
            "job %s tree %x epoch %d: checkpoint of origin %x dropped (holder budget %d "
            "bytes); if that origin dies for good, this epoch can no longer be re-issued",
            job,
            tree,
            epoch,
            origin,
            self.max_bytes,
        )

    def fetch(
        self, origin: int, job: str, tree: int, epochs: Iterable[int] | None
    ) -> dict[int, bytes]:
        """The held checkpoints of ``origin`` for (job, tree): ``epochs`` (None: all)."""
        held = self._held.get((origin, job, tree), {})
        wanted = held.keys() if epochs is None else [e for e in epochs if e in held]
        out = {e: held[e] for e in sorted(wanted)}
        self.fetched += len(out)
        return out

    def seen(self, origin: int, job: str) -> int | None:
        """The newest epoch ``origin`` said it read a record of (None: never said)."""
        return self._seen.get((origin, job))

    def records(self, origin: int, job: str, tree: int, epochs: Iterable[int]) -> dict[int, int]:
        """The record counts the origin sent with ``epochs`` (those it sent)."""
        counts = self._records.get((origin, job, tree), {})
        return {e: counts[e] for e in epochs if e in counts}

    def forget_job(self, job: str) -> None:
        """A stopped job: drop everything held for it."""
        for key in [k for k in self._held if k[1] == job]:
            self.bytes -= sum(len(b) for b in self._held.pop(key).values())
            self._records.pop(key, None)
        for key in [k for k in self._committed if k[1] == job]:
            del self._committed[key]
        for seen_key in [k for k in self._seen if k[1] == job]:
            del self._seen[seen_key]

    def stats(self) -> dict[str, Any]:
        return {
            "origins": len({k[0] for k in self._held}),
            "epochs": sum(len(v) for v in self._held.values()),
            "bytes": self.bytes,
            "max_bytes": self.max_bytes,
            "stored": self.stored,
            "dropped": self.dropped,
            "fetched": self.fetched,
        }


class Retained(Protocol):
    """The origin's own retained snapshots (agent/runtime/recovery/retained_epochs.py)."""

    def get(self, tree: int, epoch: int) -> Any: ...

    def records(self, tree: int, epoch: int) -> int | None: ...


class HolderNetwork(Protocol):
    """What the sender needs of the agent's network."""

    @property
    def node_id(self) -> int: ...

    @property
    def domain(self) -> str: ...

    @property
    def client(self) -> Any: ...

    def neighbours(self) -> list[Any]: ...

    async def data_url_of(self, node: Any) -> str: ...


class CheckpointSender:
    """Origin side (module contract): sends uncommitted closed epochs to ``k`` holders."""

    def __init__(
        self,
        job: str,
        retained: Retained,
        network: HolderNetwork,
        replicas: Callable[[], int],
        committed: Callable[[int], int | None],
        delay: float = 0.25,
        seen: Callable[[], int | None] = lambda: None,
        now_epoch: Callable[[], int] = lambda: 0,
    ) -> None:
        self.job = job
        self.seen = seen
        self.now_epoch = now_epoch
        self._told_seen: dict[int, int] = {}  # holder → the newest seen epoch it was told
        self.retained = retained
        self.network = network
        self.replicas = replicas
        self.committed = committed
        self.delay = delay
        self.sent_epochs = 0
        self.sent_bytes = 0
        self.requests = 0
        self.failures = 0
        self.skipped_committed = 0
        self.newest_sent: int | None = None  # the newest epoch a holder took
        self.holders: list[str] = []  # hex ids of the last round's holders (status)
        self._queue: dict[int, set[int]] = {}
        self._wake = asyncio.Event()
        self._urls: dict[int, str] = {}
        self._closed = False
        self._pending: dict[int, dict[int, set[int]]] = {}  # holder → tree → epochs
        self._draining: set[int] = set()
        self._tasks: set[asyncio.Future[None]] = set()

    def close(self) -> None:
        """The job stopped: the background task ends at its next wake-up."""
        self._closed = True
        self._queue.clear()
        self._pending.clear()
        self._wake.set()
        for task in self._tasks:
            task.cancel()

    def closed(self, tree: int, epoch: int) -> None:
        """The origin closed ``epoch`` of ``tree`` (event loop; never blocks)."""
        if self._closed or self.replicas() <= 0:
            return
        self._queue.setdefault(tree, set()).add(epoch)
        self._wake.set()

    async def run(self) -> None:
        """The background task: wait for closed epochs, let ``delay`` pass, send."""
        while not self._closed:
            await self._wake.wait()
            await asyncio.sleep(self.delay)
            self._wake.clear()
            if self._closed:
                return
            queue, self._queue = self._queue, {}
            try:
                await self._send_round(queue)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # never let one bad round end the task
                self.failures += 1
                log.warning("job %s: checkpoint round failed: %r", self.job, exc)

    async def _send_round(self, queue: dict[int, set[int]]) -> None:
        k = self.replicas()
        holders = pick_holders(
            self.network.node_id, self.network.domain, self.network.neighbours(), k
        )
        self.holders = [format(h.id, "x") for h in holders]
        seen = self.seen()
        for holder in holders:
            pending = self._pending.setdefault(holder.id, {})
            for tree, epochs in queue.items():
                pending.setdefault(tree, set()).update(epochs)
            if (
                seen is not None
                and seen > self.now_epoch()
                and seen > self._told_seen.get(holder.id, -1)
            ):
                # records from epochs still ahead of the clock (a skewed log clock): if this
                # origin dies, its master must know they were read (they died with it)
                for tree in queue:
                    pending.setdefault(tree, set())
            if holder.id not in self._draining:
                # one drain per holder: a stalled holder (its kernel accepts, nobody answers)
                # holds back only its own copies, never the other holders'
                self._draining.add(holder.id)
                self._tasks.add(asyncio.ensure_future(self._drain(holder)))
        self._tasks = {t for t in self._tasks if not t.done()}

    async def _drain(self, holder: Any) -> None:
        """Send ``holder`` its pending epochs that are still uncommitted, in batches."""
        try:
            while not self._closed and (pending := self._pending.pop(holder.id, None)):
                for tree, epochs in sorted(pending.items()):
                    floor = self.committed(tree)
                    due = sorted(e for e in epochs if floor is None or e > floor)
                    self.skipped_committed += len(epochs) - len(due)
                    parts = [(e, s) for e in due if (s := self.retained.get(tree, e)) is not None]
                    seen = self.seen()
                    if (
                        not parts
                        and seen is not None
                        and seen > self.now_epoch()  # only records ahead of the clock
                        and seen > self._told_seen.get(holder.id, -1)
                    ):
                        await self._post(holder, self._body(tree, floor, {}, [], seen))
                        self._told_seen[holder.id] = seen
                    for start in range(0, len(parts), BATCH):
                        batch = parts[start : start + BATCH]
                        encoded = await asyncio.to_thread(_encode, batch)
                        body = self._body(tree, floor, encoded, batch, seen)
                        if await self._post(holder, body):
                            if seen is not None:
                                self._told_seen[holder.id] = max(
                                    seen, self._told_seen.get(holder.id, -1)
                                )
                            self.newest_sent = max(self.newest_sent or 0, batch[-1][0])
                            self.sent_epochs += len(batch)
                            self.sent_bytes += sum(len(v) for v in encoded.values())
        finally:
            self._draining.discard(holder.id)

    def _body(
        self,
        tree: int,
        floor: int | None,
        encoded: dict[str, str],
        batch: Sequence[tuple[int, Any]],
        seen: int | None,
    ) -> dict[str, Any]:
        return {
            "job": self.job,
            "tree": tree,
            "origin": format(self.network.node_id, "x"),
            "committed": floor,
            "epochs": encoded,
            # each epoch's record count (the master's rate-weighted coverage)
            "records": {
                str(e): n for e, _ in batch if (n := self.retained.records(tree, e)) is not None
            },
            # the newest epoch of any record read: epochs up to it died with us, if we die
            "seen": seen,
        }

    async def _post(self, holder: Any, body: dict[str, Any]) -> bool:
        try:
            url = self._urls.get(holder.id) or await self.network.data_url_of(holder)
            self._urls[holder.id] = url
            self.requests += 1
            await asyncio.wait_for(
                self.network.client.post_json(url, "/agent/v1/checkpoint", body), POST_TIMEOUT
            )
            return True
        except Exception as exc:  # that holder is down or busy: the others still hold it
            self._urls.pop(holder.id, None)
            self.failures += 1
            log.info("job %s: checkpoint to %x failed: %r", self.job, holder.id, exc)
            return False

    def stats(self) -> dict[str, Any]:
        return {
            "replicas": self.replicas(),
            "holders": self.holders,
            "sent_epochs": self.sent_epochs,
            "sent_bytes": self.sent_bytes,
            "requests": self.requests,
            "failures": self.failures,
            "skipped_committed": self.skipped_committed,
            "newest_sent": self.newest_sent,
        }


def _encode(parts: Sequence[tuple[int, Any]]) -> dict[str, str]:
    return {str(e): base64.b64encode(s.to_bytes()).decode() for e, s in parts}


def decode_records(value: Any, limit: int = BATCH * 4) -> dict[int, int]:
    """A request's optional ``records`` object (epoch → record count); ValueError (a 400)
    on anything malformed."""
    if value is None:
        return {}
    if not isinstance(value, dict) or len(value) > limit:
        raise ValueError(f"records must be an object of at most {limit} entries")
    out: dict[int, int] = {}
    for key, n in value.items():
        if type(n) is not int or n < 0:
            raise ValueError("each epoch's record count must be a non-negative integer")
        out[int(key)] = n
    return out


def decode_epochs(value: Any, limit: int = BATCH * 4) -> dict[int, bytes]:
    """A request's ``epochs`` object (epoch → base64 snapshot bytes), validated; raises
    ValueError (a 400) on anything malformed."""
    if not isinstance(value, dict) or len(value) > limit:
        raise ValueError(f"epochs must be an object of at most {limit} entries")
    out: dict[int, bytes] = {}
    for key, text in value.items():
        if not isinstance(text, str):
            raise ValueError("each epoch's snapshot must be base64 text")
        try:
            out[int(key)] = base64.b64decode(text, validate=True)
        except ValueError as exc:
            raise ValueError(f"epoch {key!r}: {exc}") from None
    return out
