"""The agent's Prometheus metrics: one set per agent, read at scrape time.

Contract: :class:`AgentMetrics` renders its own collectors (never ``prometheus_client``'s
process-global registry: a test or ``elf agent --agents N`` runs several agents in one
process, each with its own ``/metrics``). Its :class:`AgentCollector` reads the agent's own
counters through the narrow :class:`MetricsSource` protocol *when scraped* — nothing is copied
on the hot path — and turns them into metric families (:meth:`AgentMetrics.exposition` is the
text format, produced by ``prometheus_client``, never by hand). Two histograms are observed as
things happen, through the runtime's read-only :class:`~agent.runtime.services.EpochObserver`
hook: the roll-up latency of each epoch a master stores and the latency of each multicast a
master sends. ``process_*`` figures (CPU seconds, RSS, open files) come from
``prometheus_client``'s process collector (Linux ``/proc``; absent elsewhere).

**Label cardinality is bounded.** Labels are only ``job``, ``input``, ``reason``, ``role`` and
``kind``; never a key, a node id, a tree id, an address or an epoch. ``job`` ranges over the jobs
running on this agent (the job table's running jobs; a stopped job's series disappear with its
runtime, its histogram children are removed at the next scrape), ``input`` over the configured
inputs, ``reason`` and ``kind`` over fixed sets written in the code (counter names, drop and
rejection reasons, message types; a multicast kind a job chose itself is reported as ``job``;
a failed background task as ``task_failed``, without its description), ``role`` over
``worker``/``forwarder``/``master``. So one agent exposes O(jobs × ~60 + inputs × ~10 +
~150) series. Every metric is listed in ``docs/metrics.md``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from agent.runtime.ops.latency_histograms import LatencyHistogram
from cbt import rejected_binaries

if TYPE_CHECKING:
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

#: the Prometheus text format's content type (``prometheus_client.CONTENT_TYPE_PLAIN_0_0_4``,
#: written out: that library is imported only when a scrape comes, see AgentMetrics)
CONTENT_TYPE_PLAIN_0_0_4 = "text/plain; version=0.0.4; charset=utf-8"

ROLES = ("worker", "forwarder", "master")
#: multicast kinds the runtime sends itself; any other (a job's own) is reported as "job"
MULTICAST_KINDS = frozenset({"empty", "feedback", "commit", "change", "batch"})
#: roll-up latency buckets (seconds from an epoch's end to its result stored at the master;
#: allowed lateness included, so up to minutes)
ROLLUP_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 300.0)
#: multicast latency buckets (seconds from send to the aggregated confirmation)
MULTICAST_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0)


class MetricsSource(Protocol):
    """What the collector reads, as plain data (implemented by
    ``agent.runtime.host.views.AgentView``): nothing else of the agent is reachable from here."""

    def metrics_node(self) -> Mapping[str, Any]:
        """Agent-wide figures: ``uptime_s``, ``ready``, ``contacts``, ``overlay``
        (``OverlayNode.stats()``), ``data_plane``, ``api``, ``counters``, ``job_table``,
        ``loop_lag``, ``lake`` (the lake writer's stats or None)."""
        ...

    def metrics_inputs(self) -> Mapping[str, Mapping[str, Any]]:
        """Per input name: its ``stats()``."""
        ...

    def metrics_jobs(self) -> Mapping[str, Mapping[str, Any]]:
        """Per running job: its runtime's ``status()`` plus ``results_now`` (``tentative``:
        tentative epochs among the newest stored here, ``coverage`` and ``accuracy``: the newest
        one's)."""
        ...


def _num(value: Any) -> float:
    """A figure as a float (None, bools and non-numbers as 0: a missing figure is 0 here)."""
    if isinstance(value, bool):
        return float(value)
    return float(value) if isinstance(value, int | float) else 0.0


def _bounded_kind(name: str) -> str:
    """A counter name as a ``kind`` label: ``task_failed:<what>`` (free text naming a job
    and a task) collapses to ``task_failed``."""
    return name.split(":", 1)[0]


class _Families:
    """Metric families built during one scrape, by name (one family per name)."""

    def __init__(self) -> None:
        self._by_name: dict[str, Metric] = {}

    def counter(self, name: str, doc: str, labels: Iterable[str] = ()) -> CounterMetricFamily:
        from prometheus_client.core import CounterMetricFamily

        fam = self._by_name.get(name)
        if fam is None:
            fam = self._by_name[name] = CounterMetricFamily(name, doc, labels=list(labels))
        return fam  # type: ignore[return-value]

    def gauge(self, name: str, doc: str, labels: Iterable[str] = ()) -> GaugeMetricFamily:
        from prometheus_client.core import GaugeMetricFamily

        fam = self._by_name.get(name)
        if fam is None:
            fam = self._by_name[name] = GaugeMetricFamily(name, doc, labels=list(labels))
        return fam  # type: ignore[return-value]

    def __iter__(self) -> Iterator[Metric]:
        return iter(self._by_name.values())


class AgentCollector:
    """Reads a :class:`MetricsSource` at scrape time (see the module contract)."""

    def __init__(self, source: MetricsSource) -> None:
        self._source = source
        #: the jobs of the last scrape (the histograms' children of other jobs are pruned)
        self.last_jobs: frozenset[str] = frozenset()

    def describe(self) -> list[Metric]:
        return []  # no fixed set: names depend on what runs; keeps registration lazy

    def collect(self) -> Iterator[Metric]:
        return iter(self.families(*self.read()))

    def read(self) -> tuple[Mapping[str, Any], Mapping[str, Any], Mapping[str, Any]]:
        """The source's figures now (on the thread that owns them: the event loop)."""
        return (
            self._source.metrics_node(),
            self._source.metrics_inputs(),
            self._source.metrics_jobs(),
        )

    def families(
        self,
        node: Mapping[str, Any],
        inputs: Mapping[str, Mapping[str, Any]],
        jobs: Mapping[str, Mapping[str, Any]],
    ) -> list[Metric]:
        """The metric families of figures :meth:`read` returned (pure: any thread)."""
        f = _Families()
        self._node(f, node)
        self._inputs(f, inputs)
        self.last_jobs = frozenset(jobs)
        self._jobs(f, jobs)
        return list(f)

    # ---- agent-wide ------------------------------------------------------------------------

    def _node(self, f: _Families, node: Mapping[str, Any]) -> None:
        f.gauge("elf_agent_uptime_seconds", "Seconds since the agent started.").add_metric(
            [], _num(node.get("uptime_s"))
        )
        f.gauge(
            "elf_agent_ready", "1 when /readyz answers 200 (joined, job table synced)."
        ).add_metric([], _num(node.get("ready")))
        lag = node.get("loop_lag") or {}
        f.gauge("elf_event_loop_lag_seconds", "How late the event loop last woke up.").add_metric(
            [], _num(lag.get("last_ms")) / 1000
        )
        f.gauge(
            "elf_event_loop_lag_max_seconds", "Largest event-loop lag seen recently."
        ).add_metric([], _num(lag.get("recent_max_ms")) / 1000)
        events = f.counter(
            "elf_agent_events", "Agent-wide counters by name (errors, refusals).", ["kind"]
        )
        merged: dict[str, float] = {}
        for name, n in (node.get("counters") or {}).items():
            kind = _bounded_kind(str(name))
            merged[kind] = merged.get(kind, 0.0) + _num(n)
        for kind, n in sorted(merged.items()):
            events.add_metric([kind], n)
        f.counter(
            "elf_sketch_binaries_rejected",
            "Sketch binaries (KLL, HLL, frequent items) refused as malformed or of another "
            "size, by this process (every agent of it).",
        ).add_metric([], float(rejected_binaries()))
        table = node.get("job_table") or {}
        f.gauge("elf_job_table_entries", "Jobs in this agent's copy of the job table.").add_metric(
            [], _num(table.get("entries"))
        )
        f.gauge("elf_job_table_stopped", "Stopped jobs still in the job table.").add_metric(
            [], _num(table.get("stopped"))
        )
        self._overlay(f, node.get("overlay") or {}, node.get("contacts"))
        self._data_plane(f, node.get("data_plane") or {})
        self._api(f, node.get("api") or {})
        self._lake(f, node.get("lake"))
        held = node.get("checkpoints_held") or {}
        g = f.gauge(
            "elf_checkpoints_held", "Other agents' checkpoints held here (hot replicas).", ["kind"]
        )
        for kind in ("origins", "epochs", "bytes"):
            g.add_metric([kind], _num(held.get(kind)))

    def _overlay(self, f: _Families, ov: Mapping[str, Any], contacts: Any) -> None:
        f.gauge("elf_overlay_contacts", "Contacts in the routing table.").add_metric(
            [], _num(ov.get("contacts", contacts))
        )
        f.gauge("elf_overlay_suspected", "Contacts suspected now (missed probes).").add_metric(
            [], _num(ov.get("suspected"))
        )
        f.gauge(
            "elf_overlay_timeout_multiplier",
            "Factor late replies stretched probe and request timeouts by (1: as configured).",
        ).add_metric([], _num(ov.get("timeout_multiplier", 1)))
        events = ov.get("events") or {}
        f.counter("elf_overlay_nodes_failed", "Peers declared failed.").add_metric(
            [], _num(events.get("nodes_failed"))
        )
        ev = f.counter("elf_overlay_events", "Overlay membership and routing events.", ["kind"])
        for kind, n in sorted(events.items()):
            ev.add_metric([str(kind)], _num(n))
        drops = f.counter(
            "elf_overlay_datagrams_rejected", "Datagrams dropped, by reason.", ["reason"]
        )
        for reason, n in sorted((ov.get("drops") or {}).items()):
            drops.add_metric([str(reason)], _num(n))
        for key, name, doc in (
            ("sent_msgs", "elf_overlay_messages_sent", "Overlay messages sent, by type."),
            ("recv_msgs", "elf_overlay_messages_received", "Overlay messages received, by type."),
            ("sent_bytes", "elf_overlay_sent_bytes", "Overlay bytes sent, by message type."),
            ("recv_bytes", "elf_overlay_received_bytes", "Overlay bytes received, by type."),
        ):
            fam = f.counter(name, doc, ["kind"])
            for kind, n in sorted((ov.get(key) or {}).items()):
                fam.add_metric([str(kind)], _num(n))

    def _data_plane(self, f: _Families, dp: Mapping[str, Any]) -> None:
        f.counter(
            "elf_data_plane_requests", "Authenticated data-plane requests served."
        ).add_metric([], _num(dp.get("requests")))
        f.counter("elf_data_plane_received_bytes", "Data-plane request bytes received.").add_metric(
            [], _num(dp.get("bytes_in"))
        )
        res = f.counter("elf_data_plane_results", "Data-plane answers, by result.", ["kind"])
        for kind, n in sorted((dp.get("results") or {}).items()):
            res.add_metric([str(kind)], _num(n))
        rej = f.counter(
            "elf_data_plane_errors", "Data-plane requests refused, by reason.", ["reason"]
        )
        for reason, n in sorted((dp.get("rejected") or {}).items()):
            rej.add_metric([str(reason)], _num(n))
        self._connections(f, "elf_data_plane", dp.get("connections") or {})

    def _api(self, f: _Families, api: Mapping[str, Any]) -> None:
        rej = f.counter(
            "elf_api_errors", "User-API requests answered with an error, by reason.", ["reason"]
        )
        for reason, n in sorted((api.get("rejected") or {}).items()):
            rej.add_metric([str(reason)], _num(n))
        self._connections(f, "elf_api", api.get("connections") or {})

    @staticmethod
    def _connections(f: _Families, prefix: str, conns: Mapping[str, Any]) -> None:
        f.gauge(f"{prefix}_connections_open", "Open connections.").add_metric(
            [], _num(conns.get("open"))
        )
        f.counter(f"{prefix}_connections_opened", "Connections accepted.").add_metric(
            [], _num(conns.get("opened_total"))
        )
        closed = f.counter(
            f"{prefix}_connections_closed",
            "Connections closed by the guard, by reason.",
            ["reason"],
        )
        for reason, n in sorted((conns.get("closed") or {}).items()):
            closed.add_metric([str(reason)], _num(n))

    def _lake(self, f: _Families, lake: Mapping[str, Any] | None) -> None:
        lake = lake or {}
        for key, name, doc in (
            ("written", "elf_lake_written", "Epoch rollups written to the lake."),
            ("buffered", "elf_lake_buffered", "Rollups buffered on disk (lake unavailable)."),
            ("dropped_over_capacity", "elf_lake_refused", "Rollups refused: buffer full."),
            ("retried", "elf_lake_retried", "Buffered rollups written on a retry."),
            ("retry_failures", "elf_lake_retry_failures", "Retries of buffered rollups failed."),
            ("bad_rollups", "elf_lake_bad_rollups", "Rollups that could not be encoded/read."),
            ("fenced", "elf_lake_fenced", "Rollups fenced: the lake holds a newer term."),
        ):
            f.counter(name, doc).add_metric([], _num(lake.get(key)))
        f.gauge("elf_lake_pending", "Rollups buffered on disk now, awaiting the lake.").add_metric(
            [], _num(lake.get("pending"))
        )

    # ---- inputs ----------------------------------------------------------------------------

    def _inputs(self, f: _Families, inputs: Mapping[str, Mapping[str, Any]]) -> None:
        lines = f.counter("elf_ingest_lines", "Lines read or received, per input.", ["input"])
        nbytes = f.counter("elf_ingest_bytes", "Bytes read or received, per input.", ["input"])
        accepted = f.counter(
            "elf_ingest_records", "Records accepted into the jobs, per input.", ["input"]
        )
        rejected = f.counter(
            "elf_ingest_rejected_lines",
            "Lines rejected, per input and reason.",
            ["input", "reason"],
        )
        refused = f.counter(
            "elf_ingest_refused_lines",
            "Valid lines refused: the ingest queue was full.",
            ["input"],
        )
        skipped = f.counter(
            "elf_ingest_prefiltered_lines", "Lines skipped unparsed by the prefilter.", ["input"]
        )
        repaired = f.counter(
            "elf_ingest_bad_encoding_repaired",
            "Lines whose invalid UTF-8 was replaced.",
            ["input"],
        )
        queued = f.gauge("elf_ingest_queued", "Records waiting in the input.", ["input"])
        for name, st in sorted(inputs.items()):
            lines.add_metric([name], _num(st.get("lines")))
            nbytes.add_metric([name], _num(st.get("bytes")))
            accepted.add_metric([name], _num(st.get("records", st.get("accepted"))))
            for reason, n in sorted(((st.get("quarantine") or {}).get("by_reason") or {}).items()):
                rejected.add_metric([name, str(reason)], _num(n))
            refused.add_metric([name], _num(st.get("refused_lines")))
            skipped.add_metric([name], _num(st.get("prefiltered")))
            repaired.add_metric([name], _num(st.get("bad_encoding_repaired")))
            queued.add_metric([name], _num(st.get("queued", st.get("buffered"))))

    # ---- jobs ------------------------------------------------------------------------------

    def _jobs(self, f: _Families, jobs: Mapping[str, Mapping[str, Any]]) -> None:
        role = f.gauge(
            "elf_job_role", "1 when this agent has the role in the job.", ["job", "role"]
        )
        trees = f.gauge("elf_job_trees", "Trees of the job this agent is a member of.", ["job"])
        fanout = f.gauge(
            "elf_job_children", "Children of this agent over the job's trees (fan-out).", ["job"]
        )
        late = f.counter(
            "elf_records_late", "Records dropped: later than the allowed lateness.", ["job"]
        )
        future = f.counter(
            "elf_records_future", "Records dropped: further ahead than max_future.", ["job"]
        )
        late_in = f.counter(
            "elf_late_records",
            "Records read here later than the job's allowed_lateness, by input: not in any "
            "result, counted in its epoch's late field.",
            ["job", "input"],
        )
        rec_in = f.counter("elf_job_records", "Records the job's worker took in.", ["job"])
        closed = f.counter("elf_epochs_closed", "Epochs the worker closed here.", ["job"])
        sent = f.counter("elf_epochs_sent", "Epochs handed upward to a parent.", ["job"])
        merged = f.counter(
            "elf_epochs_merged", "Snapshots merged by the barrier, by origin.", ["job", "kind"]
        )
        emitted = f.counter(
            "elf_epochs_emitted",
            "Epochs the barrier completed here (sent up or stored).",
            ["job"],
        )
        committed = f.counter("elf_epochs_committed", "Commits multicast as master.", ["job"])
        upstream = f.counter(
            "elf_upstream_events", "The upward sender's counters, by name.", ["job", "kind"]
        )
        queued = f.gauge("elf_upstream_queued", "Epochs waiting for a parent's ack.", ["job"])
        barrier = f.counter(
            "elf_barrier_events", "The combining barrier's counters, by name.", ["job", "kind"]
        )
        events = f.counter(
            "elf_job_events", "The job runtime's counters, by name.", ["job", "kind"]
        )
        tentative_total = f.counter(
            "elf_tentative_epochs",
            "Epochs stored tentative (lacking an origin) as master.",
            ["job"],
        )
        tentative_now = f.gauge(
            "elf_tentative_epochs_now",
            "Tentative epochs among the newest 64 stored here as master.",
            ["job"],
        )
        leapt = f.counter(
            "elf_stragglers_leapt",
            "Tree members this agent's barriers leapt over (one per member and epoch).",
            ["job"],
        )
        previews = f.counter(
            "elf_tentative_previews",
            "Held-up epochs previewed tentative at their deadline as master.",
            ["job"],
        )
        coverage = f.gauge(
            "elf_epoch_coverage",
            "Rate-weighted share of the input records in the newest stored epoch (1 when final).",
            ["job"],
        )
        accuracy = f.gauge(
            "elf_epoch_accuracy",
            "Top-k jobs: estimated top-k accuracy of the newest stored epoch (1 when final).",
            ["job"],
        )
        repairs = f.counter("elf_repairs", "Repair by pull as master, by outcome.", ["job", "kind"])
        failovers = f.counter(
            "elf_failovers",
            "Standby take-overs as master (kind=failed: attempts that failed).",
            ["job", "kind"],
        )
        handovers = f.counter("elf_handovers", "Master hand-overs, by direction.", ["job", "kind"])
        lost = f.counter("elf_origins_lost", "Origins this master declared dead for good.", ["job"])
        checkpoints = f.counter(
            "elf_checkpoints",
            "Hot replicas sent as origin: epochs, bytes, failed requests, committed skipped.",
            ["job", "kind"],
        )
        origins = f.gauge("elf_origins_expected", "Origins this master expects.", ["job"])
        absent = f.gauge(
            "elf_origins_absent",
            "Origins this master counts absent: their epochs stay tentative until they return "
            "or are retired.",
            ["job"],
        )
        retired = f.gauge("elf_origins_retired", "Origins this master retired.", ["job"])
        partial = f.counter(
            "elf_partial_epochs",
            "Epochs that became partial for good as master (a retired origin's part missing).",
            ["job"],
        )
        cpu = f.gauge("elf_job_cpu_share", "Share of a core the job used over its window.", ["job"])
        throttled = f.gauge("elf_job_throttled", "1 while the job is over its CPU budget.", ["job"])
        backlog = f.gauge("elf_job_backlog_records", "Records waiting for the CPU budget.", ["job"])
        mem = f.gauge("elf_job_memory_bytes", "Resident bytes, by part.", ["job", "kind"])
        for name, st in sorted(jobs.items()):
            roles = set(st.get("roles") or ())
            for r in ROLES:
                role.add_metric([name, r], 1.0 if r in roles else 0.0)
            views = st.get("trees") or []
            trees.add_metric([name], float(len(views)))
            fanout.add_metric([name], float(sum(len(v.get("children") or ()) for v in views)))
            worker = st.get("worker") or {}
            late.add_metric([name], _num(worker.get("late_dropped")))
            future.add_metric([name], _num(worker.get("future_dropped")))
            for source, n in sorted(((worker.get("late") or {}).get("by_input") or {}).items()):
                late_in.add_metric([name, str(source)], _num(n))
            rec_in.add_metric([name], _num(worker.get("records_in")))
            closed.add_metric([name], _num(worker.get("epochs_emitted")))
            up = _summed((st.get("upstream") or {}).values())
            sent.add_metric([name], up.get("enqueued", 0.0))
            for kind, n in sorted(up.items()):
                upstream.add_metric([name, kind], n)
            queued.add_metric(
                [name],
                float(sum(len(u.get("queued") or ()) for u in (st.get("upstream") or {}).values())),
            )
            bar = _summed((st.get("barrier") or {}).values())
            merged.add_metric([name, "child"], bar.get("merged", 0.0))
            merged.add_metric([name, "local"], bar.get("merged_local", 0.0))
            emitted.add_metric([name], bar.get("emitted", 0.0))
            for kind, n in sorted(bar.items()):
                barrier.add_metric([name, kind], n)
            counters = {str(k): _num(v) for k, v in (st.get("counters") or {}).items()}
            committed.add_metric([name], counters.get("commits", 0.0))
            for kind, n in sorted(counters.items()):
                events.add_metric([name, _bounded_kind(kind)], n)
            tentative_total.add_metric([name], counters.get("tentative_epochs", 0.0))
            leapt.add_metric([name], _num((st.get("stragglers") or {}).get("leapt")))
            previews.add_metric([name], counters.get("tentative_previews", 0.0))
            now = st.get("results_now") or {}
            tentative_now.add_metric([name], _num(now.get("tentative")))
            if now.get("coverage") is not None:
                coverage.add_metric([name], _num(now.get("coverage")))
            if now.get("accuracy") is not None:
                accuracy.add_metric([name], _num(now.get("accuracy")))
            for kind, key in (
                ("requested", "repair_requests"),
                ("repaired", "repaired"),
                ("refused", "repair_refused"),
                ("unreachable", "repair_unreachable"),
            ):
                repairs.add_metric([name, kind], counters.get(key, 0.0))
            failovers.add_metric([name, "takeover"], counters.get("takeovers", 0.0))
            failovers.add_metric([name, "failed"], counters.get("takeover_failed", 0.0))
            for kind, key in (
                ("sent", "handovers_sent"),
                ("received", "handovers_received"),
                ("failed", "handover_failed"),
            ):
                handovers.add_metric([name, kind], counters.get(key, 0.0))
            lost.add_metric([name], counters.get("origins_lost", 0.0))
            ckpt = st.get("checkpoints") or {}
            for kind, key in (
                ("epochs", "sent_epochs"),
                ("bytes", "sent_bytes"),
                ("failed", "failures"),
                ("skipped_committed", "skipped_committed"),
            ):
                checkpoints.add_metric([name, kind], _num(ckpt.get(key)))
            origins.add_metric([name], _num(st.get("origins_expected")))
            membership = st.get("membership") or {}
            absent.add_metric([name], float(len(membership.get("absent") or ())))
            retired.add_metric([name], float(len(membership.get("retired") or ())))
            partial.add_metric([name], counters.get("partial_epochs", 0.0))
            cpu_st = st.get("cpu") or {}
            cpu.add_metric([name], _num(cpu_st.get("share_used")))
            throttled.add_metric([name], _num(cpu_st.get("throttled")))
            backlog.add_metric([name], _num(cpu_st.get("backlog_records")))
            memory = st.get("memory") or {}
            mem.add_metric([name, "worker"], _num(memory.get("worker_bytes")))
            mem.add_metric(
                [name, "results"], _num((memory.get("results") or {}).get("resident_bytes"))
            )
            mem.add_metric(
                [name, "results_spilled"], _num((memory.get("results") or {}).get("spill_bytes"))
            )
            mem.add_metric([name, "retained"], _num((st.get("retained") or {}).get("bytes")))


def _summed(dicts: Iterable[Mapping[str, Any]]) -> dict[str, float]:
    """The ``counters`` of several per-tree status dicts added up (trees are per-key ids: a
    label per tree would be unbounded in principle, so the job's trees are summed)."""
    out: dict[str, float] = {}
    for d in dicts:
        for k, v in (d.get("counters") or {}).items():
            out[str(k)] = out.get(str(k), 0.0) + _num(v)
    return out


class AgentMetrics:
    """One agent's metrics: the scrape-time collector, the latency histograms and the process
    collector. Its :meth:`epoch_stored` / :meth:`multicast_done` are the runtime's
    :class:`~agent.runtime.services.EpochObserver` (cheap, never raise).

    ``prometheus_client`` (about 13 MB mapped) is imported by the first scrape, not before:
    the histograms count into plain lists (:mod:`agent.runtime.ops.latency_histograms`) and
    the process collector reads ``/proc`` only when scraped anyway."""

    def __init__(self, source: MetricsSource, *, process: bool = True) -> None:
        self._source = source
        self._collector = AgentCollector(source)
        self._process = process
        self._process_collector: Any = None  # built by the first scrape that wants it
        self.rollup = LatencyHistogram(
            "elf_rollup_latency_seconds",
            "Seconds from an epoch's end to its result stored at this master (lateness included).",
            ["job"],
            ROLLUP_BUCKETS,
        )
        self.multicast = LatencyHistogram(
            "elf_multicast_latency_seconds",
            "Seconds from a master's multicast to the confirmation from its whole tree.",
            ["job", "kind"],
            MULTICAST_BUCKETS,
        )

    def epoch_stored(self, job: str, epoch_end: float, stored_at: float) -> None:
        self.rollup.observe((job,), max(0.0, stored_at - epoch_end))

    def multicast_done(self, job: str, kind: str, seconds: float) -> None:
        kind = kind if kind in MULTICAST_KINDS else "job"
        self.multicast.observe((job, kind), max(0.0, seconds))

    def _prune(self, running: Iterable[str]) -> None:
        """Remove the histogram series of jobs that no longer run here (bounded labels)."""
        live = set(running)
        for hist in (self.rollup, self.multicast):
            for labels in hist.series():
                if labels[0] not in live:
                    hist.remove(labels)

    def _live(self) -> list[Any]:
        """The collectors read at scrape time besides the agent's figures: the histograms and,
        if asked for, ``prometheus_client``'s process collector (its CPU, RSS, open files)."""
        live: list[Any] = [self.rollup, self.multicast]
        if self._process:
            if self._process_collector is None:
                from prometheus_client import ProcessCollector

                self._process_collector = ProcessCollector(registry=None)
            live.append(self._process_collector)
        return live

    def exposition(self) -> bytes:
        """The metrics in the Prometheus text format (``prometheus_client``), rendered in
        the calling thread."""
        from prometheus_client import generate_latest

        text = generate_latest(_Composite([self._collector, *self._live()]))  # type: ignore[arg-type]
        self._prune(self._collector.last_jobs)  # a stopped job's series: gone next scrape
        return text

    async def exposition_async(self) -> bytes:
        """:meth:`exposition` for the event loop: the source is read on the loop (its
        figures belong to it; about a millisecond), the families are built and formatted in
        a worker thread (``prometheus_client``'s formatting dominates: ~15 ms for 50 jobs,
        ``bench/ops_bench.py``), so the loop is never held for the whole scrape."""
        figures = self._collector.read()
        live = self._live()

        def render() -> bytes:
            from prometheus_client import generate_latest

            fixed = self._collector.families(*figures)
            return generate_latest(_Composite([_Fixed(fixed), *live]))  # type: ignore[arg-type]

        text = await asyncio.to_thread(render)
        self._prune(self._collector.last_jobs)
        return text


class _Fixed:
    """Families built beforehand, as a collector."""

    def __init__(self, families: list[Metric]) -> None:
        self._families = families

    def collect(self) -> Iterator[Metric]:
        return iter(self._families)


class _Composite:
    """Several collectors rendered as one registry (what ``generate_latest`` reads)."""

    def __init__(self, parts: list[Any]) -> None:
        self._parts = parts

    def collect(self) -> Iterator[Metric]:
        for part in self._parts:
            yield from part.collect()


__all__ = ["CONTENT_TYPE_PLAIN_0_0_4", "AgentCollector", "AgentMetrics", "MetricsSource"]
