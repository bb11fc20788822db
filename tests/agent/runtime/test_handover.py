"""Handover.hand_over (agent/runtime/recovery/handover.py): a master that lost the root gives
its results to the new one, also when the first master lookup still answers itself (the tree
routes to it until the new root's JOIN lands). It used to return silently then, leaving the
new master with the epochs in flight alone (seen in a stall + kill + restart run: no
hand-over sent, those epochs ended partial)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from agent.runtime.recovery.committed_epochs import CommittedEpochs
from agent.runtime.recovery.handover import Handover

TREE = 0xABC
OWN, NEW = "http://127.0.0.1:1", "http://127.0.0.1:2"


class Store:
    def __init__(self) -> None:
        self.dropped: list[int] = []

    def epochs(self, tid: int) -> list[int]:
        return [] if self.dropped else [5, 6]

    def export_plan(self, tid: int) -> list[Any]:
        return []

    def encode_plan(self, plan: list[Any]) -> list[Any]:
        return []

    def drop_tree(self, tid: int) -> None:
        self.dropped.append(tid)


class Host:
    def __init__(self, answers: list[str]) -> None:
        self.answers = answers
        self.stopped = False
        self.forgotten = 0
        self.counters: dict[str, int] = {}

    def is_root(self, tid: int) -> bool:
        return False

    async def master_url(self, tid: int) -> str:
        return self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]

    def forget_master_url(self, tid: int, exc: BaseException | None = None) -> None:
        self.forgotten += 1

    def count(self, what: str, n: int = 1) -> None:
        self.counters[what] = self.counters.get(what, 0) + n


class Client:
    def __init__(self) -> None:
        self.posts: list[tuple[str, str]] = []
        self.bodies: list[dict[str, Any]] = []

    async def post_json(self, url: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
        self.posts.append((url, path))
        self.bodies.append(body)
        return {"taken": 2}


async def test_a_lookup_answering_itself_is_asked_again_not_taken_for_done() -> None:
    host, store, client = Host([OWN, OWN, NEW]), Store(), Client()
    committed = CommittedEpochs()
    committed.hear(TREE, 4, {"9": 3})
    parts = SimpleNamespace(
        name="wc",
        host=host,
        store=store,
        membership=SimpleNamespace(export=lambda: {}),
        loss=SimpleNamespace(export_urls=lambda: {}),
        fence=SimpleNamespace(term=lambda tid: 2),
        committed_epochs=committed,
    )
    network = SimpleNamespace(data_url=OWN, client=client)
    await Handover(parts, network).hand_over(TREE)  # type: ignore[arg-type]
    assert client.posts == [(NEW, "/agent/v1/handover")]
    # what the tree's masters committed goes along (the new master's duplicates test)
    assert client.bodies[0]["committed"] == {"epoch": 4, "held": {"9": 3}}
    assert store.dropped == [TREE] and host.forgotten == 2
    assert host.counters == {"handover_retries": 2, "handovers_sent": 1}
