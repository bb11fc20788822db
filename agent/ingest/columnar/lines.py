"""A chunk of whole lines as one Arrow string array, decoded as the row path decodes a line.

Contract: :func:`split_lines` takes a chunk (whole lines, each ending in ``b"\\n"``) and returns
:class:`Lines`: ``text`` holds one value per line, its newline removed, then one trailing
``\\r`` removed (as :func:`agent.ingest.formats.line_text` does), invalid UTF-8 replaced by U+FFFD
exactly as :func:`agent.ingest.records.decode_line` replaces it; ``repaired`` flags the lines
that needed a replacement (None when none did); ``raw(i)`` is line ``i``'s original bytes
without its newline (what the row path quarantines); ``blank`` flags the lines the row path
treats as blank when its parser refuses them (``not line.strip()``).

Cost: the text array is built without a Python object per line (newline positions in one C
pass, :func:`newline_positions`, or by numpy where the extension is not built; the buffer
reused); only a chunk holding invalid UTF-8 is walked line by line to flag the
repaired lines (decoding a whole chunk replaces exactly as per-line decoding does, since a
newline always ends an invalid sequence).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from agent.ingest.columnar.native import optional_extension

if TYPE_CHECKING:  # pyarrow loads with the first text array built (the tailer imports this)
    import pyarrow as pa


class Lines:
    """The lines of one chunk (see module docstring); ``text`` is built on first use."""

    __slots__ = ("_text", "chunk", "ends", "repaired", "starts")

    def __init__(
        self, chunk: bytes, starts: np.ndarray, ends: np.ndarray, repaired: np.ndarray | None
    ) -> None:
        self.chunk = chunk
        self.starts = starts  # byte offset of each line in ``chunk``
        self.ends = ends  # byte offset of each line's newline in ``chunk``
        self.repaired = repaired
        self._text: pa.StringArray | None = None

    def __len__(self) -> int:
        return len(self.starts)

    def raw(self, i: int) -> bytes:
        """Line ``i``'s original bytes, without its newline."""
        return self.chunk[int(self.starts[i]) : int(self.ends[i])]

    @property
    def text(self) -> pa.StringArray:
        """One string per line (see module docstring)."""
        if self._text is None:
            self._text = _text_array(self.chunk, self.ends, self.repaired is not None)
        return self._text

    @property
    def blank(self) -> np.ndarray:
        """Lines that are empty or ASCII whitespace only (``bytes.strip`` empties them)."""
        out = np.zeros(len(self), bool)
        if not len(self):
            return out
        # only a line that starts with whitespace (or is empty) can be blank
        first = np.frombuffer(self.chunk, np.uint8)[self.starts]
        maybe = np.flatnonzero(np.isin(first, _SPACE))
        for i in maybe.tolist():
            out[i] = not self.raw(i).strip()
        return out


_SPACE = np.frombuffer(b" \t\n\r\x0b\x0c", np.uint8)


_NEWLINES_C = optional_extension("newlines_c")
_FIND_NEWLINES: Callable[[bytes, np.ndarray], tuple[int, int]] | None = (
    None if _NEWLINES_C is None else _NEWLINES_C.newlines
)
#: bytes per slot of the C finder's first guess at a chunk's newlines (lines shorter than
#: this on average overflow it: numpy finds the rest)
_GUESS_BYTES = 32


def newline_positions(chunk: bytes) -> np.ndarray:
    """Offsets of every ``b"\\n"`` in ``chunk``: one pass in C (``newlines_c.c``), else numpy."""
    if _FIND_NEWLINES is None or not chunk:
        return np.flatnonzero(np.frombuffer(chunk, np.uint8) == 10)
    out = np.empty(len(chunk) // _GUESS_BYTES + 16, np.int64)
    n, stop = _FIND_NEWLINES(chunk, out)
    if stop < len(chunk):  # more newlines than the guess: the rest by numpy
        rest = np.flatnonzero(np.frombuffer(chunk, np.uint8, offset=stop) == 10) + stop
        return np.concatenate([out[:n], rest])
    # a copy unless the guess was tight: the chunk's lines keep these for their lifetime
    return out[:n].copy() if 2 * n < len(out) else out[:n]


def longest_line(ends: np.ndarray) -> int:
    """The length of the longest line (without its newline) given the newline offsets."""
    if not len(ends):
        return 0
    return int(np.diff(ends, prepend=-1).max()) - 1


def split_lines(chunk: bytes, ends: np.ndarray | None = None) -> Lines:
    """The lines of ``chunk`` (see module docstring); ``ends``: its newline offsets, when the
    caller already found them."""
    if chunk and not chunk.endswith(b"\n"):
        raise ValueError("a chunk must end with a newline")
    if ends is None:
        ends = newline_positions(chunk)
    starts = np.empty(len(ends), np.int64)
    if len(ends):
        starts[0] = 0
        starts[1:] = ends[:-1] + 1
    repaired: np.ndarray | None = None
    # isascii reads 8 bytes at a time and builds nothing: most log chunks are ASCII
    try:
        chunk.isascii() or chunk.decode("utf-8")
    except UnicodeDecodeError:
        repaired = np.zeros(len(ends), bool)
        for i, (a, b) in enumerate(zip(starts.tolist(), ends.tolist(), strict=True)):
            try:
                chunk[a:b].decode("utf-8")
            except UnicodeDecodeError:
                repaired[i] = True
    return Lines(chunk, starts, ends, repaired)


def _text_array(chunk: bytes, ends: np.ndarray, invalid: bool) -> pa.StringArray:
    import pyarrow as pa

    text_bytes = chunk.decode("utf-8", "replace").encode("utf-8") if invalid else chunk
    # find(b"\r") is a memchr; ``b"\r\n" in`` scans a newline-dense chunk ~30x slower
    if text_bytes.find(b"\r") >= 0 and b"\r\n" in text_bytes:
        text_bytes = text_bytes.replace(b"\r\n", b"\n")
    text_ends = ends if text_bytes is chunk else newline_positions(text_bytes)
    body = text_bytes.replace(b"\n", b"")
    offsets = np.empty(len(text_ends) + 1, np.int32)
    offsets[0] = 0
    offsets[1:] = text_ends - np.arange(len(text_ends))
    return pa.StringArray.from_buffers(len(text_ends), pa.py_buffer(offsets), pa.py_buffer(body))
