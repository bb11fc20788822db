"""Percentile and unique-count roll-ups of a job's sketches: the lake's per-epoch
DataSketches binaries merged in Spark per time bucket, exact-or-flagged.

Contract: :func:`percentiles` and :func:`uniques` read one job's epochs by the reader rule
(the highest (term, version) of each (epoch, tree)) — through ``format("elf")``, or with
``reader="parquet"`` the same rows through Spark's own Parquet reader (:func:`read_current`,
cheaper per query) — and merge the sketch column of an estimate ``column`` (``p99`` or
``p99_sketch``; footer ``elf.sketch_columns``) per (bucket, keys): ``kll_merge_agg_double`` →
``kll_sketch_get_quantile_double`` at each rank ``p`` (columns ``p50``, ``p99``, ``p99_9``…)
plus ``n`` (values merged), or ``hll_union_agg`` → ``hll_sketch_estimate`` (column
``uniques``). The bucket is ``date_trunc(grain, epoch_start)`` (UTC; ``week`` starts on
Monday); ``keys`` are optional key columns (none: one row per bucket — merging sketches
across groups is valid: the union of the groups' users, the percentile over all their
values). ``since`` / ``until`` (UTC, whole hours) keep epochs starting in ``[since, until)``.

**Exact-or-flagged.** An epoch is *flagged* when its current version is tentative or partial
(its footer's ``elf.result``) or not every one of the job's m trees has written it. By
default (``include_tentative=False``) flagged epochs are left out of the merge; with it they
are merged. Either way every output row says whether its bucket is exact: ``bucket_epochs``
(epochs of the bucket in the lake), ``flagged_epochs`` and ``complete``
(``flagged_epochs == 0``); ``epochs`` counts the epochs merged into the row. A bucket whose
epochs are all left out still has one row (null keys and estimates, ``complete`` false), so
no bucket disappears silently. Output columns: ``job, grain, period_start, <keys>,
<estimates>, epochs, bucket_epochs, flagged_epochs, complete`` (unordered: sorting is the
caller's; the CLI prints by bucket, then keys).

Errors (:class:`RollupError`, a ValueError): a job with no epoch in the lake or the range,
an unknown key column, an unknown column or one whose sketch is not of the right kind (the
message names the sketch columns that are).

    python -m spark_sink.jobs.sketch_rollup percentiles --lake L --job j --column p99 --by day
"""

from __future__ import annotations

import datetime as dt
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from spark_sink.jobs.common import base_parser
from spark_sink.lake import (
    SKETCHES_KEY,
    Lake,
    LakeError,
    LakeFile,
    complete_epochs,
    epoch_meta,
    read_epoch,
    read_schema,
)

GRAINS = ("hour", "day", "week", "month")
READERS = ("elf", "parquet")
KINDS = {"percentiles": "kll_doubles", "uniques": "hll"}
DEFAULT_PS = (0.5, 0.9, 0.99)


class RollupError(ValueError):
    """The roll-up cannot run as asked (the message says why and what is available)."""


@dataclass(frozen=True)
class Epoch:
    """One epoch of the job as the lake lists it: the hour it starts in and whether it is
    flagged (tentative, partial or missing a tree)."""

    epoch: int
    hour_start: dt.datetime
    flagged: bool


def sketch_columns(lake: Lake, files: Sequence[LakeFile]) -> dict[str, dict[str, Any]]:
    """sketch column → ``{"sketch", "estimate"}`` over the files' footers: a file whose groups
    all lacked a sketch records ``sketch`` null, so the kind is taken from any file that
    knows it."""
    out: dict[str, dict[str, Any]] = {}
    for path in dict.fromkeys(f.path for f in files):  # a compacted file once
        raw = (pq.read_schema(path, filesystem=lake.fs).metadata or {}).get(SKETCHES_KEY)
        for name, info in (json.loads(raw) if raw else {}).items():
            known = out.setdefault(name, dict(info))
            if known.get("sketch") is None:
                known["sketch"] = info.get("sketch")
            if known.get("estimate") is None:
                known["estimate"] = info.get("estimate")
    return out


def resolve_column(columns: dict[str, dict[str, Any]], column: str, kind: str) -> str:
    """The sketch column for ``column`` (an estimate name or a sketch column name) holding a
    ``kind`` sketch; RollupError naming the ones that do otherwise."""
    fits = sorted(n for n, info in columns.items() if info.get("sketch") == kind)
    fits_text = ", ".join(f"{n.removesuffix('_sketch')} ({n})" for n in fits) or "none"
    name = column if column.endswith("_sketch") else f"{column}_sketch"
    if name not in columns:
        raise RollupError(
            f"column {column!r} has no sketch in the lake; columns with a {kind} sketch: "
            f"{fits_text}"
        )
    if columns[name].get("sketch") != kind:
        raise RollupError(
            f"column {column!r} holds a {columns[name].get('sketch')} sketch, not {kind}; "
            f"columns with a {kind} sketch: {fits_text}"
        )
    return name


def parse_time(text: str) -> dt.datetime:
    """``YYYY-MM-DD`` or ``YYYY-MM-DDTHH[:00[:00]]`` (UTC, a whole hour: the lake lists
    epochs by the hour they start in, so a finer bound could not be applied to the flags)."""
    try:
        when = dt.datetime.fromisoformat(text)
    except ValueError:
        raise RollupError(f"not a UTC date or hour: {text!r} (e.g. 2026-11-21T06)") from None
    if when.tzinfo is not None:
        when = when.astimezone(dt.UTC).replace(tzinfo=None)
    if when.minute or when.second or when.microsecond:
        raise RollupError(f"{text!r}: --since / --until must be whole hours (UTC)")
    return when.replace(tzinfo=dt.UTC)


def _hour_start(f: LakeFile) -> dt.datetime:
    day = dt.date.fromisoformat(f.date)
    return dt.datetime(day.year, day.month, day.day, f.hour, tzinfo=dt.UTC)


def _flagged(lake: Lake, f: LakeFile) -> bool:
    meta = epoch_meta(lake, f)
    if meta is None:  # a file written before elf.result: the flags are on its rows
        _, meta = read_epoch(lake, f)
    return bool(meta.get("tentative")) or bool(meta.get("partial"))


def job_epochs(
    lake: Lake,
    files: Sequence[LakeFile],
    since: dt.datetime | None = None,
    until: dt.datetime | None = None,
) -> list[Epoch]:
    """The epochs of one job's current files starting in ``[since, until)`` with their flags
    (footers only, so an empty tentative epoch is flagged too)."""
    done = complete_epochs(files)
    by_epoch: dict[int, Epoch] = {}
    for f in files:
        start = _hour_start(f)
        if (since is not None and start < since) or (until is not None and start >= until):
            continue
        flag = not done[f.epoch] or _flagged(lake, f)
        prev = by_epoch.get(f.epoch)
        by_epoch[f.epoch] = Epoch(f.epoch, start, flag or (prev is not None and prev.flagged))
    return [by_epoch[e] for e in sorted(by_epoch)]


def _tail(path: str) -> str:
    """``date=…/hour=…/<file>``: what identifies a lake file under its job directory, in a
    form Spark's ``_metadata.file_path`` (a URI) and the lake's listing (a path) share."""
    return "/".join(path.rsplit("/", 3)[-3:])


def read_current(
    spark: Any, lake: Lake, lake_path: str, files: Sequence[LakeFile], columns: Sequence[str]
) -> Any:
    """``columns`` of the current rows of ``files`` (one job's, as :meth:`Lake.files` lists
    them) through Spark's own Parquet reader — the reader rule, as ``format("elf")`` applies
    it, without the Python data source's per-query cost (planning in Python workers, Arrow
    batches streamed from Python tasks). Only the listed files are read: an epoch file holds
    exactly its (epoch, tree), so it is read whole; a compacted hour holds several epochs of
    one tree, and only those the listing names in that file are kept (an epoch whose newer
    version is an epoch file beside it is read from there). No join: a filter on the file's
    name and the epoch. The schema is given (the lake's unified one, ``columns`` only), so
    files of other schemas need no merge."""
    from pyspark.sql import functions as F
    from pyspark.sql.pandas.types import from_arrow_schema

    arrow = read_schema(lake, files)
    schema = from_arrow_schema(pa.schema([arrow.field(c) for c in dict.fromkeys(columns)]))
    base = lake_path.rstrip("/")
    if "://" not in base:
        base = lake.root  # a relative local path: Spark would resolve it against its own cwd

    def uri(f: LakeFile) -> str:
        return base + f.path[len(lake.root) :]

    whole = sorted({uri(f) for f in files if not f.compacted})
    parts = [spark.read.schema(schema).parquet(*whole)] if whole else []
    compacted = [f for f in files if f.compacted]
    if compacted:
        keep = sorted({f"{_tail(f.path)}#{f.epoch}" for f in compacted})
        tail = F.regexp_extract("_metadata.file_path", r"([^/]+/[^/]+/[^/]+)$", 1)
        df = spark.read.schema(schema).parquet(*sorted({uri(f) for f in compacted}))
        parts.append(df.where(F.concat_ws("#", tail, F.col("epoch").cast("string")).isin(keep)))
    out = parts[0]
    for part in parts[1:]:
        out = out.unionByName(part)
    return out


def p_name(p: float) -> str:
    """The output column of rank ``p``: 0.5 → p50, 0.99 → p99, 0.999 → p99_9."""
    return "p" + format(p * 100, ".10g").replace(".", "_")


def rollup(
    spark: Any,
    lake_path: str,
    job: str,
    what: str,
    column: str,
    grain: str = "day",
    *,
    ps: Sequence[float] = DEFAULT_PS,
    keys: Sequence[str] = (),
    since: dt.datetime | None = None,
    until: dt.datetime | None = None,
    include_tentative: bool = False,
    reader: str = "elf",
) -> Any:
    """The roll-up DataFrame (module contract); ``what``: ``percentiles`` or ``uniques``;
    ``reader``: ``elf`` (``format("elf")``) or ``parquet`` (:func:`read_current`: the same
    rows, faster)."""
    from pyspark.sql import functions as F

    if what not in KINDS:
        raise RollupError(f"what must be one of {sorted(KINDS)}, got {what!r}")
    if grain not in GRAINS:
        raise RollupError(f"grain must be one of {', '.join(GRAINS)}, got {grain!r}")
    bad = [p for p in ps if not 0.0 <= p <= 1.0]
    if what == "percentiles" and (not ps or bad):
        raise RollupError(f"ranks must be in [0, 1], got {list(ps)}")
    lake = Lake(lake_path)
    try:
        files = lake.files(job)
    except LakeError as exc:
        raise RollupError(str(exc)) from None
    if not files:
        raise RollupError(f"job {job!r} has no epoch in the lake at {lake_path}")
    sketch = resolve_column(sketch_columns(lake, files), column, KINDS[what])
    epochs = job_epochs(lake, files, since, until)
    if not epochs:
        raise RollupError(f"job {job!r} has no epoch starting in the range asked")
    flagged = [e.epoch for e in epochs if e.flagged]
    if reader == "parquet":
        lo, hi = epochs[0].epoch, epochs[-1].epoch
        chosen = [f for f in files if lo <= f.epoch <= hi]
        present = read_schema(lake, chosen).names
        missing = [k for k in keys if k not in present]
        if not missing:
            df = read_current(
                spark, lake, lake_path, chosen, ["epoch", "epoch_start", *keys, sketch]
            )
    elif reader == "elf":
        df = (
            spark.read.format("elf")
            .option("job", job)
            .option("startEpoch", str(epochs[0].epoch))
            .option("endEpoch", str(epochs[-1].epoch))
            .load(lake_path)
        )
        present = df.columns
        missing = [k for k in keys if k not in present]
    else:
        raise RollupError(f"reader must be one of {', '.join(READERS)}, got {reader!r}")
    if missing:
        raise RollupError(f"no key column {missing} in job {job!r}; columns: {present}")
    if flagged and not include_tentative:
        df = df.where(~F.col("epoch").isin(flagged))
    period = F.date_trunc(grain, F.col("epoch_start")).alias("period_start")
    col = f"`{sketch}`"
    if what == "percentiles":
        merged = F.expr(f"kll_merge_agg_double({col})")
        aggs = [merged.alias("_sketch")]
        ranks = ", ".join(repr(float(p)) for p in ps)
        get = F.expr(f"kll_sketch_get_quantile_double(_sketch, array({ranks}))")
        values = [get[i].alias(p_name(p)) for i, p in enumerate(ps)]
        values.append(F.expr("kll_sketch_get_n_double(_sketch)").alias("n"))
    else:
        # all of a job's files share lg_k; allowing others costs nothing and keeps a lake
        # whose query changed lg_k readable (the union takes the smaller one)
        aggs = [F.expr(f"hll_union_agg({col}, true)").alias("_sketch")]
        values = [F.expr("hll_sketch_estimate(_sketch)").alias("uniques")]
    merged_rows = (
        df.groupBy(period, *keys)
        .agg(*aggs, F.countDistinct("epoch").alias("epochs"))
        .select("period_start", *keys, *values, "epochs")
    )
    # bucket completeness from the lake's listing and footers, not from the rows: an epoch
    # left out (or one with no rows) still counts in its bucket
    ep = spark.createDataFrame(
        [(e.epoch, int(e.hour_start.timestamp()), e.flagged) for e in epochs],
        "epoch long, hour_start long, flagged boolean",
    )
    buckets = (
        ep.select(
            F.date_trunc(grain, F.timestamp_seconds("hour_start")).alias("period_start"),
            "epoch",
            "flagged",
        )
        .groupBy("period_start")
        .agg(
            F.count("epoch").alias("bucket_epochs"),
            F.sum(F.col("flagged").cast("int")).alias("flagged_epochs"),
        )
    )
    # every bucket is kept: the outer side, which Spark cannot broadcast (so no hint)
    out = buckets.join(merged_rows, "period_start", "left").select(
        F.lit(job).alias("job"),
        F.lit(grain).alias("grain"),
        "period_start",
        *keys,
        *(v for v in merged_rows.columns if v not in ("period_start", "epochs", *keys)),
        F.coalesce(F.col("epochs"), F.lit(0)).alias("epochs"),
        "bucket_epochs",
        "flagged_epochs",
        (F.col("flagged_epochs") == 0).alias("complete"),
    )
    return out


def percentiles(spark: Any, lake: str, job: str, column: str, grain: str = "day", **kw: Any) -> Any:
    """Percentiles of ``column`` per bucket (module contract)."""
    return rollup(spark, lake, job, "percentiles", column, grain, **kw)


def uniques(spark: Any, lake: str, job: str, column: str, grain: str = "day", **kw: Any) -> Any:
    """Unique counts of ``column`` per bucket (module contract)."""
    return rollup(spark, lake, job, "uniques", column, grain, **kw)


def _ranks(text: str) -> list[float]:
    try:
        ps = [float(p) for p in text.split(",") if p.strip()]
    except ValueError:
        raise RollupError(f"--p takes ranks like 0.5,0.99, got {text!r}") from None
    if not ps or any(not 0.0 <= p <= 1.0 for p in ps):
        raise RollupError(f"--p ranks must be in [0, 1], got {text!r}")
    return ps


def main(argv: Sequence[str] | None = None) -> int:
    """``percentiles|uniques --lake L --job J --column C --by GRAIN [...]``: prints the rows
    as JSON lines, or writes them to ``--out`` as Parquet (replacing earlier output)."""
    parser = base_parser("Percentiles / unique counts per time bucket from the lake's sketches.")
    parser.add_argument("what", choices=sorted(KINDS))
    parser.add_argument("--job", required=True, help="The ELF QL job whose sketches to merge.")
    parser.add_argument("--column", required=True, help="Estimate column (e.g. p99, users).")
    parser.add_argument("--by", choices=GRAINS, required=True, help="Time bucket (UTC).")
    parser.add_argument("--p", default=None, help="percentiles: ranks, e.g. 0.5,0.99")
    parser.add_argument("--key", action="append", default=[], help="Group-by key column.")
    parser.add_argument("--since", help="First hour (UTC), e.g. 2026-11-01 or 2026-11-01T06.")
    parser.add_argument("--until", help="End hour (UTC, exclusive).")
    parser.add_argument(
        "--include-tentative",
        action="store_true",
        help="Merge tentative / partial epochs too (their buckets stay flagged).",
    )
    parser.add_argument(
        "--reader",
        choices=READERS,
        default="elf",
        help="elf: format('elf') (default); parquet: Spark's Parquet reader, same rows, faster.",
    )
    parser.add_argument("--out", help="Write Parquet here instead of printing.")
    args = parser.parse_args(argv)
    try:
        if args.p is not None and args.what != "percentiles":
            raise RollupError("--p applies to percentiles only")
        ps = _ranks(args.p) if args.p is not None else list(DEFAULT_PS)
        since = parse_time(args.since) if args.since else None
        until = parse_time(args.until) if args.until else None
        if since is not None and until is not None and until <= since:
            raise RollupError("--until must be after --since")
        keys = [k.strip() for raw in args.key for k in raw.split(",") if k.strip()]
        from spark_sink.session import get_session

        spark = get_session(args.master, app_name=f"elf-{args.what}-{args.job}")
        df = rollup(
            spark,
            args.lake,
            args.job,
            args.what,
            args.column,
            args.by,
            ps=ps,
            keys=keys,
            since=since,
            until=until,
            include_tentative=args.include_tentative,
            reader=args.reader,
        )
    except RollupError as exc:
        parser.error(str(exc))  # usage + message, exit 2
    if args.out:
        df.write.mode("overwrite").parquet(args.out)
        print(f"{args.what} by {args.by} of {args.job}: {df.count()} rows written to {args.out}")
        return 0
    # sorted here, not in Spark: a global sort is one more stage for every caller
    rows = sorted(
        (r.asDict() for r in df.collect()),
        key=lambda r: (r["period_start"], *(str(r[k]) for k in keys)),
    )
    for row in rows:
        print(json.dumps(row, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
