"""The lake writer's on-disk buffer: an unavailable lake loses nothing, keeps order, refuses
loudly when full, and a re-push of a buffered epoch replaces the pending copy."""

from __future__ import annotations

import logging
import time
from collections import Counter
from pathlib import Path

import pytest

from spark_sink.buffer import LakeWriter
from spark_sink.lake import Lake, Rollup, read_table

EPOCH = 1_795_300_000


def rollup(epoch: int, rows: list, job: str = "wc") -> Rollup:
    return Rollup(job, 0, 1, epoch, 1.0, rows)


def wait_until(predicate, timeout: float = 10.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)  # the poll interval of this condition wait, not a wait itself


def lake_rows(lake: Lake) -> Counter:
    files = lake.files("wc")
    return Counter((r["epoch"], r["key"], r["value"]) for r in read_table(lake, files).to_pylist())


def test_writes_when_the_lake_is_up(tmp_path: Path) -> None:
    lake = Lake(str(tmp_path / "lake"))
    writer = LakeWriter(lake, tmp_path / "buf")
    writer.submit(rollup(EPOCH, [("a", 1)]))
    writer.submit(lambda: rollup(EPOCH + 1, [("b", 2)]))  # built on the writer thread
    assert writer.flush(10)
    assert lake_rows(lake) == Counter({(EPOCH, "a", 1): 1, (EPOCH + 1, "b", 2): 1})
    assert writer.stats()["written"] == 2
    writer.close()


def test_unavailable_lake_buffers_then_flushes_everything_once(tmp_path: Path, caplog) -> None:
    blocker = tmp_path / "lake"
    blocker.write_text("not a directory")  # the lake cannot be created: unavailable
    lake = Lake(str(blocker))
    writer = LakeWriter(lake, tmp_path / "buf", retry_initial=0.05, retry_max=0.1)
    with caplog.at_level(logging.WARNING, "spark_sink.buffer"):
        for i in range(5):
            writer.submit(rollup(EPOCH + i, [("a", i)]))
        writer.submit(rollup(EPOCH + 2, [("a", 20)]))  # an updated epoch while buffered
        wait_until(lambda: writer.stats()["queued"] == 0)
        stats = writer.stats()
        assert stats["pending"] == 5 and stats["written"] == 0 and stats["buffered"] == 6
        assert "unavailable" in caplog.text
        blocker.unlink()  # the lake comes back
        assert writer.flush(10)
    want = {(EPOCH + i, "a", 20 if i == 2 else i): 1 for i in range(5)}
    assert lake_rows(lake) == Counter(want)
    assert writer.stats()["retried"] >= 5
    assert "available again" in caplog.text
    writer.close()


def test_full_buffer_refuses_loudly_and_counts(tmp_path: Path, caplog) -> None:
    blocker = tmp_path / "lake"
    blocker.write_text("x")
    writer = LakeWriter(Lake(str(blocker)), tmp_path / "buf", capacity=2, retry_initial=60)
    with caplog.at_level(logging.ERROR, "spark_sink.buffer"):
        for i in range(4):
            writer.submit(rollup(EPOCH + i, [("a", i)]))
        wait_until(lambda: writer.stats()["queued"] == 0)
    stats = writer.stats()
    assert (stats["pending"], stats["dropped_over_capacity"]) == (2, 2)
    assert f"epoch {EPOCH + 3} REFUSED" in caplog.text
    writer.close()


def test_buffer_survives_a_restart(tmp_path: Path) -> None:
    blocker = tmp_path / "lake"
    blocker.write_text("x")
    first = LakeWriter(Lake(str(blocker)), tmp_path / "buf", retry_initial=60)
    first.submit(rollup(EPOCH, [("a", 1)]))
    wait_until(lambda: first.stats()["pending"] == 1)
    first.close(timeout=0.5)
    blocker.unlink()
    lake = Lake(str(blocker))
    second = LakeWriter(lake, tmp_path / "buf")
    assert second.flush(10)
    assert lake_rows(lake) == Counter({(EPOCH, "a", 1): 1})
    second.close()


def test_unrepresentable_rollup_is_counted_not_raised(tmp_path: Path, caplog) -> None:
    writer = LakeWriter(Lake(str(tmp_path / "lake")), tmp_path / "buf")

    def broken() -> Rollup:
        raise ValueError("job bug")

    with caplog.at_level(logging.ERROR, "spark_sink.buffer"):
        writer.submit(broken)
        assert writer.flush(10)
    assert writer.stats()["bad_rollups"] == 1
    assert "job bug" in caplog.text
    writer.close()


@pytest.mark.parametrize("n", [3])
def test_duplicate_pushes_leave_one_copy(tmp_path: Path, n: int) -> None:
    lake = Lake(str(tmp_path / "lake"))
    writer = LakeWriter(lake, tmp_path / "buf")
    for _ in range(n):
        writer.submit(rollup(EPOCH, [("a", 1), ("b", 2)]))
    assert writer.flush(10)
    assert lake_rows(lake) == Counter({(EPOCH, "a", 1): 1, (EPOCH, "b", 2): 1})
    writer.close()


def test_a_lake_that_cannot_be_opened_is_buffered_like_an_unavailable_one(tmp_path: Path) -> None:
    writer = LakeWriter("nosuchscheme://bucket/elf", tmp_path / "buf", retry_initial=60)
    writer.submit(rollup(EPOCH, [("a", 1)]))
    wait_until(lambda: writer.stats()["queued"] == 0)
    stats = writer.stats()
    assert (stats["pending"], stats["written"]) == (1, 0)
    assert "nosuchscheme" in stats["last_error"]
    writer.close(timeout=0.5)
