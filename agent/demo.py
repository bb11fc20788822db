"""``elf demo``: the product's main demo on an embedded default (one command, no set-up).

Contract (:func:`run_demo`, see ``docs/demo.md``):

1. Starts a :class:`~agent.server.cluster.LocalCluster` of ``agents`` real agent processes on
   loopback; every process has two file inputs (``clicks``, ``tweets``) in the work
   directory and writes the rollup lake ``<workdir>/lake`` (``ELF_LAKE``).
2. Submits micro-promotion, product-bundling, sale-prediction and spam-campaign (job specs
   built here as plain dicts: ``agent`` never imports ``apps``) with short epochs
   (``epoch_seconds``) and the paper's 10-epoch windows, all starting at the same epoch.
3. :class:`LiveFeed` (a background thread) appends seeded clickstream and tweet JSON lines
   (``agent.workload``) to every agent's files at their event time, ``rate`` events per
   second per agent and stream.
4. Every tick it polls the cluster through the HTTP API (results from the masters, the
   promoted list from an agent's local copy, the masters' multicast latency) and shows it: a
   refreshing ``rich`` view on a terminal, plain ``[t=..s]`` lines otherwise.
5. At a third of the duration it zooms spam-campaign's filter at runtime
   (``POST /api/v1/jobs/spam-campaign/change``) and prints the applied time; every tick it
   asks sale-prediction about the top promoted product (a cross-job routed query).
6. At the end (``duration`` elapsed or Ctrl-C) it stops the feed, waits for the last data
   epoch's results (not after Ctrl-C), stops the cluster (SIGTERM, graceful; kill after a
   timeout), prints a summary, and — unless ``spark`` is False or it was interrupted — runs
   the promotion-lift historical join in Spark over the lake with the catalogue and a
   past-sales table it generated, and prints the top rows.

Exit codes: 0 done (also when Java is missing: the Spark step prints why and is skipped),
1 the cluster or the Spark job failed, 130 interrupted by Ctrl-C (after a clean stop).
No process the demo started outlives it.
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, TextIO

from agent.client import ApiClient, ApiError
from agent.server.cluster import LocalCluster
from agent.workload import ClickstreamGenerator, TweetGenerator, json_line, make_catalogue

PROMOTION, BUNDLING, PREDICTION, SPAM = (
    "micro-promotion",
    "product-bundling",
    "sale-prediction",
    "spam-campaign",
)
DATA_JOBS = (PROMOTION, BUNDLING, SPAM)
JOBS = (PROMOTION, BUNDLING, SPAM, PREDICTION)
CREATOR = "demo"
WINDOW_EPOCHS = 10  # the paper's windows are 10 epochs (300 s every 30 s)
PAPER_EPOCH_SECONDS = 30.0
PRODUCTS, CLICK_USERS, TWEET_USERS = 300, 400, 2000
ZOOM = {"locations": [None], "max_followers": 30}  # tweets with no location, ≤ 30 followers
ZOOM_TEXT = "location none, followers <= 30"
POLL_TIMEOUT = 5.0
SPARK_CONF = {"spark.log.level": "ERROR", "spark.ui.showConsoleProgress": "false"}


@dataclass
class DemoConfig:
    """Options of one demo run (``elf demo --help``)."""

    agents: int = 8
    duration: float = 60.0  # seconds; 0 = until Ctrl-C
    workdir: Path | None = None
    epoch_seconds: float = 2.0
    rate: float = 100.0  # events per second per agent, for each of the two streams
    spark: bool = True
    seed: int = 0
    live: bool | None = None  # None: the rich view when stdout is a terminal

    def __post_init__(self) -> None:
        if self.agents < 1:
            raise ValueError("--agents must be at least 1")
        if self.duration < 0:
            raise ValueError("--duration must be >= 0 seconds (0 = until Ctrl-C)")
        if not 0.2 <= self.epoch_seconds <= 3600:
            raise ValueError("--epoch-seconds must be in [0.2, 3600]")
        if not self.rate > 0:
            raise ValueError("--rate must be > 0 events per second")


def job_specs(epoch_seconds: float, start_epoch: int) -> list[dict[str, Any]]:
    """The four demo jobs' specs (the apps' paper defaults, windows in epochs)."""
    common = {
        "creator": CREATOR,
        "epoch_seconds": epoch_seconds,
        "start_epoch": start_epoch,
        "allowed_lateness": min(1.0, epoch_seconds / 2),
    }
    return [
        {
            "name": PROMOTION,
            "job_class": PROMOTION,
            "aggregator": "count",
            "mode": "batch",
            "inputs": ["clicks"],
            **common,
            "params": {
                "k": 10,
                "directory": "Video Games",
                "window_epochs": WINDOW_EPOCHS,
                "slide_epochs": 1,
            },
        },
        {
            "name": BUNDLING,
            "job_class": BUNDLING,
            "aggregator": "collect_set",
            "mode": "window",
            "window_size": WINDOW_EPOCHS,
            "window_slide": 1,
            "inputs": ["clicks"],
            **common,
            "params": {"min_support": 3, "group_by": "session", "popular_size": 3},
        },
        {
            "name": SPAM,
            "job_class": SPAM,
            "aggregator": "count",
            "inputs": ["tweets"],
            **common,
            "params": {"k": 10},
        },
        {
            "name": PREDICTION,
            "job_class": PREDICTION,
            "creator": CREATOR,
            "inputs": ["none"],  # master-only: no agent has this input, so no worker runs
            "params": {"promotion_job": PROMOTION, "bundling_job": BUNDLING},
        },
    ]


class LiveFeed(threading.Thread):
    """Appends live clickstream and tweet JSON lines to each agent's two files, each event at
    its event time (``rate`` per second per agent and stream; one seeded generator each)."""

    def __init__(
        self,
        files: list[tuple[Path, Path]],
        catalogue: list[dict[str, Any]],
        *,
        rate: float,
        seed: int = 0,
        tick: float = 0.1,
    ) -> None:
        super().__init__(name="elf-demo-feed", daemon=True)
        self.files = files
        self.catalogue = catalogue
        self.rate = rate
        self.seed = seed
        self.tick = tick
        self.written = {"clicks": 0, "tweets": 0}
        self.error: BaseException | None = None
        self._stop_event = threading.Event()
        self.until: float | None = None  # no event at or after this time is written
        self.started_at: float | None = None  # the first events' time (set by run)

    def stop(self, timeout: float = 10.0) -> None:
        """Stop now (events due so far are written)."""
        self._stop_event.set()
        if self.is_alive():
            self.join(timeout)

    def finish_at(self, until: float, timeout: float = 10.0) -> None:
        """Write every event before event time ``until`` (waiting for it), then stop."""
        self.until = until
        if self.is_alive():
            self.join(max(0.0, until - time.time()) + timeout)
        self.stop()

    def _streams(self, start: float) -> list[tuple[str, Iterator[dict[str, Any]], TextIO]]:
        streams = []
        for i, (clicks, tweets) in enumerate(self.files):
            seed = self.seed * 1000 + i
            c = ClickstreamGenerator(
                seed=seed, users=CLICK_USERS, rate=self.rate, start=start, catalogue=self.catalogue
            )
            t = TweetGenerator(seed=seed, users=TWEET_USERS, rate=self.rate, start=start)
            streams.append(("clicks", iter(c), open(clicks, "a")))  # noqa: SIM115 - closed in run
            streams.append(("tweets", iter(t), open(tweets, "a")))  # noqa: SIM115
        return streams

    def run(self) -> None:
        self.started_at = time.time()
        streams = self._streams(self.started_at)
        pending = [next(events) for _, events, _ in streams]
        try:
            while not self._stop_event.is_set():
                now = time.time()
                until = self.until
                limit = now if until is None else min(now, until - 1e-6)
                for n, (kind, events, out) in enumerate(streams):
                    lines = []
                    event = pending[n]
                    while event["ts"] <= limit:
                        lines.append(json_line(event))
                        event = next(events)
                    pending[n] = event
                    if lines:
                        out.write("\n".join(lines) + "\n")
                        out.flush()
                        self.written[kind] += len(lines)
                if until is not None and now >= until:
                    return
                self._stop_event.wait(self.tick)
        except BaseException as exc:  # shown on screen; the demo goes on without new data
            self.error = exc
        finally:
            for _, _, out in streams:
                out.close()


@dataclass
class JobView:
    """What the screen shows for one job."""

    epoch: int | None = None
    epochs_done: int = 0
    agents: int = 0
    multicast_ms: float | None = None
    rows: list[Any] = field(default_factory=list)
    note: str = ""
    error: str = ""


@dataclass
class DemoState:
    """Everything the view renders, updated by :meth:`Demo.poll`."""

    config: DemoConfig
    workdir: Path
    started: float = field(default_factory=time.monotonic)
    run_started: float | None = None  # when the feed started (the duration counts from here)
    run_ended: float | None = None  # when it stopped
    phase: str = "starting"
    jobs: dict[str, JobView] = field(default_factory=lambda: {j: JobView() for j in JOBS})
    promoted: dict[str, Any] = field(default_factory=dict)  # one agent's local copy
    prediction: dict[str, Any] = field(default_factory=dict)
    spam_filter: str = "all tweets"
    change: dict[str, Any] | None = None
    history: list[str] = field(default_factory=list)
    written: dict[str, int] = field(default_factory=dict)
    spark_rows: list[dict[str, Any]] = field(default_factory=list)
    spark_note: str = ""
    outcome: str = "done"  # done | interrupted | failed

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.started

    @property
    def running(self) -> float:
        """Seconds since the feed started (0 before)."""
        if self.run_started is None:
            return 0.0
        return (self.run_ended or time.monotonic()) - self.run_started

    feed_error_shown: bool = False

    def log(self, text: str) -> None:
        self.history.append(f"[t={self.elapsed:5.1f}s] {text}")


class ClusterGone(RuntimeError):
    """Every agent process of the demo exited (killed, crashed, or stopped from outside)."""


class Demo:
    """One demo run: cluster, feed, jobs, polling, runtime change, Spark (module contract)."""

    def __init__(self, config: DemoConfig, out: Callable[[str], None] = print) -> None:
        self.config = config
        self.out = out
        root = config.workdir or Path(tempfile.mkdtemp(prefix="elf-demo-"))
        self.workdir = Path(root).resolve()
        self.lake_dir = self.workdir / "lake"
        self.state = DemoState(config, self.workdir)
        self.cluster: LocalCluster | None = None
        self.feed: LiveFeed | None = None
        self.start_epoch = 0
        self.catalogue = make_catalogue(PRODUCTS, seed=config.seed)
        self._tick = 0
        self._agent_urls: list[str] = []
        self._gone: set[int] = set()  # agent processes seen exited
        self.files: list[tuple[Path, Path]] = []

    # ---- set-up ---------------------------------------------------------------------------
    def start_cluster(self) -> None:
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
            env={"ELF_LAKE": str(self.lake_dir)},
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
            if i not in self._gone:
                self._gone.add(i)
                code = self.cluster.procs[i].process.returncode
                self.state.log(f"agent process {i} exited (code {code})")
        if len(gone) == len(self.cluster.procs):
            raise ClusterGone("every agent process exited; see cluster/agent-*/stderr.log")

    def client(self, index: int = 0, timeout: float = POLL_TIMEOUT) -> ApiClient:
        assert self.cluster is not None
        return ApiClient(self._agent_urls[index], self.cluster.token, timeout=timeout)

    def alive(self, n: int) -> int:
        """The index of the ``n``-th agent process still running (cycling), else ``n``."""
        alive = [i for i in range(len(self._agent_urls)) if i not in self._gone]
        return alive[n % len(alive)] if alive else n % max(1, len(self._agent_urls))

    def submit_jobs(self) -> None:
        e = self.config.epoch_seconds
        self.start_epoch = math.floor(time.time() / e) + 1
        client = self.client(0, timeout=60)
        for spec in job_specs(e, self.start_epoch):
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

    # ---- polling --------------------------------------------------------------------------
    def poll(self, epoch: int | None = None) -> None:
        """One round of API calls that refreshes :attr:`state` (errors shown, never raised);
        the data jobs' results of ``epoch`` (default: the newest). Raises
        :class:`ClusterGone` when no agent process is left."""
        self._tick += 1
        st = self.state
        self.check_agents()
        if self.feed is not None:
            st.written = dict(self.feed.written)
            if self.feed.error is not None and not st.feed_error_shown:
                st.feed_error_shown = True
                st.log(f"the event feed stopped: {self.feed.error!r}")
        client = self.client(self.alive(0))
        for name in DATA_JOBS:
            view = st.jobs[name]
            try:
                res = client.results(name, epoch)
            except ApiError as exc:
                wait = "the first epoch" if epoch is None else f"epoch {epoch}"
                view.error = f"waiting for {wait}" if exc.status == 404 else str(exc)
                continue
            view.error = ""
            if view.epoch != res.get("epoch"):
                view.epoch = res.get("epoch")
                view.epochs_done = (view.epoch or 0) - self.start_epoch + 1
                view.rows = list(res.get("rows") or [])
        self._poll_promoted()
        self._poll_prediction()
        if self._tick % 3 == 1:
            self._poll_status()

    def _poll_promoted(self) -> None:
        st = self.state
        index = self.alive(self._tick)  # any agent answers from its own copy
        try:
            local = self.client(index).local(PROMOTION)
        except ApiError as exc:
            st.jobs[PROMOTION].note = f"local view: {exc}"
            return
        st.promoted = {**local, "agent": index}
        top = local.get("top") or []
        if local.get("epoch") is not None:
            st.jobs[
                PROMOTION
            ].note = (
                f"read from agent {index}'s own copy (multicast by the master), {len(top)} promoted"
            )

    def _poll_prediction(self) -> None:
        st = self.state
        top = st.promoted.get("top") or []
        product = top[(self._tick // 2) % min(len(top), 3)][0] if top else "P000001"
        t0 = time.monotonic()
        try:
            reply = self.client(self.alive(self._tick)).query(PREDICTION, {"product": product})
        except ApiError as exc:
            st.jobs[PREDICTION].error = str(exc)
            return
        st.jobs[PREDICTION].error = ""
        st.prediction = {**reply, "ms": (time.monotonic() - t0) * 1000}

    def _poll_status(self) -> None:
        counts = dict.fromkeys(JOBS, 0)
        for i in range(self.config.agents):
            try:
                jobs = self.client(i).status().get("jobs", {})
            except ApiError:
                continue
            for name, job in jobs.items():
                if name not in counts:
                    continue
                if job.get("worker") is not None or name == PREDICTION:
                    counts[name] += 1
                stats = job.get("multicast_stats") or []
                if "master" in (job.get("roles") or []) and stats:
                    self.state.jobs[name].multicast_ms = stats[-1].get("ms")
        for name, n in counts.items():
            if name != PREDICTION:
                self.state.jobs[name].agents = n

    # ---- the runtime change ---------------------------------------------------------------
    def zoom_spam(self) -> None:
        st = self.state
        st.log(f"changing {SPAM}'s filter at runtime: {ZOOM_TEXT}")
        try:
            reply = self.client(self.alive(0), timeout=30).change(SPAM, {"params": ZOOM})
        except ApiError as exc:
            st.log(f"runtime change failed: {exc}")
            st.change = {"error": str(exc)}
            return
        st.change = reply
        st.spam_filter = f"zoomed: {ZOOM_TEXT}"
        st.log(
            f"runtime change of {SPAM} (version {reply.get('version')}) applied on "
            f"{reply.get('agents_reached')} agents in {_ms(reply.get('applied_ms'))}"
        )

    # ---- the end --------------------------------------------------------------------------
    def wait_last_epochs(self, last: int, timeout: float) -> None:
        """After the feed stopped: wait until every data job has epoch ``last`` (the last one
        with events) and show that epoch's results."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.poll(last)
            if all(self.state.jobs[j].epoch == last for j in DATA_JOBS):
                return
            time.sleep(min(0.5, self.config.epoch_seconds / 2))  # polling the masters
        self.state.log(f"stopped waiting for epoch {last} after {timeout:.0f} s")

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

    def lake_files(self) -> dict[str, int]:
        """Parquet files per job in the lake."""
        from spark_sink.lake import Lake

        if not self.lake_dir.exists():
            return {}
        lake = Lake(str(self.lake_dir))
        return {job: len(lake.files(job)) for job in lake.jobs()}

    def run_spark(self) -> bool:
        """The promotion-lift join over the lake; False only on an unexpected failure."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        from spark_sink.jobs.promotion_lift import promotion_lift
        from spark_sink.jobs.sales import make_sales
        from spark_sink.session import JavaMissing, check_java, get_session

        st = self.state
        catalogue_path = self.workdir / "catalogue.jsonl"
        catalogue_path.write_text("".join(json_line(p) + "\n" for p in self.catalogue))
        sales_path = self.workdir / "sales.parquet"
        schema = pa.schema([("product", pa.string()), ("date", pa.date32()), ("units", pa.int64())])
        rows = make_sales(self.catalogue, 28, seed=self.config.seed)
        pq.write_table(pa.Table.from_pylist(rows, schema=schema), sales_path)
        try:
            check_java()
        except JavaMissing as exc:
            st.spark_note = f"WARNING: Spark step skipped: {exc}"
            return True
        spark = None
        log_path = self.workdir / "spark.log"
        try:
            with _stderr_to(log_path):  # the JVM inherits it: its log4j chatter goes there
                spark = get_session("local[2]", app_name="elf-demo", conf=SPARK_CONF)
            cat = spark.read.json(str(catalogue_path))
            sales = spark.read.parquet(str(sales_path))
            ranking = promotion_lift(spark, str(self.lake_dir), cat, sales, job=PROMOTION)
            st.spark_rows = [r.asDict() for r in ranking.limit(10).collect()]
            st.spark_note = (
                f"Spark: promotion lift = micro-promotion's clicks per day (lake, "
                f"{self.lake_files().get(PROMOTION, 0)} epoch files) / past units sold per day "
                f"(28 days of sales) joined with the catalogue"
            )
            return True
        except Exception as exc:
            st.spark_note = f"ERROR: the Spark join failed: {exc} (JVM log: {log_path})"
            return False
        finally:
            if spark is not None:
                with contextlib.suppress(Exception):
                    spark.stop()


@contextlib.contextmanager
def _stderr_to(path: Path) -> Iterator[None]:
    """Point file descriptor 2 at ``path`` (children started meanwhile keep it)."""
    sys.stderr.flush()
    saved = os.dup(2)
    with open(path, "ab") as f:
        os.dup2(f.fileno(), 2)
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)


def _ms(value: Any) -> str:
    return "?" if value is None else f"{float(value):.1f} ms"


# ---- rendering -----------------------------------------------------------------------------


def _fmt_rows(name: str, rows: list[Any], n: int = 5) -> str:
    if name == SPAM:
        return ", ".join(f"{r['user']}×{r['tweets']}" for r in rows[:n] if isinstance(r, dict))
    if name == BUNDLING:
        bundles = [r for r in rows if isinstance(r, dict)]
        sizes = sorted((int(r.get("size") or 0) for r in bundles), reverse=True)
        biggest = max(bundles, key=lambda r: r.get("size") or 0, default=None)
        if not bundles:
            return "no bundles in this window"
        text = f"{len(bundles)} bundles, sizes {sizes[:6]}"
        if biggest is not None:
            text += f"; largest: {' + '.join(map(str, biggest.get('products', [])[:6]))}"
        return text
    pairs = sorted((r for r in rows if isinstance(r, list)), key=lambda r: (-r[1], r[0]))
    return ", ".join(f"{p}×{c}" for p, c in pairs[:n])


def _prediction_text(p: dict[str, Any]) -> str:
    if not p:
        return "waiting"
    if "error" in p:
        return f"error: {p['error']}"
    promo = f"promoted #{p.get('rank')}" if p.get("promoted") else "not promoted"
    bundle = (
        f"in a {'popular ' if p.get('popular_bundle') else ''}bundle of {p.get('bundle_size')}"
        if p.get("in_bundle")
        else "in no bundle"
    )
    return (
        f"{p.get('product')} → {str(p.get('prediction')).upper()} ({promo}, {bundle}; "
        f"routed query {p.get('ms', 0):.0f} ms)"
    )


def plain_lines(demo: Demo) -> list[str]:
    """The periodic plain-text report (non-terminal output)."""
    st = demo.state
    t = f"[t={st.elapsed:5.1f}s]"
    lines = []
    for name in DATA_JOBS:
        v = st.jobs[name]
        if v.epoch is None:
            lines.append(f"{t} {name}: {v.error or 'waiting for the first epoch'}")
            continue
        rows = st.promoted.get("top") or [] if name == PROMOTION else v.rows
        what = "promoted (window top)" if name == PROMOTION else "top"
        extra = f" filter={st.spam_filter}" if name == SPAM else ""
        lines.append(
            f"{t} result {name} epoch={v.epoch} epochs={v.epochs_done} agents={v.agents} "
            f"multicast={_ms(v.multicast_ms)}{extra} {what}: {_fmt_rows(name, rows)}"
        )
    if st.prediction or st.jobs[PREDICTION].error:
        text = st.jobs[PREDICTION].error or _prediction_text(st.prediction)
        lines.append(f"{t} result {PREDICTION}: {text}")
    return lines


def render(demo: Demo) -> Any:
    """The rich renderable of the live view."""
    from rich.console import Group
    from rich.markup import escape as esc
    from rich.panel import Panel
    from rich.table import Table
    from rich.text import Text

    st, cfg = demo.state, demo.config
    total = f"/{cfg.duration:.0f}" if cfg.duration else " (Ctrl-C stops)"
    scale = PAPER_EPOCH_SECONDS / cfg.epoch_seconds
    head = Text.assemble(
        ("ELF demo", "bold magenta"),
        f"  {cfg.agents} agents on loopback · {st.phase} · t={st.running:.0f}{total} s · ",
        f"events written: {st.written.get('clicks', 0)} clicks, "
        f"{st.written.get('tweets', 0)} tweets\n",
        (
            f"epochs of {cfg.epoch_seconds:g} s, windows of {WINDOW_EPOCHS} epochs "
            f"({WINDOW_EPOCHS * cfg.epoch_seconds:g} s): the paper's 30 s / 300 s scaled "
            f"down ×{scale:g} so results come quickly · work dir {st.workdir}",
            "dim",
        ),
    )
    table = Table(expand=True, show_lines=True)
    table.add_column("job", style="bold cyan", no_wrap=True)
    table.add_column("epoch", justify="right")
    table.add_column("done", justify="right")
    table.add_column("agents", justify="right")
    table.add_column("multicast", justify="right")
    table.add_column("latest result", ratio=1)
    for name in DATA_JOBS:
        v = st.jobs[name]
        if name == PROMOTION:
            body = "promoted: " + esc(_fmt_rows(name, st.promoted.get("top") or []) or "-")
            body += f"\n[dim]{esc(v.note)}[/dim]" if v.note else ""
        elif name == SPAM:
            body = f"[yellow]filter: {st.spam_filter}[/yellow]\n" + esc(
                _fmt_rows(name, v.rows) or "-"
            )
        else:
            body = esc(_fmt_rows(name, v.rows) or "-")
        if v.error:
            body = f"[dim]{esc(v.error)}[/dim]"
        table.add_row(
            name,
            "-" if v.epoch is None else str(v.epoch),
            str(max(v.epochs_done, 0)),
            str(v.agents),
            _ms(v.multicast_ms),
            body,
        )
    pred = st.jobs[PREDICTION].error or _prediction_text(st.prediction)
    table.add_row(PREDICTION, "", "", "master", "", f"asks both masters: {esc(pred)}")
    log = Panel(Text("\n".join(st.history[-4:]) or "-"), title="events", title_align="left")
    return Group(head, table, log)


def summary_lines(demo: Demo) -> list[str]:
    """The closing summary (printed also after Ctrl-C)."""
    st = demo.state
    lines = ["", f"== ELF demo summary ({st.outcome}) =="]
    lines.append(
        f"{st.running:.0f} s of live streams ({st.elapsed:.0f} s in all) on "
        f"{demo.config.agents} agents; events written: "
        f"{st.written.get('clicks', 0)} clicks, {st.written.get('tweets', 0)} tweets"
    )
    for name in DATA_JOBS:
        v = st.jobs[name]
        rows = st.promoted.get("top") or [] if name == PROMOTION else v.rows
        lines.append(
            f"{name}: {max(v.epochs_done, 0)} epochs (last {v.epoch}); {_fmt_rows(name, rows)}"
        )
    lines.append(f"{PREDICTION}: {_prediction_text(st.prediction)}")
    if demo._gone:
        lines.append(f"agent processes that exited during the run: {sorted(demo._gone)}")
    if st.change and "error" not in st.change:
        lines.append(
            f"runtime change: {SPAM} zoomed to {ZOOM_TEXT}, applied on "
            f"{st.change.get('agents_reached')} agents in {_ms(st.change.get('applied_ms'))}"
        )
    with contextlib.suppress(Exception):
        files = demo.lake_files()
        lines.append(
            f"lake {demo.lake_dir}: "
            + (", ".join(f"{j}={n} files" for j, n in sorted(files.items())) or "no files")
        )
    lines.append(f"work dir (kept): {demo.workdir}")
    return lines


def spark_lines(demo: Demo) -> list[str]:
    """The Spark step's result table (or its warning)."""
    st = demo.state
    lines = ["", st.spark_note]
    if st.spark_rows:
        lines.append(
            f"{'rank':>4}  {'product':<8}  {'name':<22}  {'clicks':>6}  {'units/day':>9}  lift"
        )
        for r in st.spark_rows:
            base, lift = r.get("baseline_units_per_day"), r.get("lift")
            lines.append(
                f"{r.get('rank'):>4}  {r.get('product')!s:<8}  {str(r.get('name'))[:22]:<22}  "
                f"{r.get('promo_clicks') or 0:>6.0f}  "
                f"{'-' if base is None else f'{base:.2f}':>9}  "
                f"{'-' if lift is None else f'{lift:.2f}'}"
            )
    return lines


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
        demo.wait_last_epochs(last, timeout=4 * config.epoch_seconds + 10)
        if not live_view:
            for line in plain_lines(demo):
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
    for line in summary_lines(demo):
        say(line)
    if config.spark and code == 0:
        say("running the historical join in Spark (promotion lift over the lake) ...")
        try:
            ok = demo.run_spark()
        except KeyboardInterrupt:
            st.spark_note, ok, code = "Spark step interrupted", True, 130
        for line in spark_lines(demo):
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

        with Live(render(demo), console=console, refresh_per_second=4, transient=False) as live:
            while not _done(cfg, t_run):
                demo.poll()
                if st.change is None and time.monotonic() - t_run >= zoom_at:
                    demo.zoom_spam()
                live.update(render(demo))
                _sleep_until(time.monotonic() + interval, cfg, t_run)
        return
    while not _done(cfg, t_run):
        demo.poll()
        if st.change is None and time.monotonic() - t_run >= zoom_at:
            demo.zoom_spam()
        for line in st.history[seen_events:]:
            demo.out(line)
        seen_events = len(st.history)
        for line in plain_lines(demo):
            demo.out(line)
        _sleep_until(time.monotonic() + interval, cfg, t_run)


def _done(cfg: DemoConfig, t_run: float) -> bool:
    return bool(cfg.duration) and time.monotonic() - t_run >= cfg.duration


def _sleep_until(t: float, cfg: DemoConfig, t_run: float) -> None:
    end = t_run + cfg.duration if cfg.duration else t
    time.sleep(max(0.0, min(t, end) - time.monotonic()))  # the screen's refresh pace
