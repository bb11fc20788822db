"""The lake writer's fence and its exclusive file creation.

Contract (see ``docs/spark-sink.md``; :meth:`spark_sink.lake.Lake.publish` uses both):

* :class:`FencedWrite` — a write of (job, tree, epoch) under fencing term ``term`` refused
  because the lake already holds that epoch under ``newer_term`` > ``term``: a newer master
  owns the epoch, and this writer must not publish (nor retry) it.
* :func:`create_exclusive` — create a file only if its name is free, so no (job, tree, epoch,
  term, version) is ever written with two row sets even by two processes racing. On a local
  file system the table goes to a hidden temporary file in the same directory (``.tmp-*``,
  which Spark, pyarrow and the lake's listings ignore) that is then hard-linked to the final
  name: ``link`` fails when the name exists, atomically, and a reader never sees a partly
  written file. Where ``link`` is not supported, and on every other file system (HDFS, S3,
  GCS), the check and the write are separate steps (**best effort**): two writers racing
  inside that window can both write the name, the last one winning. On S3 a conditional PUT
  (``If-None-Match: *``) would close the window; pyarrow's S3 filesystem does not offer it.
* :func:`list_directory` — a directory's entries, empty when it does not exist, also while
  other writers create or delete it (a twin publishing the hour's first epoch, compaction
  dropping an old hour).
"""

from __future__ import annotations

import contextlib
import logging
import os
import uuid
from collections.abc import Callable

import pyarrow as pa
import pyarrow.fs as pafs

log = logging.getLogger(__name__)

OBJECT_STORES = frozenset({"s3", "gcs"})
#: listings :func:`list_directory` retries when the directory appears or vanishes mid-listing
LISTING_ATTEMPTS = 5
_NO_LINK_LOGGED: set[str] = set()  # directories whose file system refused a hard link


class LakeError(Exception):
    """The lake cannot be opened or a rollup cannot be represented (message says why)."""


class FencedWrite(LakeError):
    """A write refused because the lake holds the epoch under a newer fencing term."""

    def __init__(
        self, job: str, tree: int, trees: int, epoch: int, term: int, newer_term: int, path: str
    ) -> None:
        super().__init__(
            f"{job} tree {tree}/{trees} epoch {epoch}: term {term} fenced by term "
            f"{newer_term} ({path})"
        )
        self.job, self.tree, self.trees, self.epoch = job, tree, trees, epoch
        self.term, self.newer_term, self.path = term, newer_term, path


def create_exclusive(fs: pafs.FileSystem, final: str, write: Callable[[str], None]) -> bool:
    """Create ``final`` with ``write(path)`` unless it exists (module contract); True if
    this call created it, False if the name was taken (by a racing writer, maybe)."""
    directory = final.rsplit("/", 1)[0]
    if fs.type_name in OBJECT_STORES:  # one PUT is atomic; the check before it is not
        if fs.get_file_info(final).type != pafs.FileType.NotFound:
            return False
        write(final)
        return True
    tmp = f"{directory}/.tmp-{uuid.uuid4().hex}.parquet"
    try:
        write(tmp)
        if fs.type_name == "local":
            try:
                os.link(tmp, final)
                return True
            except FileExistsError:
                return False
            except OSError as exc:  # no hard links here (some network or FAT file systems)
                if directory not in _NO_LINK_LOGGED:
                    _NO_LINK_LOGGED.add(directory)
                    log.warning("lake %s: no hard links (%r): exclusive writes are best "
                                "effort", directory, exc)  # fmt: skip
        if fs.get_file_info(final).type != pafs.FileType.NotFound:
            return False
        fs.move(tmp, final)
        return True
    finally:
        with contextlib.suppress(OSError, pa.ArrowException):
            if fs.get_file_info(tmp).type != pafs.FileType.NotFound:
                fs.delete_file(tmp)


def list_directory(
    fs: pafs.FileSystem, directory: str, recursive: bool = False
) -> list[pafs.FileInfo]:
    """The entries of ``directory`` (every level below it when ``recursive``); empty if it
    does not exist. pyarrow's ``allow_not_found`` checks existence *after* a failed listing,
    so a directory another process creates in between (or a subdirectory it deletes during
    a recursive walk) raises ``FileNotFoundError``; the listing is then simply taken again,
    up to :data:`LISTING_ATTEMPTS` times."""
    selector = pafs.FileSelector(directory, recursive=recursive, allow_not_found=True)
    for attempt in range(1, LISTING_ATTEMPTS + 1):
        try:
            return fs.get_file_info(selector)
        except FileNotFoundError:
            if attempt == LISTING_ATTEMPTS:
                raise
    raise AssertionError("unreachable")  # the loop returns or raises
