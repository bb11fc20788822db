"""A file input: :class:`FileTail` follows one log file like ``tail -F``.

Contract (an :class:`~agent.ingest.base.Input` and :class:`~agent.ingest.base.Resumable`):

* appends are read as they arrive; a partial last line waits for its newline;
* **rotation** (the path now names another inode): the old file is read to its end (an
  unterminated last line is parsed as a line), then the new file is read from its start;
* **truncation** (same inode, size below the read position, e.g. ``copytruncate``): reading
  restarts at offset 0;
* ``state()`` is ``{"path", "inode", "offset", "line_no"}`` where ``offset`` is just past the
  last complete line consumed; passing it back (``state=``) resumes there if the file is the
  same inode and still that long, else reads the file from the start. (Persisting it is the
  runtime's job.) A truncation immediately followed by regrowth past the read position
  between two polls is not detectable by size and is read as an append;
* invalid UTF-8 in a line is replaced (U+FFFD) by the parser, the line kept and counted in
  ``stats()["bad_encoding_repaired"]``;
* a line longer than ``max_line_bytes`` is quarantined (``line_too_long``) and skipped; blank
  lines are skipped silently; a missing file is waited for; a parser that raises anything but
  ``RecordError`` costs that line (``parser_error``), never the tail;
* with a ``prefilter`` (:mod:`agent.ingest.fastpath`, installed by the runtime) lines no job
  can match are skipped unparsed and counted as ``prefiltered``;
* with ``stop_at`` (a byte offset) the tail never reads past it and never follows a rotation:
  a bounded re-read of a range another tail already consumed (:mod:`agent.runtime.replay`).
"""

from __future__ import annotations

import asyncio
import functools
import os
from collections import deque
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from agent.ingest.base import ColumnarBatch, Record, RecordBatch
from agent.ingest.columnar.handed import (
    HandedRange,
    RangeRows,
    cut_read,
    handed_source,
    pread_exact,
)
from agent.ingest.columnar.lines import longest_line, newline_positions
from agent.ingest.records import (
    LineParser,
    Quarantine,
    RecordValidator,
    rejection,
    repairs_of,
)
from agent.ql.fallback import Unsupported

if TYPE_CHECKING:
    from agent.ingest.columnar.chunk import ParsedChunk
    from agent.ingest.columnar.pool import ChunkParsePool
    from agent.ingest.columnar.reader import ChunkReader
    from agent.ingest.fastpath import LinePrefilter

#: bytes read per poll on the columnar path (a chunk is at most this plus a partial line
#: carried over): per-chunk Arrow calls cost ~0.1 ms each, so 1 MiB chunks spend a fifth of
#: the parse in call overhead; 4 MiB is the measured optimum (8 MiB spills the CPU caches)
CHUNK_BYTES = 4 << 20
#: bytes read per poll on the row path
ROW_READ_BYTES = 1 << 20
#: with parse-ahead, this thread parses this share of a helper's number of chunks itself: it
#: also merges every chunk and cuts the helpers' (one small read each, ``handed.py``).
#: Measured with one helper (2e6 lines, medians of 3 single runs): 1.0 against 0.7, access
#: logs 0.58 s against 0.71, top paths 2.28 against 2.36, JSON 0.88 against 0.90; 1.2 was no
#: better overall. (0.7 was the optimum while this thread also read and hashed the helpers'.)
AHEAD_LOCAL_SHARE = 1.0


class FileTail:
    """Follows one log file across appends, rotation and truncation (see module)."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        parser: LineParser | None = None,
        quarantine: Quarantine | None = None,
        name: str | None = None,
        state: dict[str, Any] | None = None,
        start_at_end: bool = False,
        poll_interval: float = 0.1,
        read_size: int | None = None,
        max_line_bytes: int = 1 << 20,
        stop_at: int | None = None,
    ) -> None:
        self.path = Path(path)
        self.stop_at = stop_at
        self.name = name or str(self.path)
        self.parser: LineParser = parser or RecordValidator()
        self.quarantine = quarantine if quarantine is not None else Quarantine()
        self.poll_interval = poll_interval
        #: bytes per read; None: :data:`CHUNK_BYTES` on the columnar path, 1 MiB on the row path
        self.read_size = read_size
        self.max_line_bytes = max_line_bytes
        self._resume = dict(state) if state else None
        self._start_at_end = start_at_end
        self._f: BinaryIO | None = None
        self._inode: int | None = None
        self._pos = 0  # offset just past the last complete line consumed
        self._buf = b""  # bytes read after _pos (an incomplete line)
        self._skipping = False  # inside an over-long line: drop bytes until its newline
        self._line_no = 0
        self._closed = False
        # (inode, size) of the file when the last poll found every byte of it read; None
        # otherwise. Set by the reading thread, read by unchanged() from any thread.
        self._read_to: tuple[int, int] | None = None
        #: optional :class:`~agent.ingest.fastpath.LinePrefilter`: lines no job can match are
        #: skipped unparsed (counted in ``prefiltered``; the runtime installs it)
        self.prefilter: LinePrefilter | None = None
        #: optional :class:`~agent.ingest.columnar.reader.ChunkReader`: chunks parsed into
        #: Arrow tables (the columnar path; the runtime installs it)
        self.columnar: ChunkReader | None = None
        #: the installers' caches (see :func:`~agent.ingest.fastpath.install_prefilters` and
        #: :func:`~agent.ingest.columnar.reader.install_columnar`): the jobs the prefilter and
        #: the columnar reader were built for, and the full parser a projected one replaced
        self.prefilter_jobs: Any = None
        self.columnar_jobs: Any = None
        self.full_parser: LineParser | None = None
        #: optional :class:`~agent.ingest.columnar.pool.ChunkParsePool`: with a backlog,
        #: later chunks of a poll are parsed there (the agent's ``parse_processes``)
        self.parse_pool: ChunkParsePool | None = None
        self._ahead_credit = 1.0  # this thread's share of the chunks dealt (_ahead_local)
        #: reads taken ahead, not consumed yet (parse-ahead): bytes read here, or a range
        #: handed to a helper unread (handed.py)
        self._reads: deque[bytes | HandedRange] = deque()
        # the file offset after the queued reads, and the partial line there: its offset and
        # bytes (None: not known, or too long to carry - nothing is handed until it ends)
        self._q_end, self._q_at, self._q_carry = 0, 0, None
        self._skipped = 0
        #: where this tail began reading in this run (a ``state()``; None until the file is
        #: first opened): nothing before it was read by anyone in this run
        self.origin: dict[str, Any] | None = None
        self.counters = {
            "lines": 0,
            "records": 0,
            "blank_lines": 0,
            "rejected": 0,
            "rotations": 0,
            "truncations": 0,
            "bytes": 0,
            "prefiltered": 0,
            "columnar_chunks": 0,
            "row_chunks": 0,
            "ahead_chunks": 0,  # chunks handed to the parse helpers (parse_processes)
        }

    # ---- opening --------------------------------------------------------------------------
    def _open(self) -> bool:
        try:
            f = open(self.path, "rb")  # noqa: SIM115 - kept open across polls
        except (FileNotFoundError, PermissionError, IsADirectoryError):
            return False
        st = os.fstat(f.fileno())
        self._f, self._inode = f, st.st_ino
        self._pos, self._buf, self._skipping, self._line_no = 0, b"", False, 0
        resume, self._resume = self._resume, None
        offset = resume.get("offset") if resume else None
        if resume and resume.get("inode") == st.st_ino and isinstance(offset, int):
            if 0 <= offset <= st.st_size:
                self._pos = offset
                line_no = resume.get("line_no", 0)
                self._line_no = line_no if isinstance(line_no, int) else 0
        elif self._start_at_end:
            self._pos = st.st_size
        self._start_at_end = False  # only the first file opened starts at its end
        if self.origin is None:
            self.origin = {
                "path": str(self.path),
                "inode": st.st_ino,
                "offset": self._pos,
                "line_no": self._line_no,
            }
        f.seek(self._pos)
        return True

    def _close_file(self) -> None:
        if self._f is not None:
            self._f.close()
            self._f = None

    # ---- reading --------------------------------------------------------------------------
    def poll(self) -> RecordBatch:
        """Read and parse every complete line available now (up to ``read_size`` bytes per
        file switch). Never raises on bad data; I/O errors leave the tail retrying. The
        batch's ``skipped`` is the number of lines the prefilter skipped."""
        out = RecordBatch() if self.columnar is None else ColumnarBatch()
        if self._closed:
            return out
        if self._f is None and not self._open():
            return out
        try:
            self._poll_into(out)
        except OSError:
            self._close_file()  # retried on the next poll, resuming at _pos
            self._drop_ahead()
            self._resume = {"inode": self._inode, "offset": self._pos, "line_no": self._line_no}
        out.skipped, self._skipped = self._skipped, 0
        # read to the end, whether or not this poll found lines: the tick loop then knows a
        # trickle's poll left nothing behind (no second poll at once: Ticks.drained)
        self._read_to = self._read_to_end()
        return out

    def _read_to_end(self) -> tuple[int, int] | None:
        """(inode, size) if the open file has no byte this tail has not taken yet."""
        if (
            self._f is None
            or self._inode is None
            or self._reads
            or self.stop_at is not None
            or self._skipping
        ):
            return None
        try:
            size = os.fstat(self._f.fileno()).st_size
        except OSError:
            return None
        return (self._inode, size) if size == self._pos + len(self._buf) else None

    def unchanged(self) -> bool:
        """Whether a poll now would surely find nothing: the last one read the file to its
        end, and the path still names that file at that size (one ``stat``; callable from
        any thread, as a hint - False whenever it cannot tell)."""
        read_to = self._read_to
        if read_to is None:
            return False
        try:
            st = os.stat(self.path)
        except OSError:
            return False
        return (st.st_ino, st.st_size) == read_to

    def _poll_into(self, out: list[Record]) -> None:
        assert self._f is not None
        fst = os.fstat(self._f.fileno())
        if fst.st_size < self._pos + len(self._buf) + sum(map(len, self._reads)):
            self.counters["truncations"] += 1
            self._drop_ahead()
            self._f.seek(0)
            self._pos, self._buf, self._skipping, self._line_no = 0, b"", False, 0
        want = self._read_size()
        if self.stop_at is not None:
            want = min(want, self.stop_at - self._pos - len(self._buf))
            if want <= 0:
                return
        if self._parse_ahead_possible():
            if self._poll_ahead(want, out):
                return
        elif self._reads:  # read ahead before parse-ahead was switched off: consumed as usual
            while self._reads:
                self._take(self._reads.popleft(), out)
            self._drop_ahead()
            return
        data = self._f.read(want)
        if data:
            self.counters["bytes"] += len(data)
            self._consume(data, out)
            return
        if self.stop_at is not None:
            return  # a bounded re-read ends at its own file's end
        # at EOF of the open file: has the path moved on to another file?
        try:
            st = os.stat(self.path)
        except OSError:
            return  # rotated away and not recreated yet: keep the old file, wait
        if st.st_ino != self._inode:
            while data := self._f.read(self._read_size()):  # a last write may have raced us
                self.counters["bytes"] += len(data)
                self._consume(data, out)
            if self._buf and not self._skipping:
                self._line(self._buf, out)
            self._close_file()
            self._drop_ahead()  # offsets restart in the new file
            self.counters["rotations"] += 1
            if self._open():
                self._poll_into(out)

    def _parse_ahead_possible(self) -> bool:
        reader = self.columnar
        return (
            self.parse_pool is not None
            and reader is not None
            and reader.kernel == "vectorized"
            and self.prefilter is None  # selective queries: the prefilter is the fast path
            and self.stop_at is None
            and not self._skipping
        )

    def _poll_ahead(self, want: int, out: list[Record]) -> bool:
        """One poll with parse-ahead (a backlog): consume ``processes + 1`` reads, this thread
        parsing the reads dealt to it (:meth:`_ahead_local`) and the helpers the others
        (:meth:`_hand_range`), while the next poll's are already taken, so the helper processes
        never wait for this thread.
        False when nothing is waiting (the caller goes on: end of file, rotation)."""
        per_poll = self._ahead_reads()
        if not self._reads:
            self._q_end = self._pos + len(self._buf)
            self._q_at, self._q_carry = self._pos, None if self._skipping else self._buf
        while len(self._reads) < 2 * per_poll:
            last = self._reads[-1] if self._reads else None
            if isinstance(last, bytes) and len(last) < want:
                break  # the file's end as of that read
            item: bytes | HandedRange | None = self._hand_range(want)
            if item is None:
                item = self._f.read(want) if self._f is not None else b""
                if not item:
                    break
                self.counters["bytes"] += len(item)
                self._carried(item)
            self._reads.append(item)
        if not self._reads:
            return False
        for _ in range(min(per_poll, len(self._reads))):
            self._take(self._reads.popleft(), out)
        return True

    def _carried(self, data: bytes) -> None:
        """Follow the partial line after the queued reads across a read taken here."""
        nl = data.rfind(b"\n")
        if nl >= 0:
            self._q_at, self._q_carry = self._q_end + nl + 1, data[nl + 1 :]
        elif self._q_carry is not None:
            self._q_carry = self._q_carry + data
        self._q_end += len(data)
        if self._q_carry is not None and len(self._q_carry) > self.max_line_bytes:
            self._q_carry = None  # an over-long line: its skipping changes the cuts

    def _hand_range(self, want: int) -> HandedRange | None:
        """The next read as a range handed to a helper unread (``handed.py``), or None: this
        thread reads it (its share, the file's end, an over-long line carried, a reader
        backing off, no newline near the read's end)."""
        reader, pool, f, carry = self.columnar, self.parse_pool, self._f, self._q_carry
        assert reader is not None and pool is not None
        if f is None or carry is None or reader.backing_off:
            return None
        start, fd = self._q_end, f.fileno()
        stop = start + want
        try:
            if os.fstat(fd).st_size < stop or self._ahead_local():
                return None  # a shorter read is the file's end: this thread's to parse
            cut = cut_read(fd, start, stop)
        except OSError:
            return None
        path = f"/proc/{os.getpid()}/fd/{fd}"
        if cut is None or not os.path.exists(path):
            return None
        end, rest = cut
        source = handed_source(path, self._q_at, end, carry)
        future = pool.submit(reader.fmt, reader.fields, source, reader.plan)
        f.seek(stop)  # as if read: the next read starts where this tail's would
        self.counters["ahead_chunks"] += 1
        self.counters["bytes"] += want
        handed = HandedRange(self._q_at, start, end, stop, rest, reader, future)
        self._q_end, self._q_at, self._q_carry = stop, end, rest
        if len(rest) > self.max_line_bytes:
            self._q_carry = None
        return handed

    def _ahead_local(self) -> bool:
        """Whether the next chunk of a backlog is this thread's to parse: chunks are dealt in
        file order, :data:`AHEAD_LOCAL_SHARE` of a helper's count to this thread, spread
        evenly (a credit of the share per chunk; the first is this thread's)."""
        assert self.parse_pool is not None
        self._ahead_credit += AHEAD_LOCAL_SHARE / (self.parse_pool.processes + AHEAD_LOCAL_SHARE)
        if self._ahead_credit >= 1.0:
            self._ahead_credit -= 1.0
            return True
        return False

    def _drop_ahead(self) -> None:
        """Forget what was read or handed over ahead (a truncation, an I/O error, close)."""
        for item in self._reads:
            if isinstance(item, HandedRange):
                item.future.cancel()
        self._reads.clear()

    def _ahead_reads(self) -> int:
        """Reads per poll with parse-ahead: about one chunk for this thread and one for each
        helper process (measured: handing them all over leaves this thread idle while it
        waits, and is slower)."""
        assert self.parse_pool is not None
        return self.parse_pool.processes + 1

    def _take(self, item: bytes | HandedRange, out: list[Record]) -> None:
        if isinstance(item, bytes):
            self._consume(item, out)
        else:
            self._consume_handed(item, out)

    def _consume_handed(self, handed: HandedRange, out: list[Record]) -> None:
        """A range a helper parsed (``handed.py``) merged as the read it stands for; read here
        and consumed as that read when the helper's answer cannot stand for it (a dead or
        declining helper, bytes it could not prove, an over-long line) or this tail is not
        where the range was cut (a skipped line, a new reader, a prefilter)."""
        reader, parsed = self.columnar, None
        fits = (
            not self._skipping
            and self._pos == handed.at
            and self._pos + len(self._buf) == handed.start
            and reader is handed.reader
            and self.prefilter is None
            and len(handed.rest) <= self.max_line_bytes  # else quarantined as the read's
        )
        if fits:
            try:
                parsed = handed.future.result()
            except Exception:  # a dead helper, a declined chunk: read and parsed here
                parsed = None
        if parsed is None or parsed.longest > self.max_line_bytes or parsed.digest < 0:
            handed.future.cancel()
            data = None if self._f is None else self._reread(handed.start, len(handed))
            if data is not None:
                self._consume(data, out)
            return
        assert reader is not None and self._f is not None
        if not reader.wants(parsed.lines):  # backing off since it was handed: the row path
            self.counters["row_chunks"] += 1
            data = self._reread(handed.at, handed.end - handed.at)
            if data is not None:
                self._row_lines(data, 0, out)
                self._pos, self._buf = handed.end, handed.rest
            return
        handed.digest = parsed.digest
        parsed = reader.parse(b"", None, handed.future)  # counts its repairs here
        fd = self._f.fileno()
        self._merge(parsed, parsed.lines, parsed.lines, 0, out,
                    lambda: RangeRows(fd, handed, reader.table_of),
                    lambda: pread_exact(fd, handed.at, handed.end - handed.at) or b"")  # fmt: skip
        self._pos, self._buf = handed.end, handed.rest

    def _reread(self, start: int, length: int) -> bytes | None:
        """``length`` bytes at ``start`` read here (a handed range taken back); None when the
        file holds fewer: what was queued after is dropped, and reading goes on where this
        tail's bytes end (a truncation is found by the next poll)."""
        assert self._f is not None
        try:
            data = pread_exact(self._f.fileno(), start, length)
        except OSError:
            data = None
        if data is None:
            self._drop_ahead()
            self._f.seek(self._pos + len(self._buf))
        return data

    def _read_size(self) -> int:
        if self.read_size is not None:
            return self.read_size
        return ROW_READ_BYTES if self.columnar is None else CHUNK_BYTES

    def _consume(self, data: bytes, out: list[Record]) -> None:
        cut = data.rfind(b"\n") + 1  # 0: this read holds no newline
        if cut:
            # the whole lines (the carried partial line, then this read up to its last
            # newline) in one copy, and the partial line after them: a 4 MiB chunk is copied
            # once, not once to join and again to cut
            if self._buf:
                with memoryview(data) as view:
                    buf = b"".join((self._buf, view[:cut]))
            else:
                buf = data if cut == len(data) else data[:cut]
            after = data[cut:]
            last_nl = len(buf) - 1
        else:
            buf, after = (self._buf + data if self._buf else data), b""
            last_nl = -1
        if last_nl >= 0:
            start = 0
            if self._skipping:  # the first piece ends an over-long line already quarantined
                self._skipping = False
                start = buf.find(b"\n") + 1
            found = None if self.prefilter is None else self.prefilter.scan(buf, start, last_nl)
            columnar = isinstance(out, ColumnarBatch) and self._columnar_chunk(
                buf, start, last_nl, found, out
            )
            if columnar:
                pass  # parsed into the batch's table
            elif found is not None:  # the fast path: only candidate lines become objects
                self._scanned(buf, start, last_nl, found, out)
            else:
                self._row_lines(buf, start, out)
            rest = after
            self._pos += last_nl + 1
        else:
            rest = buf
        if len(rest) > self.max_line_bytes and not self._skipping:
            self._line_no += 1
            self.counters["lines"] += 1
            self.counters["rejected"] += 1
            self.quarantine.add(
                self.name,
                self._line_no,
                "line_too_long",
                rest[:800],
                offset=self._pos,
                message=f"line longer than {self.max_line_bytes} bytes",
            )
            self._skipping = True
        if self._skipping:
            self._pos += len(rest)
            rest = b""
        self._buf = rest

    def _columnar_chunk(
        self,
        buf: bytes,
        start: int,
        last_nl: int,
        found: tuple[list[int], list[bytes]] | None,
        out: ColumnarBatch,
    ) -> bool:
        """The lines of ``buf[start:last_nl + 1]`` (or only ``found``, the prefilter's
        candidates) parsed into one Arrow table (the columnar path). Rejected lines are
        quarantined one by one with their line number and offset, as :meth:`_lines` does.
        False (nothing consumed) when the chunk must take the row path: a line longer than
        ``max_line_bytes``, or a chunk the parser cannot represent exactly."""
        reader = self.columnar
        assert reader is not None
        if found is None:
            chunk = buf[start : last_nl + 1]
            ends = newline_positions(chunk)  # found once: the parser reuses them
            n = kept_count = len(ends)
        else:
            kept_count = len(found[1])
        if not reader.wants(kept_count, prefiltered=found is not None):
            self.counters["row_chunks"] += 1
            return False
        if found is not None:  # counted only now: the row path (_scanned) counts again
            n = buf.count(b"\n", start, last_nl + 1)
            chunk = b"\n".join(found[1]) + b"\n"
            ends = newline_positions(chunk)
        if len(chunk) > self.max_line_bytes and longest_line(ends) > self.max_line_bytes:
            self.counters["row_chunks"] += 1
            return False
        parsed = None
        if kept_count:
            try:
                parsed = reader.parse(chunk, ends)
            except Unsupported:
                self.counters["row_chunks"] += 1
                return False
        self._merge(parsed, n, kept_count, start, out,
                    lambda: functools.partial(reader.table_of, chunk), lambda: chunk,
                    found, buf)  # fmt: skip
        return True

    def _merge(
        self,
        parsed: ParsedChunk | None,
        n: int,
        kept_count: int,
        start: int,
        out: ColumnarBatch,
        reparse: Callable[[], Callable[[], Any]],
        chunk_of: Callable[[], bytes],
        found: tuple[list[int], list[bytes]] | None = None,
        buf: bytes = b"",
    ) -> None:
        """A parsed chunk of ``n`` lines (``kept_count`` of them parsed) at offset ``start``
        after ``_pos`` into the batch, its rejected lines quarantined (their offsets found in
        ``chunk_of()``, or ``found`` and ``buf`` for the prefilter's candidates), counted.
        ``reparse()``: the rows of a chunk a helper pre-aggregated, on demand."""
        if parsed is not None:
            part: Any = parsed.table
            if parsed.aggregated is not None:  # aggregated by a parse helper: rows on demand
                part = parsed.aggregated
                part.reparse = reparse()
            rows = part.num_rows
            rejects = parsed.rejects
        else:
            rows, rejects = 0, []
        at, index = 0, 0  # chunk offset and line index of the last rejected line found
        chunk = chunk_of() if rejects and found is None else b""
        for i, reason, message, line in rejects:
            if found is None:
                while index < i:
                    at = chunk.index(b"\n", at) + 1
                    index += 1
                offset, line_index = self._pos + start + at, i
            else:
                pos = found[0][i]
                offset, line_index = self._pos + pos, buf.count(b"\n", start, pos)
            self.quarantine.add(
                self.name, self._line_no + line_index + 1, reason, line, offset=offset,
                message=message,
            )  # fmt: skip
        self.counters["columnar_chunks"] += 1
        self.counters["rejected"] += len(rejects)
        self.counters["records"] += rows
        self.counters["blank_lines"] += kept_count - rows - len(rejects)
        self.counters["lines"] += n
        self._line_no += n
        skipped = n - kept_count
        if skipped:
            self.counters["prefiltered"] += skipped
            self._skipped += skipped
        if rows:
            out.add(part)

    def _scanned(
        self,
        buf: bytes,
        start: int,
        last_nl: int,
        found: tuple[list[int], list[bytes]],
        out: list[Record],
    ) -> None:
        """Account for the lines of ``buf[start:last_nl + 1]`` of which only ``found`` (their
        start offsets and bytes, from ``prefilter.scan``) may match: parse those, count the
        rest as prefiltered (as :meth:`_lines` with a prefilter does, without splitting)."""
        if isinstance(out, ColumnarBatch):
            part: list[Record] = []
            self._scanned(buf, start, last_nl, found, part)
            out.add(part)
            return
        parse = self.parser.parse
        append = out.append
        limit = self.max_line_bytes
        n = buf.count(b"\n", start, last_nl + 1)
        records = blank = 0
        at, index = start, 0  # line index of offset ``at``, found lazily for rejected lines
        starts, kept = found
        for pos, line in zip(starts, kept, strict=True):
            if len(line) <= limit:
                try:
                    append(parse(line))
                    records += 1
                    continue
                except Exception as exc:  # a parser bug costs one line, never the tail
                    reason, message = rejection(exc)
                if not line.strip():
                    blank += 1
                    continue
            else:
                reason, message = "line_too_long", f"line longer than {limit} bytes"
            index += buf.count(b"\n", at, pos)
            at = pos
            self.counters["rejected"] += 1
            self.quarantine.add(
                self.name,
                self._line_no + index + 1,
                reason,
                line[:800] if reason == "line_too_long" else line,
                offset=self._pos + pos,
                message=message,
            )
        self._line_no += n
        self.counters["lines"] += n
        self.counters["records"] += records
        self.counters["blank_lines"] += blank
        skipped = n - len(kept)
        if skipped:
            self.counters["prefiltered"] += skipped
            self._skipped += skipped

    def _row_lines(self, buf: bytes, start: int, out: list[Record]) -> None:
        """The lines of ``buf`` (ending with its last newline) after the first ``start``
        bytes, on the row path."""
        lines = buf.split(b"\n")
        lines.pop()  # empty: buf ends with its last newline
        self._lines(lines[1:] if start else lines, out, self._pos + start)

    def _line(self, line: bytes, out: list[Record]) -> None:
        self._lines([line], out, self._pos)

    def _lines(self, lines: list[bytes], out: list[Record], base: int) -> None:
        """Parse ``lines``; ``base`` is the file offset of the first (for dead letters).
        With a ``prefilter`` only the lines it keeps are parsed (the rest are counted)."""
        if isinstance(out, ColumnarBatch):
            part: list[Record] = []
            self._lines(lines, part, base)
            out.add(part)
            return
        parse = self.parser.parse
        append = out.append
        limit = self.max_line_bytes
        kept = lines if self.prefilter is None else self.prefilter.select(lines)
        records = blank = 0
        # index in ``lines`` and file offset of rejected lines, found lazily (amortized one
        # pass over the batch: kept lines are in order)
        at, off_index, off_value = -1, 0, base
        for j, line in enumerate(kept):
            if len(line) <= limit:
                try:
                    append(parse(line))
                    records += 1
                    continue
                except Exception as exc:  # a parser bug costs one line, never the tail
                    reason, message = rejection(exc)
                if not line.strip():
                    blank += 1
                    continue
            else:
                reason, message = "line_too_long", f"line longer than {limit} bytes"
            if kept is lines:
                at = j
            else:
                at += 1
                while lines[at] is not line:
                    at += 1
            while off_index < at:
                off_value += len(lines[off_index]) + 1
                off_index += 1
            self.counters["rejected"] += 1
            self.quarantine.add(
                self.name,
                self._line_no + at + 1,
                reason,
                line[:800] if reason == "line_too_long" else line,
                offset=off_value,
                message=message,
            )
        self._line_no += len(lines)
        self.counters["lines"] += len(lines)
        self.counters["records"] += records
        self.counters["blank_lines"] += blank
        skipped = len(lines) - len(kept)
        if skipped:
            self.counters["prefiltered"] += skipped
            self._skipped += skipped

    def drain(self) -> RecordBatch:
        """End of input (a finished file, ``elf run``): the unterminated last line, if any,
        parsed as a line (as rotation does), in a batch of its own."""
        out = RecordBatch() if self.columnar is None else ColumnarBatch()
        if self._buf and not self._skipping:
            line, self._buf = self._buf, b""
            self._line(line, out)
            self._pos += len(line)
        return out

    async def batches(self) -> AsyncIterator[list[Record]]:
        """Non-empty record batches as they arrive; sleeps ``poll_interval`` when idle."""
        while not self._closed:
            batch = self.poll()
            if batch:
                yield batch
            else:
                await asyncio.sleep(self.poll_interval)

    # ---- state ----------------------------------------------------------------------------
    def state(self) -> dict[str, Any]:
        """Where a restarted tail should resume (see module docstring)."""
        return {
            "path": str(self.path),
            "inode": self._inode,
            "offset": self._pos,
            "line_no": self._line_no,
        }

    def stats(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": "file",
            **self.counters,
            "offset": self._pos,
            "pending_bytes": len(self._buf),
            "bad_encoding_repaired": repairs_of(self.parser),
            "columnar": None if self.columnar is None else self.columnar.describe(),
            "quarantine": self.quarantine.stats(),
        }

    def close(self) -> None:
        self._closed = True
        self._drop_ahead()
        self._close_file()
