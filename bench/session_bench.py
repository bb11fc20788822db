"""Session windows at the master: the cost of closing sessions per epoch (agent/ql/sessions.py)
against what a tumbling query's master does with the same epoch (its named rows).

Per epoch, ``keys`` GROUP BY keys of which each is active with probability 0.5 (so sessions
open, merge and close all the time; gap of 1 epoch), for ``SELECT k, count(*), sum(x),
avg(x) ... GROUP BY k``: the epoch's snapshot is built once (the reducer trees' work is the
same for both and not measured); then, timed and interleaved epoch by epoch so both sides
see the same background load, the baseline ``compiled.rows(snapshot)`` (``WINDOW 1 s``: the
master's rows of the epoch) and the session side ``SessionTracker.feed(epoch,
state_items(snapshot))`` (``WINDOW SESSION(1 s)``: merge into open sessions, close the idle
ones and name their rows). A third side, ``late``, is the session side with late records in
every epoch (the worst case of ``SessionTracker.mark_late``: the master hears of late records
of each epoch before feeding it, so every session is flagged and each key fed looks up the
marks near it). Reported: ns per active key and epoch, each side's median over the epochs,
and their ratios.

    python bench/session_bench.py            # 100 000 keys, 30 epochs
    python bench/session_bench.py --quick    # 10 000 keys, 20 epochs

Prints one JSON document on stdout.
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import statistics
import time
from typing import Any

from agent.ql import compile_query
from agent.ql.sessions import SessionTracker, state_items
from cbt import CompressedBufferTree

SELECT = "SELECT k, count(*) AS n, sum(x) AS s, avg(x) AS a FROM t GROUP BY k"


def epoch_snapshot(query: Any, keys: int, rng: random.Random) -> tuple[Any, int]:
    tree = CompressedBufferTree(query.make_aggregator())
    active = 0
    for k in range(keys):
        if rng.random() < 0.5:
            active += 1
            for _ in range(rng.randint(1, 3)):
                for key, value in query.map({"k": f"user{k}", "x": rng.randint(0, 1000)}):
                    tree.insert(key, value)
    return tree.flush(), active


def run(keys: int, epochs: int, seed: int = 1) -> dict[str, Any]:
    tumbling = compile_query(SELECT + " WINDOW 1 s")
    session = compile_query(SELECT + " WINDOW SESSION(1 s)")
    tracker, marked = (
        SessionTracker(
            session.make_aggregator(), session.row, lambda e: (float(e), e + 1.0), max_open=keys
        )
        for _ in range(2)
    )
    rng = random.Random(seed)
    base_ns, sess_ns, late_ns, rows_out = [], [], [], 0
    for epoch in range(epochs):
        snap, active = epoch_snapshot(session, keys, rng)
        t0 = time.perf_counter_ns()
        tumbling.rows(snap)
        t1 = time.perf_counter_ns()
        rows_out += len(tracker.feed(epoch, state_items(snap)))
        t2 = time.perf_counter_ns()
        marked.mark_late(epoch, f"late records of epoch {epoch}")
        marked.feed(epoch, state_items(snap))
        t3 = time.perf_counter_ns()
        base_ns.append((t1 - t0) / active)
        sess_ns.append((t2 - t1) / active)
        late_ns.append((t3 - t2) / active)
    base, sess = statistics.median(base_ns), statistics.median(sess_ns)
    late = statistics.median(late_ns)
    return {
        "keys": keys,
        "epochs": epochs,
        "tumbling_rows_ns_per_key_epoch": round(base, 1),
        "session_feed_ns_per_key_epoch": round(sess, 1),
        "ratio_session_over_tumbling": round(sess / base, 3),
        "session_feed_late_every_epoch_ns_per_key_epoch": round(late, 1),
        "ratio_late_over_session": round(late / sess, 3),
        "sessions_closed": rows_out,
        "open_at_end": tracker.stats()["open"],
        "early_closed": tracker.stats()["early_closed"],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    keys, epochs = (10_000, 20) if args.quick else (100_000, 30)
    out = {
        "bench": "session_bench",
        "python": platform.python_version(),
        "quick": args.quick,
        **run(keys, epochs),
    }
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
