"""The workload generator: determinism, Zipf skew (rank-frequency against the expected
probabilities, loosely), session and funnel shape, tweets and campaigns, renderers parsed back
by the real parsers, catalogue files, rotation, pacing, posting, and ``elf generate``."""

from __future__ import annotations

import asyncio
import csv
import json
import random
from collections import Counter
from pathlib import Path
from typing import Any

import orjson
import pytest
from agent_helpers import running_agents
from click.testing import CliRunner

from agent.cli import cli
from agent.client import ApiClient
from agent.ingest.formats import AccessLogParser
from apps.workload import (
    ACTIONS,
    DIRECTORIES,
    ClickstreamGenerator,
    RotatingWriter,
    TweetGenerator,
    ZipfSampler,
    access_line,
    directory_slug,
    make_catalogue,
    paced,
    post_lines,
    write_catalogue,
)

START = 1_763_000_000.0


def test_same_seed_same_events_other_seed_other_events() -> None:
    a = ClickstreamGenerator(seed=7, start=START).take(500)
    b = ClickstreamGenerator(seed=7, start=START).take(500)
    c = ClickstreamGenerator(seed=8, start=START).take(500)
    assert a == b and a != c
    assert TweetGenerator(seed=1, start=START).take(300) == TweetGenerator(
        seed=1, start=START
    ).take(300)
    assert make_catalogue(50, seed=3) == make_catalogue(50, seed=3)


def test_limit_rate_and_time_order() -> None:
    events = list(ClickstreamGenerator(seed=1, start=START, rate=200.0, limit=4000))
    assert len(events) == 4000
    ts = [e["ts"] for e in events]
    assert ts == sorted(ts) and ts[0] == START
    assert 4000 / (ts[-1] - ts[0]) == pytest.approx(200.0, rel=0.1)  # Poisson at the rate


def test_product_popularity_follows_zipf_rank_frequency() -> None:
    n = 40_000
    gen = ClickstreamGenerator(seed=2, start=START, products=200, product_skew=1.1, limit=n)
    counts = Counter(e["product_id"] for e in gen if e["action"] in ("view", "click"))
    total = sum(counts.values())
    zipf = ZipfSampler(200, 1.1, random.Random(0))
    for rank in (1, 2, 5, 10):  # the head, where frequencies are large enough to compare
        got = counts[f"P{rank:06d}"] / total
        assert got == pytest.approx(zipf.probability(rank), rel=0.15), rank
    ranked = [c for _, c in counts.most_common()]
    assert ranked[0] > 5 * ranked[len(ranked) // 2]  # skewed, not uniform


def test_zipf_sampler_matches_its_distribution() -> None:
    z = ZipfSampler(50, 1.0, random.Random(1))
    counts = Counter(z.sample() for _ in range(50_000))
    assert set(counts) <= set(range(1, 51))
    assert sum(z.probability(r) for r in range(1, 51)) == pytest.approx(1.0)
    for rank in (1, 2, 3):
        assert counts[rank] / 50_000 == pytest.approx(z.probability(rank), rel=0.08)
    with pytest.raises(ValueError):
        ZipfSampler(0, 1.0, random.Random(1))


def test_clicks_have_sessions_funnel_and_catalogue_fields() -> None:
    catalogue = {p["product_id"]: p for p in make_catalogue(100, seed=4)}
    events = ClickstreamGenerator(seed=4, start=START, products=100, users=100).take(5000)
    actions = Counter(e["action"] for e in events)
    assert set(actions) == set(ACTIONS)
    assert actions["view"] > actions["click"] > actions["buy"]
    for e in events:
        p = catalogue[e["product_id"]]
        assert (e["directory"], e["price"]) == (p["directory"], p["price"])
        assert ("quantity" in e) == (e["action"] == "buy")
    per_user = Counter((e["user_id"], e["session_id"]) for e in events)
    sessions_of = Counter(u for u, _ in per_user)
    assert max(per_user.values()) > 1 and max(sessions_of.values()) > 1
    ips = {e["user_id"]: e["source_ip"] for e in events}
    assert all(e["source_ip"] == ips[e["user_id"]] for e in events)  # fixed per user


def test_tweets_have_campaigns_hashtags_and_skewed_users() -> None:
    tweets = TweetGenerator(seed=5, start=START, users=1000, campaign_share=0.1).take(5000)
    spam = [t for t in tweets if t["campaign"]]
    assert 350 < len(spam) < 650
    assert all(t["user_id"].startswith("bot") and t["followers"] < 30 for t in spam)
    assert all(f"#{t['hashtags'][0]}" in t["text"] and "https://" in t["text"] for t in spam)
    organic = [t for t in tweets if not t["campaign"]]
    users = Counter(t["user_id"] for t in organic)
    assert users.most_common(1)[0][0] == "u000001"
    assert all(all(f"#{h}" in t["text"] for h in t["hashtags"]) for t in organic)
    followers = {t["user_id"]: t["followers"] for t in organic}
    assert all(t["followers"] == followers[t["user_id"]] for t in organic)
    assert len({t["tweet_id"] for t in tweets}) == len(tweets)


def test_access_lines_parse_back_with_query_parameters() -> None:
    parser = AccessLogParser()
    for e in ClickstreamGenerator(seed=6, start=START + 0.25).take(300):
        ev = parser.parse(access_line(e))
        assert ev["path"] == "/product" and ev["source_ip"] == e["source_ip"]
        assert ev["query"] == {
            "id": e["product_id"], "dir": directory_slug(e["directory"]), "action": e["action"],
            "user": e["user_id"], "session": e["session_id"],
        }  # fmt: skip
        assert ev["ts"] == float(int(e["ts"])) and ev["user_agent"] == e["user_agent"]


def test_catalogue_files(tmp_path: Path) -> None:
    cat = make_catalogue(20, seed=1)
    assert {p["directory"] for p in cat} <= set(DIRECTORIES)
    with open(write_catalogue(cat, tmp_path / "p.csv")) as f:
        rows = list(csv.DictReader(f))
    assert [r["product_id"] for r in rows] == [p["product_id"] for p in cat]
    assert [float(r["price"]) for r in rows] == [p["price"] for p in cat]
    assert orjson.loads(write_catalogue(cat, tmp_path / "p.json").read_bytes()) == cat
    lines = write_catalogue(cat, tmp_path / "p.jsonl").read_bytes().splitlines()
    assert [orjson.loads(x) for x in lines] == cat


def test_rotating_writer_keeps_every_line(tmp_path: Path) -> None:
    path = tmp_path / "out.log"
    lines = [f"line {i:04d}" for i in range(300)]
    with RotatingWriter(path, rotate_bytes=1000, backups=20) as w:
        for line in lines:
            w.write(line)
    assert w.rotations > 0
    files = sorted(
        tmp_path.iterdir(), key=lambda p: -int(p.suffix[1:]) if p.suffix != ".log" else 0
    )
    got = [x for p in files for x in p.read_text().splitlines()]
    assert got == lines
    assert all(p.stat().st_size <= 1000 for p in tmp_path.iterdir())


def test_paced_waits_until_each_event_time() -> None:
    now = [100.0]
    slept: list[float] = []

    def sleep(d: float) -> None:
        slept.append(d)
        now[0] += d

    events = [{"ts": 10.0}, {"ts": 10.5}, {"ts": 12.0}]
    out = list(paced(events, speedup=2.0, sleep=sleep, clock=lambda: now[0]))
    assert out == events and slept == pytest.approx([0.25, 0.75])


def test_post_lines_batches_and_retries_full_queues() -> None:
    calls: list[int] = []

    class Client:
        def ingest(self, name: str, chunk: list[str]) -> dict[str, Any]:
            calls.append(len(chunk))
            if len(calls) == 2:
                return {"accepted": 0, "rejected": 0, "queue_full": True}
            return {"accepted": len(chunk), "rejected": 0, "queue_full": False}

    totals = post_lines((str(i) for i in range(25)), Client(), "ingest", batch=10)
    assert calls == [10, 10, 10, 5]
    assert totals == {"accepted": 25, "rejected": 0, "batches": 3, "retries": 1}


def test_elf_generate_command(tmp_path: Path) -> None:
    runner = CliRunner()
    res = runner.invoke(cli, ["generate", "clicks", "-n", "50", "--start", str(START), "--seed",
                              "3", "--catalogue", str(tmp_path / "cat.csv")])  # fmt: skip
    assert res.exit_code == 0, res.output
    events = [json.loads(x) for x in res.output.splitlines()]
    assert events == ClickstreamGenerator(seed=3, start=START).take(50)
    assert (tmp_path / "cat.csv").exists()
    out = tmp_path / "access.log"
    res = runner.invoke(cli, ["generate", "clicks", "-n", "200", "--format", "nginx", "--start",
                              str(START), "-o", str(out), "--rotate-bytes", "20000"])  # fmt: skip
    assert res.exit_code == 0, res.output
    n = sum(len(p.read_text().splitlines()) for p in tmp_path.glob("access.log*"))
    assert n == 200 and (tmp_path / "access.log.1").exists()
    res = runner.invoke(cli, ["generate", "tweets", "-n", "5", "--format", "nginx"])
    assert res.exit_code != 0 and "clicks only" in res.output


async def test_post_lines_to_a_real_agent_ingest_endpoint() -> None:
    clicks = ClickstreamGenerator(seed=9, start=START).take(2500)
    lines = [json.dumps(c) for c in clicks] + ["not json"]
    async with running_agents(1) as agents:
        client = ApiClient(agents[0].api.url, agents[0].config.api_token)
        totals = await asyncio.to_thread(post_lines, lines, client, "ingest", batch=1000)
        assert totals == {"accepted": 2500, "rejected": 1, "batches": 3, "retries": 0}
        queued = agents[0].inputs["ingest"].poll()
        assert [r["user_id"] for r in queued] == [c["user_id"] for c in clicks]


def test_request_times_are_opt_in_per_page_and_leave_the_stream_alone() -> None:
    from statistics import median

    from apps.workload import SLOW_SHARE, page_latency_median

    plain = ClickstreamGenerator(seed=4, start=START, products=20).take(20_000)
    timed = ClickstreamGenerator(seed=4, start=START, products=20, request_times=True).take(20_000)
    assert "request_time" not in plain[0]
    assert [{k: v for k, v in e.items() if k != "request_time"} for e in timed] == plain
    by_page: dict[str, list[float]] = {}
    for e in timed:
        t = e["request_time"]
        assert t >= 0.001 and t == round(t, 3)  # nginx's millisecond resolution
        by_page.setdefault(e["product_id"], []).append(t)
    for page, times in by_page.items():
        if len(times) >= 200:  # the page's own median (log-normal around it, σ 0.5)
            assert median(times) == pytest.approx(page_latency_median(page), rel=0.15), page
    # the 2 % tail (4-20x) plus the log-normal's own beyond 3x (1.4 %)
    slow = sum(e["request_time"] > 3 * page_latency_median(e["product_id"]) for e in timed)
    assert SLOW_SHARE / 2 < slow / len(timed) < 3 * SLOW_SHARE
