"""Lineage wire form 2 (record counts per origin, srt/dataplane/lineage.py) and the barrier
carrying the counts: round trips, form 1 still read (counts unknown), every malformed prefix a
LineageError (a 422 over real HTTP), and merged contributions' counts unioned."""

from __future__ import annotations

import pytest
from dataplane_helpers import SECRET, snap_of
from hypothesis import given
from hypothesis import strategies as st

from srt.dataplane import DataPlaneClient, DataPlaneServer, SnapshotName
from srt.dataplane.barrier import EpochCombiner, snapshot_handler
from srt.dataplane.lineage import (
    MAGIC2,
    UNKNOWN,
    Counted,
    LineageError,
    absent,
    decode,
    encode,
    merge_records,
    records_of,
)
from srt.errors import DataPlaneError

IDS = st.integers(0, 2**161 - 1)
COUNTED = st.dictionaries(IDS, st.one_of(st.none(), st.integers(0, UNKNOWN - 1)), max_size=30)


def _counted(draw: dict[int, int | None]) -> Counted:
    return Counted(draw, {o: n for o, n in draw.items() if n is not None})


@given(COUNTED, st.binary(max_size=64))
def test_round_trip_with_counts(spec: dict[int, int | None], payload: bytes) -> None:
    lineage = _counted(spec)
    origins, rest = decode(encode(lineage, payload))
    assert rest == payload
    assert origins == frozenset(spec)
    assert records_of(origins) == {o: n for o, n in spec.items() if n is not None}


@given(st.frozensets(IDS, max_size=20), st.binary(max_size=32))
def test_form_one_still_reads_and_has_no_counts(origins: frozenset[int], payload: bytes) -> None:
    got, rest = decode(encode(origins, payload))
    assert (got, rest) == (origins, payload)
    assert records_of(got) is None


@given(COUNTED.filter(bool), st.integers(1, 400))
def test_truncated_counted_prefix_is_refused(spec: dict[int, int | None], cut: int) -> None:
    body = encode(_counted(spec), b"")
    with pytest.raises(LineageError):
        decode(body[: max(len(MAGIC2), len(body) - cut)])


@given(st.binary(max_size=200))
def test_any_bytes_after_the_magic_decode_or_raise_lineage_error(tail: bytes) -> None:
    try:
        origins, _ = decode(MAGIC2 + tail)
    except LineageError:
        return
    assert isinstance(origins, Counted)
    assert set(records_of(origins) or {}) <= set(origins)


def test_malformed_counted_prefixes() -> None:
    good = encode(Counted({1, 2}, {1: 3, 2: 4}), b"x")
    pair = 21 + 8
    head = len(MAGIC2) + 4
    swapped = good[:head] + good[head + pair : head + 2 * pair] + good[head : head + pair] + b"x"
    with pytest.raises(LineageError, match="ascending"):
        decode(swapped)
    with pytest.raises(LineageError, match="origins"):
        decode(MAGIC2 + (10**6).to_bytes(4, "little"))
    with pytest.raises(LineageError):
        encode(Counted({1}, {1: -1}), b"")
    with pytest.raises(LineageError):
        encode(Counted({1}, {1: UNKNOWN + 1}), b"")
    with pytest.raises(LineageError, match="range"):
        decode(MAGIC2 + (1).to_bytes(4, "little") + (2**167).to_bytes(21, "big") + bytes(8))


def test_counted_is_a_plain_lineage_to_set_code() -> None:
    c = Counted({1, 2, absent(3)}, {1: 5, 2: 7, 9: 1})
    assert c == frozenset({1, 2, absent(3)}) and hash(c) == hash(frozenset(c))
    assert c.records == {1: 5, 2: 7}  # counts only for origins it covers
    assert records_of(c | {4}) is None  # set algebra gives plain lineages (callers merge)
    assert merge_records({1: 2}, {2: 3}) == {1: 2, 2: 3}
    assert merge_records(None, {2: 3}) == {2: 3}


async def test_the_barrier_unions_counts_and_sends_them_up() -> None:
    out: list[int] = []
    comb = EpochCombiner(
        job="j", tree=1, expect_local=True, children=[11, 12], emit=lambda e, s: out.append(e),
        first_epoch=0, origin=100,
    )  # fmt: skip
    comb.offer_local(0, snap_of(["a"]), records=7)
    comb.offer_child(11, 0, snap_of(["b"]), Counted({11, 21}, {11: 3, 21: 4}))
    assert comb.lineage_of(0) == {100, 11, 21}
    comb.offer_child(12, 0, snap_of(["c"]), frozenset({12}))  # a peer without counts
    assert out == [0]
    emitted = comb.lineage_of(0)
    assert emitted == {100, 11, 21, 12}
    assert records_of(emitted) == {100: 7, 11: 3, 21: 4}  # 12's count unknown
    # an incomplete local epoch carries its absence marker and no count
    comb.offer_local(1, snap_of(["a"]), complete=False, records=5)
    comb.offer_child(11, 1, snap_of(["b"]), Counted({11}, {11: 2}))
    comb.offer_child(12, 1, snap_of(["b"]), Counted({12}, {12: 1}))
    assert records_of(comb.lineage_of(1)) == {11: 2, 12: 1}


async def test_a_damaged_counted_prefix_is_a_422_over_http() -> None:
    got: list[tuple[int, object]] = []
    comb = EpochCombiner(
        job="j", tree=1, expect_local=False, children=[11], first_epoch=0,
        emit=lambda e, s: got.append((e, comb.lineage_of(e))),
    )  # fmt: skip
    server = DataPlaneServer(SECRET)
    server.on_snapshot(snapshot_handler(lambda n: comb))
    url = await server.start()
    client = DataPlaneClient(SECRET)
    try:
        body = encode(Counted({11, 12}, {11: 5, 12: 6}), snap_of(["a"]).to_bytes())
        with pytest.raises(DataPlaneError) as ei:
            await client.send_snapshot(url, SnapshotName("j", 1, 0, 11), body[:40])
        assert ei.value.status == 422
        assert await client.send_snapshot(url, SnapshotName("j", 1, 0, 11), body) == "merged"
        assert got == [(0, {11, 12})]
        assert records_of(got[0][1]) == {11: 5, 12: 6}
    finally:
        await client.close()
        await server.stop()
