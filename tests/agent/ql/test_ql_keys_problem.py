"""A peer's snapshot for an ELF QL job must hold keys of the query's GROUP BY shape (issue 13,
"peers are checked too"): ``keys_problem`` accepts exactly what the result rows can decode,
for every key the compiled query itself produces, and refuses other shapes by name."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from agent.jobs.job import create_job
from agent.jobs.ql_job import spec_from_query
from agent.jobs.spec import JobSpec
from agent.ql import compile_query
from agent.ql.keys import decode_key, keys_problem
from cbt import CompressedBufferTree

QUERIES = {
    0: "SELECT count(*) AS n FROM ingest",
    1: "SELECT line, count(*) AS n FROM ingest GROUP BY line",
    2: "SELECT line, ts, count(*) AS n FROM ingest GROUP BY line, ts",
}
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner),
    max_leaves=5,
)


@given(st.lists(st.fixed_dictionaries({"line": JSON, "ts": JSON}), max_size=5))
def test_every_key_a_query_makes_is_accepted(records) -> None:
    for width, text in QUERIES.items():
        compiled = compile_query(text)
        assert compiled.group_width == width
        keys = [k for r in records for k, _ in compiled.map(r)]
        assert keys_problem(keys, width) is None
        for k in keys:
            decode_key(k, width)


def test_other_shapes_are_refused_by_name() -> None:
    assert "()" in (keys_problem(["a"], 0) or "")
    assert keys_problem([("a", "b")], 1) is not None  # a bare 2-tuple must be a tagged value
    assert keys_problem(["a"], 2) is not None
    assert keys_problem([("a", 1, 2)], 2) is not None
    assert keys_problem([(3, "{not json")], 1) is not None
    assert keys_problem([("a", (1, "0x1p+0"))], 2) is None


def test_the_ql_job_checks_a_snapshot_with_its_own_width() -> None:
    spec = JobSpec.from_dict(spec_from_query("q", "t", QUERIES[1]))
    job = create_job(spec)
    good = CompressedBufferTree(aggregator="count")
    good.insert_many(["a", "b", 7])
    assert job.keys_problem(good.flush()) is None
    bad = CompressedBufferTree(aggregator="count")
    bad.insert_many([("x", "y", "z")])
    assert "not an ELF QL group key" in (job.keys_problem(bad.flush()) or "")
