"""ELF QL's columnar path against DuckDB on one latency query (issue 26's benchmark line).

``SELECT path, approx_percentile(request_time, ARRAY[0.5, 0.99]) FROM t GROUP BY path`` over
one nginx access log in the ``main`` format (combined plus ``$request_time
$upstream_response_time``, as :mod:`columnar_parse_bench` writes it), on one core:

* ELF: the file cut into the tail's 4 MiB whole-line chunks, each parsed by the columnar
  kernel (projected to the fields the query reads) and pre-aggregated by
  :class:`~agent.ql.arrow_plan.ArrowPlan` (one KLL sketch per path per chunk, k = 200), the
  states merged into one CBT, the result rows read - what a worker does per chunk, without
  the epoch bookkeeping (the whole file is one epoch);
* DuckDB: ``SET threads = 1``, the same file read as lines (``read_csv``, one column), split
  with one regular expression, ``approx_quantile(request_time, [0.5, 0.99])`` (t-digest)
  ``GROUP BY path``.

Both timed as CPU time (``time.process_time``, best of ``repeats``), interleaved, in the same
process. lines/s = lines / best time. The answers are checked against each other: the same
paths, and the median relative difference of their p50 / p99 reported (both are estimates).
"""

from __future__ import annotations

import re
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from columnar_parse_bench import MAIN, START, latencies  # bench/
from tail_chunks import tail_chunks  # bench/

from agent.ingest.columnar.parse import parse_chunk
from agent.ql import compile_query
from agent.ql.arrow_plan import ArrowPlan
from agent.ql.checker import analyze
from apps.workload import ClickstreamGenerator, access_line
from cbt import CompressedBufferTree

QUERY = (
    "SELECT path, approx_percentile(request_time, ARRAY[0.5, 0.99]) AS p FROM access GROUP BY path"
)
_TARGET = re.compile(r"/product\?id=([^&]+)&dir=([^&]+)&")
# combined, then "$request_time $upstream_response_time" (the upstream list may hold spaces)
_MAIN_RE = (
    r'^(\S+) \S+ \S+ \[([^\]]*)\] "(\S+) (\S+) (\S+)" (\d{3}) (\d+|-) "[^"]*" "[^"]*" '
    r"(\S+) (.*)$"
)
DUCK_SQL = """
SELECT split_part(m.target, '?', 1) AS path,
       approx_quantile(TRY_CAST(m.rt AS DOUBLE), [0.5, 0.99]) AS p
FROM (SELECT regexp_extract(column0, '{re}', ['ip', 'time', 'method', 'target', 'proto',
                                               'status', 'bytes', 'rt', 'up']) AS m
      FROM read_csv('{path}', header = false, columns = {{'column0': 'VARCHAR'}},
                    delim = '\\x01', quote = '', escape = ''))
GROUP BY 1
"""


def make_file(lines: int, directory: str) -> Path:
    """An nginx ``main``-format log of ``lines`` click events whose request paths name the
    directory and product (``/books/product/P000011?action=click&…``: hundreds of paths, a
    few hot, a long tail) - no percent-encoding, so ELF's decoded ``path`` and DuckDB's raw
    one are the same text."""
    events = ClickstreamGenerator(seed=1, start=START, rate=lines / 250).take(lines)
    text = "".join(
        _TARGET.sub(r"/\2/product/\1?", access_line(e)) + f" {latencies(i)}\n"
        for i, e in enumerate(events)
    )
    path = Path(directory) / "access_main.log"
    path.write_bytes(text.encode())
    return path


def elf_run(data: bytes) -> dict[str, Any]:
    q = compile_query(QUERY)
    an = analyze(q.query)
    plan = ArrowPlan(an, q.make_aggregator())
    tree = CompressedBufferTree(q.make_aggregator())
    for chunk in tail_chunks(data):
        table = parse_chunk(MAIN, chunk, fields=plan.fields).table
        keys, states = plan.partials(table)
        tree.merge_states(keys, states)
    return {r["path"]: r["p"] for r in q.rows(tree.flush())}


def duck_run(path: Path) -> dict[str, Any]:
    import duckdb

    con = duckdb.connect()
    con.execute("SET threads = 1")
    rows = con.execute(DUCK_SQL.format(re=_MAIN_RE, path=path)).fetchall()
    con.close()
    return {r[0]: r[1] for r in rows}


def _cpu(fn: Any, *args: Any) -> tuple[float, Any]:
    t0 = time.process_time()
    out = fn(*args)
    return time.process_time() - t0, out


def compare(lines: int, repeats: int) -> dict[str, Any]:
    """The benchmark (module docstring) over a fresh file of ``lines`` lines."""
    with tempfile.TemporaryDirectory(prefix="ql-pct-") as tmp:
        path = make_file(lines, tmp)
        data = path.read_bytes()
        elf_t, duck_t = [], []
        elf_out: dict[str, Any] = {}
        duck_out: dict[str, Any] = {}
        for i in range(repeats):  # interleaved, alternating which goes first
            order = ("elf", "duck") if i % 2 == 0 else ("duck", "elf")
            for side in order:
                if side == "elf":
                    t, elf_out = _cpu(elf_run, data)
                    elf_t.append(t)
                else:
                    t, duck_out = _cpu(duck_run, path)
                    duck_t.append(t)
    if set(elf_out) != set(duck_out):
        raise SystemExit(f"paths differ: {len(elf_out)} from ELF, {len(duck_out)} from DuckDB")
    diffs: list[list[float]] = [[], []]
    for key, ours in elf_out.items():
        for j in (0, 1):
            a, b = ours[j], duck_out[key][j]
            diffs[j].append(abs(a - b) / max(abs(b), 1e-9))
    e, d = min(elf_t), min(duck_t)
    return {
        "query": QUERY,
        "lines": lines,
        "bytes": len(data),
        "paths": len(elf_out),
        "elf_columnar_lines_per_s": round(lines / e),
        "duckdb_t1_lines_per_s": round(lines / d),
        "ratio_elf_over_duckdb": round(d / e, 3),
        "goal": "ELF >= 0.8x DuckDB (lines/s, one core)",
        "median_rel_diff_p50": round(statistics.median(diffs[0]), 4),
        "median_rel_diff_p99": round(statistics.median(diffs[1]), 4),
        "elf_cpu_s": [round(t, 3) for t in elf_t],
        "duckdb_cpu_s": [round(t, 3) for t in duck_t],
    }
