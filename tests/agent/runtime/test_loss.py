"""OriginLoss (agent/runtime/recovery/loss.py): which origins a master probes, what proves a death,
and what a declaration does (re-issue from the holders, then record the origin absent - it
stays expected: a process is not its data),
against a fake job runtime and fake peers (the cluster tests run it for real)."""

from __future__ import annotations

import asyncio
import base64
import time
from dataclasses import dataclass
from typing import Any

import pytest

from agent.runtime.recovery.loss import MAX_WATCH_SLEEP, OriginLoss
from agent.runtime.recovery.membership import Membership
from srt.dataplane.client import DataPlaneError


@dataclass(frozen=True)
class Peer:
    id: int
    domain: str = "default"


class Host:
    name = "job"
    node_id = 1

    def __init__(self) -> None:
        self.membership = Membership()
        self.membership.observe(100, frozenset({1, 2, 3, 4}), now=time.time())
        self.held: tuple[int, frozenset[int]] | None = (101, frozenset({1, 3}))
        self.folded: list[tuple[int, int, dict[int, bytes]]] = []
        self.multicasts: list[dict[str, Any]] = []
        self.counters: dict[str, int] = {}
        self.tasks: list[asyncio.Task[Any]] = []
        self.after: list[int] = []

    def root_trees(self) -> list[int]:
        return [7]

    def waiting_epoch(self, tid: int) -> tuple[int, frozenset[int]] | None:
        return self.held

    def oldest_open_epoch(self, tid: int) -> int | None:
        return None if self.held is None else self.held[0]

    def closed_at(self, epoch: int) -> float:
        return epoch + 1.0  # 1 s epochs, lateness 0

    def expected(self, epoch: int) -> frozenset[int]:
        return self.membership.expected(epoch) or frozenset()

    def is_member(self, origin: int) -> bool:
        return origin in self.membership.members_set()

    def declare_absent(self, origin: int, why: str) -> bool:
        return self.membership.declare_absent(origin, why, time.time())

    def is_absent(self, origin: int) -> bool:
        return origin in self.membership.absent()

    async def fold_origin(
        self, tid: int, origin: int, parts: dict[int, bytes], records: dict[str, Any]
    ) -> int:
        self.folded.append((tid, origin, parts))
        self.records = records
        return len(parts)

    def after_absence(self, origin: int) -> None:
        self.after.append(origin)

    def count(self, what: str, n: int = 1) -> None:
        self.counters[what] = self.counters.get(what, 0) + n

    def spawn(self, coro: Any, what: str) -> None:
        self.tasks.append(asyncio.ensure_future(coro))

    async def multicast(self, tid: int, message: dict[str, Any]) -> None:
        self.multicasts.append(message)

    async def settle(self) -> None:
        while any(not t.done() for t in self.tasks):
            await asyncio.gather(*self.tasks)


class Client:
    def __init__(self, dead: set[str], stuck: set[str], held: dict[str, dict[int, bytes]]) -> None:
        self.dead, self.stuck, self.held = dead, stuck, held
        self.calls: list[tuple[str, str]] = []
        self.seen: dict[str, int] = {}

    async def post_json(self, url: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
        self.calls.append((url, path))
        if url in self.dead:
            raise DataPlaneError(0, "refused", url)
        if url in self.stuck:
            await asyncio.sleep(30)  # a SIGSTOPped agent: the kernel accepted, nobody answers
        if path.endswith("/fetch"):
            parts = self.held.get(url, {})
            return {
                "epochs": {str(e): base64.b64encode(b).decode() for e, b in parts.items()},
                "records": {str(e): len(b) for e, b in parts.items()},
                "seen": self.seen.get(url),
            }
        return {"epochs": {}}


class Network:
    def __init__(self, client: Client) -> None:
        self.client = client
        self.gone: list[int] = []

    def peer_gone(self, node_id: int) -> None:
        self.gone.append(node_id)

    def routable(self, node_id: int) -> bool:
        return node_id not in self.gone

    def near(self, key: int, count: int) -> list[Peer]:
        return [Peer(n) for n in (3, 4, 5)][:count]

    async def data_url_of(self, node: Any) -> str:
        return f"http://n{getattr(node, 'id', node)}"


async def test_a_refused_probe_declares_the_origin_absent_and_re_issues_its_checkpoints() -> None:
    host = Host()
    held = {"http://n4": {99: b"a", 100: b"b"}, "http://n5": {100: b"b", 101: b"c"}}
    net = Network(Client(dead={"http://n2"}, stuck={"http://n4"}, held=held))
    loss = OriginLoss(host, net, suspect_after=0.1)
    loss.learn_url(2, "http://n2")
    loss.learn_url(4, "http://n4")
    assert loss.check(7, now=102.05) == []  # epoch 101 closed at 102.0: not yet suspect
    assert loss.check(7, now=102.2) == [2, 4]  # lacking from 101: 2 and 4 (1 is us)
    assert loss.check(7, now=102.5) == []  # once a second each
    # 4 hangs (stopped): probing proves nothing; 2 refused: dead
    await asyncio.wait_for(asyncio.gather(*host.tasks[:2], return_exceptions=True), 5)
    await asyncio.wait_for(host.settle(), 5)
    assert net.gone == [2] and host.after == [2]
    assert host.multicasts == [{"kind": "lost", "origin": "2"}]
    # its checkpoints were asked of the live agents closest to it; n4 hangs past the fetch
    # timeout, n3 holds nothing, n5's copies are folded as origin 2's own
    assert host.folded == [(7, 2, {100: b"b", 101: b"c"})]
    assert host.records == {"100": 1, "101": 1}  # the counts the holders kept travel too
    event = loss.status()[0]
    assert event["origin"] == "2" and event["reissued"] == 2
    # absent, not gone: still expected in the epochs it had open and in every later one,
    # until it comes back or is retired
    assert host.expected(101) == {1, 2, 3, 4}
    assert host.expected(10_000) == {1, 2, 3, 4}
    assert 2 in host.membership.absent()
    assert host.counters["origins_absent_declared"] == 1
    # known absent: not probed again, not declared twice
    assert loss.check(7, now=200.0) == [4]


async def test_an_absent_origin_that_comes_back_is_present_again() -> None:
    host = Host()
    net = Network(Client(dead={"http://n2"}, stuck=set(), held={}))
    loss = OriginLoss(host, net)
    loss.learn_url(2, "http://n2")
    loss.check(7, now=102.2)
    await asyncio.wait_for(host.settle(), 5)
    assert 2 in host.membership.absent()
    # an old epoch re-sent: still absent
    host.membership.observe(100, frozenset({2}), now=time.time())
    assert 2 in host.membership.absent()
    host.membership.observe(103, frozenset({2}), now=time.time())  # a new epoch: back
    assert 2 not in host.membership.absent()


async def test_a_silent_origin_is_lost_only_after_the_loss_timeout_if_still_unreachable() -> None:
    host = Host()
    net = Network(Client(dead=set(), stuck=set(), held={}))
    loss = OriginLoss(host, net, loss_timeout=0.05)
    loss.overlay_failed(3)  # failed by the overlay, then back before the timeout
    loss.overlay_failed(9)  # not an origin of this job
    await asyncio.wait_for(host.settle(), 5)
    assert loss.status() == [] and host.membership.absent() == {}
    net.gone.append(4)  # still unreachable when the timeout ends
    loss.overlay_failed(4)
    await asyncio.wait_for(host.settle(), 5)
    assert [e["origin"] for e in loss.status()] == ["4"]
    assert "silent" in loss.status()[0]["why"]


async def test_a_watch_round_waits_until_the_oldest_epoch_can_be_suspect() -> None:
    """Rounds before the oldest open epoch closed ``suspect_after`` ago find nothing to probe
    (``check``'s rule), so the loop sleeps until then: one wake-up an epoch, not ten a second."""
    host = Host()  # holds epoch 101, closed at 102.0
    net = Network(Client(dead=set(), stuck=set(), held={}))
    loss = OriginLoss(host, net, watch_interval=0.1, suspect_after=0.25)
    assert loss.check(7, 102.2) == []  # not suspect yet
    assert loss.next_round_in(7, 101.5) == pytest.approx(0.75)  # 102.0 + 0.25 - 101.5
    assert loss.next_round_in(7, 50.0) == MAX_WATCH_SLEEP  # bounded
    assert loss.next_round_in(7, 102.3) == 0.1  # suspect now: every watch_interval
    assert loss.check(7, 102.3) == [2, 4]  # and the round then probes
    await host.settle()
    host.held = None
    assert loss.next_round_in(7, 101.5) == 0.1  # no barrier: as before
