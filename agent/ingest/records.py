"""The record model, its validation, and the quarantine for lines that fail it.

Contract:

* A **record** is a ``dict`` (a JSON object) holding a timestamp field (name configurable,
  default ``"ts"``). After validation the field holds a finite number of seconds since the
  Unix epoch: ints and floats are accepted as they are; with ``allow_iso=True`` (default) an
  ISO-8601 string (``2026-11-21T15:00:00Z``, ``+01:00`` offsets; naive times mean UTC) is
  replaced by its float epoch seconds. ``bool`` is not a timestamp.
* :class:`RecordValidator` turns a raw line (``bytes``/``str``) or an already-decoded object
  into a record, or raises :class:`RecordError` whose ``reason`` is one of
  :data:`REASONS`: ``bad_json``, ``not_object``, ``missing_timestamp``, ``bad_timestamp``;
  inputs add ``line_too_long`` and ``parser_error``.
* :class:`LineParser` is the protocol every line format implements (JSON lines here; log
  formats plug in the same way): ``parse(line) -> record`` or raise ``RecordError``.
* **Bad bytes never lose an event.** Every parser decodes bytes as UTF-8 with invalid
  sequences replaced by U+FFFD (:func:`decode_line`): a JSON line whose string holds one
  invalid byte is still the event, its value carrying U+FFFD where the byte was. orjson reads
  valid lines directly (the fast path); only a line it refuses is checked for invalid UTF-8,
  repaired and read again, so valid lines pay nothing. Each parser counts the lines it
  repaired in its :class:`EncodingRepairs` (``parser.repairs``), which the inputs report as
  ``bad_encoding_repaired``. A line that is still not JSON after the repair (a bad byte
  outside a string) is ``bad_json``.
* :class:`Quarantine` counts rejected lines per reason and keeps a bounded sample of the most
  recent ones as ``{source, line_no, reason, text}`` (text cut to 200 characters; plus
  ``offset`` and ``message`` when the caller knows them); an optional ``on_reject`` callback
  sees every entry, and an optional ``dead_letter``
  (:class:`~agent.ingest.deadletter.DeadLetterFile`)
  gets bounded samples with the whole raw line. Nothing here ever raises on bad input beyond
  ``RecordError``.
"""

from __future__ import annotations

import math
from collections import Counter, deque
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol

import orjson

from agent.errors import AgentError

if TYPE_CHECKING:
    from agent.ingest.deadletter import DeadLetterFile

REASONS = (
    "bad_json",
    "not_object",
    "missing_timestamp",
    "bad_timestamp",
    "line_too_long",
    "parser_error",  # a LineParser raised something other than RecordError (a bug)
    # log formats (agent.ingest.formats)
    "bad_access_line",
    "bad_syslog_line",
    "bad_syslog_pri",
    "bad_structured_data",
    "bad_encoding",
    "not_lines",  # an object given to an input that parses lines of a log format
)
QUARANTINE_TEXT_CHARS = 200


class RecordError(AgentError, ValueError):
    """A line or object that is not a valid record; ``reason`` is one of :data:`REASONS`.

    An :class:`~agent.errors.AgentError` with no HTTP status (inputs quarantine the line)."""

    def __init__(self, reason: str, message: str) -> None:
        # raised per bad line: calling the built-in __init__ directly skips the super() walk
        # through AgentError (which has none), so joining the hierarchy costs nothing here
        ValueError.__init__(self, message)
        self.reason = reason


def rejection(exc: Exception) -> tuple[str, str]:
    """``(reason, message)`` for a line a parser refused with ``exc``: a ``RecordError`` names
    its reason; anything else is a parser bug (``parser_error``) that costs that line only."""
    if isinstance(exc, RecordError):
        return exc.reason, str(exc)
    return "parser_error", f"{type(exc).__name__}: {exc}"


class LineParser(Protocol):
    """A line format: ``parse`` returns a validated record or raises :class:`RecordError`."""

    def parse(self, line: bytes | str) -> dict[str, Any]: ...


class EncodingRepairs:
    """Counts the lines whose invalid UTF-8 a parser replaced with U+FFFD (and kept).

    One per input: the input's parsers share it (a projected parser takes over the full
    parser's), so the count survives a parser swap."""

    __slots__ = ("lines",)

    def __init__(self) -> None:
        self.lines = 0


def decode_line(line: bytes | bytearray | memoryview, repairs: EncodingRepairs | None) -> str:
    """``line`` as text: strict UTF-8 (as fast as lenient on valid bytes), else with invalid
    sequences replaced by U+FFFD and the repair counted in ``repairs``."""
    raw = bytes(line)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        if repairs is not None:
            repairs.lines += 1
        return raw.decode("utf-8", "replace")


def repairs_of(parser: Any) -> int:
    """Lines ``parser`` repaired so far (0 for a parser without an :class:`EncodingRepairs`)."""
    repairs = getattr(parser, "repairs", None)
    return repairs.lines if isinstance(repairs, EncodingRepairs) else 0


class RecordValidator:
    """Validates JSON-lines records (see module docstring); implements :class:`LineParser`."""

    def __init__(
        self,
        ts_field: str = "ts",
        *,
        allow_iso: bool = True,
        repairs: EncodingRepairs | None = None,
    ) -> None:
        if not isinstance(ts_field, str) or not ts_field:
            raise ValueError("ts_field must be a non-empty string")
        self.ts_field = ts_field
        self.allow_iso = allow_iso
        self.repairs = repairs if repairs is not None else EncodingRepairs()

    def parse(self, line: bytes | str) -> dict[str, Any]:
        """Decode one JSON line and validate it (invalid UTF-8 is replaced, see module)."""
        try:
            obj = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            obj = self._repaired(line, exc)
        return self.validate(obj)

    def _repaired(self, line: bytes | str, exc: orjson.JSONDecodeError) -> Any:
        """The object of a line orjson refused, if the cause was invalid UTF-8 (replaced by
        U+FFFD, counted); else ``bad_json``. Off the fast path: refused lines only."""
        if isinstance(line, bytes | bytearray | memoryview):
            raw = bytes(line)
            try:
                raw.decode("utf-8")
            except UnicodeDecodeError:
                try:
                    obj = orjson.loads(raw.decode("utf-8", "replace"))
                except orjson.JSONDecodeError as again:
                    raise RecordError(
                        "bad_json", f"not valid JSON (invalid UTF-8 replaced): {again}"
                    ) from None
                self.repairs.lines += 1
                return obj
        raise RecordError("bad_json", f"not valid JSON: {exc}") from None

    def validate(self, obj: Any) -> dict[str, Any]:
        """Validate a decoded object; returns it with a numeric timestamp field."""
        if not isinstance(obj, dict):
            raise RecordError(
                "not_object", f"a record must be a JSON object, got {type(obj).__name__}"
            )
        try:
            ts = obj[self.ts_field]
        except KeyError:
            raise RecordError(
                "missing_timestamp", f"record has no timestamp field {self.ts_field!r}"
            ) from None
        if isinstance(ts, int | float) and not isinstance(ts, bool):
            if not math.isfinite(ts):
                raise RecordError("bad_timestamp", f"timestamp {ts!r} is not finite")
            return obj
        if isinstance(ts, str) and self.allow_iso:
            obj[self.ts_field] = parse_iso8601(ts)
            return obj
        raise RecordError(
            "bad_timestamp",
            f"timestamp field {self.ts_field!r} must be epoch seconds"
            f"{' or an ISO-8601 string' if self.allow_iso else ''}, got {_short(ts)}",
        )


def parse_iso8601(text: str) -> float:
    """Epoch seconds of an ISO-8601 date-time (naive means UTC); RecordError otherwise."""
    try:
        dt = datetime.fromisoformat(text)
    except ValueError:
        raise RecordError("bad_timestamp", f"not an ISO-8601 timestamp: {_short(text)}") from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return dt.timestamp()


class Quarantine:
    """Counts rejected lines per reason and keeps the last ``limit`` of them."""

    def __init__(
        self,
        limit: int = 100,
        *,
        on_reject: Callable[[dict[str, Any]], None] | None = None,
        dead_letter: DeadLetterFile | None = None,
    ) -> None:
        if limit < 0:
            raise ValueError("limit must be >= 0")
        self.limit = limit
        self.counts: Counter[str] = Counter()
        self._entries: deque[dict[str, Any]] = deque(maxlen=limit or None)
        #: optional sink for every entry (e.g. a dead-letter file writer); its errors are
        #: counted in ``sink_errors`` and never propagate
        self.on_reject = on_reject
        #: optional dead-letter file: bounded samples with the whole raw line
        self.dead_letter = dead_letter
        self.sink_errors = 0

    def add(
        self,
        source: str,
        line_no: int,
        reason: str,
        text: bytes | str,
        *,
        offset: int | None = None,
        message: str | None = None,
    ) -> None:
        """Record one rejected line (``text`` is cut to 200 characters in the entry; the
        dead-letter file gets it whole, up to its own bound)."""
        self.counts[reason] += 1
        if self.dead_letter is not None:
            self.dead_letter.write(reason, text, line_no=line_no, offset=offset, message=message)
        if self.limit == 0 and self.on_reject is None:
            return
        if isinstance(text, bytes | bytearray | memoryview):
            text = bytes(text[: QUARANTINE_TEXT_CHARS * 4]).decode("utf-8", "replace")
        entry = {
            "source": source,
            "line_no": line_no,
            "reason": reason,
            "text": text[:QUARANTINE_TEXT_CHARS],
        }
        if offset is not None:
            entry["offset"] = offset
        if message is not None:
            entry["message"] = message
        if self.limit:
            self._entries.append(entry)
        if self.on_reject is not None:
            try:
                self.on_reject(entry)
            except Exception:
                self.sink_errors += 1

    @property
    def total(self) -> int:
        """Lines rejected so far."""
        return sum(self.counts.values())

    def entries(self) -> list[dict[str, Any]]:
        """The most recent rejected lines, oldest first."""
        return list(self._entries)

    def stats(self) -> dict[str, Any]:
        """``{"total": n, "by_reason": {...}}`` (plus ``sink_errors`` when a sink failed)."""
        out: dict[str, Any] = {"total": self.total, "by_reason": dict(self.counts)}
        if self.sink_errors:
            out["sink_errors"] = self.sink_errors
        if self.dead_letter is not None:
            out["dead_letter"] = self.dead_letter.stats()
        return out


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
