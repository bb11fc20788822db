"""Session windows (``WINDOW SESSION(gap)``) and the refused count windows.

The property: for random event streams (keys with NULL, timestamps, values with NULL) and a
gap, ``elf run``'s row path, its columnar path and DuckDB (sessionization of the raw records
at epoch granularity with ``lag`` and a cumulative sum over the session breaks) give the same
session rows. Then the tracker's flags (tentative epochs, out-of-order epochs, the bound on
open sessions, a master's first epoch) and the parser / checker errors with positions."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import duckdb
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.ql import QLError, compile_query, parse
from agent.ql.sessions import SessionTracker, state_items
from agent.runtime.local.oneshot import run_file
from cbt import CompressedBufferTree

QUERY = (
    "SELECT user, count(*) AS n, sum(bytes) AS total, min(bytes) AS lo, max(bytes) AS hi, "
    "avg(bytes) AS mean FROM log WHERE user IS NULL OR user != 'skip' GROUP BY user "
    "WINDOW SESSION({gap} s) EVERY {epoch} s"
)

records_st = st.lists(
    st.fixed_dictionaries(
        {
            "user": st.sampled_from(["a", "b", "c", "skip", None]),
            # quarter seconds: floor(ts / gap) is exact in floats and in DuckDB
            "ts": st.integers(0, 4 * 120).map(lambda q: 1000 + q / 4),
            "bytes": st.one_of(st.none(), st.integers(-50, 1000)),
        }
    ),
    min_size=1,
    max_size=60,
)


def duckdb_sessions(records: list[dict[str, Any]], epoch: int, g: int) -> list[dict[str, Any]]:
    """The reference: raw records sessionized per user at epoch granularity (``g`` epochs of
    ``epoch`` seconds make the gap): a record starts a new session when its epoch is more
    than ``g`` epochs after the previous record's of the same user."""
    con = duckdb.connect()
    con.execute("CREATE TABLE t (user VARCHAR, ts DOUBLE, bytes BIGINT)")
    con.executemany(
        "INSERT INTO t VALUES (?, ?, ?)", [(r["user"], r["ts"], r["bytes"]) for r in records]
    )
    rows = con.execute(
        f"""
        WITH e AS (
            SELECT user, bytes, CAST(floor(ts / {epoch}) AS BIGINT) AS ep FROM t
            WHERE user IS NULL OR user != 'skip'),
        b AS (
            SELECT *, CASE WHEN ep - lag(ep) OVER (PARTITION BY user ORDER BY ep) <= {g}
                      THEN 0 ELSE 1 END AS brk FROM e),
        s AS (
            SELECT *, sum(brk) OVER (PARTITION BY user ORDER BY ep, brk DESC
                                     ROWS UNBOUNDED PRECEDING) AS sid FROM b)
        SELECT min(ep) * {epoch} AS ws, (max(ep) + 1) * {epoch} AS we, user, count(*) AS n,
               sum(bytes) AS total, min(bytes) AS lo, max(bytes) AS hi, avg(bytes) AS mean
        FROM s GROUP BY user, sid
        """
    ).fetchall()
    cols = ["window_start", "window_end", "user", "n", "total", "lo", "hi", "mean"]
    return [dict(zip(cols, r, strict=True)) for r in rows]


def canon(rows: list[dict[str, Any]]) -> list[tuple]:
    out = []
    for r in rows:
        mean = r["mean"]
        out.append(
            (
                float(r["window_start"]),
                float(r["window_end"]),
                r["user"] is None,
                r["user"] or "",
                r["n"],
                None if r["total"] is None else int(r["total"]),
                r["lo"],
                r["hi"],
                None if mean is None else round(float(mean), 9),
            )
        )
    return sorted(out)


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(records=records_st, epoch=st.sampled_from([1, 2, 5, 15]), g=st.sampled_from([1, 2, 3]))
def test_row_path_columnar_path_and_duckdb_give_the_same_sessions(
    tmp_path: Path, records: list[dict[str, Any]], epoch: int, g: int
) -> None:
    path = tmp_path / "log.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    query = QUERY.format(gap=epoch * g, epoch=epoch)
    columnar = run_file(query, path, "json", columnar=True)
    rows = run_file(query, path, "json", columnar=False)
    assert columnar.sessions is not None and rows.sessions is not None
    assert all(r["flags"] == [] for r in columnar.sessions + rows.sessions)
    want = canon(duckdb_sessions(records, epoch, g))
    assert canon(columnar.sessions) == want
    assert canon(rows.sessions) == want
    assert columnar.columns == ["window_start", "window_end", "user", "n", "total", "lo", "hi",
                                "mean", "flags"]  # fmt: skip


def test_sketches_merge_across_a_session(tmp_path: Path) -> None:
    # 40 distinct pages over 4 adjacent epochs: one session whose approx_distinct is the
    # union's (HLL is exact to rounding at this size), and the percentile of all values
    recs = [{"ts": 2000 + i * 0.5, "user": "u", "page": f"p{i % 40}", "x": i} for i in range(80)]
    path = tmp_path / "s.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    q = (
        "SELECT user, approx_distinct(page) AS pages, approx_percentile(x, 1) AS top, "
        "count(*) AS n FROM log GROUP BY user WINDOW SESSION(10 s)"
    )
    for columnar in (True, False):
        got = run_file(q, path, "json", columnar=columnar).sessions
        assert got is not None and len(got) == 1
        (row,) = got
        assert (row["window_start"], row["window_end"], row["n"]) == (2000.0, 2040.0, 80)
        assert round(row["pages"]) == 40 and row["top"] == 79


def test_elf_run_on_several_processes_gives_the_same_sessions(tmp_path: Path) -> None:
    recs = [
        {"ts": 5000 + (i * 7919 % 3000) / 10, "user": f"u{i % 13}", "bytes": i % 97}
        for i in range(3000)
        if (i // 13) % 9 != 4  # holes, so users have several sessions
    ]
    recs.sort(key=lambda r: r["ts"])
    path = tmp_path / "big.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    q = QUERY.format(gap=4, epoch=2)
    one = run_file(q, path, "json", chunk_bytes=1 << 16)
    two = run_file(q, path, "json", chunk_bytes=1 << 16, processes=2)
    assert one.sessions and canon(one.sessions) == canon(two.sessions or [])
    assert canon(one.sessions) == canon(duckdb_sessions(recs, 2, 2))


# ---- the tracker's flags and bounds --------------------------------------------------------


def _snap(query: Any, recs: list[dict[str, Any]]) -> Any:
    tree = CompressedBufferTree(query.make_aggregator())
    for r in recs:
        for k, v in query.map(r):
            tree.insert(k, v)
    return tree.flush()


def _tracker(**kw: Any) -> tuple[Any, SessionTracker]:
    q = compile_query("SELECT k, count(*) AS n FROM t GROUP BY k WINDOW SESSION(10 s)")
    return q, SessionTracker(q.make_aggregator(), q.row, lambda e: (e * 10.0, e * 10.0 + 10), **kw)


def test_a_tentative_epoch_flags_the_sessions_it_touches_and_closes() -> None:
    q, tr = _tracker()
    assert tr.feed(1, state_items(_snap(q, [{"k": "a"}, {"k": "b"}]))) == []
    flag = "tentative: epoch 2 lacks origins ab12"
    closed = tr.feed(2, state_items(_snap(q, [{"k": "a"}])), [flag])
    assert closed == [{"window_start": 10.0, "window_end": 20.0, "k": "b", "n": 1, "flags": [flag]}]
    closed = tr.feed(3, state_items(_snap(q, [])))
    assert closed == [{"window_start": 10.0, "window_end": 30.0, "k": "a", "n": 2, "flags": [flag]}]
    assert tr.stats()["flagged_epochs"] == 1


def test_out_of_order_epochs_are_counted_and_flag_their_sessions(caplog: Any) -> None:
    q, tr = _tracker()
    tr.feed(5, state_items(_snap(q, [{"k": "a"}])))
    with caplog.at_level("WARNING"):
        tr.feed(4, state_items(_snap(q, [{"k": "a"}])))
    assert "epoch 4 arrived after epoch 5" in caplog.text
    (row,) = tr.feed(6, state_items(_snap(q, [])))
    assert (row["window_start"], row["window_end"], row["n"]) == (40.0, 60.0, 2)
    assert row["flags"] == ["epoch 4 arrived after epoch 5 (out of order)"]
    assert tr.stats()["out_of_order_epochs"] == 1
    # out of order and not within gap of an open session: a session of its own, closed now
    tr.feed(9, state_items(_snap(q, [{"k": "c"}])))
    (alone,) = tr.feed(2, state_items(_snap(q, [{"k": "c"}, {"k": "d"}])))[:1]
    assert (alone["k"], alone["window_start"], alone["n"]) == ("c", 20.0, 1)
    assert alone["flags"] == ["epoch 2 arrived after epoch 9 (out of order)"]
    assert [r["k"] for r in tr.flush()] == ["c"]
    # a replay of an epoch already fed is skipped, not merged twice
    tr.feed(10, state_items(_snap(q, [{"k": "b"}])))
    assert tr.feed(10, state_items(_snap(q, [{"k": "b"}]))) == []
    assert [r["n"] for r in tr.flush()] == [1] and tr.stats()["refed_epochs"] == 1


def test_the_open_sessions_are_bounded_and_early_closes_are_flagged(caplog: Any) -> None:
    q, tr = _tracker(max_open=2)
    with caplog.at_level("WARNING"):
        closed = tr.feed(1, state_items(_snap(q, [{"k": k} for k in "abc"])))
    assert len(closed) == 1 and closed[0]["flags"] == ["closed early: more than 2 open sessions"]
    assert tr.stats() == {"since_epoch": 1, "open": 2, "closed": 1, "early_closed": 1,
                          "out_of_order_epochs": 0, "flagged_epochs": 0,
                          "refed_epochs": 0, "skipped_epochs": 0, "late_marked": 0}  # fmt: skip
    assert "closed early" in caplog.text
    assert [r["flags"] for r in tr.flush()] == [[], []]


def test_a_hole_in_the_epochs_flags_the_sessions_closed_across_it(caplog: Any) -> None:
    q, tr = _tracker()
    tr.feed(1, state_items(_snap(q, [{"k": "a"}, {"k": "b"}])))
    with caplog.at_level("WARNING"):
        closed = tr.feed(4, state_items(_snap(q, [{"k": "b"}])))
    hole = ["epochs 2-3 had no result here"]
    assert [(r["k"], r["flags"]) for r in closed] == [("a", hole), ("b", hole)]
    assert "no result for epochs 2-3" in caplog.text
    assert tr.stats()["skipped_epochs"] == 2
    assert [(r["k"], r["window_start"], r["flags"]) for r in tr.flush()] == [("b", 40.0, [])]


def test_a_master_that_starts_after_the_jobs_first_epoch_flags_its_first_sessions() -> None:
    q, tr = _tracker(first_epoch=3)
    tr.feed(7, state_items(_snap(q, [{"k": "a"}])))
    (row,) = tr.flush()
    assert row["flags"] == ["may have begun before epoch 7, the first this master holds"]
    q, tr = _tracker(first_epoch=7)
    tr.feed(7, state_items(_snap(q, [{"k": "a"}])))
    assert tr.flush()[0]["flags"] == []
    # gap of 3 epochs: a session starting at 8 or 9 may continue activity at 5 or 6 too
    q, tr = _tracker(first_epoch=3, gap_epochs=3)
    out = []
    for e, keys in [(7, "a"), (8, "b"), (9, "c"), (10, "d")]:
        out += tr.feed(e, state_items(_snap(q, [{"k": k} for k in keys])))
    flagged = {r["k"]: bool(r["flags"]) for r in out + tr.flush()}
    assert flagged == {"a": True, "b": True, "c": True, "d": False}


def test_having_applies_per_session_and_gaps_longer_than_one_epoch_split() -> None:
    q = compile_query("SELECT k, count(*) AS n FROM t GROUP BY k HAVING n > 1 WINDOW SESSION(10 s)")
    tr = SessionTracker(q.make_aggregator(), q.row, lambda e: (e * 10.0, e * 10.0 + 10))
    out = []
    for e, recs in [(0, ["a", "b"]), (1, ["a"]), (3, ["a", "b"]), (4, ["b"])]:
        out += tr.feed(e, state_items(_snap(q, [{"k": k} for k in recs])))
    out += tr.flush()
    assert [(r["k"], r["window_start"], r["window_end"], r["n"]) for r in out] == [
        ("a", 0.0, 20.0, 2),
        ("b", 30.0, 50.0, 2),
    ]


# ---- syntax and checks ----------------------------------------------------------------------


def test_session_syntax_and_spec_fields() -> None:
    q = compile_query("select u, count(*) from t group by u window session(2 min) mode async")
    assert q.query.window is not None and q.query.window.session
    assert q.query.window.to_sql() == "WINDOW SESSION(120 s)"
    assert compile_query(q.query.to_sql()).query == q.query
    assert (q.epoch_seconds, q.mode, q.window_size, q.session_gap_epochs) == (120.0, "window", 1, 1)
    assert compile_query("SELECT session FROM t GROUP BY session").session_gap_epochs is None
    q = compile_query("SELECT count(*) FROM t WINDOW SESSION(2 min) EVERY 30 s")
    assert q.query.window is not None and q.query.window.to_sql() == (
        "WINDOW SESSION(120 s) EVERY 30 s"
    )
    assert compile_query(q.query.to_sql()).query == q.query
    assert (q.epoch_seconds, q.mode, q.window_size, q.window_slide) == (30.0, "batch", 1, 1)
    assert q.session_gap_epochs == 4


session_windows = st.builds(
    lambda gap, step, mode: (gap, step, mode),
    st.integers(1, 10**6).map(lambda ms: ms / 1000),
    st.one_of(st.none(), st.integers(1, 10**5).map(lambda ms: ms / 1000)),
    st.sampled_from(["", " MODE SYNC", " MODE ASYNC"]),
)


RECORD = st.tuples(st.sampled_from("abc"), st.integers(0, 12), st.booleans())  # key, epoch, late


@settings(max_examples=200, deadline=None)
@given(session_windows, st.sampled_from(["ms", "s", "min"]))
def test_session_windows_print_back_and_compile_or_say_why(w: Any, unit: str) -> None:
    gap, step, mode = w
    scale = {"ms": 1000, "s": 1, "min": 1 / 60}[unit]
    every = "" if step is None else f" EVERY {step * scale!r} {unit}"
    window = f"WINDOW SESSION({gap * scale!r} {unit}){every}{mode}"
    text = f"SELECT k, count(*) AS n FROM t GROUP BY k {window}"
    try:
        q = compile_query(text)
    except QLError as exc:  # whole ms, EVERY dividing the gap, at most 10 000 epochs
        assert exc.line == 1 and exc.column >= 1
        assert any(
            why in str(exc) for why in ("whole milliseconds", "divide", "at most", "at least 1 ms")
        ), str(exc)
        return
    assert q.query.window is not None and q.query.window.session
    assert parse(q.query.to_sql()) == q.query
    gap_ms = round(gap * 1000)
    step_ms = gap_ms if step is None else round(step * 1000)
    assert q.epoch_seconds == step_ms / 1000 and q.session_gap_epochs == gap_ms // step_ms
    assert gap_ms % step_ms == 0 and q.session_gap_epochs <= 10_000


SOUP = ["SELECT", "count(*)", "FROM", "t", "WINDOW", "SESSION", "(", ")", "30", "s", "EVERY",
        "ROWS", "ROW", "10", "GROUP", "BY", "k", "k,", "ORDER", "LIMIT", "MODE", "ASYNC", "min",
        "PARTITIONS", "AS", "flags", "session", ";"]  # fmt: skip


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(SOUP), max_size=14))
def test_window_token_soup_raises_only_qlerror(words: list[str]) -> None:
    for text in (" ".join(words), "SELECT k, count(*) AS n FROM t GROUP BY k " + " ".join(words)):
        try:
            compile_query(text)
        except QLError as exc:
            assert exc.line >= 1 and exc.column >= 1


@pytest.mark.parametrize(
    ("text", "line", "column", "what"),
    [
        ("SELECT count(*) FROM t\nWINDOW 100 ROWS", 2, 12, "count windows (WINDOW n ROWS) are not"),
        ("SELECT count(*) FROM t WINDOW SESSION(30 s) EVERY 7 s", 1, 24, "EVERY to divide"),
        ("SELECT count(*) FROM t WINDOW SESSION(30 s) EVERY 1 min", 1, 24, "EVERY to divide"),
        ("SELECT count(*) FROM t WINDOW SESSION(1 d) EVERY 1 s", 1, 24, "at most 10000"),
        ("SELECT count(*) FROM t WINDOW SESSION(30 s", 1, 43, "')' after the SESSION gap"),
        ("SELECT count(*) FROM t WINDOW SESSION()", 1, 39, "a positive duration after SESSION("),
        ("SELECT count(*) FROM t WINDOW SESSION(0 s)", 1, 39, "a positive duration"),
        ("SELECT count(*) FROM t WINDOW SESSION(5 fortnights)", 1, 41, "a time unit"),
        ("SELECT k, count(*) AS n FROM t GROUP BY k\nORDER BY n LIMIT 3 WINDOW SESSION(1 s)",
         2, 1, "no ORDER BY with WINDOW SESSION"),
        ("SELECT k, count(*) AS n FROM t GROUP BY k LIMIT 3 WINDOW SESSION(1 s)",
         1, 43, "no LIMIT with WINDOW SESSION"),
        ("SELECT count(*) FROM t WINDOW SESSION(1 s) PARTITIONS 2", 1, 44,
         "no PARTITIONS with WINDOW SESSION"),
        ("SELECT count(*) AS flags FROM t WINDOW SESSION(1 s)", 1, 8, "another column name"),
        ("SELECT count(*) FROM t WINDOW SESSION(0.5 ms)", 1, 24, "at least 1 ms"),
    ],
)  # fmt: skip
def test_session_and_count_window_errors_have_positions(
    text: str, line: int, column: int, what: str
) -> None:
    with pytest.raises(QLError) as info:
        compile_query(text)
    assert (info.value.line, info.value.column) == (line, column), str(info.value)
    assert what in str(info.value)


def test_epoch_seconds_of_a_session_query_is_the_gap() -> None:
    from agent.runtime.local.oneshot import query_spec

    assert query_spec("SELECT count(*) FROM t WINDOW SESSION(30 s)", 30.0)["epoch_seconds"] == 30
    with pytest.raises(ValueError, match="WINDOW SESSION"):
        query_spec("SELECT count(*) FROM t WINDOW SESSION(30 s)", 10.0)


def test_window_bounds_are_whole_epochs() -> None:
    assert math.isclose(
        duckdb_sessions([{"user": "a", "ts": 1000.25, "bytes": 1}], 5, 1)[0]["window_start"], 1000
    )


# ---- the job class: runtime changes -----------------------------------------------------------


def test_a_session_job_refuses_changes_of_aggregate_and_epochs_and_keeps_sessions_on_others() -> (
    None
):
    from agent.errors import Conflict
    from agent.jobs.changes import parse_change
    from agent.jobs.job import create_job, parse_spec
    from agent.jobs.ql_job import spec_from_query

    text = "SELECT k, count(*) AS n FROM t GROUP BY k WINDOW SESSION(10 s)"
    spec = parse_spec(spec_from_query("s", "t", text, start_epoch=1))
    with pytest.raises(Conflict, match="cannot change the aggregator"):
        parse_change({"query": text.replace("count(*)", "max(x)")}).apply(spec)
    with pytest.raises(Conflict, match="cannot change epoch_seconds"):
        parse_change({"epoch_seconds": 5}).apply(spec)
    # a new HAVING: the same aggregate and epochs, applied as every agent does (setup again)
    having = text.replace("GROUP BY k", "GROUP BY k HAVING n > 1")
    new = parse_change({"query": having}).apply(spec)
    assert new is not None
    job = create_job(spec)
    q = compile_query(text)
    job.on_epoch_result(1, _snap(q, [{"k": "a"}, {"k": "b"}]))
    job.spec, job.params = new, new.params
    job.setup()
    job.on_epoch_result(2, _snap(q, [{"k": "a"}]))
    job.on_epoch_result(3, _snap(q, []))
    reply = job.on_query({})
    # b (one record) fails the new HAVING; a's session kept its first epoch across the change
    assert [(r["k"], r["n"], r["window_start"]) for r in reply["rows"]] == [("a", 2, 10.0)]
    # a query without SESSION closes the open ones, flagged
    job.on_epoch_result(4, _snap(q, [{"k": "c"}, {"k": "c"}]))
    plain = parse_spec(spec_from_query("s", "t", "SELECT k, count(*) AS n FROM t GROUP BY k",
                                       start_epoch=1, epoch_seconds=10))  # fmt: skip
    job.spec, job.params = plain, plain.params
    job.setup()
    assert job.session_rows[-1]["flags"] == ["closed by a change of the job's query"]
    assert job.sessions is None


# ---- the command line --------------------------------------------------------------------------


@pytest.mark.parametrize("output", ["table", "jsonl", "csv"])
def test_elf_run_prints_the_sessions(tmp_path: Path, output: str) -> None:
    import csv
    import io

    from click.testing import CliRunner

    import agent.cli as cli_module

    recs = [
        {"ts": 1000.5, "user": "a", "bytes": 10},
        {"ts": 1001, "user": "b", "bytes": 5},
        {"ts": 1035, "user": "a", "bytes": 1},
        {"ts": 1100, "user": "a", "bytes": 3},
    ]
    path = tmp_path / "s.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in recs) + "not json\n")
    q = "SELECT user, count(*) AS n, sum(bytes) AS b FROM log GROUP BY user WINDOW SESSION(30 s)"
    r = CliRunner().invoke(cli_module.cli, ["run", q, "--file", str(path), "--output", output])
    assert r.exit_code == 0, r.output
    want = [(990.0, 1020.0, "b", 1, 5), (990.0, 1050.0, "a", 2, 11), (1080.0, 1110.0, "a", 1, 3)]
    if output == "jsonl":
        rows = [json.loads(x) for x in r.stdout.splitlines()]
        got = [(x["window_start"], x["window_end"], x["user"], x["n"], x["b"]) for x in rows]
        assert got == want and all(x["flags"] == [] for x in rows)
    elif output == "csv":
        rows = list(csv.DictReader(io.StringIO(r.stdout)))
        assert list(rows[0]) == ["window_start", "window_end", "user", "n", "b", "flags"]
        assert [(float(x["window_start"]), x["user"], int(x["n"])) for x in rows] == [
            (w[0], w[2], w[3]) for w in want
        ]
    else:
        assert "window_start" in r.stdout and "flags" in r.stdout
    assert "1 rejected" in r.stderr and "3 sessions" in r.stderr


def test_elf_submit_sends_a_session_query_spec(sent: list[dict[str, Any]]) -> None:
    from click.testing import CliRunner

    import agent.cli as cli_module

    specs = sent
    q = "SELECT user, count(*) FROM log GROUP BY user WINDOW SESSION(1 min) EVERY 10 s"
    r = CliRunner().invoke(cli_module.cli, ["submit", "--name", "s", "--query", q])
    assert r.exit_code == 0, r.output
    (spec,) = specs
    assert (spec["epoch_seconds"], spec["mode"], spec["window_size"]) == (10.0, "batch", 1)
    r = CliRunner().invoke(
        cli_module.cli, ["submit", "--name", "s", "--query", q, "--epoch-seconds", "60"]
    )
    assert r.exit_code != 0 and "disagrees" in r.output


def _sessions_of(activity: dict[str, list[int]], gap: int) -> set[tuple[str, int, int, int]]:
    """The reference: (key, first epoch, last epoch, records) of each key's maximal runs of
    active epochs within ``gap``, from a key -> epochs (one entry per record) map."""
    out = set()
    for key, epochs in activity.items():
        run: list[int] = []
        for ep in sorted(epochs):
            if run and ep - run[-1] > gap:
                out.add((key, run[0], run[-1], len(run)))
                run = []
            run.append(ep)
        if run:
            out.add((key, run[0], run[-1], len(run)))
    return out


RECORD = st.tuples(st.sampled_from("abc"), st.integers(0, 12), st.booleans())  # key, epoch, late


@settings(max_examples=200, deadline=None)
@given(
    records=st.lists(RECORD, min_size=1, max_size=40),
    gap=st.sampled_from([1, 2, 3]),
    told=st.lists(st.integers(0, 14), max_size=40),
)
def test_late_records_flag_every_session_they_could_change(
    records: list[tuple[str, int, bool]], gap: int, told: list[int]
) -> None:
    """Exact or flagged with late records: records (key, epoch, late?) where the late ones are
    in no epoch's result, and the master learns of each late epoch at a random point (``told``:
    before which epoch's feed; past the last: after the end) - as a master hears the origins'
    reports, before or after it fed the epoch. Every session row is then either one of the
    reference's over *all* records (exact) or flagged naming a late epoch; a row closed before
    the master heard is flagged afterwards by ``could_hold``, as ``QLJob.on_late_records``
    does. No late record: no flag at all."""
    from agent.ql.sessions import could_hold, late_flag

    q, tr = _tracker(gap_epochs=gap)
    everything: dict[str, list[int]] = {}
    in_time: dict[int, list[dict[str, Any]]] = {e: [] for e in range(13)}
    late_epochs = []
    for key, epoch, late in records:
        everything.setdefault(key, []).append(epoch)
        if late:
            late_epochs.append(epoch)
        else:
            in_time[epoch].append({"k": key})
    when = {e: told[i % len(told)] if told else 13 for i, e in enumerate(late_epochs)}
    rows: list[dict[str, Any]] = []

    def hear(before: int) -> None:
        for e in [e for e, t in when.items() if t == before]:
            why = late_flag(e)
            tr.mark_late(e, why)
            for row in rows:
                if could_hold(row, lambda ts: int(ts // 10), e, gap) and why not in row["flags"]:
                    row["flags"] = sorted([*row["flags"], why])

    for epoch in range(13):
        hear(epoch)
        rows += tr.feed(epoch, state_items(_snap(q, in_time[epoch])))
    for t in (13, 14):
        hear(t)
    rows += tr.flush()
    for t in (13, 14):  # a report after the end flags the rows the run gave
        hear(t)
    reference = _sessions_of(everything, gap)
    for row in rows:
        got = (row["k"], int(row["window_start"] // 10), int(row["window_end"] // 10) - 1, row["n"])
        assert got in reference or any("late records" in f for f in row["flags"]), (row, reference)
        if not late_epochs:
            assert row["flags"] == []


def test_a_master_flags_the_sessions_late_records_could_change(tmp_path: Path) -> None:
    """At a master (``QLJob.on_late_records``, called as the origins' late reports arrive):
    a session closed and kept gets the flag in the query reply and in its epoch's
    ``closed_windows``; an open one closes with it; a session far from the late epoch stays
    exact. And ``elf run`` flags the sessions its own late records could change."""
    from agent.jobs.job import create_job, parse_spec
    from agent.jobs.ql_job import spec_from_query
    from agent.ql.sessions import late_flag

    text = "SELECT k, count(*) AS n FROM t GROUP BY k WINDOW SESSION(10 s)"
    job = create_job(parse_spec(spec_from_query("s", "t", text, start_epoch=1)))
    q = job.compiled
    job.on_epoch_result(1, _snap(q, [{"k": "a"}]))
    job.on_epoch_result(2, _snap(q, [{"k": "b"}]))  # a closes (it was active in 1 only)
    job.on_late_records(2, 1)  # a record of epoch 2 came late: a may have gone on
    job.on_epoch_result(3, _snap(q, []))  # b closes
    job.on_late_records(9, 4)  # reported before epoch 9 is fed
    for epoch, keys in [(4, ["far"]), (5, []), (6, []), (7, []), (8, []), (9, ["c"]), (10, [])]:
        job.on_epoch_result(epoch, _snap(q, [{"k": k} for k in keys]))
    reply = job.on_query({})
    by_key = {r["k"]: r["flags"] for r in reply["rows"]}
    assert by_key == {"a": [late_flag(2)], "b": [late_flag(2)], "far": [], "c": [late_flag(9)]}
    assert job.closed_windows(2)["rows"][0]["flags"] == [late_flag(2)]  # type: ignore[index]

    path = tmp_path / "late.jsonl"
    recs = [{"ts": 10.5, "k": "a"}, {"ts": 50.5, "k": "b"}, {"ts": 20.5, "k": "a"}]  # 20.5 late
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    for columnar in (True, False):
        got = run_file(text, path, "json", columnar=columnar, allowed_lateness=5.0)
        assert got.late == {2: 1}
        assert sorted((r["k"], r["n"], r["flags"]) for r in got.sessions or []) == [
            ("a", 1, [late_flag(2)]),  # a at 2 would have joined it
            ("b", 1, []),
        ]
