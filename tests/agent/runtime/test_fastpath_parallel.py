"""agent.runtime.parallel: parse and map on worker processes, clock and CBT in order — the results,
counters and quarantined lines equal the single-process FileTail path's (and so a Counter's,
see test_fastpath)."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_fastpath import MICRO_JSON, MICRO_NGINX, START, _job, _lines, _run

from agent.runtime.parallel import ParallelFileIngest
from agent.runtime.worker import Worker


def _entries(quarantine: object) -> list[tuple[int, int, str]]:
    return [(e["line_no"], e["offset"], e["reason"]) for e in quarantine.entries()]  # type: ignore[attr-defined]


@pytest.mark.parametrize("columnar", [False, True])
@pytest.mark.parametrize(("fmt", "prefilter"), [("json", True), ("nginx", True), ("json", False)])
def test_parallel_equals_single_process(
    tmp_path: Path, fmt: str, prefilter: bool, columnar: bool
) -> None:
    lines = _lines(fmt, 2000, seed=3)
    path = tmp_path / f"in.{fmt}"
    path.write_bytes(b"\n".join(lines) + b"\n")
    text = MICRO_JSON if fmt == "json" else MICRO_NGINX
    want, wworker, wtail = _run(path, fmt, text, fast=prefilter)
    worker = Worker(_job(text), wall_clock=lambda: START)
    got: dict[int, dict] = {}
    with ParallelFileIngest(
        path, worker, fmt, processes=2, prefilter=prefilter, read_size=1 << 13, columnar=columnar
    ) as ingest:
        assert ingest.columnar == columnar
        n = ingest.run(lambda closed: got.update((e, s.to_dict()) for e, s in closed))
        got.update((e, s.to_dict()) for e, s in worker.finish())
    assert n == len(lines)
    assert got == want
    assert ingest.counters["chunks"] > 4
    for key in ("lines", "records", "blank_lines", "rejected", "prefiltered"):
        assert ingest.counters[key] == wtail.counters[key], key
    assert _entries(ingest.quarantine) == _entries(wtail.quarantine)
    keys = ["records_in", "records_accepted", "bad_records", "prefiltered"]
    if not columnar:  # the columnar path inserts one partial per (epoch, key), not per pair
        keys.append("pairs_out")
    for key in keys:
        assert worker.counters[key] == wworker.counters[key], key
    assert worker.stats()["late_dropped"] == wworker.stats()["late_dropped"]


def test_processes_must_be_positive(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        ParallelFileIngest(tmp_path / "x", Worker(_job(MICRO_JSON)), "json", processes=0)
