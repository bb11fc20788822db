"""ELF QL's sketch aggregates end to end - approx_percentile, approx_quantiles,
approx_distinct, approx_top_k - on the row path (map + insert into several CBTs, merged,
through the wire) and on the columnar path (ArrowPlan over chunks, merged), each against the
exact answer computed from the raw records (numpy / Counter; never another approximation),
within the sketch's documented error; and their parameters checked at submission."""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from test_ql_semantics import run_query

from agent.ql import QLError, compile_query
from agent.ql.arrow_plan import ArrowPlan
from agent.ql.checker import analyze
from cbt import CompressedBufferTree, Snapshot
from cbt.sketches import hll_rse, kll_rank_error

QUERY = """SELECT g, approx_percentile(v, 0.99) AS p99,
                  approx_percentile(v, ARRAY[0.1, 0.5, 0.9]) AS ps,
                  approx_quantiles(v, 4) AS qs, approx_distinct(u) AS du,
                  approx_top_k(item, 2) AS top, count(*) AS n
           FROM * GROUP BY g"""
RANKS = (0.99, 0.1, 0.5, 0.9)


def records(n: int, seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    items = ["x"] * 40 + ["y"] * 25 + [f"z{i}" for i in range(35)]
    out = []
    for _ in range(n):
        r: dict[str, Any] = {"g": rng.choice(["a", "b", "c"]), "u": f"user{rng.randrange(4000)}"}
        if rng.random() < 0.95:  # some records lack v: NULL, skipped by the aggregates
            r["v"] = rng.lognormvariate(0, 1) if rng.random() < 0.9 else rng.randrange(100)
        r["item"] = rng.choice(items)
        out.append(r)
    return out


def rank_error(values: np.ndarray, q: float, rank: float) -> float:
    n = len(values)
    lo = np.searchsorted(values, q, side="left") / n
    hi = np.searchsorted(values, q, side="right") / n
    return 0.0 if lo <= rank <= hi else min(abs(lo - rank), abs(hi - rank))


def check_against_exact(rows: list[dict[str, Any]], recs: list[dict[str, Any]]) -> None:
    assert sorted(r["g"] for r in rows) == ["a", "b", "c"]
    bound = 2 * kll_rank_error(200)  # the 99th-percentile bound, doubled: never exceeded
    for row in rows:
        mine = [r for r in recs if r["g"] == row["g"]]
        vs = np.sort([float(r["v"]) for r in mine if "v" in r])
        assert row["n"] == len(mine)
        got = [row["p99"], *row["ps"]]
        for q, rank in zip(got, RANKS, strict=True):
            assert rank_error(vs, q, rank) <= bound, (row["g"], rank, q)
        assert len(row["qs"]) == 5
        assert row["qs"][0] == vs[0] and row["qs"][-1] == vs[-1]  # exact min and max
        for i, q in enumerate(row["qs"][1:-1], 1):
            assert rank_error(vs, q, i / 4) <= bound
        distinct = len({r["u"] for r in mine})
        assert abs(row["du"] - distinct) <= 3 * hll_rse(12) * distinct
        truth = Counter(r["item"] for r in mine)
        assert row["top"] == [[i, c] for i, c in truth.most_common(2)]  # few items: exact


@pytest.mark.parametrize("seed", [1, 2])
def test_row_path_against_the_exact_answer(seed: int) -> None:
    recs = records(6000, seed)
    rows = run_query(QUERY, recs, pieces=5, seed=seed)
    check_against_exact(rows, recs)


def columnar_rows(text: str, recs: list[dict[str, Any]], chunks: int) -> list[dict[str, Any]]:
    """Chunks of the records as Arrow tables through ArrowPlan.partials, merged into one CBT
    per chunk (an agent each), the snapshots merged through the wire."""
    q = compile_query(text)
    plan = ArrowPlan(analyze(q.query), q.make_aggregator())
    table = pa.Table.from_pylist(recs)
    size = -(-len(recs) // chunks)
    snap = None
    for lo in range(0, len(recs), size):
        tree = CompressedBufferTree(q.make_aggregator())
        tree.merge_states(*plan.partials(table.slice(lo, size)))
        part = Snapshot.from_bytes(tree.flush().to_bytes())
        snap = part if snap is None else snap.merge(part)
    assert snap is not None
    return q.rows(snap)


def test_columnar_path_against_the_exact_answer() -> None:
    recs = records(6000, 3)
    rows = columnar_rows(QUERY, recs, chunks=4)
    check_against_exact(rows, recs)
    # HLL's registers do not depend on the path: the very same estimates as the row path
    by_g = {r["g"]: r for r in run_query(QUERY, recs, pieces=3)}
    for row in rows:
        assert row["du"] == by_g[row["g"]]["du"]
        assert row["top"] == by_g[row["g"]]["top"]


def test_columnar_nulls_nans_and_empty_groups_match_the_row_path() -> None:
    recs = [
        {"g": "a", "v": 1.0, "u": "p", "item": "x"},
        {"g": "a", "v": None, "u": None, "item": None},
        {"g": "b", "v": float("nan"), "u": "q", "item": "y"},
        {"g": "c", "v": None, "u": None, "item": None},
    ]
    text = """SELECT g, approx_percentile(v, 0.5) AS p, approx_distinct(u) AS d,
                     approx_top_k(item, 3) AS t FROM * GROUP BY g"""
    assert columnar_rows(text, recs, chunks=1) == run_query(text, recs, pieces=1)
    row_c = next(r for r in run_query(text, recs, pieces=1) if r["g"] == "c")
    assert row_c == {"g": "c", "p": None, "d": 0.0, "t": []}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("SELECT approx_percentile(v, 1.5) FROM *", "percentage in [0, 1]"),
        ("SELECT approx_percentile(v, -0.1) FROM *", "percentage in [0, 1]"),
        ("SELECT approx_percentile(v, ARRAY[0.5, 2]) FROM *", "percentage in [0, 1]"),
        ("SELECT approx_percentile(v, ARRAY[]) FROM *", "at least one percentage"),
        ("SELECT approx_percentile(v, x) FROM *", "as a number literal"),
        ("SELECT approx_percentile(v, 0.5, 7) FROM *", "k in [8, 65535]"),
        ("SELECT approx_percentile(v) FROM *", "takes 2 or 3 arguments"),
        ("SELECT approx_percentile('a', 0.5) FROM *", "expects a number"),
        ("SELECT approx_quantiles(v, 0) FROM *", "n in [1, 1000]"),
        ("SELECT approx_distinct(u, 3) FROM *", "lg_k in [4, 21]"),
        ("SELECT approx_distinct(u, 22) FROM *", "lg_k in [4, 21]"),
        ("SELECT approx_top_k(u, 0) FROM *", "k in [1, 10000]"),
        ("SELECT approx_top_k(u) FROM *", "takes 2 arguments"),
        ("SELECT approx_distinct(u, 10), approx_distinct(w, 12) FROM *", "one lg_k"),
        (
            "SELECT approx_percentile(v, 0.5, 100), approx_quantiles(w, 2, 200) FROM *",
            "one k",
        ),
        ("SELECT count(*) FROM * WHERE array(1) = 1", "only allowed as approx_percentile"),
    ],
)
def test_parameters_are_checked_at_submission(text: str, message: str) -> None:
    with pytest.raises(QLError, match=message.replace("[", r"\[").replace("]", r"\]")):
        compile_query(text)


def test_the_job_spec_carries_one_sketch_size() -> None:
    q = compile_query("SELECT approx_percentile(v, ARRAY[0.5, 0.99], 400) AS p FROM *")
    assert (q.aggregator, q.aggregator_params) == (
        "approx_percentile",
        {"k": 400, "ranks": [0.5, 0.99], "array": True},
    )
    q = compile_query("SELECT approx_distinct(u, 14) AS d, approx_top_k(i, 5) AS t FROM *")
    assert q.aggregator_params == {
        "parts": [["approx_distinct", {"lg_k": 14}], ["approx_top_k", {"k": 5}]]
    }
    # a field named array is still a field (ARRAY[...] is only approx_percentile's)
    assert compile_query("SELECT count(*) FROM * WHERE array[0] = 1").aggregator == "count"


def test_sketch_results_spilled_by_the_master_read_back_to_the_same_rows(tmp_path: Any) -> None:
    """The master's ResultStore spills old epochs to disk (a checkpoint-like trip through
    the snapshot format): read back, a sketch query's rows are the very same."""
    from agent.runtime.results.spill import ResultSpill
    from agent.runtime.results.store import ResultStore

    q = compile_query(QUERY)
    store = ResultStore(budget_bytes=1, spill=ResultSpill(tmp_path, "sk"), job="sk")
    want = {}
    for epoch in range(3):
        tree = CompressedBufferTree(q.make_aggregator())
        for r in records(2000, 10 + epoch):
            for k, v in q.map(r):
                tree.insert(k, v)
        snap = tree.flush()
        want[epoch] = q.rows(snap)
        store.put(1, epoch, snap, float(epoch))
        while batch := store.spill_candidates():
            for t, e, s in batch:
                store.spilled(t, e, s, store.spill_write(t, e, s))
    assert store.stats()["spilled_epochs"] >= 2
    for epoch in range(3):
        result = store.get(1, epoch)
        assert result is not None
        got = result.snapshot if result.snapshot is not None else store.load(1, epoch)
        assert q.rows(got) == want[epoch]
