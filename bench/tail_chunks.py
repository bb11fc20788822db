"""The chunks a file tail hands the columnar parser, for benchmarks that time the parse
kernels alone.

Contract: :func:`tail_chunks` cuts a finished file's bytes as
:class:`~agent.ingest.tail.FileTail` does on its columnar path: reads of ``read_bytes``
(default the tail's :data:`~agent.ingest.tail.CHUNK_BYTES`, 4 MiB), each chunk the bytes read
so far up to and including their last newline, the partial line after it carried into the next
read; an unterminated last line is a last chunk with a newline appended (a finished file's last
line is a line). Over-long lines are not special-cased: the tail quarantines them before they
reach a chunk, and benchmark data has none.
"""

from __future__ import annotations

from collections.abc import Iterator

from agent.ingest.tail import CHUNK_BYTES


def tail_chunks(data: bytes, read_bytes: int = CHUNK_BYTES) -> Iterator[bytes]:
    """The whole-line chunks of ``data`` (module contract)."""
    rest = b""
    for at in range(0, len(data), read_bytes):
        buf = rest + data[at : at + read_bytes] if rest else data[at : at + read_bytes]
        last_nl = buf.rfind(b"\n")
        if last_nl < 0:
            rest = buf
            continue
        yield buf[: last_nl + 1]
        rest = buf[last_nl + 1 :]
    if rest:
        yield rest + b"\n"
