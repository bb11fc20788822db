"""Split a byte stream into bounded chunks of whole lines, with exact offsets.

Contract: a :class:`LineChunker` is fed the bytes of one stream in order (``feed``) and returns
*pieces* in stream order, each covering ``[start, end)`` of the stream with no gap and no
overlap (each piece's ``start`` is the previous piece's ``end``; the first starts at the
chunker's initial ``offset``):

* :class:`Chunk` — ``data`` holds whole lines, each ending in ``b"\\n"``, at most
  ``chunk_bytes`` long in total, except a single line longer than ``chunk_bytes`` (but within
  ``max_line_bytes``), which is a chunk by itself; ``end = start + len(data)``.
* :class:`Overlong` — a line longer than ``max_line_bytes``, as the row path treats it
  (:class:`~agent.ingest.tail.FileTail`): counted as one rejected line (``line_too_long``,
  ``head`` = its first 800 bytes) and its bytes skipped up to and including its newline.
  Its bytes may arrive over several feeds: the first piece has ``first=True`` (the one that
  counts as a line), later pieces of the same line ``first=False`` (bytes skipped, no count).
  A line is over-long as soon as more than ``max_line_bytes`` of it are buffered without a
  newline, or when it is complete and longer than ``max_line_bytes`` (its newline excluded),
  exactly the row path's two checks.

An incomplete last line waits in the chunker (``pending`` bytes) until its newline arrives;
:meth:`LineChunker.finish` (the end of a file that rotated away) turns it into a last chunk with
a ``b"\\n"`` appended (``end`` counts only the real bytes), as the row path parses an
unterminated last line. :attr:`LineChunker.offset` is always just past the last piece returned:
resuming a stream there (e.g. after a restart) neither loses nor repeats a line.

Memory is bounded: the chunker holds at most ``chunk_bytes + max_line_bytes`` bytes plus the
last feed. ``chunk_bytes`` must be within 1-8 MiB (:data:`MIN_CHUNK_BYTES`,
:data:`MAX_CHUNK_BYTES`; default :data:`DEFAULT_CHUNK_BYTES`, 4 MiB); smaller values are
allowed only through ``allow_small=True`` (tests exercise boundaries with tiny chunks).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

MIN_CHUNK_BYTES = 1 << 20
MAX_CHUNK_BYTES = 8 << 20
DEFAULT_CHUNK_BYTES = 4 << 20
DEFAULT_MAX_LINE_BYTES = 1 << 20  # the row path's default (FileTail, StreamInput)
OVERLONG_HEAD_BYTES = 800  # what the row path keeps of an over-long line


@dataclass(slots=True, frozen=True)
class Chunk:
    """Whole lines ``data`` (each ending in ``b"\\n"``) at stream offset ``start``."""

    start: int
    end: int
    data: bytes


@dataclass(slots=True, frozen=True)
class Overlong:
    """Bytes ``[start, end)`` of a line longer than the limit (see module docstring)."""

    start: int
    end: int
    head: bytes
    first: bool


Piece = Chunk | Overlong


class LineChunker:
    """Bounded whole-line chunks of one stream (see module docstring)."""

    def __init__(
        self,
        *,
        chunk_bytes: int = DEFAULT_CHUNK_BYTES,
        max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
        offset: int = 0,
        allow_small: bool = False,
    ) -> None:
        low = 1 if allow_small else MIN_CHUNK_BYTES
        if not low <= chunk_bytes <= MAX_CHUNK_BYTES:
            raise ValueError(f"chunk_bytes must be within {low}..{MAX_CHUNK_BYTES}")
        if max_line_bytes < 1:
            raise ValueError("max_line_bytes must be >= 1")
        self.chunk_bytes = chunk_bytes
        self.max_line_bytes = max_line_bytes
        self._offset = offset  # stream offset of _buf[0]
        self._buf = b""
        self._skipping = False  # inside an over-long line: drop bytes up to its newline

    @property
    def offset(self) -> int:
        """Stream offset just past the last piece returned (the resume point)."""
        return self._offset

    @property
    def pending(self) -> int:
        """Bytes held back: an incomplete last line."""
        return len(self._buf)

    def feed(self, data: bytes) -> list[Piece]:
        """The pieces complete after ``data`` (possibly none)."""
        out: list[Piece] = []
        buf = self._buf + data if self._buf else bytes(data)
        pos = 0
        if self._skipping:
            nl = buf.find(b"\n")
            end = len(buf) if nl < 0 else nl + 1
            if end:
                out.append(Overlong(self._offset, self._offset + end, b"", False))
            self._skipping = nl < 0
            pos = end
        limit = self.max_line_bytes
        size = self.chunk_bytes
        last_nl = buf.rfind(b"\n")
        while pos <= last_nl:
            # up to chunk_bytes of whole lines: cut after the last newline within the budget
            cut = buf.rfind(b"\n", pos, pos + size) + 1
            if cut <= pos:  # the first line alone exceeds the budget
                cut = buf.find(b"\n", pos) + 1
            # over-long complete lines inside [pos, cut) become Overlong pieces of their own
            start = pos
            line_start = pos
            while line_start < cut:
                nl = buf.find(b"\n", line_start, cut)
                if nl - line_start > limit:
                    if line_start > start:
                        out.append(self._chunk(buf, start, line_start))
                    out.append(
                        Overlong(
                            self._offset + line_start,
                            self._offset + nl + 1,
                            buf[line_start : min(nl, line_start + OVERLONG_HEAD_BYTES)],
                            True,
                        )
                    )
                    start = nl + 1
                line_start = nl + 1
            if cut > start:
                out.append(self._chunk(buf, start, cut))
            pos = cut
        rest = buf[pos:]
        if len(rest) > limit:  # an incomplete line already over the limit: skip it
            out.append(
                Overlong(
                    self._offset + pos,
                    self._offset + len(buf),
                    rest[:OVERLONG_HEAD_BYTES],
                    True,
                )
            )
            self._skipping = True
            pos = len(buf)
            rest = b""
        self._offset += pos
        self._buf = rest
        return out

    def _chunk(self, buf: bytes, a: int, b: int) -> Chunk:
        return Chunk(self._offset + a, self._offset + b, buf[a:b])

    def finish(self) -> list[Piece]:
        """End of the stream: an incomplete last line becomes a chunk of its own, with a
        newline appended (see module docstring); the chunker is then empty."""
        if not self._buf:
            self._skipping = False
            return []
        rest, self._buf = self._buf, b""
        start = self._offset
        self._offset += len(rest)
        return [Chunk(start, self._offset, rest + b"\n")]


def iter_chunks(
    data: bytes,
    *,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
    allow_small: bool = False,
) -> Iterator[Piece]:
    """The pieces of a complete buffer (a finished file: its unterminated last line is a
    line)."""
    chunker = LineChunker(
        chunk_bytes=chunk_bytes, max_line_bytes=max_line_bytes, allow_small=allow_small
    )
    yield from chunker.feed(data)
    yield from chunker.finish()
