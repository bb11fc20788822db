"""Writing rollups to the lake from a background thread, with a bounded on-disk buffer.

Contract (see ``docs/spark-sink.md``):

* :meth:`LakeWriter.submit` never blocks and never raises: the rollup (or a callable that
  builds it, so the conversion also runs off the caller's thread) joins an in-memory queue
  that one writer thread drains.
* The thread builds the Arrow table and publishes it to the lake
  (:meth:`~spark_sink.lake.Lake.publish`: never replacing a file, fenced by the epoch's term).
  If the lake is unavailable (``OSError`` / ``pyarrow.ArrowException``), the table goes to the
  **buffer**: one Parquet file per pending rollup in ``buffer_dir`` (named after its lake
  path, so a re-push of the same (job, tree, epoch, term, version) replaces the pending copy,
  and a new version of an epoch is pending next to the older one, in order). While anything is
  buffered, new rollups queue behind it, so the lake sees each writer's epochs in order. A
  retry loop flushes the buffer oldest first with exponential backoff (``retry_initial``
  doubling to ``retry_max`` seconds). Buffered files survive a restart and are flushed by the
  next writer.
* **Bounded**: at most ``capacity`` pending files (and ``capacity_bytes``). A rollup that does
  not fit is refused: counted in ``dropped_over_capacity`` and logged at ERROR with the job,
  tree and epoch — never dropped silently. A rollup that cannot be represented at all (a bug
  in the job's values) is counted in ``bad_rollups`` and logged.
* **Fenced** (:class:`~spark_sink.fencing.FencedWrite`: the lake holds the epoch under a newer
  master's term): the rollup is not written, not buffered and not retried (a buffered copy is
  dropped); counted in ``fenced`` and handed to the ``fenced`` callback given to
  :meth:`submit` (the callback reports it; without one — a buffered copy flushed after a
  restart — it is logged at WARNING here).
* **Upkeep** (``maintenance``, :class:`~spark_sink.compaction.LakeMaintenance`): every
  ``every`` seconds, between writes, the thread compacts the complete hours of the (job, tree)
  it wrote, deletes the epoch files compaction replaced ``grace`` seconds ago and drops hours
  past the retention (``spark_sink/compaction.py``). Running in the writer's own thread, it
  never races this writer's epoch writes; a failure is counted (``compact_errors``), logged
  and retried at the next pass.
* :meth:`stats` — ``written``, ``buffered`` (ever), ``pending`` (now), ``retried``,
  ``retry_failures``, ``dropped_over_capacity``, ``bad_rollups``, ``fenced``, ``last_error``,
  and the upkeep's ``hours_compacted``, ``files_compacted``, ``files_deleted``,
  ``hours_dropped``, ``compact_errors``.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import queue
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from spark_sink.compaction import LakeMaintenance, maintain
from spark_sink.fencing import FencedWrite
from spark_sink.lake import Lake, LakeError, Rollup, rollup_table

log = logging.getLogger(__name__)

LAKE_ERRORS = (OSError, pa.ArrowException, LakeError)
RollupSource = Rollup | Callable[[], Rollup]
OnFenced = Callable[[FencedWrite], None]  # told when the lake refused a rollup (a newer term)
_WAKE: Any = object()  # a queue item that only wakes the thread (run_upkeep)


class LakeWriter:
    """One thread writing rollups to a lake, buffering on disk while it is unavailable."""

    def __init__(
        self,
        lake: Lake | str,
        buffer_dir: str | Path,
        *,
        capacity: int = 10_000,
        capacity_bytes: int = 1 << 30,
        retry_initial: float = 0.5,
        retry_max: float = 30.0,
        on_written: Callable[[Rollup, str], None] | None = None,
        maintenance: LakeMaintenance | None = None,
    ) -> None:
        self.location = lake.location if isinstance(lake, Lake) else str(lake)
        self._lake = lake if isinstance(lake, Lake) else None
        self.buffer_dir = Path(buffer_dir)
        # 0700: buffered rollups hold the jobs' keys (user data), and without a data directory
        # the buffer lives under the shared temp directory
        self.buffer_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.capacity = capacity
        self.capacity_bytes = capacity_bytes
        self.retry_initial = retry_initial
        self.retry_max = retry_max
        self.on_written = on_written
        self.counters = {
            "written": 0,
            "buffered": 0,
            "retried": 0,
            "retry_failures": 0,
            "dropped_over_capacity": 0,
            "bad_rollups": 0,
            "fenced": 0,
            "hours_compacted": 0,
            "files_compacted": 0,
            "files_deleted": 0,
            "hours_dropped": 0,
            "compact_errors": 0,
        }
        self.maintenance = maintenance
        self._next_upkeep = time.monotonic() + (maintenance.every or 0) if maintenance else 0.0
        self._wrote: set[tuple[str, int, int]] = set()  # (job, tree index, m) written here
        self.last_error: str | None = None
        self._queue: queue.Queue[tuple[RollupSource, OnFenced | None] | None] = queue.Queue()
        # a buffered rollup's fenced callback (in memory: a restart's buffered files have none)
        self._on_fenced: dict[str, OnFenced] = {}
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._busy = 0
        self._stop = threading.Event()
        self._delay = retry_initial
        self._next_retry = 0.0
        for tmp in self.buffer_dir.glob(".tmp-*"):
            tmp.unlink(missing_ok=True)
        self._pending = sum(1 for _ in self.buffer_dir.glob("*.parquet"))
        self._thread = threading.Thread(target=self._run, name="elf-lake-writer", daemon=True)
        self._thread.start()

    # ---- public ------------------------------------------------------------------------------

    def lake(self) -> Lake:
        """The lake, opened on first use (opening a URI can fail like a write: buffered)."""
        if self._lake is None:
            self._lake = Lake(self.location)
        return self._lake

    def submit(self, rollup: RollupSource, fenced: OnFenced | None = None) -> None:
        """Queue a rollup (or a zero-argument callable returning one) for writing;
        ``fenced`` is called (in the writer thread) if the lake refuses it as fenced."""
        with self._lock:
            self._busy += 1
        self._queue.put((rollup, fenced))

    def pending(self) -> int:
        """Rollups waiting in the buffer directory."""
        return self._pending

    def stats(self) -> dict[str, Any]:
        with self._lock:
            out: dict[str, Any] = dict(self.counters)
            out["queued"] = self._busy
        out["pending"] = self.pending()
        out["last_error"] = self.last_error
        return out

    def flush(self, timeout: float = 30.0) -> bool:
        """Wait until the queue is drained and the buffer is empty (True) or ``timeout``."""
        deadline = time.monotonic() + timeout
        with self._idle:
            while self._busy or self.pending():
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._idle.wait(min(left, 0.05))
        return True

    def close(self, timeout: float = 10.0) -> None:
        """Stop the thread after the queued rollups (buffered files stay on disk)."""
        self._queue.put(None)
        self._thread.join(timeout)
        self._stop.set()

    # ---- the thread --------------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            timeout = max(0.0, self._next_retry - time.monotonic()) if self.pending() else None
            if self._upkeep_due_in() is not None:
                due = max(0.0, self._upkeep_due_in() or 0.0)
                timeout = due if timeout is None else min(timeout, due)
            try:
                item = self._queue.get(timeout=timeout)
            except queue.Empty:
                self._retry_buffer()
                self._upkeep()
                continue
            if item is None:
                self._retry_buffer()
                return
            if item is _WAKE:
                self._upkeep()
                continue
            try:
                self._handle(*item)
            finally:
                with self._idle:
                    self._busy -= 1
                    self._idle.notify_all()
            self._upkeep()

    def _upkeep_due_in(self) -> float | None:
        m = self.maintenance
        if m is None or not m.every or not self._wrote:
            return None
        return self._next_upkeep - time.monotonic()

    def _upkeep(self) -> None:
        """Compact, sweep and drop (module contract) when due and the lake is reachable."""
        due = self._upkeep_due_in()
        if due is None or due > 0 or self.pending():
            return
        assert self.maintenance is not None and self.maintenance.every
        self._next_upkeep = time.monotonic() + self.maintenance.every
        try:
            counts = maintain(self.lake(), sorted(self._wrote), self.maintenance)
        except Exception as exc:  # the lake, a damaged file: say so, try again next pass
            self._count("compact_errors")
            log.warning("lake %s: compaction pass failed: %r", self.location, exc)
            return
        with self._lock:
            for key, n in counts.items():
                self.counters[key] += n

    def run_upkeep(self) -> None:
        """Make the next upkeep pass due now (tests, operators)."""
        self._next_upkeep = 0.0
        self._queue.put(_WAKE)

    def _handle(self, item: RollupSource, on_fenced: OnFenced | None) -> None:
        try:
            rollup = item() if callable(item) else item
            table = rollup_table(rollup)
        except Exception as exc:  # a job's value we cannot represent: count, say, go on
            self._count("bad_rollups")
            log.error("lake: cannot represent a rollup (%r); not written", exc)
            return
        if self.pending():
            self._retry_buffer()
        if self.pending():
            self._buffer(rollup, table, on_fenced)
            return
        try:
            path = self.lake().publish(table)
        except FencedWrite as exc:
            self._fenced(exc, on_fenced)
            return
        except LAKE_ERRORS as exc:
            self._failed(exc)
            self._buffer(rollup, table, on_fenced)
            return
        self._written(rollup, path)

    def _fenced(self, exc: FencedWrite, on_fenced: OnFenced | None) -> None:
        self._count("fenced")
        if on_fenced is None:
            log.warning("lake %s: %s; not written", self.location, exc)
            return
        try:
            on_fenced(exc)
        except Exception as err:
            log.warning("lake: fenced callback failed: %r", err)

    def _written(self, rollup: Rollup | None, path: str) -> None:
        self._count("written")
        if rollup is not None:
            self._wrote.add((rollup.job, rollup.tree, rollup.trees))
        self._delay = self.retry_initial
        if self.on_written is not None and rollup is not None:
            try:
                self.on_written(rollup, path)
            except Exception as exc:
                log.warning("lake: on_written callback failed: %r", exc)

    def _failed(self, exc: BaseException) -> None:
        if self.last_error is None:
            log.warning(
                "lake %s unavailable (%r): buffering rollups in %s and retrying",
                self.location,
                exc,
                self.buffer_dir,
            )
        self.last_error = repr(exc)
        self._next_retry = time.monotonic() + self._delay
        self._delay = min(self.retry_max, self._delay * 2)

    def _buffer_path(self, table: pa.Table) -> Path:
        relative = (table.schema.metadata or {})[b"elf.path"]
        digest = hashlib.sha1(relative).hexdigest()[:24]
        return self.buffer_dir / f"{digest}.parquet"

    def _buffer(self, rollup: Rollup, table: pa.Table, on_fenced: OnFenced | None) -> None:
        target = self._buffer_path(table)
        files = list(self.buffer_dir.glob("*.parquet"))
        replacing = target.exists()
        size = sum(f.stat().st_size for f in files if f.exists())
        if not replacing and (len(files) >= self.capacity or size >= self.capacity_bytes):
            self._count("dropped_over_capacity")
            log.error(
                "lake buffer %s full (%d files, %d bytes): rollup of job %s tree %d epoch %d "
                "REFUSED; the lake %s has been unavailable since: %s",
                self.buffer_dir,
                len(files),
                size,
                rollup.job,
                rollup.tree,
                rollup.epoch,
                self.location,
                self.last_error,
            )
            return
        tmp = self.buffer_dir / f".tmp-{target.name}"
        pq.write_table(table, tmp)
        # mtime orders the retries; a replaced rollup keeps its place in line
        stamp = target.stat().st_mtime_ns if replacing else time.time_ns()
        os.replace(tmp, target)
        os.utime(target, ns=(stamp, stamp))
        if on_fenced is not None:
            self._on_fenced[target.name] = on_fenced
        if not replacing:
            self._pending += 1
        self._count("buffered")

    def _retry_buffer(self) -> None:
        if time.monotonic() < self._next_retry:
            return
        files = sorted(self.buffer_dir.glob("*.parquet"), key=lambda f: f.stat().st_mtime_ns)
        for f in files:
            try:
                table = pq.read_table(f)
            except LAKE_ERRORS as exc:  # a damaged buffer file: keep it aside, say so
                self._count("bad_rollups")
                log.error("lake buffer file %s unreadable (%r); moved aside", f, exc)
                with contextlib.suppress(OSError):
                    f.rename(f.with_suffix(".bad"))
                self._pending -= 1
                continue
            self._count("retried")
            try:
                path = self.lake().publish(table)
            except FencedWrite as exc:  # a newer master owns the epoch: drop our copy
                f.unlink(missing_ok=True)
                self._pending -= 1
                self._fenced(exc, self._on_fenced.pop(f.name, None))
                continue
            except LAKE_ERRORS as exc:
                self._count("retry_failures")
                self._failed(exc)
                return
            f.unlink(missing_ok=True)
            self._pending -= 1
            self._on_fenced.pop(f.name, None)
            self._written(None, path)
        if self.last_error is not None and not self.pending():
            log.warning("lake %s available again: buffer flushed", self.location)
            self.last_error = None

    def _count(self, what: str) -> None:
        with self._lock:
            self.counters[what] += 1
