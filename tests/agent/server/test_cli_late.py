"""``elf run --allowed-lateness``: the agent's lateness rule over a finished file - late rows
left out and counted per epoch against an independent count (row path, columnar path, two
processes), printed on stderr - and ``elf submit --allowed-lateness`` sets the spec field."""

from __future__ import annotations

import json
import math
import random
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import agent.cli as cli_module
from agent.runtime.local.oneshot import run_file

QUERY = "SELECT s, count(*) AS c FROM x GROUP BY s ORDER BY s"
E, LATENESS = 5.0, 3.0


def disordered(tmp_path: Path, n: int = 600, seed: int = 7) -> tuple[Path, list[dict]]:
    rng = random.Random(seed)
    recs = []
    for i in range(n):
        lag = rng.choice([0.0, 0.0, 0.0, 1.0, 2.5, 6.0, 15.0])  # a few far behind
        recs.append({"ts": round(1000 + i / 10 - lag, 2), "s": "abc"[i % 3]})
    path = tmp_path / "in.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    return path, recs


def expected(recs: list[dict]) -> tuple[dict[int, Counter], Counter]:
    """Counts per epoch of the rows the rule keeps, and the late rows per epoch: a row is late
    when its epoch ends at or before (the newest timestamp so far - the lateness)."""
    kept: dict[int, Counter] = {}
    late: Counter = Counter()
    newest = -math.inf
    for r in recs:
        newest = max(newest, r["ts"])
        e = math.floor(r["ts"] / E)
        if (e + 1) * E <= newest - LATENESS:
            late[e] += 1
        else:
            kept.setdefault(e, Counter())[r["s"]] += 1
    return kept, late


def counts(result: Any) -> dict[int, Counter]:
    return {e: Counter({r["s"]: r["c"] for r in rows}) for e, rows in result.epochs if rows}


@pytest.mark.parametrize(
    "kw", [{"columnar": False}, {"columnar": True}, {"processes": 2, "chunk_bytes": 2048}]
)
def test_run_file_counts_late_rows_per_epoch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kw: dict[str, Any]
) -> None:
    monkeypatch.setattr("agent.ingest.columnar.reader.MIN_ROWS", 1)
    path, recs = disordered(tmp_path)
    want_kept, want_late = expected(recs)
    assert sum(want_late.values()) > 20  # the file has late rows
    got = run_file(QUERY, path, "json", epoch_seconds=E, allowed_lateness=LATENESS, **kw)
    assert counts(got) == want_kept
    assert got.late == dict(want_late)
    assert got.late_records == got.worker["late_dropped"] == got.worker["late"]["records"]


def test_without_allowed_lateness_nothing_is_late(tmp_path: Path) -> None:
    path, recs = disordered(tmp_path)
    got = run_file(QUERY, path, "json", epoch_seconds=E)
    assert got.late == {} and sum(sum(c.values()) for c in counts(got).values()) == len(recs)


def test_elf_run_prints_the_late_count(tmp_path: Path) -> None:
    path, recs = disordered(tmp_path)
    _, want_late = expected(recs)
    r = CliRunner().invoke(
        cli_module.cli,
        ["run", QUERY, "--file", str(path), "--epoch-seconds", "5",
         "--allowed-lateness", "3", "--output", "jsonl"],
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    assert f"{sum(want_late.values())} late" in r.stderr
    worst = max(want_late.items(), key=lambda kv: (kv[1], -kv[0]))
    assert f"epoch {worst[0]}: {worst[1]}" in r.stderr
    rows = [json.loads(x) for x in r.stdout.splitlines()]
    assert sum(x["c"] for x in rows) == len(recs) - sum(want_late.values())


def test_elf_submit_sets_allowed_lateness(sent: list[dict[str, Any]]) -> None:
    specs = sent
    r = CliRunner().invoke(
        cli_module.cli,
        ["submit", "--name", "q", "--query", "SELECT count(*) FROM a", "--allowed-lateness", "7"],
    )
    assert r.exit_code == 0, r.output
    assert specs[0]["allowed_lateness"] == 7.0
