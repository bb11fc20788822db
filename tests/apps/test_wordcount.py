"""WordCount against a Counter over the same lines, through the worker, per epoch."""

from __future__ import annotations

import random
import re
import string
from collections import Counter

import pytest

from agent.jobs.job import create_job, job_class, parse_spec
from agent.runtime.epochs.worker import Worker
from apps.wordcount import WordCount

SPEC = {"name": "wc", "creator": "test", "job_class": "wordcount"}


def reference_words(text: str) -> list[str]:
    """An independent tokenizer for ASCII text: non-alphanumerics become spaces."""
    keep = set(string.ascii_letters + string.digits)
    return "".join(c.lower() if c in keep else " " for c in text).split()


def test_registered_and_defaults_to_count() -> None:
    assert job_class("wordcount") is WordCount
    spec = parse_spec(SPEC)
    assert spec.aggregator == "count"
    assert isinstance(create_job(spec), WordCount)


def test_map_splits_lowercases_and_picks_the_text_field() -> None:
    job = create_job(parse_spec(SPEC))
    assert list(job.map({"ts": 1, "line": "To be, or NOT to_be!"})) == [
        ("to", 1),
        ("be", 1),
        ("or", 1),
        ("not", 1),
        ("to", 1),
        ("be", 1),
    ]
    assert list(job.map({"ts": 1, "text": "Ünïcode Wörds 42"})) == [
        ("ünïcode", 1),
        ("wörds", 1),
        ("42", 1),
    ]
    assert list(job.map({"ts": 1, "line": 5, "text": "fallback"})) == [("fallback", 1)]
    assert list(job.map({"ts": 1})) == []
    custom = create_job(parse_spec({**SPEC, "params": {"field": "msg", "min_length": 3}}))
    assert list(custom.map({"msg": "a bb ccc dddd", "line": "ignored"})) == [
        ("ccc", 1),
        ("dddd", 1),
    ]


@pytest.mark.parametrize("params", [{"field": 3}, {"min_length": 0}, {"min_length": True}])
def test_bad_params_are_rejected(params: dict) -> None:
    with pytest.raises(ValueError, match="params\\."):
        create_job(parse_spec({**SPEC, "params": params}))


def test_wordcount_per_epoch_equals_counter() -> None:
    rng = random.Random(4)
    vocab = ["Alpha", "beta", "GAMMA", "delta", "eps-ilon", "zeta!", "Eta's", "theta", "42"]
    lines = []
    for i in range(4000):
        text = " ".join(rng.choice(vocab) for _ in range(rng.randint(0, 12)))
        lines.append({"ts": 1_700_000_000 + i * 0.01 + rng.uniform(-0.5, 0), "line": text})
    spec = parse_spec({**SPEC, "epoch_seconds": 5, "allowed_lateness": 1})
    worker = Worker(create_job(spec), wall_clock=lambda: 1_700_000_100.0)
    out = []
    for i in range(0, len(lines), 250):
        worker.process(lines[i : i + 250])
        out.extend(worker.poll())
    out.extend(worker.finish())
    want: dict[int, Counter] = {}
    for rec in lines:
        want.setdefault(int(rec["ts"] // 5), Counter()).update(reference_words(rec["line"]))
    assert {e: Counter(s.to_dict()) for e, s in out} == want
    assert worker.stats()["late_dropped"] == 0


def test_tokenizer_agrees_with_reference_on_random_ascii() -> None:
    rng = random.Random(9)
    job = create_job(parse_spec(SPEC))
    alphabet = string.ascii_letters + string.digits + " ,.;:!?'\"()-\t"
    for _ in range(300):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 80)))
        assert [w for w, _ in job.map({"line": text})] == reference_words(text)
        assert all(re.fullmatch(r"[a-z0-9]+", w) for w, _ in job.map({"line": text}))


def test_master_answers_word_queries_over_recent_epochs() -> None:
    from agent.jobs.spec import JobSpec
    from apps.wordcount import WordCount
    from cbt import CompressedBufferTree

    job = WordCount(JobSpec.from_dict({"name": "wc", "creator": "t", "job_class": "wordcount"}))
    assert job.on_query({"word": "a"}) == {"word": "a", "count": 0, "epochs": None}
    for epoch, words in [(10, "a b a"), (11, "b"), (12, "a")]:
        tree = CompressedBufferTree("count")
        tree.insert_many([k for k, _ in job.map({"line": words})])
        job.on_epoch_result(epoch, tree.flush())
    assert job.on_query({"word": "A"}) == {"word": "A", "count": 3, "epochs": [10, 12]}
    assert job.on_query({"word": "a", "epochs": 2}) == {"word": "a", "count": 1, "epochs": [11, 12]}
    assert "error" in job.on_query({"word": ""})
    assert "error" in job.on_query({"word": "a", "epochs": 0})
