"""Invalid UTF-8 never loses an event (issue 13, finding 7: a JSON line with one bad byte was
lost as ``bad_json``): the JSON parser, the log parsers, the inputs' counters, the ingest queue,
the fast path and the projected parser all treat a bad byte as U+FFFD and keep the line.

The reference is independent of the implementation: a value built from text pieces with bad
byte runs between them must come back as those pieces, in order, separated by U+FFFD runs
(how many U+FFFD a run yields is the codec's business; that none of the text is lost or
altered is ours)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.ingest.fastpath import install_prefilters
from agent.ingest.formats import make_parser
from agent.ingest.records import EncodingRepairs, RecordError, RecordValidator, repairs_of
from agent.ingest.stream import IngestQueue
from agent.ingest.tail import FileTail
from agent.jobs.job import create_job, parse_spec
from agent.jobs.ql_job import spec_from_query
from agent.ql.pushdown import line_needles
from agent.ql.query import compile_query

FFFD_RUN = re.compile("\ufffd+")


# text that JSON writes verbatim or escaped, never holding U+FFFD itself (the reference splits
# on it) nor surrogates (not encodable)
TEXT = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\ufffd"),
    max_size=12,
)
# A run of bad bytes: bytes that are never part of valid UTF-8 anywhere (stray continuation
# bytes, C0/C1, F5-FF), optionally ending in a truncated sequence (a valid prefix cut short:
# the next piece starts with ASCII or a lead byte, never the missing continuation). All >= 0x80,
# so never a quote, backslash or control byte: a run cannot end the JSON string, and it holds
# no valid character (it would be text, not a bad byte).
NEVER_VALID = [*range(0x80, 0xC0), 0xC0, 0xC1, *range(0xF5, 0x100)]
TRUNCATED = [b"", b"\xc3", b"\xe2\x82", b"\xf0\x9f\x98", b"\xed"]
BAD = st.builds(
    lambda xs, tail: bytes(xs) + tail,
    st.lists(st.sampled_from(NEVER_VALID), max_size=4),
    st.sampled_from(TRUNCATED),
).filter(lambda b: len(b) > 0)


@st.composite
def damaged_value(draw: Any) -> tuple[list[str], bytes]:
    """Text pieces and the JSON string body (no quotes) holding bad byte runs between them."""
    # inner pieces are not empty: two adjacent runs could form a valid character together
    inner = draw(st.lists(TEXT.filter(bool), max_size=3))
    pieces = [draw(TEXT), *inner, draw(TEXT)]
    body = b""
    for i, piece in enumerate(pieces):
        if i:
            body += draw(BAD)
        body += orjson.dumps(piece)[1:-1]  # each piece as JSON writes it (escapes included)
    return pieces, body


@settings(max_examples=300, deadline=None)
@given(damaged_value(), st.integers(0, 2**40), TEXT)
def test_json_line_with_invalid_utf8_in_a_string_is_still_the_event(
    damaged: tuple[list[str], bytes], ts: int, other: str
) -> None:
    pieces, body = damaged
    line = b'{"ts": ' + str(ts).encode() + b', "msg": "' + body + b'", "k": ' + orjson.dumps(other)
    line += b"}"
    parser = RecordValidator()
    rec = parser.parse(line)
    assert rec["ts"] == ts and rec["k"] == other  # the rest of the event, exact
    assert FFFD_RUN.split(rec["msg"]) == pieces  # every piece kept, exact, in order
    assert "\ufffd" in rec["msg"]
    assert parser.repairs.lines == 1


@settings(max_examples=300, deadline=None)
@given(TEXT, st.binary(min_size=1, max_size=8), st.data())
def test_any_high_bytes_anywhere_in_a_string_value_keep_the_event(
    text: str, junk: bytes, data: Any
) -> None:
    """Any bytes >= 0x80 (valid sequences, invalid ones, or a mix) inserted at any character
    boundary of a string value: the event is never lost, the other fields are exact, and the
    text around the insertion is kept exactly."""
    high = bytes(b | 0x80 for b in junk)
    at = data.draw(st.integers(0, len(text)))
    body = orjson.dumps(text[:at])[1:-1] + high + orjson.dumps(text[at:])[1:-1]
    rec = RecordValidator().parse(b'{"ts": 5, "msg": "' + body + b'", "n": [1, 2]}')
    assert rec["ts"] == 5 and rec["n"] == [1, 2]
    # a decoder resumes at the byte that broke a sequence, and a complete character takes no
    # more continuation bytes: the text on both sides of the insertion survives intact
    msg = rec["msg"]
    assert msg.startswith(text[:at]) and msg.endswith(text[at:])
    assert len(msg) >= len(text) + 1


def test_a_repaired_line_by_hand() -> None:
    parser = RecordValidator()
    rec = parser.parse(b'{"ts": 1, "msg": "caf\xc3 au \xff\xfelait\xe2\x82"}')
    assert rec == {"ts": 1, "msg": "caf\ufffd au \ufffd\ufffdlait\ufffd"}
    assert parser.repairs.lines == 1


def test_a_bad_byte_outside_a_string_is_still_bad_json_and_not_counted() -> None:
    parser = RecordValidator()
    with pytest.raises(RecordError) as info:
        parser.parse(b'{"ts": 1,\xff "msg": "x"}')
    assert info.value.reason == "bad_json" and "invalid UTF-8 replaced" in str(info.value)
    with pytest.raises(RecordError) as info:
        parser.parse(b'{"ts": 1, "msg": "x"')  # valid UTF-8, invalid JSON: unchanged message
    assert info.value.reason == "bad_json" and "replaced" not in str(info.value)
    assert parser.repairs.lines == 0


@pytest.mark.parametrize(
    ("fmt", "line", "field", "want"),
    [
        ("raw", b"hello \xff world", "body", "hello \ufffd world"),
        (
            "nginx",
            b'1.2.3.4 - - [01/Jan/2024:00:00:00 +0000] "GET /caf\xe9 HTTP/1.1" 200 1',
            "path",
            "/caf\ufffd",
        ),
        ("syslog", b"<13>Jan  1 00:00:00 host app: caf\xe9", "body", "caf\ufffd"),
    ],
)
def test_log_formats_replace_and_count_alike(fmt: str, line: bytes, field: str, want: str) -> None:
    repairs = EncodingRepairs()
    parser = make_parser(fmt, repairs=repairs)
    assert parser.parse(line)[field] == want
    assert parser.parse(line.decode("latin-1").encode("utf-8"))  # valid: not counted
    assert repairs.lines == 1 and repairs_of(parser) == 1


def test_file_tail_keeps_the_line_and_reports_the_repair(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    lines = [b'{"ts": 1, "m": "ok"}', b'{"ts": 2, "m": "bad \xff byte"}', b'{"ts": 3, "m": "x"}']
    path.write_bytes(b"\n".join(lines) + b"\n")
    tail = FileTail(path)
    got = tail.poll()
    assert [r["ts"] for r in got] == [1, 2, 3]
    assert got[1]["m"] == "bad \ufffd byte"
    stats = tail.stats()
    assert stats["bad_encoding_repaired"] == 1
    assert stats["rejected"] == 0 and stats["quarantine"]["total"] == 0


def test_ingest_queue_accepts_bytes_lines_with_a_bad_byte() -> None:
    queue = IngestQueue()
    result = queue.put_lines([b'{"ts": 1, "m": "a\xffb"}', b'{"ts": 2}'])
    assert (result.accepted, result.rejected) == (2, 0)
    assert [r.get("m") for r in queue.poll()] == ["a\ufffdb", None]
    assert queue.stats()["bad_encoding_repaired"] == 1


def test_no_needle_holds_u_fffd_so_the_fast_path_never_skips_a_repaired_match() -> None:
    """A line with a bad byte matches ``msg = 'a\\ufffdb'`` once decoded, but holds no
    ``EF BF BD`` bytes: such a literal must not become a needle (else the line is skipped)."""
    where = compile_query("SELECT count(*) AS n FROM web WHERE msg = 'a\ufffdb'").query.where
    assert line_needles(where, "json") is None
    where = compile_query("SELECT count(*) AS n FROM web WHERE msg LIKE '%\ufffd%'").query.where
    assert line_needles(where, "json") is None
    # other literals are still pushed down
    where = compile_query("SELECT count(*) AS n FROM web WHERE msg = 'ab'").query.where
    assert line_needles(where, "json") is not None


def _ql_job(query: str) -> Any:
    return create_job(parse_spec(spec_from_query("q", "t", query)))


def test_fast_path_and_projection_keep_the_repaired_lines_and_one_count(tmp_path: Path) -> None:
    """An access log read through the prefilter and the projected parser: the line with a bad
    byte is kept and counted once, in the input's count, whichever parser read it."""
    path = tmp_path / "access.log"
    good = b'1.2.3.4 - - [01/Jan/2024:00:00:00 +0000] "GET /cart HTTP/1.1" 200 1'
    bad = b'1.2.3.4 - - [01/Jan/2024:00:00:01 +0000] "GET /cart\xff HTTP/1.1" 200 1'
    other = b'1.2.3.4 - - [01/Jan/2024:00:00:02 +0000] "GET /home HTTP/1.1" 200 1'
    path.write_bytes(b"\n".join([good, bad, other]) + b"\n")
    tail = FileTail(path, parser=make_parser("nginx"))
    job = _ql_job("SELECT path, count(*) AS n FROM web WHERE path LIKE '/cart%' GROUP BY path")

    class Worker:
        def __init__(self) -> None:
            self.job = job

    class Runtime:
        inputs = ("web",)
        worker = Worker()

    class Cfg:
        format = "nginx"

    install_prefilters({"web": tail}, {"web": Cfg()}, [Runtime()])
    assert tail.prefilter is not None and type(tail.parser).__name__ == "ProjectedAccessLogParser"
    got = tail.poll()
    assert sorted(r["path"] for r in got) == ["/cart", "/cart\ufffd"]
    assert tail.stats()["bad_encoding_repaired"] == 1
    assert tail.stats()["prefiltered"] == 1
