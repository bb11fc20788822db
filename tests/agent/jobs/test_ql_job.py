"""The ``ql`` job class end to end on one agent, without network: a spec built with
spec_from_query runs through agent.runtime.epochs.worker.Worker (tumbling, sliding and
partitioned), and
the
master-side rows of each epoch equal pandas over the same records; bad queries and specs that
disagree with their query are clear ValueErrors; ``elf submit --query`` builds the spec."""

from __future__ import annotations

import random
import tomllib
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from click.testing import CliRunner

from agent.jobs.job import create_job, job_class, parse_spec
from agent.jobs.ql_job import QLCountJob, QLJob, spec_from_query
from agent.jobs.spec import JobSpec, JobSpecError
from agent.jsonable import jsonable
from agent.runtime.epochs.worker import Worker

QUERY = """
SELECT product, count(*) AS clicks, sum(price) AS revenue
FROM clicks
WHERE directory = 'Video Games' AND action = 'click'
GROUP BY product
ORDER BY clicks DESC, product
LIMIT 5
"""


class FakeClock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def click_records(n: int, seed: int, span: float = 60.0) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        out.append(
            {
                "ts": span * i / n,
                "directory": rng.choice(["Video Games", "Books", "Toys"]),
                "action": rng.choice(["click", "click", "view"]),
                "product": f"p{min(int(rng.paretovariate(1.2)), 12)}",
                "price": rng.choice([5, 10, 20, 60]),
            }
        )
    return out


def reference(records: list[dict], lo: float, hi: float, limit: int = 5) -> list[dict]:
    df = pd.DataFrame(records)
    df = df[(df.ts >= lo) & (df.ts < hi)]
    df = df[(df.directory == "Video Games") & (df.action == "click")]
    g = df.groupby("product")
    ref = pd.DataFrame({"clicks": g.size(), "revenue": g["price"].sum()}).reset_index()
    ref = ref.sort_values(["clicks", "product"], ascending=[False, True]).head(limit)
    return [
        {"product": r.product, "clicks": int(r.clicks), "revenue": int(r.revenue)}
        for r in ref.itertuples()
    ]


def run(text: str, records: list[dict], **spec: Any) -> tuple[QLJob, list[tuple[int, Any]]]:
    job = create_job(parse_spec(spec_from_query("q", "me", text, **spec)))
    assert isinstance(job, QLJob)
    worker = Worker(job, wall_clock=FakeClock())
    worker.process(records)
    return job, worker.finish()


def rows_of(job: QLJob, snap: Any, trees: int = 1) -> list[dict]:
    # what the runtime does: each tree's pairs as JSON, concatenated, then the job's hook
    pairs = [jsonable([k, v]) for part in snap.split_by_hash(trees) for k, v in part]
    return job.result_rows(pairs)


def test_tumbling_window_rows_equal_pandas_per_epoch() -> None:
    records = click_records(3000, 1)
    job, epochs = run(QUERY + "WINDOW 10 s", records)
    assert type(job) is QLJob  # count and sum: pairs
    assert job.spec.epoch_seconds == 10.0 and job.spec.mode == "batch"
    assert [e for e, _ in epochs] == list(range(6))
    for epoch, snap in epochs:
        assert rows_of(job, snap) == reference(records, epoch * 10, epoch * 10 + 10)


def test_sliding_window_rows_equal_pandas_per_window() -> None:
    records = click_records(3000, 2)
    job, epochs = run(QUERY + "WINDOW 20 s EVERY 10 s", records)
    spec = job.spec
    assert (spec.epoch_seconds, spec.mode, spec.window_size, spec.window_slide) == (
        10.0,
        "window",
        2,
        1,
    )
    for epoch, snap in epochs:
        lo, hi = spec.window_bounds(epoch)  # type: ignore[misc]
        assert rows_of(job, snap) == reference(records, lo * 10, (hi + 1) * 10)


def test_partitions_split_keys_among_trees_and_rows_stay_exact() -> None:
    records = click_records(2000, 3)
    job, epochs = run(QUERY + "WINDOW 30 s PARTITIONS 3", records)
    assert job.spec.trees == 3
    for epoch, snap in epochs:
        assert rows_of(job, snap, trees=3) == reference(records, epoch * 30, epoch * 30 + 30)


def test_count_only_query_uses_top_k_and_master_keeps_last_rows() -> None:
    text = (
        "SELECT product, count(*) AS clicks FROM clicks WHERE action = 'click' "
        "GROUP BY product ORDER BY clicks DESC LIMIT 3 WINDOW 60 s"
    )
    records = click_records(500, 4)
    job, epochs = run(text, records)
    assert (job.spec.aggregator, job.spec.top_k) == ("count", 3)
    assert isinstance(job, QLCountJob)  # keys only: the worker's counting fast path
    epoch, snap = epochs[-1]
    job.on_epoch_result(epoch, snap)
    reply = job.on_query({})
    assert reply["epoch"] == epoch and reply["columns"] == ["product", "clicks"]
    assert reply["rows"] == rows_of(job, snap)
    assert len(reply["rows"]) == 3


def test_map_errors_are_counted_not_fatal() -> None:
    records = [{"ts": 1.0, "k": "a", "v": "not a number"}, {"ts": 1.5, "k": "a", "v": 2}]
    job, epochs = run("SELECT k, sum(v) AS s, count(*) AS n FROM * GROUP BY k", records)
    (_, snap), *_ = epochs
    assert rows_of(job, snap) == [{"k": "a", "s": 2, "n": 1}]


def test_job_class_registered_and_entry_point_declared() -> None:
    assert job_class("ql") is QLJob
    pyproject = tomllib.loads((Path(__file__).resolve().parents[3] / "pyproject.toml").read_text())
    assert pyproject["project"]["entry-points"]["elf.jobs"]["ql"] == "agent.jobs.ql_job:QLJob"


def test_bad_query_and_disagreeing_spec_are_value_errors() -> None:
    spec = spec_from_query("q", "me", QUERY)
    bad = {**spec, "params": {"query": "SELECT product\nFORM clicks"}}
    with pytest.raises(
        JobSpecError, match=r"params\.query: line 2, column 1: expected ',' or FROM"
    ):
        parse_spec(bad)  # at submission (the API answers 400)
    with pytest.raises(ValueError, match=r"params\.query: line 2, column 1: expected ',' or FROM"):
        create_job(JobSpec.from_dict(bad))  # and on an agent, should one get it anyway
    windowed = spec_from_query("w", "me", QUERY.replace("LIMIT 5", "LIMIT 5 WINDOW 10 s"))
    with pytest.raises(ValueError, match="disagrees with the query"):
        create_job(parse_spec({**windowed, "epoch_seconds": 5.0}))  # WINDOW sets the epochs
    for change in (
        {"aggregator": "count", "aggregator_params": {}},
        {"mode": "window"},
        {"inputs": ["other"]},
        {"top_k": 2},
    ):
        with pytest.raises(ValueError, match="disagrees with the query"):
            create_job(parse_spec({**spec, **change}))
    with pytest.raises(ValueError, match=r"params\.query"):
        create_job(parse_spec({**spec, "params": {}}))
    # fields the query leaves open are the submitter's (the epoch length too without WINDOW)
    create_job(parse_spec({**spec, "trees": 4, "allowed_lateness": 2.0, "epoch_seconds": 5.0}))


def test_cli_submit_query_builds_the_spec(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from agent import cli

    sent: list[dict] = []

    class FakeClient:
        def submit(self, spec: dict) -> dict:
            sent.append(spec)
            return {"ok": True}

    monkeypatch.setattr(cli, "api_client", lambda *a: FakeClient())
    path = tmp_path / "q.sql"
    path.write_text(QUERY + "WINDOW 300 s EVERY 30 s")
    result = CliRunner().invoke(cli.cli, ["submit", "--name", "top", "--query", str(path)])
    assert result.exit_code == 0, result.output
    (spec,) = sent
    assert spec["job_class"] == "ql" and spec["params"]["query"] == path.read_text()
    assert (spec["epoch_seconds"], spec["window_size"], spec["mode"]) == (30.0, 10, "window")
    parse_spec(spec)
    result = CliRunner().invoke(cli.cli, ["submit", "--name", "x", "--query", "SELECT k FORM t"])
    assert result.exit_code != 0 and "line 1, column 10" in result.output
