"""The one-line summaries ``elf status``, ``elf results`` and ``elf retire`` print
(agent/cli_views.py): what they name, and that a reply lacking fields never breaks them."""

from __future__ import annotations

import time
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from agent.cli_views import membership_lines, result_line, result_state, retire_problem

A = "0d0aea19" + "0" * 32
B = "ab" * 20


def test_membership_lines_name_absent_retired_and_left_origins() -> None:
    now = time.time()
    status = {
        "jobs": {
            "wc": {
                "membership": {
                    "absent": [
                        {
                            "origin": A,
                            "since": now,
                            "last_epoch": 41,
                            "why": "silent",
                            "retire_at": now + 60,
                        },
                        {
                            "origin": "d0aea19",
                            "since": None,
                            "last_epoch": None,
                            "why": None,
                            "retire_at": None,
                        },
                    ],
                    "retired": [{"origin": B, "at": now, "from_epoch": 42, "why": "operator"}],
                    "left": [{"origin": B, "from_epoch": 40}],
                }
            },
            "quiet": {"membership": {"absent": [], "retired": [], "left": []}},
            "older": {"roles": ["worker"]},  # an agent without the membership model
        }
    }
    lines = membership_lines(status)
    assert len(lines) == 4
    assert lines[0].startswith("job wc: origin 0d0aea19 absent since ")
    assert "last epoch 41" in lines[0] and "(silent)" in lines[0]
    assert (
        "retired automatically at " + time.strftime("%H:%M:%S", time.localtime(now + 60))
        in (lines[0])
    )
    # results name origins without leading zeros: padded to 40 like every other id
    assert lines[1].startswith("job wc: origin 00000000 absent since ?")
    assert "until it comes back or is retired" in lines[1]
    assert lines[2] == (
        f"job wc: origin abababab retired at {time.strftime('%H:%M:%S', time.localtime(now))} "
        "from epoch 42 (operator)"
    )
    assert lines[3] == "job wc: origin abababab left from epoch 40"


def test_result_line_says_the_state_term_and_version() -> None:
    final = {"epoch": 7, "state": "final", "term": 3, "version": 2, "coverage": 1.0}
    assert result_line(final) == "epoch 7: final (term 3, version 2)"
    partial = {
        "epoch": 8, "state": "partial", "partial": True, "tentative": False, "term": 3,
        "version": 1, "coverage": 0.75, "lacking": ["d0aea19"],
    }  # fmt: skip
    assert result_line(partial) == (
        "epoch 8: partial (term 3, version 1), coverage 75%, lacking 00000000"
    )
    # an agent that does not send state yet: read from the flags
    assert result_state({"tentative": True}) == "tentative"
    assert result_state({"partial": True, "tentative": True}) == "partial"
    assert result_line({"epoch": 9, "tentative": True, "coverage": 0.5, "lacking": [A]}) == (
        "epoch 9: tentative (version 1), coverage 50%, lacking 0d0aea19"
    )


def test_result_line_counts_a_session_querys_closed_sessions() -> None:
    base = {"epoch": 7, "state": "final", "term": 3, "version": 2}
    rows = [{"flags": []}, {"flags": ["tentative: epoch 6 lacks origins 2"]}, {"flags": []}]
    assert result_line({**base, "sessions": {"rows": rows}}) == (
        "epoch 7: final (term 3, version 2); 3 sessions closed (1 flagged)"
    )
    assert result_line({**base, "sessions": {"rows": []}}).endswith("; 0 sessions closed")
    gone = {"rows": None, "why": "this master's sessions begin at epoch 9 (since_epoch)"}
    assert result_line({**base, "sessions": gone}).endswith(
        "; sessions unknown here: this master's sessions begin at epoch 9 (since_epoch)"
    )


def test_retire_problem_names_the_masters_that_refused() -> None:
    ok = {"master": "http://a", "status": 200}
    bad = {"master": "http://b", "status": 503, "error": "not the master"}
    assert retire_problem({"job": "j", "complete": True, "masters": [ok]}) is None
    one = retire_problem({"job": "j", "complete": False, "masters": [ok, bad]})
    assert one == "not every master retired it: j: http://b 503 not the master"
    every = retire_problem(
        {
            "complete": False,
            "jobs": {"j": {"complete": False, "masters": [ok, bad]}},
            "failed": {"k": {"status": 503, "error": "down"}},
        }
    )
    assert every == "not every master retired it: j: http://b 503 not the master; k: down"


FIELDS = ["origin", "since", "last_epoch", "why", "retire_at", "at", "from_epoch"]
STATES = ["absent", "retired", "left"]
RESULT_FIELDS = ["epoch", "state", "partial", "tentative", "term", "version", "coverage"]
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=12,
)


lists = st.lists(st.dictionaries(st.sampled_from(FIELDS), json_values, max_size=6), max_size=2)
memberships = st.fixed_dictionaries({}, optional={k: lists | json_values for k in STATES})


@given(
    json_values,
    st.dictionaries(st.text(max_size=3), st.fixed_dictionaries({"membership": memberships})),
    st.dictionaries(st.sampled_from(RESULT_FIELDS), json_values),
)
def test_views_never_raise_on_odd_replies(
    anything: Any, jobs: dict[str, Any], result: dict[str, Any]
) -> None:
    membership_lines(anything)
    membership_lines({"jobs": jobs})
    result_line(result)
    result_state(result)
