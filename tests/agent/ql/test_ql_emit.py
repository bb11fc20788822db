"""``EMIT FINAL | EMIT CHANGES`` (docs/ql.md): the clause in any order with WINDOW, MODE and
PARTITIONS, once; ``emit``, ``final`` and ``changes`` stay usable as field names; the spec
field it sets (validated, checked against the query, changeable at runtime: by the field, or
by a new query whose EMIT clause says so; a new query without one keeps the job's)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent.errors import BadRequest
from agent.jobs.changes import parse_change
from agent.jobs.job import parse_spec
from agent.jobs.ql_job import spec_from_query
from agent.jobs.spec import JobSpec, JobSpecError
from agent.ql import QLError, compile_query, parse

TRAILING = {
    "WINDOW": ("WINDOW 10 s", lambda q: q.window is not None and q.window.size == 10.0),
    "MODE": ("MODE ASYNC", lambda q: q.mode == "ASYNC"),
    "PARTITIONS": ("PARTITIONS 2", lambda q: q.partitions == 2),
    "EMIT": ("EMIT FINAL", lambda q: q.emit == "FINAL"),
}


@given(st.permutations(sorted(TRAILING)), st.integers(1, 4))
def test_emit_goes_in_any_order_with_the_trailing_clauses(order: list[str], n: int) -> None:
    chosen = order[:n]
    text = "SELECT a, count(*) FROM t GROUP BY a " + " ".join(TRAILING[c][0] for c in chosen)
    q = parse(text)
    for c in chosen:
        assert TRAILING[c][1](q), (c, text)
    assert ("EMIT" in chosen) == (q.emit is not None)


@pytest.mark.parametrize("word", ["EMIT FINAL", "emit final", "Emit Changes", "EMIT CHANGES;"])
def test_the_clause_is_case_insensitive(word: str) -> None:
    assert parse(f"SELECT count(*) FROM t {word}").emit in ("FINAL", "CHANGES")


@pytest.mark.parametrize(
    ("tail", "expected"),
    [
        ("EMIT", "expected FINAL or CHANGES after EMIT, got end of query"),
        ("EMIT ALL", "expected FINAL or CHANGES after EMIT, got 'ALL'"),
        ("EMIT FINAL EMIT CHANGES", "expected WINDOW, MODE, PARTITIONS, ';' or end"),
        ("EMIT FINAL WHERE a = 1", "got 'WHERE'"),
    ],
)
def test_bad_emit_clauses_say_what_was_expected(tail: str, expected: str) -> None:
    with pytest.raises(QLError) as info:
        parse(f"SELECT count(*) FROM t {tail}")
    assert expected in str(info.value)


def test_emit_final_and_changes_remain_field_names() -> None:
    q = parse("SELECT emit, final, count(changes) FROM t WHERE emit = 1 GROUP BY emit, final")
    assert q.emit is None
    assert [s.expr.to_sql() for s in q.select] == ["emit", "final", "count(changes)"]
    q = parse("SELECT emit, count(*) FROM t GROUP BY emit EMIT CHANGES")
    assert q.emit == "CHANGES"


def test_the_query_sets_the_spec_field_and_the_spec_must_agree() -> None:
    assert compile_query("SELECT count(*) FROM t").spec_fields().get("emit") is None
    spec = parse_spec(spec_from_query("j", "me", "SELECT count(*) FROM t EMIT FINAL"))
    assert spec.emit == "final"
    bad = spec_from_query("j", "me", "SELECT count(*) FROM t EMIT FINAL")
    bad["emit"] = "changes"
    with pytest.raises(JobSpecError, match="emit='final'"):
        parse_spec(bad)
    # no EMIT clause: the spec's own emit (default changes) stands
    assert parse_spec(spec_from_query("j", "me", "SELECT count(*) FROM t")).emit == "changes"
    assert parse_spec(spec_from_query("j", "me", "SELECT count(*) FROM t", emit="final")).emit == (
        "final"
    )


@pytest.mark.parametrize("value", ["FINAL", "all", 1, None, True])
def test_the_spec_field_is_validated(value: object) -> None:
    with pytest.raises(JobSpecError) as info:
        JobSpec.from_dict({"name": "j", "creator": "me", "job_class": "wordcount", "emit": value})
    assert info.value.field == "emit"


def test_emit_changes_at_runtime() -> None:
    wc = parse_spec(spec_from_query("j", "me", "SELECT count(*) FROM t"))  # no EMIT clause
    assert wc.emit == "changes"
    assert parse_change({"emit": "final"}).apply(wc).emit == "final"
    with pytest.raises(BadRequest) as info:
        parse_change({"emit": "sometimes"}).apply(wc)
    assert info.value.field == "emit"
    ql = parse_spec(spec_from_query("j", "me", "SELECT count(*) FROM t", emit="final"))
    new_query = parse_change({"query": "SELECT count(*) FROM t WHERE a = 1"})
    assert new_query.apply(ql).emit == "final"  # no EMIT clause: keeps the job's
    assert parse_change({"query": "SELECT count(*) FROM t EMIT CHANGES"}).apply(ql).emit == (
        "changes"
    )
    said = parse_spec(spec_from_query("j", "me", "SELECT count(*) FROM t EMIT FINAL"))
    with pytest.raises(BadRequest, match="disagrees with the query"):
        parse_change({"emit": "changes"}).apply(said)  # the query's clause says final
