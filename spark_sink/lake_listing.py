"""Which files of the rollup lake hold which results: listing, the reader rule, compacted
hours and the writer's fence check (pyarrow only; :class:`~spark_sink.lake.Lake` extends
:class:`LakeListing` with the writes, :mod:`spark_sink.lake` the rows; see
``docs/spark-sink.md``).

Contract:

* **Reader rule.** The *current* result of (job, tree, epoch) is the one of highest **(term,
  version)**, compared lexicographically: any version of a newer term outranks every version
  of an older one. Readers of the current result (:meth:`Lake.files`, :meth:`Lake.epoch_file`,
  batch reads, compaction) see exactly that one row set; :meth:`Lake.versions` lists every
  (term, version) still in the lake, in that order (the streaming source delivers each higher
  one as new rows).
* **Compacted hours** (``spark_sink/compaction.py``): an hour's epoch files of one tree merged
  into ``compact-tree-<i>-of-<m>.parquet`` in the same hour directory. Its footer's
  ``elf.sources`` maps each epoch it holds to ``{"term": t, "version": k, "mtime_ns": n,
  "result": {…}}``: the (term, version) its rows are, the epoch file's mtime and its
  ``elf.result``. An epoch file of a lower (term, version) is a stale copy (awaiting deletion)
  and is never listed; a higher one written later wins over the compacted rows of its epoch
  until the next compaction folds it in. So a reader sees each (epoch, tree) once, before,
  during and after a compaction. Versions, not modification times, decide: an mtime depends on
  the clock of the host that wrote the file (two masters of one job on a shared lake), on the
  file system's granularity, and on copies and restores, and a rollup buffered while the lake
  was down gets the mtime of its late flush; a version is part of the data. Only between equal
  (term, version)s — which by the writer's promise hold the same rows, so either is right —
  does the mtime break the tie (a file not newer than ``n`` is stale). Compacted files written
  before terms have no ``term`` (0), before versions they map epochs to a bare ``mtime_ns``
  (term 0, version 1), same rule.
* **Listing.** :meth:`LakeListing.files` lists one :class:`LakeFile` per (epoch, tree), its
  highest (term, version) (parsed from file names; a compacted file's footer is read once and
  cached); :meth:`LakeListing.epoch_file` finds one (epoch, tree) listing only its hour
  directory. A compacted entry has ``compacted=True``: its reader keeps only that epoch's rows.
* **Fence check.** :meth:`LakeListing.holdings` lists one hour directory for a writer: what it
  holds of the epoch, or :class:`~spark_sink.fencing.FencedWrite` when a higher term holds it.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import quote, unquote

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from spark_sink.fencing import FencedWrite, LakeError, list_directory
from spark_sink.lake_names import (
    COMPACT_RE,
    EpochName,
    Rank,
    Source,
    epoch_file_name,
    hour_path,
    parse_epoch_name,
    parse_sources,
)

SOURCES_KEY = b"elf.sources"  # a compacted file's footer: epoch → its Source (module contract)


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
    term: int = 0

    @property
    def rank(self) -> Rank:
        """(term, version): the highest is the current result (module contract)."""
        return (self.term, self.version)


class LakeListing:
    """The read-only side of a rollup lake at a local path or any URI pyarrow's filesystems
    accept (``s3://…``, ``hdfs://…``, ``file://…``): which files hold which results."""

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
        self._sources: dict[tuple[str, int, int | None], dict[int, Source]] = {}

    def path(self, relative: str) -> str:
        return f"{self.root}/{relative}"

    def holdings(
        self, directory: str, job: str, name: EpochName
    ) -> tuple[dict[Rank, str], tuple[Source, str] | None]:
        """The fence check of a write of epoch file ``name`` of ``job`` into the hour
        ``directory``, from one listing of it: the epoch files of (epoch, tree, m) by rank and
        the compacted file's record of the epoch with its path. Raises :class:`FencedWrite` if
        the hour holds the epoch under a higher term than ``name``'s (a newer master owns it)."""
        infos = list_directory(self.fs, directory)
        held: dict[Rank, str] = {}
        compacted: tuple[Source, str] | None = None
        top: tuple[int, str] = (0, "")
        # An hour holds every epoch of every tree of the job (and, while roots flap, several
        # terms and versions of each): compare names before parsing them.
        mine = epoch_file_name(name.epoch, name.tree, name.trees, 1).rsplit("-v", 1)[0]
        for info in infos:
            base = info.base_name
            if base.startswith(mine) and base[len(mine) : len(mine) + 1] in ("-", "."):
                other = parse_epoch_name(base)
                if other is not None and other[:3] == name[:3]:
                    held[other.rank] = info.path
                    top = max(top, (other.term, info.path))
            elif base.startswith("compact-") and (m := COMPACT_RE.match(base)) and (
                int(m.group(1)), int(m.group(2))) == (name.tree, name.trees):  # fmt: skip
                source = self.compacted_sources(info).get(name.epoch)
                if source is not None:
                    compacted = (source, info.path)
                    top = max(top, (source.term, info.path))
        if top[0] > name.term:
            raise FencedWrite(job, name.tree, name.trees, name.epoch, name.term, *top)
        return held, compacted

    def jobs(self) -> list[str]:
        try:
            infos = list_directory(self.fs, self.root)
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
            infos = list_directory(self.fs, directory)
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
            try:
                infos = list_directory(self.fs, base, recursive=True)
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
        out.sort(key=lambda f: (f.job, f.epoch, f.tree, f.term, f.version))
        return out

    def _hour_files(
        self, job: str, date: str, hour: int, infos: list[pafs.FileInfo], every_version: bool
    ) -> list[LakeFile]:
        # (epoch, tree, m) → (term, version) → the epoch file holding it (a version named
        # both with and without ``-v1``: the newer file)
        small: dict[tuple[int, int, int], dict[Rank, pafs.FileInfo]] = {}
        compacted: dict[tuple[int, int], pafs.FileInfo] = {}
        for info in infos:
            if info.type != pafs.FileType.File:
                continue
            if name := parse_epoch_name(info.base_name):
                ranks = small.setdefault(name[:3], {})
                held = ranks.get(name.rank)
                if held is None or _mtime_ns(info) > _mtime_ns(held):
                    ranks[name.rank] = info
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
            ranks = small.get(key, {})
            fresh = {
                r: info
                for r, info in ranks.items()
                if source is None or not source.supersedes(r, _mtime_ns(info))
            }
            holder = compacted[(tree, trees)] if source is not None else None
            if every_version:
                for r, info in ranks.items():
                    out.append(_lake_file(job, date, hour, key, info, False, r))
                if holder is not None and source is not None and source.rank not in ranks:
                    out.append(_lake_file(job, date, hour, key, holder, True, source.rank))
            elif fresh:
                r = max(fresh)
                out.append(_lake_file(job, date, hour, key, fresh[r], False, r))
            elif holder is not None and source is not None:
                out.append(_lake_file(job, date, hour, key, holder, True, source.rank))
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
    job: str, date: str, hour: int, key: tuple[int, int, int], info: pafs.FileInfo,
    compacted: bool, rank: Rank,
) -> LakeFile:  # fmt: skip
    epoch, tree, trees = key
    mtime = info.mtime.timestamp() if info.mtime is not None else None
    return LakeFile(job, date, hour, epoch, tree, trees, info.path, mtime, compacted,
                    _mtime_ns(info), term=rank[0], version=rank[1])  # fmt: skip


def complete_epochs(files: Iterable[LakeFile]) -> dict[int, bool]:
    """epoch → whether every one of its m trees has a file (one job's files)."""
    seen: dict[int, set[int]] = {}
    want: dict[int, int] = {}
    for f in files:
        seen.setdefault(f.epoch, set()).add(f.tree)
        want[f.epoch] = f.trees
    return {e: len(trees) >= want[e] for e, trees in sorted(seen.items())}
