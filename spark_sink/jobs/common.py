"""Shared pieces of the Spark jobs: command-line options, reading side tables by suffix,
the roles (key / value) of a job's lake columns."""

from __future__ import annotations

import argparse
import json
from typing import Any

import pyarrow.parquet as pq

from spark_sink.lake import Lake


def base_parser(description: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--lake", required=True, help="Lake path or URI.")
    parser.add_argument(
        "--master", default=None, help="local[*] (default), spark://host:port or sc://host:port"
    )
    return parser


def read_side_table(spark: Any, path: str) -> Any:
    """A DataFrame from ``path`` by suffix: .parquet (or a directory), .csv (header),
    .json / .jsonl (JSON lines)."""
    lower = path.lower()
    if lower.endswith(".csv"):
        return spark.read.option("header", "true").option("inferSchema", "true").csv(path)
    if lower.endswith((".json", ".jsonl", ".ndjson")):
        return spark.read.json(path)
    return spark.read.parquet(path)


def column_roles(lake: Lake, job: str) -> tuple[list[str], list[str]]:
    """(key columns, value columns) of ``job`` from its newest file's footer (written by
    :func:`spark_sink.lake.rollup_table`); ([], []) when the job has no file yet."""
    files = lake.files(job)
    for f in reversed(files):
        meta = pq.read_schema(f.path, filesystem=lake.fs).metadata or {}
        if b"elf.key_columns" in meta:
            keys = json.loads(meta[b"elf.key_columns"])
            values = json.loads(meta[b"elf.value_columns"])
            if keys or values:
                return keys, values
    return [], []
