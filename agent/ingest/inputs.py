"""An agent's input built from its configuration: :func:`open_input`.

Contract: :func:`open_input` maps an :class:`~agent.config.InputConfig` to one
:class:`~agent.ingest.base.Input` — a :class:`~agent.ingest.tail.FileTail` (``path`` a file),
a :class:`~agent.ingest.stream.StreamInput` (``path == "-"``: stdin) or an
:class:`~agent.ingest.stream.IngestQueue` (type ``ingest``) — parsing the configured ``format``
(:func:`~agent.ingest.parsers.make_parser`: a format name or the input's ``log_format``) and,
given a data directory, sampling rejected lines to a dead-letter file. Configuration was
validated when it was loaded; nothing here raises on a valid one.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from agent.ingest.deadletter import DeadLetterFile
from agent.ingest.parsers import input_format, make_parser
from agent.ingest.records import Quarantine
from agent.ingest.stream import IngestQueue, StreamInput
from agent.ingest.tail import FileTail

if TYPE_CHECKING:
    from agent.config import InputConfig


def open_input(
    cfg: InputConfig,
    data_dir: str | os.PathLike[str] | None = None,
    *,
    state: dict[str, Any] | None = None,
    **kw: Any,
) -> FileTail | StreamInput | IngestQueue:
    """The input ``cfg`` describes: a :class:`FileTail` (``path`` a file; resuming at
    ``state``), a :class:`StreamInput` on stdin (``path == "-"``) or an :class:`IngestQueue`
    (type ``ingest``), parsing ``cfg.format``. With ``data_dir`` rejected lines are also sampled
    to ``<data_dir>/deadletter/<name>.jsonl``; ``kw`` goes to the input's constructor."""
    parser = make_parser(input_format(cfg), ts_field=cfg.timestamp_field)
    dead = DeadLetterFile.for_input(data_dir, cfg.name) if data_dir else None
    quarantine = Quarantine(dead_letter=dead)
    if cfg.type == "ingest":
        return IngestQueue(parser=parser, quarantine=quarantine, name=cfg.name, **kw)
    assert cfg.path is not None
    if cfg.path == "-":
        return StreamInput(parser=parser, quarantine=quarantine, name=cfg.name, **kw)
    return FileTail(
        cfg.path, parser=parser, quarantine=quarantine, name=cfg.name, state=state, **kw
    )
