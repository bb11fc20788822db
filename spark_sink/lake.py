"""The rollup lake: each epoch's result of each job tree as one Parquet file (pyarrow only).

Contract (see ``docs/spark-sink.md``):

* **Layout.**
  ``<root>/job=<name>/date=YYYY-MM-DD/hour=HH/epoch-<e>-tree-<i>-of-<m>-v<k>.parquet``
  (date and hour of the epoch's start, UTC; ``<name>`` percent-encoded like Hive partition
  values; ``k`` ≥ 1 the result's **version**). One file per (job, tree index, epoch,
  version): the path depends on nothing else, so a retried or duplicated push of the same
  version (a master that dies after writing and before telling its standby) *replaces* the
  file and never adds rows, while a new version of the epoch (late data, a tentative result
  made final) is a new file next to the old one. Files named without ``-v<k>`` (written
  before versions existed) are version 1. Writes are atomic: a hidden temporary file in the
  same directory (``.tmp-*``, which Spark and pyarrow ignore) renamed over the final name; on
  object stores (S3, GCS) a single PUT of the final object is already atomic, so it is
  written directly.
* **Versions.** A version is the writer's promise that the rows of (job, tree, epoch, version)
  never change: a newer version supersedes an older one, the same version written twice has the
  same rows. :meth:`Lake.write` keeps the promise across writers: when the version's file already
  exists with other content (two masters of one job numbering versions independently: an old
  master restarted after its standby took over), it writes the next free version instead; when
  that version (or a later one it probes) already holds this content (``elf.result``'s ``digest``:
  a retried push), it writes nothing. So a file's rows never change under a reader, and a re-push
  is never a new version. Readers of the *current* result (:meth:`Lake.files`, batch reads) see
  exactly one row set per (job, tree, epoch): its **highest version** present;
  :meth:`Lake.versions` lists every version still in the lake (the streaming source delivers each
  new one as new rows).
* **Schema.** Fixed columns :data:`FIXED_FIELDS` (job, tree, trees, epoch, version,
  epoch_start, epoch_end, tentative, coverage, lacking, written_at, key_json, value_json) on
  every row — ``lacking`` is a list of strings: the hex ids of the origins a tentative result
  still lacks (empty for a final one); files without ``version`` / ``lacking`` read as 1 and
  an empty list — then typed
  key and value columns (:func:`key_value_columns`): a scalar key is ``key``, a tuple key
  ``key_0..key_n``, or the names the job gives; a scalar value is ``value``, a tuple value
  ``value_0..``, a list value one list column ``value``, a dict value one column per dict key
  (e.g. ``{"clicks": 7}`` → ``clicks``). A column whose values pyarrow cannot type uniformly
  (mixed types, ints beyond 64 bits, nested dicts) holds JSON text instead; ``key_json`` /
  ``value_json`` always hold the whole key / value as JSON (tuples and sets as lists, bytes
  as UTF-8 text) — exactly the rows the results API reports. A job that names its result
  rows (``Job.result_rows``, e.g. ELF QL: ``{"product": "p1", "clicks": 7}``) gets one column
  per field instead; ``key_json`` then holds the whole row as a JSON object and
  ``value_json`` is ``null``. The footer names the roles: ``elf.key_columns`` and
  ``elf.value_columns`` (JSON lists; for named rows the numeric fields are the values), and
  ``elf.result`` describes the result even when it has no row: ``{"rows": "pairs" |
  "named", "version", "tentative", "coverage", "lacking", "digest"}`` (``rows`` tells the
  results API's pairs from a job's named rows; ``digest`` hashes the rows and the flags, not
  the version or the write time). **Top-k jobs** whose accuracy the master estimates
  (``Rollup.accuracy`` not None: an additive aggregate ranked largest first) get one more
  column after the fixed ones, ``accuracy`` (float64: the estimated share of this tree's
  tentative top k that is in the accurate top k; 1.0 when final), and ``"accuracy"`` in
  ``elf.result`` (and in the digest's flags); other jobs' files are unchanged.
* **Compacted hours** (``spark_sink/compaction.py``): an hour's epoch files of one tree
  merged into ``compact-tree-<i>-of-<m>.parquet`` in the same hour directory. Its footer's
  ``elf.sources`` maps each epoch it holds to ``{"version": k, "mtime_ns": t, "result":
  {…}}``: the version its rows are, the epoch file's mtime and its ``elf.result``. An epoch
  file of a lower version is a stale copy (awaiting deletion) and is never listed; a higher
  version written later wins over the compacted rows of its epoch until the next compaction
  folds it in. So a reader sees each (epoch, tree) once, before, during and after a
  compaction. Versions, not modification times, decide: an mtime depends on the clock of the
  host that wrote the file (two masters of one job on a shared lake), on the file system's
  granularity, and on copies and restores, and a rollup buffered while the lake was down
  gets the mtime of its late flush; a version is part of the data. Only between equal
  versions — which by the writer's promise hold the same rows, so either is right — does the
  mtime break the tie (a file not newer than ``t`` is stale): a writer that broke the
  promise still ends with its last write, as before versions. Compacted files written before
  versions map epochs to a bare ``mtime_ns``: version 1, same rule.
* **Reading.** :meth:`Lake.files` lists one :class:`LakeFile` per (epoch, tree), its
  highest version (parsed from file names; a compacted file's footer is read once and
  cached); :meth:`Lake.epoch_file` finds one (epoch, tree) listing only its hour directory.
  A compacted entry has ``compacted=True`` and its reader keeps only that epoch's rows
  (:func:`read_rows`).
  :func:`read_table` reads a set of files into one table whose schema is the union of theirs
  (missing columns null, int/float promoted). An empty epoch's file has the fixed columns
  only; a column whose values are all null is typed string.

No pyspark and no agent import here: the agent writes with pyarrow only.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import json
import math
import re
import time
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple
from urllib.parse import quote, unquote

import orjson
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

TS = pa.timestamp("us", tz="UTC")
FIXED_FIELDS: tuple[pa.Field, ...] = (
    pa.field("job", pa.string(), nullable=False),
    pa.field("tree", pa.int32(), nullable=False),
    pa.field("trees", pa.int32(), nullable=False),
    pa.field("epoch", pa.int64(), nullable=False),
    pa.field("version", pa.int64(), nullable=False),
    pa.field("epoch_start", TS, nullable=False),
    pa.field("epoch_end", TS, nullable=False),
    pa.field("tentative", pa.bool_(), nullable=False),
    pa.field("coverage", pa.float64(), nullable=False),
    pa.field("lacking", pa.list_(pa.string()), nullable=False),
    pa.field("written_at", TS, nullable=False),
    pa.field("key_json", pa.string(), nullable=False),
    pa.field("value_json", pa.string(), nullable=False),
)
FIXED_NAMES = frozenset(f.name for f in FIXED_FIELDS)
ACCURACY = pa.field("accuracy", pa.float64(), nullable=True)  # top-k jobs only (module doc)
PARTITION_NAMES = frozenset({"date", "hour"})
FILE_RE = re.compile(r"^epoch-(-?\d+)-tree-(\d+)-of-(\d+)(?:-v(\d+))?\.parquet$")
COMPACT_RE = re.compile(r"^compact-tree-(\d+)-of-(\d+)\.parquet$")
SOURCES_KEY = b"elf.sources"
RESULT_KEY = b"elf.result"  # JSON: rows kind, version, tentative, coverage, lacking
OBJECT_STORES = frozenset({"s3", "gcs"})
#: versions :meth:`Lake.write` probes past the one asked for before giving up (each probe is
#: one stat, plus a footer read when the version is taken)
MAX_VERSION_PROBES = 64


class LakeError(Exception):
    """The lake cannot be opened or a rollup cannot be represented (message says why)."""


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

    @property
    def epoch_start(self) -> float:
        if self.start_time is not None:
            return self.start_time
        return self.epoch * self.epoch_seconds

    def relative_path(self) -> str:
        return rollup_path(self, self.version)


@dataclass(frozen=True)
class LakeFile:
    """One rollup file, described from its path alone."""

    job: str
    date: str
    hour: int
    epoch: int
    tree: int
    trees: int
    path: str  # filesystem path (no scheme)
    mtime: float | None = None
    compacted: bool = False  # ``path`` holds an hour of epochs: read only this one's rows
    mtime_ns: int | None = None
    version: int = 1


def rollup_path(rollup: Rollup, version: int) -> str:
    """``rollup``'s relative path as version ``version``."""
    return relative_path(
        rollup.job, rollup.epoch_start, rollup.tree, rollup.trees, rollup.epoch, version
    )


def compact_name(tree: int, trees: int) -> str:
    """The file name an hour's compacted epochs of tree ``tree`` of ``trees`` go to."""
    return f"compact-tree-{tree}-of-{trees}.parquet"


def relative_path(
    job: str, epoch_start: float, tree: int, trees: int, epoch: int, version: int = 1
) -> str:
    """``job=<name>/date=…/hour=…/epoch-<e>-tree-<i>-of-<m>-v<k>.parquet`` (module
    contract)."""
    return f"{hour_path(job, epoch_start)}/epoch-{epoch}-tree-{tree}-of-{trees}-v{version}.parquet"


def hour_path(job: str, epoch_start: float) -> str:
    """``job=<name>/date=…/hour=…``: the directory an epoch starting then is written to."""
    when = dt.datetime.fromtimestamp(math.floor(epoch_start), dt.UTC)
    return f"job={quote(job, safe='')}/date={when:%Y-%m-%d}/hour={when:%H}"


class Source(NamedTuple):
    """What a compacted file records of one epoch: the version of its rows, the ``mtime_ns``
    of the epoch file they came from (the tie-break between equal versions), and that file's
    ``elf.result``."""

    version: int
    mtime_ns: int | None = None
    result: dict[str, Any] | None = None  # the epoch file's ``elf.result``, when known

    def supersedes(self, version: int, mtime_ns: int) -> bool:
        """Whether these compacted rows make an epoch file of ``version`` stale."""
        if version != self.version:
            return version < self.version
        return self.mtime_ns is None or mtime_ns <= self.mtime_ns

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"version": self.version}
        if self.mtime_ns is not None:
            out["mtime_ns"] = self.mtime_ns
        if self.result is not None:
            out["result"] = self.result
        return out


def parse_sources(raw: bytes | None) -> dict[int, Source]:
    """A compacted footer's ``elf.sources``: ``{"<e>": {"version": k, "mtime_ns": t,
    "result": {…}}}``, or the older ``{"<e>": mtime_ns}`` (version 1). Raises ``ValueError`` /
    ``TypeError`` / ``KeyError`` on a malformed footer."""
    out = {}
    for e, v in json.loads(raw or b"{}").items():
        if isinstance(v, dict):
            ns, result = v.get("mtime_ns"), v.get("result")
            out[int(e)] = Source(
                int(v["version"]),
                None if ns is None else int(ns),
                result if isinstance(result, dict) else None,
            )
        else:
            out[int(e)] = Source(1, int(v))
    return out


# ---- values → columns ------------------------------------------------------------------------


def normalize(value: Any) -> Any:
    """JSON-ready form: tuples → lists, sets → lists sorted by repr, bytes → UTF-8 text,
    non-finite floats → None."""
    if isinstance(value, dict):
        return {str(normalize(k)): normalize(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [normalize(v) for v in value]
    if isinstance(value, set | frozenset):
        return sorted((normalize(v) for v in value), key=repr)
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _json_default(value: Any) -> Any:
    if isinstance(value, set | frozenset | bytes):
        return normalize(value)
    if type(value).__module__ == "numpy" and hasattr(value, "tolist"):  # numpy scalars
        return value.tolist()
    raise TypeError(type(value).__name__)


def to_json(value: Any) -> str:
    """Compact JSON of :func:`normalize` (value) (orjson fast path; ints beyond 64 bits and
    non-text dict keys take the json module's path)."""
    try:
        return orjson.dumps(value, default=_json_default).decode()
    except (orjson.JSONEncodeError, TypeError):
        return json.dumps(normalize(value), ensure_ascii=False, separators=(",", ":"))


def _shape(values: Sequence[Any]) -> tuple[str, int]:
    """('scalar'|'tuple'|'list'|'dict'|'mixed', arity) of a column of keys or values."""
    kinds = set()
    arity = set()
    for v in values:
        if isinstance(v, tuple):
            kinds.add("tuple")
            arity.add(len(v))
        elif isinstance(v, list | set | frozenset):
            kinds.add("list")
        elif isinstance(v, dict):
            kinds.add("dict")
        else:
            kinds.add("scalar")
    if len(kinds) != 1 or len(arity) > 1:
        return ("mixed" if kinds else "scalar", 0)
    kind = kinds.pop()
    return kind, (arity.pop() if arity else 1)


def _typed(values: list[Any]) -> pa.Array:
    """A typed Arrow array if pyarrow infers one of the plain types, else JSON text."""
    prepared = [sorted(v, key=repr) if isinstance(v, set | frozenset) else v for v in values]
    try:
        arr = pa.array(prepared)
    except (pa.ArrowException, OverflowError, TypeError, ValueError):
        return pa.array([None if v is None else to_json(v) for v in values], pa.string())
    if pa.types.is_null(arr.type):  # all None: text, so files agree with typed epochs
        return pa.nulls(len(arr), pa.string())
    if pa.types.is_list(arr.type) and pa.types.is_null(arr.type.value_type):
        return arr.cast(pa.list_(pa.string()))
    if _plain(arr.type):
        return arr
    return pa.array([None if v is None else to_json(v) for v in values], pa.string())


def _plain(t: pa.DataType) -> bool:
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return _plain(t.value_type) and not pa.types.is_list(t.value_type)
    return (
        pa.types.is_null(t)
        or pa.types.is_boolean(t)
        or pa.types.is_int64(t)
        or pa.types.is_float64(t)
        or pa.types.is_string(t)
        or pa.types.is_binary(t)
    )


def _column_name(name: str, taken: set[str]) -> str:
    name = str(name) or "_"
    while name in taken or name in FIXED_NAMES or name in PARTITION_NAMES or name == ACCURACY.name:
        name = f"_{name}"
    taken.add(name)
    return name


def key_value_columns(
    rows: Sequence[tuple[Any, Any]],
    key_names: Sequence[str] | None = None,
    value_names: Sequence[str] | None = None,
) -> tuple[list[tuple[str, pa.Array]], list[tuple[str, pa.Array]]]:
    """The typed (key columns, value columns) for ``rows`` (module contract); a
    ``key_names`` / ``value_names`` of the wrong arity is ignored (default names used)."""
    if not rows:  # an empty epoch: fixed columns only (no column typed from nothing)
        return [], []
    keys = [k for k, _ in rows]
    values = [v for _, v in rows]
    taken: set[str] = set()
    out: list[tuple[str, pa.Array]] = []
    kind, arity = _shape(keys)
    if kind == "tuple":
        names = list(key_names) if key_names and len(key_names) == arity else None
        for i in range(arity):
            name = _column_name(names[i] if names else f"key_{i}", taken)
            out.append((name, _typed([k[i] for k in keys])))
    elif kind == "scalar":
        name = key_names[0] if key_names and len(key_names) == 1 else "key"
        out.append((_column_name(name, taken), _typed(keys)))
    keys_done = len(out)
    kind, arity = _shape(values)
    if kind == "dict":
        fields: dict[str, None] = {}
        for v in values:
            fields.update(dict.fromkeys(str(k) for k in v))
        for f in fields:
            col = [next((x for k, x in v.items() if str(k) == f), None) for v in values]
            out.append((_column_name(f, taken), _typed(col)))
    elif kind == "tuple":
        names = list(value_names) if value_names and len(value_names) == arity else None
        for i in range(arity):
            name = _column_name(names[i] if names else f"value_{i}", taken)
            out.append((name, _typed([v[i] for v in values])))
    elif kind in ("scalar", "list"):
        name = value_names[0] if value_names and len(value_names) == 1 else "value"
        out.append((_column_name(name, taken), _typed(values)))
    return out[:keys_done], out[keys_done:]


def named_columns(rows: Sequence[dict[str, Any]]) -> list[tuple[str, pa.Array]]:
    """One typed column per field of the job's named rows (union of fields, first-seen
    order; a field a row lacks is null there)."""
    fields: dict[str, None] = {}
    for row in rows:
        fields.update(dict.fromkeys(str(k) for k in row))
    taken: set[str] = set()
    out = []
    for f in fields:
        values = [next((v for k, v in row.items() if str(k) == f), None) for row in rows]
        out.append((_column_name(f, taken), _typed(values)))
    return out


def rollup_table(rollup: Rollup, written_at: float | None = None) -> pa.Table:
    """The Arrow table of one rollup (fixed columns, then key and value columns, or the
    job's named columns when it names its result rows)."""
    named = rollup.named_rows
    n = len(rollup.rows) if named is None else len(named)
    if not isinstance(rollup.version, int) or rollup.version < 1:
        raise LakeError(f"rollup version must be an integer ≥ 1, got {rollup.version!r}")
    lacking = [str(x) for x in rollup.lacking]
    if named is None:
        key_texts = [to_json(k) for k, _ in rollup.rows]
        value_texts = [to_json(v) for _, v in rollup.rows]
    else:
        key_texts, value_texts = [to_json(r) for r in named], ["null"] * n
    written = written_at if written_at is not None else time.time()
    start = rollup.epoch_start
    fixed = {
        "job": pa.array([rollup.job] * n, pa.string()),
        "tree": pa.array([rollup.tree] * n, pa.int32()),
        "trees": pa.array([rollup.trees] * n, pa.int32()),
        "epoch": pa.array([rollup.epoch] * n, pa.int64()),
        "version": pa.array([rollup.version] * n, pa.int64()),
        "epoch_start": pa.array([_micros(start)] * n, pa.int64()).cast(TS),
        "epoch_end": pa.array([_micros(start + rollup.epoch_seconds)] * n, pa.int64()).cast(TS),
        "tentative": pa.array([bool(rollup.tentative)] * n, pa.bool_()),
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
    if named is None:
        key_cols, value_cols = key_value_columns(rollup.rows, rollup.key_names, rollup.value_names)
    else:  # named rows: numeric fields are the values, the others the keys
        cols = named_columns(named)
        value_cols = [(n, a) for n, a in cols if _numeric(a.type)]
        key_cols = [(n, a) for n, a in cols if not _numeric(a.type)]
    for name, arr in key_cols + value_cols:
        arrays.append(arr)
        fields.append(pa.field(name, arr.type))
    meta = {
        b"elf.path": rollup.relative_path().encode(),
        b"elf.key_columns": json.dumps([n for n, _ in key_cols]).encode(),
        b"elf.value_columns": json.dumps([n for n, _ in value_cols]).encode(),
        RESULT_KEY: json.dumps(
            {
                "rows": "pairs" if named is None else "named",
                "version": rollup.version,
                "tentative": bool(rollup.tentative),
                "coverage": float(rollup.coverage),
                "lacking": lacking,
                **({} if rollup.accuracy is None else {"accuracy": float(rollup.accuracy)}),
                "digest": _content_digest(key_texts, value_texts, rollup, lacking),
            }
        ).encode(),
    }
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields, metadata=meta))


def _content_digest(
    key_texts: list[str], value_texts: list[str], rollup: Rollup, lacking: list[str]
) -> str:
    """A hash of what a version promises never to change: the rows (as the results API
    reports them) and the flags; not the version, not the write time."""
    h = hashlib.blake2b(digest_size=16)
    for texts in (key_texts, value_texts):
        for text in texts:
            h.update(text.encode())
            h.update(b"\n")
    flags: list[Any] = [bool(rollup.tentative), float(rollup.coverage), sorted(lacking)]
    if rollup.accuracy is not None:  # absent for other jobs: their digests are unchanged
        flags.append(float(rollup.accuracy))
    h.update(json.dumps(flags).encode())
    return h.hexdigest()


def _numeric(t: pa.DataType) -> bool:
    return pa.types.is_integer(t) or pa.types.is_floating(t)


def _micros(seconds: float) -> int:
    return round(seconds * 1_000_000)


# ---- the lake --------------------------------------------------------------------------------


class Lake:
    """A rollup lake at a local path or any URI pyarrow's filesystems accept (``s3://…``,
    ``hdfs://…``, ``file://…``)."""

    def __init__(self, location: str, filesystem: pafs.FileSystem | None = None) -> None:
        self.location = str(location)
        if filesystem is not None:
            self.fs, self.root = filesystem, self.location
        elif "://" in self.location:
            try:
                self.fs, self.root = pafs.FileSystem.from_uri(self.location)
            except (pa.ArrowException, OSError, ValueError, TypeError) as exc:
                raise LakeError(f"lake {self.location!r}: {exc}") from None
        else:
            import os

            self.fs, self.root = pafs.LocalFileSystem(), os.path.abspath(self.location)
        self.root = self.root.rstrip("/") or "/"
        self.atomic_put = self.fs.type_name in OBJECT_STORES
        self._sources: dict[tuple[str, int, int | None], dict[int, Source]] = {}

    def __repr__(self) -> str:
        return f"Lake({self.location!r})"

    def path(self, relative: str) -> str:
        return f"{self.root}/{relative}"

    def write(self, rollup: Rollup) -> str:
        """Write one rollup atomically; returns the file's path. Never replaces a file of
        other content: a version already taken by other rows moves this write to the next
        free version; content already held by this version or a later one probed on the way
        is not written again (module contract). Raises ``OSError`` or ``pyarrow.ArrowException``
        if the lake is unavailable, :class:`LakeError` past :data:`MAX_VERSION_PROBES`."""
        table = rollup_table(rollup)
        digest = (result_meta(table.schema) or {}).get("digest")
        version = rollup.version
        for _ in range(MAX_VERSION_PROBES):
            path = self.path(rollup_path(rollup, version))
            if self.fs.get_file_info(path).type == pafs.FileType.NotFound:
                break
            if self._holds(path, digest):
                return path  # already written (a retry), maybe superseded since
            version += 1
        else:
            raise LakeError(
                f"{rollup.job} epoch {rollup.epoch}: no free version within "
                f"{MAX_VERSION_PROBES} of {rollup.version}"
            )
        if version != rollup.version:
            table = rollup_table(replace(rollup, version=version))
        return self.write_table(table)

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
        """Write a table made by :func:`rollup_table` to its own path (atomic replace)."""
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

    def jobs(self) -> list[str]:
        try:
            infos = self.fs.get_file_info(pafs.FileSelector(self.root, allow_not_found=True))
        except (OSError, pa.ArrowException) as exc:
            raise LakeError(f"lake {self.location!r}: {exc}") from None
        return sorted(
            unquote(i.base_name[4:])
            for i in infos
            if i.type == pafs.FileType.Directory and i.base_name.startswith("job=")
        )

    def files(self, job: str | None = None) -> list[LakeFile]:
        """One entry per (job, epoch, tree) a reader of current results should read — its
        highest version, in an epoch file or a compacted file — sorted by (job, epoch,
        tree) (module contract)."""
        return self._list(job, every_version=False)

    def versions(self, job: str | None = None) -> list[LakeFile]:
        """Every (job, epoch, tree, version) still in the lake, sorted by (job, epoch, tree,
        version): each epoch file, and each epoch of a compacted file (the version it
        records). A version held both ways is listed once (its epoch file)."""
        return self._list(job, every_version=True)

    def epoch_file(
        self, job: str, epoch_start: float, tree: int, trees: int, epoch: int
    ) -> LakeFile | None:
        """The highest version of one (job, tree of m, epoch), listing only the hour
        directory it lives in (``epoch_start``: when the epoch starts); None if absent."""
        directory = self.path(hour_path(job, epoch_start))
        try:
            infos = self.fs.get_file_info(pafs.FileSelector(directory, allow_not_found=True))
        except (OSError, pa.ArrowException) as exc:
            raise LakeError(f"lake {self.location!r}: {exc}") from None
        when = dt.datetime.fromtimestamp(math.floor(epoch_start), dt.UTC)
        found = self._hour_files(job, f"{when:%Y-%m-%d}", when.hour, list(infos), False)
        return next((f for f in found if (f.epoch, f.tree, f.trees) == (epoch, tree, trees)), None)

    def _list(self, job: str | None, every_version: bool) -> list[LakeFile]:
        jobs = [job] if job is not None else self.jobs()
        out: list[LakeFile] = []
        for name in jobs:
            base = self.path(f"job={quote(name, safe='')}")
            selector = pafs.FileSelector(base, recursive=True, allow_not_found=True)
            try:
                infos = self.fs.get_file_info(selector)
            except (OSError, pa.ArrowException) as exc:
                raise LakeError(f"lake {self.location!r}: {exc}") from None
            by_dir: dict[tuple[str, int], list[pafs.FileInfo]] = {}
            for info in infos:
                if info.type != pafs.FileType.File:
                    continue
                parts = info.path[len(base) + 1 :].split("/")
                if len(parts) != 3 or not parts[0].startswith("date="):
                    continue
                try:
                    hour = int(parts[1].removeprefix("hour="))
                except ValueError:
                    continue
                by_dir.setdefault((parts[0][5:], hour), []).append(info)
            for (date, hour), group in by_dir.items():
                out.extend(self._hour_files(name, date, hour, group, every_version))
        out.sort(key=lambda f: (f.job, f.epoch, f.tree, f.version))
        return out

    def _hour_files(
        self, job: str, date: str, hour: int, infos: list[pafs.FileInfo], every_version: bool
    ) -> list[LakeFile]:
        # (epoch, tree, m) → version → the epoch file holding it (a version named both with
        # and without ``-v1``: the newer file)
        small: dict[tuple[int, int, int], dict[int, pafs.FileInfo]] = {}
        compacted: dict[tuple[int, int], pafs.FileInfo] = {}
        for info in infos:
            if info.type != pafs.FileType.File:
                continue
            if m := FILE_RE.match(info.base_name):
                key = (int(m.group(1)), int(m.group(2)), int(m.group(3)))
                version = int(m.group(4)) if m.group(4) else 1
                versions = small.setdefault(key, {})
                held = versions.get(version)
                if held is None or _mtime_ns(info) > _mtime_ns(held):
                    versions[version] = info
            elif m := COMPACT_RE.match(info.base_name):
                compacted[(int(m.group(1)), int(m.group(2)))] = info
        covered: dict[tuple[int, int, int], Source] = {}
        for (tree, trees), info in compacted.items():
            for epoch, source in self.compacted_sources(info).items():
                covered[(epoch, tree, trees)] = source
        out: list[LakeFile] = []
        for key in set(small) | set(covered):
            epoch, tree, trees = key
            source = covered.get(key)
            versions = small.get(key, {})
            fresh = {
                v: info
                for v, info in versions.items()
                if source is None or not source.supersedes(v, _mtime_ns(info))
            }
            holder = compacted[(tree, trees)] if source is not None else None
            if every_version:
                for v, info in versions.items():
                    out.append(_lake_file(job, date, hour, epoch, tree, trees, info, False, v))
                if holder is not None and source is not None and source.version not in versions:
                    out.append(_lake_file(job, date, hour, epoch, tree, trees, holder, True,
                                          source.version))  # fmt: skip
            elif fresh:
                v = max(fresh)
                out.append(_lake_file(job, date, hour, epoch, tree, trees, fresh[v], False, v))
            elif holder is not None and source is not None:
                out.append(_lake_file(job, date, hour, epoch, tree, trees, holder, True,
                                      source.version))  # fmt: skip
        return out

    def compacted_sources(self, info: pafs.FileInfo) -> dict[int, Source]:
        """epoch → :class:`Source` recorded in a compacted file's footer (cached per file
        version; an unreadable footer lists nothing and is logged by the caller's read)."""
        key = (info.path, _mtime_ns(info), info.size)
        cached = self._sources.get(key)
        if cached is None:
            try:
                meta = pq.read_schema(info.path, filesystem=self.fs).metadata or {}
                cached = parse_sources(meta.get(SOURCES_KEY))
            except (OSError, pa.ArrowException, ValueError, TypeError, KeyError):
                cached = {}
            if len(self._sources) > 4096:
                self._sources.clear()
            self._sources[key] = cached
        return cached


def _mtime_ns(info: pafs.FileInfo) -> int:
    ns = info.mtime_ns
    return int(ns) if ns is not None else 0


def _lake_file(
    job: str, date: str, hour: int, epoch: int, tree: int, trees: int,
    info: pafs.FileInfo, compacted: bool, version: int,
) -> LakeFile:  # fmt: skip
    return LakeFile(
        job=job,
        date=date,
        hour=hour,
        epoch=epoch,
        tree=tree,
        trees=trees,
        path=info.path,
        mtime=info.mtime.timestamp() if info.mtime is not None else None,
        compacted=compacted,
        mtime_ns=_mtime_ns(info),
        version=version,
    )


def complete_epochs(files: Iterable[LakeFile]) -> dict[int, bool]:
    """epoch → whether every one of its m trees has a file (one job's files)."""
    seen: dict[int, set[int]] = {}
    want: dict[int, int] = {}
    for f in files:
        seen.setdefault(f.epoch, set()).add(f.tree)
        want[f.epoch] = f.trees
    return {e: len(trees) >= want[e] for e, trees in sorted(seen.items())}


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
    """A column a file lacks: ``version`` 1 and ``lacking`` empty for files written before
    those columns existed, nulls otherwise."""
    if f.name == "version":
        return pa.array([1] * n, pa.int64())
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
    compacted file's ``elf.sources``), its ``version`` the entry's; None for files written
    before ``elf.result``."""
    if f.compacted:
        source = lake.compacted_sources(lake.fs.get_file_info(f.path)).get(f.epoch)
        meta = source.result if source is not None else None
    else:
        meta = result_meta(pq.read_schema(f.path, filesystem=lake.fs))
    return None if meta is None else {**meta, "version": f.version}


def read_epoch(
    lake: Lake, f: LakeFile, meta: dict[str, Any] | None = None
) -> tuple[pa.Table, dict[str, Any]]:
    """One (epoch, tree) entry's rows and its result description (``meta``, else
    :func:`epoch_meta`; for files written before ``elf.result``, the version from the name
    and the rest from the first row, ``rows`` unknown (None) when that is not a pair). Reads
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
            "coverage": float(row.get("coverage", 1.0)),
            "lacking": list(row.get("lacking") or []),
        }
    return table, {**meta, "version": f.version}
