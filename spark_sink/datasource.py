"""The ``elf`` Spark 4 Python data source over the rollup lake (batch and streaming).

Contract (see ``docs/spark-sink.md``)::

    register(spark)
    spark.read.format("elf").option("job", "wc").load("/var/lib/elf/lake")
    spark.readStream.format("elf").option("job", "wc").load(lake)

* **Options**: the path (``load(path)``, or option ``lake``, or ``ELF_LAKE``) is the lake
  location (a local path or a pyarrow filesystem URI). ``job``: one job (required for
  streaming; a batch read without it reads every job, with the union of their columns). Batch
  only: ``startEpoch`` / ``endEpoch`` (inclusive) and ``completeOnly`` (``true``: only epochs
  that every one of the job's m trees has written). Streaming only: ``startingEpoch``
  (``earliest``, default, or ``latest``, or an epoch number: the first epoch delivered),
  ``incompleteTimeout`` (seconds, default 300) and ``versionWindow`` (epochs, default 1024).
* **Schema**: the union of the files' schemas (:func:`spark_sink.lake.unified_schema`), fixed
  columns first; a column whose every value is null is typed string.
* **Batch**: the selected files, grouped into at most ``maxPartitions`` (16) input partitions
  of consecutive epochs; each yields Arrow record batches conformed to the schema. Filters are
  not pushed down (a reader implementing ``pushFilters`` fails on sessions where
  ``spark.sql.python.filterPushdown.enabled`` is off); ``startEpoch`` / ``endEpoch`` prune
  files instead.
* **Versions**: a batch read sees exactly one row set per (job, tree, epoch), its highest
  (term, version) (:meth:`spark_sink.lake.Lake.files`). A streaming read delivers every higher
  (term, version) as new rows (the ``term`` and ``version`` columns tell them apart), never a
  lower one after a higher: see Streaming.
* **Streaming**: the offset is
  ``{"epoch": n, "default": [t, k], "versions": {"<e>/<tree>": k | [t, k]}}``: the last epoch
  delivered (inclusive) and, for the epochs of the last ``versionWindow`` (default 1024) up to
  it, the (term, version) of each (epoch, tree) delivered (``k`` alone for term 0; 0: that
  tree had written nothing yet) where it is not ``default`` (the most common one; absent:
  version 1 of term 0, the form offsets had before terms). ``latestOffset`` advances over
  epochs in order while each is *complete* (all m tree files present); an incomplete epoch
  holds the stream back until it completes or its oldest file is ``incompleteTimeout`` seconds
  old (a tree whose master died and never wrote), and records the highest (term, version) of
  every (epoch, tree) in the window, never lower than the previous offset's. A micro-batch
  holds each (epoch, tree) whose (term, version) grew since the previous offset — a new epoch,
  a tree that wrote after its epoch was passed, or a new version or term of an epoch already
  delivered (late data, a tentative result made final, a newer master) — read at exactly the
  one its offset names, so a restarted query (Spark replays its checkpointed offsets) delivers
  each version at most once and every newest version. Versions that followed one another
  between two micro-batches arrive as the newest only. Not delivered to streams (batch reads
  see them): a new version of an epoch more than ``versionWindow`` epochs behind the stream's
  head, and an epoch of which no tree had written anything when the stream passed it. A replay
  whose version was compacted and swept (after the compaction grace) reads the higher one
  instead. The offset grows only with the (epoch, tree) of the window whose (term, version) is
  not its default, so it stays bounded.
* **Compacted hours** (``spark_sink/compaction.py``): the lake lists one entry per (epoch,
  tree) whether it lives in an epoch file or in an hour's compacted file, so offsets and
  completeness are unchanged by compaction; a partition reads a compacted file once and keeps
  only the rows of its epochs. A read that overlaps a compaction sees each row once.
"""

from __future__ import annotations

import os
import re
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.types import StructType

from spark_sink.lake import (
    Lake,
    LakeError,
    LakeFile,
    complete_epochs,
    conform,
    file_selection,
    read_rows,
    read_schema,
)
from spark_sink.lake_names import Rank

NAME = "elf"
MAX_PARTITIONS = 16  # files of a read are grouped into at most this many tasks
OPTIONS = ("job", "lake", "path", "startEpoch", "endEpoch", "completeOnly", "startingEpoch",
           "incompleteTimeout", "maxPartitions", "versionWindow")  # fmt: skip
VERSION_WINDOW = 1024  # epochs behind a stream's head whose new versions it still delivers


class OptionError(ValueError):
    """A data source option is missing or malformed (the message names it)."""


Selection = tuple[str, list[int] | None]  # (path, epochs to keep; None: the whole file)


class FilePartition(InputPartition):
    """Some lake files (consecutive epochs) read by one Spark task: (path, epochs to keep,
    None for a whole epoch file) per file."""

    def __init__(self, items: list[Selection]) -> None:
        super().__init__(items)
        self.items = items

    @property
    def paths(self) -> list[str]:
        return [p for p, _ in self.items]


def group_files(files: list[LakeFile], max_partitions: int) -> list[FilePartition]:
    """At most ``max_partitions`` partitions of consecutive files (one file each when there
    are few): many small epoch files cost one task each otherwise. A compacted file listed
    for several epochs is one item."""
    items = file_selection(files)
    if not items:
        return []
    size = -(-len(items) // max(1, max_partitions))
    return [FilePartition(items[i : i + size]) for i in range(0, len(items), size)]


def _lake(options: dict[str, str]) -> Lake:
    location = options.get("path") or options.get("lake") or os.environ.get("ELF_LAKE")
    if not location:
        raise OptionError(
            "elf: no lake location: use .load(PATH), .option('lake', PATH) or ELF_LAKE"
        )
    return Lake(location)


def _int_option(options: dict[str, str], name: str) -> int | None:
    raw = options.get(name)
    if raw is None:
        return None
    try:
        return int(raw)
    except ValueError:
        raise OptionError(f"elf: option {name} must be an integer epoch, got {raw!r}") from None


def _spark_friendly(schema: pa.Schema) -> pa.Schema:
    """Null-typed columns (every value null so far) become strings."""
    fields = []
    for f in schema:
        t = f.type
        if pa.types.is_null(t):
            t = pa.string()
        elif pa.types.is_list(t) and pa.types.is_null(t.value_type):
            t = pa.list_(pa.string())
        fields.append(pa.field(f.name, t, f.nullable))
    return pa.schema(fields)


def _read_file(
    lake: Lake, path: str, epochs: list[int] | None, schema: pa.Schema
) -> Iterator[pa.RecordBatch]:
    table = conform(read_rows(lake, path, epochs), schema)
    yield from table.to_batches()


class ElfDataSource(DataSource):
    """``format("elf")``: epoch rollups of ELF jobs from the lake (module contract)."""

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        self.opts = {k: v for k, v in dict(options).items()}
        # Spark passes option keys case-insensitively; normalise the ones we read
        lower = {k.lower(): v for k, v in self.opts.items()}
        for key in OPTIONS:
            if key.lower() in lower:
                self.opts[key] = lower[key.lower()]
        self.lake = _lake(self.opts)
        self.job = self.opts.get("job")
        self._arrow_schema: pa.Schema | None = None

    @classmethod
    def name(cls) -> str:
        return NAME

    def files(self) -> list[LakeFile]:
        try:
            return self.lake.files(self.job)
        except LakeError as exc:
            raise OptionError(f"elf: {exc}") from None

    def arrow_schema(self) -> pa.Schema:
        if self._arrow_schema is None:
            self._arrow_schema = _spark_friendly(read_schema(self.lake, self.files()))
        return self._arrow_schema

    def schema(self) -> StructType:
        from pyspark.sql.pandas.types import from_arrow_schema

        return from_arrow_schema(self.arrow_schema())

    def reader(self, schema: StructType) -> DataSourceReader:
        return ElfBatchReader(self, _arrow(schema))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        if not self.job:
            raise OptionError("elf: a streaming read needs .option('job', NAME)")
        return ElfStreamReader(self, _arrow(schema))


def _arrow(schema: StructType) -> pa.Schema:
    """The Arrow schema Spark expects for ``schema`` (inferred or given by the user)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    try:
        return to_arrow_schema(schema, timezone="UTC")
    except TypeError:  # pyspark < 4.1 has no timezone parameter
        return to_arrow_schema(schema)


class ElfBatchReader(DataSourceReader):
    """Batch read: one partition per file of the selected epochs."""

    def __init__(self, source: ElfDataSource, schema: pa.Schema) -> None:
        self.lake = source.lake
        self.schema = schema
        files = source.files()
        lo = _int_option(source.opts, "startEpoch")
        hi = _int_option(source.opts, "endEpoch")
        files = [
            f for f in files if (lo is None or f.epoch >= lo) and (hi is None or f.epoch <= hi)
        ]
        if source.opts.get("completeOnly", "false").lower() == "true":
            done: dict[tuple[str, int], bool] = {}
            for job in {f.job for f in files}:
                mine = [f for f in files if f.job == job]
                done.update({(job, e): ok for e, ok in complete_epochs(mine).items()})
            files = [f for f in files if done[(f.job, f.epoch)]]
        self.files = files
        self.max_partitions = _int_option(source.opts, "maxPartitions") or MAX_PARTITIONS

    def partitions(self) -> Sequence[InputPartition]:
        return group_files(self.files, self.max_partitions)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, FilePartition)
        for path, epochs in partition.items:
            yield from _read_file(self.lake, path, epochs, self.schema)


Offset = dict[str, Any]  # {"epoch": n, "versions": {"<epoch>/<tree>": k | [t, k]}, …}
NOT_WRITTEN: Rank = (0, 0)
FIRST: Rank = (0, 1)  # what an (epoch, tree) an offset does not list was delivered at


def _rank(value: Any) -> Rank:
    """An offset's entry: ``k`` (term 0, version k) or ``[t, k]``."""
    if isinstance(value, list | tuple):
        return (int(value[0]), int(value[1]))
    return (0, int(value))


def _entry(rank: Rank) -> int | list[int]:
    return rank[1] if rank[0] == 0 else [rank[0], rank[1]]


def _versions(offset: Offset) -> dict[str, Rank]:
    """An offset's delivered ranks (offsets written before versions have none)."""
    return {str(k): _rank(v) for k, v in (offset.get("versions") or {}).items()}


def _default(offset: Offset) -> Rank:
    """The rank of the (epoch, tree) an offset does not list (offsets written before terms:
    version 1 of term 0)."""
    raw = offset.get("default")
    return FIRST if raw is None else _rank(raw)


class ElfStreamReader(DataSourceStreamReader):
    """Streaming read of one job; offsets ``{"epoch": n, "versions": {...}}`` (module
    contract)."""

    def __init__(self, source: ElfDataSource, schema: pa.Schema) -> None:
        self.lake = source.lake
        self.job = str(source.job)
        self.schema = schema
        self.starting = source.opts.get("startingEpoch", "earliest").strip().lower()
        if not re.fullmatch(r"earliest|latest|-?\d+", self.starting):
            raise OptionError(
                f"elf: startingEpoch must be earliest, latest or an epoch, got {self.starting!r}"
            )
        self.max_partitions = _int_option(source.opts, "maxPartitions") or MAX_PARTITIONS
        self.version_window = _int_option(source.opts, "versionWindow") or VERSION_WINDOW
        try:
            self.incomplete_timeout = float(source.opts.get("incompleteTimeout", "300"))
        except ValueError:
            raise OptionError("elf: incompleteTimeout must be a number of seconds") from None

    def _files(self) -> list[LakeFile]:
        return self.lake.files(self.job)

    def initialOffset(self) -> Offset:
        if self.starting == "latest":
            files = self._files()
            return self._offset(files, self._ready_until(files, None))
        if self.starting == "earliest":
            files = self._files()
            return {"epoch": (files[0].epoch - 1) if files else -1, "versions": {}}
        return {"epoch": int(self.starting) - 1, "versions": {}}

    def _ready_until(self, files: list[LakeFile], start: int | None) -> int:
        """The newest epoch E > start such that every epoch in (start, E] is complete (or
        timed out incomplete); ``start`` if none."""
        now = time.time()
        done = complete_epochs(files)
        oldest: dict[int, float] = {}
        for f in files:
            if f.mtime is not None:
                oldest[f.epoch] = min(oldest.get(f.epoch, f.mtime), f.mtime)
        last = -1 if start is None else start
        for epoch, complete in done.items():
            if start is not None and epoch <= start:
                continue
            if not complete and now - oldest.get(epoch, now) < self.incomplete_timeout:
                break
            last = epoch
        return last

    def _offset(self, files: list[LakeFile], head: int, floor: Offset | None = None) -> Offset:
        """The offset delivering everything up to epoch ``head``: the highest (term, version)
        of each (epoch, tree) in the version window — never lower than at ``floor`` (the
        previous offset), so a stream never goes back — listed where it is not the offset's
        ``default`` (its most common rank; left out when that is version 1 of term 0)."""
        trees = {f.epoch: f.trees for f in files}
        newest = {(f.epoch, f.tree): f.rank for f in files}
        ranks: dict[str, Rank] = {}
        for epoch, m in sorted(trees.items()):
            if head - self.version_window < epoch <= head:
                for tree in range(m):
                    rank = newest.get((epoch, tree), NOT_WRITTEN)
                    if floor is not None:
                        rank = max(rank, self._delivered(floor, epoch, tree))
                    ranks[f"{epoch}/{tree}"] = rank
        counts = Counter(ranks.values())
        default = max(counts, key=lambda r: (counts[r], r), default=FIRST)
        if counts[FIRST] == counts[default]:
            default = FIRST  # offsets of a lake without terms keep their earlier form
        out: Offset = {"epoch": head}
        if default != FIRST:
            out["default"] = _entry(default)
        out["versions"] = {k: _entry(r) for k, r in ranks.items() if r != default}
        return out

    def latestOffset(self, start: Offset | None = None, limit: Any = None) -> Offset:
        begin = None if start is None else int(start["epoch"])
        if begin is None:
            begin = self.initialOffset()["epoch"]
        files = self._files()
        return self._offset(files, self._ready_until(files, begin), start)

    def _delivered(self, offset: Offset, epoch: int, tree: int) -> Rank:
        """The (term, version) of (epoch, tree) a query at ``offset`` has seen ((0, 0):
        none)."""
        if epoch > int(offset["epoch"]):
            return NOT_WRITTEN
        return _versions(offset).get(f"{epoch}/{tree}", _default(offset))

    def partitions(self, start: Offset, end: Offset) -> Sequence[InputPartition]:
        """The (epoch, tree) whose (term, version) at ``end`` is higher than at ``start``,
        each read at exactly that rank (or, if a replay finds it swept after compaction, the
        highest one, which its ``term`` and ``version`` columns show); never one not higher
        than ``start``'s."""
        hi = int(end["epoch"])
        by_key: dict[tuple[int, int], dict[Rank, LakeFile]] = {}
        for f in self.lake.versions(self.job):
            if hi - self.version_window < f.epoch <= hi:
                by_key.setdefault((f.epoch, f.tree), {})[f.rank] = f
        chosen = []
        for (epoch, tree), ranks in sorted(by_key.items()):
            want = self._delivered(end, epoch, tree)
            seen = self._delivered(start, epoch, tree)
            if want <= NOT_WRITTEN or want <= seen:
                continue
            f = ranks.get(want) or ranks[max(ranks)]
            if f.rank > seen:
                chosen.append(f)
        return group_files(chosen, self.max_partitions)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, FilePartition)
        for path, epochs in partition.items:
            yield from _read_file(self.lake, path, epochs, self.schema)

    def commit(self, end: Offset) -> None:
        """Nothing to release: the lake keeps every epoch (compaction moves epochs between
        files, never drops one; retention is the operator's choice)."""


def register(spark: Any) -> None:
    """Register ``format("elf")`` on a SparkSession (local, cluster or Spark Connect)."""
    spark.dataSource.register(ElfDataSource)


def view_name(job: str) -> str:
    return "elf_" + re.sub(r"[^0-9A-Za-z_]", "_", job)


def register_views(spark: Any, lake: str, jobs: Sequence[str] | None = None) -> dict[str, str]:
    """A temporary view ``elf_<job>`` (non-identifier characters → ``_``) per job of the lake
    (or of ``jobs``); returns job → view name."""
    register(spark)
    names = list(jobs) if jobs is not None else Lake(lake).jobs()
    views = {}
    for job in names:
        df = spark.read.format(NAME).option("job", job).load(lake)
        df.createOrReplaceTempView(view_name(job))
        views[job] = view_name(job)
    return views


def read_parquet(spark: Any, lake: str, job: str) -> Any:
    """The plain-Parquet alternative: one job's files with Spark's own Parquet reader
    (``mergeSchema``; ``date`` and ``hour`` come from the directory names). It does not know
    the lake's reader rule: every version of an epoch not yet compacted is there (and, within
    the compaction grace, stale copies); keep the highest ``version`` per (epoch, tree) as
    docs/spark-sink.md shows, or read with ``format("elf")``."""
    from urllib.parse import quote

    base = lake.rstrip("/")
    return (
        spark.read.option("mergeSchema", "true")
        .option("basePath", base)
        .parquet(f"{base}/job={quote(job, safe='')}")
    )
