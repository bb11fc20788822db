"""A deterministic past-sales table for a product catalogue (the demo's history input).

Contract: :func:`make_sales` gives, for each product and each of ``days`` dates ending the day
before ``end`` (UTC), ``units`` sold — Poisson-like around a demand that falls with the
product's position in the catalogue (popular first) and with its price; same inputs, same
table. :func:`main` reads a catalogue (JSON lines, JSON array, CSV or Parquet, with
``product`` or ``product_id``) and writes ``product, date, units`` as Parquet (pyarrow only,
no Spark needed).

    python -m spark_sink.jobs.sales --catalogue cat.jsonl --out sales.parquet --days 28
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import random
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq


def make_sales(
    catalogue: Sequence[dict[str, Any]],
    days: int = 28,
    *,
    end: dt.date | None = None,
    seed: int = 0,
) -> list[dict[str, Any]]:
    """Rows ``{product, date, units}`` (module contract)."""
    end = end or dt.datetime.now(dt.UTC).date()
    rng = random.Random(f"sales:{seed}")
    rows = []
    for rank, item in enumerate(catalogue, start=1):
        product = str(item.get("product", item.get("product_id")))
        price = float(item.get("price", 10.0) or 10.0)
        demand = 40.0 / rank**0.8 / max(1.0, math.log10(price + 1))
        for d in range(days, 0, -1):
            units = sum(1 for _ in range(int(demand * 2) + 1) if rng.random() < 0.5)
            rows.append({"product": product, "date": end - dt.timedelta(days=d), "units": units})
    return rows


def read_catalogue(path: str) -> list[dict[str, Any]]:
    p = Path(path)
    if p.suffix == ".parquet" or p.is_dir():
        return pq.read_table(p).to_pylist()
    if p.suffix == ".csv":
        return pacsv.read_csv(p).to_pylist()
    text = p.read_text()
    if text.lstrip().startswith("["):
        return list(json.loads(text))
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Write a past-sales table for a catalogue.")
    parser.add_argument("--catalogue", required=True)
    parser.add_argument("--out", required=True, help="Parquet file to write.")
    parser.add_argument("--days", type=int, default=28)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    rows = make_sales(read_catalogue(args.catalogue), args.days, seed=args.seed)
    schema = pa.schema([("product", pa.string()), ("date", pa.date32()), ("units", pa.int64())])
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), args.out)
    print(f"{len(rows)} sales rows written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
