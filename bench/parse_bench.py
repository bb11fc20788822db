"""Line-parser and workload-generator throughput, each beside a baseline measured in the same run.

Usage::

    python bench/parse_bench.py            # 200k lines per format
    python bench/parse_bench.py --quick    # 20k lines per format

Prints one JSON object: per format, lines/s of the agent's parser (agent/ingest/formats.py) and of a
baseline over the same lines:

* json: ``orjson.loads`` alone (no validation) vs ``RecordValidator.parse``;
* nginx_main: nginx's ``main`` format (combined + ``$request_time $upstream_response_time``,
  ``-`` and retry lists among them) by the custom ``log_format`` parser (``LogFormatParser``)
  vs the built-in ``AccessLogParser`` reading the same lines (the latencies land untyped in
  its ``extra``); the columnar path is in ``bench/columnar_parse_bench.py``;
* nginx: a naive ``str.split``-based parser (splits on quotes and spaces, converts status,
  bytes and the time with ``datetime.strptime`` per line - no regex, no cache) and a plain
  ``re`` parser without the per-second timestamp cache, vs ``AccessLogParser``;
* syslog 5424 / 3164: ``SyslogParser`` vs a one-regex baseline without structured-data or
  timestamp handling beyond ``datetime.fromisoformat`` / ``strptime``;
* raw: ``RawParser`` vs ``bytes.decode``;

and events/s of the click and tweet generators (plus rendering to JSON / access lines). Lines
come from the workload generator (seeded), so runs are comparable. Best of 3 repetitions.
"""

from __future__ import annotations

import argparse
import json
import platform
import re
import sys
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import orjson
from nginx_main import MAIN, main_lines  # bench/

from agent.ingest.formats import AccessLogParser, RawParser, SyslogParser
from agent.ingest.log_format import LogFormatParser
from agent.ingest.records import RecordValidator
from apps.workload import (
    ClickstreamGenerator,
    TweetGenerator,
    access_line,
    clf_time,
    json_line,
)

START = 1_763_000_000.0


def rate(fn: Callable[[Any], Any], lines: list[Any], reps: int = 3) -> float:
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        for line in lines:
            fn(line)
        best = min(best, time.perf_counter() - t0)
    return len(lines) / best


# ---- baselines ----------------------------------------------------------------------------------


def naive_access(line: bytes) -> dict[str, Any]:
    text = line.decode()
    head, request, rest = text.split('"', 2)[0], text.split('"')[1], text.split('"', 2)[2]
    ip, _, user, ts = head.split(" ", 3)
    status, size = rest.split()[:2]
    parts = text.split('"')
    t = datetime.strptime(ts.strip()[1:-1], "%d/%b/%Y:%H:%M:%S %z").timestamp()
    return {
        "ts": t,
        "source_ip": ip,
        "remote_user": user,
        "request": request,
        "status": int(status),
        "bytes": int(size),
        "referer": parts[3] if len(parts) > 3 else None,
        "user_agent": parts[5] if len(parts) > 5 else None,
    }


_PLAIN_RE = re.compile(
    r'(\S+) \S+ (\S+) \[([^\]]+)\] "([^"]*)" (\d{3}) (\d+|-) "([^"]*)" "([^"]*)"'
)


def plain_re_access(line: bytes) -> dict[str, Any]:
    m = _PLAIN_RE.match(line.decode())
    assert m is not None
    ip, _user, ts, request, status, _size, _ref, ua = m.groups()
    t = datetime.strptime(ts, "%d/%b/%Y:%H:%M:%S %z").timestamp()
    return {"ts": t, "source_ip": ip, "request": request, "status": int(status), "ua": ua}


_5424_RE = re.compile(r"<(\d+)>1 (\S+) (\S+) (\S+) (\S+) (\S+) (-|\[.*\]) ?(.*)")


def regex_5424(line: bytes) -> dict[str, Any]:
    m = _5424_RE.match(line.decode())
    assert m is not None
    pri, ts, _host, _app, _procid, _msgid, sd, msg = m.groups()
    return {"ts": datetime.fromisoformat(ts).timestamp(), "pri": int(pri), "msg": msg, "sd": sd}


_3164_RE = re.compile(r"<(\d+)>(\w{3} [ \d]\d \d\d:\d\d:\d\d) (\S+) ([^:\[]+)(?:\[(\d+)\])?: (.*)")


def regex_3164(line: bytes) -> dict[str, Any]:
    m = _3164_RE.match(line.decode())
    assert m is not None
    pri, ts, host, app, _pid, msg = m.groups()
    t = datetime.strptime("2026 " + ts, "%Y %b %d %H:%M:%S").timestamp()
    return {"ts": t, "pri": int(pri), "host": host, "app": app, "msg": msg}


# ---- inputs -------------------------------------------------------------------------------------


def sample_lines(n: int) -> dict[str, list[bytes]]:
    clicks = ClickstreamGenerator(seed=1, start=START, rate=200.0).take(n)
    sd = '[origin@32473 ip="10.0.0.1" software="app"][meta@32473 sequenceId="{i}"]'
    return {
        "json": [json_line(c).encode() for c in clicks],
        "nginx": [access_line(c).encode() for c in clicks],
        "nginx_main": [x.encode() for x in main_lines([access_line(c) for c in clicks])],
        "syslog5424": [
            (
                f"<165>1 2026-11-21T10:{i // 60 % 60:02d}:{i % 60:02d}.{i % 1000:03d}Z web-{i % 8} "
                f"shop {1000 + i % 50} ID{i % 7} {sd.format(i=i)} \ufeffuser {c['user_id']} "
                f"{c['action']} {c['product_id']}"
            ).encode()
            for i, c in enumerate(clicks)
        ],
        "syslog3164": [
            (
                f"<34>{clf_time(c['ts'])[3:6]} 21 {clf_time(c['ts'])[12:20]} web-{i % 8} "
                f"shop[{1000 + i % 50}]: user {c['user_id']} {c['action']} {c['product_id']}"
            ).encode()
            for i, c in enumerate(clicks)
        ],
        "raw": [f"user {c['user_id']} {c['action']} {c['product_id']}".encode() for c in clicks],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="20k lines per format")
    ap.add_argument("--lines", type=int, help="lines per format (default 200k, quick 20k)")
    args = ap.parse_args()
    n = args.lines or (20_000 if args.quick else 200_000)
    lines = sample_lines(n)
    syslog = SyslogParser(clock=lambda: START)
    cases: dict[str, dict[str, Callable[[bytes], Any]]] = {
        "json": {
            "elf RecordValidator": RecordValidator().parse,
            "baseline orjson.loads": orjson.loads,
        },
        "nginx": {
            "elf AccessLogParser": AccessLogParser().parse,
            "baseline str.split + strptime": naive_access,
            "baseline plain re + strptime": plain_re_access,
        },
        "nginx_main": {
            "elf LogFormatParser (main)": LogFormatParser(MAIN).parse,
            "elf AccessLogParser (latencies untyped in extra)": AccessLogParser().parse,
        },
        "syslog5424": {
            "elf SyslogParser": syslog.parse,
            "baseline one re + fromisoformat": regex_5424,
        },
        "syslog3164": {"elf SyslogParser": syslog.parse, "baseline one re + strptime": regex_3164},
        "raw": {"elf RawParser": RawParser().parse, "baseline bytes.decode": bytes.decode},
    }
    out: dict[str, Any] = {
        "bench": "parse_bench",
        "lines_per_format": n,
        "python": platform.python_version(),
        "parsers_lines_per_s": {},
    }
    for fmt, fns in cases.items():
        for fn in fns.values():  # every parser accepts every line of its format
            fn(lines[fmt][0])
        out["parsers_lines_per_s"][fmt] = {
            name: round(rate(fn, lines[fmt])) for name, fn in fns.items()
        }
    m = max(n // 4, 5000)

    def gen_rate(make: Callable[[], Any], render: Callable[[Any], Any] | None = None) -> float:
        best = float("inf")
        for _ in range(3):
            t0 = time.perf_counter()
            for ev in make():
                if render is not None:
                    render(ev)
            best = min(best, time.perf_counter() - t0)
        return round(m / best)

    out["generator_events_per_s"] = {
        "clicks": gen_rate(lambda: ClickstreamGenerator(seed=1, start=START, limit=m)),
        "clicks as nginx lines": gen_rate(
            lambda: ClickstreamGenerator(seed=1, start=START, limit=m), access_line
        ),
        "clicks as json lines": gen_rate(
            lambda: ClickstreamGenerator(seed=1, start=START, limit=m), json_line
        ),
        "tweets": gen_rate(lambda: TweetGenerator(seed=1, start=START, limit=m)),
        "baseline random.random() x3 per event": gen_rate(lambda: _three_randoms(m)),
    }
    print(json.dumps(out, indent=2))


def _three_randoms(m: int) -> Any:
    import random

    r = random.Random(1)
    for _ in range(m):
        yield (r.random(), r.random(), r.random())


if __name__ == "__main__":
    main()
