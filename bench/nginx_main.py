"""The nginx ``main`` format case the parse benchmarks share (``parse_bench.py``,
``columnar_parse_bench.py``): nginx's combined plus ``$request_time
$upstream_response_time``, the format real sites write, and those two variables as nginx
writes them, so both benchmarks parse the same lines.

Contract: :data:`MAIN` is the format; :func:`main_lines` appends :func:`latencies` of line
``i`` to the ``i``-th combined line (deterministic: runs are comparable).
"""

from __future__ import annotations

from agent.log_format import PREDEFINED, LogFormat

MAIN = LogFormat(
    "nginx", PREDEFINED[("nginx", "combined")] + " $request_time $upstream_response_time"
)


def latencies(i: int) -> str:
    """``$request_time $upstream_response_time`` as nginx writes them: a static file every
    10th line (no upstream: ``-``), a retried upstream every 7th, an internal redirect every
    50th."""
    request = i * 37 % 2000
    upstream = f"{max(request - 1, 0) / 1000:.3f}"
    if i % 10 == 0:
        upstream = "-"
    elif i % 7 == 0:
        upstream = f"0.{i % 1000:03d}, {upstream}"
    elif i % 50 == 1:
        upstream = f"{upstream} : 0.{i % 100:03d}"
    return f"{request / 1000:.3f} {upstream}"


def main_lines(combined: list[str]) -> list[str]:
    """``combined`` access lines as lines of :data:`MAIN`."""
    return [f"{line} {latencies(i)}" for i, line in enumerate(combined)]
