"""Shared helpers for the SRT data-plane tests: the test secret, condition waits (never sleeps
as synchronisation), snapshot builders and a started server + client pair on loopback."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable, Iterable
from contextlib import asynccontextmanager

from cbt import CompressedBufferTree, Snapshot
from srt.config import Tunables
from srt.dataplane import DataPlaneClient, DataPlaneServer, SnapshotName

SECRET = b"test-cluster-secret-0123456789ab"
OTHER_SECRET = b"another-cluster-secret-987654321"


async def wait_for(cond: Callable[[], bool], timeout: float = 5.0, step: float = 0.005) -> None:
    """Poll ``cond`` until true; fail the test after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        await asyncio.sleep(step)


def snap_of(words: Iterable[str] | Counter, aggregator: str = "count") -> Snapshot:
    """A snapshot counting ``words`` (a Counter gives weights)."""
    t = CompressedBufferTree(aggregator=aggregator)
    if isinstance(words, Counter):
        for k, v in words.items():
            t.insert(k, v)
    else:
        t.insert_many(list(words))
    return t.flush()


def name(
    epoch: int = 0, sender: int = 7, job: str = "wordcount", tree: int = 0xABC
) -> SnapshotName:
    return SnapshotName(job, tree, epoch, sender)


class Recorder:
    """A snapshot handler that merges each name at most once and records what it got."""

    def __init__(self) -> None:
        self.merged: dict[SnapshotName, Snapshot] = {}
        self.calls = 0
        self.position: int | None = None

    async def __call__(self, n: SnapshotName, body: bytes, position: int | None = None) -> str:
        self.calls += 1
        self.position = position  # the replica door's holder (None elsewhere)
        snap = Snapshot.from_bytes(body)
        if n in self.merged:
            return "duplicate"
        self.merged[n] = snap
        return "merged"


@asynccontextmanager
async def server_and_client(**server_kw):
    """A started DataPlaneServer with a Recorder and a fast-retrying client."""
    server = DataPlaneServer(SECRET, tunables=Tunables(**server_kw))
    rec = Recorder()
    server.on_snapshot(rec)
    url = await server.start()
    client = DataPlaneClient(
        SECRET, tunables=Tunables(request_timeout=2.0, send_backoff=0.01, send_max_backoff=0.05)
    )
    try:
        yield server, client, rec, url
    finally:
        await client.close()
        await server.stop()
