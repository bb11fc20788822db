"""VersionWatch: every version a reader could see during a chaos run, from the lake and the
results API, with when it was first and last seen (issue "Final means final").

Contract. The end-of-run check (:func:`agent.server.chaos.check`) judges where results
converged; a reader reads *during* the run. A :class:`VersionWatch` runs two threads,
started before the faults and stopped after the end-of-run check (two, so that a slow or
stalled agent never holds up the lake's listing); every ``interval`` seconds (default 0.5),
one of them:

* **lists the lake(s)** (``<lake>/job=*/date=*/hour=*/epoch-<e>-tree-<i>-of-<m>[-t<term>]
  [-v<k>].parquet``) and reads each file it has not read yet - and again when its mtime or
  size changed (a version rewritten in place) - recording its job, tree, epoch, ``term`` (the
  ``-t<term>`` name segment, else a ``term`` footer key or column, else 0), version, flags
  (``tentative``, ``partial`` - absent: false -, ``coverage``, ``lacking``) and rows (as the
  results API gives them). A version is *visible* to a reader of the current result (the
  highest (term, version) of its (epoch, tree)) from the first listing that shows it to the
  last listing where it is still the highest;
* and the other **polls the results API** the way ``elf results`` or a dashboard would,
  through the agents ``clients()`` returns (the harness gives the live ones: a dead, stalled
  or partitioned agent yields nothing), one agent per tick, rotating: per watched job, the
  newest epoch, then the last ``recent`` epochs (2), up to ``unsettled`` epochs (2) whose
  last answer was not final (round robin, oldest first) and one final epoch (round robin).
  Every distinct answer (job, epoch, version, term, flags, rows) is kept once with its
  first and last seen time.

:meth:`VersionWatch.seen` returns them as :class:`agent.server.version_check.Seen`;
:func:`agent.server.version_check.figures` judges them. :func:`chaos_watch` and
:func:`chaos_figures` wire it to a :class:`~agent.server.chaos.ChaosCluster`.

Bounds: each API call times out after 1 s; an API tick spends at most ``budget`` seconds
(1) over all jobs, rotating which job goes first, and gives up on an agent that does not
answer; lake
files are read once per (path, mtime, size); nothing else is loaded. The work done is counted
(:meth:`VersionWatch.stats`) so a test can show the watch's own cost.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import threading
import time
from collections.abc import Callable, Collection, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.parquet as pq

from agent.client import ApiClient, ApiError
from agent.server.chaos import ChaosCluster, JobPlan, JobReport
from agent.server.cluster import LocalCluster
from agent.server.version_check import (
    Fault,
    OriginReference,
    Seen,
    figures,
    origin_name,
    rows_key,
)

NAME_RE = re.compile(r"^epoch-(-?\d+)-tree-(\d+)-of-(\d+)(.*)\.parquet$")
TERM_RE = re.compile(r"-t(\d+)(?=-|$)")
VERSION_RE = re.compile(r"-v(\d+)(?=-|$)")


class VersionWatch:
    """Records every version the lake and the results API show (module contract)."""

    def __init__(
        self,
        clients: Callable[[], Sequence[ApiClient]],
        lakes: Sequence[Path] = (),
        jobs: dict[str, int] | None = None,
        *,
        interval: float = 0.5,
        recent: int = 2,
        unsettled: int = 2,
        budget: float = 1.0,
    ) -> None:
        self.clients = clients
        self.lakes = [Path(p) for p in lakes]
        self.interval = interval
        self.recent = recent
        self.unsettled = unsettled
        self.budget = budget
        self._jobs: dict[str, int] = dict(jobs or {})
        self._seen: dict[tuple[Any, ...], Seen] = {}
        self._read: dict[str, tuple[int, int]] = {}  # path → (mtime_ns, size) read
        self._file_keys: dict[str, tuple[Any, ...]] = {}  # path → its version's key
        self._final: dict[str, dict[int, bool]] = {}  # job → epoch → last answer final
        self._cursor: dict[tuple[str, str], int] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        # two threads: a slow or stalled agent must not hold up the lake's listing
        self._threads = [
            threading.Thread(target=self._run, args=(kind,), name=f"version-watch-{kind}",
                             daemon=True)
            for kind in ("lake", "api")
        ]  # fmt: skip
        self._stats: dict[str, Any] = {"ticks": 0, "api_calls": 0, "api_errors": 0,
                                       "files_read": 0, "read_errors": 0}  # fmt: skip
        for kind in ("lake", "api"):
            self._stats.update({f"{kind}_ticks": 0, f"{kind}_busy_s": 0.0,
                                f"{kind}_max_tick_s": 0.0})  # fmt: skip

    # ---- lifecycle ---------------------------------------------------------------------

    def watch(self, job: str, first_epoch: int) -> None:
        """Also poll ``job``'s results from ``first_epoch`` on (a job submitted mid-run)."""
        with self._lock:
            self._jobs.setdefault(job, first_epoch)

    def start(self) -> VersionWatch:
        for thread in self._threads:
            thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            if thread.is_alive():
                thread.join()

    def seen(self) -> list[Seen]:
        with self._lock:
            return sorted(self._seen.values(), key=lambda v: (v.source, v.job, v.epoch,
                                                             v.first_seen))  # fmt: skip

    def stats(self) -> dict[str, Any]:
        with self._lock:
            out = dict(self._stats)
            out["versions"] = len(self._seen)
        for k, v in out.items():
            if isinstance(v, float):
                out[k] = round(v, 3)
        return out

    def _run(self, kind: str) -> None:
        step = self.lake_tick if kind == "lake" else self.api_tick
        while True:
            t0 = time.monotonic()
            try:
                step()
            except Exception as exc:  # the watch must outlive anything a run throws at it
                self._stats[f"{kind}_error"] = f"{type(exc).__name__}: {exc}"[:300]
            spent = time.monotonic() - t0
            self._stats[f"{kind}_ticks"] += 1
            self._stats[f"{kind}_busy_s"] += spent
            self._stats[f"{kind}_max_tick_s"] = max(self._stats[f"{kind}_max_tick_s"], spent)
            if self._stop.wait(max(0.05, self.interval - spent)):
                break

    def tick(self) -> None:
        """One round of each: the lake(s), then the results API of every watched job."""
        self.lake_tick()
        self.api_tick()

    def lake_tick(self) -> None:
        for lake in self.lakes:
            self._poll_lake(lake)

    def api_tick(self) -> None:
        """Every watched job's results through one agent (rotating), within ``budget``."""
        self._stats["ticks"] += 1
        with self._lock:
            jobs = list(self._jobs.items())
        clients = list(self.clients())
        if not clients:
            return
        shift = self._stats["ticks"] % len(clients)
        clients = clients[shift:] + clients[:shift]
        deadline = time.monotonic() + self.budget
        turn = self._stats["ticks"] % len(jobs) if jobs else 0
        for job, first in jobs[turn:] + jobs[:turn]:  # a slow tick must not starve the last job
            self._poll_api(clients, job, first, deadline)

    # ---- the lake ----------------------------------------------------------------------

    def _poll_lake(self, lake: Path) -> None:
        now = time.time()
        current: dict[tuple[Any, ...], tuple[int, int, tuple[Any, ...]]] = {}
        for path, job, epoch, tree, trees, name_term, name_version in _lake_files(lake):
            try:
                st = os.stat(path)
            except OSError:
                continue
            stamp = (st.st_mtime_ns, st.st_size)
            key = self._file_keys.get(path) if self._read.get(path) == stamp else None
            if key is None:
                key = self._read_file(lake, path, job, epoch, tree, trees, name_term,
                                      name_version, now)  # fmt: skip
                if key is None:
                    continue
                self._read[path] = stamp
                self._file_keys[path] = key
            seen = self._seen[key]
            slot = (job, tree, epoch)
            rank = (seen.term, seen.version)
            if slot not in current or rank > current[slot][:2]:
                current[slot] = (*rank, key)
        with self._lock:
            for _, _, key in current.values():
                self._seen[key].last_seen = now

    def _read_file(
        self, lake: Path, path: str, job: str, epoch: int, tree: int, trees: int,
        name_term: int | None, name_version: int | None, now: float,
    ) -> tuple[Any, ...] | None:  # fmt: skip
        try:
            table = pq.read_table(path)
        except (OSError, pa.ArrowException):
            self._stats["read_errors"] += 1
            return None
        self._stats["files_read"] += 1
        meta: dict[str, Any] = {}
        raw = (table.schema.metadata or {}).get(b"elf.result")
        if raw:
            with contextlib.suppress(ValueError):
                meta = json.loads(raw)
        first = table.slice(0, 1).to_pylist()
        row0 = first[0] if first else {}

        def flag(name: str, default: Any) -> Any:
            if name in meta:
                return meta[name]
            return row0.get(name, default) if row0.get(name) is not None else default

        rows = [
            json.loads(k) if v in (None, "null") else [json.loads(k), json.loads(v)]
            for k, v in zip(
                table.column("key_json").to_pylist() if "key_json" in table.column_names else [],
                table.column("value_json").to_pylist()
                if "value_json" in table.column_names
                else [],
                strict=False,
            )
        ]
        version = name_version if name_version is not None else int(flag("version", 1))
        term = name_term if name_term is not None else int(flag("term", 0) or 0)
        coverage = flag("coverage", None)
        seen = Seen(
            source="lake",
            job=job,
            epoch=epoch,
            version=version,
            term=term,
            tentative=bool(flag("tentative", False)),
            partial=bool(flag("partial", False)),
            complete=True,
            coverage=None if coverage is None else float(coverage),
            lacking=tuple(str(x) for x in (flag("lacking", []) or ())),
            rows=rows,
            rows_key=rows_key(rows),
            first_seen=now,
            last_seen=now,
            where=str(lake),
            tree=tree,
            trees=trees,
            path=path,
        )
        key = ("lake", str(lake), job, tree, trees, epoch, term, version, seen.tentative,
               seen.partial, seen.coverage, seen.lacking, seen.rows_key)  # fmt: skip
        with self._lock:
            self._seen.setdefault(key, seen)
        return key

    # ---- the results API ---------------------------------------------------------------

    def _poll_api(self, clients: list[ApiClient], job: str, first: int, deadline: float) -> None:
        newest, client = None, None
        for c in clients:
            res = self._ask(c, job, None)
            if isinstance(res, dict):
                with contextlib.suppress(KeyError, TypeError, ValueError):
                    newest, client = int(res["epoch"]), c
                    self._record(job, res, c.url)
                    break
            if time.monotonic() > deadline:
                return
        if newest is None or client is None:
            return
        for epoch in self._pick(job, first, newest):
            if time.monotonic() > deadline:
                return
            res = self._ask(client, job, epoch)
            if res is None:
                return  # the agent stopped answering: the next tick asks another
            if isinstance(res, dict):
                self._record(job, res, client.url)

    def _ask(self, client: ApiClient, job: str, epoch: int | None) -> dict[str, Any] | str | None:
        """The answer; a text for a refusal (404, 410: no result); None when unreachable."""
        self._stats["api_calls"] += 1
        try:
            return client.results(job, epoch)
        except ApiError as exc:
            self._stats["api_errors"] += 1
            return None if exc.status == 0 or exc.status >= 500 else str(exc)

    def _pick(self, job: str, first: int, newest: int) -> list[int]:
        final = self._final.setdefault(job, {})
        recent = list(range(max(first, newest - self.recent), newest))
        older = range(first, max(first, newest - self.recent))
        open_ = [e for e in older if not final.get(e)]
        closed = [e for e in older if final.get(e)]
        return [
            *recent,
            *self._rotate(job, "open", open_, self.unsettled),
            *self._rotate(job, "closed", closed, 1),
        ]

    def _rotate(self, job: str, which: str, items: list[int], n: int) -> list[int]:
        if not items:
            return []
        at = self._cursor.get((job, which), 0) % len(items)
        picked = (items[at:] + items[:at])[:n]
        self._cursor[(job, which)] = at + n
        return picked

    def _record(self, job: str, res: dict[str, Any], where: str) -> None:
        now = time.time()
        epoch = int(res["epoch"])
        rows = list(res.get("rows") or [])
        lacking = tuple(sorted(origin_name(x) for x in res.get("lacking") or ()))
        seen = Seen(
            source="api",
            job=job,
            epoch=epoch,
            version=int(res.get("version") or 1),
            term=int(res.get("term") or 0),
            tentative=bool(res.get("tentative")),
            partial=bool(res.get("partial")),
            complete=bool(res.get("complete", True)),
            coverage=None if res.get("coverage") is None else float(res["coverage"]),
            lacking=lacking,
            rows=rows,
            rows_key=rows_key(rows),
            first_seen=now,
            last_seen=now,
            where=where,
        )
        key = ("api", job, epoch, seen.version, seen.term, seen.tentative, seen.partial,
               seen.complete, seen.coverage, lacking, seen.rows_key)  # fmt: skip
        self._final.setdefault(job, {})[epoch] = not seen.flagged
        with self._lock:
            held = self._seen.setdefault(key, seen)
            held.last_seen = now


def _lake_files(lake: Path) -> list[tuple[str, str, int, int, int, int | None, int | None]]:
    """(path, job, epoch, tree, trees, term from the name, version from the name) of every
    epoch file under ``lake`` (hidden temporary files and compacted hours left out)."""
    out = []
    with contextlib.suppress(OSError):
        for job_dir in os.scandir(lake):
            if not job_dir.is_dir() or not job_dir.name.startswith("job="):
                continue
            job = unquote(job_dir.name[4:])
            for date in _dirs(job_dir.path):
                for hour in _dirs(date):
                    with contextlib.suppress(OSError):
                        for f in os.scandir(hour):
                            m = NAME_RE.match(f.name)
                            if m is None:
                                continue
                            rest = m.group(4)
                            t, v = TERM_RE.search(rest), VERSION_RE.search(rest)
                            out.append((f.path, job, int(m.group(1)), int(m.group(2)),
                                        int(m.group(3)), int(t.group(1)) if t else None,
                                        int(v.group(1)) if v else None))  # fmt: skip
    return out


def _dirs(path: str) -> list[str]:
    try:
        return [d.path for d in os.scandir(path) if d.is_dir() and not d.name.startswith(".")]
    except OSError:
        return []


# ---- the chaos harness's wiring ------------------------------------------------------------


def chaos_watch(chaos: ChaosCluster, plans: Sequence[JobPlan], **kw: Any) -> VersionWatch:
    """A started watch of ``plans`` on ``chaos``'s live agents and its lake (asks every
    agent's node id first, while all are up)."""
    chaos.node_ids()

    def clients() -> list[ApiClient]:
        procs = chaos.cluster.procs
        return [ApiClient(procs[i].api_url, chaos.cluster.token, 1.0) for i in chaos.live()]

    lakes = [chaos.lake_dir] if chaos.lake_dir is not None else []
    return VersionWatch(clients, lakes, {p.name: p.start_epoch for p in plans}, **kw).start()


def chaos_figures(
    watch: VersionWatch,
    chaos: ChaosCluster,
    plans: Sequence[JobPlan],
    reports: Sequence[JobReport] | None = None,
) -> dict[str, Any]:
    """Stops ``watch`` and judges what it saw against each agent's file (origins = agents,
    named by node id), the faults of ``chaos.events`` and, when given, the end-of-run
    reports. Call after the writer stopped."""
    watch.stop()
    ids = chaos.node_ids()
    files = {ids.get(i, f"#{i}"): p for i, p in enumerate(chaos.paths)}
    lost = [ids[i] for i in chaos.lost if i in ids]
    left = {ids.get(i, f"#{i}"): first_out for i, first_out in chaos.left.items()}
    refs = {p.name: OriginReference.from_files(p, files, lost, left=left) for p in plans}
    faults = [Fault(e.action, ids.get(e.index, f"#{e.index}"), e.at) for e in chaos.events]
    out = figures(watch.seen(), refs, faults, reports)
    out["watch"] = watch.stats()
    return out


def cluster_watch(
    cluster: LocalCluster,
    jobs: dict[str, int],
    skip: Callable[[], Collection[int]] = frozenset,
    **kw: Any,
) -> VersionWatch:
    """A started watch of ``jobs`` (name → first epoch) on a :class:`LocalCluster`: asks the
    agents that are alive and not in ``skip()`` (e.g. SIGSTOPped ones) and reads each agent's
    own lake (``<data dir>/lake``, the default when no shared lake is given)."""

    def clients() -> list[ApiClient]:
        out, skipped = [], skip()
        for i, proc in enumerate(cluster.procs):
            if i not in skipped and cluster.alive(i):
                out.append(ApiClient(proc.api_url, cluster.token, 1.0))
        return out

    lakes = [proc.data_dir / "lake" for proc in cluster.procs]
    return VersionWatch(clients, lakes, jobs, **kw).start()


def files_figures(
    watch: VersionWatch,
    plan: JobPlan,
    files: dict[str, Path],
    faults: Sequence[Fault] = (),
    lost: Sequence[str] = (),
) -> dict[str, Any]:
    """Stops ``watch`` and judges what it saw of ``plan`` against each origin's input file
    (origin name → path), with ``faults`` and the origins ``lost`` for good."""
    watch.stop()
    ref = OriginReference.from_files(plan, files, lost)
    out = figures(watch.seen(), {plan.name: ref}, faults)
    out["watch"] = watch.stats()
    return out


def violation_message(figs: dict[str, Any]) -> str:
    """The assertion message of a run with violations (issue "Final means final")."""
    keep = ("visible_unflagged_wrong", "visible_flag_dishonest", "two_row_sets")
    return (
        'Final means final: versions visible during the run broke "exact or flagged": '
        + (json.dumps({k: figs[k] for k in keep}, default=str)[:5000])
    )
