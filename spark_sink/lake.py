"""The rollup lake: each epoch's result of each job tree as one Parquet file (pyarrow only).

Contract (see ``docs/spark-sink.md``):

* **Layout.**
  ``<root>/job=<name>/date=YYYY-MM-DD/hour=HH/epoch-<e>-tree-<i>-of-<m>-t<term>-v<k>.parquet``
  (date and hour of the epoch's start, UTC; ``<name>`` percent-encoded like Hive partition
  values; ``k`` ≥ 1 the result's **version**, ``term`` ≥ 1 the **fencing term** of the master
  that published it; names and their parsing: ``spark_sink/lake_names.py``). A result of term
  0 (written before terms) is named without ``-t<term>``, and one named without ``-v<k>``
  (written before versions) is version 1. One file per (job, tree index, epoch, term,
  version), written once: a new version of the epoch (late data, a tentative result made
  final) or a new master's term is a new file next to the old ones. Writes are atomic and, on
  local file systems, exclusive: a hidden temporary file in the same directory (``.tmp-*``,
  which Spark and pyarrow ignore) hard-linked to the final name, which fails if the name
  exists (``spark_sink/fencing.py``; elsewhere a check, then the write: best effort); on
  object stores (S3, GCS) a single PUT of the final object.
* **Reader rule** and **compacted hours**: which file holds the current result of (job, tree,
  epoch) (highest (term, version)) and how compacted hours read: :mod:`spark_sink.lake_listing`,
  whose :class:`~spark_sink.lake_listing.LakeListing` :class:`Lake` extends with the writes.
* **Writer's promises** (:meth:`Lake.publish`, which :meth:`Lake.write` uses). The rows of a
  (job, tree, epoch, term, version) never change: when its file exists with other content
  (``elf.result``'s ``digest``), the write goes to the next free version of the same term;
  when that version (or a later one it probes) already holds this content (a retried push), it
  writes nothing; a version of the term lower than one a compacted file holds is not written
  again (superseded, its file maybe swept). Same content under another term is written: a new
  term always gets its own file. **Fenced**: when the hour directory (or its compacted file)
  already holds the epoch under a higher term than the rollup's, nothing is written and
  :class:`~spark_sink.fencing.FencedWrite` says which term.
* **Schema.** Fixed columns :data:`FIXED_FIELDS` (job, tree, trees, epoch, term, version,
  epoch_start, epoch_end, tentative, partial, coverage, lacking, written_at, key_json,
  value_json; ``spark_sink/columns.py``) on every row — ``lacking`` is a list of strings: the
  hex ids of the origins a tentative or partial result lacks (empty for a final one);
  ``partial``: the result lacks origins that were retired, so it is never exact; files without
  ``term`` / ``version`` / ``partial`` / ``lacking`` read as 0, 1, false and an empty list —
  then typed key and value columns (:func:`key_value_columns`): a scalar key is ``key``, a
  tuple key ``key_0..key_n``, or the names the job gives; a scalar value is ``value``, a tuple
  value ``value_0..``, a list value one list column ``value``, a dict value one column per
  dict key (e.g. ``{"clicks": 7}`` → ``clicks``). A column whose values pyarrow cannot type
  uniformly (mixed types, ints beyond 64 bits, nested dicts) holds JSON text instead;
  ``key_json`` / ``value_json`` always hold the whole key / value as JSON (tuples and sets as
  lists, bytes as UTF-8 text) — exactly the rows the results API reports. A job that names its
  result rows (``Job.result_rows``, e.g. ELF QL: ``{"product": "p1", "clicks": 7}``) gets one
  column per field instead; ``key_json`` then holds the whole row as a JSON object and
  ``value_json`` is ``null``; among them a field ``<c>_sketch`` holding bytes or null is a
  **sketch column** (an ELF QL sketch aggregate's DataSketches binary beside its estimate
  ``<c>``), always BINARY, kept out of ``key_json`` and the digest and listed in the footer's
  ``elf.sketch_columns`` (``{"sketch": "hll" | "kll_doubles" | "frequent_strings",
  "estimate": "<c>"}``). The footer names the roles: ``elf.key_columns`` and
  ``elf.value_columns`` (JSON lists; for named rows the numeric fields are the values), and
  ``elf.result`` describes the result even when it has no row: ``{"rows": "pairs" | "named",
  "term", "version", "tentative", "partial", "coverage", "lacking", "policy", "digest"}``
  (``policy``: the job's fault-tolerance policy that produced the result, when known; ``rows``
  tells the results API's pairs from a job's named rows; ``digest`` hashes the rows and the
  flags — ``partial`` among them when set — not the term, the version or the write time; files
  written before terms lack ``term`` / ``partial``: 0, false). **Top-k jobs** whose accuracy
  the master estimates (``Rollup.accuracy`` not None: an additive aggregate ranked largest
  first) get one more column after the fixed ones, ``accuracy`` (float64: the estimated share
  of this tree's tentative top k that is in the accurate top k; 1.0 when final), and
  ``"accuracy"`` in ``elf.result`` (and in the digest's flags); other jobs' files are
  unchanged. **Late records**: the files of a job's first tree (tree 0, whose master keeps the
  origins' late-record reports) get a ``late_records`` column (int64, after ``accuracy``) and
  ``"late_records"`` in ``elf.result``: the records refused as later than the job's
  ``allowed_lateness`` for the epoch, as known when this version was written (a lower bound:
  late records go on arriving; not in the digest, so a re-push of the same version writes
  nothing new). Other trees' files and files from before the column read it as null
  (unknown).
* **Reading.** :meth:`Lake.files` lists one :class:`LakeFile` per (epoch, tree)
  (:mod:`spark_sink.lake_listing`); a compacted entry's reader keeps only that epoch's rows
  (:func:`read_rows`). :func:`read_table` reads a set of files into one table whose schema is
  the union of theirs (missing columns null, int/float promoted). An empty epoch's file has
  the fixed columns only; a column whose values are all null is typed string.

No pyspark and no agent import here: the agent writes with pyarrow only.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from spark_sink.columns import (
    ACCURACY,
    FIXED_FIELDS,
    LATE_RECORDS,
    TS,
    key_value_columns,
    named_columns,
    to_json,
)
from spark_sink.columns import FIXED_NAMES as FIXED_NAMES  # re-exported: the lake's API
from spark_sink.columns import normalize as normalize
from spark_sink.fencing import OBJECT_STORES, LakeError, create_exclusive
from spark_sink.lake_listing import SOURCES_KEY as SOURCES_KEY  # re-exported: the lake's API
from spark_sink.lake_listing import LakeFile, LakeListing
from spark_sink.lake_listing import complete_epochs as complete_epochs
from spark_sink.lake_names import epoch_file_name, parse_epoch_name, relative_path

SKETCHES_KEY = b"elf.sketch_columns"  # JSON: sketch column → {"sketch", "estimate"}
RESULT_KEY = b"elf.result"  # JSON: rows kind, term, version, tentative, partial, coverage, …
#: versions :meth:`Lake.write` probes past the one asked for before giving up (each probe is
#: one stat, plus a footer read when the version is taken)
MAX_VERSION_PROBES = 64


@dataclass
class Rollup:
    """One tree's result for one epoch, as the master hands it to the lake."""

    job: str
    tree: int  # index of the tree among the job's m trees
    trees: int  # m
    epoch: int
    epoch_seconds: float
    rows: Sequence[tuple[Any, Any]]
    tentative: bool = False
    coverage: float = 1.0
    key_names: Sequence[str] | None = None
    value_names: Sequence[str] | None = None
    named_rows: Sequence[dict[str, Any]] | None = None  # the job's named result rows
    completed_at: float = field(default_factory=time.time)
    #: event time the epoch starts at, when epochs changed length at runtime (None: the
    #: epoch's index times ``epoch_seconds``, which then is this epoch's length)
    start_time: float | None = None
    #: the result's version (≥ 1): a newer one supersedes this (module contract)
    version: int = 1
    #: hex ids of the origins a tentative result still lacks (empty when final)
    lacking: Sequence[str] = ()
    #: a top-k job's accuracy estimate (1.0 when final); None: not a top-k job, or one the
    #: master cannot estimate (no ``accuracy`` column then)
    accuracy: float | None = None
    #: the fencing term of the master that publishes it (≥ 0; 0: written before terms): a
    #: result of a higher term supersedes every version of a lower one (module contract)
    term: int = 0
    #: the result lacks origins that were retired (by the operator or by timeout): never
    #: exact, they stay named in ``lacking`` with coverage < 1 (neither final nor tentative)
    partial: bool = False
    #: the job's fault-tolerance policy that produced it (``passive``, ``replicated:r``;
    #: None: not known), in ``elf.result`` only: not part of the rows or the digest
    policy: str | None = None
    #: records refused as later than the job's allowed lateness for this epoch, as the master
    #: knew when it wrote this version (None: unknown here - not the job's first tree); a
    #: ``late_records`` column and ``elf.result`` entry, not part of the digest
    late_records: int | None = None

    @property
    def epoch_start(self) -> float:
        if self.start_time is not None:
            return self.start_time
        return self.epoch * self.epoch_seconds

    def relative_path(self) -> str:
        return relative_path(
            self.job, self.epoch_start, self.tree, self.trees, self.epoch, self.version, self.term
        )


def rollup_table(rollup: Rollup, written_at: float | None = None) -> pa.Table:
    """The Arrow table of one rollup (fixed columns, then key and value columns, or the
    job's named columns when it names its result rows)."""
    named = rollup.named_rows
    n = len(rollup.rows) if named is None else len(named)
    if not isinstance(rollup.version, int) or rollup.version < 1:
        raise LakeError(f"rollup version must be an integer ≥ 1, got {rollup.version!r}")
    if not isinstance(rollup.term, int) or isinstance(rollup.term, bool) or rollup.term < 0:
        raise LakeError(f"rollup term must be an integer ≥ 0, got {rollup.term!r}")
    lacking = [str(x) for x in rollup.lacking]
    if named is None:
        key_texts = [to_json(k) for k, _ in rollup.rows]
        value_texts = [to_json(v) for _, v in rollup.rows]
    else:  # sketch binaries are not part of the reported row (nor of its digest)
        key_texts, value_texts = [to_json(_reported(r)) for r in named], ["null"] * n
    written = written_at if written_at is not None else time.time()
    start = rollup.epoch_start
    fixed = {
        "job": pa.array([rollup.job] * n, pa.string()),
        "tree": pa.array([rollup.tree] * n, pa.int32()),
        "trees": pa.array([rollup.trees] * n, pa.int32()),
        "epoch": pa.array([rollup.epoch] * n, pa.int64()),
        "term": pa.array([rollup.term] * n, pa.int64()),
        "version": pa.array([rollup.version] * n, pa.int64()),
        "epoch_start": pa.array([_micros(start)] * n, pa.int64()).cast(TS),
        "epoch_end": pa.array([_micros(start + rollup.epoch_seconds)] * n, pa.int64()).cast(TS),
        "tentative": pa.array([bool(rollup.tentative)] * n, pa.bool_()),
        "partial": pa.array([bool(rollup.partial)] * n, pa.bool_()),
        "coverage": pa.array([float(rollup.coverage)] * n, pa.float64()),
        "lacking": pa.array([lacking] * n, pa.list_(pa.string())),
        "written_at": pa.array([_micros(written)] * n, pa.int64()).cast(TS),
        "key_json": pa.array(key_texts, pa.string()),
        "value_json": pa.array(value_texts, pa.string()),
    }
    arrays = [fixed[f.name] for f in FIXED_FIELDS]
    fields = list(FIXED_FIELDS)
    if rollup.accuracy is not None:
        arrays.append(pa.array([float(rollup.accuracy)] * n, pa.float64()))
        fields.append(ACCURACY)
    if rollup.late_records is not None:
        arrays.append(pa.array([int(rollup.late_records)] * n, pa.int64()))
        fields.append(LATE_RECORDS)
    sketch_cols: list[tuple[str, pa.Array]] = []
    if named is None:
        key_cols, value_cols = key_value_columns(rollup.rows, rollup.key_names, rollup.value_names)
    else:  # named rows: numeric fields are the values, binaries sketches, the others keys
        cols = named_columns(named)
        value_cols = [(n, a) for n, a in cols if _numeric(a.type)]
        sketch_cols = [(n, a.cast(pa.binary())) for n, a in cols if _is_sketch(n, a)]
        key_cols = [(n, a) for n, a in cols if not _numeric(a.type) and not _is_sketch(n, a)]
    for name, arr in key_cols + value_cols + sketch_cols:
        arrays.append(arr)
        fields.append(pa.field(name, arr.type))
    meta = {
        b"elf.path": rollup.relative_path().encode(),
        b"elf.key_columns": json.dumps([n for n, _ in key_cols]).encode(),
        b"elf.value_columns": json.dumps([n for n, _ in value_cols]).encode(),
        **(
            {SKETCHES_KEY: json.dumps(sketch_columns(sketch_cols, {n for n, _ in cols})).encode()}
            if sketch_cols
            else {}
        ),
        RESULT_KEY: json.dumps(
            {
                "rows": "pairs" if named is None else "named",
                "term": rollup.term,
                "version": rollup.version,
                "tentative": bool(rollup.tentative),
                "partial": bool(rollup.partial),
                "coverage": float(rollup.coverage),
                "lacking": lacking,
                **({} if rollup.accuracy is None else {"accuracy": float(rollup.accuracy)}),
                **({} if rollup.policy is None else {"policy": rollup.policy}),
                **({} if rollup.late_records is None else {"late_records": rollup.late_records}),
                "digest": _content_digest(key_texts, value_texts, rollup, lacking),
            }
        ).encode(),
    }
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields, metadata=meta))


def _is_sketch(name: str, arr: pa.Array) -> bool:
    """A sketch column: named ``<column>_sketch`` (``agent/ql/rows.py``), binary or all null
    (no group had a value: typed binary all the same); other binary fields of a job's named
    rows stay key columns, as before sketches."""
    if not name.endswith("_sketch"):
        return False
    return pa.types.is_binary(arr.type) or arr.null_count == len(arr)


def _sketch_field(k: Any, v: Any) -> bool:
    return (v is None or isinstance(v, bytes)) and str(k).endswith("_sketch")


def _reported(row: dict[str, Any]) -> dict[str, Any]:
    """A named row without its sketch binaries: what the results API reports."""
    if not any(_sketch_field(k, v) for k, v in row.items()):
        return row
    return {k: v for k, v in row.items() if not _sketch_field(k, v)}


#: a DataSketches binary's family id (its third byte) → the sketch, as Spark names it
_SKETCH_FAMILIES = {7: "hll", 15: "kll_doubles", 10: "frequent_strings"}


def sketch_columns(cols: Sequence[tuple[str, pa.Array]], names: set[str]) -> dict[str, Any]:
    """``elf.sketch_columns``: for each binary column, the sketch it holds (from the
    binaries' family id: ``hll``, ``kll_doubles``, ``frequent_strings``) and the estimate
    column beside it (``p99`` for ``p99_sketch``, when present)."""
    out: dict[str, Any] = {}
    for name, arr in cols:
        first = next((v for v in arr.to_pylist() if v), b"")
        kind = _SKETCH_FAMILIES.get(first[2]) if len(first) > 2 else None
        estimate = name.removesuffix("_sketch")
        out[name] = {"sketch": kind, "estimate": estimate if estimate in names else None}
    return out


def _content_digest(
    key_texts: list[str], value_texts: list[str], rollup: Rollup, lacking: list[str]
) -> str:
    """A hash of what a version promises never to change: the rows (as the results API
    reports them) and the flags; not the term, not the version, not the write time."""
    h = hashlib.blake2b(digest_size=16)
    for texts in (key_texts, value_texts):
        for text in texts:
            h.update(text.encode())
            h.update(b"\n")
    flags: list[Any] = [bool(rollup.tentative), float(rollup.coverage), sorted(lacking)]
    if rollup.accuracy is not None:  # absent for other jobs: their digests are unchanged
        flags.append(float(rollup.accuracy))
    if rollup.partial:  # absent when not partial: earlier files' digests are unchanged
        flags.append("partial")
    h.update(json.dumps(flags).encode())
    return h.hexdigest()


def _numeric(t: pa.DataType) -> bool:
    return pa.types.is_integer(t) or pa.types.is_floating(t)


def _micros(seconds: float) -> int:
    return round(seconds * 1_000_000)


# ---- the lake --------------------------------------------------------------------------------


class Lake(LakeListing):
    """A rollup lake at a local path or any URI pyarrow's filesystems accept (``s3://…``,
    ``hdfs://…``, ``file://…``): its listing (:class:`LakeListing`) and its writes."""

    def __init__(self, location: str, filesystem: pafs.FileSystem | None = None) -> None:
        super().__init__(location, filesystem)
        self.atomic_put = self.fs.type_name in OBJECT_STORES

    def __repr__(self) -> str:
        return f"Lake({self.location!r})"

    def write(self, rollup: Rollup) -> str:
        """Publish one rollup (:meth:`publish` of its :func:`rollup_table`)."""
        return self.publish(rollup_table(rollup))

    def publish(self, table: pa.Table) -> str:
        """Write an epoch table made by :func:`rollup_table` under its (term, version), never
        replacing a file (module contract); returns the path holding its content. Raises
        :class:`~spark_sink.fencing.FencedWrite` if the lake holds the epoch under a higher
        term (:meth:`~LakeListing.holdings`), ``OSError`` or ``pyarrow.ArrowException`` if the
        lake is unavailable, :class:`LakeError` past :data:`MAX_VERSION_PROBES`."""
        relative = (table.schema.metadata or {}).get(b"elf.path", b"").decode()
        directory, _, base = relative.rpartition("/")
        name, result = parse_epoch_name(base), result_meta(table.schema)
        if name is None or result is None or not directory.startswith("job="):
            raise LakeError(f"not an epoch table (made by rollup_table): {relative!r}")
        job = unquote(directory.split("/", 1)[0][4:])
        # FencedWrite when a newer master owns the epoch
        held, compacted = self.holdings(self.path(directory), job, name)
        digest = result.get("digest")
        if compacted is not None:
            source, holder = compacted
            superseded = source.term == name.term and source.version > name.version
            if superseded and name.rank not in held:  # its file maybe swept: not again
                return holder
        version = name.version
        for _ in range(MAX_VERSION_PROBES):
            rank = (name.term, version)
            path = held.get(rank)
            if path is None and compacted is not None and compacted[0].rank == rank:
                kept = (compacted[0].result or {}).get("digest")
                if digest is not None and kept == digest:
                    return compacted[1]  # this content, already compacted
                version += 1
                continue
            if path is None:
                body = table if version == name.version else with_version(table, version)
                path = self.path((body.schema.metadata or {})[b"elf.path"].decode())
                self.fs.create_dir(path.rsplit("/", 1)[0], recursive=True)
                write = lambda p, body=body: pq.write_table(body, p, filesystem=self.fs)  # noqa: E731
                if create_exclusive(self.fs, path, write):
                    return path
            if self._holds(path, digest):
                return path  # already written (a retry, or a racing twin), maybe superseded
            version += 1
        raise LakeError(
            f"{job} epoch {name.epoch} term {name.term}: no free version within "
            f"{MAX_VERSION_PROBES} of {name.version}"
        )

    def _holds(self, path: str, digest: str | None) -> bool:
        """Whether the epoch file at ``path`` holds rows and flags of ``digest``."""
        if digest is None:
            return False
        try:
            meta = result_meta(pq.read_schema(path, filesystem=self.fs))
        except (OSError, pa.ArrowException):
            return False  # unreadable: write a new version rather than trust it
        return meta is not None and meta.get("digest") == digest

    def write_table(self, table: pa.Table) -> str:
        """Write a table to its own ``elf.path`` (atomic replace: compacted files; epoch
        files go through :meth:`publish`, which never replaces one)."""
        relative = (table.schema.metadata or {}).get(b"elf.path")
        if not relative:
            raise LakeError("table has no elf.path metadata (not made by rollup_table)")
        final = self.path(relative.decode())
        directory = final.rsplit("/", 1)[0]
        self.fs.create_dir(directory, recursive=True)
        if self.atomic_put:
            pq.write_table(table, final, filesystem=self.fs)
            return final
        tmp = f"{directory}/.tmp-{uuid.uuid4().hex}.parquet"
        try:
            pq.write_table(table, tmp, filesystem=self.fs)
            self.fs.move(tmp, final)
        except BaseException:
            with contextlib.suppress(OSError, pa.ArrowException):
                self.fs.delete_file(tmp)
            raise
        return final


def with_version(table: pa.Table, version: int) -> pa.Table:
    """An epoch table made by :func:`rollup_table` as version ``version`` of its term: the
    ``version`` column, ``elf.path`` and ``elf.result`` changed (the digest does not cover
    the version)."""
    meta = dict(table.schema.metadata or {})
    directory, _, base = meta[b"elf.path"].decode().rpartition("/")
    name = parse_epoch_name(base)
    result = result_meta(table.schema)
    if name is None or result is None:
        raise LakeError(f"not an epoch table (made by rollup_table): {base!r}")
    new = epoch_file_name(name.epoch, name.tree, name.trees, version, name.term)
    meta[b"elf.path"] = f"{directory}/{new}".encode()
    meta[RESULT_KEY] = json.dumps({**result, "version": version}).encode()
    i = table.schema.get_field_index("version")
    column = pa.array([version] * table.num_rows, pa.int64())
    return table.set_column(i, table.schema.field(i), column).replace_schema_metadata(meta)


def unified_schema(schemas: Sequence[pa.Schema]) -> pa.Schema:
    """The union of rollup schemas: fixed columns first, others in first-seen order; int and
    float columns promote to float, other conflicts become text."""
    types: dict[str, pa.DataType] = {f.name: f.type for f in FIXED_FIELDS}
    order = [f.name for f in FIXED_FIELDS]
    for schema in schemas:
        for f in schema:
            if f.name not in types:
                types[f.name] = f.type
                order.append(f.name)
            elif types[f.name] != f.type:
                types[f.name] = _promote(types[f.name], f.type)
    fixed = {f.name: f for f in FIXED_FIELDS}
    return pa.schema([fixed.get(n) or pa.field(n, types[n]) for n in order])


def _promote(a: pa.DataType, b: pa.DataType) -> pa.DataType:
    if pa.types.is_null(a):
        return b
    if pa.types.is_null(b):
        return a
    nums = (pa.types.is_integer, pa.types.is_floating)
    if any(f(a) for f in nums) and any(f(b) for f in nums):
        return pa.float64()
    if (pa.types.is_list(a) and pa.types.is_list(b)) and pa.types.is_null(a.value_type):
        return b
    if (pa.types.is_list(a) and pa.types.is_list(b)) and pa.types.is_null(b.value_type):
        return a
    return pa.string()


def conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """``table`` with exactly ``schema``'s columns (missing ones null, types cast; a cast
    that fails renders the column as JSON text if the target is text, else nulls)."""
    arrays = []
    for f in schema:
        if f.name not in table.column_names:
            arrays.append(_missing(f, len(table)))
            continue
        col = table.column(f.name)
        if col.type == f.type:
            arrays.append(col)
            continue
        try:
            arrays.append(col.cast(f.type))
        except (pa.ArrowException, ValueError):
            if pa.types.is_string(f.type):
                values = col.to_pylist()
                arrays.append(pa.array([None if v is None else to_json(v) for v in values]))
            else:
                arrays.append(pa.nulls(len(table), f.type))
    return pa.Table.from_arrays(arrays, schema=pa.schema(list(schema), metadata=None))


def _missing(f: pa.Field, n: int) -> pa.Array:
    """A column a file lacks: ``version`` 1, ``term`` 0, ``partial`` false and ``lacking``
    empty for files written before those columns existed, nulls otherwise."""
    if f.name in ("version", "term"):
        return pa.array([int(f.name == "version")] * n, pa.int64())
    if f.name == "partial":
        return pa.array([False] * n, pa.bool_())
    if f.name == "lacking":
        return pa.array([[]] * n, pa.list_(pa.string()))
    return pa.nulls(n, f.type)


def read_schema(lake: Lake, files: Sequence[LakeFile]) -> pa.Schema:
    """The unified schema of ``files`` (only their footers are read, once per path)."""
    paths = list(dict.fromkeys(f.path for f in files))
    schemas = [pq.read_schema(p, filesystem=lake.fs) for p in paths]
    return unified_schema([_without_meta(sc) for sc in schemas])


def _without_meta(schema: pa.Schema) -> pa.Schema:
    return schema.remove_metadata()


def file_selection(files: Sequence[LakeFile]) -> list[tuple[str, list[int] | None]]:
    """``files`` as (path, epochs to keep or None for the whole file), one item per path in
    first-seen order: a compacted file listed for several epochs is read once."""
    out: dict[str, list[int] | None] = {}
    for f in files:
        if f.compacted:
            kept = out.setdefault(f.path, [])
            assert kept is not None
            kept.append(f.epoch)
        else:
            out[f.path] = None
    return list(out.items())


def read_rows(lake: Lake, path: str, epochs: Sequence[int] | None) -> pa.Table:
    """One file's rows (of ``epochs`` only, for a compacted file)."""
    table = pq.read_table(path, filesystem=lake.fs)
    if epochs is not None:
        import pyarrow.compute as pc

        table = table.filter(pc.is_in(table.column("epoch"), pa.array(epochs, pa.int64())))
    return table


def read_table(lake: Lake, files: Sequence[LakeFile], schema: pa.Schema | None = None) -> pa.Table:
    """The rows of ``files`` as one table with ``schema`` (default: their unified schema)."""
    tables = [read_rows(lake, path, epochs) for path, epochs in file_selection(files)]
    if schema is None:
        schema = unified_schema([t.schema for t in tables])
    if not tables:
        return schema.empty_table()
    return pa.concat_tables([conform(t, schema) for t in tables])


def result_meta(schema: pa.Schema) -> dict[str, Any] | None:
    """An epoch file's ``elf.result`` footer (module contract), or None (files written before
    it, or a damaged footer)."""
    raw = (schema.metadata or {}).get(RESULT_KEY)
    if raw is None:
        return None
    try:
        meta = json.loads(raw)
    except ValueError:
        return None
    return meta if isinstance(meta, dict) else None


def epoch_meta(lake: Lake, f: LakeFile) -> dict[str, Any] | None:
    """One (epoch, tree) entry's ``elf.result`` from footers only (the epoch file's, or the
    compacted file's ``elf.sources``), its ``term`` and ``version`` the entry's (``partial``
    false when not recorded); None for files written before ``elf.result``."""
    if f.compacted:
        source = lake.compacted_sources(lake.fs.get_file_info(f.path)).get(f.epoch)
        meta = source.result if source is not None else None
    else:
        meta = result_meta(pq.read_schema(f.path, filesystem=lake.fs))
    if meta is None:
        return None
    return {"partial": False, **meta, "term": f.term, "version": f.version}


def read_epoch(
    lake: Lake, f: LakeFile, meta: dict[str, Any] | None = None
) -> tuple[pa.Table, dict[str, Any]]:
    """One (epoch, tree) entry's rows and its result description (``meta``, else
    :func:`epoch_meta`; for files written before ``elf.result``, term and version from the
    name and the rest from the first row, ``rows`` unknown (None) when that is not a pair). Reads
    that one file only (one tree's compacted hour filtered to the epoch)."""
    if meta is None:
        meta = epoch_meta(lake, f)
    table = read_rows(lake, f.path, [f.epoch] if f.compacted else None)
    if meta is None:
        first = table.slice(0, 1).to_pylist()
        row = first[0] if first else {}
        meta = {
            "rows": None if not first else ("pairs" if row.get("value_json") != "null" else None),
            "tentative": bool(row.get("tentative", False)),
            "partial": bool(row.get("partial", False)),
            "coverage": float(row.get("coverage", 1.0)),
            "lacking": list(row.get("lacking") or []),
        }
    return table, {**meta, "term": f.term, "version": f.version}
