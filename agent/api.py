"""The job author's surface: everything a job class (``apps/``, or a third party's package)
needs from the agent, in one module.

Contract:

* :class:`Job` — the base class; subclass it and override the hooks (``setup``, ``map`` or
  ``map_keys``, ``on_epoch_result``, ``on_query``, ``local_query``, ...; their contracts are
  in :mod:`agent.jobs.job`). :func:`register_job` binds a registered name to the class (jobs
  arriving from the network name a registered class; no module path from the network is ever
  imported). Distributions also declare their classes in the ``elf.jobs`` entry-point group.
  Optional vectorized hook: ``map_batch(table) -> table`` (an Arrow table of records in, a
  table with a ``key`` and optionally a ``value`` column out, the pairs ``map`` would give)
  with ``batch_fields`` (the fields it reads): inputs whose every job has it run on the
  columnar ingest path (docs/ingest.md); ``map`` stays the reference and the fallback.
* :class:`JobContext` — what the runtime injects (``job.context``): ``node_id``,
  ``is_master``, ``feedback``, ``subscribe``, ``send_to``, ``multicast``, ``route``. A job
  reaches the runtime only through it.
* :class:`JobSpec` — the validated spec a job instance reads (``job.spec``, ``job.params``).
* :class:`EpochWindows` — the one windowing implementation (from :mod:`cbt.window`), for a
  master that windows merged epochs itself.
* :func:`app_id` — a job's overlay id from its name and creator, the address
  ``context.route`` and ``context.subscribe`` take to reach another job.
* :func:`spec_from_query` — the complete spec of an ELF QL job (``job_class`` ``ql``), for
  programs that submit queries beside their job classes (docs/ql.md); raises ``QLError``
  (a ``ValueError``) for a bad query. The query compiler loads on the first call.

Stability: these names are the interface between the agent and job code; what lies behind
them (runtime, servers, overlay, trees) may be reorganized without touching a job class.
Job modules import this module and :mod:`cbt` (snapshots, aggregators), nothing else of the
project. Importing it has no side effect beyond importing those modules.
"""

from __future__ import annotations

from typing import Any

from agent.jobs.job import Job, JobContext, register_job
from agent.jobs.spec import JobSpec
from cbt.window import EpochWindows
from srt.ids import app_id

__all__ = [
    "EpochWindows",
    "Job",
    "JobContext",
    "JobSpec",
    "app_id",
    "register_job",
    "spec_from_query",
]


def spec_from_query(name: str, creator: str, text: str, **fields: Any) -> dict[str, Any]:
    """The spec dict of an ELF QL job running ``text`` (``fields``: other spec fields such as
    ``start_epoch``); see :func:`agent.jobs.ql_job.spec_from_query`."""
    from agent.jobs import ql_job  # the query compiler: only when a query is submitted

    return ql_job.spec_from_query(name, creator, text, **fields)
