"""Custom access-log formats compiled into a parser: nginx ``log_format``, Apache ``LogFormat``.

Contract: :func:`compile_format` turns a :class:`~agent.log_format.LogFormat` (checked by
:func:`~agent.log_format.format_items`) into a :class:`CompiledFormat`: one anchored regular
expression, written in the common subset of Python's ``re`` and RE2 (explicit ASCII classes,
no backreferences or lookaround) so the row path (``re``) and the columnar path (Arrow's RE2)
split a line identically, plus the plan that says which variable fills which record field.
:class:`LogFormatParser` is the row parser (:class:`~agent.ingest.records.LineParser`); the
columnar kernel is :mod:`agent.ingest.columnar.log_format`. Converters of single values
(:func:`convert`, :func:`list_sum`) are shared by both paths, so they agree by construction.

Records: ``ts``, ``source_ip``, ``priority``, ``body`` (as every format), then each
variable's field in format order (see docs/inputs.md for the table), all always present
(None when the line says ``-``). ``ts`` is the arrival time (``clock()``) when the format has
no time variable; ``body`` is the request line, else the whole line; ``priority`` is
combined's severity of the status (None without ``$status``/``%s``). A field two variables
fill takes the first in the format, except that a variable naming a field outright
(``$host``, ``$request_method``) beats a field derived from another (the ``host`` and
``method`` of ``$request``; ``source_ip`` from Apache's ``%a`` when there is no ``%h``).

Engines: the row parser matches with Python's ``re`` when the pattern cannot backtrack far
(every unquoted token ends at a space, no unquoted free text but at the end), else with RE2
(``google-re2``: linear time, ~25x slower per line), so no line stalls a worker.

Values: quoted variables (the next literal text starts with ``"``) are read up to the next
unescaped quote (nginx writes ``"`` as ``\\x22``, Apache as ``\\"``); unquoted text variables
that may hold spaces (the request line, headers) are matched lazily up to the literal text
that follows; other text variables up to the next space. Escapes are decoded in every text
field (:func:`~agent.ingest.formats.decode_escapes`), invalid UTF-8 in them counted as a
repair. A line the regex does not match is ``bad_access_line``; a time that does not exist is
``bad_timestamp``.
"""

from __future__ import annotations

import dataclasses
import functools
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import re2

from agent.ingest.formats import (
    AccessLogParser,
    count_repaired,
    decode_escapes,
    matched_line,
    parse_rfc3339,
    severity_of_status,
    short_repr,
    split_request,
)
from agent.ingest.records import EncodingRepairs
from agent.log_format import Literal, LogFormat, Variable, format_items

#: kinds whose value is text (dash → None, escapes decoded)
TEXT_KINDS = frozenset(("str", "text", "str_list"))
INT_KINDS = frozenset(("int", "bytes", "status", "usec", "msec"))
TS_KINDS = frozenset(
    ("ts_clf", "ts_clf_bracketed", "ts_iso", "ts_epoch", "ts_epoch_int", "ts_epoch_ms",
     "ts_epoch_us")
)  # fmt: skip
_REQUEST_PARTS = ("method", "scheme", "host", "path", "query", "protocol")

_NUM = r"[0-9]+(?:\.[0-9]+)?"
_INT = r"[0-9]+"
_CLF = r"[0-9]{2}/[A-Za-z]{3}/[0-9]{4}:[0-9]{2}:[0-9]{2}:[0-9]{2} [+-][0-9]{4}"
_ISO = r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(?:Z|[+-][0-9]{2}:[0-9]{2})"
# up to the next unescaped quote; the "unrolled loop" is fast in ``re`` and valid RE2
_QUOTED = r'[^"\\]*(?:\\.[^"\\]*)*'
_LIST_SEP = r"(?:, | : )"  # nginx: ", " between upstreams, " : " across internal redirects
_LIST_SPLIT = re.compile(_LIST_SEP)
_FIXED_PATTERNS = {
    "int": f"-|{_INT}",
    "bytes": f"-|{_INT}",
    "status": f"-|{_INT}",
    "usec": f"-|{_INT}",
    "msec": f"-|{_INT}",
    "float": f"-|{_NUM}",
    "time_list": f"(?:-|{_NUM})(?:{_LIST_SEP}(?:-|{_NUM}))*",
    "int_list": f"(?:-|{_INT})(?:{_LIST_SEP}(?:-|{_INT}))*",
    "str_list": f"[^ ,]+(?:{_LIST_SEP}[^ ,]+)*",
    "ts_clf": _CLF,
    "ts_clf_bracketed": _CLF,  # the brackets are literal text around the group
    "ts_iso": _ISO,
    "ts_epoch": _NUM,
    "ts_epoch_int": _INT,
    "ts_epoch_ms": _INT,
    "ts_epoch_us": _INT,
}
_REGEX_SPECIAL = frozenset("\\.^$*+?{}[]|()")

# one cached time-string conversion per process (a bounded cache), as the combined parser's
_CLF_TIMES = AccessLogParser()


def _literal(text: str) -> str:
    """``text`` as a regex matching itself in both ``re`` and RE2 (only the metacharacters
    escaped: ``re.escape`` also escapes characters RE2 need not see escaped)."""
    return "".join("\\" + c if c in _REGEX_SPECIAL else c for c in text)


def _value_pattern(kind: str, following: str | None) -> str:
    """The regex of one variable's value, given the literal text that follows it (None: the
    end of the line)."""
    fixed = _FIXED_PATTERNS.get(kind)
    if fixed is not None:
        return fixed
    if following is not None and following.startswith('"'):
        return _QUOTED
    if kind in ("text", "request"):
        return ".*" if following is None else ".*?"
    return "[^ ]*"


def list_sum(text: str, number: Callable[[str], Any]) -> Any:
    """The sum of a list nginx writes for retried upstreams (``0.010, 0.020 : 0.005``), its
    ``-`` entries skipped; None when every entry is ``-``. Decimal fractions are added
    exactly and rounded once (``0.035``, not ``0.034999999999999996``); both paths call
    this, so they agree bit for bit."""
    if text == "-":
        return None
    items = [x for x in _LIST_SPLIT.split(text) if x != "-"]
    if not items:
        return None
    if len(items) == 1:
        return number(items[0])
    if number is float:
        return float(sum(Decimal(x) for x in items))
    return sum(number(x) for x in items)


def _clf_ts(value: str) -> float:
    return _CLF_TIMES.timestamp(value)


#: a variable's primary value from its (matched, escape-decoded) text
_CONVERTERS: dict[str, Callable[[str], Any]] = {
    "str": lambda v: None if v in ("-", "") else v,
    "text": lambda v: None if v in ("-", "") else v,
    "str_list": lambda v: None if v == "-" else v,
    "request": lambda v: v,
    "int": lambda v: None if v == "-" else int(v),
    "status": lambda v: None if v == "-" else int(v),
    "usec": lambda v: None if v == "-" else int(v),
    "msec": lambda v: None if v == "-" else int(v),
    "bytes": lambda v: 0 if v == "-" else int(v),
    "float": lambda v: None if v == "-" else float(v),
    "time_list": lambda v: list_sum(v, float),
    "int_list": lambda v: list_sum(v, int),
    "ts_clf": _clf_ts,
    "ts_clf_bracketed": _clf_ts,
    "ts_iso": parse_rfc3339,
    "ts_epoch": float,
    "ts_epoch_int": lambda v: float(int(v)),
    "ts_epoch_ms": lambda v: int(v) / 1e3,
    "ts_epoch_us": lambda v: int(v) / 1e6,
}


def convert(kind: str, value: str) -> Any:
    """The primary value of a ``kind`` variable written as ``value`` (already matched by its
    pattern; time strings that name no real time raise ``bad_timestamp``)."""
    return _CONVERTERS[kind](value)


@dataclass(frozen=True, slots=True)
class Source:
    """Where a record field comes from: ``slot`` (index of the variable) and ``role``:
    ``value`` (its primary value), ``raw`` (a list's text as written), ``seconds`` (Apache
    ``%D``/``%{ms}T`` in seconds), ``priority`` (of a status), ``request`` (the request line,
    for ``body``) or a part of the request line (``method``, ``path``, ...)."""

    slot: int
    role: str


@dataclass(frozen=True)
class CompiledFormat:
    """A compiled format: ``pattern`` (anchored with ``^...$``; group ``g<i>`` is slot
    ``i``'s value), ``regex`` (its ``fullmatch`` reads a line: Python's ``re`` when the
    pattern cannot backtrack far, else RE2, see :func:`backtracks`), ``slots`` (the
    variables, in order), ``sources`` (each record field's :class:`Source`, in record order;
    ``ts``/``source_ip``/``priority``/``body`` are absent when no variable fills them)."""

    fmt: LogFormat
    pattern: str
    regex: Any
    slots: tuple[Variable, ...]
    sources: dict[str, Source]
    #: the pattern in pieces: literal regex text, or (slot, the slot's value regex)
    pieces: tuple[str | tuple[int, str], ...] = ()
    _partial: dict[frozenset[int], str] = dataclasses.field(
        default_factory=dict, compare=False, repr=False
    )

    def pattern_for(self, keep: frozenset[int]) -> str:
        """``pattern`` with only the groups of the slots ``keep`` capturing (the others
        ``(?:...)``): the same lines match, and RE2 extracts fewer groups faster."""
        cached = self._partial.get(keep)
        if cached is not None:
            return cached
        out = []
        for piece in self.pieces:
            if isinstance(piece, str):
                out.append(piece)
            else:
                slot, value = piece
                out.append(f"(?P<g{slot}>{value})" if slot in keep else f"(?:{value})")
        self._partial[keep] = pattern = "".join(out)
        return pattern

    @property
    def fields(self) -> tuple[str, ...]:
        """Every record key, in record order."""
        base = ("ts", "source_ip", "priority", "body")
        return base + tuple(f for f in self.sources if f not in base)

    def kind_of(self, field: str) -> str:
        """The value type of ``field``: ``str``, ``int``, ``float`` or ``query``."""
        src = self.sources.get(field)
        if field == "ts":
            return "float"
        if field == "priority":
            return "int"
        if src is None:
            return "str"
        kind = self.slots[src.slot].kind
        if src.role == "query":
            return "query"
        if src.role in ("raw", "request") or src.role in _REQUEST_PARTS:
            return "str"
        if src.role == "seconds" or kind in ("float", "time_list") or kind in TS_KINDS:
            return "float"
        if src.role == "priority" or kind in INT_KINDS or kind == "int_list":
            return "int"
        return "str"


def _provided(var: Variable) -> list[tuple[str, str, int]]:
    """(field, role, rank) for what ``var`` fills; rank 0 names the field outright, rank 1
    derives it (a named field beats a derived one)."""
    out = [(var.field, "value", 0)]
    if var.kind == "request":
        out.append(("body", "request", 1))
        out += [(part, part, 1) for part in _REQUEST_PARTS]
    elif var.kind == "status":
        out.append(("priority", "priority", 1))
    elif var.kind in ("time_list", "int_list"):
        out.append((var.field + "_raw", "raw", 0))
    elif var.kind in ("usec", "msec"):  # names request_time too: the first in the format wins
        out.append(("request_time", "seconds", 0))
    if var.field == "client_ip":  # Apache %a: the source address when there is no %h
        out.append(("source_ip", "value", 1))
    return out


def backtracks(pieces: list[str | tuple[int, str]]) -> bool:
    """Whether ``re`` could backtrack more than a bounded amount on the pattern: a lazy
    free-text group (unquoted ``$request``, headers), or an unquoted token (``[^ ]*``) whose
    next literal text does not start with the space that ends it (``$a:$b``: the token may
    also hold ``:``)."""
    for i, piece in enumerate(pieces):
        if isinstance(piece, str):
            continue
        value = piece[1]
        nxt = pieces[i + 1] if i + 1 < len(pieces) else "$"
        if value == ".*?":
            return True
        if value == "[^ ]*" and not (isinstance(nxt, str) and nxt.startswith((" ", "$"))):
            return True
    return False


@functools.lru_cache(maxsize=64)
def compile_format(fmt: LogFormat) -> CompiledFormat:
    """The compiled ``fmt`` (see module docstring); ``LogFormatError`` when it is invalid."""
    items = format_items(fmt)
    pieces: list[str | tuple[int, str]] = ["^"]
    slots: list[Variable] = []
    for i, item in enumerate(items):
        if isinstance(item, Literal):
            pieces.append(_literal(item.text))
            continue
        nxt = items[i + 1] if i + 1 < len(items) else None
        following = nxt.text if isinstance(nxt, Literal) else None
        bracketed = item.kind == "ts_clf_bracketed"
        if bracketed:
            pieces.append(r"\[")
        pieces.append((len(slots), _value_pattern(item.kind, following)))
        if bracketed:
            pieces.append(r"\]")
        slots.append(item)
    pieces.append("$")
    pattern = "".join(p if isinstance(p, str) else f"(?P<g{p[0]}>{p[1]})" for p in pieces)
    best: dict[str, tuple[int, int, Source]] = {}
    order = 0
    for index, var in enumerate(slots):
        for field, role, rank in _provided(var):
            order += 1
            if field not in best or (rank, order) < best[field][:2]:
                best[field] = (rank, order, Source(index, role))
    # record order: the fixed four, then the fields in the order the format first fills them
    placed = sorted(best.items(), key=lambda kv: kv[1][1])
    sources = {f: s for f, (_, _, s) in placed}
    # Python's re is ~25x faster per line than the re2 module, but backtracks: a format
    # that lets it (two free-text variables unquoted) could take minutes on a crafted long
    # line, so such formats take RE2, linear in the line whatever it holds
    regex = (re2 if backtracks(pieces) else re).compile(pattern[1:-1])
    return CompiledFormat(fmt, pattern, regex, tuple(slots), sources, tuple(pieces))


class LogFormatParser:
    """Lines of one custom format to records (see module docstring); ``clock`` gives the
    arrival time of formats without a time variable."""

    def __init__(
        self,
        fmt: LogFormat,
        *,
        clock: Callable[[], float] = time.time,
        repairs: EncodingRepairs | None = None,
    ) -> None:
        self.compiled = compile_format(fmt)
        self.clock = clock
        self.repairs = repairs if repairs is not None else EncodingRepairs()
        self._match = self.compiled.regex.fullmatch
        slots = self.compiled.slots
        self._converters = [_CONVERTERS[v.kind] for v in slots]
        self._text_slots = [i for i, v in enumerate(slots) if v.kind in TEXT_KINDS | {"request"}]
        sources = self.compiled.sources
        # the plan grouped by role (one loop per role, no per-field dispatch on the hot path);
        # the template fixes the record's key order, the fields fill it
        self._template: dict[str, Any] = dict.fromkeys(self.compiled.fields)
        self._by_value = [(f, s.slot) for f, s in sources.items() if s.role == "value"]
        self._by_raw = [(f, s.slot) for f, s in sources.items() if s.role == "raw"]
        self._by_request = [(f, s.slot) for f, s in sources.items() if s.role == "request"]
        self._by_part = [(f, s.role) for f, s in sources.items() if s.role in _REQUEST_PARTS]
        self._priority = [(f, s.slot) for f, s in sources.items() if s.role == "priority"]
        self._seconds = [
            (f, s.slot, 1e6 if slots[s.slot].kind == "usec" else 1e3)
            for f, s in sources.items()
            if s.role == "seconds"
        ]
        self._request = next((i for i, v in enumerate(slots) if v.kind == "request"), None)
        self._has_ts = "ts" in sources
        self._has_body = "body" in sources
        self._refusal = f"not a line of log format {short_repr(str(fmt), 80)}"

    def parse(self, line: bytes | str) -> dict[str, Any]:
        text, m, before = matched_line(line, self.repairs, self._match, self._refusal)
        raw = list(m.groups())
        if "\\" in text:
            bad = False
            for i in self._text_slots:
                raw[i], was_bad = decode_escapes(raw[i])
                bad = bad or was_bad
            count_repaired(self.repairs, before, bad)
        # every variable is converted, read or not: a line with any impossible time is refused
        values = [conv(v) for conv, v in zip(self._converters, raw, strict=True)]
        event = self._template.copy()
        if not self._has_ts:
            event["ts"] = self.clock()
        if not self._has_body:
            event["body"] = text
        for field, slot in self._by_value:
            event[field] = values[slot]
        for field, slot in self._by_raw:  # a list's text as written (None for "-")
            event[field] = None if raw[slot] == "-" else raw[slot]
        for field, slot in self._by_request:  # ``body``: the request line
            event[field] = raw[slot]
        for field, slot in self._priority:
            event[field] = severity_of_status(values[slot])
        for field, slot, scale in self._seconds:
            count = values[slot]
            event[field] = None if count is None else count / scale
        if self._by_part:
            assert self._request is not None
            parts = split_request(raw[self._request])
            for field, part in self._by_part:
                event[field] = parts[part]
        return event
