"""The failure detector's probes (overlay/detector.py, "Probes and suspicion"): a contact
heard from within the last half round is not probed in it - a pair that watches each other
exchanges one probe a round instead of two - and a crashed node is still found by every node
that watched it, within 1.5 rounds plus the misses and ``fail_timeout``. Measured in the
deterministic simulator, against the same run with the skip turned off."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from overlay_helpers import SECRET

from overlay import Tunables, detector
from overlay.sim import SimNetwork, run, start_cluster

pytestmark = pytest.mark.timeout(300)
SHARE = detector.HEARD_LATELY_SHARE  # the product's setting, before a run patches it


def _run(share: float, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    monkeypatch.setattr(detector, "HEARD_LATELY_SHARE", share)

    async def main() -> dict[str, Any]:
        net = SimNetwork(seed=8)
        nodes = await start_cluster(net, 60, SECRET, tunables=Tunables())
        await asyncio.sleep(20)
        loop = asyncio.get_running_loop()
        pings = lambda: sum(n.stats()["sent_msgs"].get("ping", 0) for n in nodes)  # noqa: E731
        before, t0 = pings(), loop.time()
        await asyncio.sleep(30)
        rate = (pings() - before) / len(nodes) / (loop.time() - t0)
        rounds = [Tunables().probe_interval * len(n.contacts()) for n in nodes]
        victim = nodes[7]
        watchers = [
            n for n in nodes if n is not victim and victim.id in {c.id for c in n.contacts()}
        ]
        await victim.stop()  # a crash: nobody is told
        start = loop.time()
        found: dict[int, float] = {}
        while len(found) < len(watchers) and loop.time() - start < 120:
            for n in watchers:
                if n.id not in found and victim.id not in {c.id for c in n.contacts()}:
                    found[n.id] = loop.time() - start
            await asyncio.sleep(0.1)
        skipped = sum(n.stats()["events"].get("probes_skipped", 0) for n in nodes)
        for n in nodes:
            if n is not victim:
                await n.stop()
        return {"pings": rate, "found": found, "watchers": len(watchers),
                "round": max(rounds), "skipped": skipped}  # fmt: skip

    return run(main())


def test_contacts_heard_lately_are_not_probed_and_a_crash_is_still_found(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    always = _run(0.0, monkeypatch)
    lately = _run(SHARE, monkeypatch)
    assert always["skipped"] == 0 and lately["skipped"] > 0
    # every node probes one contact a tick (2 a second) without the skip; with it 1.24
    assert always["pings"] == pytest.approx(2.0, abs=0.1)
    assert lately["pings"] <= 0.7 * always["pings"], (always["pings"], lately["pings"])
    t = Tunables()
    for r in (always, lately):
        assert r["watchers"] > 0 and len(r["found"]) == r["watchers"], r
    # found within 1.5 rounds (its last word just before the crash skips one turn), the
    # misses and fail_timeout; without the skip within one round and the same
    slack = t.misses_before_suspect * t.probe_timeout + t.fail_timeout + 1.0
    assert max(always["found"].values()) <= always["round"] + slack, always
    assert max(lately["found"].values()) <= 1.5 * lately["round"] + slack, lately
