"""``elf demo`` end to end: a real 3-agent run (plain output), every app's results, the runtime
change, the lake; Ctrl-C (SIGINT) stops it with no agent process left; the Spark join (slow).

The run's output is checked against what the demo promises on screen; the lake is checked
independently by reading its Parquet files with pyarrow (every data job wrote epochs, and the
micro-promotion clicks there are products of the "Video Games" directory of the catalogue
the demo generated).
"""

from __future__ import annotations

import itertools
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import psutil
import pytest

from agent.client import ApiClient
from apps.demo.feed import CLICK_USERS, PRODUCTS, TWEET_USERS, LiveFeed, demo_bundles
from apps.demo.jobs import BUNDLING_PARAMS, DATA_JOBS, job_specs
from apps.demo.state import DemoConfig
from apps.workload import ClickstreamGenerator, TweetGenerator, make_catalogue

ROOT = Path(__file__).resolve().parents[2]


def _demo(workdir: Path, *extra: str) -> subprocess.Popen[str]:
    args = [sys.executable, "-m", "agent.cli", "demo", "--agents", "3", "--dir", str(workdir)]
    args += ["--epoch-seconds", "1", "--plain", *extra]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen(
        args, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )


def _agent_pids(workdir: Path) -> list[int]:
    """Live processes running an agent of this demo (their args name its secret file)."""
    secret = str(workdir / "cluster" / "secret")
    out = []
    for p in psutil.process_iter(["pid", "cmdline", "status"]):
        cmd = p.info["cmdline"] or []
        if secret in cmd and p.info["status"] != psutil.STATUS_ZOMBIE:
            out.append(p.info["pid"])
    return out


def _lake_tables(workdir: Path) -> dict[str, list[dict]]:
    """Each job's rows as a lake reader sees them: the newest version of every epoch, never
    a hidden temporary file of a write the demo's shutdown interrupted."""
    from spark_sink.lake import Lake, read_table

    lake = Lake(str(workdir / "lake"))
    tables: dict[str, list[dict]] = {}
    for job_dir in sorted((workdir / "lake").glob("job=*")):
        job = job_dir.name.removeprefix("job=")
        files = lake.files(job)
        if files:
            tables[job] = read_table(lake, files).to_pylist()
    return tables


def test_specs_share_the_start_epoch_and_windows() -> None:
    specs = {s["name"]: s for s in job_specs(2.0, 100)}
    assert set(specs) == {*DATA_JOBS, "sale-prediction"}
    for name in DATA_JOBS:
        assert specs[name]["start_epoch"] == 100 and specs[name]["epoch_seconds"] == 2.0
    assert specs["sale-prediction"]["inputs"] == ["none"]
    with pytest.raises(ValueError, match="--agents"):
        DemoConfig(agents=0)
    with pytest.raises(ValueError, match="--rate"):
        DemoConfig(rate=0)


def test_live_feed_writes_each_generator_stream_up_to_its_end(tmp_path: Path) -> None:
    files = [(tmp_path / f"c{i}.jsonl", tmp_path / f"t{i}.jsonl") for i in range(2)]
    catalogue = make_catalogue(50, seed=3)
    feed = LiveFeed(files, catalogue, rate=400.0, seed=3, tick=0.02)
    feed.start()
    until = time.time() + 0.5
    feed.finish_at(until)
    assert not feed.is_alive() and feed.error is None and feed.started_at is not None
    for i, (clicks, tweets) in enumerate(files):
        seed = 3 * 1000 + i
        gens = (
            (
                clicks,
                ClickstreamGenerator(
                    seed=seed,
                    users=CLICK_USERS,
                    rate=400.0,
                    start=feed.started_at,
                    catalogue=catalogue,
                    bundles=demo_bundles(catalogue, 3),
                    request_times=True,
                ),
            ),
            (
                tweets,
                TweetGenerator(seed=seed, users=TWEET_USERS, rate=400.0, start=feed.started_at),
            ),
        )
        for path, gen in gens:
            expected = list(itertools.takewhile(lambda e: e["ts"] < until, gen))
            got = [json.loads(line) for line in path.read_text().splitlines()]
            assert got == expected
            assert len(got) > 50
    assert feed.written == {
        "clicks": sum(len(c.read_text().splitlines()) for c, _ in files),
        "tweets": sum(len(t.read_text().splitlines()) for _, t in files),
    }


def test_demo_runs_every_app_changes_a_filter_and_fills_the_lake(tmp_path: Path) -> None:
    proc = _demo(tmp_path, "--duration", "10", "--no-spark")
    out, _ = proc.communicate(timeout=240)
    assert proc.returncode == 0, out
    for job in DATA_JOBS:
        results = re.findall(rf"result {job} epoch=(\d+) epochs=(\d+) agents=3 ", out)
        assert results, f"no result line for {job}:\n{out}"
        assert max(int(n) for _, n in results) >= 5
    assert re.search(r"result sale-prediction: P\d{6} → (HIGH|MEDIUM|LOW) \(", out), out
    change = re.search(
        r"runtime change of spam-campaign .* applied on 3 agents in ([\d.]+) ms", out
    )
    assert change, out
    # after the zoom every reported spam user passes it: bots or users without a location
    assert "filter=zoomed: location none, followers <= 30" in out
    assert "== ELF demo summary (done) ==" in out
    assert "Spark step skipped (--no-spark)" in out

    tables = _lake_tables(tmp_path)
    assert set(DATA_JOBS) <= set(tables), sorted(tables)
    video_games = {
        p["product_id"] for p in make_catalogue(PRODUCTS) if p["directory"] == "Video Games"
    }
    promo = [r for r in tables["micro-promotion"] if r.get("key") is not None]
    assert promo and {r["key"] for r in promo} <= video_games
    epochs = {r["epoch"] for rows in tables.values() for r in rows}
    assert len(epochs) >= 5
    assert _agent_pids(tmp_path) == []
    _check_page_latency(tmp_path, tables["page-latency"])
    # the promotions are shown with their pages' p99 beside them
    assert re.search(r"promoted \(window top\): P\d{6}×\d+ \(p99 \d+ ms\)", out), out
    bundles = re.findall(r"result product-bundling .* top: (\d+) bundles, sizes \[([\d, ]+)\]", out)
    assert bundles and int(bundles[-1][0]) >= 3, out  # several bounded bundles, no giant one
    assert max(int(x) for x in bundles[-1][1].split(",")) <= BUNDLING_PARAMS["max_bundle"]


def _check_page_latency(workdir: Path, rows: list[dict]) -> None:
    """page-latency's windows in the lake against the feed's own log files (numpy): every
    page's request count exactly, its p50 and p99 within the KLL rank bound (the estimate's
    rank among the exact values is within ±kll_rank_error(200) of the percentage)."""
    import numpy as np

    from cbt.sketches import kll_rank_error

    eps = kll_rank_error(200)
    clicks = [
        json.loads(line)
        for path in sorted((workdir / "logs").glob("clicks-*.jsonl"))
        for line in path.read_text().splitlines()
    ]
    games = [c for c in clicks if c["directory"] == "Video Games"]
    assert games and all(isinstance(c["request_time"], float) for c in games)
    first = min(r["epoch"] for r in rows)  # epochs of 1 s: the window is [E - 9, E]
    checked = 0
    for r in rows:
        if r["tentative"] or r["partial"]:
            continue
        lo, hi = max(first, r["epoch"] - 9), r["epoch"]
        times = np.array(
            [
                c["request_time"]
                for c in games
                if c["product_id"] == r["page"] and lo <= c["ts"] // 1 <= hi
            ]
        )
        assert len(times) == r["requests"], r
        for p, est in zip((0.5, 0.99), r["latency"], strict=True):
            below, at_most = np.mean(times < est), np.mean(times <= est)
            assert below - eps <= p <= at_most + eps, (r["page"], r["epoch"], p, est)
        checked += 1
    assert checked >= 50


def test_sigint_stops_the_demo_cleanly(tmp_path: Path) -> None:
    proc = _demo(tmp_path, "--duration", "0", "--no-spark")
    assert proc.stdout is not None
    lines = []
    deadline = time.monotonic() + 120
    for line in proc.stdout:  # wait for the first result line: the cluster is running
        lines.append(line)
        if line.split("] ", 1)[-1].startswith("result ") or time.monotonic() > deadline:
            break
    pids = _agent_pids(tmp_path)
    assert len(pids) == 3, "".join(lines)
    # the printed dashboard is open while the demo runs, and its link's token works
    found = re.search(r"dashboard \(open in a browser while the demo runs\): (\S+)", "".join(lines))
    assert found, "".join(lines)
    page, _, fragment = found.group(1).partition("#token=")
    client = ApiClient(page.rsplit("/dashboard/", 1)[0], urllib.parse.unquote(fragment))
    with urllib.request.urlopen(page, timeout=30) as resp:
        assert resp.status == 200 and b"dashboard.js" in resp.read()
    assert len(client.dashboard()["agents"]) == 3
    proc.send_signal(signal.SIGINT)
    rest, _ = proc.communicate(timeout=60)
    out = "".join(lines) + rest
    assert proc.returncode == 130, out
    assert "== ELF demo summary (interrupted) ==" in out
    assert _agent_pids(tmp_path) == []


def _wait_first_result(proc: subprocess.Popen[str]) -> list[str]:
    assert proc.stdout is not None
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if line.split("] ", 1)[-1].startswith("result "):
            break
    return lines


@pytest.mark.slow
def test_agents_dying_end_the_demo_with_an_error(tmp_path: Path) -> None:
    proc = _demo(tmp_path, "--duration", "0")
    lines = _wait_first_result(proc)
    pids = _agent_pids(tmp_path)
    assert len(pids) == 3, "".join(lines)
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    rest, _ = proc.communicate(timeout=60)
    out = "".join(lines) + rest
    assert proc.returncode == 1, out
    assert "ERROR: every agent process exited" in out
    assert "Spark step skipped: the run did not finish" in out
    assert _agent_pids(tmp_path) == []


@pytest.mark.slow
def test_demo_ends_with_the_spark_join(tmp_path: Path) -> None:
    from spark_sink.session import java_version

    proc = _demo(tmp_path, "--duration", "10")
    out, _ = proc.communicate(timeout=900)
    assert proc.returncode == 0, out
    if java_version() is None:
        assert "WARNING: Spark step skipped" in out
        return
    assert "Spark: promotion lift" in out, out
    rows = re.findall(r"^\s+(\d+)\s+(P\d{6})\s", out, flags=re.M)
    assert rows and [int(r) for r, _ in rows] == list(range(1, len(rows) + 1))
    promoted = {r["key"] for r in _lake_tables(tmp_path)["micro-promotion"] if r.get("key")}
    assert {p for _, p in rows} <= promoted


def test_the_live_view_marks_a_tentative_result_with_its_quality(tmp_path: Path) -> None:
    """PPA: a tentative result is shown clearly marked, with its coverage and (top-k jobs)
    its accuracy estimate; a final one without the mark."""
    from rich.console import Console

    from apps.demo.jobs import BUNDLING
    from apps.demo.render import render
    from apps.demo.state import DemoState

    st = DemoState(DemoConfig(), tmp_path)
    view = st.jobs[BUNDLING]
    view.epoch = 7
    view.tentative, view.coverage, view.accuracy = True, 0.414, 0.859

    def shown() -> str:
        console = Console(width=200, record=True)
        console.print(render(st))
        return console.export_text()

    assert "tentative, coverage 41 %, top-k accuracy ≈ 86 %" in shown()
    view.tentative, view.coverage, view.accuracy = False, 1.0, 1.0
    assert "tentative" not in shown()


def test_promotions_are_shown_with_their_pages_p99(tmp_path: Path) -> None:
    from rich.console import Console

    from apps.demo.jobs import LATENCY, PROMOTION
    from apps.demo.render import plain_lines, render
    from apps.demo.state import DemoState

    st = DemoState(DemoConfig(), tmp_path)
    st.promoted = {"top": [["P000003", 45], ["P000007", 12]]}
    st.jobs[PROMOTION].epoch = st.jobs[LATENCY].epoch = 9
    st.jobs[LATENCY].rows = [
        {"page": "P000003", "latency": [0.038, 0.212], "requests": 123},
        {"page": "P000009", "latency": [0.05, None], "requests": 7},
    ]
    lines = "\n".join(plain_lines(st))
    assert "promoted (window top): P000003×45 (p99 212 ms), P000007×12" in lines
    assert "busiest pages: P000003 p50 38 ms p99 212 ms n=123, P000009 p50 50 ms p99 ? n=7" in lines
    console = Console(width=250, record=True)
    console.print(render(st))
    assert "P000003×45 (p99 212 ms)" in console.export_text()
