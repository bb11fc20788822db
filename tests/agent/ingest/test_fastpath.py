"""The ingest fast path (agent.ql.pushdown + agent.ingest.fastpath): lines skipped before parsing
can
never match, and the job's results with the prefilter equal the slow path's and a Counter's."""

from __future__ import annotations

import contextlib
import json
import random
from collections import Counter
from pathlib import Path
from typing import Any
from urllib.parse import quote, quote_plus

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import agent.jobs.ql_job  # noqa: F401  (registers the "ql" job class)
from agent.ingest.fastpath import LinePrefilter, install_prefilters, prefilter_for
from agent.ingest.formats import make_parser
from agent.ingest.projection import projected_parser
from agent.ingest.tail import FileTail
from agent.jobs.job import create_job, parse_spec
from agent.jobs.ql_job import spec_from_query
from agent.ql import compile_query
from agent.ql.pushdown import Needles, line_needles
from agent.runtime.epochs.worker import Worker
from apps.workload import ClickstreamGenerator, access_line, json_line

MICRO_JSON = (
    "SELECT product_id AS product, count(*) AS clicks FROM clicks "
    "WHERE directory = 'Video Games' AND action = 'click' "
    "GROUP BY product_id ORDER BY clicks DESC LIMIT 10 WINDOW 300 s EVERY 30 s"
)
MICRO_NGINX = (
    "SELECT query.id AS product, count(*) AS clicks FROM clicks "
    "WHERE path = '/product' AND query.action = 'click' "
    "GROUP BY query.id ORDER BY clicks DESC LIMIT 10 WINDOW 300 s EVERY 30 s"
)
START = 1_699_999_800.0  # a multiple of 300 s


def needles(where: str, fmt: str) -> Needles | None:
    return line_needles(compile_query(f"SELECT count(*) FROM x WHERE {where}").query.where, fmt)


# ---- pushdown rules -------------------------------------------------------------------------
def test_micro_promotion_needles() -> None:
    where = compile_query(MICRO_JSON).query.where
    assert line_needles(where, "json") == Needles(((b'"Video Games"',), (b'"click"',)), b"\\")
    nginx = line_needles(compile_query(MICRO_NGINX).query.where, "nginx")
    assert nginx == Needles(((b"/product",), (b"action=click",)), b"%")


@pytest.mark.parametrize(
    ("where", "fmt", "clauses"),
    [
        ("a IN ('x', 'y') AND b LIKE 'pre%'", "json", ((b'"x"', b'"y"'), (b'"pre',))),
        ("a LIKE '%suf' AND b LIKE '%mid%'", "json", ((b'suf"',), (b"mid",))),
        ("u.loc = 'DE' AND n > 3", "json", ((b'"DE"',),)),
        ("a = 'caf\u00e9'", "json", (('"caf\u00e9"'.encode(),),)),
        ("query.q LIKE 'ab%'", "nginx", ((b"q=ab",),)),
        ("query.dir = 'Video Games'", "nginx", ((b"dir=Video+Games",),)),
        ("user_agent LIKE '%Firefox%'", "apache", ((b"Firefox",),)),
    ],
)
def test_pushed_down_shapes(where: str, fmt: str, clauses: tuple) -> None:
    got = needles(where, fmt)
    assert got is not None and got.clauses == clauses


@pytest.mark.parametrize(
    ("where", "fmt"),
    [
        ("a = 'x' OR b = 'y'", "json"),  # disjunction
        ("NOT a = 'x'", "json"),
        ("a != 'x'", "json"),
        ("lower(a) = 'x'", "json"),
        ("a = 'say \"hi\"'", "json"),  # its JSON encoding needs a backslash
        ("a IN ('x', 1)", "json"),  # a number could match without the token
        ("a LIKE 'x_y'", "json"),
        ("a = 'two words'", "nginx"),  # could be written with + in a query string
        ("a = '50%'", "nginx"),
        ("a = 'caf\u00e9'", "nginx"),  # non-ASCII: percent-encoded in requests
        ("a = ''", "nginx"),
        ("host = 'x'", "syslog"),  # no rules for this format
        ("a = 'x'", "raw"),
    ],
)
def test_not_pushed_down(where: str, fmt: str) -> None:
    assert needles(where, fmt) is None


def test_no_where_no_prefilter() -> None:
    assert line_needles(None, "json") is None


# ---- the guarantee, property-tested ---------------------------------------------------------
TOKENS = [*'ab/ "\\%+&=?\u00e9\u20ac\U0001f600\t', "click", "Video"]
TRICKY = st.lists(st.sampled_from(TOKENS), max_size=6).map("".join)
#: values equal to the literals of WHERES, or near them
VALUES = st.one_of(st.sampled_from(["click", "a/b", "ab", "b\u20ac", "caf\u00e9", "a/"]), TRICKY)
WHERES = [
    "a = 'click'",
    "a = 'a/b' AND b = 'caf\u00e9'",
    "a IN ('ab', 'b\u20ac') AND b LIKE 'a%'",
    "a LIKE '%b/' AND b LIKE '%\u00e9%'",
    "n.a = 'ab'",
]


def _json_encodings(obj: dict[str, Any]) -> list[str]:
    plain = json.dumps(obj, ensure_ascii=False)
    return [
        plain,
        json.dumps(obj),  # \\u escapes for every non-ASCII character
        plain.replace("/", "\\/"),  # PHP-style escaped slashes
        plain.replace("a", "\\u0061").replace("c", "\\u0063"),  # escapes anywhere
    ]


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(a=VALUES, b=VALUES, where=st.sampled_from(WHERES))
def test_json_skipped_lines_never_match(a: str, b: str, where: str) -> None:
    q = compile_query(f"SELECT count(*) FROM x WHERE {where}")
    pre = LinePrefilter([line_needles(q.query.where, "json")])
    parser = make_parser("json")
    obj = {"ts": 1.0, "a": a, "b": b, "n": {"a": a}}
    for text in _json_encodings(obj):
        line = text.encode()
        rec = parser.parse(line)
        if q.map(rec):  # the record matches: its line must be kept
            assert pre.may_match(line) and pre.select([line]) == [line], (where, text)


def _access(target: str, agent: str = "curl/8") -> bytes:
    return (
        f'10.0.0.1 - - [14/Nov/2023:22:13:20 +0000] "GET {target} HTTP/1.1" 200 12 "-" "{agent}"'
    ).encode()


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    action=TRICKY,
    path=st.sampled_from(["/product", "/pro%64uct", "/x/product", "/product/"]),
    plus=st.booleans(),
    escape=st.booleans(),
)
def test_access_skipped_lines_never_match(action: str, path: str, plus: bool, escape: bool) -> None:
    q = compile_query(
        "SELECT count(*) FROM x WHERE path = '/product' AND query.action = 'click' "
        "AND user_agent LIKE 'curl%'"
    )
    pre = LinePrefilter([line_needles(q.query.where, "nginx")])
    parser = make_parser("nginx")
    if escape:
        value = quote(action, safe="")
    else:  # as nginx writes a raw request: quote and backslash escaped
        value = action.replace("&", "").replace(" ", "+").replace("\\", "\\\\")
        value = value.replace('"', "\\x22")
    if plus:
        value = value.replace("%20", "+")
    for target in (f"{path}?action={value}", f"{path}?x=1&action={value}&action=cli%63k"):
        line = _access(target)
        rec = parser.parse(line)
        if q.map(rec):
            assert pre.may_match(line) and pre.select([line]) == [line], target


DIRS = st.one_of(
    st.sampled_from(["Video Games", "Video  Games", "Video+Games", "Video Game", "VideoGames"]),
    st.lists(st.sampled_from([*TOKENS, "Video", "Games", " "]), max_size=5).map("".join),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(directory=DIRS, encoding=st.sampled_from(["plus", "percent", "mixed"]))
def test_query_values_with_spaces_never_skip_a_match(directory: str, encoding: str) -> None:
    q = compile_query(
        "SELECT count(*) FROM x WHERE query.dir = 'Video Games' AND query.action = 'click'"
    )
    pre = LinePrefilter([line_needles(q.query.where, "nginx")])
    parser = make_parser("nginx")
    value = {
        "plus": quote_plus(directory, safe=""),
        "percent": quote(directory, safe=""),
        "mixed": quote_plus(directory, safe="").replace("V", "%56"),
    }[encoding]
    line = _access(f"/product?id=P1&dir={value}&action=click")
    rec = parser.parse(line)
    if q.map(rec):
        assert pre.may_match(line) and pre.select([line]) == [line], line
    if directory == "Video Games":
        assert q.map(rec)  # the generated shapes do reach the matching case


def test_union_of_jobs_and_general_select() -> None:
    one = needles("a = 'x' AND b IN ('p', 'q')", "json")
    two = needles("c = 'y'", "json")
    assert one is not None and two is not None
    pre = LinePrefilter([one, two])
    lines = [
        b'{"a":"x","b":"p"}',
        b'{"a":"x","b":"r"}',
        b'{"c":"y"}',
        b'{"c":"\\u0079"}',
        b'{"a":"x"}',
        b"",
    ]
    assert pre.select(lines) == [lines[0], lines[2], lines[3]]
    assert [pre.may_match(x) for x in lines] == [True, False, True, True, False, False]
    with pytest.raises(ValueError):
        LinePrefilter([one, needles("a = 'x'", "nginx")])  # type: ignore[list-item]


# ---- end to end: FileTail -> Worker, slow path vs fast path vs Counter ------------------------
def _job(text: str, lateness: float = 60.0) -> Any:
    return create_job(parse_spec(spec_from_query("q", "t", text, allowed_lateness=lateness)))


def _lines(fmt: str, n: int, seed: int) -> list[bytes]:
    """Generated lines (timestamps shuffled within 50 s, below the lateness) with tricky ones
    mixed in: escapes, unicode, bad lines that contain the needles, blank lines."""
    rng = random.Random(seed)
    render = json_line if fmt == "json" else access_line
    lines = []
    for i, e in enumerate(ClickstreamGenerator(seed=seed, start=START, rate=n / 600).take(n)):
        e["ts"] = round(e["ts"] + rng.uniform(-50, 0), 3)
        lines.append(render(e).encode())
        if i % 100:
            continue
        hot = dict(e, directory="Video Games", action="click", product_id=f"P\u00e9/{i % 3}")
        if fmt == "json":
            lines.append(json.dumps(hot).encode())  # \\u00e9 escape
            lines.append(json.dumps(hot, ensure_ascii=False).replace("/", "\\/").encode())
            lines.append(b'{"directory": "Video Games", "action": "click", "ts": ')
            lines.append(b"")
            lines.append(b'{"ts": "nope", "directory": "Video Games", "action": "click"}')
            lines.append(json.dumps(dict(hot, action="cl\u00efck"), ensure_ascii=False).encode())
            lines.append(json_line(hot).replace('"click"', '"\\u0063lick"').encode())
            lines.append(json_line(hot).replace(" Games", "\\u0020Games").encode())
        else:
            pid = quote(hot["product_id"], safe="")
            lines.append(access_line({**hot, "product_id": pid, "action": "cl%69ck"}).encode())
            lines.append(access_line({**hot, "product_id": "P1"}).encode())
            lines.append(b"garbage action=click /product")
            lines.append(b"")
    return lines


def _run(
    path: Path, fmt: str, text: str, fast: bool, *, scan: bool = True
) -> tuple[dict[int, dict], Worker, FileTail]:
    job = _job(text)
    worker = Worker(job, wall_clock=lambda: START)
    tail = FileTail(path, parser=make_parser(fmt), read_size=1 << 14)
    if fast:
        tail.prefilter = prefilter_for([job], fmt)
        assert tail.prefilter is not None and tail.prefilter.scan_needle is not None
        tail.parser = projected_parser([job], fmt) or tail.parser  # nginx: projected parse
        if not scan:  # split every chunk and select (the path of several jobs)
            tail.prefilter.scan_needle = None
    out: dict[int, dict] = {}
    while True:
        batch = tail.poll()
        if not batch and not batch.skipped:
            break
        worker.process(batch, skipped=batch.skipped)
        out.update((e, s.to_dict()) for e, s in worker.poll())
    out.update((e, s.to_dict()) for e, s in worker.finish())
    return out, worker, tail


@pytest.mark.parametrize("fmt", ["json", "nginx"])
def test_fast_path_equals_slow_path_and_counter(tmp_path: Path, fmt: str) -> None:
    lines = _lines(fmt, 3000, seed=7)
    path = tmp_path / f"in.{fmt}"
    path.write_bytes(b"\n".join(lines) + b"\n")
    text = MICRO_JSON if fmt == "json" else MICRO_NGINX
    slow, ws, ts = _run(path, fmt, text, fast=False)
    fast, wf, tf = _run(path, fmt, text, fast=True)
    split, _, tsplit = _run(path, fmt, text, fast=True, scan=False)
    assert fast == slow == split
    assert tf.counters == tsplit.counters
    # the same bad lines quarantined at the same line numbers and offsets, by both fast paths;
    # the slow path quarantines those and the bad lines that could not match anyway
    seen = [(e["line_no"], e["offset"], e["reason"]) for e in tf.quarantine.entries()]
    assert seen and seen == [
        (e["line_no"], e["offset"], e["reason"]) for e in tsplit.quarantine.entries()
    ]
    assert set(seen) <= {(e["line_no"], e["offset"], e["reason"]) for e in ts.quarantine.entries()}
    for line_no, offset, _ in seen:
        assert lines[line_no - 1] == path.read_bytes()[offset:].split(b"\n", 1)[0]
    assert wf.stats()["late_dropped"] == ws.stats()["late_dropped"] == 0
    assert tf.counters["prefiltered"] > len(lines) // 2
    assert wf.counters["prefiltered"] == tf.counters["prefiltered"]
    assert tf.counters["lines"] == ts.counters["lines"] == len(lines)
    assert tf.counters["records"] + tf.counters["rejected"] + tf.counters[
        "prefiltered"
    ] + tf.counters["blank_lines"] == len(lines)
    # reference: a Counter over the records the slow parser accepts, per 300 s window
    parser = make_parser(fmt)
    recs = []
    for line in lines:
        with contextlib.suppress(ValueError):
            recs.append(parser.parse(line))
    if fmt == "json":
        keep = [r for r in recs if r.get("directory") == "Video Games" and r["action"] == "click"]
        key = [r["product_id"] for r in keep]
    else:
        keep = [r for r in recs if r["path"] == "/product" and r["query"].get("action") == "click"]
        key = [r["query"]["id"] for r in keep]
    assert len(keep) > 30
    assert any("\u00e9" in k for k in key)  # the escaped lines do match
    for epoch, got in fast.items():  # every epoch ends a 300 s window sliding by 30 s
        lo, hi = (epoch - 9) * 30, (epoch + 1) * 30
        want = Counter(k for k, r in zip(key, keep, strict=True) if lo <= r["ts"] < hi)
        assert got == dict(want), epoch
    assert len(fast) >= 20


def test_install_prefilters_union_and_cache(tmp_path: Path) -> None:
    class Cfg:
        format = "json"

    class Rt:
        def __init__(self, job: Any, inputs: list[str]) -> None:
            self.inputs = inputs
            self.worker = type("W", (), {"job": job})()

    path = tmp_path / "x.log"
    tail = FileTail(path)
    a, b = _job(MICRO_JSON), _job(MICRO_JSON.replace("'click'", "'view'"))
    install_prefilters({"in": tail}, {"in": Cfg()}, [Rt(a, ["in"]), Rt(b, ["in"])])
    first = tail.prefilter
    assert first is not None and len(first.alternatives) == 2
    install_prefilters({"in": tail}, {"in": Cfg()}, [Rt(a, ["in"]), Rt(b, ["in"])])
    assert tail.prefilter is first  # cached
    plain = create_job(parse_spec(spec_from_query("p", "t", "SELECT count(*) FROM x")))
    install_prefilters({"in": tail}, {"in": Cfg()}, [Rt(a, ["in"]), Rt(plain, ["in"])])
    assert tail.prefilter is None  # a job without pushdown needs every line
    install_prefilters({"in": tail}, {"in": Cfg()}, [Rt(a, ["other"])])
    assert tail.prefilter is None


def test_skipped_lines_keep_the_source_active() -> None:
    now = [START]
    job = _job(MICRO_JSON)
    worker = Worker(job, wall_clock=lambda: now[0])
    worker.process([{"ts": START + 1, "directory": "Video Games", "action": "click"}])
    idle = worker.clock.idle_timeout
    assert idle is not None
    now[0] += idle * 0.75
    worker.process([], skipped=100)  # lines arrived, none could match
    now[0] += idle * 0.75
    assert not worker.clock.idle  # without the skipped lines it would be idle by now
    assert worker.stats()["prefiltered"] == 100


LINE_TOKENS = [b'"click"', b'"Video Games"', b"click", b"\\", b"x", b" ", b'"', b"\xc3\xa9"]


@settings(max_examples=300, deadline=None)
@given(
    lines=st.lists(st.lists(st.sampled_from(LINE_TOKENS), max_size=6).map(b"".join), max_size=12),
    skip_first=st.booleans(),
)
def test_scan_equals_split_and_select(lines: list[bytes], skip_first: bool) -> None:
    pre = prefilter_for([_job(MICRO_JSON)], "json")
    assert pre is not None and pre.scan_needle == b'"Video Games"'
    buf = b"".join(x + b"\n" for x in lines) + b"partial"
    last_nl = buf.rfind(b"\n")
    if last_nl < 0:
        return
    start = buf.find(b"\n") + 1 if skip_first else 0
    found = pre.scan(buf, start, last_nl)
    assert found is not None
    starts, kept = found
    want = [(i, x) for i, x in _offsets(buf[start : last_nl + 1], start) if pre.may_match(x)]
    assert list(zip(starts, kept, strict=True)) == want


def _offsets(text: bytes, base: int) -> list[tuple[int, bytes]]:
    out, pos = [], base
    for x in text.split(b"\n")[:-1]:
        out.append((pos, x))
        pos += len(x) + 1
    return out
