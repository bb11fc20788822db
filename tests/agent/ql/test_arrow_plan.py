"""The columnar path computes what the row path computes: for random checked queries (the
fuzz grammar: expressions of every kind in WHERE, GROUP BY and aggregate arguments) over
random tables whose columns each hold one kind of value (strings with unicode, ints, floats
with -0.0, booleans, NULLs), ``ArrowPlan.partials`` folded with ``merge_states`` gives the
same CBT contents as the row path's ``map`` + ``insert`` per record (float sums equal up to
summation order), or declines the chunk (``Unsupported``: the row path takes it)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from test_ql_fuzz import checked_queries

from agent.ql import QLError, compile_query
from agent.ql.arrow_eval import Unsupported
from agent.ql.arrow_plan import ArrowPlan, pair_partials
from agent.ql.checker import analyze
from cbt import CompressedBufferTree, get_aggregator

TEXT = st.text(alphabet=st.sampled_from("aAbß_%.é☃ \t0İ"), max_size=5)
COLUMNS: dict[str, tuple[pa.DataType, st.SearchStrategy[Any]]] = {
    "product": (pa.string(), TEXT),
    "x": (pa.string(), st.sampled_from(["a,b", "", "a", "b,", "A"])),
    "location": (pa.string(), TEXT),
    "price": (pa.int64(), st.integers(-5, 5)),
    "_y1": (pa.int64(), st.integers(-(2**62), 2**62)),
    "my field": (pa.float64(), st.sampled_from([0.0, -0.0, 1.5, -2.25, 3.0, 1e300])),
    "order": (pa.bool_(), st.booleans()),
    "user": (pa.float64(), st.floats(-10, 10, allow_nan=False)),
}


@st.composite
def tables(draw: st.DrawFn) -> pa.Table:
    n = draw(st.integers(0, 12))
    names = draw(st.lists(st.sampled_from(sorted(COLUMNS)), unique=True, max_size=6))
    cols = {}
    for name in names:
        t, values = COLUMNS[name]
        cols[name] = pa.array(
            draw(st.lists(st.one_of(st.none(), values), min_size=n, max_size=n)), t
        )
    cols["ts"] = pa.array([1.0] * n)
    return pa.table(cols)


def close(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return a == b or math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)
    if isinstance(a, tuple | list) and isinstance(b, tuple | list):
        return len(a) == len(b) and all(close(x, y) for x, y in zip(a, b, strict=True))
    return a == b and type(a) is type(b)


def row_tree(q: Any, rows: list[dict[str, Any]]) -> dict[Any, Any] | None:
    tree = CompressedBufferTree(q.make_aggregator())
    for r in rows:
        for k, v in q.map(r):
            try:
                tree.insert(k, v)
            except TypeError:
                return None  # the row path counts a map error: the columnar path must decline
    return tree.flush().to_dict()


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(checked_queries(), tables())
def test_partials_equal_the_row_path(text: str, table: pa.Table) -> None:
    try:
        q = compile_query(text)
    except QLError:
        return
    plan = ArrowPlan(analyze(q.query), q.make_aggregator())
    expected = row_tree(q, table.to_pylist())
    try:
        keys, states = plan.partials(table)
    except Unsupported:
        event("declined")
        return
    event("columnar")
    assert expected is not None, "the row path refused a value the columnar path accepted"
    tree = CompressedBufferTree(q.make_aggregator())
    tree.merge_states(keys, states)
    got = tree.flush().to_dict()
    assert got.keys() == expected.keys(), text
    for k in got:
        a, b = got[k], expected[k]
        if isinstance(a, bytearray | set | frozenset):
            assert a == b, (text, k)
        else:
            assert close(a, b), (text, k, a, b)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(checked_queries(), tables(), st.data())
def test_one_group_by_over_epochs_equals_one_per_epoch(
    text: str, table: pa.Table, data: st.DataObject
) -> None:
    try:
        q = compile_query(text)
    except QLError:
        return
    plan = ArrowPlan(analyze(q.query), q.make_aggregator())
    epochs = np.array(
        data.draw(st.lists(st.integers(0, 2), min_size=table.num_rows, max_size=table.num_rows)),
        np.int64,
    )
    try:
        together = plan.partials_by_epoch(table, epochs)
        apart = [
            (int(e), *plan.partials(table.filter(pa.array(epochs == e))))
            for e in np.unique(epochs).tolist()
        ]
    except Unsupported:
        return

    def trees(parts: list) -> dict:
        out = {}
        for e, keys, states in parts:
            tree = CompressedBufferTree(q.make_aggregator())
            tree.merge_states(keys, states)
            if keys:
                out[e] = tree.flush().to_dict()
        return out

    a, b = trees(together), trees(apart)
    assert a.keys() == b.keys(), text
    for e in a:
        assert a[e].keys() == b[e].keys(), text
        for k in a[e]:  # float sums: equal up to Arrow's summation order
            x, y = a[e][k], b[e][k]
            assert x == y if isinstance(x, set | frozenset) else close(x, y), (text, k)


@pytest.mark.parametrize(
    "query",
    [
        "SELECT product, count(*) FROM * GROUP BY product",
        "SELECT lower(product), sum(price), avg(user), min(`my field`), max(_y1) FROM * "
        "GROUP BY lower(product)",
        "SELECT count(*) FROM * WHERE product LIKE '%a_' OR price * 2 >= 3",
        "SELECT product, topk(product, price, 2) FROM * WHERE price IS NOT NULL GROUP BY product",
        "SELECT `my field`, distinct(product), approx_distinct(price) FROM * GROUP BY `my field`",
        "SELECT x, count(price) FROM * WHERE x RLIKE '^a' AND NOT `order` GROUP BY x",
        "SELECT substr(product, 2), count(*) FROM * WHERE price % 2 = 1 "
        "GROUP BY substr(product, 2)",
    ],
)
def test_examples(query: str) -> None:
    rows = [
        {"product": p, "price": i % 4 - 1, "user": i / 3, "my field": -0.0 if i % 2 else 0.0,
         "_y1": i, "x": "a,b" if i % 3 else "b", "order": i % 2 == 0, "ts": 1.0}
        for i, p in enumerate(["a", "Ab", "ßa", None, "aa", "☃b", "a", "ba"])
    ]  # fmt: skip
    table = pa.Table.from_pylist(rows)
    q = compile_query(query)
    plan = ArrowPlan(analyze(q.query), q.make_aggregator())
    keys, states = plan.partials(table)
    tree = CompressedBufferTree(q.make_aggregator())
    tree.merge_states(keys, states)
    assert tree.flush().to_dict() == row_tree(q, rows)


@pytest.mark.parametrize("agg", ["count", "sum", "avg", "min", "max", "distinct", "topk"])
def test_pair_partials_equal_inserts(agg: str) -> None:
    keys = ["a", "b", "a", "c", "a"]
    values = [1, 2, 3, 4, 5] if agg != "topk" else [1.0, 2.0, 3.0, 4.0, 5.0]
    aggregator = get_aggregator(agg)
    got_k, got_s = pair_partials(pa.table({"key": keys, "value": values}), aggregator)
    tree = CompressedBufferTree(aggregator)
    tree.merge_states(got_k, got_s)
    ref = CompressedBufferTree(aggregator)
    for k, v in zip(keys, values, strict=True):
        ref.insert(k, v)
    assert tree.flush().to_dict() == ref.flush().to_dict()
