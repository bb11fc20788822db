"""An ELF QL job's epochs written to a lake by the product's own path, without agents: the
product's job (``agent/jobs/ql_job.py``, built from :func:`spec_from_query` as every agent
builds it), each epoch's raw lines through the query's CBT into a
:class:`~agent.runtime.results.store.ResultStore`, and a
:class:`~agent.runtime.results.lake_sink.LakeSink` on a stand-in of the job runtime (the
sink's ``EpochSource``: one tree, the job's own spec) handing it to a
:class:`~spark_sink.buffer.LakeWriter`. Shared by tests/spark_sink and
bench/spark_sink_bench.py (which puts this directory on ``sys.path``)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

from agent.jobs.job import create_job
from agent.jobs.ql_job import spec_from_query
from agent.jobs.spec import JobSpec
from agent.runtime.results.lake_sink import LakeSink
from agent.runtime.results.store import ResultStore
from cbt import CompressedBufferTree
from spark_sink.buffer import LakeWriter
from spark_sink.lake import Lake


class QLLake:
    """Query ``text`` as job ``name`` (epochs of ``epoch_seconds``, one tree ``tree``) writing
    into ``lake`` through a writer buffering in ``buffer_dir``; :meth:`epoch` stores and
    hands on one epoch, :meth:`close` waits for the writes."""

    def __init__(
        self, text: str, lake: Lake, buffer_dir: Path, *, name: str, epoch_seconds: float, tree: int
    ) -> None:
        spec = spec_from_query(name, "tests", text, epoch_seconds=epoch_seconds)
        self.job: Any = create_job(JobSpec.from_dict(spec))
        self.tree = tree
        self.store = ResultStore()
        self.writer = LakeWriter(lake, buffer_dir)
        job = self.job
        # late_records: no origin reports late records to this stand-in (None: unknown)
        runtime = SimpleNamespace(
            name=name, store=self.store, tree_list=[tree], tree_set={tree}, spec=job.spec,
            operator=None, job=job, count=lambda *a, **k: None, job_for=lambda epoch: job,
            late_records=lambda epoch: None,
        )  # fmt: skip
        self.sink = LakeSink(runtime, self.writer)

    def epoch(self, epoch: int, lines: list[dict[str, Any]], *, doubtful: bool = False) -> None:
        """``lines`` aggregated as epoch ``epoch``'s result (``doubtful``: stored tentative),
        queued for the lake."""
        compiled = self.job.compiled
        cbt = CompressedBufferTree(compiled.make_aggregator())
        for r in lines:
            for k, v in compiled.map(r):
                cbt.insert(k, v)
        self.store.put(self.tree, epoch, cbt.flush(), 0.0, doubtful=doubtful)
        self.sink.epoch(self.tree, epoch)

    def close(self, timeout: float) -> None:
        """Wait up to ``timeout`` seconds for every queued epoch to be written; stop the writer."""
        assert self.writer.flush(timeout), "the lake writer did not drain in time"
        self.writer.close()
