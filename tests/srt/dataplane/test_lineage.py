"""Lineage wire form and classification (srt/dataplane/lineage.py): round trips, every
malformed prefix refused as a damaged snapshot, and the three classes against set algebra."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cbt.errors import SnapshotError
from srt.dataplane.lineage import (
    DUPLICATE,
    MAGIC,
    MAGIC2,
    NEW,
    OVERLAP,
    LineageError,
    absent,
    classify,
    covered,
    decode,
    encode,
    plain,
)

IDS = st.frozensets(st.integers(0, 2**160 - 1), max_size=40)


@given(IDS, st.binary(max_size=64))
def test_round_trip(origins: frozenset[int], payload: bytes) -> None:
    assert decode(encode(origins, payload)) == (origins, payload)


@given(st.binary(max_size=64).filter(lambda b: not b.startswith((MAGIC, MAGIC2))))
def test_a_body_without_lineage_is_unknown(payload: bytes) -> None:
    assert decode(payload) == (None, payload)


@given(IDS.filter(bool), st.integers(1, 200))
def test_truncated_prefix_is_refused(origins: frozenset[int], cut: int) -> None:
    body = encode(origins, b"")
    with pytest.raises(LineageError):
        decode(body[: max(len(MAGIC), len(body) - cut)])


def test_unsorted_or_oversized_prefix_is_a_damaged_snapshot() -> None:
    good = encode({1, 2}, b"x")
    swapped = good[:12] + good[33:54] + good[12:33] + b"x"
    with pytest.raises(SnapshotError, match="ascending"):
        decode(swapped)
    with pytest.raises(LineageError, match="origins"):
        decode(MAGIC + (10**6).to_bytes(4, "little"))
    with pytest.raises(LineageError):
        encode({2**161}, b"")
    with pytest.raises(LineageError):
        encode({-1}, b"")


@given(IDS, IDS)
def test_classify_is_set_algebra(held: frozenset[int], offered: frozenset[int]) -> None:
    kind = classify(held, offered)
    if offered <= held:
        assert kind == DUPLICATE
    elif not offered & held:
        assert kind == NEW
    else:
        assert kind == OVERLAP


def test_absence_markers_are_distinct_from_their_origin() -> None:
    """An origin marked absent (no records) and the same origin's records later: new."""
    x = 0xABC
    assert classify({absent(x)}, frozenset({x})) == NEW
    # the marker of an origin whose records are held adds nothing (a re-sent short window)
    assert classify({x}, frozenset({absent(x)})) == DUPLICATE
    assert classify({x}, frozenset({absent(x), 5})) == NEW
    assert classify({x, 5}, frozenset({absent(x), 5})) == DUPLICATE
    assert classify({5}, frozenset({absent(x)})) == NEW
    assert plain({absent(x), 5}) == {x, 5} and covered({absent(x), 5}) == {5}
    assert decode(encode({absent(x), x}, b"p")) == (frozenset({absent(x), x}), b"p")
