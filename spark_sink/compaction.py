"""Lake upkeep: an hour's epoch files merged into one file, old hours dropped.

Contract (see ``docs/spark-sink.md``; the reader rule is in ``spark_sink/lake.py``):

* :func:`compact_hour` merges what a reader sees of one (job, date, hour, tree of m) — the
  epoch files and the current compacted file, each epoch once — into
  ``compact-tree-<i>-of-<m>.parquet``, written atomically (temporary file renamed over the
  name; one PUT on object stores). Only the highest (term, version) of each epoch is folded
  in (what :meth:`~spark_sink.lake.Lake.files` lists). Its footer records, per epoch, the
  fencing term and version of the rows, the epoch file's mtime and its ``elf.result``
  (``elf.sources``: ``{"<e>": {"term": t, "version": k, "mtime_ns": n, "result": {…}}}``,
  ``term`` left out when 0), so every epoch file of a lower (term, version) (or of the same
  one and not newer) is recognisably stale from that instant on, and a higher one written
  later (late data, a final result replacing a tentative one, a newer master's term) wins
  until the next pass folds it in: a reader lists each (epoch, tree) exactly once before,
  during and after.
  **Idempotent**: with no epoch file fresher than the compacted file's sources there is
  nothing to do and the lake is unchanged; re-running after a crash rewrites the same rows.
* :func:`sweep` deletes stale epoch files (every (term, version) the compacted file's
  supersedes), but only ``grace`` seconds after the compacted file that replaced them was
  written, so a reader (or a streaming query's replay) that listed them just before the
  compaction can still open them.
* :func:`complete_hours` — hours before the hour of the newest epoch a tree has written
  (epochs reach the lake in order per tree, so an earlier hour gets no new epoch; a late
  new version of one of its epochs is a newer epoch file, folded in by the next pass).
* :func:`drop_before` — retention: hour partitions that ended before a cutoff are deleted.
* :class:`LakeMaintenance` bundles the settings; :func:`maintain` runs one pass for the
  (job, tree, m) a writer wrote. The lake writer thread (``spark_sink/buffer.py``) calls it,
  so compaction never races that writer's own epoch writes.

Epoch numbers are the ``elf`` data source's streaming offsets; compaction keeps every
(epoch, tree) listed with the same epoch, so offsets and completeness are unchanged.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import quote

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from spark_sink.fencing import list_directory
from spark_sink.lake import (
    SOURCES_KEY,
    Lake,
    LakeFile,
    conform,
    read_rows,
    result_meta,
    unified_schema,
)
from spark_sink.lake_names import COMPACT_RE, Source, compact_name, parse_epoch_name, parse_sources

log = logging.getLogger(__name__)

Hour = tuple[str, int]  # (date "YYYY-MM-DD", hour)


@dataclass(frozen=True)
class LakeMaintenance:
    """How often a writer compacts (seconds; None: never), how long stale epoch files are
    kept for readers that listed them, and the retention in days (0: keep everything)."""

    every: float | None = 60.0
    grace: float = 300.0
    retention_days: float = 0.0


def _hour_dir(lake: Lake, job: str, hour: Hour) -> str:
    return lake.path(f"job={quote(job, safe='')}/date={hour[0]}/hour={hour[1]:02d}")


def complete_hours(files: Iterable[LakeFile], tree: int, trees: int) -> list[Hour]:
    """Hours of (tree of ``trees``) before the hour of its newest epoch, oldest first."""
    mine = [f for f in files if f.tree == tree and f.trees == trees]
    if not mine:
        return []
    newest = max(mine, key=lambda f: f.epoch)
    current = (newest.date, newest.hour)
    return sorted({(f.date, f.hour) for f in mine if (f.date, f.hour) < current})


def compact_hour(lake: Lake, job: str, hour: Hour, tree: int, trees: int) -> int:
    """Merge the hour's epochs of one tree into its compacted file; returns how many epoch
    files were folded in (0: already compact, nothing written)."""
    files = [
        f
        for f in lake.files(job)
        if (f.date, f.hour) == hour and f.tree == tree and f.trees == trees
    ]
    fresh = [f for f in files if not f.compacted]
    if not fresh:
        return 0
    old_sources: dict[int, Source] = {}
    compacted = next((f for f in files if f.compacted), None)
    if compacted is not None:
        meta = pq.read_schema(compacted.path, filesystem=lake.fs).metadata or {}
        old_sources = parse_sources(meta[SOURCES_KEY])
    tables, keys, values = [], [], []
    kept = [f.epoch for f in files if f.compacted]
    if compacted is not None and kept:
        tables.append(read_rows(lake, compacted.path, kept))
        _roles(pq.read_schema(compacted.path, filesystem=lake.fs), keys, values)
    sources = {e: old_sources[e] for e in kept}
    for f in fresh:
        table = read_rows(lake, f.path, None)
        _roles(table.schema, keys, values)
        tables.append(table)
        sources[f.epoch] = Source(
            f.version, int(f.mtime_ns or 0), result_meta(table.schema), term=f.term
        )
    schema = unified_schema([t.schema.remove_metadata() for t in tables])
    merged = pa.concat_tables([conform(t, schema) for t in tables])
    merged = merged.take(pc.sort_indices(merged, [("epoch", "ascending")]))
    relative = f"job={quote(job, safe='')}/date={hour[0]}/hour={hour[1]:02d}/" + compact_name(
        tree, trees
    )
    meta = {
        b"elf.path": relative.encode(),
        b"elf.key_columns": json.dumps(keys).encode(),
        b"elf.value_columns": json.dumps(values).encode(),
        SOURCES_KEY: json.dumps({str(e): s.to_json() for e, s in sorted(sources.items())}).encode(),
    }
    lake.write_table(merged.replace_schema_metadata(meta))
    return len(fresh)


def _roles(schema: pa.Schema, keys: list[str], values: list[str]) -> None:
    meta = schema.metadata or {}
    for name, out in ((b"elf.key_columns", keys), (b"elf.value_columns", values)):
        with contextlib.suppress(ValueError, TypeError):
            for column in json.loads(meta.get(name, b"[]")):
                if column not in out:
                    out.append(column)


def sweep(lake: Lake, job: str, hour: Hour, grace: float, now: float | None = None) -> int:
    """Delete the hour's epoch files that a compacted file replaced at least ``grace``
    seconds ago, and temporary files (``.tmp-*``) of writes interrupted at least ``grace``
    seconds ago (an agent killed mid-write; a live write renames its file in moments);
    returns how many were deleted."""
    now = time.time() if now is None else now
    directory = _hour_dir(lake, job, hour)
    infos = list_directory(lake.fs, directory)
    deleted = 0
    for info in infos:
        stale = info.mtime is not None and now - info.mtime.timestamp() >= grace
        if info.base_name.startswith(".tmp-") and info.type == pafs.FileType.File and stale:
            with contextlib.suppress(FileNotFoundError):
                lake.fs.delete_file(info.path)
                deleted += 1
    compacted = {}
    for info in infos:
        if m := COMPACT_RE.match(info.base_name):
            compacted[(int(m.group(1)), int(m.group(2)))] = info
    for info in infos:
        name = parse_epoch_name(info.base_name)
        if name is None:
            continue
        holder = compacted.get((name.tree, name.trees))
        if holder is None or holder.mtime is None or now - holder.mtime.timestamp() < grace:
            continue
        source = lake.compacted_sources(holder).get(name.epoch)
        if source is not None and source.supersedes(name.rank, info.mtime_ns or 0):
            with contextlib.suppress(FileNotFoundError):
                lake.fs.delete_file(info.path)
                deleted += 1
    return deleted


def drop_before(lake: Lake, job: str, cutoff: float) -> int:
    """Delete the job's hour partitions that ended before ``cutoff`` (epoch seconds);
    returns how many. Date directories left empty go too."""
    base = lake.path(f"job={quote(job, safe='')}")
    dropped = 0
    dates = list_directory(lake.fs, base)
    for date_info in dates:
        if date_info.type != pafs.FileType.Directory or not date_info.base_name.startswith("date="):
            continue
        hours = list_directory(lake.fs, date_info.path)
        left = 0
        for info in hours:
            try:
                day = dt.date.fromisoformat(date_info.base_name[5:])
                hour = int(info.base_name.removeprefix("hour="))
            except ValueError:
                left += 1
                continue
            end = dt.datetime(day.year, day.month, day.day, hour, tzinfo=dt.UTC).timestamp()
            if end + 3600 <= cutoff:
                lake.fs.delete_dir(info.path)
                dropped += 1
            else:
                left += 1
        if not left:
            with contextlib.suppress(OSError):
                lake.fs.delete_dir(date_info.path)
    return dropped


def maintain(
    lake: Lake,
    trees: Iterable[tuple[str, int, int]],
    settings: LakeMaintenance,
    now: float | None = None,
) -> dict[str, int]:
    """One pass over the (job, tree index, m) a writer wrote: drop hours past retention,
    compact complete hours, sweep stale epoch files. Returns counts."""
    cutoff_now = time.time() if now is None else now
    counts = {"hours_compacted": 0, "files_compacted": 0, "files_deleted": 0, "hours_dropped": 0}
    by_job: dict[str, set[tuple[int, int]]] = {}
    for job, tree, m in trees:
        by_job.setdefault(job, set()).add((tree, m))
    for job, mine in sorted(by_job.items()):
        if settings.retention_days > 0:
            cutoff = cutoff_now - settings.retention_days * 86400
            counts["hours_dropped"] += drop_before(lake, job, cutoff)
        files = lake.files(job)
        for tree, m in sorted(mine):
            hours = complete_hours(files, tree, m)
            for hour in hours:
                folded = compact_hour(lake, job, hour, tree, m)
                if folded:
                    counts["hours_compacted"] += 1
                    counts["files_compacted"] += folded
            for hour in {(f.date, f.hour) for f in files if f.compacted} | set(hours):
                # ``now`` None: the clock is read after the compaction just written
                counts["files_deleted"] += sweep(lake, job, hour, settings.grace, now)
    return counts
