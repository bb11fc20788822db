"""The chaos harness: a real multi-process cluster, files still being written, faults, and an
epoch-by-epoch check of every job's results against the lines written.

Contract.

* The workload is :class:`~agent.server.log_writer.LogWriter`'s (its own module): JSON lines
  appended to one file per agent, written on while the agent is down, and bursts.
* :class:`JobPlan` is a job under test: its spec and an independent reference (WordCount:
  the lowercase words split on spaces; QL ``SELECT page, count(*) AS hits ... GROUP BY
  page``: a Counter of ``page``) computed by :func:`reference` from the very files written,
  one Counter per epoch (the epoch of a line is ``floor(ts / epoch_seconds)``); kind
  ``"status"`` is QL ``SELECT status, sum(bytes) AS bytes, count(*) AS n ... GROUP BY
  status`` over access-log lines (its Counter keys are ``"<status>:bytes"`` and
  ``"<status>:n"``). :func:`read_records` reads JSON lines and nginx ``combined`` lines
  (:func:`agent.server.nginx_lab.access_record`) alike.
* ``ChaosCluster(..., input_format="nginx")`` has its agents read their files as access
  logs (a real nginx writes them: :mod:`agent.server.nginx_lab`); ``agent_args`` adds
  arguments to one agent's command line (e.g. its ``--node-id``: a tree shape by design).
* :class:`ChaosCluster` starts ``n`` agent processes (one agent each, so a kill takes one
  agent down), one shared lake, optionally each in its own network namespace
  (:mod:`agent.server.netns`); finds roles from the agents' ``/api/v1/status`` (master,
  inner node, leaf of a job's first tree); injects faults (:meth:`ChaosCluster.kill`,
  :meth:`~ChaosCluster.restart`, :meth:`~ChaosCluster.partition`) and records each in
  :attr:`ChaosCluster.events` with its wall time and the newest stored epoch. Fault timing
  follows the cluster's own progress (:meth:`ChaosCluster.wait_stored`), never a sleep.
* :func:`check` classifies every epoch of every job from its start epoch to the last epoch
  written: ``exact`` (final and equal to the reference), ``wrong`` (final and *not* equal:
  silently wrong, what the product promises never happens), ``tentative`` (flagged; it must
  name its lacking origins, else ``unnamed``), ``missing`` (no result). The lake, when set,
  is classified the same way from its newest file per epoch and tree.
  :func:`tracebacks` lists the agent logs that hold a Python traceback.

Bounds: the writer's rate and the run's length are the caller's; every wait has a timeout
and fails naming what it waited for; API calls time out after ``api_timeout`` seconds (a
partitioned agent answers nothing).
"""

from __future__ import annotations

import contextlib
import json
import math
import random
import re
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent.client import ApiClient, ApiError
from agent.jobs.ql_job import spec_from_query
from agent.server.cluster import LocalCluster
from agent.server.log_writer import LogWriter
from agent.server.netns import NetnsLab
from agent.server.nginx_lab import access_record

INPUT = "lines"
QL_QUERY = f"SELECT page, count(*) AS hits FROM {INPUT} GROUP BY page"
STATUS_QUERY = f"SELECT status, sum(bytes) AS bytes, count(*) AS n FROM {INPUT} GROUP BY status"

EXACT = "exact"
WRONG = "wrong"
TENTATIVE = "tentative"
UNNAMED = "unnamed"  # tentative without naming the origins it lacks: a broken promise
MISSING = "missing"
#: tentative, lacking only agents lost for good, and exact over the origins it covers (the
#: epochs a lost agent had open: what it read of them died with it)
PARTIAL = "partial"
#: tentative, but its rows are not the sum over the origins it says it covers
MISDECLARED = "misdeclared"
VERDICTS = (EXACT, WRONG, TENTATIVE, UNNAMED, MISSING, PARTIAL, MISDECLARED)


# ---- the workload ----------------------------------------------------------------------------


@dataclass(frozen=True)
class JobPlan:
    """A job under test: ``kind`` is ``"wordcount"``, ``"ql"`` or ``"status"`` (QL over
    access logs, :data:`STATUS_QUERY`)."""

    name: str
    kind: str
    start_epoch: int
    epoch_seconds: float = 1.0
    allowed_lateness: float = 1.0
    top_k: int | None = None  # WordCount's k most frequent words only
    window: int | None = None  # sliding windows of this many epochs (slide 1): mode "window"
    settings: tuple[tuple[str, Any], ...] = ()  # more spec fields (e.g. straggler_epochs)

    def spec(self) -> dict[str, Any]:
        common = {
            "name": self.name,
            "creator": "chaos",
            "inputs": [INPUT],
            "epoch_seconds": self.epoch_seconds,
            "allowed_lateness": self.allowed_lateness,
            "start_epoch": self.start_epoch,
            **dict(self.settings),
        }
        if self.top_k is not None:
            common["top_k"] = self.top_k
        if self.window is not None:
            common.update(mode="window", window_size=self.window, window_slide=1)
        if self.kind == "wordcount":
            return {**common, "job_class": "wordcount"}
        if self.kind == "ql":
            return {**common, "job_class": "ql", "params": {"query": QL_QUERY}}
        if self.kind == "status":
            # a composite aggregate (sum and count): the spec fields the query implies
            rest = {k: v for k, v in common.items() if k not in ("name", "creator")}
            return spec_from_query(self.name, "chaos", STATUS_QUERY, **rest)
        raise ValueError(f"unknown job kind {self.kind!r}")

    def keys(self, record: dict[str, Any]) -> Iterable[str] | Mapping[str, int]:
        """The reference's keys of one written record (independent of the job's code); a
        mapping adds its values (``Counter.update``)."""
        if self.kind == "wordcount":
            return str(record["line"]).lower().split()
        if self.kind == "status":
            status = record["status"]
            return {f"{status}:bytes": int(record["bytes"]), f"{status}:n": 1}
        return [str(record["page"])]

    def counter(self, rows: list[Any]) -> Counter[str]:
        """A result's rows as a Counter (``[key, count]`` pairs or QL's named rows)."""
        if self.kind == "wordcount":
            return Counter({str(k): int(v) for k, v in rows})
        if self.kind == "status":
            out: Counter[str] = Counter()
            for r in rows:
                out.update(
                    {f"{r['status']}:bytes": int(r["bytes"]), f"{r['status']}:n": int(r["n"])}
                )
            return out
        return Counter({str(r["page"]): int(r["hits"]) for r in rows})

    def epoch_of(self, ts: float) -> int:
        return math.floor(ts / self.epoch_seconds)

    def matches(self, got: Counter[str], want: Counter[str]) -> bool:
        """``got`` is the job's right answer for ``want``: equal, or for a top-k job, a valid
        top k of it (ties at the k-th count may be broken either way)."""
        if self.top_k is None:
            return got == want
        if len(got) != min(self.top_k, len(want)) or any(want[k] != v for k, v in got.items()):
            return False
        rest = [v for k, v in want.items() if k not in got]
        return not rest or min(got.values(), default=0) >= max(rest)


def read_records(paths: Iterable[Path]) -> list[dict[str, Any]]:
    """Every complete line of ``paths`` (a torn last line is not a record): a JSON object,
    or an nginx ``combined`` line read as ``{"ts", "status", "bytes"}``."""
    out = []
    for path in paths:
        with path.open() as f:
            for line in f:
                if not line.endswith("\n"):
                    continue
                if line.startswith("{"):
                    out.append(json.loads(line))
                elif (record := access_record(line)) is not None:
                    out.append(record)
                else:
                    raise ValueError(f"{path}: neither JSON nor an access-log line: {line!r}")
    return out


def reference(plan: JobPlan, records: Iterable[dict[str, Any]]) -> dict[int, Counter[str]]:
    """epoch → Counter of the plan's keys over ``records`` from its start epoch on (for a
    windowed plan: over the window ending at that epoch)."""
    out: dict[int, Counter[str]] = {}
    for r in records:
        epoch = plan.epoch_of(float(r["ts"]))
        if epoch >= plan.start_epoch:
            out.setdefault(epoch, Counter()).update(plan.keys(r))
    if plan.window is None or not out:
        return out
    windows: dict[int, Counter[str]] = {}
    for end in range(min(out), max(out) + plan.window):
        total = sum(
            (out.get(e, Counter()) for e in range(end - plan.window + 1, end + 1)), Counter()
        )
        if total:
            windows[end] = total
    return windows


# ---- the cluster -----------------------------------------------------------------------------


@dataclass
class FaultEvent:
    """One injected fault: what, on which agent process, when, and the newest epoch the
    job's master had stored just before."""

    action: str
    index: int
    role: str
    at: float
    stored_before: int | None
    detail: dict[str, Any] = field(default_factory=dict)


class ChaosCluster:
    """``n`` agent processes tailing files under ``workdir`` (module contract)."""

    def __init__(
        self,
        n: int,
        workdir: Path,
        *,
        netns: NetnsLab | None = None,
        lake: bool = True,
        api_timeout: float = 5.0,
        log_level: str = "WARNING",
        extra_args: list[str] | None = None,
        domains: list[str] | None = None,
        input_format: str = "json",
        agent_args: dict[int, list[str]] | None = None,
    ) -> None:
        self.n = n
        #: each agent's failure domain (``--domain``; None: all "default")
        self.domains = domains
        self.workdir = Path(workdir)
        suffix = "jsonl" if input_format == "json" else "log"
        self.paths = [self.workdir / f"access-{i}.{suffix}" for i in range(n)]
        self.netns = netns
        self.api_timeout = api_timeout
        self.lake_dir = self.workdir / "lake" if lake else None
        args = ["--log-level", log_level, "--lake", str(self.lake_dir) if lake else "off"]
        per_agent = {i: ["--domain", d] for i, d in enumerate(domains or [])}
        for i, more in (agent_args or {}).items():  # e.g. --node-id
            per_agent[i] = [*per_agent.get(i, []), *more]
        self.cluster = LocalCluster(
            n,
            self.workdir,
            inputs={i: {f"{INPUT}:{input_format}": str(p)} for i, p in enumerate(self.paths)},
            extra_args=[*args, *(extra_args or [])],
            wrap=netns.wrap if netns is not None else None,
            hosts=netns.hosts if netns is not None else None,
            agent_args=per_agent,
        )
        self.events: list[FaultEvent] = []
        self.down: set[int] = set()  # killed and not restarted, or partitioned
        self.lost: set[int] = set()  # killed for good (never restarted)
        #: agent index -> the first epoch it no longer feeds: a graceful leave's declared end
        #: (the job's master says it); the reference leaves its lines out from there on
        self.left: dict[int, int] = {}
        self.stalled: set[int] = set()  # SIGSTOPped
        self._ids: dict[int, str] = {}

    # -- lifecycle --

    def start(self, timeout: float = 120.0) -> ChaosCluster:
        self.workdir.mkdir(parents=True, exist_ok=True)
        for p in self.paths:
            p.touch()
        self.cluster.start(timeout=timeout)
        self.cluster.wait_settled(timeout)
        return self

    def stop(self) -> None:
        for i in sorted(self.stalled):
            if self.cluster.alive(i):
                self.cluster.signal(i, signal.SIGCONT)
        for i in sorted(self.down):
            if self.netns is not None and self.cluster.alive(i):
                self.netns.link(i, True)
        self.cluster.stop()

    # -- access --

    def client(self, index: int) -> ApiClient:
        return ApiClient(self.cluster.procs[index].api_url, self.cluster.token, self.api_timeout)

    def live(self) -> list[int]:
        return [
            i
            for i in range(self.n)
            if i not in self.down and i not in self.stalled and self.cluster.alive(i)
        ]

    def node_ids(self) -> dict[int, str]:
        """index → the agent's overlay id (hex, as results name lacking origins); asked
        once per agent while it is up."""
        for i in self.live():
            if i not in self._ids:
                with contextlib.suppress(ApiError):
                    self._ids[i] = format(int(self.client(i).status()["node_id"], 16), "x")
        return dict(self._ids)

    def any_client(self) -> ApiClient:
        return self.client(self.live()[0])

    def submit(self, plan: JobPlan) -> dict[str, Any]:
        return self.any_client().submit(plan.spec())

    def roles(self, job: str) -> dict[int, str]:
        """index → ``master``, ``inner`` or ``leaf`` in the job's first tree, for the live
        agents that answer (an agent without the job yet is left out)."""
        out: dict[int, str] = {}
        for i in self.live():
            try:
                st = self.client(i).status()["jobs"].get(job)
            except ApiError:
                continue
            if not st or not st.get("trees"):
                continue
            first = st["tree_ids"][0]
            view = next((t for t in st["trees"] if t["tree_id"] == first), st["trees"][0])
            if "master" in st.get("roles", ()) or view.get("is_root"):
                out[i] = "master"
            elif view.get("children"):
                out[i] = "inner"
            else:
                out[i] = "leaf"
        return out

    def pick(self, job: str, role: str, rng: random.Random | None = None) -> int:
        """A live agent process in ``role`` for ``job`` (raises LookupError if none)."""
        found = sorted(i for i, r in self.roles(job).items() if r == role)
        if not found:
            raise LookupError(f"no live {role} of job {job!r}")
        return (rng or random.Random(0)).choice(found)

    def stored(self, job: str) -> int | None:
        """The newest epoch the job's master(s) stored (None: none yet / unreachable)."""
        for i in self.live():
            try:
                return int(self.client(i).results(job)["epoch"])
            except ApiError:
                continue
        return None

    def wait_stored(self, job: str, epoch: int, timeout: float = 60.0) -> float:
        """Wait until the job's master stored ``epoch`` or later; returns the wall time."""
        wait_until(
            lambda: (s := self.stored(job)) is not None and s >= epoch,
            timeout,
            f"job {job} to store epoch {epoch}",
        )
        return time.time()

    # -- faults --

    def _event(self, action: str, index: int, job: str, role: str, **detail: Any) -> FaultEvent:
        # asked of one agent with a short timeout: with a master stalled, a results query
        # waits for it, and a fault must not wait (what a stall keeps from going up would
        # go up another way meanwhile)
        stored = None
        if job and (live := self.live()):
            client = ApiClient(self.cluster.procs[live[0]].api_url, self.cluster.token, 0.5)
            with contextlib.suppress(ApiError, KeyError, TypeError, ValueError):
                stored = int(client.results(job)["epoch"])
        ev = FaultEvent(action, index, role, time.time(), stored, detail)
        self.events.append(ev)
        return ev

    def terminate(
        self, index: int, writer: LogWriter | None, job: str = "", role: str = ""
    ) -> FaultEvent:
        """A graceful stop for good (a host shut down): its file is no longer written
        (``writer``), then SIGTERM, and the process's exit is awaited (its drain declares
        its end to the masters). Never restarted."""
        self.node_ids()
        if writer is not None:
            writer.silence(index)
        ev = self._event("terminate", index, job, role)
        ev.detail["exit"] = self.cluster.terminate(index)
        self.down.add(index)
        return ev

    def kill(self, index: int, job: str = "", role: str = "") -> FaultEvent:
        """kill -9 of agent process ``index``."""
        ev = self._event("kill", index, job, role)
        ev.at = time.time()
        self.cluster.kill(index)
        self.down.add(index)
        return ev

    def lose(
        self, index: int, writer: LogWriter | None, job: str = "", role: str = ""
    ) -> FaultEvent:
        """kill -9 of agent process ``index`` for good: its host is gone, so its file is no
        longer written either (``writer``), and it is never restarted."""
        self.node_ids()  # its id, while it can still answer
        ev = self.kill(index, job, role)
        ev.action = "lose"
        if writer is not None:
            writer.silence(index)
        self.lost.add(index)
        return ev

    def stall(self, index: int, job: str = "", role: str = "") -> FaultEvent:
        """SIGSTOP agent process ``index``: alive to the kernel (its sockets accept
        connections), silent to everyone (a GC pause, a host under load)."""
        self.node_ids()
        ev = self._event("stall", index, job, role)
        ev.at = time.time()
        self.cluster.signal(index, signal.SIGSTOP)
        self.stalled.add(index)
        return ev

    def resume(self, index: int, job: str = "") -> FaultEvent:
        """SIGCONT of a stalled agent process."""
        self.cluster.signal(index, signal.SIGCONT)
        self.stalled.discard(index)
        return self._event("resume", index, job, "")

    def throttle(
        self, index: int, share: float, seconds: float, job: str = "", role: str = ""
    ) -> threading.Thread:
        """A slow agent: for ``seconds``, agent process ``index`` runs only ``share`` of each
        100 ms (SIGSTOP / SIGCONT duty cycle, as ``cpulimit`` caps a process). Returns the
        thread doing it (join it to wait for the end; the process is left running)."""
        if not 0.0 < share < 1.0:
            raise ValueError("share must be in (0, 1)")
        self._event("throttle", index, job, role, share=share, seconds=seconds)
        period = 0.1

        def cycle() -> None:
            end = time.monotonic() + seconds
            try:
                while time.monotonic() < end and self.cluster.alive(index):
                    self.cluster.signal(index, signal.SIGCONT)
                    time.sleep(share * period)  # the duty cycle itself, not a wait on state
                    self.cluster.signal(index, signal.SIGSTOP)
                    time.sleep((1 - share) * period)
            finally:
                if self.cluster.alive(index):
                    self.cluster.signal(index, signal.SIGCONT)
                self._event("unthrottle", index, job, "")

        thread = threading.Thread(target=cycle, name=f"throttle-{index}", daemon=True)
        thread.start()
        return thread

    def restart(self, index: int, job: str = "", timeout: float = 60.0) -> FaultEvent:
        """The killed process's command again, same data directory and ports."""
        self.cluster.restart(index, timeout=timeout)
        self.down.discard(index)
        return self._event("restart", index, job, "")

    def partition(self, index: int, job: str = "", role: str = "") -> FaultEvent:
        """Take agent ``index``'s link down (needs a :class:`NetnsLab`)."""
        if self.netns is None:
            raise RuntimeError("partitions need network namespaces (NetnsLab)")
        ev = self._event("partition", index, job, role)
        self.netns.link(index, False)
        self.down.add(index)
        return ev

    def heal(self, index: int, job: str = "") -> FaultEvent:
        """Bring agent ``index``'s link up again."""
        if self.netns is None:
            raise RuntimeError("partitions need network namespaces (NetnsLab)")
        self.netns.link(index, True)
        self.down.discard(index)
        return self._event("heal", index, job, "")

    # -- evidence --

    def pids(self) -> list[int]:
        return [p.process.pid for p in self.cluster.procs if p.process.poll() is None]

    def timings(self, job: str) -> list[dict[str, Any]]:
        out = []
        for i in self.live():
            try:
                out.append(self.client(i).timings(job))
            except ApiError:
                continue
        return out

    def logs(self) -> dict[int, Path]:
        return {i: self.workdir / f"agent-{i}" / "stderr.log" for i in range(self.n)}


def wait_until(predicate: Callable[[], Any], timeout: float, what: str, step: float = 0.1) -> Any:
    """Poll another process's state until ``predicate`` is truthy (an API error counts as
    "not yet"); raise ``TimeoutError`` naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        try:
            last = predicate()
        except ApiError as exc:
            last = exc
        else:
            if last:
                return last
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout}s waiting for {what}; last: {last!r}")
        time.sleep(step)  # the poll interval of a cross-process condition


# ---- checking --------------------------------------------------------------------------------


@dataclass
class EpochCheck:
    """One epoch of one job, as the API (or the lake) answered it."""

    epoch: int
    verdict: str
    want: int  # records' keys counted by the reference
    got: int | None = None
    lacking: list[str] = field(default_factory=list)
    coverage: float | None = None
    version: int | None = None
    diff: dict[str, Any] | None = None  # for a wrong epoch: missing and extra keys
    why: str | None = None  # for a missing epoch: the API's refusal


def classify(
    plan: JobPlan,
    epoch: int,
    want: Counter[str],
    res: dict[str, Any] | str | None,
    declared: Callable[[list[str]], Counter[str] | None] | None = None,
    lost: frozenset[str] = frozenset(),
) -> EpochCheck:
    """One epoch's verdict (module contract) from a results-API answer (a text or None: no
    result, and why). With ``declared`` (lacking ids → the reference over the other agents,
    None when it cannot be known) a tentative result is also checked against the origins it
    says it covers: :data:`PARTIAL` if it lacks only agents in ``lost``,
    :data:`MISDECLARED` if it is not their sum."""
    total = sum(want.values())
    if not isinstance(res, dict):
        return EpochCheck(epoch, MISSING, total, why=res or "no result")
    got = plan.counter(res.get("rows") or [])
    lacking = list(res.get("lacking") or ())
    check = EpochCheck(
        epoch,
        EXACT,
        total,
        sum(got.values()),
        lacking,
        res.get("coverage"),
        res.get("version"),
    )
    # partial (lacking only retired origins) is flagged like tentative: never exact
    if res.get("tentative") or res.get("partial") or not res.get("complete", True):
        check.verdict = TENTATIVE if lacking or not res.get("complete", True) else UNNAMED
        covered = declared(lacking) if declared is not None and lacking else None
        if check.verdict == TENTATIVE and covered is not None:
            if not plan.matches(got, covered):
                check.verdict = MISDECLARED
                check.diff = {"missing": dict(covered - got), "extra": dict(got - covered)}
            elif set(lacking) <= lost:
                check.verdict = PARTIAL
    elif not plan.matches(got, want):
        check.verdict = WRONG
        check.diff = {"missing": dict(want - got), "extra": dict(got - want)}
    return check


def fetch_result(chaos: ChaosCluster, job: str, epoch: int) -> dict[str, Any] | str:
    """The results API's answer for (job, epoch) from any live agent, or why there is none
    (the refusal, e.g. ``"404: ..."``, or the last error when no agent answered)."""
    why = "no live agent"
    for i in chaos.live():
        try:
            return chaos.client(i).results(job, epoch)
        except ApiError as exc:
            why = str(exc)
            if exc.status in (404, 410):
                return why
            continue  # 503 / unreachable: ask another agent
    return why


def lake_results(lake_dir: Path, plan: JobPlan) -> dict[int, dict[str, Any]]:
    """epoch → a results-API-like answer from the lake: the highest version of each (epoch,
    tree), its rows and its ``elf.result`` footer (tentative, lacking, coverage, version:
    known even for an epoch without rows); tentative while a tree's file is missing."""
    from spark_sink.lake import Lake, complete_epochs, read_epoch

    lake = Lake(str(lake_dir))
    files = lake.files(plan.name)
    complete = complete_epochs(files)
    out: dict[int, dict[str, Any]] = {}
    for f in files:
        table, meta = read_epoch(lake, f)
        entry = out.setdefault(
            f.epoch,
            {"rows": [], "tentative": False, "lacking": [], "complete": complete[f.epoch]},
        )
        entry["tentative"] = entry["tentative"] or bool(meta.get("tentative"))
        entry["partial"] = entry.get("partial", False) or bool(meta.get("partial"))
        entry["lacking"] += list(meta.get("lacking") or ())
        entry["coverage"] = min(entry.get("coverage", 1.0), float(meta.get("coverage", 1.0)))
        entry["version"] = max(entry.get("version", 1), int(meta.get("version", 1)))
        for row in table.to_pylist():
            key = json.loads(row["key_json"])
            if plan.kind == "wordcount":
                entry["rows"].append([key, json.loads(row["value_json"])])
            else:
                entry["rows"].append(key)
    return out


@dataclass
class JobReport:
    """Every checked epoch of one job."""

    job: str
    epochs: list[EpochCheck]
    lake: list[EpochCheck] | None = None

    def counts(self, checks: list[EpochCheck] | None = None) -> dict[str, int]:
        c = Counter(e.verdict for e in (self.epochs if checks is None else checks))
        return {v: c.get(v, 0) for v in VERDICTS}

    def violations(self) -> list[EpochCheck]:
        """Epochs that break "exact or flagged": final and wrong, tentative unnamed, or
        tentative and not what it says it covers."""
        return [e for e in self.epochs if e.verdict in (WRONG, UNNAMED, MISDECLARED)]

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "job": self.job,
            "epochs": len(self.epochs),
            "first": self.epochs[0].epoch if self.epochs else None,
            "last": self.epochs[-1].epoch if self.epochs else None,
            "api": self.counts(),
            "violations": [vars(e) for e in self.violations()],
            "not_exact": [
                {
                    "epoch": e.epoch,
                    "verdict": e.verdict,
                    "want": e.want,
                    "got": e.got,
                    "lacking": len(e.lacking),
                    **({"why": e.why[:120]} if e.why else {}),
                }
                for e in self.epochs
                if e.verdict != EXACT
            ][:40],
        }
        if self.lake is not None:
            out["lake"] = self.counts(self.lake)
            out["lake_violations"] = [
                vars(e) for e in self.lake if e.verdict in (WRONG, UNNAMED, MISDECLARED)
            ][:20]
        return out


def expected_epochs(plan: JobPlan, last_ts: float) -> range:
    """The epochs to check: from the job's start to the last epoch that is closed by the
    lines written (the epoch of the newest line minus one: its own may be cut short)."""
    last = plan.epoch_of(last_ts) - 1
    return range(plan.start_epoch, last + 1)


def check(
    chaos: ChaosCluster,
    plans: list[JobPlan],
    *,
    settle_timeout: float = 30.0,
) -> list[JobReport]:
    """Compare every epoch of every job with the reference (module contract). Call after the
    writer stopped: waits up to ``settle_timeout`` for every epoch to be final and exact (the
    quiescence the results converge to), then classifies what is there."""
    records = read_records(chaos.paths)
    last_ts = max(float(r["ts"]) for r in records)
    per_file = [read_records([p]) for p in chaos.paths]
    ids = chaos.node_ids()
    lost = frozenset(ids[i] for i in chaos.lost if i in ids)
    reports = []
    for plan in plans:
        by_agent = [reference(plan, recs) for recs in per_file]
        want = reference(plan, records)
        for i, first_out in chaos.left.items():  # a declared end: final without it after
            for e, share in by_agent[i].items():
                if e >= first_out:
                    want[e] = want.get(e, Counter()) - share
        epochs = expected_epochs(plan, last_ts)

        def verdict(
            e: int, res: Any, plan: JobPlan = plan, want: Any = want, by: Any = by_agent
        ) -> EpochCheck:
            def declared(lacking: list[str]) -> Counter[str] | None:
                if "?" in lacking or len(ids) < chaos.n:
                    return None
                parts = (by[i].get(e, Counter()) for i in ids if ids[i] not in lacking)
                return sum(parts, Counter())

            return classify(plan, e, want.get(e, Counter()), res, declared, lost)

        def settled(plan: JobPlan = plan, epochs: range = epochs) -> bool:
            return all(
                verdict(e, fetch_result(chaos, plan.name, e)).verdict in (EXACT, PARTIAL)
                for e in epochs
            )

        # classified below as they are after the timeout: the report says what did not settle
        with contextlib.suppress(TimeoutError):
            wait_until(settled, settle_timeout, f"job {plan.name}'s epochs to settle", 1.0)
        checks = [verdict(e, fetch_result(chaos, plan.name, e)) for e in epochs]
        report = JobReport(plan.name, checks)
        if chaos.lake_dir is not None and chaos.lake_dir.exists():
            lake = lake_results(chaos.lake_dir, plan)
            report.lake = [verdict(e, lake.get(e)) for e in epochs]
        reports.append(report)
    return reports


_TRACEBACK = re.compile(r"^Traceback \(most recent call last\):", re.M)


def tracebacks(chaos: ChaosCluster) -> dict[int, str]:
    """index → the first traceback (and 1,500 characters after it) in that agent's log."""
    out = {}
    for i, path in chaos.logs().items():
        if not path.exists():
            continue
        text = path.read_text(errors="replace")
        if m := _TRACEBACK.search(text):
            out[i] = text[max(0, m.start() - 300) : m.start() + 1500]
    return out
