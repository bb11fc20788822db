"""A session query on a real cluster: 3 ``elf agent`` processes on loopback tail their own
files; ``elf submit --query`` (the CLI against the HTTP API) submits ``WINDOW SESSION``; the
master's closed sessions (``POST /api/v1/jobs/{name}/query``), and those ``elf results`` reads
epoch by epoch (the results API's ``sessions``), equal an independent reference (each user's
maximal runs of active epochs within the gap, counted and summed from the records) and ``elf
run`` over the same records."""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Any

import pytest
from agent_helpers import tailing_cluster, wait_until
from click.testing import CliRunner

from agent.cli import cli
from agent.client import ApiError
from agent.runtime.local.oneshot import run_file

AGENTS = 3
QUERY = (
    "SELECT user, count(*) AS n, sum(bytes) AS total FROM lines GROUP BY user "
    "WINDOW SESSION(2 s) EVERY 1 s"
)
# per agent: (user, epoch offset, bytes); gap of 2 epochs: u1 at 0, 2 (one session: one
# empty epoch between) then 5 (another); u2 at 1 then 4 (two: two empty epochs between)
PLAN = [
    [("u1", 0, 1), ("u2", 1, 2), ("u1", 5, 3)],
    [("u1", 2, 4), ("u3", 3, 5), ("u2", 4, 6)],
    [("u1", 0, 7), ("u3", 4, 8), ("u3", 6, 9)],
]


def reference(start: int) -> list[dict[str, Any]]:
    by_user: dict[str, dict[int, list[int]]] = defaultdict(lambda: defaultdict(list))
    for plan in PLAN:
        for user, off, b in plan:
            by_user[user][start + off].append(b)
    rows = []
    for user, epochs in by_user.items():
        runs: list[list[int]] = []
        for ep in sorted(epochs):
            if runs and ep - runs[-1][-1] <= 2:
                runs[-1].append(ep)
            else:
                runs.append([ep])
        for run in runs:
            values = [b for ep in run for b in epochs[ep]]
            rows.append(
                {"window_start": float(run[0]), "window_end": float(run[-1] + 1), "user": user,
                 "n": len(values), "total": sum(values), "flags": []}
            )  # fmt: skip
    return sorted(rows, key=lambda r: (r["window_start"], r["user"]))


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Any:
    root = tmp_path_factory.mktemp("sessions")
    with tailing_cluster(root, AGENTS) as (local, inputs):
        yield local, inputs, root


def test_elf_submit_session_query_on_agent_processes(cluster: Any) -> None:
    local, inputs, root = cluster
    common = ["--api", local.procs[0].api_url, "--secret-file", str(local.secret_file)]
    sub = CliRunner().invoke(cli, ["submit", "--name", "sessions", "--query", QUERY, *common])
    assert sub.exit_code == 0, sub.output
    client = local.client(1)
    (job,) = [j for j in client.jobs() if j["name"] == "sessions"]
    start = int(job["spec"]["start_epoch"])
    everything = []
    for i, plan in enumerate(PLAN):
        recs = sorted(
            ({"ts": start + off + 0.25, "user": u, "bytes": b} for u, off, b in plan),
            key=lambda r: r["ts"],
        )
        everything.extend(recs)
        with open(inputs[i]["lines"], "a") as f:
            f.write("".join(json.dumps(r) + "\n" for r in recs))
    want = reference(start)

    def closed() -> dict[str, Any] | None:
        try:
            reply = client.query("sessions", {})
        except ApiError:
            return None
        return reply if len(reply.get("rows") or ()) >= len(want) else None

    reply = wait_until(closed, 60, "the session query's closed sessions")
    got = sorted(reply["rows"], key=lambda r: (r["window_start"], r["user"]))
    assert got == want
    assert reply["early_closed"] == 0
    # elf results (the CLI against GET /api/v1/jobs/{name}/results): each epoch's reply
    # carries the sessions it closed - a session whose last active epoch is L closes with
    # epoch L + 2 (gap 2 epochs), so window_end = E - 1 -, every session once over the epochs
    from_results = []
    for epoch in range(start, int(reply["epoch"]) + 1):
        out = CliRunner().invoke(cli, ["results", "sessions", "--epoch", str(epoch), *common])
        assert out.exit_code == 0, out.output
        closed_e = json.loads(out.stdout)["sessions"]["rows"]
        assert all(r["window_end"] == float(epoch - 1) for r in closed_e), (epoch, closed_e)
        assert f"; {len(closed_e)} sessions closed" in out.stderr
        from_results.extend(closed_e)
    assert sorted(from_results, key=lambda r: (r["window_start"], r["user"])) == want
    path = root / "all.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in everything))
    local_rows = run_file(QUERY, path, "json").sessions or []
    assert sorted(local_rows, key=lambda r: (r["window_start"], r["user"])) == want
