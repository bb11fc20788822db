"""Membership and failure detection state (sans-IO: callers pass the time in).

Contract: a peer moves ``alive → suspected`` after ``misses_before_suspect`` *consecutive*
missed replies (one lost datagram never evicts anyone, unlike the bare ``kademlia`` package),
back to ``alive`` on any authenticated message from it, and ``suspected → failed`` once it has
been suspected for ``fail_timeout`` seconds. Failed or departed peers are removed and
tombstoned for ``tombstone_ttl``: second-hand mentions of them (in lookup replies) are ignored,
while a message from the peer itself revives it. Every removal becomes a rumour piggybacked on
the next ``gossip_sends`` probes, so failures leave routing tables everywhere in O(log N)
probe rounds instead of waiting for each node's own probes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from overlay import ids
from overlay.config import Tunables
from overlay.nodeinfo import NodeInfo

FAILED = "failed"
LEFT = "left"
#: a rumour with proof: the sender saw the peer's process gone (its port refused a
#: connection), so it is believed even from a peer heard from lately
GONE = "gone"


@dataclass(slots=True)
class PeerState:
    """What this node knows about one peer."""

    info: NodeInfo
    last_heard: float | None  # None: only heard of, second-hand
    misses: int = 0
    suspected_since: float | None = None


class Membership:
    """Known peers with their liveness, tombstones of removed peers and pending rumours."""

    def __init__(self, self_id: int, tunables: Tunables) -> None:
        self.self_id = self_id
        self.t = tunables
        self.peers: dict[int, PeerState] = {}
        self.tombstones: dict[int, float] = {}
        self._rumours: dict[int, list[Any]] = {}  # id -> [kind, sends left]
        # ids with suspected_since set: lets the per-tick scans return at once when nobody
        # is suspected (the usual case); the scans themselves keep the peers' order.
        self._suspects: set[int] = set()
        # the peer at each address: a late reply names only the address it came from
        self._at: dict[tuple[str, int], int] = {}

    def get(self, node_id: int) -> PeerState | None:
        return self.peers.get(node_id)

    def learn(self, info: NodeInfo, now: float, direct: bool) -> str | None:
        """Record a peer. Returns ``"new"`` for a peer not known before, ``"revived"`` when a
        suspected peer spoke, else ``None``. Second-hand news of a tombstoned peer is ignored
        (returns ``None``)."""
        if info.id == self.self_id:
            return None
        tomb = self.tombstones.get(info.id)
        if tomb is not None:
            if not direct and tomb > now:
                return None
            del self.tombstones[info.id]
            self._rumours.pop(info.id, None)
        state = self.peers.get(info.id)
        if state is None:
            self.peers[info.id] = PeerState(info, now if direct else None)
            self._at[info.address] = info.id
            return "new"
        if state.info != info and direct:
            self._forget_address(state.info)
            state.info = info
            self._at[info.address] = info.id
        if direct:
            return "revived" if self.heard(info.id, now) else None
        return None

    def forget(self, node_id: int) -> None:
        """Stop tracking ``node_id`` without a tombstone or rumour (it left every table)."""
        state = self.peers.pop(node_id, None)
        if state is not None:
            self._forget_address(state.info)
            self._suspects.discard(node_id)

    def at_address(self, address: tuple[str, int]) -> int | None:
        """The known peer listening at ``address``, if any."""
        return self._at.get(address)

    def _forget_address(self, info: NodeInfo) -> None:
        if self._at.get(info.address) == info.id:
            del self._at[info.address]

    def heard(self, node_id: int, now: float) -> bool:
        """A reply or request came from the peer; True if it was suspected."""
        state = self.peers.get(node_id)
        if state is None:
            return False
        state.last_heard = now
        state.misses = 0
        was = state.suspected_since is not None
        state.suspected_since = None
        if was:
            self._suspects.discard(node_id)
        return was

    def missed(self, node_id: int, now: float) -> bool:
        """A request to the peer went unanswered; True if it just became suspected."""
        state = self.peers.get(node_id)
        if state is None:
            return False
        state.misses += 1
        if state.suspected_since is None and state.misses >= self.t.misses_before_suspect:
            state.suspected_since = now
            self._suspects.add(node_id)
            return True
        return False

    def is_suspected(self, node_id: int) -> bool:
        state = self.peers.get(node_id)
        return state is not None and state.suspected_since is not None

    def suspected(self) -> list[NodeInfo]:
        if not self._suspects:
            return []
        return [s.info for s in self.peers.values() if s.suspected_since is not None]

    def due_failures(self, now: float, limit: float | None = None) -> list[int]:
        """Suspected peers suspected for ``limit`` seconds (default ``fail_timeout``; the
        detector stretches it by its local health)."""
        if not self._suspects:
            return []
        limit = self.t.fail_timeout if limit is None else limit
        return [
            pid
            for pid, s in self.peers.items()
            if s.suspected_since is not None and now - s.suspected_since >= limit
        ]

    def remove(self, node_id: int, now: float, kind: str) -> PeerState | None:
        """Drop the peer, tombstone it and start a rumour about it."""
        state = self.peers.pop(node_id, None)
        if state is not None:
            self._forget_address(state.info)
        self._suspects.discard(node_id)
        self.tombstones[node_id] = now + self.t.tombstone_ttl
        if node_id not in self._rumours:
            self._rumours[node_id] = [kind, self.t.gossip_sends]
        return state

    def accept_rumour(
        self, kind: str, node_id: int, now: float, lately: float | None = None
    ) -> bool:
        """Second-hand news that ``node_id`` failed or left. Ignored for this node itself,
        for peers already tombstoned and for peers heard from within ``lately`` seconds
        (default ``fail_timeout``: a real failure is only rumoured after misses plus
        ``fail_timeout``, so a peer heard from that recently is alive), except a ``GONE``
        rumour, which carries proof; it is passed on as a plain ``FAILED`` one, so the proof
        reaches only the nodes its witness told. True if the caller must remove it from its
        tables."""
        if node_id == self.self_id or node_id in self.tombstones:
            return False
        state = self.peers.get(node_id)
        recent = state is not None and state.last_heard is not None
        lately = self.t.fail_timeout if lately is None else lately
        if kind != GONE and recent and now - state.last_heard < lately:
            return False
        self.remove(node_id, now, FAILED if kind == GONE else kind)
        return state is not None

    def take_rumours(self) -> list[list[Any]]:
        """Up to ``gossip_per_message`` rumours for the next outgoing probe or probe reply."""
        out: list[list[Any]] = []
        for node_id in list(self._rumours)[: self.t.gossip_per_message]:
            entry = self._rumours[node_id]
            out.append([entry[0], ids.to_bytes(node_id)])
            entry[1] -= 1
            if entry[1] <= 0:
                del self._rumours[node_id]
            else:  # rotate so every rumour gets its turn
                self._rumours[node_id] = self._rumours.pop(node_id)
        return out

    def prune_tombstones(self, now: float) -> None:
        for node_id in [i for i, until in self.tombstones.items() if until <= now]:
            del self.tombstones[node_id]
