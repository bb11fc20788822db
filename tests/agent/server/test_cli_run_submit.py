"""``elf submit --query`` applies or refuses --epoch-seconds / --input / --param / --job /
SPEC_FILE (never ignores a flag: the spec sent is checked), and ``elf run`` runs a query over
a finished file on the columnar path with the row path's results, in table, JSON lines and
CSV form, with bad lines counted."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import agent.cli as cli_module
from agent.runtime.local.oneshot import run_file


def submit(*args: str) -> Any:
    return CliRunner().invoke(cli_module.cli, ["submit", *args])


def test_query_flags_are_applied(sent: list[dict[str, Any]]) -> None:
    r = submit("--name", "q", "--query", "SELECT s, count(*) FROM * GROUP BY s",
               "--epoch-seconds", "5", "--input", "other", "--param", "ts_field=\"t\"")  # fmt: skip
    assert r.exit_code == 0, r.output
    (spec,) = sent
    assert spec["epoch_seconds"] == 5 and spec["inputs"] == ["other"]
    assert spec["params"] == {"ts_field": "t", "query": "SELECT s, count(*) FROM * GROUP BY s"}


@pytest.mark.parametrize(
    ("args", "reason"),
    [
        (["--query", "SELECT count(*) FROM a WINDOW 10 s", "--epoch-seconds", "5"],
         "disagrees with the query's WINDOW 10 s"),
        (["--query", "SELECT count(*) FROM a", "--input", "other"],
         "--input other disagrees with the query's FROM a"),
        (["--query", "SELECT count(*) FROM a", "--job", "wordcount"], "--job wordcount"),
    ],
)  # fmt: skip
def test_query_flags_that_cannot_apply_are_refused(
    sent: list[dict[str, Any]], args: list[str], reason: str
) -> None:
    r = submit("--name", "q", *args)
    assert r.exit_code != 0 and reason in r.output, r.output
    assert not sent


def test_window_epoch_seconds_that_agree_are_accepted(sent: list[dict[str, Any]]) -> None:
    r = submit("--name", "q", "--query", "SELECT count(*) FROM a WINDOW 10 s",
               "--epoch-seconds", "10", "--input", "a")  # fmt: skip
    assert r.exit_code == 0, r.output
    assert sent[0]["epoch_seconds"] == 10 and sent[0]["inputs"] == ["a"]


def test_spec_file_with_flags_is_refused(tmp_path: Path, sent: list[dict[str, Any]]) -> None:
    f = tmp_path / "spec.json"
    f.write_text(json.dumps({"name": "x", "job_class": "wordcount"}))
    r = submit(str(f), "--epoch-seconds", "5")
    assert r.exit_code != 0 and "--epoch-seconds cannot be combined with SPEC_FILE" in r.output
    assert not sent


def lines_file(tmp_path: Path) -> Path:
    path = tmp_path / "in.jsonl"
    recs = [{"ts": 100 + i / 4, "s": "abc"[i % 3], "n": i} for i in range(40)]
    body = "".join(json.dumps(r) + "\n" for r in recs[20:] + recs[:20])  # out of order
    path.write_text(body + "not json\n" + json.dumps({"ts": 200, "s": "z", "n": 1}))
    return path


QUERY = "SELECT s, count(*) AS c, sum(n) AS total FROM x GROUP BY s ORDER BY s"


def test_run_file_columnar_equals_row_path_and_keeps_out_of_order_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("agent.ingest.columnar.reader.MIN_ROWS", 1)  # a small file, columnar
    path = lines_file(tmp_path)
    col = run_file(QUERY, path, "json", epoch_seconds=5)
    row = run_file(QUERY, path, "json", epoch_seconds=5, columnar=False)
    assert col.epochs == row.epochs
    assert col.worker["late_dropped"] == 0
    assert col.worker["columnar_rows"] == 40  # the last, unterminated line: the row path
    assert col.input["rejected"] == 1 and col.input["records"] == 41
    totals = {}
    for _, rows in col.epochs:
        for r in rows:
            totals[r["s"]] = totals.get(r["s"], 0) + r["c"]
    assert totals == {"a": 14, "b": 13, "c": 13, "z": 1}  # the unterminated last line too


@pytest.mark.parametrize("output", ["table", "jsonl", "csv"])
def test_elf_run_prints_per_epoch_results(tmp_path: Path, output: str) -> None:
    path = lines_file(tmp_path)
    r = CliRunner().invoke(
        cli_module.cli,
        ["run", QUERY, "--file", str(path), "--epoch-seconds", "5", "--output", output],
    )
    assert r.exit_code == 0, r.output
    if output == "jsonl":
        rows = [json.loads(x) for x in r.stdout.splitlines()]
        assert {x["epoch"] for x in rows} == {20, 21, 40}
        assert sum(x["c"] for x in rows) == 41
    elif output == "csv":
        rows = list(csv.DictReader(io.StringIO(r.stdout)))
        assert sum(int(x["c"]) for x in rows) == 41
    else:
        assert "total" in r.stdout
    assert "1 rejected" in r.stderr


def test_elf_run_refuses_a_disagreeing_epoch_length(tmp_path: Path) -> None:
    r = CliRunner().invoke(
        cli_module.cli,
        ["run", "SELECT count(*) FROM x WINDOW 10 s", "--file", str(lines_file(tmp_path)),
         "--epoch-seconds", "3"],
    )  # fmt: skip
    assert r.exit_code != 0 and "disagrees" in r.output


def test_run_file_on_two_processes_equals_one(tmp_path: Path) -> None:
    path = lines_file(tmp_path)
    one = run_file(QUERY, path, "json", epoch_seconds=5)
    two = run_file(QUERY, path, "json", epoch_seconds=5, processes=2, chunk_bytes=256)
    assert two.epochs == one.epochs
    assert two.input["rejected"] == one.input["rejected"] == 1
