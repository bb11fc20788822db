"""Snapshot names and request signatures as pure functions (hypothesis): names round-trip
through their headers, arbitrary header text is either a valid canonical name or a clean
SnapshotNameError, and any change to a signed field breaks the MAC."""

from __future__ import annotations

import pytest
from dataplane_helpers import SECRET
from hypothesis import given, settings
from hypothesis import strategies as st

from srt.dataplane import SnapshotName
from srt.dataplane.auth import AuthError, RequestAuth
from srt.errors import SnapshotNameError

jobs = st.text(st.characters(blacklist_categories=("Cs", "Cc")), min_size=1, max_size=256)
ids = st.integers(0, 2**160 - 1)
epochs = st.integers(0, 2**63 - 1)
names = st.builds(SnapshotName, jobs, ids, epochs, ids)


@settings(deadline=None)
@given(names)
def test_names_round_trip_through_headers(n: SnapshotName) -> None:
    h = n.to_headers()
    assert all(v.isascii() and "\n" not in v for v in h.values())
    assert SnapshotName.from_headers(h) == n


header_text = st.one_of(
    st.text(max_size=60),
    st.text("0123456789abcdefABCDEF%x-", max_size=45),
)


@settings(max_examples=300, deadline=None)
@given(
    names, st.sampled_from(["X-Elf-Job", "X-Elf-Tree", "X-Elf-Epoch", "X-Elf-Sender"]), header_text
)
def test_arbitrary_header_values_parse_canonically_or_fail_cleanly(n, field, value) -> None:
    h = n.to_headers()
    h[field] = value
    try:
        parsed = SnapshotName.from_headers(h)
    except SnapshotNameError:
        return
    assert parsed.to_headers() == h  # only canonical encodings are accepted


@pytest.mark.parametrize(
    "args",
    [
        ("", 1, 1, 1),
        ("j\n", 1, 1, 1),
        ("j", -1, 1, 1),
        ("j", 1, 2**63, 1),
        ("j", 1, 1, 2**160),
        ("j", True, 1, 1),
        ("j" * 257, 1, 1, 1),
    ],
)
def test_invalid_names_are_refused(args) -> None:
    with pytest.raises(SnapshotNameError):
        SnapshotName(*args)


@settings(max_examples=200, deadline=None)
@given(names, st.binary(max_size=64), st.integers(0, 6), st.text(min_size=1, max_size=5))
def test_any_altered_field_breaks_the_mac(n, body, which, extra) -> None:
    auth = RequestAuth(SECRET)
    fields = tuple(n.to_headers().values())
    headers = auth.sign_request("POST", "/srt/v1/snapshot", fields, body)
    assert (
        auth.verify_headers("POST", "/srt/v1/snapshot", fields, headers)[0]
        == headers["X-Elf-Nonce"]
    )
    method, path, f = "POST", "/srt/v1/snapshot", list(fields)
    if which == 0:
        method = "PUT"
    elif which == 1:
        path += extra
    elif which <= 5:
        f[which - 2] += extra
    else:
        headers = dict(headers, **{"X-Elf-Content-Sha256": "0" * 64})
    with pytest.raises(AuthError) as ei:
        auth.verify_headers(method, path, tuple(f), headers)
    assert ei.value.reason == "bad_mac"


def test_replay_cache_and_short_secret() -> None:
    auth = RequestAuth(SECRET)
    auth.check_replay("a" * 32)
    with pytest.raises(AuthError) as ei:
        auth.check_replay("a" * 32)
    assert ei.value.reason == "replay"
    with pytest.raises(ValueError):
        RequestAuth(b"too short")
