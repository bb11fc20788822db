"""Record inputs of an agent: a file tail, a stream (stdin) reader and the ingest queue.

Every input implements :class:`Input`: ``poll()`` returns the records available now (never
blocks, never raises on bad data), ``batches()`` is an async iterator of non-empty record
lists, ``stats()`` a JSON-able dict, ``close()`` releases resources. Lines are parsed by a
:class:`~agent.ingest.records.LineParser` (default: JSON lines with a ``ts`` timestamp; log formats
in
:mod:`agent.ingest.formats`); bad lines are counted and quarantined
(:class:`~agent.ingest.records.Quarantine`,
with a dead-letter file under the data directory, see :func:`open_input`); they never stop an
input.

:class:`FileTail` follows one file like ``tail -F``:

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
* a line longer than ``max_line_bytes`` is quarantined (``line_too_long``) and skipped; blank
  lines are skipped silently; a missing file is waited for; a parser that raises anything but
  ``RecordError`` costs that line (``parser_error``), never the tail.

:class:`IngestQueue` is fed by the HTTP ingest endpoint: ``put_lines``/``put_body``/
``put_records`` validate like the tail, quarantine bad lines and enqueue the rest, all or
nothing: if the valid records do not fit in ``maxsize`` none is enqueued (``queue_full``) so a
client can retry the whole request without duplicates.

:class:`StreamInput` reads lines from a binary stream (stdin: ``path = "-"``) on a daemon
thread into a bounded buffer (a full buffer blocks the thread, i.e. back-pressure on the pipe);
``poll()`` parses what has arrived; at end of stream ``eof`` becomes true, the final
unterminated line is parsed and ``batches()`` ends. A stream cannot be re-read, so it has no
resume state.

:func:`open_input` builds the input an :class:`~agent.config.InputConfig` describes.
"""

from __future__ import annotations

import asyncio
import os
import queue
import sys
import threading
from collections import deque
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, Protocol, runtime_checkable

from agent.ingest.deadletter import DeadLetterFile
from agent.ingest.formats import make_parser
from agent.ingest.records import LineParser, Quarantine, RecordError, RecordValidator

if TYPE_CHECKING:
    from agent.config import InputConfig
    from agent.ingest.fastpath import LinePrefilter

Record = dict[str, Any]


class RecordBatch(list[Record]):
    """The records of one ``poll``; ``skipped``: lines a prefilter skipped unparsed."""

    skipped: int = 0


@runtime_checkable
class Input(Protocol):
    """What the runtime needs from an input (see module docstring)."""

    name: str

    def poll(self) -> list[Record]: ...

    def batches(self) -> AsyncIterator[list[Record]]: ...

    def stats(self) -> dict[str, Any]: ...

    def close(self) -> None: ...


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
        read_size: int = 1 << 20,
        max_line_bytes: int = 1 << 20,
    ) -> None:
        self.path = Path(path)
        self.name = name or str(self.path)
        self.parser: LineParser = parser or RecordValidator()
        self.quarantine = quarantine if quarantine is not None else Quarantine()
        self.poll_interval = poll_interval
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
        #: optional :class:`~agent.ingest.fastpath.LinePrefilter`: lines no job can match are
        # skipped
        #: unparsed (counted in ``prefiltered``; the runtime installs it)
        self.prefilter: LinePrefilter | None = None
        self._skipped = 0
        self.counters = {
            "lines": 0,
            "records": 0,
            "blank_lines": 0,
            "rejected": 0,
            "rotations": 0,
            "truncations": 0,
            "bytes": 0,
            "prefiltered": 0,
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
        out = RecordBatch()
        if self._closed:
            return out
        if self._f is None and not self._open():
            return out
        try:
            self._poll_into(out)
        except OSError:
            self._close_file()  # retried on the next poll, resuming at _pos
            self._resume = {"inode": self._inode, "offset": self._pos, "line_no": self._line_no}
        out.skipped, self._skipped = self._skipped, 0
        return out

    def _poll_into(self, out: list[Record]) -> None:
        assert self._f is not None
        fst = os.fstat(self._f.fileno())
        if fst.st_size < self._pos + len(self._buf):
            self.counters["truncations"] += 1
            self._f.seek(0)
            self._pos, self._buf, self._skipping, self._line_no = 0, b"", False, 0
        data = self._f.read(self.read_size)
        if data:
            self.counters["bytes"] += len(data)
            self._consume(data, out)
            return
        # at EOF of the open file: has the path moved on to another file?
        try:
            st = os.stat(self.path)
        except OSError:
            return  # rotated away and not recreated yet: keep the old file, wait
        if st.st_ino != self._inode:
            while data := self._f.read(self.read_size):  # a last write may have raced us
                self.counters["bytes"] += len(data)
                self._consume(data, out)
            if self._buf and not self._skipping:
                self._line(self._buf, out)
            self._close_file()
            self.counters["rotations"] += 1
            if self._open():
                self._poll_into(out)

    def _consume(self, data: bytes, out: list[Record]) -> None:
        buf = self._buf + data if self._buf else data
        last_nl = buf.rfind(b"\n")
        if last_nl >= 0:
            start = 0
            if self._skipping:  # the first piece ends an over-long line already quarantined
                self._skipping = False
                start = buf.find(b"\n") + 1
            found = None if self.prefilter is None else self.prefilter.scan(buf, start, last_nl)
            if found is not None:  # the fast path: only candidate lines become objects
                self._scanned(buf, start, last_nl, found, out)
                rest = buf[last_nl + 1 :]
            else:
                lines = buf.split(b"\n")  # no copy of the chunk: the last piece is the rest
                rest = lines.pop()
                self._lines(lines[1:] if start else lines, out, self._pos + start)
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
                    reason, message = _rejection(exc)
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
                    reason, message = _rejection(exc)
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
            "quarantine": self.quarantine.stats(),
        }

    def close(self) -> None:
        self._closed = True
        self._close_file()


@dataclass
class IngestResult:
    """Outcome of one ingest request (JSON-able via ``to_dict``)."""

    accepted: int = 0
    rejected: int = 0
    queue_full: bool = False
    errors: list[dict[str, Any]] = field(default_factory=list)  # first few bad lines

    def to_dict(self) -> dict[str, Any]:
        return {
            "accepted": self.accepted,
            "rejected": self.rejected,
            "queue_full": self.queue_full,
            "errors": self.errors,
        }


class IngestQueue:
    """A bounded in-memory queue of validated records fed by the ingest endpoint."""

    MAX_ERRORS_REPORTED = 10

    def __init__(
        self,
        *,
        parser: LineParser | None = None,
        quarantine: Quarantine | None = None,
        name: str = "ingest",
        maxsize: int = 100_000,
    ) -> None:
        if maxsize < 1:
            raise ValueError("maxsize must be >= 1")
        self.name = name
        self.parser: LineParser = parser or RecordValidator()
        self.quarantine = quarantine if quarantine is not None else Quarantine()
        self.maxsize = maxsize
        self._queue: deque[Record] = deque()
        self._event = asyncio.Event()
        self._closed = False
        self.counters = {"accepted": 0, "rejected": 0, "queue_full": 0, "requests": 0}

    def __len__(self) -> int:
        return len(self._queue)

    def put_body(self, body: bytes | str, *, source: str | None = None) -> IngestResult:
        """An HTTP body of JSON lines (``\\n``-separated; blank lines ignored)."""
        if isinstance(body, str):
            body = body.encode()
        return self.put_lines(body.split(b"\n"), source=source)

    def put_lines(self, lines: Iterable[bytes | str], *, source: str | None = None) -> IngestResult:
        """Validate raw lines and enqueue the valid ones (all or nothing, see module)."""
        return self._put(((i, line, True) for i, line in enumerate(lines, 1)), source)

    def put_records(self, objs: Iterable[Any], *, source: str | None = None) -> IngestResult:
        """Validate already-decoded objects (e.g. a JSON array body) and enqueue them."""
        return self._put(((i, obj, False) for i, obj in enumerate(objs, 1)), source)

    def _put(self, items: Iterable[tuple[int, Any, bool]], source: str | None) -> IngestResult:
        src = source or self.name
        result = IngestResult()
        good: list[Record] = []
        self.counters["requests"] += 1
        for line_no, item, raw in items:
            if raw and not (item.strip() if isinstance(item, bytes | str) else True):
                continue
            try:
                if raw:
                    rec = self.parser.parse(item)
                elif isinstance(self.parser, RecordValidator):
                    rec = self.parser.validate(item)
                else:
                    raise RecordError("not_lines", "this input takes lines of text, not objects")
            except RecordError as exc:
                result.rejected += 1
                text = item if raw else repr(item)
                self.quarantine.add(src, line_no, exc.reason, text)
                if len(result.errors) < self.MAX_ERRORS_REPORTED:
                    result.errors.append(
                        {"line_no": line_no, "reason": exc.reason, "message": str(exc)}
                    )
            else:
                good.append(rec)
        self.counters["rejected"] += result.rejected
        if len(self._queue) + len(good) > self.maxsize:
            result.queue_full = True
            self.counters["queue_full"] += 1
            return result
        self._queue.extend(good)
        result.accepted = len(good)
        self.counters["accepted"] += len(good)
        if good:
            self._event.set()
        return result

    def poll(self, max_items: int | None = None) -> list[Record]:
        """Take up to ``max_items`` records (all if None) without waiting."""
        q = self._queue
        n = len(q) if max_items is None else min(max_items, len(q))
        out = [q.popleft() for _ in range(n)]
        if not q:
            self._event.clear()
        return out

    async def get_batch(
        self, max_items: int = 10_000, timeout: float | None = None
    ) -> list[Record]:
        """Wait (up to ``timeout``) for records, then take up to ``max_items``."""
        if not self._queue:
            try:
                await asyncio.wait_for(self._event.wait(), timeout)
            except TimeoutError:
                return []
        return self.poll(max_items)

    async def batches(self) -> AsyncIterator[list[Record]]:
        """Non-empty batches as records are put; ends after ``close``."""
        while not self._closed:
            batch = await self.get_batch(timeout=1.0)
            if batch:
                yield batch

    def stats(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": "ingest",
            **self.counters,
            "queued": len(self._queue),
            "quarantine": self.quarantine.stats(),
        }

    def close(self) -> None:
        self._closed = True
        self._event.set()


_EOF = object()


class StreamInput:
    """Lines of a binary stream (stdin by default), read on a daemon thread (see module)."""

    def __init__(
        self,
        stream: BinaryIO | None = None,
        *,
        parser: LineParser | None = None,
        quarantine: Quarantine | None = None,
        name: str = "stdin",
        max_buffered: int = 10_000,
        max_batch: int = 10_000,
        max_line_bytes: int = 1 << 20,
        poll_interval: float = 0.1,
    ) -> None:
        self.stream = stream if stream is not None else sys.stdin.buffer
        self.name = name
        self.parser: LineParser = parser or RecordValidator()
        self.quarantine = quarantine if quarantine is not None else Quarantine()
        self.max_batch = max_batch
        self.max_line_bytes = max_line_bytes
        self.poll_interval = poll_interval
        self._lines: queue.Queue[Any] = queue.Queue(max_buffered)
        self._line_no = 0
        self._skipping = False  # inside an over-long line: drop pieces until its newline
        self.eof = False
        self._closed = False
        self.counters = {"lines": 0, "records": 0, "blank_lines": 0, "rejected": 0, "bytes": 0}
        self._error: str | None = None
        self._thread = threading.Thread(target=self._read, name=f"elf-input-{name}", daemon=True)
        self._thread.start()

    def _read(self) -> None:
        try:
            # readline(limit) bounds memory on a huge line: the rest arrives as more pieces,
            # which poll() drops as the tail of an over-long line
            while not self._closed:
                line = self.stream.readline(self.max_line_bytes + 1)
                if not line:
                    break
                self._lines.put(line)
        except (OSError, ValueError) as exc:  # closed or broken stream: end of input
            self._error = f"{type(exc).__name__}: {exc}"
        finally:
            self._lines.put(_EOF)

    def poll(self) -> list[Record]:
        """Parse the lines that have arrived (at most ``max_batch``); never blocks."""
        out: list[Record] = []
        if self.eof:
            return out
        get = self._lines.get_nowait
        skipping = self._skipping
        for _ in range(self.max_batch):
            try:
                line = get()
            except queue.Empty:
                break
            if line is _EOF:
                self.eof = True
                break
            self.counters["bytes"] += len(line)
            complete = line.endswith(b"\n")
            if skipping:  # the rest of an over-long line already quarantined
                skipping = not complete
                continue
            self._line_no += 1
            self.counters["lines"] += 1
            if len(line) > self.max_line_bytes:
                skipping = not complete
                self._reject(
                    "line_too_long", line[:800], f"line longer than {self.max_line_bytes} bytes"
                )
                continue
            line = line[:-1] if complete else line
            try:
                out.append(self.parser.parse(line))
                self.counters["records"] += 1
                continue
            except RecordError as exc:
                reason, message = exc.reason, str(exc)
            except Exception as exc:  # a parser bug costs one line, never the input
                reason, message = "parser_error", f"{type(exc).__name__}: {exc}"
            if not line.strip():
                self.counters["blank_lines"] += 1
                continue
            self._reject(reason, line, message)
        self._skipping = skipping
        return out

    def _reject(self, reason: str, line: bytes, message: str) -> None:
        self.counters["rejected"] += 1
        self.quarantine.add(self.name, self._line_no, reason, line, message=message)

    async def batches(self) -> AsyncIterator[list[Record]]:
        """Non-empty record batches as lines arrive; ends at end of stream or ``close``."""
        while not self._closed:
            batch = self.poll()
            if batch:
                yield batch
            elif self.eof:
                return
            else:
                await asyncio.sleep(self.poll_interval)

    def stats(self) -> dict[str, Any]:
        out = {
            "name": self.name,
            "kind": "stream",
            **self.counters,
            "eof": self.eof,
            "buffered": self._lines.qsize(),
            "quarantine": self.quarantine.stats(),
        }
        if self._error:
            out["error"] = self._error
        return out

    def close(self) -> None:
        """Stop reading (a read blocked in the thread ends with the process or the stream)."""
        self._closed = True


def open_input(
    cfg: InputConfig,
    data_dir: str | os.PathLike[str] | None = None,
    *,
    state: dict[str, Any] | None = None,
    **kw: Any,
) -> FileTail | StreamInput | IngestQueue:
    """The input ``cfg`` describes: a :class:`FileTail` (``path`` a file; resuming at
    ``state``), a :class:`StreamInput` on stdin (``path == "-"``) or an :class:`IngestQueue`
    (type ``ingest``), parsing ``cfg.format``. With ``data_dir`` rejected lines are also sampled
    to ``<data_dir>/deadletter/<name>.jsonl``; ``kw`` goes to the input's constructor."""
    parser = make_parser(cfg.format, ts_field=cfg.timestamp_field)
    dead = DeadLetterFile.for_input(data_dir, cfg.name) if data_dir else None
    quarantine = Quarantine(dead_letter=dead)
    if cfg.type == "ingest":
        return IngestQueue(parser=parser, quarantine=quarantine, name=cfg.name, **kw)
    assert cfg.path is not None
    if cfg.path == "-":
        return StreamInput(parser=parser, quarantine=quarantine, name=cfg.name, **kw)
    return FileTail(
        cfg.path, parser=parser, quarantine=quarantine, name=cfg.name, state=state, **kw
    )


def _rejection(exc: Exception) -> tuple[str, str]:
    """(reason, message) for a line the parser refused (a ``RecordError`` names its reason)."""
    if isinstance(exc, RecordError):
        return exc.reason, str(exc)
    return "parser_error", f"{type(exc).__name__}: {exc}"
