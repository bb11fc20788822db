"""A runtime change of aggregate in one worker: each epoch is mapped and reduced by the job of
its side of the switch epoch, checked against a reference over the same records."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from agent.errors import Conflict
from agent.jobs.changes import parse_change
from agent.jobs.job import create_job
from agent.jobs.ql_job import spec_from_query
from agent.jobs.spec import JobSpec
from agent.runtime.epochs.worker import Worker

COUNT = "SELECT line, count(*) AS n FROM ingest GROUP BY line"
FIRST = "SELECT line, min(ts) AS first FROM ingest GROUP BY line"


def spec(query: str, **extra: Any) -> JobSpec:
    return JobSpec.from_dict({**spec_from_query("q", "t", query), "allowed_lateness": 100.0,
                              **extra})  # fmt: skip


def records(items: list[tuple[float, str]]) -> list[dict[str, Any]]:
    return [{"ts": ts, "line": line} for ts, line in items]


def test_epochs_before_the_switch_keep_the_old_aggregate_and_later_ones_take_the_new() -> None:
    worker = Worker(create_job(spec(COUNT)), wall_clock=lambda: 100.0)
    early = [(100.2, "a"), (101.5, "a"), (101.7, "b")]
    ahead = [(104.1, "a")]  # already past the switch when the change arrives: discarded
    worker.process(records(early + ahead))
    new = spec(FIRST, aggregator_since=103)
    worker.switch_job(create_job(new), 103)
    assert len(worker.active_jobs()) == 2
    late_old = [(102.4, "b"), (102.9, "b")]  # before the switch: counted
    after = [(103.5, "a"), (103.2, "a"), (104.6, "b")]  # from the switch: min(ts)
    worker.process(records(late_old + after))
    out = {e: s.to_dict() for e, s in worker.finish()}
    assert worker.stats()["switch_discarded_keys"] == 1
    assert worker.active_jobs() == [worker.job]  # every old epoch has closed
    expected: dict[int, dict[Any, Any]] = {}
    for ts, line in early + late_old:  # reference: count per line per epoch
        expected.setdefault(int(ts), Counter())[line] += 1
    for ts, line in after:
        got = expected.setdefault(int(ts), {})
        got[line] = min(got.get(line, ts), ts)
    assert {e: dict(v) for e, v in out.items() if v} == {e: dict(v) for e, v in expected.items()}


def test_a_worker_that_never_ran_the_old_aggregate_starts_at_the_switch() -> None:
    worker = Worker(create_job(spec(FIRST, aggregator_since=103)), wall_clock=lambda: 100.0)
    worker.process(records([(102.5, "a"), (103.5, "a")]))
    out = {e: s.to_dict() for e, s in worker.finish() if len(s)}
    assert out == {103: {"a": 103.5}}
    assert worker.stats()["late_dropped"] == 1


def test_the_master_schedules_a_new_aggregate_ahead_and_refuses_it_for_windows() -> None:
    running = spec(COUNT)
    new = parse_change({"query": FIRST}).apply(running, event_time=1000.0)
    assert new is not None and new.aggregator == "min"
    assert new.aggregator_since is not None
    assert new.schedule.start(new.aggregator_since) >= 1002.0
    filtered = COUNT.replace("GROUP BY line", "WHERE line <> 'x' GROUP BY line")
    same = parse_change({"query": filtered})
    assert same.apply(running).aggregator_since is None  # type: ignore[union-attr]
    with pytest.raises(Conflict, match="previous change of aggregate"):
        parse_change({"query": COUNT}).apply(new)  # the first one has not taken effect yet
    windowed = spec(COUNT + " WINDOW 3 s EVERY 1 s")
    with pytest.raises(Conflict, match="window job"):
        parse_change({"query": FIRST + " WINDOW 3 s EVERY 1 s"}).apply(windowed)
