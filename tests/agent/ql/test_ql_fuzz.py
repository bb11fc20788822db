"""Compiled pipelines never raise: random checked queries (expressions from the parser tests'
grammar strategy in WHERE, GROUP BY and aggregate arguments) run over records holding every
kind of JSON value; map, the keys-only twin and master-side rows either work or, for values
an aggregator refuses, the CBT raises TypeError exactly as the worker expects."""

from __future__ import annotations

import contextlib
from typing import Any

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from test_ql_parser import exprs

from agent.ql import QLError, compile_query
from agent.ql import nodes as n
from cbt import CompressedBufferTree

WEIRD: list[dict[str, Any]] = [
    {},
    {"product": "a", "price": 3, "x": "a,b,c", "user": {"location": "de", "x": [1, 2]}},
    {"product": None, "price": 2.5, "x": ["a", "b"], "user": "flat", "order": True},
    {"product": 7, "price": "3", "x": {"y": 1}, "user": {"location": None}, "_y1": 2**80},
    {"product": "é\x00", "price": -0.0, "x": "", "location": 1e308, "my field": [None, {}]},
    {"price": True, "x": 0, "user": {"location": {"deep": [1, "x"]}}},
]

aggregate_calls = st.one_of(
    st.just(n.Call("count", (n.Star(),))),
    st.builds(
        lambda name, e: n.Call(name, (e,)),
        st.sampled_from(["count", "sum", "min", "max", "avg", "collect_set", "distinct"]),
        exprs,
    ),
    st.builds(lambda e: n.Call("count", (e,), True), exprs),
    st.builds(lambda e: n.Call("topk", (e, n.Literal(3))), exprs),
    st.builds(lambda e: n.Call("approx_distinct", (e,)), exprs),
    # the sketches: below their capacity (these tests' few rows) exact and deterministic, so
    # the columnar path must give exactly the row path's answers
    st.builds(lambda e: n.Call("approx_top_k", (e, n.Literal(3))), exprs),
    st.builds(lambda e: n.Call("approx_percentile", (e, n.Literal(0.5))), exprs),
)


@st.composite
def checked_queries(draw: st.DrawFn) -> str:
    group = draw(st.lists(exprs, max_size=2, unique=True))
    aggs = draw(st.lists(aggregate_calls, min_size=1, max_size=3, unique=True))
    items = [n.SelectItem(g, f"g{i}") for i, g in enumerate(group)]
    items += [n.SelectItem(a, f"a{i}") for i, a in enumerate(aggs)]
    q = n.Query(
        select=tuple(items),
        inputs=(),
        where=draw(st.one_of(st.none(), exprs)),
        group_by=tuple(group),
        having=draw(st.sampled_from([None, n.Binary(">", n.Field(("a0",)), n.Literal(1))])),
        order_by=(n.OrderItem(n.Field(("a0",)), draw(st.booleans())),),
        limit=draw(st.one_of(st.none(), st.integers(1, 5))),
    )
    return q.to_sql()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(checked_queries())
def test_compiled_queries_never_raise_on_any_record(text: str) -> None:
    try:
        q = compile_query(text)
    except QLError:
        event("rejected by the checker")
        return
    event("compiled")
    tree = CompressedBufferTree(q.make_aggregator(), root_capacity=64)
    for r in WEIRD:
        pairs = q.map(r)
        assert isinstance(pairs, list)
        if q.keys is not None:
            assert q.keys(r) == [k for k, _ in pairs]
        for k, v in pairs:
            # a value the aggregator refuses is a TypeError: the worker counts it (map_errors)
            with contextlib.suppress(TypeError):
                tree.insert(k, v)
    rows = q.rows(tree.flush())
    assert all(list(row) == list(q.columns) for row in rows)
