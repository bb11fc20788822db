"""JSON-lines kernel candidates for a projected query, side by side on the same chunks.

The click events of :class:`~apps.workload.ClickstreamGenerator` as JSON lines (≈300 bytes a
line), cut into 4 MiB chunks of whole lines; each candidate turns every chunk into the table
of the fields ``ts, directory, action, price`` (what the ``directory, action`` benchmark query
reads). Rates are lines per CPU-second of this process, best of ``--repeats``:

* ``orjson_per_line`` — the row parser's decoder per line, then one ``pa.array`` per field;
* ``msgspec_per_line`` — ``Decoder(Proj).decode`` per line (``Proj``: the fields, ``Any``);
* ``msgspec_framed`` — the kernel's whole-chunk decode (nonce-framed ``decode_lines``) alone;
* ``arrow_reader_projected`` — ``pyarrow.json`` with an explicit schema (off in agents);
* ``parse_chunk`` — the shipped path end to end (:func:`agent.ingest.columnar.parse.parse_chunk`
  with ``fields``: lines, the C scanner, columns, ``ts``, merge);
* ``parse_chunk_msgspec`` — the same with the C scanner off (screen, framing, msgspec, columns);
* ``json_native_scan`` — the C scanner's pass alone (``json_scan_c.scan`` over the chunk);
* ``json_msgspec_screen`` — the kernel's number screen alone.

**Native decoders** (issue 27: "a native decoder into Arrow with projection"), each into the
same projected table (``ts`` and ``price`` float64, ``directory`` and ``action`` string), on
the same chunks, each in a fresh process of its own (a crash costs only that candidate, and
its peak RSS is its own: ``VmHWM``, reset once the chunks are loaded, less the RSS then, so
imports count), wall and CPU rates of the best of ``--repeats``:

* ``duckdb_json_extract`` — DuckDB in process, ``json_extract(line, [paths])`` over an Arrow
  string column of the chunk's lines (zero copy), one connection, ``threads=1``;
* ``duckdb_json_transform`` — the same with ``json_transform`` to the typed struct;
* ``duckdb_read_json_chunk`` — DuckDB ``read_json`` over the chunk (written to /dev/shm);
* ``polars_read_ndjson`` — ``pl.read_ndjson(schema=)``, ``POLARS_MAX_THREADS=1``, ``to_arrow``;
* ``pyarrow_json`` — ``pyarrow.json.read_json`` with the explicit schema;
* ``pysimdjson`` — ``simdjson.Parser.parse`` per line, the fields, ``pa.array`` per field;
* ``elf_kernel`` — the shipped kernel, ``parse_chunk(..., fields=)`` (the C scanner
  ``json_native``, exact; msgspec where the extension is not built);
* ``elf_kernel_msgspec`` — the same with the C scanner switched off (the msgspec kernel);
* ``duckdb_t1_query`` — the reference: DuckDB ``threads=1`` running the benchmark query
  (``directory, action, count(*), sum(price) GROUP BY ...``) with ``read_json`` over the file.

A candidate whose package is not installed reports ``"missing"``; one whose process dies
reports ``"crashed"``. ``vs_duckdb_t1_query`` is each candidate's rate over the reference's.

    python bench/json_kernel_bench.py            # 200,000 lines
    python bench/json_kernel_bench.py --quick    # 50,000 lines
    python bench/json_kernel_bench.py --native-only
    python bench/json_kernel_bench.py --end-to-end 7   # the query end to end, alternated

``--end-to-end ROUNDS``: the benchmark query (``directory, action, count(*), sum(price)``) end
to end on ingest_bench's JSON file — ELF columnar (C scanner), the same with msgspec, DuckDB
``threads=1`` — alternated ROUNDS times; best and median wall seconds and their ratios.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from operator import attrgetter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import msgspec
import numpy as np
import orjson
import pyarrow as pa
import pyarrow.json as pj
from tail_chunks import tail_chunks  # bench/

from agent.ingest.columnar import json_msgspec
from agent.ingest.columnar.json_native import SCANNER, native_in_use, use_native
from agent.ingest.columnar.lines import split_lines
from agent.ingest.columnar.parse import parse_chunk
from agent.ingest.tail import CHUNK_BYTES
from apps.workload import ClickstreamGenerator, json_line

FIELDS = ("ts", "directory", "action", "price")


def chunks_of(n: int) -> list[bytes]:
    events = ClickstreamGenerator(seed=1, start=1_800_000_000, rate=n / 250).take(n)
    data = "".join(json_line(e) + "\n" for e in events).encode()
    return list(tail_chunks(data))


def best_of(repeats: int, chunks: list[bytes], fn: Callable[[bytes], Any]) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.process_time()
        for c in chunks:
            fn(c)
        best = min(best, time.process_time() - t0)
    return best


SCHEMA_SQL = "{ts: 'DOUBLE', directory: 'VARCHAR', action: 'VARCHAR', price: 'DOUBLE'}"
TRANSFORM = '{"ts":"DOUBLE","directory":"VARCHAR","action":"VARCHAR","price":"DOUBLE"}'


def line_array(c: bytes) -> pa.StringArray:
    """The chunk's lines (each with its newline: JSON whitespace) over its own buffer."""
    ends = np.flatnonzero(np.frombuffer(c, np.uint8) == 10)
    offsets = np.empty(len(ends) + 1, np.int32)
    offsets[0] = 0
    offsets[1:] = ends + 1
    return pa.StringArray.from_buffers(len(ends), pa.py_buffer(offsets), pa.py_buffer(c))


def native_candidate(name: str) -> Callable[[bytes], Any] | None:
    """The decoder ``name`` as chunk -> projected table, or None when not installed."""
    import importlib.util

    schema = pa.schema(
        [("ts", pa.float64()), ("directory", pa.string()), ("action", pa.string()),
         ("price", pa.float64())]
    )  # fmt: skip
    if name.startswith("duckdb") and importlib.util.find_spec("duckdb"):
        import duckdb

        con = duckdb.connect(config={"threads": 1})
        paths = ", ".join(f"'$.{f}'" for f in FIELDS)
        sql = {
            "duckdb_json_extract": "SELECT v[1]::DOUBLE AS ts, v[2] AS directory, v[3] AS "
            f"action, v[4]::DOUBLE AS price FROM (SELECT json_extract_string(line, [{paths}]) "
            "AS v FROM lines)",
            "duckdb_json_transform": f"SELECT s.* FROM (SELECT json_transform(line, "
            f"'{TRANSFORM}') AS s FROM lines)",
            "duckdb_read_json_chunk": "SELECT * FROM read_json('/dev/shm/elf-json-bench.json', "
            f"format='newline_delimited', columns={SCHEMA_SQL})",
        }[name]

        def duck(c: bytes) -> pa.Table:
            if name == "duckdb_read_json_chunk":
                Path("/dev/shm/elf-json-bench.json").write_bytes(c)
            else:
                con.register("lines", pa.table({"line": line_array(c)}))
            return con.sql(sql).to_arrow_table()

        return duck
    if name == "polars_read_ndjson" and importlib.util.find_spec("polars"):
        import io

        import polars as pl

        pschema = {"ts": pl.Float64, "directory": pl.String, "action": pl.String,
                   "price": pl.Float64}  # fmt: skip
        return lambda c: pl.read_ndjson(io.BytesIO(c), schema=pschema).to_arrow()
    if name == "pyarrow_json":

        def arrow(c: bytes) -> pa.Table:
            read = pj.ReadOptions(use_threads=False, block_size=len(c) + 1)
            parse = pj.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore")
            return pj.read_json(pa.BufferReader(c), read_options=read, parse_options=parse)

        return arrow
    if name == "pysimdjson" and importlib.util.find_spec("simdjson"):
        import simdjson

        parser = simdjson.Parser()

        def simd(c: bytes) -> pa.Table:
            cols: dict[str, list[Any]] = {f: [] for f in FIELDS}
            for line in c.split(b"\n")[:-1]:
                obj = parser.parse(line)
                for f in FIELDS:
                    cols[f].append(obj.get(f))
                del obj  # the parser's document is reused by the next parse
            return pa.table({f: pa.array(v) for f, v in cols.items()})

        return simd
    if name in ("elf_kernel", "elf_kernel_msgspec"):
        use_native(name == "elf_kernel")  # this process only (a fresh one per candidate)
        return lambda c: parse_chunk("json", c, fields=frozenset(FIELDS) - {"ts"})
    return None


NATIVE = (
    "duckdb_json_extract",
    "duckdb_json_transform",
    "duckdb_read_json_chunk",
    "polars_read_ndjson",
    "pyarrow_json",
    "pysimdjson",
    "elf_kernel",
    "elf_kernel_msgspec",
)


def _status_mb(key: str) -> float:
    """``VmRSS`` / ``VmHWM`` of this process in MB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _duckdb_query(path: str) -> Any:
    import duckdb

    con = duckdb.connect(config={"threads": 1})
    src = f"read_json('{path}', format='newline_delimited', columns={SCHEMA_SQL})"
    return con.sql(
        f"SELECT directory, action, count(*), sum(price) FROM {src} GROUP BY directory, action"
    ).fetchall()


def run_native(name: str, n: int, repeats: int, path: str) -> dict[str, Any]:
    """In a fresh process: one candidate's rates (lines/s by wall and by CPU) and peak RSS."""
    import os

    os.environ["POLARS_MAX_THREADS"] = "1"  # before polars loads
    chunks = list(tail_chunks(Path(path).read_bytes()))
    # the file's bytes and chunks are not the candidate's: reset the peak (Linux: "5" resets
    # VmHWM to the current RSS), and count from here
    Path("/proc/self/clear_refs").write_text("5")
    base = _status_mb("VmRSS")
    if name == "duckdb_t1_query":
        import importlib.util

        if not importlib.util.find_spec("duckdb"):
            return {"status": "missing"}
        fn: Callable[[bytes], Any] | None = None
    else:
        fn = native_candidate(name)
        if fn is None:
            return {"status": "missing"}
        fn(chunks[0])  # warm: imports, connections
    wall = cpu = float("inf")
    for _ in range(repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        if fn is None:
            _duckdb_query(path)
        else:
            for c in chunks:
                fn(c)
        wall = min(wall, time.perf_counter() - t0)
        cpu = min(cpu, time.process_time() - c0)
    return {
        "status": "ok",
        "lines_per_s": round(n / wall),
        "lines_per_cpu_s": round(n / cpu),
        "peak_rss_added_mb": round(_status_mb("VmHWM") - base, 1),
    }


def native_table(n: int, repeats: int) -> dict[str, Any]:
    """Every native candidate and the DuckDB reference, each in a fresh process."""
    import tempfile
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool
    from multiprocessing import get_context

    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="elf-json-") as tmp:
        path = str(Path(tmp) / "clicks.json")
        Path(path).write_bytes(b"".join(chunks_of(n)))
        for name in (*NATIVE, "duckdb_t1_query"):
            with ProcessPoolExecutor(1, mp_context=get_context("spawn")) as pool:
                try:
                    out[name] = pool.submit(run_native, name, n, repeats, path).result()
                except BrokenProcessPool:
                    out[name] = {"status": "crashed"}
    ref = out["duckdb_t1_query"].get("lines_per_s")
    for entry in out.values():
        if ref and entry.get("lines_per_s"):
            entry["vs_duckdb_t1_query"] = round(entry["lines_per_s"] / ref, 2)
    return out


def end_to_end(n: int, rounds: int) -> dict[str, Any]:
    """``directory, action, count(*), sum(price)`` end to end on ingest_bench's JSON file:
    ELF columnar (C scanner), ELF columnar with msgspec, DuckDB ``threads=1``, alternated
    ``rounds`` times (a noisy machine slows all three alike); wall seconds, best and median."""
    import statistics
    import tempfile

    import ingest_bench as ib  # bench/
    from ingest_workload import generate

    engines = {
        "elf_columnar": lambda p: ib.elf_engine(p, "json", "directory_action", "columnar")[0],
        "elf_columnar_msgspec": lambda p: ib.elf_engine(
            p, "json", "directory_action", "columnar_msgspec"
        )[0],
        "duckdb_t1": lambda p: ib.duckdb_engine(p, "json", "directory_action", 1)[0],
    }
    with tempfile.TemporaryDirectory(prefix="elf-json-e2e-") as tmp:
        path = generate(n, Path(tmp), 1)["paths"]["json"]["file"]
        secs: dict[str, list[float]] = {name: [] for name in engines}
        for fn in engines.values():  # warm
            fn(path)
        for _ in range(rounds):
            for name, fn in engines.items():
                secs[name].append(fn(path))
    out: dict[str, Any] = {}
    for name, s in secs.items():
        out[name] = {"best_s": round(min(s), 3), "median_s": round(statistics.median(s), 3),
                     "lines_per_s_best": round(n / min(s))}  # fmt: skip
    for stat in ("best_s", "median_s"):
        ref = out["duckdb_t1"][stat]
        out[f"elf_columnar_vs_duckdb_t1_{stat[:-2]}"] = round(ref / out["elf_columnar"][stat], 2)
        ms = out["elf_columnar_msgspec"][stat]
        out[f"elf_columnar_vs_msgspec_{stat[:-2]}"] = round(ms / out["elf_columnar"][stat], 2)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="50,000 lines")
    ap.add_argument("--lines", type=int, default=None)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--native-only", action="store_true", help="only the native decoders")
    ap.add_argument(
        "--end-to-end", type=int, default=0, metavar="ROUNDS",
        help="only the benchmark query end to end, alternated ROUNDS times",
    )  # fmt: skip
    args = ap.parse_args()
    n = args.lines or (50_000 if args.quick else 200_000)
    if args.end_to_end:
        out = end_to_end(n, args.end_to_end)
        print(json.dumps({"bench": "json_end_to_end", "lines": n, "engines": out}, indent=2))
        return
    native = native_table(n, args.repeats)
    if args.native_only:
        print(json.dumps({"bench": "json_kernel", "lines": n, "native": native}, indent=2))
        return
    chunks = chunks_of(n)
    want = frozenset(FIELDS)
    proj = msgspec.defstruct("Proj", [(f, Any, None) for f in FIELDS], gc=False)
    per_line = msgspec.json.Decoder(proj).decode
    getters = [attrgetter(f) for f in FIELDS]
    dec = json_msgspec._decoders(want)
    schema = pa.schema(
        [("ts", pa.float64()), ("directory", pa.string()), ("action", pa.string()),
         ("price", pa.float64())]
    )  # fmt: skip

    def orjson_rows(c: bytes) -> pa.Table:
        rows = [orjson.loads(line) for line in c.split(b"\n")[:-1]]
        return pa.table({f: pa.array([r.get(f) for r in rows]) for f in FIELDS})

    def msgspec_rows(c: bytes) -> pa.Table:
        recs = [per_line(line) for line in c.split(b"\n")[:-1]]
        return pa.table(
            {f: pa.array(list(map(g, recs))) for f, g in zip(FIELDS, getters, strict=True)}
        )

    def framed(c: bytes) -> Any:
        lines = split_lines(c)
        return json_msgspec._decode(dec, c, len(lines), np.arange(len(lines)))

    def arrow(c: bytes) -> pa.Table:
        read = pj.ReadOptions(use_threads=False, block_size=len(c) + 1)
        parse = pj.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore")
        return pj.read_json(pa.BufferReader(c), read_options=read, parse_options=parse)

    def msgspec_kernel(c: bytes) -> Any:
        use_native(False)
        try:
            return parse_chunk("json", c, fields=want - {"ts"})
        finally:
            use_native(True)

    names = tuple(name.encode() for name in FIELDS)

    def scan(c: bytes) -> Any:
        lines = split_lines(c)
        m, k = len(lines), len(names)
        kinds, vals = np.empty(k * m, np.uint8), np.empty(k * m, np.int64)
        offs, status = np.empty(k * (m + 1), np.int32), np.empty(m, np.uint8)
        return SCANNER.scan(c, lines.starts, lines.ends, names, kinds, vals, offs, status)

    candidates: dict[str, Callable[[bytes], Any]] = {
        "orjson_per_line": orjson_rows,
        "msgspec_per_line": msgspec_rows,
        "msgspec_framed": framed,
        "arrow_reader_projected": arrow,
        "parse_chunk": lambda c: parse_chunk("json", c, fields=want - {"ts"}),
        "parse_chunk_msgspec": msgspec_kernel,
        "json_msgspec_screen": json_msgspec._screen,
    }
    if SCANNER is not None:
        candidates["json_native_scan"] = scan
    rates = {name: round(n / best_of(args.repeats, chunks, fn)) for name, fn in candidates.items()}
    print(
        json.dumps(
            {
                "bench": "json_kernel",
                "lines": n,
                "chunk_bytes": CHUNK_BYTES,
                "fields": list(FIELDS),
                "native_scanner": native_in_use(),
                "lines_per_cpu_s": rates,
                "native": native,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
