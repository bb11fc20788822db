"""One demo run's options and the model its view renders.

Contract: :class:`DemoConfig` validates the ``elf demo`` options at construction
(``ValueError`` naming the flag). :class:`DemoState` is everything the screen and the summary
show; the poller (:mod:`apps.demo.poll`) and the driver (:mod:`apps.demo.run`) write it, the
renderers (:mod:`apps.demo.render`) only read it. It is touched from the driver's thread
only (the feed thread's counters are copied in by the poller).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from apps.demo.jobs import JOBS


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
    #: the shown result's quality: tentative, its coverage and (top-k jobs) accuracy estimate
    tentative: bool = False
    coverage: float | None = None
    accuracy: float | None = None


@dataclass
class DemoState:
    """Everything the view renders (module contract)."""

    config: DemoConfig
    workdir: Path
    started: float = field(default_factory=time.monotonic)
    run_started: float | None = None  # when the feed started (the duration counts from here)
    run_ended: float | None = None  # when it stopped
    phase: str = "starting"
    start_epoch: int = 0  # the jobs' first epoch (set when they are submitted)
    jobs: dict[str, JobView] = field(default_factory=lambda: {j: JobView() for j in JOBS})
    promoted: dict[str, Any] = field(default_factory=dict)  # one agent's local copy
    prediction: dict[str, Any] = field(default_factory=dict)
    spam_filter: str = "all tweets"
    change: dict[str, Any] | None = None
    history: list[str] = field(default_factory=list)
    written: dict[str, int] = field(default_factory=dict)
    gone: set[int] = field(default_factory=set)  # agent processes seen exited
    spark_rows: list[dict[str, Any]] = field(default_factory=list)
    spark_note: str = ""
    outcome: str = "done"  # done | interrupted | failed
    feed_error_shown: bool = False
    dashboard_url: str = ""  # the first agent's dashboard; its #token= is this demo's token

    @property
    def lake_dir(self) -> Path:
        """The rollup lake every agent writes (``ELF_LAKE``)."""
        return self.workdir / "lake"

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.started

    @property
    def running(self) -> float:
        """Seconds since the feed started (0 before)."""
        if self.run_started is None:
            return 0.0
        return (self.run_ended or time.monotonic()) - self.run_started

    def log(self, text: str) -> None:
        self.history.append(f"[t={self.elapsed:5.1f}s] {text}")
