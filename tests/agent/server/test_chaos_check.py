"""The chaos harness's judge, without a cluster: the reference from written lines and the
per-epoch verdicts (``agent.server.chaos``). A harness that misjudges would hide exactly the
silently wrong epochs it exists to find."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from agent.server.chaos import (
    EXACT,
    MISSING,
    TENTATIVE,
    UNNAMED,
    WRONG,
    JobPlan,
    LogWriter,
    classify,
    read_records,
    reference,
)

WC = JobPlan("wc", "wordcount", start_epoch=100)
QL = JobPlan("ql", "ql", start_epoch=100, epoch_seconds=2.0)


def answer(rows: list, tentative: bool = False, lacking: tuple = (), complete: bool = True) -> dict:
    return {"rows": rows, "tentative": tentative, "lacking": list(lacking), "complete": complete}


def test_verdicts() -> None:
    want = Counter({"a": 2, "b": 1})
    assert classify(WC, 100, want, answer([["a", 2], ["b", 1]])).verdict == EXACT
    wrong = classify(WC, 100, want, answer([["a", 1], ["c", 4]]))
    assert wrong.verdict == WRONG
    assert wrong.diff == {"missing": {"a": 1, "b": 1}, "extra": {"c": 4}}
    flagged = classify(WC, 100, want, answer([["a", 1]], tentative=True, lacking=("ab12",)))
    assert flagged.verdict == TENTATIVE and flagged.lacking == ["ab12"]
    assert classify(WC, 100, want, answer([["a", 1]], tentative=True)).verdict == UNNAMED
    assert classify(WC, 100, want, answer([["a", 2]], complete=False)).verdict == TENTATIVE
    missing = classify(WC, 100, want, "404: job 'wc' has no result for epoch 100")
    assert missing.verdict == MISSING and missing.want == 3 and missing.why.startswith("404")
    # a final, exact empty epoch is exact; a final epoch with rows nobody wrote is wrong
    assert classify(WC, 101, Counter(), answer([])).verdict == EXACT
    assert classify(WC, 101, Counter(), answer([["x", 1]])).verdict == WRONG
    # QL's named rows
    rows = [{"page": "/p/1", "hits": 2}]
    assert classify(QL, 100, Counter({"/p/1": 2}), answer(rows)).verdict == EXACT


@given(
    st.lists(
        st.tuples(
            st.floats(min_value=190.0, max_value=230.0, allow_nan=False),
            st.lists(st.sampled_from(["w1", "w2", "alpha"]), min_size=1, max_size=4),
            st.sampled_from(["/p/1", "/p/2"]),
        ),
        max_size=40,
    )
)
def test_reference_buckets_lines_by_their_own_epoch(lines: list) -> None:
    records = [{"ts": ts, "line": " ".join(w).upper(), "page": p} for ts, w, p in lines]
    wc = reference(JobPlan("wc", "wordcount", start_epoch=200), records)
    ql = reference(JobPlan("ql", "ql", start_epoch=100, epoch_seconds=2.0), records)
    for epoch, counts in wc.items():
        assert epoch >= 200
        assert counts == Counter(w for ts, ws, _ in lines if int(ts) == epoch for w in ws)
    assert sum(map(sum, (c.values() for c in wc.values()))) == sum(
        len(ws) for ts, ws, _ in lines if ts >= 200
    )
    for epoch, counts in ql.items():
        assert counts == Counter(p for ts, _, p in lines if int(ts // 2) == epoch)


def test_writer_lines_are_whole_ordered_and_read_back(tmp_path: Path) -> None:
    paths = [tmp_path / "a.jsonl", tmp_path / "b.jsonl"]
    writer = LogWriter(paths, rate=400).start()
    try:
        assert writer.wait_written(100, timeout=10)
    finally:
        writer.stop()
    for path in paths:
        stamps = [r["ts"] for r in read_records([path])]
        assert stamps == sorted(stamps) and stamps
    assert len(read_records(paths)) == writer.written
    with paths[0].open("a") as f:
        f.write(json.dumps({"ts": 1.0, "line": "torn"})[:10])  # a line still being written
    assert len(read_records(paths)) == writer.written
