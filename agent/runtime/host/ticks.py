r"""The agent's inputs and its clock: ingest, the tick loop and the record thread's part of it.

Contract: :class:`Ticks` opens the agent's inputs (file tails, stdin, the ``ingest`` queue),
serves the input side a job is given (:class:`~agent.runtime.services.InputService`: names,
timestamp fields, a read-now, durable resume positions) and runs the agent's clock:
:meth:`Ticks.tick_loop` ticks every ``tick_seconds`` while a job reads an input that is
polled (a file tail, stdin; at once again while inputs have data) - except that while every
input a job reads has nothing new (a file tail whose file did not change since it was read to
its end, an empty ingest queue) and no job is due, the loop only ``stat``\ s the files and
wakes the record thread at most every
:data:`IDLE_TICK_SECONDS` (:meth:`Ticks.quiet`) - and otherwise when a job is
due (``TickedRuntime.tick_due``: an epoch to close, a timer; at most
:data:`IDLE_TICK_SECONDS` apart, the period too while the agent runs no job), and whenever
:meth:`Ticks.tick_now` asks (a push, a starting job). **The event loop never runs
per-record work**: a tick's reading, parsing, every job's ``map`` and epoch closing run on the
record thread (:meth:`Ticks.tick_work`), then the loop offers the closed epochs to the trees
(:meth:`Ticks.tick_done`) and notes the offsets. An ingest request is processed before it is
answered (the request waits for the thread; the loop does not).

A job new on this agent joins the inputs other jobs already read at its first tick
(:meth:`Ticks.join_inputs`): what they read of its epochs is re-read for it from the file
(``agent/ingest/replay.py``), or, where that cannot be done, those epochs are flagged
incomplete here — never counted as whole.

It is given the runtimes by name (read only), the durable offsets, the record thread (a
callable: the agent swaps it at start and stop), the tunables, the counter and an upkeep
callback it runs on the loop after each tick (``after_tick``: the agent's memory budget); it
reaches a runtime only through :class:`TickedRuntime`.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import math
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from agent.config import AgentConfig, InputConfig
from agent.errors import BadRequest, NotFound
from agent.ingest.base import Resumable, Watchable
from agent.ingest.columnar.pool import ChunkParsePool
from agent.ingest.columnar.reader import install_columnar
from agent.ingest.fastpath import install_prefilters
from agent.ingest.file_watch import FileWatch, watch_file
from agent.ingest.inputs import open_input
from agent.ingest.replay import ReplayError, replay_range
from agent.ingest.stream import IngestQueue, StreamInput
from agent.ingest.tail import FileTail
from agent.jobs.spec import JobSpec
from agent.runtime.record_thread import InlineRecords, RecordThread
from agent.runtime.recovery.offsets import OffsetKeeper
from agent.tunables import RuntimeTunables

log = logging.getLogger(__name__)

#: the longest the agent goes without a tick: its period while it runs no job, and while its
#: jobs read only pushed inputs and none is due sooner
IDLE_TICK_SECONDS = 1.0
#: a due tick comes this much after the due time (a timer may fire a little early)
DUE_SLACK = 0.005
#: a watched file whose last tick read fewer records than this is a trickle: its changes are
#: read after LINGER seconds (or when a job is due), not after tick_seconds
TRICKLE_RECORDS = 256
LINGER = 0.5

INGEST_INPUT = "ingest"


class SharedInputs(Protocol):
    """A job told that other jobs read its inputs first (``JobRuntime.recovery``)."""

    def started_after_others(self, newest: float, inputs: list[str]) -> None: ...


class TickedRuntime(Protocol):
    """The :class:`~agent.runtime.job.runtime.JobRuntime` members the ticks call."""

    name: str
    inputs: Any
    clock: Any
    spec: JobSpec

    def work(self, batches: dict[str, Any]) -> Any: ...
    def deliver(self, closed: Any, now: float) -> None: ...
    def backlog_full(self) -> bool: ...
    def tick_due(self, now: float) -> float: ...
    def count(self, what: str, n: int = 1) -> None: ...
    @property
    def recovery(self) -> SharedInputs: ...


@dataclasses.dataclass(frozen=True)
class Ticked:
    """What the record thread's part of a tick hands back to the loop."""

    busy: bool  # some input had data
    polled: set[str]
    closed: list[tuple[Any, list[Any]]]
    positions: dict[str, Position]  # resumable inputs' positions right after the poll
    # wall-clock time by which some job needs its next tick if no record arrives
    due: float = math.inf
    records: int = 0  # records the poll read (a trickle lingers: Ticks.file_changed)


@dataclasses.dataclass(frozen=True)
class Position:
    """A resumable input's ``state()`` captured on the record thread (``Resumable``), and
    where its tail began reading in this run (``FileTail.origin``)."""

    captured: dict[str, Any]
    origin: dict[str, Any] | None = None

    def state(self) -> dict[str, Any]:
        return self.captured


class Ticks:
    """The agent's inputs and clock (see the module contract)."""

    def __init__(
        self,
        config: AgentConfig,
        runtimes: Mapping[str, TickedRuntime],
        offsets: OffsetKeeper,
        *,
        records: Callable[[], RecordThread | InlineRecords],
        count: Callable[..., None],
        running: Callable[[], bool],
        after_tick: Callable[[], None] = lambda: None,
    ) -> None:
        self.config = config
        self.after_tick = after_tick  # the event loop's upkeep after each tick (memory budget)
        self.tunables: RuntimeTunables = config.runtime
        self.runtimes = runtimes
        self.offsets = offsets
        self.records = records
        self.count = count
        self.running = running
        self.inputs: dict[str, FileTail | StreamInput | IngestQueue] = {}
        self.input_configs: dict[str, InputConfig] = {}
        self.parse_pool: ChunkParsePool | None = None
        # the runtimes the record thread has fed at least once (a new one joins the inputs
        # the others read: join_inputs)
        self.fed: weakref.WeakSet[Any] = weakref.WeakSet()
        self.requests: set[str] = set()  # inputs to read at once (tick_now)
        self.event = asyncio.Event()
        self.next_full = 0.0  # monotonic time of the next full tick
        self.last_full = 0.0  # monotonic time the last full tick began
        self.due = math.inf  # wall-clock time some job needs a tick by (the last tick's)
        self.last_busy = True  # whether the last tick read anything (until one ran: assume so)
        self.last_ticked = 0.0  # monotonic time of the last tick the record thread ran
        # file inputs whose directory the kernel watches for us (inotify): read when it
        # reports a change, like a pushed input, instead of being polled every tick_seconds
        self.watches: dict[str, FileWatch] = {}
        self.changed = False  # a watched file changed since the last full tick began
        self.last_records = 0  # records the last tick read
        self.last_polled: set[str] = set()  # the inputs the last tick polled
        # the inputs that can tell a poll would find nothing (Watchable): their unchanged()
        self.unchanged: dict[str, Callable[[], bool]] = {}
        self.resumable: set[str] = set()  # the inputs whose position persists (Resumable)

    # ---- inputs (InputService) -----------------------------------------------------------------

    def open_inputs(self) -> None:
        configs = list(self.config.inputs)
        if not any(c.name == INGEST_INPUT for c in configs):
            configs.append(InputConfig(name=INGEST_INPUT, type="ingest"))
        for cfg in configs:
            self.input_configs[cfg.name] = cfg
            state = self.offsets.resume_state(cfg.name)
            self.inputs[cfg.name] = source = open_input(cfg, self.config.data_dir, state=state)
            if hasattr(source, "parse_pool"):  # file tails: a backlog parsed on both cores
                source.parse_pool = self.shared_parse_pool()
            # checked once here: an isinstance of a runtime Protocol costs ~20 µs
            if isinstance(source, Watchable):
                self.unchanged[cfg.name] = source.unchanged
            if isinstance(source, Resumable):
                self.resumable.add(cfg.name)
            if isinstance(source, FileTail) and self.tunables.watch_files:
                watch = watch_file(source.path, self.file_changed)
                if watch is not None:
                    self.watches[cfg.name] = watch

    def shared_parse_pool(self) -> ChunkParsePool | None:
        """The agent's parse-ahead processes (``parse_processes``; None: off), started on the
        first backlog and shared by its file inputs."""
        if self.tunables.parse_processes and self.parse_pool is None:
            self.parse_pool = ChunkParsePool(self.tunables.parse_processes)
        return self.parse_pool

    def input_names(self) -> set[str]:
        return set(self.inputs)

    def timestamp_field(self, input_name: str) -> str:
        """The event-time field of ``input_name``'s records (InputService)."""
        return self.input_configs[input_name].timestamp_field

    def resume_spec(self, spec: JobSpec) -> JobSpec:
        """``spec`` moved past the epochs passed on before a restart (InputService; see
        ``agent/runtime/recovery/offsets.py``)."""
        return self.offsets.resume_spec(spec)

    def close(self) -> None:
        """Close every input (the agent stopped)."""
        for watch in self.watches.values():
            watch.close()
        for source in self.inputs.values():
            source.close()

    async def ingest(self, input_name: str, lines: Sequence[bytes | str]) -> dict[str, Any]:
        source = self.inputs.get(input_name)
        if source is None:
            raise NotFound(f"no input named {input_name!r} on this agent")
        if not isinstance(source, IngestQueue):
            raise BadRequest(f"input {input_name!r} tails a file; ingest into an ingest input")
        # Parsing the lines and processing them run on the record thread, in one step: the
        # request is answered once its records are in the jobs (as before), and a runtime
        # change submitted after this request applies to later records only. A record that
        # closes an epoch sends that epoch up the tree without a polling delay.
        runtimes = list(self.runtimes.values())
        outcome, ticked = await self.records().run(
            self.ingest_work, source, lines, input_name, runtimes
        )
        if ticked is not None:
            self.tick_done(ticked)
        return outcome

    def ingest_work(
        self, source: IngestQueue, lines: list[str], input_name: str, runtimes: list[Any]
    ) -> tuple[dict[str, Any], Ticked | None]:
        """Record thread: validate and enqueue ``lines``, then feed the jobs reading them."""
        outcome = source.put_lines(lines).to_dict()
        if not outcome["accepted"]:
            return outcome, None
        return outcome, self.tick_work({input_name}, runtimes)

    # ---- the clock -----------------------------------------------------------------------------

    async def tick_loop(self) -> None:
        """The agent's clock (module contract). A full tick comes every ``tick_seconds`` while
        some job reads an input that must be polled (a file tail, stdin), and at once again
        while inputs have data; while every job reads only pushed inputs (``ingest``: a push
        ticks its readers itself), at the time the earliest job is due (:attr:`due`: an
        epoch to close, a master's timer), at most ``IDLE_TICK_SECONDS`` apart and never
        closer than ``tick_seconds``; with no job, every ``IDLE_TICK_SECONDS``. In between,
        whenever :meth:`tick_now` asks."""
        self.next_full = 0.0
        idle = False
        while self.running():
            now = time.monotonic()
            if idle and self.runtimes:
                # the first job here: its first tick now, not a long one later
                self.next_full = 0.0
            if now >= self.next_full:
                only: set[str] | None = None
                # with no job there is nothing to feed or close: a slow clock (no CPU spent
                # idling: issue "A lightweight agent"); a job's arrival is seen within it
                idle = not self.runtimes
                period = IDLE_TICK_SECONDS if idle else self.tunables.tick_seconds
                self.last_full, self.next_full = now, now + period
                self.changed = False
                if not idle and not self.requests and self.quiet():
                    # nothing to read, nothing due: the record thread is not woken (a tick
                    # costs it ~0.4 ms; hundreds of logical agents tick 10 times a second)
                    self.count("ticks_quiet")
                    await self._wait_until(self.next_full)
                    continue
                self.requests = set()
            elif self.requests:
                only, self.requests = self.requests, set()
            else:  # woken to re-plan (an earlier due time) or to stop: nothing to read yet
                self.event.clear()
                await self._wait_until(self.next_full)
                continue
            self.event.clear()
            busy = False
            try:
                busy = await self.tick_async(only)
            except Exception:  # a bug in one job must not stop the agent's clock
                self.count("tick_errors")
                log.exception("agent tick failed")
            if busy and not self.drained():
                # more may be waiting than one poll reads (a backlog): read on at once
                self.next_full = 0.0
                await asyncio.sleep(0)
                continue
            if not idle and not self.polling():
                # nothing to poll: sleep until a job is due (a push ticks its readers itself);
                # a watched file that changed meanwhile is read after its gap (file_changed)
                wake = self.next_wake(now)
                if self.changed:
                    wake = min(self.last_full + self.change_gap(), self._due_monotonic())
                self.next_full = max(self.next_full, wake)
            await self._wait_until(self.next_full)

    def drained(self) -> bool:
        """Whether the last tick read every input it polled to its end (each says a poll now
        would find nothing, ``Watchable``): no need to tick again at once."""
        return bool(self.last_polled) and self.all_unchanged(self.last_polled)

    def all_unchanged(self, names: set[str]) -> bool:
        """Whether each input in ``names`` says a poll now would find nothing (Watchable)."""
        unchanged = self.unchanged
        return all(name in unchanged and unchanged[name]() for name in names)

    def change_gap(self) -> float:
        """How long after the last full tick began a watched file's change is read: a busy
        log every ``tick_seconds``, a trickle after :data:`LINGER` (file_changed)."""
        return self.tunables.tick_seconds if self.last_records >= TRICKLE_RECORDS else LINGER

    def file_changed(self) -> None:
        """Event loop (``FileWatch``): a watched file's directory changed. The next full tick
        comes ``tick_seconds`` after the last one began at the earliest (a busy log is read in
        batches, not once per write), :data:`LINGER` after it for a trickle."""
        self.changed = True
        # A trickle lingers (as a producer's linger.ms): a tick that read fewer than
        # TRICKLE_RECORDS records says the log is quiet, and its next lines are read with the
        # next second's tick, or at once when a job is due (an epoch closes only after its
        # records were read, so no result changes). A busy log is read every tick_seconds.
        wake = max(time.monotonic(), self.last_full + self.change_gap())
        if wake < self.next_full:
            self.next_full = wake
            self.event.set()

    async def _wait_until(self, at: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.event.wait(), max(0.0, at - time.monotonic()))

    def _due_monotonic(self, slack: float = DUE_SLACK) -> float:
        """:attr:`due` (wall clock) as a monotonic time, plus ``slack``."""
        if self.due == math.inf:
            return math.inf
        return time.monotonic() + (self.due - time.time()) + slack

    def next_wake(self, since: float, *, slack: float = DUE_SLACK) -> float:
        """The monotonic time of the next real tick when nothing is pushed and nothing needs
        polling: when the earliest job is due (:attr:`due`, plus ``slack``), and at most
        :data:`IDLE_TICK_SECONDS` after ``since`` (a job's due time can move between ticks:
        it became a master, its timer). The tick loop sleeps until it (with
        :data:`DUE_SLACK`, so that a job is due when the loop wakes); :meth:`quiet` skips
        ticks only before it (without slack: a job due now is never skipped)."""
        return min(self._due_monotonic(slack), since + IDLE_TICK_SECONDS)

    def quiet(self) -> bool:
        """Whether a full tick now would surely find nothing to do: the last tick read
        nothing, no job is due (``tick_due``: an epoch to close, a timer, a backlog), every
        job has had its first tick, and every input a job reads says it has nothing new
        (``Watchable``: a file tail whose file is unchanged since it was read to its end, a
        ``stat``; an empty ingest queue).
        False whenever it cannot tell; the record thread's state is only read, as a hint.
        Quiet ticks stop at :meth:`next_wake` after the last real one, as the loop's sleep
        does for pushed inputs."""
        # the wake first, then the clock: a job due a moment ago or now is never skipped
        if self.last_busy or self.next_wake(self.last_ticked, slack=0.0) <= time.monotonic():
            return False
        runtimes = list(self.runtimes.values())
        if any(runtime not in self.fed for runtime in runtimes):
            return False
        return self.all_unchanged({name for runtime in runtimes for name in runtime.inputs})

    def polling(self) -> bool:
        """Whether some job reads an input that is read by polling (a file tail, stdin)
        rather than pushed to the agent (``ingest``)."""
        configs, watches = self.input_configs, self.watches
        return any(
            name in configs
            and configs[name].type != "ingest"
            and not (name in watches and watches[name].active)
            for runtime in self.runtimes.values()
            for name in runtime.inputs
        )

    def tick_now(self, inputs: Sequence[str]) -> None:
        """Have the jobs reading ``inputs`` run now (read, process, close epochs), between
        ticks: the tick loop does it next, on the record thread; this returns at once."""
        self.requests.update(inputs)
        self.event.set()

    async def tick_async(self, only: set[str] | None = None) -> bool:
        """One tick: the record thread reads and processes, the loop delivers; True when
        some input had data."""
        ticked = await self.records().run(self.tick_work, only, list(self.runtimes.values()))
        return self.tick_done(ticked)

    def tick(self, only: set[str] | None = None) -> bool:
        """One tick, blocking the caller until the record thread has done its part (tools and
        tests; the agent itself ticks through :meth:`tick_async`)."""
        ticked = self.records().run_blocking(self.tick_work, only, list(self.runtimes.values()))
        return self.tick_done(ticked)

    def tick_work(self, only: set[str] | None, runtimes: list[Any]) -> Ticked:
        """Record thread: poll the inputs jobs read, feed the jobs, collect closed epochs."""
        # Only inputs some job reads are polled: unread file data stays in the file and ingested
        # records stay queued (bounded) until a job that wants them arrives. Nor are inputs a
        # job over its CPU budget reads, once its backlog is full: they back up at the source.
        wanted = {name for runtime in runtimes for name in runtime.inputs}
        if only is not None:
            wanted &= only
        install_prefilters(self.inputs, self.input_configs, runtimes)
        install_columnar(self.inputs, self.input_configs, runtimes, enabled=self.tunables.columnar)
        closed = []
        new = [runtime for runtime in runtimes if runtime not in self.fed]
        if new:  # a job new here catches up with what the others read
            readers = [runtime for runtime in runtimes if runtime in self.fed]
            for runtime in new:
                closed.extend(self.join_inputs(runtime, readers))
            self.fed.update(new)
        held = {name for runtime in runtimes if runtime.backlog_full() for name in runtime.inputs}
        polled = wanted - held
        batches = {name: self.inputs[name].poll() for name in polled}
        for runtime in runtimes:
            if only is not None and not wanted.intersection(runtime.inputs):
                continue
            try:
                work = runtime.work({name: batches.get(name, []) for name in runtime.inputs})
            except Exception as exc:
                # One job's failure is that job's: the jobs after it still get this tick's
                # records (a failing job used to starve every job behind it). Its records of
                # this tick may be lost: loud, counted, never silent.
                runtime.count("tick_errors")
                log.warning("job %s: its tick failed (other jobs go on): %r", runtime.name, exc)
                continue
            closed.append((runtime, work))
        busy = any(b or getattr(b, "skipped", 0) for b in batches.values())
        now = time.time()
        due = min((runtime.tick_due(now) for runtime in runtimes), default=math.inf)
        # the read positions as of this poll, for the loop's offset keeping (the live inputs
        # belong to this thread)
        positions = {}
        for name in polled & self.resumable:
            source = self.inputs[name]
            positions[name] = Position(source.state(), getattr(source, "origin", None))
        records = sum(len(batch) for batch in batches.values())
        return Ticked(busy, polled, closed, positions, due, records)

    def tick_done(self, ticked: Ticked) -> bool:
        """Event loop: offer the closed epochs to the trees, note the offsets."""
        now = time.time()
        for runtime, closed in ticked.closed:
            runtime.deliver(closed, now)
        self.offsets.observe(ticked.positions, ticked.polled, list(self.runtimes.values()))
        self.due = ticked.due
        self.last_busy = ticked.busy
        self.last_records, self.last_polled = ticked.records, ticked.polled
        self.last_ticked = time.monotonic()
        wake = max(self._due_monotonic(), self.last_full + self.tunables.tick_seconds)
        if wake < self.next_full:
            # sooner than the loop planned (records now wait for a job's CPU budget, say):
            # wake it to re-plan
            self.next_full = wake
            self.event.set()
        self.after_tick()
        return ticked.busy

    # ---- a job new here: the inputs the others already read ------------------------------------

    def join_inputs(self, runtime: TickedRuntime, readers: list[TickedRuntime]) -> list[Any]:
        """Record thread, at ``runtime``'s first tick, before the poll: the jobs in ``readers``
        already read its inputs (up to the shared tails' positions now). Re-read for it what
        they read of its epochs, or, where that cannot be done, mark those epochs incomplete
        on this agent (flagged, never counted as whole). Checked here rather than when the job
        is installed: a tick already under way then still feeds only the other jobs."""
        start = runtime.spec.start_epoch
        if runtime.clock is None or start is None:
            return []
        shared = {
            name
            for name in runtime.inputs
            if any(name in r.inputs and r.clock is not None for r in readers)
        }
        newest = max(
            (
                r.clock.max_seen_time
                for r in readers
                if r.clock is not None and shared.intersection(r.inputs)
            ),
            default=-math.inf,
        )
        if newest == -math.inf or runtime.spec.schedule.epoch_of(newest) < start:
            return []  # nothing of its epochs was read yet
        plan = self.replay_plan(runtime, shared, start)
        if plan is None:
            runtime.recovery.started_after_others(newest, sorted(shared))
            return []
        return self.replay(runtime, plan, newest)

    def replay_plan(
        self, runtime: TickedRuntime, shared: set[str], start: int
    ) -> dict[str, dict[str, Any]] | None:
        """Where to re-read each shared input from so that ``runtime`` gets every record of
        its start epoch on (``agent/ingest/replay.py``), or None if one cannot be re-read:
        not a file, or no position is known before which nothing of those epochs was read."""
        plan = {}
        for name in sorted(shared):
            cfg = self.input_configs.get(name)
            if cfg is None or cfg.type == "ingest" or cfg.path in (None, "-"):
                return None
            position = self.offsets.replay_from(name, start)
            if position is None:
                return None
            plan[name] = position
        return plan

    def replay(
        self, runtime: TickedRuntime, plan: dict[str, dict[str, Any]], newest: float
    ) -> list[Any]:
        """Record thread, before the tick's poll: feed ``runtime`` what the other jobs had
        read of its inputs (from the planned positions up to where the shared tails stand
        now, so this tick's batches follow on exactly). An input that cannot be re-read
        makes those epochs incomplete here instead: flagged, never counted as whole."""
        out: list[Any] = []
        for name, start in plan.items():
            source = self.inputs.get(name)
            lines = 0
            try:
                if not isinstance(source, FileTail):
                    raise ReplayError("not a file tail")
                now = source.state()
                if now["inode"] != start.get("inode"):
                    raise ReplayError("the input moved on to another file")
                ranged = replay_range(
                    self.input_configs[name],
                    start,
                    now["offset"],
                    max_bytes=self.tunables.replay_max_bytes,
                )
                for batch in ranged:
                    lines += len(batch)
                    work = runtime.work({n: batch if n == name else [] for n in runtime.inputs})
                    out.append((runtime, work))
            except (ReplayError, OSError) as exc:
                self.count("replays_failed")
                log.warning(
                    "job %s: input %s cannot be re-read for its first epochs (%s)",
                    runtime.name,
                    name,
                    exc,
                )
                runtime.recovery.started_after_others(newest, [name])
                continue
            self.count("replays")
            log.info(
                "job %s: re-read %d records of input %s that other jobs had read before it "
                "started (from byte %s)",
                runtime.name,
                lines,
                name,
                start.get("offset"),
            )
        return out
