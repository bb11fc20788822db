"""A job master's hand-off of epoch results to the rollup lake (``spark_sink``).

Contract: :func:`sink_for` returns the :class:`LakeSink` of a job runtime when the agent's
config names a lake (``lake``; default ``<data_dir>/lake`` when a data directory is set,
``"off"`` disables it), else None. Every agent process shares one
:class:`~spark_sink.buffer.LakeWriter` per (lake, buffer directory): one writer thread, so the
event loop never waits for the lake. :meth:`LakeSink.epoch` is called by the master when it
stores an epoch's result, folds a late contribution into one, or absorbs results on hand-over;
it captures the current (immutable) snapshot and the thread turns it into rows — the same rows
the results API reports (top-k applied per tree; a job's named ``result_rows`` applied to
this tree's pairs) — and writes them. Tentative results do not
exist in the runtime yet: every row is written with ``tentative = false`` and
``coverage = 1.0``. The buffer directory is ``<data_dir>/lake-buffer`` (or a per-node one
under the system temp directory when the agent has no data directory).
"""

from __future__ import annotations

import asyncio
import logging
import tempfile
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # spark_sink (pyarrow) is imported only when a lake is configured
    from agent.runtime.job import JobRuntime
    from spark_sink.buffer import LakeWriter
    from spark_sink.lake import Rollup

log = logging.getLogger(__name__)
_WRITERS: dict[tuple[str, str], LakeWriter] = {}
_LOCK = threading.Lock()
STOP_FLUSH_SECONDS = 10.0


def writer_for(location: str, buffer_dir: str) -> LakeWriter:
    """The process-wide writer for (lake location, buffer directory)."""
    from spark_sink.buffer import LakeWriter

    key = (location, buffer_dir)
    with _LOCK:
        writer = _WRITERS.get(key)
        if writer is None:
            writer = _WRITERS[key] = LakeWriter(location, buffer_dir)
        return writer


class LakeSink:
    """Hands one job's stored epoch results (as master) to the lake writer."""

    def __init__(self, runtime: JobRuntime, writer: LakeWriter) -> None:
        self.runtime = runtime
        self.writer = writer
        job = runtime.job
        params = runtime.spec.params or {}
        self.key_names = getattr(job, "lake_key_names", None) or params.get("lake_key_names")
        self.value_names = getattr(job, "lake_value_names", None) or params.get("lake_value_names")

    def epoch(self, tid: int, epoch: int) -> None:
        """Queue the stored result of (tree, epoch) for the lake (no-op if none stored)."""
        rt = self.runtime
        result = rt.store.get(tid, epoch)
        if result is None or tid not in rt.tree_set:
            return
        snap, completed_at = result.snapshot, result.completed_at
        top_k, operator, spec, job = rt.spec.top_k, rt.operator, rt.spec, rt.job_for(epoch)

        from spark_sink.lake import Rollup, normalize

        def build() -> Rollup:
            pairs = list(snap if top_k is None else operator.result(snap))
            named = job.result_rows([[normalize(k), normalize(v)] for k, v in pairs])
            return Rollup(
                job=rt.name,
                tree=rt.tree_list.index(tid),
                trees=len(rt.tree_list),
                epoch=epoch,
                epoch_seconds=spec.schedule.seconds_of(epoch),
                start_time=spec.schedule.start(epoch) if spec.epoch_schedule else None,
                rows=pairs,
                named_rows=named,
                key_names=self.key_names,
                value_names=self.value_names,
                completed_at=completed_at,
            )

        self.writer.submit(build)
        rt.count("lake_submitted")

    async def flush(self) -> None:
        """Wait (off the loop, bounded) for queued rollups to be written or buffered."""
        done = await asyncio.to_thread(self.writer.flush, STOP_FLUSH_SECONDS)
        if not done:
            log.warning(
                "lake: %s stopping with rollups still queued or buffered: %s",
                self.runtime.name,
                self.writer.stats(),
            )

    def stats(self) -> dict[str, Any]:
        return self.writer.stats()


def sink_for(runtime: JobRuntime) -> LakeSink | None:
    """The runtime's lake sink, or None when the agent has no lake configured."""
    config = runtime.agent.config
    location = getattr(config, "lake", None)
    if not location:
        return None
    if config.data_dir:
        buffer_dir = str(Path(config.data_dir) / "lake-buffer")
    else:
        node = f"{runtime.agent.overlay.id:040x}"[:12]
        buffer_dir = str(Path(tempfile.gettempdir()) / f"elf-lake-buffer-{node}")
    return LakeSink(runtime, writer_for(location, buffer_dir))
