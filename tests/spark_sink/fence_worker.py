"""A process that races another one writing an epoch's results to one lake (used by
test_fencing.py through multiprocessing's spawn start method: importable by name)."""

from __future__ import annotations

from typing import Any

STEP = 60.0
EPOCH0 = 1_795_300_000 // 60


def writer_rows(writer: int, epoch: int) -> list[tuple[str, int]]:
    """Writer ``writer``'s rows for ``epoch``: keys no other writer uses."""
    return [(f"w{writer}-e{epoch}-{i}", 1000 * writer + i) for i in range(3)]


def race(root: str, writer: int, epochs: int, barrier: Any, out: Any) -> None:
    """Write ``epochs`` epochs at term 1, version 1, meeting the other writer at ``barrier``
    before each write so both write the same (term, version) at the same moment; put the
    [(epoch, path)] this writer's writes returned on ``out``."""
    from spark_sink.lake import Lake, Rollup

    lake = Lake(root)
    got = []
    for i in range(epochs):
        epoch = EPOCH0 + i
        rollup = Rollup("race", 0, 1, epoch, STEP, writer_rows(writer, epoch), term=1)
        barrier.wait(60)
        got.append((epoch, lake.write(rollup)))
    out.put((writer, got))
