"""The chaos harness's workload: JSON lines appended to one file per agent, as web servers
write their logs.

Contract: :class:`LogWriter` appends lines ``{"ts": now, "line": words, "page": p, "seq": s}``
(words drawn Zipf-like from :data:`WORDS`, pages uniformly from :data:`PAGES`) to each of its
files at a fixed rate, from one thread, until stopped; it keeps writing the file of an agent
that is down (a web server does not stop logging when the agent dies) unless told the host is
gone (:meth:`LogWriter.silence`); :meth:`LogWriter.burst` appends many lines to one file at
once (a backlog), all stamped with the time of that write. Only the writer's thread writes
the files, so lines never interleave. A burst's lines are built in the caller's thread, not
the writer's: building 300,000 lines takes seconds, and built by the writer they stalled every
file's steady lines for two epochs - a dip in all origins' rates that no real fleet shows at
once, which moved the masters' rate estimates (the median of 8 epochs) by a quarter. The
reference (:mod:`agent.server.chaos`) reads the files back: what was written is what is
counted.
"""

from __future__ import annotations

import itertools
import json
import random
import threading
import time
from pathlib import Path

WORDS = [f"w{i}" for i in range(60)] + ["alpha", "beta", "gamma", "delta"]
#: word frequencies are Zipf-like (s = 1.1), as words, paths and products are in real logs:
#: a top-k then has a meaningful head (with uniform words it would be ties all the way)
WORD_WEIGHTS = [1 / (rank + 1) ** 1.1 for rank in range(len(WORDS))]
PAGES = [f"/p/{i}" for i in range(12)]


#: a burst's lines are built with this timestamp, then stamped with the time of the write
_BURST_TS = -1.5
_BURST_STAMP = json.dumps({"ts": _BURST_TS})[1:-1]


class LogWriter:
    """Appends JSON lines to ``paths`` at ``rate`` lines per second per file (module
    contract). Lines are timestamped when written; a file's lines are in time order."""

    def __init__(self, paths: list[Path], rate: float = 20.0, seed: int = 1) -> None:
        self.paths = paths
        self.rate = rate
        self.seed = seed
        self.rng = random.Random(seed)
        self.written = 0
        self._stop = threading.Event()
        self._progress = threading.Condition()
        self._thread = threading.Thread(target=self._run, name="chaos-writer", daemon=True)
        self._seqs = itertools.count(1)  # next() is atomic: the writer and a burst's builder
        self._silent: set[int] = set()  # files no longer written: their host died for good
        self._bursts: list[tuple[int, int, str]] = []  # (file index, lines, text) to append
        self._bursts_asked = 0
        self._bursts_done = 0
        self.burst_stamps: list[float] = []  # each burst's timestamp (all its lines')

    def silence(self, index: int) -> None:
        """Stop writing file ``index`` (its host is gone for good, web server included)."""
        self._silent.add(index)

    def burst(self, index: int, lines: int, timeout: float = 60.0) -> None:
        """Append ``lines`` lines to file ``index`` at once, from the writer's thread (a file
        is only ever written by it): a backlog, as a burst of traffic or a restarted web
        server's buffered log leaves one; every line is timestamped with the time of that
        write. Returns once they are written. The lines are built here, in the caller's
        thread, with their own random stream: the writer's steady lines keep their pace."""
        with self._progress:
            rng = random.Random(f"{self.seed}-burst-{self._bursts_asked}")
        text = "".join(self._line(_BURST_TS, rng) + "\n" for _ in range(lines))
        with self._progress:
            self._bursts.append((index, lines, text))
            self._bursts_asked += 1
            ticket = self._bursts_asked
            if not self._progress.wait_for(lambda: self._bursts_done >= ticket, timeout):
                raise TimeoutError(f"a burst of {lines} lines not written in {timeout} s")

    def start(self) -> LogWriter:
        for p in self.paths:
            p.touch()
        self._thread.start()
        return self

    def _run(self) -> None:
        files = [p.open("a") for p in self.paths]
        interval = 0.05
        due = 0.0  # lines owed per file (fractional rates accumulate)
        try:
            while not self._stop.wait(interval):
                due += self.rate * interval
                n, due = int(due), due - int(due)
                live = [f for i, f in enumerate(files) if i not in self._silent]
                for f in live:
                    for _ in range(n):
                        f.write(self._line() + "\n")
                    f.flush()
                with self._progress:
                    bursts, self._bursts = self._bursts, []
                for index, _, text in bursts:
                    # every line of a burst is stamped with the time it is written (building
                    # 300,000 lines takes seconds: stamped as built, the first would be late)
                    now = time.time()
                    self.burst_stamps.append(now)
                    stamp = json.dumps({"ts": now})[1:-1]
                    files[index].write(text.replace(_BURST_STAMP, stamp))
                    files[index].flush()
                with self._progress:
                    self.written += n * len(live) + sum(lines for _, lines, _ in bursts)
                    self._bursts_done += len(bursts)
                    self._progress.notify_all()
        finally:
            for f in files:
                f.close()

    def _line(self, ts: float | None = None, rng: random.Random | None = None) -> str:
        rng = rng or self.rng
        n = rng.randrange(1, 6)
        words = " ".join(rng.choices(WORDS, weights=WORD_WEIGHTS, k=n))
        when = time.time() if ts is None else ts
        record = {"ts": when, "line": words.upper(), "page": rng.choice(PAGES)}
        return json.dumps({**record, "seq": next(self._seqs)})

    def wait_written(self, lines: int, timeout: float) -> bool:
        """Wait until at least ``lines`` lines are written in all (False after ``timeout``)."""
        with self._progress:
            return self._progress.wait_for(lambda: self.written >= lines, timeout)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
