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
  with ``fields``: lines, screen, framing, columns, ``ts``, merge);
* ``json_msgspec_screen`` — the kernel's number screen alone.

    python bench/json_kernel_bench.py            # 200,000 lines
    python bench/json_kernel_bench.py --quick    # 50,000 lines
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="50,000 lines")
    ap.add_argument("--lines", type=int, default=None)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    n = args.lines or (50_000 if args.quick else 200_000)
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

    candidates: dict[str, Callable[[bytes], Any]] = {
        "orjson_per_line": orjson_rows,
        "msgspec_per_line": msgspec_rows,
        "msgspec_framed": framed,
        "arrow_reader_projected": arrow,
        "parse_chunk": lambda c: parse_chunk("json", c, fields=want - {"ts"}),
        "json_msgspec_screen": json_msgspec._screen,
    }
    rates = {name: round(n / best_of(args.repeats, chunks, fn)) for name, fn in candidates.items()}
    print(
        json.dumps(
            {
                "bench": "json_kernel",
                "lines": n,
                "chunk_bytes": CHUNK_BYTES,
                "fields": list(FIELDS),
                "lines_per_cpu_s": rates,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
