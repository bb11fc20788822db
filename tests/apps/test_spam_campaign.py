"""spam-campaign: top-k users by "sales" tweets, and a runtime change that zooms the filter
into locations and follower counts — checked against a Counter over the same generated
tweets, in-process and on the shared cluster (through ``POST /api/v1/jobs/{name}/change``)."""

from __future__ import annotations

import math
import time
from collections import defaultdict
from typing import Any

import pytest
from app_helpers import AGENTS, ref_spam, wait_until
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.jobs.job import create_job, job_class, parse_spec
from agent.runtime.epochs.worker import Worker
from apps.spam_campaign import SALES_WORDS, SpamCampaign, spam_spec
from apps.workload import TweetGenerator


def make(**overrides: Any) -> SpamCampaign:
    job = create_job(parse_spec(spam_spec("spam", "t", **overrides)))
    assert isinstance(job, SpamCampaign)
    return job


def zoomed(t: dict[str, Any]) -> bool:
    return t["location"] is None and t["followers"] <= 30


def test_registered_with_defaults() -> None:
    assert job_class("spam-campaign") is SpamCampaign
    spec = parse_spec(spam_spec())
    assert (spec.aggregator, spec.mode, spec.epoch_seconds, spec.params) == (
        "count",
        "batch",
        30.0,
        {"k": 10},
    )


def test_map_matches_words_and_the_zoom_filter() -> None:
    job = make()
    tweet = {"ts": 1, "user_id": "u1", "text": "MEGA SALE today!", "location": "Paris"}
    assert job.map_keys(tweet) == ["u1"]
    assert job.map_keys({**tweet, "text": "wholesale"}) == []  # whole words only
    assert job.map_keys({**tweet, "text": 5}) == []
    assert job.map_keys({**tweet, "user_id": None}) == []
    zoom = make(params={"locations": ["Paris", None], "min_followers": 5, "max_followers": 30})
    assert zoom.map_keys({**tweet, "followers": 5}) == ["u1"]
    assert zoom.map_keys({**tweet, "location": None, "followers": 30}) == ["u1"]
    assert zoom.map_keys({**tweet, "followers": 31}) == []
    assert zoom.map_keys({**tweet, "followers": 4}) == []
    assert zoom.map_keys({**tweet, "location": "Tokyo", "followers": 10}) == []
    assert zoom.map_keys(tweet) == []  # no followers count: fails the bound
    custom = make(params={"words": ["Coin"]})
    assert custom.map_keys({**tweet, "text": "this coin will 100x"}) == ["u1"]


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="abcdefSALEfre _-!,.9\n", max_size=60))
def test_word_matching_agrees_with_a_reference_tokenizer(text: str) -> None:
    job = make(params={"words": ["sale", "free"]})
    tweet = {"ts": 1, "user_id": "u1", "text": text}
    want = ref_spam([tweet], ["sale", "free"], 1, 1) == [{"user": "u1", "tweets": 1}]
    assert job.map_keys(tweet) == (["u1"] if want else [])


@pytest.mark.parametrize(
    "params",
    [{"words": []}, {"k": 0}, {"min_count": 0}, {"locations": "Paris"}, {"max_followers": -1}],
)
def test_bad_params_are_refused(params: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match=r"params\."):
        make(params=params)


def test_per_epoch_top_users_and_a_zoom_by_setup_equal_counter() -> None:
    start = 1_700_000_000
    tweets = TweetGenerator(seed=3, users=300, rate=300, start=start, campaign_share=0.3).take(3000)
    params = {"k": 5, "min_count": 2}
    job = make(epoch_seconds=2.0, params=params)
    worker = Worker(job, wall_clock=lambda: start + 10_000.0)
    half = len(tweets) // 2
    worker.process(tweets[:half])
    first = worker.poll()
    # the runtime change: new params, setup() again, between records, same instance
    zoom = {**params, "locations": [None], "max_followers": 30}
    job.spec = job.spec.with_changes(params=zoom)
    job.params = job.spec.params
    job.setup()
    worker.process(tweets[half:])
    out = first + worker.finish()
    by_epoch: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for t in tweets:
        by_epoch[int(t["ts"] // 2)].append(t)
    switch = tweets[half]["ts"]
    for epoch, snap in out:
        before = [t for t in by_epoch[epoch] if t["ts"] < switch]
        after = [t for t in by_epoch[epoch] if t["ts"] >= switch]
        want = ref_spam(before, SALES_WORDS, 10**9, 1)
        want += ref_spam(after, SALES_WORDS, 10**9, 1, zoomed)
        merged: dict[str, int] = defaultdict(int)
        for row in want:
            merged[row["user"]] += row["tweets"]
        ranked = sorted(((u, c) for u, c in merged.items() if c >= 2), key=lambda x: (-x[1], x[0]))
        assert job.result_rows(list(snap)) == [{"user": u, "tweets": c} for u, c in ranked[:5]]
    assert len(out) >= 5
    assert job.on_query({}) == {"epoch": None, "rows": None}
    for epoch, snap in out:
        job.on_epoch_result(epoch, snap)
    newest = job.on_query({})
    assert newest == {"epoch": out[-1][0], "rows": job.result_rows(list(out[-1][1]))}
    busiest = max(out, key=lambda es: len(es[1]))
    rows = job.on_query({"epoch": busiest[0]})["rows"]
    assert rows and rows == job.result_rows(list(busiest[1]))
    assert job.on_query({"user": rows[0]["user"], "epoch": busiest[0]})["rank"] == 1
    assert job.on_query({"user": "nobody"})["rank"] is None
    assert job.on_query({"epoch": -5})["rows"] is None
    assert "error" in job.on_query({"epoch": "x"})


# ---- on the shared cluster ------------------------------------------------------------------

EPOCH = 5.0


def epoch_tweets(seed: int, epoch: int) -> list[dict[str, Any]]:
    gen = TweetGenerator(
        seed=seed, users=300, rate=400, start=epoch * EPOCH, campaign_share=0.3, bots=20
    )
    out = []
    for t in gen:
        if t["ts"] >= (epoch + 1) * EPOCH:
            return out
        out.append(t)
    return out


def test_cluster_top_users_then_a_runtime_zoom(app_cluster: Any) -> None:
    k, min_count = 5, 3
    first = math.floor(time.time() / EPOCH) - 2  # wholly in the past
    before = epoch_tweets(21, first)
    app_cluster.write("tweets", before)
    client = app_cluster.client(3)
    spec = spam_spec(
        "spam",
        "tests",
        epoch_seconds=EPOCH,
        k=k,
        inputs=["tweets"],
        start_epoch=first,
        allowed_lateness=0.5,
        idle_timeout=1.0,
        params={"min_count": min_count},
    )
    client.submit(spec)
    want = ref_spam(before, SALES_WORDS, k, min_count)
    assert want and want[0]["tweets"] > min_count
    wait_until(
        lambda: (r := client.results("spam", first))["complete"] and r["rows"] == want,
        45,
        "the top users of the first epoch",
    )

    # zoom in at runtime: no-location accounts with at most 30 followers
    change = client.change("spam", {"params": {"locations": [None], "max_followers": 30}})
    assert change["agents_reached"] == AGENTS
    later = math.floor(time.time() / EPOCH) + 1  # not closed anywhere yet
    after = epoch_tweets(22, later)
    closer = {**after[-1], "ts": (later + 1) * EPOCH + 0.6, "text": "closing the epoch"}
    app_cluster.write("tweets", after)
    app_cluster.write("tweets", [closer] * AGENTS)  # one per agent: each closes its epoch
    zoom = ref_spam(after, SALES_WORDS, k, min_count, zoomed)
    assert zoom and zoom != ref_spam(after, SALES_WORDS, k, min_count)
    wait_until(
        lambda: (r := client.results("spam", later))["complete"] and r["rows"] == zoom,
        45,
        "the zoomed top users",
    )
    ask = {"user": zoom[0]["user"], "epoch": later}
    reply = app_cluster.client(0).query("spam", ask)
    assert (reply["tweets"], reply["rank"]) == (zoom[0]["tweets"], 1)
