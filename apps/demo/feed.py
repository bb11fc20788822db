"""The demo's live logs: seeded clickstream and tweet lines appended at their event time.

Contract: :class:`LiveFeed` is a daemon thread that, from the moment it starts, appends to
each agent's two files (clicks, tweets) the events of one seeded
:class:`~apps.workload.ClickstreamGenerator` and one :class:`~apps.workload.TweetGenerator`
per agent (seed ``seed * 1000 + agent index``; :data:`CLICK_USERS` / :data:`TWEET_USERS`
users, the shared catalogue of :data:`PRODUCTS` products, the "bought together" groups of
:func:`demo_bundles` planted in the clicks, every click with the ``request_time`` its product
page took), each event once its event time has come, ``rate`` events per second per agent
and stream, flushed every ``tick`` seconds.
``written`` counts the lines per stream. ``finish_at(t)`` writes every event before ``t`` and
stops; ``stop()`` stops now. A failure stops the feed and is kept in ``error`` (the demo
shows it and goes on without new data); the files are closed either way.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

from apps.workload import (
    ClickstreamGenerator,
    TweetGenerator,
    json_line,
    make_catalogue,
    plant_bundles,
)

PRODUCTS, CLICK_USERS, TWEET_USERS = 300, 400, 2000
BUNDLES = 8  # planted "bought together" groups


def demo_catalogue(seed: int) -> list[dict[str, Any]]:
    """The catalogue the feed's clicks and the Spark step share."""
    return make_catalogue(PRODUCTS, seed=seed)


def demo_bundles(catalogue: list[dict[str, Any]], seed: int) -> list[list[str]]:
    """The "bought together" groups the feed plants (product-bundling should find them)."""
    return plant_bundles(catalogue, BUNDLES, seed=seed)


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
        bundles = demo_bundles(self.catalogue, self.seed)
        for i, (clicks, tweets) in enumerate(self.files):
            seed = self.seed * 1000 + i
            c = ClickstreamGenerator(
                seed=seed,
                users=CLICK_USERS,
                rate=self.rate,
                start=start,
                catalogue=self.catalogue,
                bundles=bundles,
                request_times=True,
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
