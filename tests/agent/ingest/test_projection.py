"""agent.ingest.projection: the projected access-log parse equals the full parse on the fields it
builds (and rejects the same lines the same way); the runtime hook installs it only for QL
jobs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import agent.jobs.ql_job  # noqa: F401  (registers the "ql" job class)
from agent.ingest.fastpath import install_prefilters
from agent.ingest.formats import AccessLogParser
from agent.ingest.projection import (
    BUILT,
    ProjectedAccessLogParser,
    projected_parser,
    referenced_fields,
)
from agent.ingest.tail import FileTail
from agent.jobs.job import create_job, parse_spec
from agent.jobs.ql_job import spec_from_query
from agent.ql import compile_query

GOOD = (
    '10.0.0.1 - frank [14/Nov/2023:22:13:20 +0100] "GET /pro%64uct?id=P1&action=cl+ick&x '
    'HTTP/1.1" 200 128 "https://t.co/x" "Mozilla/5.0 \\"x\\""'
)
PIECES = [
    GOOD,
    "10.0.0.2 - - [31/Feb/2023:22:13:20 +0000] ",  # no such date
    '"GET /a?b=%ZZ HTTP/1.0" 404 - "-" "-"',
    '"\\x22 x" 503 12',
    "[14/Nov/2023:22:13:20 +0000] ",
    "garbage",
    " ",
    "\u00e9",
    "\xff",
]
FIELD_SETS = [
    {"path", "query"},
    {"method", "protocol", "status", "priority"},
    {"request", "body", "source_ip"},
    {"path", "user_agent"},  # user_agent: falls back to the full parse
    set(),
    {"nope"},
]


@settings(max_examples=300, deadline=None)
@given(
    parts=st.lists(st.sampled_from(PIECES), min_size=1, max_size=4),
    fields=st.sampled_from(FIELD_SETS),
    raw=st.booleans(),
)
def test_projected_equals_full_on_its_fields(parts: list[str], fields: set[str], raw: bool) -> None:
    line: Any = "".join(parts)
    if raw:
        line = line.encode("utf-8", "surrogateescape") if "\xff" not in line else b"\xff" + b"x"
    full, proj = AccessLogParser(), ProjectedAccessLogParser(fields)
    try:
        want = full.parse(line)
    except ValueError as exc:
        with pytest.raises(type(exc)) as got:
            proj.parse(line)
        assert (got.value.reason, str(got.value)) == (exc.reason, str(exc))  # type: ignore[attr-defined]
        return
    out = proj.parse(line)
    assert out == {k: want[k] for k in fields | {"ts"} if k in want}


def test_the_good_line_parses() -> None:
    out = ProjectedAccessLogParser({"path", "query"}).parse(GOOD)
    assert out["path"] == "/product" and out["query"]["action"] == "cl ick"
    assert set(out) == {"ts", "path", "query"} and {"path", "query"} <= BUILT


def test_referenced_fields() -> None:
    q = compile_query(
        "SELECT query.id AS product, count(*) AS clicks, sum(bytes) FROM x "
        "WHERE path = '/p' AND lower(method) = 'get' GROUP BY query.id HAVING clicks > 1"
    )
    got = referenced_fields(q)
    assert got is not None and {"query", "path", "method", "bytes"} <= got


def _job(text: str) -> Any:
    return create_job(parse_spec(spec_from_query("q", "t", text)))


def test_installed_only_for_ql_jobs_on_access_logs(tmp_path: Path) -> None:
    class Cfg:
        format = "nginx"

    class Rt:
        def __init__(self, job: Any) -> None:
            self.inputs = ["in"]
            self.worker = type("W", (), {"job": job})()

    tail = FileTail(tmp_path / "x.log", parser=AccessLogParser())
    original = tail.parser
    ql = _job("SELECT query.id, count(*) FROM x WHERE query.action = 'click' GROUP BY query.id")
    install_prefilters({"in": tail}, {"in": Cfg()}, [Rt(ql)])
    assert isinstance(tail.parser, ProjectedAccessLogParser)
    assert {"query", "ts"} <= tail.parser.fields

    class Other:  # not a QL job: it may read any field
        spec = None

    install_prefilters({"in": tail}, {"in": Cfg()}, [Rt(ql), Rt(Other())])
    assert tail.parser is original
    assert projected_parser([ql], "json") is None
