"""The dashboard's section on origins that stopped contributing
(agent/runtime/ops/dashboard/membership.py): a master's block is bounded and well-formed, a
peer's block is checked field by field, and the job's section joins its masters' blocks."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent.runtime.ops.dashboard.membership import (
    MAX_ORIGINS,
    MAX_WHY,
    check_membership,
    local_membership,
    merge_membership,
)
from agent.runtime.ops.dashboard.summary import SummaryError, check_summary

A, B, C = "0" * 32 + "0d0aea19", "ab" * 20, "c" * 40


def need(ok: bool, what: str) -> None:
    if not ok:
        raise SummaryError(what)


class Master:
    """A runtime with the membership interface (``membership_status`` as documented)."""

    def __init__(self, status: Any) -> None:
        self.status = status

    def membership_status(self) -> Any:
        return self.status


def test_a_masters_block_is_bounded_padded_and_well_formed() -> None:
    status = {
        "absent": [
            {"origin": "d0aea19", "since": 10.5, "last_epoch": 41, "why": "w" * 500,
             "retire_at": 70.5},
            {"origin": "not hex", "since": 1.0},  # dropped: not an id
            {"origin": B, "since": float("nan"), "last_epoch": True},  # odd fields: None
        ],
        "retired": [{"origin": C, "at": 12.0, "from_epoch": 42, "why": "operator"}] * 40,
        "left": [{"origin": int(B, 16), "from_epoch": 40}],
    }  # fmt: skip
    block = local_membership(Master(status))
    assert block is not None
    assert block["absent"] == [
        {"origin": A, "since": 10.5, "last_epoch": 41, "why": "w" * MAX_WHY, "retire_at": 70.5},
        {"origin": B, "since": None, "last_epoch": None, "why": None, "retire_at": None},
    ]
    assert len(block["retired"]) == MAX_ORIGINS
    assert block["left"] == [{"origin": B, "from_epoch": 40}]
    # what a master builds, a peer accepts unchanged
    assert check_membership("m", block, need) == block
    assert local_membership(object()) is None  # a runtime without the model
    assert local_membership(Master(None)) is None


@pytest.mark.parametrize(
    "bad",
    [
        "nope",
        {"absent": "x"},
        {"absent": [{"origin": "ab"}]},  # not padded: peers send 40 digits
        {"retired": [{"origin": C, "at": "noon"}]},
        {"left": [{"origin": C, "from_epoch": 1.5}]},
        {"absent": [{"origin": C, "why": 5}]},
        {"absent": [{"origin": C}] * (MAX_ORIGINS + 1)},
    ],
)
def test_a_peers_odd_block_is_refused_naming_the_field(bad: Any) -> None:
    with pytest.raises(SummaryError, match="membership"):
        check_membership("jobs.q.membership", bad, need)


def test_the_summary_check_keeps_a_jobs_membership() -> None:
    block = {"absent": [], "retired": [{"origin": C, "at": 1.0, "from_epoch": 3, "why": "x"}],
             "left": []}  # fmt: skip
    doc = {"node_id": A, "jobs": {"q": {"version": 1, "roles": ["master"], "membership": block}}}
    assert check_summary(doc)["jobs"]["q"]["membership"] == block
    doc["jobs"]["q"]["membership"] = {"retired": [{"origin": "zz"}]}
    with pytest.raises(SummaryError, match=r"jobs\.q\.membership\.retired"):
        check_summary(doc)
    del doc["jobs"]["q"]["membership"]  # an agent without the model
    assert check_summary(doc)["jobs"]["q"]["membership"] is None


def test_the_jobs_section_joins_its_masters_blocks() -> None:
    one = {
        "absent": [
            {"origin": B, "since": 20.0, "last_epoch": 5, "why": None, "retire_at": 80.0},
            {"origin": A, "since": 30.0, "last_epoch": 6, "why": "x", "retire_at": None},
        ],
        "retired": [],
        "left": [{"origin": C, "from_epoch": 4}],
    }
    two = {
        "absent": [{"origin": B, "since": 10.0, "last_epoch": 7, "why": "y", "retire_at": 90.0}],
        "retired": [{"origin": A, "at": 40.0, "from_epoch": 7, "why": "operator"}],
        "left": [{"origin": C, "from_epoch": 4}],
    }
    merged = merge_membership([one, None, two])
    # B: absent at both masters, since the earliest, the latest epoch and retirement time
    assert merged["absent"] == [
        {"origin": B, "since": 10.0, "last_epoch": 7, "why": "y", "retire_at": 90.0}
    ]
    # A: retired by one master while the other still counts it absent: shown retired
    assert merged["retired"] == [{"origin": A, "at": 40.0, "from_epoch": 7, "why": "operator"}]
    assert merged["left"] == [{"origin": C, "from_epoch": 4}]
    assert merge_membership([]) == {"absent": [], "retired": [], "left": []}


ids = st.sampled_from([A, B, C])
entries = st.fixed_dictionaries(
    {"origin": ids},
    optional={
        "since": st.none() | st.floats(0, 1e9),
        "retire_at": st.none() | st.floats(0, 1e9),
        "last_epoch": st.none() | st.integers(0, 10**6),
        "at": st.none() | st.floats(0, 1e9),
        "from_epoch": st.none() | st.integers(0, 10**6),
        "why": st.none() | st.text(max_size=5),
    },
)
blocks = st.fixed_dictionaries(
    {"absent": st.lists(entries, max_size=4), "retired": st.lists(entries, max_size=4),
     "left": st.lists(entries, max_size=4)}
)  # fmt: skip


@given(st.lists(st.none() | blocks, max_size=4))
def test_each_origin_shows_once_per_state_and_retired_wins(masters: list[Any]) -> None:
    merged = merge_membership([local_membership(Master(m)) for m in masters])
    named = {state: {o for b in masters if b for o in (e["origin"] for e in b[state])}
             for state in ("absent", "retired", "left")}  # fmt: skip
    for state in ("retired", "left"):
        assert [e["origin"] for e in merged[state]] == sorted(named[state])
    assert [e["origin"] for e in merged["absent"]] == sorted(named["absent"] - named["retired"])
