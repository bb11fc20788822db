"""Job classes' vectorized ``map_batch`` gives the pairs their row ``map_keys`` gives
(WordCount: unicode, punctuation, min_length; micro-promotion: directory, actions, empty and
missing product ids), on random records; and the worker's columnar path over them equals its
row path (per-epoch counts)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.api import JobSpec
from agent.runtime.epochs.worker import Worker
from apps.micro_promotion import MicroPromotion, promotion_spec
from apps.wordcount import WordCount


def table_of(records: list[dict[str, Any]]) -> pa.Table:
    names = sorted({k for r in records for k in r})
    return pa.table({k: pa.array([r.get(k) for r in records], pa.string()) for k in names})


TEXT = st.text(alphabet=st.sampled_from("aB c,İß_9-é☃\tZ"), max_size=12)


def wordcount(min_length: int = 1) -> WordCount:
    spec = {"name": "w", "creator": "t", "job_class": "wordcount",
            "params": {"min_length": min_length}}  # fmt: skip
    return WordCount(JobSpec.from_dict(spec))


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.fixed_dictionaries({}, optional={"line": st.none() | TEXT, "text": TEXT})),
    st.integers(1, 3),
)
def test_wordcount_map_batch_equals_map_keys(records: list[dict[str, Any]], n: int) -> None:
    job = wordcount(n)
    expected = Counter(w for r in records for w in job.map_keys(r))
    table = table_of(records)
    got = Counter(job.map_batch(table).column("key").to_pylist())
    assert got == expected


DIRS = ["Video Games", "Books", ""]
ACTIONS = ["click", "view", "buy"]


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.fixed_dictionaries(
            {},
            optional={
                "directory": st.sampled_from(DIRS),
                "action": st.sampled_from(ACTIONS),
                "product_id": st.sampled_from(["P1", "P2", ""]),
            },
        )
    )
)
def test_micro_promotion_map_batch_equals_map_keys(records: list[dict[str, Any]]) -> None:
    job = MicroPromotion(JobSpec.from_dict(promotion_spec(params={"actions": ["click", "buy"]})))
    expected = Counter(k for r in records for k in job.map_keys(r))
    table = table_of(records)
    assert Counter(job.map_batch(table).column("key").to_pylist()) == expected


def test_worker_columnar_equals_row_for_wordcount() -> None:
    records = [{"ts": 100 + i / 7, "line": f"The cat {i % 5} sat, İstanbul ß"} for i in range(60)]
    out = []
    for columnar in (False, True):
        worker = Worker(wordcount(), wall_clock=lambda: 0.0)
        if columnar:
            worker.process_table(pa.Table.from_pylist(records))
            assert worker.stats()["columnar_rows"] == 60
        else:
            worker.process(records)
        out.append({e: s.to_dict() for e, s in worker.finish()})
    assert out[0] == out[1]
