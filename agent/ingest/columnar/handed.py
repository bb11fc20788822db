"""Byte ranges of a backlog a file tail hands to a parse helper without reading them itself.

Contract (used by :class:`~agent.ingest.tail.FileTail` with parse-ahead, docs/ingest.md "Both
cores"): a tail with a backlog deals its reads in file order, some to its own thread, the
others to a helper process. For a helper's read the tail's thread does not read the bytes: it
finds, with one small ``pread`` at the read's end (:func:`cut_read`), where the last whole line
of the read ends, hands the helper the range ``[at, end)`` - the partial line the tail carries
(which starts at ``at``, a line start, and which it has read) and the bytes after it up to that
newline - and goes on as if it had read the whole read: its file position at the read's end,
the bytes after ``end`` (from that small ``pread``) the partial line it carries now. So its
chunks are cut exactly where the same tail reading everything itself cuts them. The helper
reads the range itself
(``pread`` on the same open file, ``/proc/<pid>/fd/<n>``: the same inode after a rotation), and
proves it read what the tail read: the carried part hashes (xxh3-64) to what the tail holds and
the range ends with a newline (:func:`read_handed`); else it answers None and the tail reads the
range itself. So the tail's thread neither copies, hashes nor cuts a helper's 4 MiB: it merges.

:class:`HandedRange` is the tail's queued entry for such a read; its ``len`` is the bytes it
stands for after the tail's file position at the time (what a read would have returned), so a
tail that must fall back (the helper died, declined, found an over-long line, or the tail's
state is not the one the range was cut for) reads exactly those bytes (:func:`pread_exact`) and
consumes them as the read it replaced. :class:`RangeRows` reads a range again when a worker
needs the rows of a chunk a helper pre-aggregated; it holds a duplicate of the file descriptor
(closed when used or collected), so a rotation meanwhile does not lose the bytes.

Bounds: one ``pread`` of at most :data:`CUT_WINDOW` bytes per range handed; a read whose last
:data:`CUT_WINDOW` bytes hold no newline is read by the tail as usual.
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

import xxhash

#: bytes read at a helper's read's end to find its last newline
CUT_WINDOW = 64 << 10


@dataclass(slots=True, eq=False)
class HandedRange:
    """A read of ``[start, stop)`` dealt to a parse helper (module contract): the helper
    parses ``[at, end)`` (``at <= start < end <= stop``); ``rest`` is ``[end, stop)``, the
    partial line the read leaves."""

    at: int
    start: int
    end: int
    stop: int
    rest: bytes
    reader: Any
    future: Future[Any]
    #: xxh3-64 of ``[at, end)``, as the helper read it (-1 until known)
    digest: int = -1

    def __len__(self) -> int:
        return self.stop - self.start


def pread_exact(fd: int, offset: int, length: int) -> bytes | None:
    """``length`` bytes at ``offset`` of ``fd``, or None when the file holds fewer."""
    parts, got = [], 0
    while got < length:
        part = os.pread(fd, length - got, offset + got)
        if not part:
            return None
        parts.append(part)
        got += len(part)
    return parts[0] if len(parts) == 1 else b"".join(parts)


def cut_read(fd: int, start: int, stop: int) -> tuple[int, bytes] | None:
    """Where the read ``[start, stop)`` of ``fd`` is cut: just past its last newline, and the
    bytes after it; from its last :data:`CUT_WINDOW` bytes only. None when there is no newline
    there (or the file is shorter)."""
    low = max(start, stop - CUT_WINDOW)
    window = pread_exact(fd, low, stop - low)
    if window is None:
        return None
    nl = window.rfind(b"\n")
    return None if nl < 0 else (low + nl + 1, window[nl + 1 :])


def handed_source(path: str, at: int, end: int, carried: bytes) -> tuple[str, int, int, int, int]:
    """What the helper is given for ``[at, end)`` (module contract): the file, the range and
    the length and digest of the part the tail carries."""
    return (path, at, end - at, len(carried), xxhash.xxh3_64_intdigest(carried))


def read_handed(
    fd: int, offset: int, length: int, carried: int, digest: int
) -> tuple[bytes, int] | None:
    """The helper's side: the range's bytes and their xxh3-64, or None unless the range is all
    there, ends with a newline and starts with the ``carried`` bytes the tail holds."""
    data = pread_exact(fd, offset, length)
    if data is None or not data.endswith(b"\n"):
        return None
    if xxhash.xxh3_64_intdigest(memoryview(data)[:carried]) != digest:
        return None
    return data, xxhash.xxh3_64_intdigest(data)


class RangeRows:
    """``table_of`` the bytes of a handed range, read again from the file on first call (a
    worker needs the rows of a chunk a helper pre-aggregated). Raises ``OSError`` when the
    file no longer holds the bytes the helper parsed (a truncation meanwhile)."""

    def __init__(self, fd: int, rng: HandedRange, table_of: Callable[[bytes], Any]) -> None:
        self._fd = os.dup(fd)
        self._close = weakref.finalize(self, os.close, self._fd)
        self._at, self._length, self._digest = rng.at, rng.end - rng.at, rng.digest
        self._table_of = table_of

    def __call__(self) -> Any:
        try:
            data = pread_exact(self._fd, self._at, self._length)
        finally:
            self._close()
        if data is None or xxhash.xxh3_64_intdigest(data) != self._digest:
            raise OSError(
                f"the file no longer holds the {self._length} bytes at {self._at} a parse "
                "helper aggregated"
            )
        return self._table_of(data)
