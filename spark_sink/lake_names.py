"""Names of the rollup lake's files and the order of an epoch's published results.

Contract (see ``docs/spark-sink.md``; the reader rule is in ``spark_sink/lake.py``):

* An epoch file is ``epoch-<e>-tree-<i>-of-<m>-t<term>-v<k>.parquet`` (:func:`epoch_file_name`)
  for a fencing term ≥ 1, ``epoch-<e>-tree-<i>-of-<m>-v<k>.parquet`` for term 0 (written
  before terms existed, or by a master that has none); names without ``-v<k>`` (written before
  versions) are version 1. :func:`parse_epoch_name` reads all three back as an
  :class:`EpochName`.
* **Rank**: a published result of (job, tree, epoch) is ordered by ``(term, version)``,
  lexicographically (:data:`Rank`): a newer master's term outranks any version of an older
  term, and within a term the higher version is newer. The current result is the one of
  highest rank.
* :class:`Source` is what a compacted file's ``elf.sources`` records of one epoch (term,
  version, the epoch file's mtime, its ``elf.result``); :func:`parse_sources` reads that
  footer, also in its older forms (no term: term 0; a bare mtime: term 0, version 1).

Pure Python: no pyarrow, no agent import.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import re
from typing import Any, NamedTuple
from urllib.parse import quote

FILE_RE = re.compile(r"^epoch-(-?\d+)-tree-(\d+)-of-(\d+)(?:-t(\d+))?(?:-v(\d+))?\.parquet$")
COMPACT_RE = re.compile(r"^compact-tree-(\d+)-of-(\d+)\.parquet$")

Rank = tuple[int, int]  # (term, version): the order of an epoch's published results


class EpochName(NamedTuple):
    """What an epoch file's name says: (epoch, tree index, m, term, version)."""

    epoch: int
    tree: int
    trees: int
    term: int = 0
    version: int = 1

    @property
    def rank(self) -> Rank:
        return (self.term, self.version)


def parse_epoch_name(base_name: str) -> EpochName | None:
    """The :class:`EpochName` of an epoch file's base name; None for any other name."""
    m = FILE_RE.match(base_name)
    if m is None:
        return None
    term = int(m.group(4)) if m.group(4) else 0
    version = int(m.group(5)) if m.group(5) else 1
    return EpochName(int(m.group(1)), int(m.group(2)), int(m.group(3)), term, version)


def epoch_file_name(epoch: int, tree: int, trees: int, version: int, term: int = 0) -> str:
    """``epoch-<e>-tree-<i>-of-<m>[-t<term>]-v<k>.parquet`` (``-t`` only for term ≥ 1, so a
    term-0 result keeps the name it had before terms)."""
    fenced = f"-t{term}" if term >= 1 else ""
    return f"epoch-{epoch}-tree-{tree}-of-{trees}{fenced}-v{version}.parquet"


def compact_name(tree: int, trees: int) -> str:
    """The file name an hour's compacted epochs of tree ``tree`` of ``trees`` go to."""
    return f"compact-tree-{tree}-of-{trees}.parquet"


def hour_path(job: str, epoch_start: float) -> str:
    """``job=<name>/date=…/hour=…``: the directory an epoch starting then is written to."""
    when = dt.datetime.fromtimestamp(math.floor(epoch_start), dt.UTC)
    return f"job={quote(job, safe='')}/date={when:%Y-%m-%d}/hour={when:%H}"


def relative_path(
    job: str, epoch_start: float, tree: int, trees: int, epoch: int, version: int = 1,
    term: int = 0,
) -> str:  # fmt: skip
    """``job=<name>/date=…/hour=…/`` + :func:`epoch_file_name`."""
    return f"{hour_path(job, epoch_start)}/{epoch_file_name(epoch, tree, trees, version, term)}"


class Source(NamedTuple):
    """What a compacted file records of one epoch: the version of its rows, the ``mtime_ns``
    of the epoch file they came from (the tie-break between equal ranks), that file's
    ``elf.result`` and its fencing term."""

    version: int
    mtime_ns: int | None = None
    result: dict[str, Any] | None = None  # the epoch file's ``elf.result``, when known
    term: int = 0

    @property
    def rank(self) -> Rank:
        return (self.term, self.version)

    def supersedes(self, rank: Rank, mtime_ns: int) -> bool:
        """Whether these compacted rows make an epoch file of ``rank`` stale: a lower
        (term, version), or the same one not newer than the compacted copy."""
        if rank != self.rank:
            return rank < self.rank
        return self.mtime_ns is None or mtime_ns <= self.mtime_ns

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"version": self.version}
        if self.term:
            out["term"] = self.term
        if self.mtime_ns is not None:
            out["mtime_ns"] = self.mtime_ns
        if self.result is not None:
            out["result"] = self.result
        return out


def parse_sources(raw: bytes | None) -> dict[int, Source]:
    """A compacted footer's ``elf.sources``: ``{"<e>": {"term": t, "version": k, "mtime_ns":
    n, "result": {…}}}`` (no ``term``: 0), or the older ``{"<e>": mtime_ns}`` (term 0, version
    1). Raises ``ValueError`` / ``TypeError`` / ``KeyError`` on a malformed footer."""
    out = {}
    for e, v in json.loads(raw or b"{}").items():
        if isinstance(v, dict):
            ns, result = v.get("mtime_ns"), v.get("result")
            out[int(e)] = Source(
                int(v["version"]),
                None if ns is None else int(ns),
                result if isinstance(result, dict) else None,
                int(v.get("term", 0)),
            )
        else:
            out[int(e)] = Source(1, int(v))
    return out
