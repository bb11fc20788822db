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
from collections.abc import AsyncIterator
from concurrent.futures import Future
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

import xxhash

from agent.ingest.base import ColumnarBatch, Record, RecordBatch
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
#: also reads, cuts, hands over and merges every chunk (measured, one helper: 1.0 left the
#: helper idle a fifth of the time; 0.7 balances them)
AHEAD_LOCAL_SHARE = 0.7


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
        #: chunks handed to the parse pool: (file offset, length, xxh3-64 of the bytes, reader,
        #: future), in order
        self._ahead: deque[tuple[int, int, int, Any, Future[Any]]] = deque()
        self._ahead_until = 0  # file offset where the chunks handed over end
        self._ahead_credit = 1.0  # this thread's share of the chunks dealt (_ahead_local)
        self._reads: deque[bytes] = deque()  # read ahead, not consumed yet (parse-ahead)
        # how many of _reads were cut already, and the carried bytes and offset after them
        self._sim_reads, self._sim_rest, self._sim_at = 0, b"", 0
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
                self._consume(self._reads.popleft(), out)
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
        parsing the chunks dealt to it (:meth:`_ahead_local`) and the pool the others, while
        the next poll's are already read and handed over, so the helper processes never wait
        for this thread.
        False when nothing is waiting (the caller goes on: end of file, rotation)."""
        per_poll = self._ahead_reads()
        while len(self._reads) < 2 * per_poll:
            if self._reads and len(self._reads[-1]) < want:
                break  # the file's end as of that read
            data = self._f.read(want) if self._f is not None else b""
            if not data:
                break
            self.counters["bytes"] += len(data)
            self._reads.append(data)
        if not self._reads:
            return False
        self._hand_over()
        for _ in range(min(per_poll, len(self._reads))):
            self._consume(self._reads.popleft(), out)
            self._sim_reads = max(0, self._sim_reads - 1)
        return True

    def _hand_over(self) -> None:
        """Hand the chunks the waiting reads will make to the parse pool (those not handed
        over yet, except those dealt to this thread, :meth:`_ahead_local`): the cuts
        :meth:`_consume` will make, each read's bytes after the carried partial line up to
        its last newline. Stops at an over-long line (its skipping changes the cuts)."""
        reader, pool = self.columnar, self.parse_pool
        assert reader is not None and pool is not None and self._f is not None
        full = self._read_size()  # a shorter read is the file's end: this thread's to parse
        path = f"/proc/{os.getpid()}/fd/{self._f.fileno()}"
        on_proc = os.path.exists(path)
        # the cuts of the reads already simulated are known: go on after them
        done = self._sim_reads
        if done:
            rest, at = self._sim_rest, self._sim_at
        else:
            rest, at = self._buf, self._pos  # ``rest`` starts at file offset ``at``
        for i in range(done, len(self._reads)):
            self._sim_reads = i + 1
            data = self._reads[i]
            nl = data.rfind(b"\n")
            if nl < 0:
                rest = rest + data if rest else data
            else:  # the chunk is rest + data[:cut]: hashed in place, not copied
                cut = nl + 1
                # lines not counted: a chunk of fewer than the reader wants is only wasted
                # work there (this thread takes the row path for it and drops the answer)
                # this thread's chunk, or a helper's; a tail keeping up with its file (one
                # short read per poll) hands nothing over
                mine = len(data) < full or self._ahead_local()
                if not mine and at >= self._ahead_until and not reader.backing_off:
                    with memoryview(data)[:cut] as head:
                        digest = xxhash.xxh3_64(rest)
                        digest.update(head)
                        length, sum64 = len(rest) + cut, digest.intdigest()
                        # read there: no 4 MiB through the pipe
                        source: Any = (path, at, length, sum64) if on_proc else rest + head
                    future = pool.submit(reader.fmt, reader.fields, source, reader.plan)
                    self.counters["ahead_chunks"] += 1
                    self._ahead.append((at, length, sum64, reader, future))
                    self._ahead_until = at + length
                at += len(rest) + cut
                rest = data[cut:]
            self._sim_rest, self._sim_at = rest, at
            if len(rest) > self.max_line_bytes:
                self._sim_reads = 0  # cut again next poll, after the skipping
                break

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
        for *_, future in self._ahead:
            future.cancel()
        self._ahead.clear()
        self._reads.clear()
        self._ahead_until = 0
        self._sim_reads, self._sim_rest, self._sim_at = 0, b"", 0

    def _ahead_reads(self) -> int:
        """Reads per poll with parse-ahead: about one chunk for this thread and one for each
        helper process (measured: handing them all over leaves this thread idle while it
        waits, and is slower)."""
        assert self.parse_pool is not None
        return self.parse_pool.processes + 1

    def _ahead_for(self, at: int, chunk: bytes) -> Future[Any] | None:
        """The parse pool's future for ``chunk`` (at file offset ``at``), if it was handed
        over with these bytes (length and digest) and this reader; older entries are
        dropped."""
        while self._ahead and self._ahead[0][0] < at:
            self._ahead.popleft()[-1].cancel()
        if not self._ahead or self._ahead[0][0] != at:
            return None
        _, length, sum64, reader, future = self._ahead.popleft()
        if (
            reader is not self.columnar
            or length != len(chunk)
            or sum64 != xxhash.xxh3_64_intdigest(chunk)
        ):
            future.cancel()
            return None
        return future

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
                lines = buf.split(b"\n")
                lines.pop()  # empty: buf ends with its last newline
                self._lines(lines[1:] if start else lines, out, self._pos + start)
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
        ahead, longest = None, -1
        if found is None:
            chunk = buf[start : last_nl + 1]
            ahead = self._ahead_for(self._pos + start, chunk) if self._ahead else None
            told = _told(ahead)
            if told is None:
                ends = newline_positions(chunk)  # found once: the parser reuses them
                n = len(ends)
            else:  # a parse helper found the newlines already
                ends, (n, longest) = None, told
            kept_count = n
        else:
            kept_count = len(found[1])
        if not reader.wants(kept_count, prefiltered=found is not None):
            self.counters["row_chunks"] += 1
            return False
        if found is not None:  # counted only now: the row path (_scanned) counts again
            n = buf.count(b"\n", start, last_nl + 1)
            chunk = b"\n".join(found[1]) + b"\n"
            ends = newline_positions(chunk)
        if len(chunk) > self.max_line_bytes:
            longest = longest if ends is None else longest_line(ends)
            if longest > self.max_line_bytes:
                self.counters["row_chunks"] += 1
                return False
        if kept_count:
            try:
                parsed = reader.parse(chunk, ends, ahead)
            except Unsupported:
                self.counters["row_chunks"] += 1
                return False
            part: Any = parsed.table
            if parsed.aggregated is not None:  # aggregated by a parse helper: rows on demand
                part = parsed.aggregated
                part.reparse = functools.partial(reader.table_of, chunk)
            rows = part.num_rows
            rejects = parsed.rejects
        else:
            rows, rejects = 0, []
        at, index = 0, 0  # chunk offset and line index of the last rejected line found
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
        return True

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


def _told(ahead: Future[Any] | None) -> tuple[int, int] | None:
    """``(lines, longest line)`` of a chunk a parse helper parsed (it found the newlines), or
    None when there is no such answer (the caller finds them)."""
    if ahead is None:
        return None
    try:
        parsed = ahead.result()
    except Exception:  # a dead helper, a declined chunk: the reader sees it again in parse
        return None
    if parsed is None or parsed.longest < 0:
        return None
    return parsed.lines, parsed.longest
