"""OriginLoss: a job's master finds origins that are down and re-issues their epochs.

Contract (``docs/fault-tolerance.md``, "Permanent loss"). At a tree's root (the master):

* **Laggards are checked, not waited for.** The master looks at the oldest epoch its barrier
  still holds, every ``watch_interval`` from the moment that epoch can be suspect on (before,
  it only waits for that moment: :meth:`OriginLoss.next_round_in`); once that epoch closed
  (its end plus the allowed lateness) more than ``suspect_after`` ago, every expected origin
  its barrier has not received yet is *probed*: an empty ``POST /agent/v1/resend`` to the
  origin's data-plane URL (learnt from its origin announcement; else asked of the overlay),
  bounded to :data:`MAX_PROBES` probes per second in all and one per origin per second. A refused
  connection proves the origin's process is gone. A probe that times out (a stopped or slow
  agent: the kernel still accepts its connections) proves nothing: the straggler rules apply.
* **Declared down** - by such a refusal, by a refused repair pull, or by the overlay's
  failure detector followed by ``loss_timeout`` more seconds of silence (a host that
  vanished refuses nothing) - an origin is **absent**: the master tells the overlay (the trees
  re-form around it at once), multicasts ``{"kind": "lost", "origin"}`` down each tree it
  masters (a node whose child it is drops it from its barrier at once), fetches the origin's
  **checkpoints** from the live agents closest to its id (its hot replicas:
  :mod:`agent.runtime.recovery.checkpoints`) and folds each as that origin's own contribution
  (lineage ``{origin}``: a duplicate of what the master already has is dropped), then records
  it absent (:meth:`Membership.declare_absent`). A process is not its data: the host's logs
  are still being written and a restarted agent reads them, so the origin **stays expected**:
  every epoch it misses is tentative, naming it, until it comes back or is retired
  (:mod:`agent.runtime.recovery.absence`). What its checkpoints held makes epochs final sooner.
* **An absent origin that comes back** (it was only cut off, or restarted) contributes again:
  its re-sent epochs are folded in as late contributions (a new version, final once
  complete).

Every declaration is recorded (:attr:`OriginLoss.events`, the job's status ``losses``: origin,
why, when, how many epochs were re-issued and when) - what the benchmark reads.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import time
from collections import deque
from collections.abc import Iterable
from typing import Any, Protocol

from srt.dataplane.client import DataPlaneError
from srt.dataplane.lineage import covered

log = logging.getLogger(__name__)

MAX_PROBES = 32  # origins probed per second (all rounds together)
#: the longest a watch round waits (a barrier replaced meanwhile may hold an older epoch)
MAX_WATCH_SLEEP = 1.0
PROBE_TIMEOUT = 1.0  # seconds; a probe that takes longer proves nothing
HOLDERS_ASKED = 8  # live agents closest to a lost origin asked for its checkpoints
FETCH_TIMEOUT = 2.0


class LossHost(Protocol):
    """What :class:`OriginLoss` needs of its job (recovery.py gives an adapter over the job)."""

    name: str

    @property
    def node_id(self) -> int: ...

    def root_trees(self) -> list[int]: ...

    def waiting_epoch(self, tid: int) -> tuple[int, frozenset[int]] | None:
        """The oldest epoch the tree's barrier holds and the origins it received for it."""
        ...

    def oldest_open_epoch(self, tid: int) -> int | None:
        """The oldest epoch the tree's barrier has not emitted (None: no barrier yet)."""
        ...

    def closed_at(self, epoch: int) -> float: ...

    def expected(self, epoch: int) -> frozenset[int]: ...

    def is_member(self, origin: int) -> bool: ...

    def declare_absent(self, origin: int, why: str) -> bool: ...

    def is_absent(self, origin: int) -> bool: ...

    async def fold_origin(
        self, tid: int, origin: int, parts: dict[int, bytes], records: dict[str, Any]
    ) -> int: ...

    def after_absence(self, origin: int) -> None: ...

    def count(self, what: str, n: int = 1) -> None: ...

    def spawn(self, coro: Any, what: str) -> Any: ...

    async def multicast(self, tid: int, message: dict[str, Any]) -> Any: ...


class LossNetwork(Protocol):
    """What :class:`OriginLoss` needs of the agent's network."""

    @property
    def client(self) -> Any: ...

    def peer_gone(self, node_id: int) -> None: ...

    def routable(self, node_id: int) -> bool: ...

    def near(self, key: int, count: int) -> list[Any]: ...

    async def data_url_of(self, node: Any) -> str: ...


class OriginLoss:
    """Per job at its master: laggard probes, loss declarations, re-issue (module contract)."""

    def __init__(
        self,
        host: LossHost,
        network: LossNetwork,
        *,
        watch_interval: float = 0.1,
        suspect_after: float = 0.1,
        loss_timeout: float = 10.0,
    ) -> None:
        self.host = host
        self.network = network
        self.watch_interval = watch_interval
        self.suspect_after = suspect_after
        self.loss_timeout = loss_timeout
        self.urls: dict[int, str] = {}
        self.events: deque[dict[str, Any]] = deque(maxlen=32)
        self._probed: dict[int, float] = {}
        self._recent_probes: deque[float] = deque()  # when the last second's probes went
        self._declaring: set[int] = set()
        self._watching: set[int] = set()
        self._silent: set[int] = set()

    # ---- laggards ------------------------------------------------------------------------

    def learn_url(self, origin: int, url: Any) -> None:
        if isinstance(url, str) and url.startswith(("http://", "https://")) and len(url) < 512:
            self.urls[origin] = url

    def export_urls(self) -> dict[str, str]:
        """Origin (hex) → data-plane URL, for the next master (standby replica, hand-over)."""
        return {format(o, "x"): u for o, u in self.urls.items()}

    def learn_urls(self, state: Any) -> None:
        """The URLs of a previous master's :meth:`export_urls` (inside its expected-origins
        state; malformed entries skipped)."""
        urls = state.get("urls") if isinstance(state, dict) else None
        for key, url in urls.items() if isinstance(urls, dict) else ():
            try:
                origin = int(key, 16)
            except (TypeError, ValueError):
                continue
            if origin not in self.urls and 0 <= origin < 1 << 160:
                self.learn_url(origin, url)

    def watch(self, tid: int) -> None:
        """Start watching ``tid``'s laggards (idempotent; the loop ends when not root)."""
        if tid not in self._watching:
            self._watching.add(tid)
            self.host.spawn(self._watch_loop(tid), f"{self.host.name} laggards")

    async def _watch_loop(self, tid: int) -> None:
        try:
            while tid in self.host.root_trees():
                await asyncio.sleep(self.next_round_in(tid, time.time()))
                self.check(tid, time.time())
        finally:
            self._watching.discard(tid)

    def next_round_in(self, tid: int, now: float) -> float:
        """Seconds to the next watch round: when the oldest epoch the barrier has not emitted
        turns suspect (closed ``suspect_after`` ago), at least ``watch_interval`` and at most
        :data:`MAX_WATCH_SLEEP` away. A round before then finds nothing to probe (the rule of
        :meth:`check`), so it would only be a wake-up: a master idles at one wake-up per
        epoch, not ten a second (issue "A lightweight agent")."""
        epoch = self.host.oldest_open_epoch(tid)
        if epoch is None:
            return self.watch_interval
        due = self.host.closed_at(epoch) + self.suspect_after - now
        return max(self.watch_interval, min(due, MAX_WATCH_SLEEP))

    def check(self, tid: int, now: float) -> list[int]:
        """One watch round: probe the origins the oldest held epoch lacks (returns them)."""
        held = self.host.waiting_epoch(tid)
        if held is None:
            return []
        epoch, received = held
        if now < self.host.closed_at(epoch) + self.suspect_after:
            return []
        lacking = self.host.expected(epoch) - covered(received)
        return self.suspect(tid, lacking, now)

    def suspect(self, tid: int, origins: Iterable[int], now: float) -> list[int]:
        """Probe ``origins`` (a result of ``tid`` lacks them), each at most once a second and
        at most :data:`MAX_PROBES` a second in all; returns those probed now."""
        probed = []
        recent = self._recent_probes
        while recent and now - recent[0] >= 1.0:
            recent.popleft()
        for origin in sorted(set(origins) - {self.host.node_id}):
            if len(recent) >= MAX_PROBES:  # the budget is per second, not per round
                break
            if now - self._probed.get(origin, 0.0) < 1.0 or origin in self._declaring:
                continue
            if self.host.is_absent(origin):
                continue  # known down: it is noticed when it contributes or announces again
            self._probed[origin] = now
            recent.append(now)
            probed.append(origin)
            self.host.spawn(self._probe(tid, origin), f"{self.host.name} probe")
        return probed

    async def _probe(self, tid: int, origin: int) -> None:
        self.host.count("laggard_probes")
        body = {"job": self.host.name, "tree": tid, "origin": f"{origin:x}", "epochs": []}
        try:
            url = self.urls.get(origin) or await asyncio.wait_for(
                self.network.data_url_of(origin), PROBE_TIMEOUT
            )
            self.urls[origin] = url
            await asyncio.wait_for(
                self.network.client.post_json(url, "/agent/v1/resend", body), PROBE_TIMEOUT
            )
        except DataPlaneError as exc:
            if exc.reason == "refused":
                self.refused(origin, "its data-plane port refused the master's probe")
        except Exception as exc:  # slow, stopped or unknown: proves nothing
            log.info("job %s: probe of origin %x proved nothing: %r", self.host.name, origin, exc)

    # ---- declarations ----------------------------------------------------------------------

    def refused(self, origin: int, why: str) -> None:
        """Proof: ``origin``'s process is gone."""
        self.urls.pop(origin, None)
        self.network.peer_gone(origin)
        self.declare(origin, why)

    def overlay_failed(self, origin: int) -> None:
        """The overlay declared ``origin`` failed (silence, or someone else's proof): lost if
        it stays unreachable for ``loss_timeout`` more seconds."""
        if origin in self._silent or not self.host.is_member(origin):
            return
        self._silent.add(origin)
        self.host.spawn(self._after_silence(origin), f"{self.host.name} loss timeout")

    async def _after_silence(self, origin: int) -> None:
        try:
            await asyncio.sleep(self.loss_timeout)
            if not self.network.routable(origin):
                self.declare(origin, f"silent for {self.loss_timeout:g} s after its failure")
        finally:
            self._silent.discard(origin)

    def declare(self, origin: int, why: str) -> None:
        """``origin`` is down: re-issue its checkpoints, then record it absent."""
        if origin == self.host.node_id or origin in self._declaring:
            return
        if not self.host.is_member(origin) or self.host.is_absent(origin):
            return
        self._declaring.add(origin)
        self.host.spawn(self._declare(origin, why), f"{self.host.name} origin lost")

    async def _declare(self, origin: int, why: str) -> None:
        declared = time.time()
        event: dict[str, Any] = {
            "origin": f"{origin:x}",
            "why": why,
            "declared_at": declared,
            "reissued": None,
            "reissued_at": None,
        }
        try:
            trees = self.host.root_trees()
            for tid in trees:
                self.host.spawn(
                    self.host.multicast(tid, {"kind": "lost", "origin": f"{origin:x}"}),
                    f"{self.host.name} lost multicast",
                )
            done = await asyncio.gather(*(self._reissue(tid, origin) for tid in trees))
            event["reissued"] = sum(n for n, _ in done)
            event["reissued_at"] = time.time()
            if self.host.declare_absent(origin, why):
                self.host.count("origins_absent_declared")
                self.events.append(event)
                log.warning(
                    "job %s: origin %x is down (%s): %d of its epochs re-issued from its "
                    "replicas; the epochs it misses stay tentative, naming it, until it comes "
                    "back or is retired",
                    self.host.name,
                    origin,
                    why,
                    event["reissued"],
                )
                self.host.after_absence(origin)
        finally:
            self._declaring.discard(origin)

    async def _reissue(self, tid: int, origin: int) -> tuple[int, int | None]:
        """Fetch ``origin``'s checkpoints of ``tid`` from the agents closest to it; fold.
        Returns how many were new here and the newest epoch it said it read a record of."""
        holders = self.network.near(origin, HOLDERS_ASKED)
        body = {"job": self.host.name, "tree": tid, "origin": f"{origin:x}"}
        replies = await asyncio.gather(*(self._fetch(h, body) for h in holders))
        parts: dict[int, bytes] = {}
        records: dict[str, Any] = {}
        seen: int | None = None
        for got, counts, said in replies:
            for epoch, data in got.items():
                parts.setdefault(epoch, data)
            for key, n in counts.items():
                records.setdefault(key, n)
            if type(said) is int and (seen is None or said > seen):
                seen = said
        if not parts:
            return 0, seen
        self.host.count("checkpoints_fetched", len(parts))
        merged = await self.host.fold_origin(tid, origin, parts, records)
        log.info(
            "job %s tree %x: origin %x's checkpoints of epochs %s fetched, %d new here",
            self.host.name,
            tid,
            origin,
            sorted(parts),
            merged,
        )
        return merged, seen

    async def _fetch(
        self, holder: Any, body: dict[str, Any]
    ) -> tuple[dict[int, bytes], dict[str, Any], Any]:
        try:
            url = await asyncio.wait_for(self.network.data_url_of(holder), FETCH_TIMEOUT)
            reply = await asyncio.wait_for(
                self.network.client.post_json(url, "/agent/v1/checkpoint/fetch", body),
                FETCH_TIMEOUT,
            )
            epochs = reply.get("epochs") if isinstance(reply, dict) else None
            counts = reply.get("records") if isinstance(reply, dict) else None
            return (
                _decoded(epochs.items() if isinstance(epochs, dict) else ()),
                counts if isinstance(counts, dict) else {},
                reply.get("seen") if isinstance(reply, dict) else None,
            )
        except Exception as exc:  # that holder is gone or slow: the others may have it
            log.info("job %s: checkpoint fetch from %x: %r", self.host.name, holder.id, exc)
            return {}, {}, None

    def status(self) -> list[dict[str, Any]]:
        return list(self.events)


def _decoded(items: Iterable[tuple[Any, Any]]) -> dict[int, bytes]:
    out: dict[int, bytes] = {}
    for key, text in items:
        try:
            out[int(key)] = base64.b64decode(text, validate=True)
        except (TypeError, ValueError):
            continue  # a damaged entry: the next holder's copy may do
    return out
