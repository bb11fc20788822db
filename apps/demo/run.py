"""The demo's orchestration: cluster, jobs, feed, the polling loop, the end (the package's
contract, :mod:`apps.demo`).

Contract: :func:`run_demo` runs one demo and returns its exit code (0 done, 1 failed, 130
interrupted); SIGINT and SIGTERM stop it cleanly (also when the parent started it with
SIGINT ignored). :class:`Demo` owns the run's resources — the
:class:`~agent.server.cluster.LocalCluster`, the :class:`~apps.demo.feed.LiveFeed` — and
implements :class:`apps.demo.poll.Agents` for the poller: API clients per agent, the live
ones, and :class:`ClusterGone` once every agent process exited. ``Demo.stop`` is idempotent
and ignores SIGINT/SIGTERM while it runs, so no agent process outlives the demo.
"""

from __future__ import annotations

import math
import signal
import tempfile
import threading
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agent.client import ApiClient
from apps.demo.feed import LiveFeed, demo_catalogue
from apps.demo.jobs import JOBS, WINDOW_EPOCHS, job_specs
from apps.demo.poll import POLL_TIMEOUT, Poller
from apps.demo.render import plain_lines, render, spark_lines, summary_lines
from apps.demo.spark import lake_files, run_spark
from apps.demo.state import DemoConfig, DemoState

if TYPE_CHECKING:
    from agent.server.cluster import LocalCluster


class ClusterGone(RuntimeError):
    """Every agent process of the demo exited (killed, crashed, or stopped from outside)."""


class Demo:
    """One demo run's resources: cluster, feed, jobs, poller (module contract)."""

    def __init__(self, config: DemoConfig, out: Callable[[str], None] = print) -> None:
        self.config = config
        self.out = out
        root = config.workdir or Path(tempfile.mkdtemp(prefix="elf-demo-"))
        self.workdir = Path(root).resolve()
        self.state = DemoState(config, self.workdir)
        self.poller = Poller(self.state, self)
        self.cluster: LocalCluster | None = None
        self.feed: LiveFeed | None = None
        self.catalogue = demo_catalogue(config.seed)
        self._agent_urls: list[str] = []
        self.files: list[tuple[Path, Path]] = []

    @property
    def start_epoch(self) -> int:
        return self.state.start_epoch

    # ---- set-up ---------------------------------------------------------------------------
    def start_cluster(self) -> None:
        from agent.server.cluster import LocalCluster  # the agent runtime: only when run

        cfg = self.config
        self.workdir.mkdir(parents=True, exist_ok=True)
        logs = self.workdir / "logs"
        logs.mkdir(exist_ok=True)
        files = [
            (logs / f"clicks-{i}.jsonl", logs / f"tweets-{i}.jsonl") for i in range(cfg.agents)
        ]
        for clicks, tweets in files:
            clicks.touch()
            tweets.touch()
        inputs = {i: {"clicks": str(c), "tweets": str(t)} for i, (c, t) in enumerate(files)}
        self.cluster = LocalCluster(
            cfg.agents,
            self.workdir / "cluster",
            inputs=inputs,
            env={"ELF_LAKE": str(self.state.lake_dir)},
        )
        self.files = files
        self.cluster.start(timeout=120)
        self._agent_urls = [p.api_url for p in self.cluster.procs]
        self.cluster.wait_settled(120)

    def check_agents(self) -> None:
        """Log agent processes that exited; :class:`ClusterGone` when none is left."""
        if self.cluster is None:
            return
        gone = [p.index for p in self.cluster.procs if p.process.poll() is not None]
        for i in gone:
            if i not in self.state.gone:
                self.state.gone.add(i)
                code = self.cluster.procs[i].process.returncode
                self.state.log(f"agent process {i} exited (code {code})")
        if len(gone) == len(self.cluster.procs):
            raise ClusterGone("every agent process exited; see cluster/agent-*/stderr.log")

    def client(self, index: int = 0, timeout: float = POLL_TIMEOUT) -> ApiClient:
        assert self.cluster is not None
        return ApiClient(self._agent_urls[index], self.cluster.token, timeout=timeout)

    def alive(self, n: int) -> int:
        """The index of the ``n``-th agent process still running (cycling), else ``n``."""
        alive = [i for i in range(len(self._agent_urls)) if i not in self.state.gone]
        return alive[n % len(alive)] if alive else n % max(1, len(self._agent_urls))

    def submit_jobs(self) -> None:
        e = self.config.epoch_seconds
        self.state.start_epoch = math.floor(time.time() / e) + 1
        client = self.client(0, timeout=60)
        for spec in job_specs(e, self.state.start_epoch):
            reply = client.submit(spec)
            view = self.state.jobs[spec["name"]]
            view.agents = int(reply.get("agents_reached") or 0)
            view.multicast_ms = reply.get("multicast_ms")
        deadline = time.monotonic() + 60
        for i in range(self.config.agents):
            while set(JOBS) - set(self.client(i).status().get("jobs", {})):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the demo jobs did not reach agent {i} within 60 s")
                time.sleep(0.1)  # polling another process's state

    def start_feed(self) -> None:
        self.feed = LiveFeed(
            self.files, self.catalogue, rate=self.config.rate, seed=self.config.seed
        )
        self.feed.start()
        self.poller.feed = self.feed

    # ---- the end --------------------------------------------------------------------------
    def stop(self) -> None:
        """Stop the feed and the cluster (idempotent; SIGINT and SIGTERM are ignored while
        stopping, so a second Ctrl-C cannot leave agent processes behind)."""
        main = threading.current_thread() is threading.main_thread()
        signals = (signal.SIGINT, signal.SIGTERM) if main else ()
        previous = {s: signal.signal(s, signal.SIG_IGN) for s in signals}
        try:
            if self.feed is not None:
                self.feed.stop()
                self.state.written = dict(self.feed.written)
                if self.state.run_started is not None and self.state.run_ended is None:
                    self.state.run_ended = time.monotonic()
            if self.cluster is not None:
                self.cluster.stop(timeout=20)
                self.cluster = None
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)


# ---- the driver ----------------------------------------------------------------------------


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def run_demo(config: DemoConfig) -> int:
    """Run the demo (module contract); returns the exit code. SIGINT and SIGTERM stop it
    cleanly (also when the parent started it with SIGINT ignored)."""
    if threading.current_thread() is threading.main_thread():
        previous = {s: signal.signal(s, _interrupt) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            return _run(config)
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)
    return _run(config)


def _run(config: DemoConfig) -> int:
    from rich.console import Console

    console = Console(highlight=False)
    live_view = console.is_terminal if config.live is None else config.live
    demo = Demo(config, out=partial(console.print, markup=False) if live_view else print)
    st = demo.state
    say = demo.out
    code = 0
    try:
        say(f"ELF demo: starting {config.agents} agents on loopback in {demo.workdir} ...")
        demo.start_cluster()
        # open while the demo runs: the agents stop with it. The link carries this demo's own
        # API token in its #fragment (browsers never send a fragment to the server).
        st.dashboard_url = demo.client(0).dashboard_url(with_token=True)
        say(f"dashboard (open in a browser while the demo runs): {st.dashboard_url}")
        st.phase = "submitting jobs"
        demo.submit_jobs()
        say(
            f"jobs running from epoch {demo.start_epoch}: {', '.join(JOBS)}; epochs of "
            f"{config.epoch_seconds:g} s, windows of {WINDOW_EPOCHS} epochs (the paper's "
            f"30 s / 300 s scaled down)"
        )
        demo.start_feed()
        st.phase, st.run_started = "running", time.monotonic()
        _drive(demo, console, live_view)
        st.phase = "draining"
        say("stopping the event feed; waiting for the last epochs ...")
        e = config.epoch_seconds
        last = math.floor(time.time() / e)  # the feed ends with this epoch: a full one
        if demo.feed is not None:
            demo.feed.finish_at((last + 1) * e)
            st.run_ended = time.monotonic()
        demo.poller.wait_last_epochs(last, timeout=4 * config.epoch_seconds + 10)
        if not live_view:
            for line in plain_lines(st):
                say(line)
    except KeyboardInterrupt:
        st.outcome, code = "interrupted", 130
    except Exception as exc:  # ClusterGone, ClusterError, ApiError...: said, then a clean stop
        say(f"ERROR: {exc}")
        st.outcome, code = "failed", 1
    finally:
        try:
            demo.stop()
        except KeyboardInterrupt:
            st.outcome, code = "interrupted", 130
    for line in summary_lines(st, _lake(st)):
        say(line)
    if config.spark and code == 0:
        say("running the historical join in Spark (promotion lift over the lake) ...")
        try:
            ok = run_spark(st, demo.catalogue)
        except KeyboardInterrupt:
            st.spark_note, ok, code = "Spark step interrupted", True, 130
        for line in spark_lines(st):
            say(line)
        if not ok:
            code = 1
    elif not config.spark:
        say("Spark step skipped (--no-spark)")
    else:
        say("Spark step skipped: the run did not finish")
    return code


def _drive(demo: Demo, console: Any, live_view: bool) -> None:
    """The polling loop until the duration ends (or Ctrl-C, which propagates)."""
    cfg, st = demo.config, demo.state
    zoom_at = cfg.duration / 3 if cfg.duration else 20 * cfg.epoch_seconds
    interval = max(0.5, min(2.0, cfg.epoch_seconds))
    t_run = time.monotonic()
    seen_events = 0
    if live_view:
        from rich.live import Live

        with Live(render(st), console=console, refresh_per_second=4, transient=False) as live:
            while not _done(cfg, t_run):
                demo.poller.poll()
                if st.change is None and time.monotonic() - t_run >= zoom_at:
                    demo.poller.zoom_spam()
                live.update(render(st))
                _sleep_until(time.monotonic() + interval, cfg, t_run)
        return
    while not _done(cfg, t_run):
        demo.poller.poll()
        if st.change is None and time.monotonic() - t_run >= zoom_at:
            demo.poller.zoom_spam()
        for line in st.history[seen_events:]:
            demo.out(line)
        seen_events = len(st.history)
        for line in plain_lines(st):
            demo.out(line)
        _sleep_until(time.monotonic() + interval, cfg, t_run)


def _done(cfg: DemoConfig, t_run: float) -> bool:
    return bool(cfg.duration) and time.monotonic() - t_run >= cfg.duration


def _sleep_until(t: float, cfg: DemoConfig, t_run: float) -> None:
    end = t_run + cfg.duration if cfg.duration else t
    time.sleep(max(0.0, min(t, end) - time.monotonic()))  # the screen's refresh pace


def _lake(st: DemoState) -> dict[str, int] | None:
    """Parquet files per job in the lake (None: unreadable; the summary leaves it out)."""
    try:
        return lake_files(st.lake_dir)
    except Exception:
        return None
