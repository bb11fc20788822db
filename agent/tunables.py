"""Tunables of the agent runtime (timings and bounds), with the defaults production runs use.

Contract: :class:`RuntimeTunables` is a frozen dataclass validated on construction (every
timing a positive finite number of seconds, every count a positive integer; a bad value raises
:class:`ValueError` naming the field). ``AgentConfig.runtime`` holds one, read from the TOML
config's ``[runtime]`` table (``agent/config.py``); tests pass other values with
``dataclasses.replace``. The agent hands each value to the component that uses it: the
:class:`~agent.runtime.host.agent.Agent` (tick, resync, jobs-tree queries, placement), each
:class:`~agent.runtime.job.runtime.JobRuntime` (multicasts, master lookups, late contributions,
the byte budgets of its results and its worker's buffers), the lake sink (flush on stop,
compaction, retention), the :class:`~agent.runtime.recovery.offsets.OffsetKeeper` and the
:class:`~agent.runtime.ops.http_api.HttpApi` (its connection limits, ``api_*``).
``lake_retention_days``, ``max_cores``, ``nice`` and ``parse_processes`` may be 0 (off);
``columnar`` and ``watch_files`` are booleans.

This module imports nothing of the project, so the config can nest it without a cycle.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

#: settings where 0 switches the feature off (every other value must be positive)
_ZERO_MEANS_OFF = frozenset(
    {"lake_retention_days", "max_cores", "multicast_bundle_wait", "nice", "parse_processes"}
)


@dataclass(frozen=True, slots=True)
class RuntimeTunables:
    """Timings (seconds) and bounds of one agent's runtime."""

    # ---- the agent (agent/runtime/host/agent.py)
    tick_seconds: float = 0.1  # inputs are polled (and jobs fed) at least this often
    # a file input's directory is watched (Linux inotify, agent/ingest/file_watch.py): the file
    # is read when the kernel reports a change (at most every tick_seconds) and checked once a
    # second besides, instead of being stat'ed every tick_seconds; off, or where inotify is
    # unavailable, it is polled
    watch_files: bool = True
    resync_seconds: float = 10.0  # anti-entropy: the job table is re-fetched this often
    resync_fanout: int = 2  # children a new jobs-tree root pulls the table from
    query_timeout: float = 10.0  # a query to the jobs-tree root or a job's master
    placement_choices: int = 2  # candidate tree ids per job ("power of two choices")
    # a job joining a file input other jobs already read re-reads at most this many bytes of
    # it for its first epochs (agent/ingest/replay.py); more: those epochs are flagged instead
    replay_max_bytes: int = 64 * 2**20
    # ---- admission of a submitted spec (agent/runtime/host/admission.py)
    max_catchup_epochs: int = 3600  # a start_epoch at most this many epochs before now
    max_catchup_seconds: float = 3600.0  # ... and at most this much event time before now
    max_start_ahead_seconds: float = 86_400.0  # a start_epoch at most this far after now
    # a job submitted without start_epoch starts with the first epoch beginning this long
    # after the submission: the job table reaches every agent first, so that epoch is whole
    start_margin_seconds: float = 0.5
    admission_timeout: float = 5.0  # a spec's dry run (its job class's setup()) must end in this
    # ---- the job table (agent/jobs/table.py)
    stopped_job_ttl: float = 600.0  # a stopped job leaves the table this long after its stop
    tombstone_seconds: float = 86_400.0  # a removed job's version is remembered this long
    # ---- one job (agent/runtime/job/runtime.py)
    multicast_timeout: float = 5.0  # a master's multicast down a job tree
    # a master's "empty" of an epoch waits this long for the epoch's "commit" (which never
    # waits) and the two go down as one (agent/runtime/job/control.py); 0: each alone at once
    multicast_bundle_wait: float = 0.25
    master_url_ttl: float = 5.0  # a master's data-plane URL is reused this long
    late_attempts: int = 12  # tries to deliver a late contribution (~20 s with back-off)
    # a master that became the root with nothing handed over (a restart, the job's first
    # master, or a brief belief before the overlay converges) waits this long before it
    # publishes to the lake: a real predecessor hands over meanwhile
    # (agent/runtime/recovery/master_terms.py)
    master_settle_seconds: float = 2.0
    # ... and a master that *ran the job before* (a restarted agent taking its root back)
    # waits up to this long: its predecessor - the agent that was master while it was down -
    # is alive and hands over once the overlay tells it, which on a loaded host takes longer
    # than master_settle_seconds; published before, the restarted master's own re-read share
    # of the epochs it missed would be a version lacking every other origin. It settles at
    # once when the hand-over arrives.
    master_restart_settle_seconds: float = 15.0
    # repair by pull (agent/runtime/recovery/retained_epochs.py): an origin keeps its own
    # snapshots of uncommitted epochs (bytes per job); a master asks lacking origins every
    # repair_interval
    retained_bytes: int = 64 * 2**20
    repair_interval: float = 1.0
    # hot replicas (agent/runtime/recovery/checkpoints.py): an origin sends its closed epochs that
    # are
    # still uncommitted this long after closing to the job's checkpoint_replicas neighbours
    # (in steady state they are committed by then: nothing is sent); a holder keeps at most
    # checkpoint_store_bytes of other agents' checkpoints
    checkpoint_delay: float = 0.25
    checkpoint_store_bytes: int = 64 * 2**20
    # permanent loss (agent/runtime/recovery/loss.py): a master probes the origins its oldest held
    # epoch
    # lacks this long after the epoch closed (a refused connection = the process is gone);
    # an origin the overlay failed for silence is declared lost loss_timeout later
    laggard_probe_after: float = 0.1
    loss_timeout: float = 10.0
    # a master replicates its results to a standby and commits only what the standby holds
    # (agent/runtime/recovery/standby.py); off: no standby, a master's death loses what it held
    standby_replication: bool = True
    # a job whose record processing used more than cpu_budget_share of one core over the last
    # cpu_budget_window seconds is throttled (its records wait in its backlog) and reported
    cpu_budget_share: float = 0.5
    cpu_budget_window: float = 10.0
    # a throttled job's backlog bound: past it the inputs it reads are not polled (they back
    # up: a file stays unread, the ingest queue fills and answers queue_full); nothing dropped
    max_backlog_records: int = 100_000
    # ---- memory: everything an agent holds - its jobs' results, worker buffers and retained
    # epochs, other agents' checkpoints - shares this budget (agent/runtime/memory_budget.py);
    # the per-job and per-kind bounds below are each one's cap within it
    memory_budget_bytes: int = 256 * 2**20
    # ---- memory and disk bounds of one job (agent/runtime/results/store.py, worker.py)
    result_memory_bytes: int = 256 * 2**20  # a master's resident epoch results, per job
    result_spill_bytes: int = 4 * 2**30  # its older results spilled to the data dir, per job
    worker_memory_bytes: int = 256 * 2**20  # a worker's resident compressed CBT buffers, per job
    # ---- the lake sink (agent/runtime/results/lake_sink.py, spark_sink/compaction.py)
    stop_flush_seconds: float = 10.0  # a stopping job waits this long for its rollups
    lake_compact_seconds: float = 60.0  # how often the lake writer compacts complete hours
    lake_compact_grace: float = 300.0  # compacted small files are deleted this much later
    lake_retention_days: float = 0.0  # hour partitions older than this are dropped (0: off)
    # ---- durable offsets (agent/runtime/recovery/offsets.py)
    max_pending: int = 4096  # noted positions per input awaiting acknowledgement
    # ---- connections of the user HTTP API (agent/runtime/ops/http_api.py, srt.dataplane.guard)
    api_head_timeout: float = 10.0  # a request's head must arrive within this of its first byte
    api_body_timeout: float = 30.0  # ... and its body (at most 8 MB) within this of the head
    api_idle_timeout: float = 60.0  # a keep-alive connection may be silent this long
    api_max_preauth: int = 64  # open connections without an authenticated request (oldest evicted)
    # ---- the dashboard (agent/runtime/dashboard; docs/dashboard.md)
    dashboard_max_agents: int = 64  # agents a serving agent asks per picture (itself included)
    dashboard_streams: int = 8  # open dashboard event streams per agent (more: 503)
    # ---- ingest and CPU (agent/ingest/columnar, agent/runtime/host/cpu_limits.py; docs/ingest.md)
    columnar: bool = True  # inputs whose every job has a batch path parse chunks into Arrow
    max_cores: int = 0  # the agent process runs on at most this many CPUs (0: all it may use)
    nice: int = 0  # raise the agent's niceness by this much, 1-19 (0: unchanged)
    # helper processes parsing a backlog's columnar chunks (agent/ingest/columnar/pool.py;
    # 0: off, the agent parses on its one record thread)
    parse_processes: int = 0

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name in _ZERO_MEANS_OFF and value == 0 and not isinstance(value, bool):
                continue
            if f.type in ("bool", bool):
                if not isinstance(value, bool):
                    raise ValueError(f"{f.name} must be true or false, got {value!r}")
                continue
            if f.name == "nice" and not isinstance(value, bool) and isinstance(value, int):
                if not 0 <= value <= 19:
                    raise ValueError(f"nice must be an integer in [0, 19], got {value!r}")
                continue
            if f.type in ("int", int):
                if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                    raise ValueError(f"{f.name} must be a positive integer, got {value!r}")
            elif (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or not math.isfinite(value)
                or value <= 0
            ):
                raise ValueError(f"{f.name} must be a positive number of seconds, got {value!r}")
