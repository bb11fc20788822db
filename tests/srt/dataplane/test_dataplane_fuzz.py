"""Hypothesis fuzzer over the data plane (issue 13, "peers are checked too"): requests signed
with the real cluster secret - so they pass authentication and reach the handlers - with random
job / tree / epoch / sender header values, random paths, truncated and random bodies and
snapshots of other aggregators, against a real :class:`DataPlaneServer` on loopback feeding an
:class:`EpochCombiner` through ``snapshot_handler``.

Asserted for every request: never a 500, every status one of the documented ones (with the
documented reason for it), a 200 always a valid acknowledgement, and an incompatible or
damaged body never merged. Asserted per example: every epoch the combiner emitted equals a
Counter over exactly the good snapshots it answered ``merged`` for.

The server runs in its own event loop thread for the whole module (one server, a fresh combiner
per example); requests go over plain ``http.client`` so any header value is sendable.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import threading
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

import pytest
from dataplane_helpers import SECRET, snap_of
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cbt import Snapshot, get_aggregator
from srt.config import Tunables
from srt.dataplane import SNAPSHOT_PATH, DataPlaneServer, SnapshotName
from srt.dataplane.auth import RequestAuth
from srt.dataplane.barrier import EpochCombiner, snapshot_handler
from srt.dataplane.compat import Expectation

JOB, TREE = "wc", 0xABC
MAX_AHEAD = 50
MAX_BODY = 64 * 1024
#: status → the reasons the docs give for it (docs/srt-dataplane.md, "Status codes")
DOCUMENTED = {
    200: {None},
    400: {"bad_name", "read_error"},
    401: {"unauthenticated", "bad_mac", "stale_timestamp", "replay"},
    404: {"not_found"},
    405: {"method_not_allowed"},
    409: {"incompatible"},
    413: {"too_large"},
    422: {"corrupt"},
    503: {"no_handler", "unknown_tree", "epoch_ahead"},
}
WORDS = st.lists(st.sampled_from(["a", "b", "c", "dd", "é"]), max_size=8)


def str_keys(snap: Snapshot) -> str | None:
    return None if all(type(k) is str for k in snap.keys_column) else "keys must be strings"


EXPECT = Expectation(get_aggregator("count"), key_check=str_keys)


@dataclass
class Target:
    """The combiner the server feeds (replaced per example) and what it emitted."""

    combiner: EpochCombiner | None = None
    emitted: dict[int, Counter] = field(default_factory=dict)

    def fresh(self) -> None:
        self.emitted = {}
        self.combiner = EpochCombiner(
            job=JOB,
            tree=TREE,
            expect_local=False,
            children=[1],  # epochs wait for child 1; everyone else merges unexpected
            emit=lambda e, s: self.emitted.__setitem__(e, Counter(s.to_dict())),
            first_epoch=0,
            max_ahead=MAX_AHEAD,
            expect=lambda epoch: EXPECT,
        )


@pytest.fixture(scope="module")
def plane():
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="dataplane-fuzz", daemon=True)
    thread.start()
    target = Target()
    server = DataPlaneServer(SECRET, tunables=Tunables(max_body=MAX_BODY))

    def resolve(name: SnapshotName) -> EpochCombiner | None:
        return target.combiner if (name.job, name.tree) == (JOB, TREE) else None

    server.on_snapshot(snapshot_handler(resolve))
    asyncio.run_coroutine_threadsafe(server.start(), loop).result(10)
    try:
        yield server, target
    finally:
        asyncio.run_coroutine_threadsafe(server.stop(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


# ---- request strategies -------------------------------------------------------------------
HEADER_TEXT = st.text(
    st.characters(min_codepoint=32, max_codepoint=255, blacklist_characters="\x7f"), max_size=40
)


def hex_or(value: st.SearchStrategy[int]) -> st.SearchStrategy[str]:
    return st.one_of(value.map(lambda v: format(v, "x")), HEADER_TEXT)


@st.composite
def bodies(draw) -> tuple[str, bytes]:
    """(kind, body): kind says what the body is, so the test knows what may be merged."""
    kind = draw(
        st.sampled_from(["good", "good", "good", "sum", "empty_sum", "int_keys", "cut", "junk"])
    )
    words = draw(WORDS)
    if kind == "good":
        return kind, snap_of(words).to_bytes()
    if kind == "sum":
        return kind, snap_of(Counter(words or ["a"]), aggregator="sum").to_bytes()
    if kind == "empty_sum":
        return kind, Snapshot.empty("sum").to_bytes()
    if kind == "int_keys":
        return kind, snap_of([len(w) for w in words] or [1]).to_bytes()
    if kind == "cut":
        data = snap_of(words or ["a"]).to_bytes()
        return kind, data[: draw(st.integers(0, len(data) - 1))]
    return kind, draw(st.binary(max_size=300))


@st.composite
def requests(draw) -> dict[str, Any]:
    valid_name = draw(st.booleans())
    epoch_int = draw(
        st.one_of(st.integers(0, 8), st.integers(0, 3 * MAX_AHEAD), st.integers(0, 2**63 - 1))
    )
    if valid_name:
        headers = {
            "X-Elf-Job": JOB
            if draw(st.integers(0, 9))
            else draw(st.sampled_from(["x", "w%C3%A9"])),
            "X-Elf-Tree": format(TREE if draw(st.integers(0, 9)) else 0xABD, "x"),
            "X-Elf-Epoch": str(epoch_int),
            "X-Elf-Sender": format(draw(st.integers(1, 6)), "x"),
        }
    else:
        headers = {
            "X-Elf-Job": draw(st.one_of(st.just(JOB), HEADER_TEXT)),
            "X-Elf-Tree": draw(hex_or(st.integers(0, 2**161))),
            "X-Elf-Epoch": draw(st.one_of(st.integers(-5, 2**64).map(str), HEADER_TEXT)),
            "X-Elf-Sender": draw(hex_or(st.integers(0, 2**161))),
        }
        for h in draw(st.sets(st.sampled_from(sorted(headers)))):
            del headers[h]  # missing name headers
    kind, body = draw(bodies())
    path = draw(st.sampled_from([SNAPSHOT_PATH] * 8 + ["/srt/v1/other", "/", "/srt/v1/snapshot/"]))
    method = draw(st.sampled_from(["POST"] * 9 + ["GET", "PUT"]))
    return {"headers": headers, "kind": kind, "body": body, "path": path, "method": method}


def send(port: int, req: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    auth = RequestAuth(SECRET)
    h = req["headers"]
    fields = tuple(h.get(k, "") for k in ("X-Elf-Job", "X-Elf-Tree", "X-Elf-Epoch", "X-Elf-Sender"))
    headers = {**h, **auth.sign_request(req["method"], req["path"], fields, req["body"])}
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request(req["method"], req["path"], body=req["body"], headers=headers)
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read() or b"{}")
    finally:
        conn.close()


def parsed_name(h: dict[str, str]) -> SnapshotName | None:
    try:
        return SnapshotName.from_headers(h)
    except Exception:
        return None


@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(st.lists(requests(), min_size=1, max_size=10))
def test_fuzzed_requests_get_documented_answers_and_state_stays_exact(plane, reqs) -> None:
    server, target = plane
    target.fresh()
    merged: dict[int, Counter] = defaultdict(Counter)
    for req in reqs:
        status, reply = send(server.port, req)
        assert status != 500, (req, reply)
        assert status in DOCUMENTED, (status, reply, req)
        reason = reply.get("error")
        assert reason in DOCUMENTED[status], (status, reply, req)
        name = parsed_name(req["headers"])
        if status == 200:
            assert reply["result"] in ("merged", "duplicate", "stale"), reply
        if status == 200 and reply["result"] == "merged":
            assert name is not None and req["path"] == SNAPSHOT_PATH
            assert req["kind"] in ("good", "empty_sum"), req  # nothing else is ever merged
            merged[name.epoch].update(Snapshot.from_bytes(req["body"]).to_dict())
        if (
            req["kind"] in ("sum", "int_keys")
            and name is not None
            and (name.job, name.tree) == (JOB, TREE)
            and req["path"] == SNAPSHOT_PATH
            and req["method"] == "POST"
            and status == 200
        ):
            assert reply["result"] in ("duplicate", "stale")  # answered without decoding
    # flush: child 1 delivers every epoch up to the highest touched one; what comes out of
    # the barrier is exactly the good snapshots it acknowledged as merged
    comb = target.combiner
    assert comb is not None
    touched = max(comb.pending()["open"], default=comb.next_epoch)
    for epoch in range(comb.next_epoch, touched + 1):  # child 1 may have delivered some
        comb.offer_child(1, epoch, Snapshot.empty("count"))
    assert comb.next_epoch == touched + 1
    for epoch, counts in merged.items():
        assert target.emitted[epoch] == counts, epoch
    assert all(not c for e, c in target.emitted.items() if e not in merged)
    assert server.stats()["rejected"].get("handler_error", 0) == 0
