"""agent.runtime.local.parallel: parse and map on worker processes, clock and CBT in order — the
results,
counters and quarantined lines equal the single-process FileTail path's (and so a Counter's,
see test_fastpath)."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_fastpath import MICRO_JSON, MICRO_NGINX, START, _job, _lines, _run

from agent.runtime.epochs.worker import Worker
from agent.runtime.local.parallel import ParallelFileIngest


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


@pytest.mark.parametrize("columnar", [False, True])
def test_over_long_lines_inside_a_chunk_are_rejected_as_the_tail_does(
    tmp_path: Path, columnar: bool
) -> None:
    """A complete line longer than ``max_line_bytes`` inside a chunk (chunks are bigger than
    the limit) is quarantined as ``line_too_long`` by the worker processes too, never parsed."""
    from agent.ingest.formats import make_parser
    from agent.ingest.tail import FileTail

    lines = _lines("nginx", 600, seed=5)
    for i in (7, 300, 555):  # still valid access lines: only their length is wrong
        lines[i] = lines[i].replace(b'"Mozilla', b'"' + b"M" * 3000 + b"ozilla", 1)
    path = tmp_path / "in.nginx"
    path.write_bytes(b"\n".join(lines) + b"\n")
    want_worker = Worker(_job(MICRO_NGINX), wall_clock=lambda: START)
    tail = FileTail(path, parser=make_parser("nginx"), read_size=1 << 14, max_line_bytes=2048)
    want: dict[int, dict] = {}
    while batch := tail.poll():
        want_worker.process(batch)
    want.update((e, s.to_dict()) for e, s in want_worker.finish())
    assert tail.quarantine.counts["line_too_long"] == 3
    worker = Worker(_job(MICRO_NGINX), wall_clock=lambda: START)
    got: dict[int, dict] = {}
    with ParallelFileIngest(
        path, worker, "nginx", processes=2, prefilter=False, read_size=1 << 14,
        max_line_bytes=2048, columnar=columnar,
    ) as ingest:  # fmt: skip
        ingest.run(lambda closed: got.update((e, s.to_dict()) for e, s in closed))
        got.update((e, s.to_dict()) for e, s in worker.finish())
    assert got == want
    assert _entries(ingest.quarantine) == _entries(tail.quarantine)
    assert ingest.counters["records"] == tail.counters["records"]


def test_a_worker_reads_its_chunk_from_the_file_and_refuses_other_bytes(tmp_path: Path) -> None:
    """Chunks are handed over as (offset, length, digest); a worker process that finds other
    bytes there (the file was rewritten) says so, and the main process parses the chunk."""
    import xxhash

    from agent.runtime.local import parallel

    path = tmp_path / "f"
    path.write_bytes(b"one\ntwo\nthree\n")
    saved = dict(parallel._state)
    try:
        parallel._open(str(path))
        good = xxhash.xxh3_64_intdigest(b"two\n")
        assert parallel._read((4, 4, good)) == b"two\n"
        assert parallel._read((4, 4, good ^ 1)) is None  # another digest: not these bytes
        assert parallel._read((10, 8, good)) is None  # past the end of the file
        assert parallel._read(b"given\n") == b"given\n"
    finally:
        import os

        os.close(parallel._state["fd"])
        parallel._state.clear()
        parallel._state.update(saved)


@pytest.mark.parametrize("last", ["valid", "too_long"])
def test_the_unterminated_last_line_counts_as_the_tails_drain(tmp_path: Path, last: str) -> None:
    from agent.ingest.formats import make_parser
    from agent.ingest.tail import FileTail

    lines = _lines("nginx", 300, seed=9)
    final = lines.pop()
    if last == "too_long":
        final = final.replace(b'"Mozilla', b'"' + b"M" * 5000 + b"ozilla", 1)
    path = tmp_path / "in.nginx"
    path.write_bytes(b"\n".join(lines) + b"\n" + final)  # no newline after the last line
    want_worker = Worker(_job(MICRO_NGINX), wall_clock=lambda: START)
    tail = FileTail(path, parser=make_parser("nginx"), read_size=1 << 12, max_line_bytes=2048)
    while batch := tail.poll():
        want_worker.process(batch)
    want_worker.process(tail.drain())
    want = {e: s.to_dict() for e, s in want_worker.finish()}
    worker = Worker(_job(MICRO_NGINX), wall_clock=lambda: START)
    with ParallelFileIngest(
        path, worker, "nginx", processes=2, prefilter=False, read_size=1 << 12,
        max_line_bytes=2048, columnar=True,
    ) as ingest:  # fmt: skip
        got: dict[int, dict] = {}
        n = ingest.run(lambda closed: got.update((e, s.to_dict()) for e, s in closed))
        got.update((e, s.to_dict()) for e, s in worker.finish())
    assert n == tail.counters["lines"] == len(lines) + 1
    assert got == want
    assert _entries(ingest.quarantine) == _entries(tail.quarantine)
    assert ingest.counters["records"] == tail.counters["records"]
