"""A bounded re-read of part of a file input, for a job that joins an input other jobs already
read.

Contract: :func:`replay_range` yields the records of the lines of ``cfg``'s file from the
position ``start`` (a :meth:`FileTail.state`, noted by the offset keeper) up to byte
``stop`` (the shared tail's position when the job joined it), parsed exactly as the shared
tail parses them (same format, same timestamp field), in file order, a bounded batch at a
time. It raises :class:`ReplayError` - before yielding anything - when the range cannot be
re-read exactly: the file is not the one ``start`` was noted in (rotated since), the range is
longer than ``max_bytes`` or runs backwards; and while yielding, when the file shrank below
``stop`` (truncated). Lines it rejects are not sampled to the dead-letter file again (the
shared tail already did). Nothing here knows jobs: the agent feeds the batches to the one
job that needs them (``docs/fault-tolerance.md``, "A job joining an input others read").
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from agent.ingest.base import RecordBatch
from agent.ingest.parsers import input_format, make_parser
from agent.ingest.records import Quarantine
from agent.ingest.tail import FileTail

if TYPE_CHECKING:
    from agent.config import InputConfig

#: bytes read per batch of a replay (the record thread yields to the agent's tick between)
REPLAY_READ_SIZE = 1 << 20


class ReplayError(Exception):
    """The range cannot be re-read exactly (the message says why)."""


def replay_range(
    cfg: InputConfig, start: dict[str, Any], stop: int, *, max_bytes: int
) -> Iterator[RecordBatch]:
    """Batches of the records in ``[start["offset"], stop)`` of ``cfg``'s file (see module)."""
    if cfg.path is None or cfg.path == "-" or cfg.type == "ingest":
        raise ReplayError(f"input {cfg.name!r} is not a file")
    begin, inode = start.get("offset"), start.get("inode")
    if not isinstance(begin, int) or not isinstance(inode, int):
        raise ReplayError("no position to re-read from")
    if stop < begin:
        raise ReplayError(f"range runs backwards ({begin} > {stop})")
    if stop - begin > max_bytes:
        raise ReplayError(f"{stop - begin} bytes to re-read, more than {max_bytes}")
    try:
        if os.stat(cfg.path).st_ino != inode:
            raise ReplayError("the file was rotated since that position")
    except OSError as exc:
        raise ReplayError(f"file unreadable: {exc}") from None
    tail = FileTail(
        cfg.path,
        parser=make_parser(input_format(cfg), ts_field=cfg.timestamp_field),
        quarantine=Quarantine(),
        name=cfg.name,
        state=start,
        read_size=REPLAY_READ_SIZE,
        stop_at=stop,
    )
    try:
        first, read = True, 0
        while True:
            batch = tail.poll()
            at = tail.state()
            if first and (at["inode"] != inode or at["offset"] < begin):
                raise ReplayError("the file changed under the re-read")
            if tail.counters["truncations"]:
                raise ReplayError("the file was truncated under the re-read")
            first = False
            if batch:
                yield batch
            if at["offset"] >= stop:
                return
            if tail.counters["bytes"] == read:  # nothing more to read before ``stop``
                raise ReplayError(f"the file ends before byte {stop}")
            read = tail.counters["bytes"]
    finally:
        tail.close()
