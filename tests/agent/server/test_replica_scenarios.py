"""``held_for`` (``agent/server/replica_scenarios.py``): the stall of the replicated-master
scenario waits until the master's barrier holds epochs waiting for the stalled member alone.
The barrier names members by their zero-padded 40-digit ids, ``ChaosCluster.node_ids`` without
the padding: a stalled member whose id starts with 0 never matched, and the cluster test timed
out waiting (3 CI failures)."""

from __future__ import annotations

from typing import Any

from agent.server.replica_scenarios import held_for

STALLED = 0x04C518A1 << 128  # its hex starts with 0 when zero-padded to 40 digits
OTHER = 0x91110E << 136


class Client:
    def __init__(self, open_epochs: dict[str, Any]) -> None:
        self.open = open_epochs

    def status(self) -> dict[str, Any]:
        return {"jobs": {"wc": {"barrier": {"t1": {"open": self.open, "children": []}}}}}


class Chaos:
    def __init__(self, open_epochs: dict[str, Any]) -> None:
        self._client = Client(open_epochs)

    def client(self, index: int) -> Client:
        return self._client


def test_held_epochs_match_a_zero_padded_member_name() -> None:
    padded = format(STALLED, "040x")
    assert padded.startswith("0")
    open_epochs = {
        "100": {"waiting_for": [padded], "received": ["a", "b"]},
        "101": {"waiting_for": [STALLED], "received": ["a"]},  # an int name
        "102": {"waiting_for": [padded, format(OTHER, "040x")], "received": ["a"]},
        "103": {"waiting_for": [padded], "received": []},  # nothing received yet
        "104": {"waiting_for": ["local"], "received": ["a"]},
    }
    chaos: Any = Chaos(open_epochs)
    assert held_for(chaos, 0, format(STALLED, "x"), job="wc") == 2
