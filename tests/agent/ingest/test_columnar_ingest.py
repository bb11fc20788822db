"""The columnar ingest path end to end (FileTail chunks -> Arrow -> Worker.process_table)
against the row path and an independent reference (DuckDB over the same parsed rows).

Properties, for random JSON lines (valid, malformed, missing or bad timestamps, unicode,
invalid UTF-8, blank, over-long, a field whose kind varies between lines) read in small
chunks, and random queries from the QL grammar (GROUP BY, aggregates, WHERE with
comparisons, LIKE, RLIKE and functions):

* per-epoch results, worker counters (accepted, bad, late) and the input's rejection counts,
  quarantined line numbers and offsets are the row path's;
* where the parsed rows have one kind per field and no row was late, DuckDB computes the same
  per-epoch groups and aggregates.
"""

from __future__ import annotations

import json
import math
import time
from collections import Counter
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import agent.jobs.ql_job  # noqa: F401  (registers the "ql" job class)
from agent.ingest.base import ColumnarBatch
from agent.ingest.columnar.reader import ChunkReader, install_columnar
from agent.ingest.formats import make_parser
from agent.ingest.records import Quarantine
from agent.ingest.tail import FileTail
from agent.jobs.job import create_job, parse_spec
from agent.jobs.ql_job import spec_from_query
from agent.runtime.epochs.worker import Worker

WORDS = ["a", "ab", "Ab", "ßa", "☃", "a%b", "x_y", "", "é\u0301", "zz"]


@st.composite
def json_lines(draw: st.DrawFn) -> list[bytes]:
    out = []
    ts = 100.0
    mixed = draw(st.booleans())  # some lines give n a string: those chunks take the row path
    for _ in range(draw(st.integers(0, 40))):
        ts += draw(st.sampled_from([0.0, 0.25, 0.7, 1.5, -0.8, -3.0]))
        kind = draw(st.integers(0, 19))
        rec: dict[str, Any] = {"ts": round(ts, 3)}
        if draw(st.booleans()):
            rec["s"] = draw(st.sampled_from(WORDS))
        if draw(st.booleans()):
            rec["n"] = draw(st.integers(-3, 9))
        if draw(st.booleans()):
            rec["f"] = draw(st.sampled_from([0.5, -0.0, 2.25, 1e10, None]))
        if mixed and kind == 0:
            rec["n"] = "7"
        if kind == 1:
            out.append(b"")
        elif kind == 2:
            out.append(b"{not json")
        elif kind == 3:
            del rec["ts"]
            out.append(json.dumps(rec).encode())
        elif kind == 4:
            out.append(json.dumps({**rec, "ts": "yesterday"}).encode())
        elif kind == 5:
            out.append(
                json.dumps(rec, ensure_ascii=False).encode().replace(b"}", b', "z": "\xff"}')
            )
        elif kind == 6:
            out.append(json.dumps({**rec, "pad": "p" * 300}).encode())  # over max_line_bytes
        elif kind == 7:
            out.append(b"[1, 2]")
        else:
            out.append(json.dumps(rec, ensure_ascii=draw(st.booleans())).encode())
    return out


GROUPS = ["s", "n", "lower(s)", "length(s)", "n % 3", "s, n"]
AGGS = ["sum(n)", "min(f)", "max(n)", "count(f)", "avg(n)", "max(f)", "min(n)"]
WHERES = [
    None,
    "n > 2",
    "s = 'ab'",
    "s LIKE 'a%'",
    "s LIKE '%\\%%'",
    "s RLIKE '^[aA]'",
    "length(s) >= 2",
    "f IS NULL",
    "n BETWEEN 1 AND 5 AND s != 'zz'",
    "NOT (n < 3) OR s IN ('☃', 'x_y')",
    "upper(s) = 'AB'",
]


@st.composite
def queries(draw: st.DrawFn) -> tuple[str, float]:
    group = draw(st.sampled_from(GROUPS))
    aggs = draw(st.lists(st.sampled_from(AGGS), max_size=2, unique=True))
    where = draw(st.sampled_from(WHERES))
    text = f"SELECT {group}, count(*){''.join(', ' + a for a in aggs)} FROM *"
    if where:
        text += f" WHERE {where}"
    text += f" GROUP BY {group}"
    return text, draw(st.sampled_from([1.0, 5.0]))


def run(path: Path, text: str, epoch: float, columnar: bool) -> dict[str, Any]:
    spec = spec_from_query("q", "t", text, epoch_seconds=epoch)
    job = create_job(parse_spec(spec))
    worker = Worker(job, wall_clock=lambda: 0.0)
    quarantine = Quarantine()
    tail = FileTail(
        path, parser=make_parser("json"), quarantine=quarantine, read_size=97,
        max_line_bytes=200,
    )  # fmt: skip
    if columnar:
        tail.columnar = ChunkReader("json", job.batch_projection(), tail.parser.repairs)
        tail.columnar.min_rows = 1  # small chunks too (the default sends them to the row path)
    size = path.stat().st_size
    while True:
        batch = tail.poll()
        assert isinstance(batch, ColumnarBatch) == columnar
        worker.process(batch)
        if not batch and tail.stats()["bytes"] >= size:
            break
    results = {e: snap.to_dict() for e, snap in worker.finish()}
    stats = worker.stats()
    tstats = tail.stats()
    return {
        "results": results,
        "worker": {k: stats[k] for k in ("records_in", "records_accepted", "bad_records",
                                         "late_dropped")},
        "tail": {k: tstats[k] for k in ("lines", "records", "blank_lines", "rejected",
                                        "bad_encoding_repaired")},
        "quarantine": [
            (e["line_no"], e["reason"], e.get("offset")) for e in quarantine.entries()
        ],
        "columnar_rows": stats["columnar_rows"],
    }  # fmt: skip


def close(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return a == b or math.isclose(a, b, rel_tol=1e-9) or (math.isnan(a) and math.isnan(b))
    if isinstance(a, tuple | list) and isinstance(b, tuple | list):
        return len(a) == len(b) and all(close(x, y) for x, y in zip(a, b, strict=True))
    return a == b


def same_results(a: dict[int, dict], b: dict[int, dict]) -> bool:
    return a.keys() == b.keys() and all(
        a[e].keys() == b[e].keys() and all(close(a[e][k], b[e][k]) for k in a[e]) for e in a
    )


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow,
          HealthCheck.function_scoped_fixture])  # fmt: skip
@given(json_lines(), queries())
def test_columnar_equals_row_path_and_duckdb(
    tmp_path: Path, lines: list[bytes], query: tuple[str, float]
) -> None:
    text, epoch = query
    path = tmp_path / "in.jsonl"
    path.write_bytes(b"".join(x + b"\n" for x in lines))
    row = run(path, text, epoch, columnar=False)
    col = run(path, text, epoch, columnar=True)
    assert col["worker"] == row["worker"]
    assert col["tail"] == row["tail"]
    assert col["quarantine"] == row["quarantine"]
    assert same_results(col["results"], row["results"]), (text, col["results"], row["results"])
    if row["worker"]["late_dropped"] == 0:
        check_duckdb(lines, text, epoch, row["results"])


def check_duckdb(lines: list[bytes], text: str, epoch: float, results: dict) -> None:
    parser = make_parser("json")
    rows = []
    for line in lines:
        if len(line) > 200:
            continue  # the tail's max_line_bytes: quarantined as line_too_long
        try:
            rows.append(parser.parse(line))
        except Exception:
            continue
    cols = {"ts": [r["ts"] for r in rows]}
    for name, want in (("s", str), ("n", int), ("f", float)):
        values = [r.get(name) for r in rows]
        if not {type(v) for v in values if v is not None} <= {want}:
            return  # a field of several kinds: SQL has no column for it
        cols[name] = values
    if not rows:
        assert results == {}
        return
    table = pa.table(
        {"ts": pa.array([float(t) for t in cols["ts"]]), "s": pa.array(cols["s"], pa.string()),
         "n": pa.array(cols["n"], pa.int64()), "f": pa.array(cols["f"], pa.float64())}
    )  # fmt: skip
    sql = (
        text.replace("SELECT ", f"SELECT floor(ts / {epoch})::BIGINT AS e, ", 1)
        .replace(" RLIKE ", " SIMILAR TO ")  # rewritten below as regexp_matches
        .replace("FROM *", "FROM t")
        .replace("n % 3", "(n - 3 * floor(n / 3))::BIGINT")  # Python's floored modulo
    )
    if " SIMILAR TO " in sql:
        left, right = sql.split(" SIMILAR TO ", 1)
        field, pat_rest = left.rsplit(" ", 1)[1], right
        pat, rest = pat_rest.split("'", 2)[1], pat_rest.split("'", 2)[2]
        sql = left.rsplit(" ", 1)[0] + f" regexp_matches({field}, '{pat}')" + rest
    sql = sql.replace("GROUP BY ", "GROUP BY e, ")
    sql = sql.replace("LIKE '%\\%%'", "LIKE '%\\%%' ESCAPE '\\'")
    con = duckdb.connect()
    con.execute("SET threads = 1")
    con.register("t", table)
    got: dict[int, dict] = {}
    for rec in con.execute(sql).fetchall():
        e, rest = rec[0], rec[1:]
        width = 2 if "GROUP BY e, s, n" in sql else 1
        key_vals, aggs = rest[:width], rest[width:]
        key = key_vals[0] if width == 1 else tuple(key_vals)
        got.setdefault(e, {})[_encode(key, width)] = (
            tuple(
                None
                if (a is None or (i > 0 and "count(f)" in _agg_names(text)[i] and a == 0))
                else a
                for i, a in enumerate(aggs)
            )
            if len(aggs) > 1
            else aggs[0]
        )
    ours = {e: v for e, v in results.items() if v}
    assert got.keys() == ours.keys(), (sql, got, ours)
    for e in ours:
        assert got[e].keys() == ours[e].keys(), (sql, got[e], ours[e])
        for k in ours[e]:
            assert close(got[e][k], ours[e][k]), (sql, k, got[e][k], ours[e][k])


def _agg_names(text: str) -> list[str]:
    select = text.split(" FROM ")[0].removeprefix("SELECT ")
    parts = [p.strip() for p in select.split(", ")]
    return parts[2:] if parts[:2] == ["s", "n"] else parts[1:]


def _encode(key: Any, width: int) -> Any:
    from agent.ql.keys import encode

    if width == 1:
        return key if type(key) is str else encode(key)
    return tuple(encode(k) for k in key)


def test_a_tail_with_columnar_installed_reads_chunks_into_tables(tmp_path: Path) -> None:
    path = tmp_path / "in.jsonl"
    path.write_text(
        "".join(json.dumps({"ts": 100 + i / 100, "s": "ab"[i % 2]}) + "\n" for i in range(50))
    )
    spec = spec_from_query("q", "t", "SELECT s, count(*) FROM x GROUP BY s")
    job = create_job(parse_spec(spec))

    class Runtime:
        inputs = ("x",)
        worker = Worker(job, wall_clock=lambda: 0.0)

    class Cfg:
        format = "json"
        timestamp_field = "ts"

    tail = FileTail(path, parser=make_parser("json"))
    install_columnar({"x": tail}, {"x": Cfg()}, [Runtime()])
    assert tail.columnar is not None and tail.columnar.fields == frozenset({"s", "ts"})
    tail.columnar.min_rows = 1
    batch = tail.poll()
    assert isinstance(batch, ColumnarBatch) and len(batch) == 50
    Runtime.worker.process(batch)
    assert Runtime.worker.stats()["columnar_rows"] == 50
    assert Runtime.worker.stats()["partials_out"] == 2  # one insert per group, not per line
    install_columnar({"x": tail}, {"x": Cfg()}, [Runtime()], enabled=False)
    assert tail.columnar is None


NGINX_QUERIES = [
    "SELECT status, count(*), sum(bytes) FROM * WHERE path LIKE '/product%' GROUP BY status",
    # map columns (the query string): found by the parallel path once the kernels came in
    "SELECT query.product, count(*) FROM * WHERE query.product IS NOT NULL GROUP BY query.product",
    "SELECT method, host, scheme, count(*) FROM * GROUP BY method, host, scheme",
    "SELECT user_agent, count(*) FROM * WHERE user_agent LIKE '%é%' GROUP BY user_agent",
]
SYSLOG_QUERIES = [
    "SELECT app, count(*) FROM * GROUP BY app",
    "SELECT sd.meta.k, count(*) FROM * GROUP BY sd.meta.k",
]


def _log_lines(fmt: str) -> list[str]:
    from apps.workload import ClickstreamGenerator, access_line

    if fmt == "nginx":
        gen = ClickstreamGenerator(seed=3, start=time.time() - 3600, rate=50.0)
        lines = [access_line(e) for e in gen.take(300)] + ["garbage line"]
        stamp = time.strftime("%d/%b/%Y:%H:%M:%S +0000", time.gmtime(time.time() - 1800))
        for i in range(20):  # absolute-form targets, escapes, repeated parameters
            lines.append(
                f'1.2.3.{i} - - [{stamp}] "GET http://h{i % 2}.example:80/p?product=P{i % 3}'
                f'&product=Q{i % 2} HTTP/1.1" 200 {i} "-" "agent \\xC3\\xA9 {i % 4}"'
            )
        return lines
    if fmt == "syslog":
        stamp = time.strftime("%b %e %H:%M:%S", time.gmtime(time.time() - 120))
        lines = [f"<{i % 30}>{stamp} host app{i % 3}[{i}]: msg {i}" for i in range(200)]
        iso = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - 120))
        lines += [f'<14>1 {iso} h app - - [meta k="v{i % 3}"] m{i}' for i in range(30)]
        return lines
    return [f"line {i} ☃" for i in range(100)]


@pytest.mark.parametrize(
    ("fmt", "query"),
    [("nginx", q) for q in NGINX_QUERIES]
    + [("syslog", q) for q in SYSLOG_QUERIES]
    + [("raw", "SELECT length(body), count(*) FROM * GROUP BY length(body)")],
)
def test_log_formats_agree(tmp_path: Path, fmt: str, query: str) -> None:
    lines = _log_lines(fmt)
    path = tmp_path / "in.log"
    path.write_text("".join(x + "\n" for x in lines))
    results = []
    for columnar in (False, True):
        spec = spec_from_query("q", "t", query)
        job = create_job(parse_spec(spec))
        worker = Worker(job, wall_clock=time.time)
        tail = FileTail(path, parser=make_parser(fmt), read_size=4096)
        if columnar:
            tail.columnar = ChunkReader(fmt, job.batch_projection(), tail.parser.repairs)
            tail.columnar.min_rows = 1
        while batch := tail.poll():
            worker.process(batch)
        by_epoch = {e: s.to_dict() for e, s in worker.finish()}
        if fmt == "raw":  # stamped on arrival: the two runs may straddle an epoch's end
            merged: Counter = Counter()
            for counts in by_epoch.values():
                merged.update(counts)
            by_epoch = {0: dict(merged)}
        results.append((by_epoch, tail.stats()["rejected"]))
    assert results[0] == results[1]
    assert results[0][0]


def test_small_chunks_and_declined_chunks_take_the_row_path(tmp_path: Path) -> None:
    from agent.ingest.columnar import reader as reader_module

    path = tmp_path / "in.jsonl"
    recs = [{"ts": 100 + i / 100, "s": "ab"[i % 2] if i % 7 else i} for i in range(2000)]
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    spec = spec_from_query("q", "t", "SELECT s, count(*) FROM x GROUP BY s")
    job = create_job(parse_spec(spec))
    tail = FileTail(path, parser=make_parser("json"), read_size=2048)
    tail.columnar = ChunkReader("json", job.batch_projection(), tail.parser.repairs)
    worker = Worker(job, wall_clock=lambda: 0.0)
    while batch := tail.poll():
        worker.process(batch)
    # every chunk mixes strings and ints in s: declined, then skipped for a while
    assert tail.counters["columnar_chunks"] == 0
    assert tail.counters["row_chunks"] > reader_module.DECLINED_LIMIT
    assert worker.stats()["records_accepted"] == 2000
