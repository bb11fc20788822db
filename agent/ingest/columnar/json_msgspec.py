"""The projected JSON-lines kernel: msgspec decodes only the fields a query reads.

Contract: :func:`parse_projected` ``(lines, want)`` (``want`` names the fields, ``ts`` among
them; ``lines`` valid UTF-8) returns a :class:`~agent.ingest.columnar.base.KernelResult` whose
table equals what the row parser (:class:`~agent.ingest.records.RecordValidator`, orjson)
gives for the same lines after projection — the same rows, values and Arrow types (each
column is built by ``pa.array`` from the same Python values, so Arrow infers the same type) —
with ``ts`` as float64; the lines the row parser rejects are in ``fallback`` (it rejects them
again there, with its reason). It returns None when the chunk should go to the row parser
whole (values that cannot form one Arrow column: the row path then decides), and raises
:class:`~agent.ingest.columnar.base.UnsupportedChunk` for an integer ``ts`` beyond 2**53, as
the row path's conversion does.

Why msgspec: a fuzzed, well-kept C decoder that, given a ``Struct`` of the projected fields,
builds Python objects for those fields only and skips (validating) the rest: 2–2.5× orjson
per line (docs/ingest.md, "Kernels, and why these").

**Framing** (whole-chunk decode, line-exact). ``Decoder.decode_lines`` reads a buffer of
whitespace-separated values; it is not line-aware (``{"ts":1} {"ts":3}`` on one line is two
values, a value may span lines). So every newline between two lines is replaced by
``\\n N \\n``, where ``N`` is a per-process random 62-bit integer (:mod:`secrets`) that never
leaves the process, and the buffer is decoded as a stream of ``Proj | Literal[N]``. It is
accepted only when it decodes and the values alternate ``Proj, N, Proj, …, Proj`` with one
``Proj`` per line. A line cannot forge ``N``; a marker swallowed by a value (a string or array
spanning lines) is not a top-level ``N``, so the count falls short; two values on one line
break the alternation; and with every marker at the top level, the bytes between two markers
— exactly one line — hold exactly one value, as ``orjson.loads(line)`` requires. Otherwise the
chunk is decoded line by line (``Decoder.decode`` refuses trailing values), and a line that
fails goes to the row parser.

**Where msgspec and orjson differ** (the screens):

* integers outside [-2**63, 2**64) are floats to orjson and exact ints to msgspec, and a
  number that overflows float64 (``1e400``, a 400-digit integer) in a field msgspec skips is
  accepted by msgspec but refused by orjson. Both need a run of 19 or more digits or an
  exponent of 3 or more digits: lines with such text (a false alarm only costs speed) go to
  the row parser before msgspec sees them;
* nesting: orjson refuses a depth over 1024; msgspec's limit is Python's recursion limit
  minus the stack in use — usually lower (safe: the row parser reads the line), but higher
  wherever the limit was raised (hypothesis raises it). Lines of 2,000+ bytes holding 1,000+
  ``[``/``{`` go to the row parser (a ``bytes.count``; short lines cannot nest that deep);
  invalid UTF-8 never reaches this kernel (the row path repairs it); lone surrogates, control
  characters, trailing commas, NaN, non-objects, trailing values: both refuse (row parser, for
  the exact reason). Duplicate keys: both keep the last; escaped keys match in both.
* ``ts``: floats as they are; ints as float64 (beyond 2**53: :class:`UnsupportedChunk`);
  strings by :func:`~agent.ingest.records.parse_iso8601`, once per distinct value; anything
  else (missing, null, bool, a bad string) sends the line to the row parser.

Bounds: one decoder per distinct ``want`` (an LRU of :data:`DECODERS`), one framed copy of
the chunk, the decoded objects of the projected fields, the screen's two scratch arrays per
thread (2 bytes per chunk byte, kept) and its candidate offsets (per 1 MiB block of the
chunk, checked 16,384 at a time: ≈ 25 MB at worst, for text made of exponents).
"""

from __future__ import annotations

import secrets
import threading
from dataclasses import dataclass
from functools import lru_cache
from operator import attrgetter
from typing import Any, Literal

import msgspec
import numpy as np
import pyarrow as pa

from agent.ingest.columnar.base import KernelResult, UnsupportedChunk
from agent.ingest.columnar.lines import Lines
from agent.ingest.formats import make_parser
from agent.ingest.records import EncodingRepairs, RecordError, parse_iso8601

TS_FIELD = "ts"
DECODERS = 64  # distinct projections kept (one per query shape; a few KiB each)
_EXACT_INT = 2**53
_INT64, _UINT64 = -(2**63), 2**64  # orjson's ints; beyond, it returns floats
_DEEP = 1000  # brackets in a line from which it may nest beyond orjson's 1024 levels
# the line marker: random per process, never logged, never in a table (see module docstring)
_NONCE = secrets.randbits(62)
_SEP = b"\n%d\n" % _NONCE
_WORD = 0x0101010101010101  # eight digits in a row, in the digit mask viewed as uint64
_NUMBER_START = np.frombuffer(b":,[ \t\r\n", np.uint8)  # what may precede a JSON number
_NOWHERE = np.empty(0, np.int64)
_LOCAL = threading.local()  # the screen's work arrays (2 bytes per chunk byte, per thread)
_BLOCK = 1 << 20  # bytes of the screen's mask whose candidates are taken at once
_BATCH = 1 << 14  # candidates checked at once (a 24-byte look-back each: 3 MiB of offsets)
_MANTISSA = 24  # bytes looked back for a number's start (a longer one is flagged)
_ARROW_ERRORS = (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError)


@dataclass(frozen=True, slots=True)
class _Decoders:
    line: msgspec.json.Decoder  # one line -> Proj
    framed: msgspec.json.Decoder  # framed stream -> Proj | N
    attr: dict[str, str]  # field name -> Proj attribute


@lru_cache(maxsize=DECODERS)
def _decoders(want: frozenset[str]) -> _Decoders:
    # attribute names are generated (field names can be any string); ``rename`` maps them to
    # the JSON keys; gc=False: a Struct of decoded JSON cannot be part of a cycle
    attr = {name: f"f{i}" for i, name in enumerate(sorted(want))}
    proj = msgspec.defstruct(
        "Proj",
        [(a, Any, None) for a in attr.values()],
        rename={a: name for name, a in attr.items()},
        gc=False,
    )
    return _Decoders(
        msgspec.json.Decoder(proj),
        msgspec.json.Decoder(proj | Literal[_NONCE]),  # type: ignore[valid-type]
        attr,
    )


def renamable(name: str) -> bool:
    """Whether msgspec can match the JSON key ``name`` (``defstruct``'s ``rename`` refuses
    names holding ``\\``, ``"`` or a control character: a query on such a key is the row
    parser's)."""
    return not any(c in '\\"' or c < " " for c in name)


def parse_projected(lines: Lines, want: frozenset[str]) -> KernelResult | None:
    """The rows of ``lines`` projected to ``want`` (see module docstring)."""
    if not all(map(renamable, want)):
        return None  # a key msgspec cannot name: the row parser reads the chunk
    n = len(lines)
    chunk = lines.chunk
    dec = _decoders(want)
    blank = lines.blank  # left out: the row path skips blank lines
    flagged = np.zeros(n, bool)
    flagged[np.searchsorted(lines.ends, _screen(chunk), side="right")] = True
    # nesting: orjson refuses a depth over 1024; msgspec's limit is Python's recursion limit
    # minus the stack in use (lower, unless something raised the limit: hypothesis does), so
    # a line that may nest that deep (1000+ brackets, so 2000+ bytes) is the row parser's
    for i in np.flatnonzero(lines.ends - lines.starts >= 2 * _DEEP).tolist():
        raw = lines.raw(i)
        if raw.count(b"[") + raw.count(b"{") >= _DEEP:
            flagged[i] = True
    flagged &= ~blank
    fed = np.flatnonzero(~(blank | flagged))
    records, refused = _decode(dec, chunk, n, fed)
    index = fed[~np.isin(fed, np.asarray(refused, np.int64))] if refused else fed
    names = tuple(want)  # the row path's column order: iteration order of ``want``
    get = {name: attrgetter(dec.attr[name]) for name in names}
    ts, bad = float_timestamps(list(map(get[TS_FIELD], records)))
    to_rows = np.flatnonzero(flagged).tolist() + refused
    if bad:
        to_rows += index[bad].tolist()
        keep = np.ones(len(records), bool)
        keep[bad] = False
        records = [r for r, k in zip(records, keep.tolist(), strict=True) if k]
        ts = [t for t, k in zip(ts, keep.tolist(), strict=True) if k]
        index = index[keep]
    columns = {name: list(map(get[name], records)) for name in names if name != TS_FIELD}
    fallback: list[int] = []
    if to_rows:
        extra, fallback = row_records(lines, sorted(to_rows))
        if extra:
            index, ts, columns = _merge(index, ts, columns, extra)
    arrays = {}
    for name in names:
        if name == TS_FIELD:
            arrays[name] = pa.array(ts, pa.float64())
            continue
        try:
            arrays[name] = pa.array(columns[name])
        except _ARROW_ERRORS:
            return None  # not one Arrow column: the row path decides (it may refuse too)
    return KernelResult(
        pa.table(arrays), np.asarray(index, np.int64), np.asarray(fallback, np.int64), 0
    )


def _scratch(n: int) -> tuple[np.ndarray, np.ndarray]:
    """Two chunk-sized work arrays of this thread, kept between chunks: fresh multi-MiB
    temporaries cost more in page faults (the allocator returns them to the OS) than the
    passes themselves (measured 6.5 ms vs 1 ms per 4 MiB)."""
    bufs = getattr(_LOCAL, "bufs", None)
    if bufs is None or len(bufs[0]) < n:
        bufs = (np.empty(n, np.uint8), np.empty(n, bool))
        _LOCAL.bufs = bufs
    return bufs[0][:n], bufs[1][:n]


def _screen(chunk: bytes) -> np.ndarray:
    """Byte offsets in ``chunk`` of text where msgspec may accept a number orjson refuses
    (float64 overflow, which needs a 3+ digit exponent or 310+ digits; a superset: a false
    alarm only sends a line to the row parser). numpy over the bytes, about 10 passes."""
    a = np.frombuffer(chunk, np.uint8)
    tmp, dig = _scratch(len(a))
    np.subtract(a, 48, out=tmp)
    np.less(tmp, 10, out=dig)  # a digit (the subtraction wraps below "0")
    k = len(a) // 8 * 8
    full = dig[:k].view(np.uint64) == _WORD  # a run of 23+ digits holds two aligned words
    pairs = full[:-1] & full[1:]
    runs = np.flatnonzero(pairs) * 8 if pairs.any() else _NOWHERE
    # exponents: an e/E after a digit (few in text), then exact checks on those positions
    low = tmp[:-1]
    np.bitwise_or(a[1:], 32, out=low)
    after = low.view(bool)
    np.equal(low, 101, out=after)
    np.logical_and(after, dig[:-1], out=after)
    if not after.any():  # ``any`` stops early and skips a pass over the chunk
        return runs
    found = [runs]
    # in blocks, so that pathological text (``1e111e111…``) stays within a bounded memory
    for lo in range(0, len(after), _BLOCK):
        block = after[lo : lo + _BLOCK]
        if block.any():
            e = np.flatnonzero(block) + (lo + 1)
            for b in range(0, len(e), _BATCH):
                found.append(_exponents(a, dig, e[b : b + _BATCH]))
    return np.concatenate(found)


def _exponents(a: np.ndarray, dig: np.ndarray, e: np.ndarray) -> np.ndarray:
    """Of the offsets ``e`` of an e/E after a digit, those that start an exponent of 3+ digits
    in a number that starts where a JSON value may."""
    last = len(a) - 1  # the chunk ends in a newline: clipped indices read a non-digit
    sign = np.isin(a[np.minimum(e + 1, last)], (43, 45))
    d0 = e + 1 + sign
    three = dig[np.minimum(d0, last)] & dig[np.minimum(d0 + 1, last)]
    three &= dig[np.minimum(d0 + 2, last)]
    e = e[three]
    if not len(e):
        return e
    # the number must start where a JSON value may (not ``Mobile/15E148`` in a string): look
    # back over its mantissa (digits, ".", "-") to the byte before it
    back = e[:, None] - np.arange(1, _MANTISSA + 1)
    before = a[np.maximum(back, 0)]
    numeric = ((before - np.uint8(48)) < 10) | (before == 46) | (before == 45)
    numeric[back < 0] = False
    first = np.argmin(numeric, axis=1)  # the first byte back that is not the mantissa's
    stop = before[np.arange(len(e)), first]
    at_start = back[np.arange(len(e)), first] < 0
    flag = numeric.all(axis=1) | at_start | np.isin(stop, _NUMBER_START)
    return e[flag]


def _decode(dec: _Decoders, chunk: bytes, n: int, fed: np.ndarray) -> tuple[list[Any], list[int]]:
    """The decoded records of the ``fed`` lines msgspec accepts (in order), and the fed lines
    it refused (the row parser's to judge)."""
    m = len(fed)
    if not m:
        return [], []
    pieces: list[bytes] | None = None
    if m == n:  # every line: frame the chunk in one replace (a view drops the last marker)
        framed = chunk.replace(b"\n", _SEP)
        buf: Any = memoryview(framed)[: len(framed) - len(_SEP) + 1]
    else:
        pieces = chunk.split(b"\n")
        buf = _SEP.join([pieces[i] for i in fed.tolist()])
    try:
        values = dec.framed.decode_lines(buf)
    except Exception:  # any refusal (a bad line, depth, ...): line by line below
        values = None
    if values is not None and len(values) == 2 * m - 1 and values[1::2].count(_NONCE) == m - 1:
        return values[0::2], []
    if pieces is None:
        pieces = chunk.split(b"\n")
    decode = dec.line.decode
    records: list[Any] = []
    refused: list[int] = []
    for i in fed.tolist():
        try:
            records.append(decode(pieces[i]))
        except Exception:  # msgspec's errors, RecursionError: the row parser's to judge
            refused.append(i)
    return records, refused


def float_timestamps(values: list[Any]) -> tuple[list[float], list[int]]:
    """``ts`` values as floats, and the positions whose line the row parser must judge."""
    kinds = set(map(type, values))
    if kinds <= {float}:
        return values, []
    out: list[float] = []
    bad: list[int] = []
    texts: dict[str, float | None] = {}
    for k, v in enumerate(values):
        t = type(v)
        if t is float:
            out.append(v)
        elif t is int:
            if not _INT64 <= v < _UINT64:  # a float to orjson: the row parser's value
                bad.append(k)
                out.append(0.0)
            elif abs(v) > _EXACT_INT:
                raise UnsupportedChunk(f"integer timestamp {abs(v)} is not exact as float64")
            else:
                out.append(float(v))
        elif t is str:
            if v not in texts:
                try:
                    texts[v] = parse_iso8601(v)
                except RecordError:
                    texts[v] = None
            f = texts[v]
            if f is None:
                bad.append(k)
                out.append(0.0)
            else:
                out.append(f)
        else:  # missing (None), null, bool, list, object: the row parser's reason
            bad.append(k)
            out.append(0.0)
    return out, bad


def row_records(lines: Lines, index: list[int]) -> tuple[list[tuple[int, dict]], list[int]]:
    """The row parser over the lines ``index``: the records it accepts, the lines it refuses
    (``merge_fallback`` parses those again and rejects them with its reason)."""
    parser = make_parser("json", repairs=EncodingRepairs())
    accepted: list[tuple[int, dict]] = []
    refused: list[int] = []
    for i in index:
        try:
            accepted.append((i, parser.parse(lines.raw(i))))
        except Exception:  # the row path's rule: whatever the parser raises rejects the line
            refused.append(i)
    return accepted, refused


def _merge(
    index: np.ndarray,
    ts: list[float],
    columns: dict[str, list[Any]],
    extra: list[tuple[int, dict]],
) -> tuple[np.ndarray, list[float], dict[str, list[Any]]]:
    """The kernel's rows and the row parser's, in line order (Python values: Arrow then infers
    each column's type over all of them, as the row path does)."""
    all_index = np.concatenate([index, np.asarray([i for i, _ in extra], np.int64)])
    order = np.argsort(all_index, kind="stable").tolist()
    extra_ts, bad = float_timestamps([r[TS_FIELD] for _, r in extra])
    if bad:  # cannot happen: the row parser left numbers only
        raise UnsupportedChunk("row parser timestamps are not numbers")
    combined_ts = ts + extra_ts
    ts = list(map(combined_ts.__getitem__, order))
    for name, vals in columns.items():
        combined = vals + [r.get(name) for _, r in extra]
        columns[name] = list(map(combined.__getitem__, order))
    return all_index[order], ts, columns
