"""Parsing benchmark: the columnar kernels (:mod:`agent.ingest.columnar`) against the row
parsers (:mod:`agent.ingest.formats`), side by side on the same lines, one core.

For each input (nginx combined click lines from :class:`~apps.workload.ClickstreamGenerator`,
the same with a quarter of the user agents non-ASCII as nginx escapes them (``\\xHH``), the
same lines in nginx's ``main`` format with ``$request_time $upstream_response_time`` (``-``
and retry lists among them) parsed by the custom ``log_format`` parser, the plain combined
lines read by that parser given combined's format string, JSON lines of the same clicks,
syslog RFC 5424 and RFC 3164, raw text) it measures, best of ``--repeats``:

* ``row`` — the row parser's ``parse`` on every line (split into lines first, as the tail);
* ``columnar`` — the file tail's 4 MiB chunks of whole lines (``bench/tail_chunks.py``) +
  :func:`~agent.ingest.columnar.parse.parse_chunk`, every column;
* ``columnar_projected`` — the same with only the fields a typical query reads
  (``status, bytes`` for access logs; ``status, request_time, upstream_response_time`` for
  the ``main`` format; ``directory, action, price`` for JSON lines).

Rates are lines per CPU-second of this process (``time.process_time``), best of the repeats:
on a shared machine wall time would also count the waits for a core; one core means one.

Every run checks that both paths accept the same number of lines and reject the same ones.
Prints one JSON document (lines/s per path and input, the speed-up, peak RSS).

    python bench/columnar_parse_bench.py            # 400,000 lines per input
    python bench/columnar_parse_bench.py --quick    # 50,000 lines per input
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from nginx_main import MAIN, main_lines  # bench/
from tail_chunks import tail_chunks  # bench/

from agent.ingest.columnar.parse import parse_chunk
from agent.ingest.parsers import Format, make_parser
from agent.ingest.tail import CHUNK_BYTES
from agent.log_format import PREDEFINED, LogFormat
from apps.workload import ClickstreamGenerator, access_line, json_line

START = 1_800_000_000
COMBINED_AS_FORMAT = LogFormat("nginx", PREDEFINED[("nginx", "combined")])
PROJECTED: dict[Format, frozenset[str]] = {
    "nginx": frozenset({"status", "bytes"}),
    MAIN: frozenset({"status", "request_time", "upstream_response_time"}),
    "json": frozenset({"directory", "action", "price"}),
}
_AGENTS = ("Mozilla/5.0 (Linux; Android 14; Pixel 8) Müller-Browser/1.0 ☃", "Opera/9.80 café")


def nginx_escape(text: str) -> str:
    """nginx's escaping of a logged variable: ``"``, ``\\``, controls and bytes >= 0x7f."""
    return "".join(
        f"\\x{b:02X}" if b in (0x22, 0x5C) or b < 0x20 or b >= 0x7F else chr(b)
        for b in text.encode()
    )


def inputs(n: int) -> dict[str, tuple[Format, bytes]]:
    """Each input's format and bytes."""
    events = ClickstreamGenerator(seed=1, start=START, rate=n / 250).take(n)
    nginx = [access_line(e) for e in events]
    escaped = []
    for i, line in enumerate(nginx):
        if i % 4 == 0:  # a quarter of the user agents are not ASCII
            head, _, _ = line.rpartition(' "')
            line = f'{head} "{nginx_escape(_AGENTS[i % 8 // 4])}"'
        escaped.append(line)
    syslog5424 = [
        f"<{134 + i % 8}>1 2026-11-21T12:{i // 60 % 60:02d}:{i % 60:02d}.{i % 1000:03d}Z "
        f'web{i % 7} nginx {1000 + i % 50} ACCESS [req@1 id="{i}" ms="{i % 300}"] '
        f"GET /product/{i % 977} 200"
        for i in range(n)
    ]
    syslog3164 = [
        f"<{30 + i % 8}>Nov {1 + i % 28:2d} 12:{i // 60 % 60:02d}:{i % 60:02d} web{i % 7} "
        f"sshd[{100 + i % 900}]: Accepted publickey for u{i % 300} from 10.0.{i % 255}.1"
        for i in range(n)
    ]

    def blob(lines: list[str]) -> bytes:
        return "".join(x + "\n" for x in lines).encode()

    return {
        "nginx": ("nginx", blob(nginx)),
        "nginx_escaped_ua": ("nginx", blob(escaped)),
        "nginx_main_log_format": (MAIN, blob(main_lines(nginx))),
        "nginx_combined_as_log_format": (COMBINED_AS_FORMAT, blob(nginx)),
        "json": ("json", blob([json_line(e) for e in events])),
        "syslog_5424": ("syslog", blob(syslog5424)),
        "syslog_3164": ("syslog", blob(syslog3164)),
        "raw": ("raw", blob(nginx)),
    }


def best_of(repeats: int, fn: Callable[[], Any]) -> tuple[float, Any]:
    """The best CPU time of ``repeats`` runs (process time: on a machine shared with other
    work, wall time also counts the waits for a core) and the last result."""
    best, out = float("inf"), None
    for _ in range(repeats):
        t0 = time.process_time()
        out = fn()
        best = min(best, time.process_time() - t0)
    return best, out


def row_run(fmt: Format, data: bytes) -> tuple[int, int]:
    """(accepted, rejected) lines by the row parser."""
    parse = make_parser(fmt).parse
    ok = bad = 0
    for line in data.split(b"\n")[:-1]:
        try:
            parse(line)  # the record is dropped at once: memory stays the columnar run's
            ok += 1
        except Exception:
            bad += 1
    return ok, bad


def columnar_run(fmt: Format, data: bytes, fields: frozenset[str] | None) -> tuple[int, int]:
    ok = bad = 0
    for chunk in tail_chunks(data):
        got = parse_chunk(fmt, chunk, fields=fields)
        ok += got.table.num_rows
        bad += len(got.rejects)
    return ok, bad


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="50,000 lines per input")
    ap.add_argument("--lines", type=int, default=None)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--only", nargs="*", default=None, help="inputs to run (default: all)")
    args = ap.parse_args()
    n = args.lines or (50_000 if args.quick else 400_000)
    results: dict[str, Any] = {}
    agree = True
    for name, (fmt, data) in inputs(n).items():
        if args.only and name not in args.only:
            continue
        lines = data.count(b"\n")
        t_row, row = best_of(args.repeats, lambda f=fmt, d=data: row_run(f, d))
        t_col, col = best_of(args.repeats, lambda f=fmt, d=data: columnar_run(f, d, None))
        entry: dict[str, Any] = {
            "format": str(fmt),
            "lines": lines,
            "mb": round(len(data) / 1e6, 1),
            "row_lines_per_s": round(lines / t_row),
            "columnar_lines_per_s": round(lines / t_col),
            "speedup": round(t_row / t_col, 2),
            "agree": row == col,
        }
        agree &= row == col
        fields = PROJECTED.get(fmt)
        if fields is not None:
            t_proj, proj = best_of(
                args.repeats, lambda f=fmt, d=data, x=fields: columnar_run(f, d, x)
            )
            entry["projected_fields"] = sorted(fields)
            entry["columnar_projected_lines_per_s"] = round(lines / t_proj)
            entry["agree"] &= proj == row
            agree &= proj == row
        results[name] = entry
    print(
        json.dumps(
            {
                "bench": "columnar_parse",
                "lines_per_input": n,
                "chunk_bytes": CHUNK_BYTES,
                "machine": {"python": platform.python_version(), "cpus": os.cpu_count()},
                "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
                "all_agree": agree,
                "results": results,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
