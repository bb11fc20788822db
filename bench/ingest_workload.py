"""The ingest benchmark's workload (bench/ingest_bench.py): its queries, its data files, and
the exact answers every engine is checked against.

Contract: :func:`generate` writes N click events of :class:`~apps.workload.ClickstreamGenerator`
(seed 1, event times over :data:`SPAN` seconds from :data:`START`, a multiple of 300 s) as JSON
lines, nginx access lines and nginx lines whose path names the directory and product (one file
each, plus the same lines split into files for Spark's streaming source), and returns their
paths with the reference answers computed from the events themselves (Counters, never an
engine's output). :func:`agrees` and :func:`full_agrees` say whether an engine's answer is the
reference's (counts equal; ties at a top-k cut may order differently; sums within 1e-6).
:data:`QUERIES` are the selective ``micro`` query per format, :data:`FULL` the full-parse
queries; :data:`WINDOW_EPOCH` and :data:`FULL_EPOCH` the epochs whose results hold the file.
"""

from __future__ import annotations

import zlib
from collections import Counter
from pathlib import Path
from typing import Any

from apps.workload import ClickstreamGenerator, access_line, json_line

START = 1_699_999_800.0  # a multiple of 300 s: one window holds the 250 s of data
SPAN = 250.0
QUERIES = {
    "json": (
        "SELECT product_id AS product, count(*) AS clicks FROM clicks "
        "WHERE directory = 'Video Games' AND action = 'click' "
        "GROUP BY product_id ORDER BY clicks DESC LIMIT 10 WINDOW 300 s EVERY 30 s"
    ),
    "nginx": (
        "SELECT query.id AS product, count(*) AS clicks FROM clicks "
        "WHERE query.dir = 'video-games' AND query.action = 'click' "
        "GROUP BY query.id ORDER BY clicks DESC LIMIT 10 WINDOW 300 s EVERY 30 s"
    ),
}
WINDOW_EPOCH = int(START // 30) + 8  # the last epoch with data: its window holds all of it
FULL = {
    "micro": {"fmt": ("json", "nginx")},
    "status_bytes": {
        "fmt": ("nginx", "nginx_esc"),
        "ql": "SELECT status, count(*) AS requests, sum(bytes) AS bytes FROM clicks "
        "GROUP BY status WINDOW 300 s",
    },
    "directory_action": {
        "fmt": ("json",),
        "ql": "SELECT directory, action, count(*) AS n, sum(price) AS revenue FROM clicks "
        "GROUP BY directory, action WINDOW 300 s",
    },
    "top_paths": {
        "fmt": ("paths",),
        "ql": "SELECT path, count(*) AS requests FROM clicks WHERE path LIKE '/b%/P%' "
        "GROUP BY path ORDER BY requests DESC LIMIT 20 WINDOW 300 s",
    },
}
FULL_EPOCH = int(START // 300)


def generate(n: int, out: Path, stream_files: int) -> dict[str, Any]:
    """Write both formats (one file each, plus the same lines split for streaming); return the
    paths and the reference Counters."""
    events = ClickstreamGenerator(seed=1, start=START, rate=n / SPAN).take(n)
    ref = {
        "json": Counter(
            e["product_id"]
            for e in events
            if e["directory"] == "Video Games" and e["action"] == "click"
        ),
        "nginx": Counter(
            e["product_id"]
            for e in events
            if e["directory"] == "Video Games" and e["action"] == "click"
        ),
    }
    paths: dict[str, Any] = {}
    for fmt, render in (("json", json_line), ("nginx", access_line)):
        lines = [render(e) + "\n" for e in events]
        path = out / f"clicks.{fmt}"
        path.write_text("".join(lines))
        sdir = out / f"stream-{fmt}"
        sdir.mkdir()
        per = -(-len(lines) // stream_files)
        for i in range(stream_files):
            (sdir / f"part-{i:04d}.{fmt}").write_text("".join(lines[i * per : (i + 1) * per]))
        paths[fmt] = {"file": path, "stream_dir": sdir, "bytes": path.stat().st_size}
    for fmt, render in (("paths", path_line), ("nginx_esc", escaped_line)):
        _write(fmt, [render(e) + "\n" for e in events], out, stream_files, paths)
    return {"paths": paths, "ref": ref, "full_ref": full_reference(events)}


def _write(fmt: str, lines: list[str], out: Path, stream_files: int, paths: dict[str, Any]) -> None:
    """``lines`` as one file and split into ``stream_files`` files for streaming."""
    path = out / f"{fmt}.nginx"
    path.write_text("".join(lines))
    sdir = out / f"stream-{fmt}"
    sdir.mkdir()
    per = -(-len(lines) // stream_files)
    for i in range(stream_files):
        (sdir / f"part-{i:04d}.nginx").write_text("".join(lines[i * per : (i + 1) * per]))
    paths[fmt] = {"file": path, "stream_dir": sdir, "bytes": path.stat().st_size}


def nginx_escape(text: str) -> str:
    """``text`` as nginx logs a variable (``ngx_http_log_escape``): ``"``, ``\\``, controls
    and every byte from 0x7f up as ``\\xHH``."""
    return "".join(
        f"\\x{b:02X}" if b in (0x22, 0x5C) or b < 0x20 or b >= 0x7F else chr(b)
        for b in text.encode()
    )


#: user agents nginx writes with escapes (non-ASCII app names, a quoted word)
ESCAPED_AGENTS = tuple(
    nginx_escape(ua)
    for ua in (
        "Mozilla/5.0 (Linux; Android 13; 小米 13) MicroMessenger/8.0 微信",
        "Mozilla/5.0 (iPhone) Яндекс.Браузер/23.9",
        'curl/8.4 "scripted"',
        "Mozilla/5.0 (Windows NT 10.0) Edge/120 café",
    )
)


def escaped_line(click: dict[str, Any]) -> str:
    """:func:`~apps.workload.access_line` as a real nginx log has it (``status_bytes`` on
    ``nginx_esc``): one user in 20 (by a hash of the id, so Zipf-weighted by activity) sends
    a non-ASCII or quoted user agent, one in 97 requests a raw UTF-8 path, both written with
    nginx's own ``\\xHH`` escapes (≈ 7 % of lines); status and size are unchanged."""
    line = access_line(click)
    h = zlib.crc32(click["user_id"].encode())
    if h % 20 == 0:
        head = line.rsplit(' "', 1)[0]
        line = f'{head} "{ESCAPED_AGENTS[h // 20 % len(ESCAPED_AGENTS)]}"'
    if h % 97 == 1:
        line = line.replace("GET /product?", f"GET /produkt/{nginx_escape('größe')}?", 1)
    return line


def top10(counter: Counter[str]) -> list[tuple[str, int]]:
    return sorted(counter.items(), key=lambda kv: (-kv[1], kv[0]))[:10]


def agrees(rows: list[tuple[str, int]], ref: Counter[str]) -> bool:
    """Same top-10 counts as the reference, and each row's count is its product's."""
    want = [c for _, c in top10(ref)]
    return [c for _, c in rows] == want and all(ref[p] == c for p, c in rows)


def path_line(click: dict[str, Any]) -> str:
    """An access line whose path names the directory and product (for ``top_paths``)."""
    line = access_line(click)
    slug = line.split("&dir=", 1)[1].split("&", 1)[0]
    return line.replace(
        f"/product?id={click['product_id']}&dir={slug}&", f"/{slug}/{click['product_id']}?", 1
    )


def full_reference(events: list[dict[str, Any]]) -> dict[str, Any]:
    """Each query's answer computed from the events (the engines must all agree with it)."""
    from apps.workload import directory_slug

    status: Counter[int] = Counter()
    size: Counter[int] = Counter()
    dir_action: Counter[tuple[str, str]] = Counter()
    revenue: dict[tuple[str, str], float] = {}
    paths: Counter[str] = Counter()
    for e in events:
        line = access_line(e)
        code, nbytes = line.split('" ', 1)[1].split(" ", 2)[:2]
        status[int(code)] += 1
        size[int(code)] += int(nbytes)
        key = (e["directory"], e["action"])
        dir_action[key] += 1
        revenue[key] = revenue.get(key, 0.0) + e["price"]
        path = f"/{directory_slug(e['directory'])}/{e['product_id']}"
        if path.startswith("/b") and "/P" in path[2:]:
            paths[path] += 1
    return {
        "status_bytes": {(k,): (status[k], size[k]) for k in status},
        "directory_action": {k: (dir_action[k], revenue[k]) for k in dir_action},
        "top_paths": sorted(paths.items(), key=lambda kv: (-kv[1], kv[0]))[:20],
        "top_paths_counts": paths,
    }


def full_agrees(query: str, got: Any, ref: dict[str, Any]) -> bool:
    """``got``: {key tuple: values tuple} (group queries) or [(path, count)] (top_paths)."""
    if query == "top_paths":
        counts = ref["top_paths_counts"]
        want = [c for _, c in ref["top_paths"]]
        return [c for _, c in got] == want and all(counts[p] == c for p, c in got)
    want = ref[query]
    if got.keys() != want.keys():
        return False
    for k, v in got.items():
        w = want[k]
        if v[0] != w[0] or abs(v[1] - w[1]) > 1e-6 * max(1.0, abs(w[1])):
            return False
    return True
