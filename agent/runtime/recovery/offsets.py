"""Durable read positions of file inputs: resume after a restart without loss or duplicates.

Contract (the long form, with what is *not* guaranteed, is in ``docs/inputs.md``):

* :class:`OffsetKeeper` keeps ``<data_dir>/offsets.json``::

      {"version": 1,
       "inputs": {"web": {"path": ..., "inode": ..., "offset": ..., "line_no": ...}},
       "jobs": {"wc": {"creator": "ann", "start_epoch": 1763755200, "acked": 1763755265}}}

  written atomically (temp file, ``fsync``, ``os.replace``, ``fsync`` of the directory) each
  time it changes (at most once per agent tick).
* **Commit point.** After each tick the keeper notes, per file input polled, the tail's
  position and, per job reading it, the highest epoch ``H`` any record read so far can belong
  to (the epoch of the worker's newest event time). A job's **acknowledged epoch** ``A`` is the
  highest epoch such that every epoch ``<= A`` has left this agent for every one of the job's
  trees - acknowledged by the parent (the upstream queue holds no epoch ``<= A``) or, where this
  agent is the tree's master, stored in its result store - **and** is committed by the tree's
  master (``TreeOutflow.committed``, multicast by the master; ``docs/fault-tolerance.md``):
  hop-by-hop acknowledgement alone is not enough, a parent can die after acknowledging. A noted
  position is **committed** once ``H <= A`` for every job that read it: every record before it
  is in an acknowledged contribution (or was dropped as late, which a re-read would do too).
  A job that joined the input later re-read the records before the positions noted until
  then (``agent/ingest/replay.py``): it counts there with ``H`` the newest epoch read before
  them, and a position committed past where it re-read from goes back there until it
  acknowledged them (``docs/fault-tolerance.md``, sliding windows across a restart).
* **Resume.** A restarted agent's file tails resume at the committed position (same inode, file
  still that long; else from the start of the file). Records after it are read again; a job
  whose identity (name, creator, submitted start epoch) matches a stored entry starts its
  worker and barrier at ``A + 1`` (:meth:`OffsetKeeper.resume_spec`), so re-read records of
  epochs already acknowledged are dropped as late instead of being contributed twice, and
  records of later epochs - never acknowledged - are contributed once.
* Inputs other than files (ingest, stdin) cannot be re-read and have no state here. Without a
  data directory nothing is persisted.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import time
from collections import deque
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

import orjson

from agent.ingest.base import Resumable

if TYPE_CHECKING:
    from agent.jobs.spec import JobSpec

log = logging.getLogger(__name__)
STATE_FILE = "offsets.json"
#: key of a noted position's high-water marks holding the newest epoch of any record read
#: before it, accepted by a job or not (for replay; not a job, so commits ignore it)
SEEN = "\0seen"


class TreeOutflow(NamedTuple):
    """Where one of a job's trees stands on this agent."""

    next_epoch: int  # the barrier's next epoch: every epoch below it was emitted
    oldest_queued: int | None  # the oldest epoch the parent has not acknowledged, if any
    is_root: bool  # this agent masters the tree: an emitted epoch is stored, not sent
    #: the master's commit watermark as last heard (None: no commit yet): every epoch up to
    #: it is final at the master, or past repair and reported there as tentative
    committed: int | None = None


class EventClock(Protocol):
    """What the keeper reads of a worker's clock
    (:class:`~agent.runtime.epochs.clock.EpochClock`)."""

    @property
    def max_event_time(self) -> float: ...
    @property
    def max_seen_time(self) -> float: ...
    def epoch_of(self, ts: float) -> int: ...


class JobProgress(Protocol):
    """What the keeper reads of one job on this agent (a
    :class:`~agent.runtime.job.runtime.JobRuntime`)."""

    @property
    def name(self) -> str: ...
    @property
    def spec(self) -> JobSpec: ...
    @property
    def inputs(self) -> Sequence[str]: ...
    @property
    def clock(self) -> EventClock | None:
        """The worker's event-time clock; None when the job has no worker here."""
        ...

    def outflow(self) -> Sequence[TreeOutflow] | None:
        """One entry per tree of the job; None while a tree has no barrier yet."""
        ...


def write_atomically(path: Path, data: bytes) -> None:
    """Replace ``path`` by ``data``: temp file, fsync, rename, fsync of the directory."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    with contextlib.suppress(OSError):  # not every platform can fsync a directory
        dfd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)


def acknowledged_epoch(job: JobProgress) -> int | None:
    """The highest epoch every one of the job's trees has passed on from this agent (parent
    acknowledgement, or stored here as master) **and** its master has committed (end-to-end:
    a parent can die after acknowledging); None if none yet."""
    trees = job.outflow()
    if trees is None:
        return None
    best: int | None = None
    for tree in trees:
        if tree.committed is None:
            return None  # nothing committed yet: keep every record re-readable
        done = min(tree.next_epoch - 1, tree.committed)  # emitted: sent upward or stored (root)
        if tree.oldest_queued is not None and not tree.is_root:
            done = min(done, tree.oldest_queued - 1)
        best = done if best is None else min(best, done)
    return best


def _seen_epoch(job: JobProgress) -> int | None:
    """The highest epoch of any record offered to the job's worker, accepted or not."""
    clock = job.clock
    if clock is None or clock.max_seen_time == -math.inf:
        return None
    return clock.epoch_of(clock.max_seen_time)


def _high_epoch(job: JobProgress) -> int | None:
    """The highest epoch any record the job's worker accepted so far can belong to."""
    clock = job.clock
    if clock is None:
        return None
    newest = clock.max_event_time
    if newest == -math.inf:
        return None
    return clock.epoch_of(newest)


def _with_joiners(highs: dict[str, int], readers: Sequence[JobProgress]) -> dict[str, int]:
    """``highs`` of a noted position, plus a bound for each job reading the input now that
    had no high there: it joined after the position was noted and re-read (replayed) the
    records before it (``Agent._join_inputs``), which can belong to any epoch up to the
    newest seen then (``SEEN``, or a loaded position's bound). Without this a position noted
    before a job joined committed on the other jobs' acknowledgements alone, and a restart
    lost the joiner's records of epochs it had not acknowledged yet. A joiner starting after
    them needs none of them."""
    if not highs:
        return highs  # no record was read before this position
    bound = max(highs.values())  # SEEN, or a loaded position's bound
    out = dict(highs)
    for rt in readers:
        start = rt.spec.start_epoch
        if rt.name not in out and (start is None or start <= bound):
            out[rt.name] = bound
    return out


def _identity(spec: JobSpec) -> dict[str, Any]:
    return {"creator": spec.creator, "start_epoch": spec.start_epoch}


class OffsetKeeper:
    """Per-agent durable input positions and acknowledged epochs (see module docstring)."""

    def __init__(
        self,
        data_dir: str | os.PathLike[str] | None,
        *,
        flush_interval: float = 1.0,
        max_pending: int = 4096,  # RuntimeTunables.max_pending; the agent passes its own
    ) -> None:
        self.path = Path(data_dir) / STATE_FILE if data_dir else None
        self.flush_interval = flush_interval
        # noted positions kept per input awaiting acknowledgement (beyond: the oldest merge)
        self.max_pending = max_pending
        self._last_flush = -math.inf
        self.inputs: dict[str, dict[str, Any]] = {}
        self.jobs: dict[str, dict[str, Any]] = {}
        self._pending: dict[str, deque[tuple[dict[str, Any], dict[str, int]]]] = {}
        # the high-water marks the committed position was noted with (unknown after a load)
        self._committed_highs: dict[str, dict[str, int]] = {}
        # per input, where its tail began reading in this run, with what bounds the records
        # before it (nothing read in this run; a resumed position: the loaded bound)
        self._origins: dict[str, tuple[dict[str, Any], dict[str, int]]] = {}
        self._loaded: dict[str, dict[str, Any]] = {}  # positions read from the state file
        self._loaded_bound: dict[str, int] = {}
        self._identities: dict[str, dict[str, Any]] = {}  # job → its submitted identity
        # per input, the position a joining job re-reads from (replay_from), to pull the
        # committed position back to at the next observe (set on the record thread)
        self._rewinds: dict[str, tuple[dict[str, Any], dict[str, int]]] = {}
        self._dirty = False
        self.counters = {"writes": 0, "write_errors": 0, "load_errors": 0}
        if self.path is not None:
            self._load()

    def _load(self) -> None:
        assert self.path is not None
        try:
            doc = orjson.loads(self.path.read_bytes())
        except FileNotFoundError:
            return
        except (OSError, orjson.JSONDecodeError) as exc:
            self.counters["load_errors"] += 1
            log.warning("cannot read %s (%r): inputs start afresh", self.path, exc)
            return
        if isinstance(doc, dict):
            if isinstance(doc.get("inputs"), dict):
                self.inputs = {k: v for k, v in doc["inputs"].items() if isinstance(v, dict)}
            if isinstance(doc.get("jobs"), dict):
                self.jobs = {k: v for k, v in doc["jobs"].items() if isinstance(v, dict)}
        # A loaded position was committed: every record before it is in an epoch some job
        # had acknowledged then, so at most the highest acknowledged epoch stored with it.
        acked = [v["acked"] for v in self.jobs.values() if isinstance(v.get("acked"), int)]
        self._loaded_bound = {"(loaded)": max(acked)} if acked else {}
        self._loaded = {name: dict(state) for name, state in self.inputs.items()}
        self._committed_highs = {name: dict(self._loaded_bound) for name in self.inputs}

    # ---- resume ---------------------------------------------------------------------------
    def resume_state(self, input_name: str) -> dict[str, Any] | None:
        """The committed position of a file input (``FileTail(state=...)``), if any."""
        return self.inputs.get(input_name)

    def resume_spec(self, spec: JobSpec) -> JobSpec:
        """``spec`` with ``start_epoch`` moved past the epochs this agent already passed on for
        the same job (name, creator, submitted start epoch); unchanged otherwise."""
        self._identities[spec.name] = _identity(spec)
        entry = self.jobs.get(spec.name)
        if entry is None or spec.start_epoch is None:
            return spec
        if entry.get("creator") != spec.creator or entry.get("start_epoch") != spec.start_epoch:
            return spec
        acked = entry.get("acked")
        if not isinstance(acked, int) or acked < spec.start_epoch:
            return spec
        log.info(
            "job %s resumes at epoch %d: up to %d was passed on and committed before a restart",
            spec.name,
            acked + 1,
            acked,
        )
        return spec.with_changes(start_epoch=acked + 1)

    def replay_from(self, input_name: str, epoch: int) -> dict[str, Any] | None:
        """The newest position of ``input_name`` noted in this run (committed or pending)
        before which every record the jobs' clocks accepted belonged to an epoch below
        ``epoch``: a new job starting at ``epoch`` re-reads from there and misses none of its
        records (:mod:`agent.ingest.replay`). A position loaded from before a restart counts
        with the highest epoch acknowledged then. None if no such position is known."""
        candidates = list(reversed(self._pending.get(input_name, ())))
        if input_name in self._committed_highs and input_name in self.inputs:
            candidates.append((self.inputs[input_name], self._committed_highs[input_name]))
        if input_name in self._origins:
            candidates.append(self._origins[input_name])
        for state, highs in candidates:
            if all(h < epoch for h in highs.values()):  # SEEN among them: records of any job
                # the joining job needs the records after it: the committed position must
                # not stay past them until it acknowledged them (applied at observe)
                self._rewinds[input_name] = (dict(state), dict(highs))
                return dict(state)
        return None

    # ---- tracking -------------------------------------------------------------------------
    def observe(
        self,
        inputs: dict[str, Any],
        polled: set[str],
        runtimes: Sequence[JobProgress],
        *,
        final: bool = False,
    ) -> None:
        """After a tick: note the positions of the file inputs in ``polled``, commit what the
        jobs have acknowledged, persist: at once when an acknowledged epoch moved (that
        narrows the duplicate window, see the docs), else at most every ``flush_interval``
        seconds, and always when ``final`` (the agent stops)."""
        if self.path is None:
            return
        acked: dict[str, int | None] = {}
        urgent = final
        for rt in runtimes:
            if rt.clock is None:  # no worker here: the job reads no input of this agent
                continue
            a = acknowledged_epoch(rt)
            acked[rt.name] = a
            if a is None or rt.spec.start_epoch is None:
                continue
            # the identity is the submitted spec's (resume_spec saw it), not the resumed one
            ident = self._identities.get(rt.name) or _identity(rt.spec)
            entry = self.jobs.get(rt.name)
            if entry is None or {k: entry.get(k) for k in ident} != ident:
                entry = self.jobs[rt.name] = dict(ident, acked=None)
            if entry.get("acked") != a:
                entry["acked"] = a
                self._dirty = urgent = True
        for name in polled:
            source = inputs.get(name)
            if not isinstance(source, Resumable):
                continue
            state = source.state()
            if state["inode"] is None:
                continue
            origin = None if name in self._origins else getattr(source, "origin", None)
            if isinstance(origin, dict):
                loaded = self._loaded.get(name)
                resumed = loaded is not None and all(
                    loaded.get(k) == origin.get(k) for k in ("inode", "offset")
                )
                bound = self._loaded_bound if resumed else {}
                self._origins[name] = (dict(origin), dict(bound))
            highs = {}
            for rt in runtimes:
                if name in rt.inputs:
                    h = _high_epoch(rt)
                    if h is not None:
                        highs[rt.name] = h
                    seen = _seen_epoch(rt)
                    if seen is not None:  # not a job: the commit test skips it
                        highs[SEEN] = max(highs.get(SEEN, seen), seen)
            pending = self._pending.setdefault(name, deque())
            if pending and pending[-1][0] == state:
                pending[-1] = (state, highs)  # same position, newer high-water marks
            else:
                pending.append((state, highs))
            if len(pending) > self.max_pending:  # merge the oldest two: the later one governs
                first = pending.popleft()
                second = pending.popleft()
                merged = {k: max(first[1].get(k, -1), v) for k, v in second[1].items()}
                pending.appendleft((second[0], merged))
        for name in list(self._rewinds):
            self._rewind(name, *self._rewinds.pop(name))
        for name, pending in self._pending.items():
            readers = [rt for rt in runtimes if rt.clock is not None and name in rt.inputs]
            committed = None
            while pending:
                state, highs = pending[0]
                if any(
                    job in acked and (acked[job] is None or acked[job] < h)  # type: ignore[operator]
                    for job, h in _with_joiners(highs, readers).items()
                ):
                    break
                committed = state
                self._committed_highs[name] = highs
                pending.popleft()
            if committed is not None and self.inputs.get(name) != committed:
                self.inputs[name] = committed
                self._dirty = True
        if urgent or time.monotonic() - self._last_flush >= self.flush_interval:
            self.flush()

    def _rewind(self, name: str, state: dict[str, Any], highs: dict[str, int]) -> None:
        """A job joined ``name`` and re-read it from ``state``: a committed position past
        ``state`` goes back to pending (it commits again once the joiner acknowledged the
        records before it, see :func:`_with_joiners`) and ``state`` is committed meanwhile.
        Other jobs lose nothing by it: a restart re-reads more, and their records of epochs
        they had acknowledged are dropped as late (their start moved past them)."""
        current = self.inputs.get(name)
        if current is None or current.get("inode") != state.get("inode"):
            return  # nothing committed on this file yet: pending positions wait already
        if not isinstance(state.get("offset"), int) or state["offset"] >= current["offset"]:
            return
        held = self._committed_highs.get(name, {})
        self._pending.setdefault(name, deque()).appendleft((current, held))
        self.inputs[name] = dict(state)
        self._committed_highs[name] = dict(highs)
        self._dirty = True
        log.info(
            "input %s: committed position back to byte %d (a job joined and re-read from there)",
            name,
            state["offset"],
        )

    def flush(self) -> None:
        """Write the state file if it changed. Never raises (errors are counted, logged)."""
        if not self._dirty or self.path is None:
            return
        doc = {"version": 1, "inputs": self.inputs, "jobs": self.jobs}
        try:
            write_atomically(self.path, orjson.dumps(doc, option=orjson.OPT_INDENT_2))
        except OSError as exc:
            self.counters["write_errors"] += 1
            log.warning("cannot write %s: %r", self.path, exc)
            return
        self._dirty = False
        self._last_flush = time.monotonic()
        self.counters["writes"] += 1

    def stats(self) -> dict[str, Any]:
        """Committed positions, acknowledged epochs and counters."""
        return {
            "path": None if self.path is None else str(self.path),
            "inputs": {k: v.get("offset") for k, v in self.inputs.items()},
            "jobs": {k: v.get("acked") for k, v in self.jobs.items()},
            "pending": {k: len(v) for k, v in self._pending.items()},
            **self.counters,
        }
