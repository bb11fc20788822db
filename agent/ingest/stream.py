"""Inputs that are not files: the HTTP ingest queue and a stream (stdin) reader.

Contract: both are :class:`~agent.ingest.base.Input` implementations; neither is resumable.

:class:`IngestQueue` is fed by the HTTP ingest endpoint: ``put_lines``/``put_body``/
``put_records`` validate like the file tail, quarantine bad lines and enqueue the rest, all or
nothing: if the valid records do not fit in ``maxsize`` none is enqueued (``queue_full``) so a
client can retry the whole request without duplicates.

:class:`StreamInput` reads lines from a binary stream (stdin: ``path = "-"``) on a daemon
thread into a bounded buffer (a full buffer blocks the thread, i.e. back-pressure on the pipe);
``poll()`` parses what has arrived; at end of stream ``eof`` becomes true, the final
unterminated line is parsed and ``batches()`` ends. A stream cannot be re-read, so it has no
resume state.
"""

from __future__ import annotations

import asyncio
import queue
import sys
import threading
from collections import deque
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field
from typing import Any, BinaryIO

from agent.ingest.base import Record
from agent.ingest.records import (
    LineParser,
    Quarantine,
    RecordError,
    RecordValidator,
    rejection,
    repairs_of,
)


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
        # lines/bytes: every non-blank line received; refused_lines: valid lines refused
        # because the queue was full (the request's whole batch, see put_lines)
        self.counters = {
            "accepted": 0,
            "rejected": 0,
            "queue_full": 0,
            "requests": 0,
            "lines": 0,
            "bytes": 0,
            "refused_lines": 0,
        }

    def unchanged(self) -> bool:
        """Nothing queued (any thread; a hint: a push also asks for a tick itself)."""
        return not self._queue

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
            self.counters["lines"] += 1
            if isinstance(item, bytes):
                self.counters["bytes"] += len(item)
            elif raw and isinstance(item, str):
                self.counters["bytes"] += len(item.encode())
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
            self.counters["refused_lines"] += len(good)
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
            "bad_encoding_repaired": repairs_of(self.parser),
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
            except Exception as exc:  # a parser bug costs one line, never the input
                reason, message = rejection(exc)
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
            "bad_encoding_repaired": repairs_of(self.parser),
            "quarantine": self.quarantine.stats(),
        }
        if self._error:
            out["error"] = self._error
        return out

    def close(self) -> None:
        """Stop reading (a read blocked in the thread ends with the process or the stream)."""
        self._closed = True
