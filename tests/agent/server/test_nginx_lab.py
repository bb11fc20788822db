"""The nginx scenario's parts that need no nginx: the independent reading of access-log lines
(cross-checked against the agents' own parser), the ``status`` plan's reference and its
judgement of versions, and the config nginx is given (``agent.server.nginx_lab``)."""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent.ingest.formats import AccessLogParser
from agent.server.chaos import JobPlan, read_records, reference
from agent.server.nginx_lab import NginxLab, access_record
from agent.server.version_check import (
    EXACT,
    FLAGGED_OK,
    UNFLAGGED_WRONG,
    OriginReference,
    Seen,
    judge,
    rows_key,
)

STATUS = JobPlan("status", "status", start_epoch=50, epoch_seconds=2.0)
MONTHS = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]


def combined(ts: float, status: int, size: int | None, path: str = "/", zone_min: int = 0) -> str:
    """A line as nginx's ``combined`` format writes it."""
    zone = timezone(timedelta(minutes=zone_min))
    t = datetime.fromtimestamp(ts, zone)
    sign = "+" if zone_min >= 0 else "-"
    local = (
        f"{t.day:02d}/{MONTHS[t.month - 1]}/{t.year}:{t:%H:%M:%S} "
        f"{sign}{abs(zone_min) // 60:02d}{abs(zone_min) % 60:02d}"
    )
    sent = "-" if size is None else str(size)
    return f'127.0.0.1 - - [{local}] "GET {path} HTTP/1.1" {status} {sent} "-" "Python-urllib/3.11"'


@given(
    ts=st.integers(1_000_000_000, 4_000_000_000),
    status=st.sampled_from([200, 204, 301, 404, 499, 500]),
    size=st.one_of(st.none(), st.integers(0, 10**9)),
    zone_min=st.sampled_from([0, 60, -300, 330, 765]),
)
def test_access_record_agrees_with_the_agents_parser(
    ts: int, status: int, size: int | None, zone_min: int
) -> None:
    line = combined(ts, status, size, zone_min=zone_min)
    mine = access_record(line + "\n")
    theirs = AccessLogParser().parse(line)
    assert mine == {"ts": float(ts), "status": status, "bytes": size or 0}
    assert (theirs["ts"], theirs["status"], theirs["bytes"]) == (mine["ts"], status, size or 0)


def test_read_records_reads_access_logs_and_refuses_anything_else(tmp_path: Path) -> None:
    log = tmp_path / "a.log"
    log.write_text(combined(100, 200, 5) + "\n" + combined(101, 404, 153) + "\n" + "127.0.0.1 -")
    assert read_records([log]) == [
        {"ts": 100.0, "status": 200, "bytes": 5},
        {"ts": 101.0, "status": 404, "bytes": 153},
    ]  # the torn last line is not a record
    (tmp_path / "b.log").write_text("not a log line\n")
    with pytest.raises(ValueError, match="neither JSON nor an access-log line"):
        read_records([tmp_path / "b.log"])


def test_status_plan_counts_bytes_and_requests_per_status_and_judges_versions(
    tmp_path: Path,
) -> None:
    a, b = tmp_path / "a.log", tmp_path / "b.log"
    lines_a = [(100, 200, 5), (101, 200, 2001), (101, 404, 153), (104, 200, 5)]
    a.write_text("".join(combined(t, s, n) + "\n" for t, s, n in lines_a))
    b.write_text(combined(100.0, 200, 41) + "\n" + combined(103, 304, None) + "\n")
    assert reference(STATUS, read_records([a, b])) == {
        50: Counter({"200:bytes": 2047, "200:n": 3, "404:bytes": 153, "404:n": 1}),
        51: Counter({"304:n": 1}),
        52: Counter({"200:bytes": 5, "200:n": 1}),
    }
    rows = [{"status": 200, "bytes": 2047, "n": 3}, {"status": 404, "bytes": 153, "n": 1}]
    assert STATUS.counter(rows) == reference(STATUS, read_records([a, b]))[50]
    ref = OriginReference.from_files(STATUS, {"a": a, "b": b})
    assert ref.epochs == range(50, 52)

    def version(rows: list, lacking: tuple[str, ...] = (), coverage: float = 1.0) -> Seen:
        return Seen("api", "status", 50, 1, 0, bool(lacking), False, True, coverage, lacking,
                    rows, rows_key(rows), 1.0, 1.0)  # fmt: skip

    assert judge(ref, version(rows)).verdict == EXACT
    without_b = [{"status": 200, "bytes": 2006, "n": 2}, {"status": 404, "bytes": 153, "n": 1}]
    assert judge(ref, version(without_b)).verdict == UNFLAGGED_WRONG
    assert judge(ref, version(without_b)).short_origins == ["b"]
    assert judge(ref, version(without_b, ("b",), 0.75)).verdict == FLAGGED_OK


def test_nginx_config_has_one_logging_server_per_path(tmp_path: Path) -> None:
    logs = [tmp_path / f"access-{i}.log" for i in range(3)]
    lab = NginxLab(tmp_path / "nginx", logs)
    conf = lab.config()
    assert len(set(lab.ports)) == 3 and "daemon off;" in conf
    for port, log in zip(lab.ports, logs, strict=True):
        assert f"listen 127.0.0.1:{port};" in conf and f"access_log {log} combined;" in conf
    assert str(tmp_path / "nginx" / "nginx.pid") in conf
