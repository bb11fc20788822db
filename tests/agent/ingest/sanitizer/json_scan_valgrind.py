"""Run by hand under valgrind (docs/ingest.md, "JSON lines in C"): the C JSON scanner on
mutated and random lines (each also alone in an exact-size bytes object, so a read past a
line is a read past its allocation) and ``parse_chunk`` on them, deep lines included.

    PYTHONMALLOC=malloc valgrind -q --error-exitcode=1 --leak-check=no \\
        --suppressions=tests/agent/ingest/sanitizer/cpython.supp \\
        python tests/agent/ingest/sanitizer/json_scan_valgrind.py 3000
"""

from __future__ import annotations

import contextlib
import random
import sys

import numpy as np
import orjson

from agent.ingest.columnar import json_native
from agent.ingest.columnar.lines import split_lines
from agent.ingest.columnar.parse import UnsupportedChunk, parse_chunk

NAMES = (b"a", b"ts", b"b", b"d", b"e", b"")


def scan(chunk: bytes, starts: np.ndarray, ends: np.ndarray) -> None:
    n, f = len(starts), len(NAMES)
    json_native.SCANNER.scan(  # type: ignore[union-attr]
        chunk, starts, ends, NAMES, np.empty(f * n, np.uint8), np.empty(f * n, np.int64),
        np.empty(f * (n + 1), np.int32), np.empty(n, np.uint8),
    )  # fmt: skip


def mutated(rnd: random.Random, count: int) -> list[bytes]:
    obj = {"ts": 1.5, "a": 'x\u00e9"y\U0001f600', "b": [1, {"c": None}], "d": -2e-3,
           "e": 12345678901234567}  # fmt: skip
    base = orjson.dumps(obj)
    alphabet = b'{}[]":,\\u0aeE-+.9 \t\r\x00\x1f\x7f\x80\xc3\xa9\xed\xf4\xff'
    lines = []
    for _ in range(count):
        line = bytearray(base)
        for _ in range(rnd.randint(1, 4)):
            i, op = rnd.randrange(len(line) + 1), rnd.randrange(4)
            if op == 0 and i < len(line):
                line[i] = rnd.choice(alphabet)
            elif op == 1:
                line.insert(i, rnd.choice(alphabet))
            elif op == 2 and i < len(line):
                del line[i]
            else:
                del line[i:]
        lines.append(bytes(line).replace(b"\n", b""))
    return lines


def main(count: int) -> None:
    assert json_native.SCANNER is not None, "the extension is not built"
    rnd = random.Random(27)
    lines = mutated(rnd, count)
    for x in lines:  # alone: the line's end is its allocation's
        scan(x, np.zeros(1, np.int64), np.full(1, len(x), np.int64))
    chunk = b"\n".join(lines) + b"\n"
    split = split_lines(chunk)
    scan(chunk, split.starts, split.ends)
    for _ in range(count):
        raw = bytes(rnd.getrandbits(8) for _ in range(rnd.randint(0, 60)))
        b = sorted(rnd.randint(0, len(raw)) for _ in range(2 * rnd.randint(0, 4)))
        scan(raw, np.asarray(b[0::2], np.int64), np.asarray(b[1::2], np.int64))
    valid = []
    for x in lines:  # parse_chunk gets valid UTF-8 only (the row path repairs the rest)
        try:
            x.decode()
            valid.append(x)
        except UnicodeDecodeError:
            pass
    deep = [b'{"ts":1,"a":' + b"[" * d + b"]" * d + b"}" for d in (511, 512, 513, 1024)]
    for fields in ({"a"}, {"a", "b", "d", "e"}):
        for at in range(0, len(valid), 500):
            with_deep = b"\n".join(valid[at : at + 500] + deep) + b"\n"
            with contextlib.suppress(UnsupportedChunk):
                parse_chunk("json", with_deep, fields=frozenset(fields))
    print(f"done: {count} mutated lines, {count} random chunks, {len(valid)} through parse_chunk")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 3000)
