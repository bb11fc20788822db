"""A real cluster: 16 ``elf agent`` processes on loopback running WordCount over known files.

Every epoch's result at the master must equal a Counter over the same lines; the job tree must
have the depth and fan-in the overlay promises; the master's "empty" multicasts must reach every
agent; a cross-job query must be answered; and a master hand-off (a new agent closer to the job
id joins) must keep the results exact.
"""

from __future__ import annotations

import json
import math
import random
import signal
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from agent_helpers import tailing_cluster, wait_until

from agent.client import ApiClient, ApiError
from agent.server.cluster import LocalCluster

AGENTS = 16
WORDS = [f"w{i}" for i in range(40)] + ["alpha", "beta", "gamma"]


def wait_equal(fetch: Callable[[], Any], want: Counter, timeout: float, what: str) -> None:
    """Poll ``fetch`` until it equals ``want``; the failure shows what differed."""
    seen: list[Any] = [None]

    def check() -> bool:
        seen[0] = fetch()
        return seen[0] == want

    try:
        wait_until(check, timeout, what)
    except AssertionError:
        got = seen[0]
        if isinstance(got, Counter):
            raise AssertionError(
                f"{what}: missing {dict(want - got)}, extra {dict(got - want)}"
            ) from None
        raise


def write_lines(
    path: Path, epochs: range, rng: random.Random, expected: dict[int, Counter]
) -> None:
    with path.open("a") as f:
        for epoch in epochs:
            for j in range(rng.randrange(3, 12)):
                words = [rng.choice(WORDS) for _ in range(rng.randrange(1, 6))]
                ts = epoch + j / 20  # sorted within the file: no record is late
                f.write(json.dumps({"ts": ts, "line": " ".join(w.upper() for w in words)}) + "\n")
                expected[epoch].update(words)


def result_counter(client: ApiClient, job: str, epoch: int) -> Counter | None:
    try:
        res = client.results(job, epoch)
    except ApiError as exc:
        if exc.status in (404, 503):
            return None
        raise
    return Counter({k: v for k, v in res["rows"]})


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Any:
    root = tmp_path_factory.mktemp("cluster")
    with tailing_cluster(root, AGENTS) as (local, inputs):
        yield local, inputs


def job_tree(local: LocalCluster, job: str = "wc") -> int:
    """The job's tree-0 id (its appId, or a placement of it chosen at submission)."""
    return int(local.client(0).status()["jobs"][job]["tree_ids"][0], 16)


def statuses(local: LocalCluster) -> list[dict[str, Any]]:
    return [local.client(i).status() for i in range(len(local.procs))]


def test_wordcount_rolls_up_exactly_and_trees_are_shallow(cluster: Any) -> None:
    local, inputs = cluster
    rng = random.Random(7)
    base = math.floor(time.time()) - 8
    expected: dict[int, Counter] = defaultdict(Counter)
    for i in range(AGENTS):
        write_lines(Path(inputs[i]["lines"]), range(base, base + 4), rng, expected)
    client = local.client(3)
    info = client.submit(
        {
            "name": "wc",
            "creator": "tests",
            "job_class": "wordcount",
            "inputs": ["lines"],
            "epoch_seconds": 1,
            "allowed_lateness": 0.5,
            "start_epoch": base,
        }
    )
    assert info["agents_reached"] == AGENTS
    for epoch in range(base, base + 6):
        wait_equal(
            lambda e=epoch: result_counter(local.client(rng.randrange(AGENTS)), "wc", e),
            expected.get(epoch, Counter()),
            60,
            f"epoch {epoch}",
        )

    # The job tree: one master, the XOR-closest agent; depth and fan-in as promised.
    tid = job_tree(local)
    states = statuses(local)
    node_ids = [int(s["node_id"], 16) for s in states]
    views = {}
    for s in states:
        job = s["jobs"]["wc"]
        assert "worker" in job["roles"]
        (view,) = [t for t in job["trees"] if int(t["tree_id"], 16) == tid]
        views[int(s["node_id"], 16)] = view
    roots = [n for n, v in views.items() if v["is_root"]]
    assert roots == [min(node_ids, key=lambda n: n ^ tid)]
    depth = 0
    for n in node_ids:
        hops, cur = 0, n
        while not views[cur]["is_root"]:
            cur = int(views[cur]["parent"]["id"], 16)
            hops += 1
            assert hops <= len(node_ids), "parent chain loops"
        depth = max(depth, hops)
    assert depth <= math.ceil(math.log(AGENTS, 16)) + 1
    children = {n: {int(c["id"], 16) for c in v["children"]} for n, v in views.items()}
    assert sum(len(c) for c in children.values()) == AGENTS - 1
    for n, v in views.items():
        if not v["is_root"]:
            assert n in children[int(v["parent"]["id"], 16)]

    # Synchronous batches: the master multicasts "empty" after each epoch; once the tree
    # spans every agent, each multicast's confirmation counts all of them.
    master_client = local.client(node_ids.index(roots[0]))
    wait_until(
        lambda: (
            [m["reached"] for m in master_client.status()["jobs"]["wc"]["multicast_stats"]][-3:]
            == [AGENTS] * 3
        ),
        30,
        "multicasts confirmed by every agent",
    )
    wait_until(
        lambda: all(s["jobs"]["wc"]["multicasts_received"] > 0 for s in statuses(local)),
        20,
        "every agent received a multicast",
    )


def test_cross_job_query_is_answered_by_the_master(cluster: Any) -> None:
    local, _ = cluster
    client = local.client(5)
    reply = wait_until(lambda: client.query("wc", {"word": "alpha"}), 30, "a query reply")
    assert reply["word"] == "alpha"
    assert isinstance(reply["count"], int) and reply["count"] > 0
    with pytest.raises(ApiError) as err:
        client.query("no-such-job", {"word": "x"})
    assert err.value.status == 404


def test_bad_requests_get_clear_4xx(cluster: Any) -> None:
    local, _ = cluster
    client = local.client(0)
    with pytest.raises(ApiError) as err:
        client.submit({"name": "x", "creator": "t", "job_class": "nope"})
    assert err.value.status == 400 and "nope" in err.value.message
    with pytest.raises(ApiError) as err:
        client.submit({"name": "wc", "creator": "tests", "job_class": "wordcount"})
    assert err.value.status == 409
    with pytest.raises(ApiError) as err:
        client.call("POST", "/api/v1/jobs", raw=b"{not json")
    assert err.value.status == 400 and "JSON" in err.value.message
    with pytest.raises(ApiError) as err:
        ApiClient(local.procs[0].api_url, "wrong-token").status()
    assert err.value.status == 401


def test_master_hand_off_keeps_results_exact(cluster: Any) -> None:
    local, inputs = cluster
    tid = job_tree(local)
    old_master = min((int(s["node_id"], 16) for s in statuses(local)), key=lambda n: n ^ tid)
    before = {}
    client = local.client(1)
    epochs = client.results("wc")["epoch"]
    for epoch in range(epochs - 3, epochs + 1):
        before[epoch] = result_counter(client, "wc", epoch)
    # A new agent whose id is closer to the job id than anyone's joins and becomes master.
    new_id = tid ^ 1
    assert new_id ^ tid < old_master ^ tid
    new_input = Path(inputs[0]["lines"]).parent / "input-new.jsonl"
    new_input.touch()
    local.extra_args = [*local.extra_args, "--node-id", f"{new_id:040x}"]
    local.inputs[len(local.procs)] = {"lines": str(new_input)}
    proc = local._spawn(len(local.procs), bootstrap=local.procs[0].overlay_address)
    local._wait_ready(proc, 60)
    local.extra_args = local.extra_args[:-2]
    newcomer = ApiClient(proc.api_url, local.token)
    try:
        wait_until(
            lambda: "master" in newcomer.status()["jobs"].get("wc", {}).get("roles", []),
            60,
            "the new agent to become master",
        )
    except AssertionError:
        st = newcomer.status()
        detail = {k: st.get(k) for k in ("jobs", "jobs_tree", "counters")}
        raise AssertionError(f"newcomer never became master: {json.dumps(detail)[:4000]}") from None
    # Old epochs moved with the role, unchanged.
    for epoch, want in before.items():
        wait_equal(lambda e=epoch: result_counter(newcomer, "wc", e), want, 30, "hand-off")
    # New data after the hand-off rolls up exactly at the new master.
    rng = random.Random(11)
    start = math.floor(time.time()) + 2
    expected: dict[int, Counter] = defaultdict(Counter)
    for i in range(AGENTS):
        write_lines(Path(inputs[i]["lines"]), range(start, start + 2), rng, expected)
    write_lines(new_input, range(start, start + 2), rng, expected)
    for epoch in range(start, start + 2):
        wait_equal(
            lambda e=epoch: result_counter(newcomer, "wc", e),
            expected[epoch],
            60,
            f"post-hand-off epoch {epoch}",
        )


def test_cli_reads_jobs_results_and_status(cluster: Any) -> None:
    from click.testing import CliRunner

    from agent.cli import cli

    local, _ = cluster
    common = ["--api", local.procs[2].api_url, "--secret-file", str(local.secret_file)]
    runner = CliRunner()
    jobs = runner.invoke(cli, ["jobs", *common])
    assert jobs.exit_code == 0, jobs.output
    assert [j["name"] for j in json.loads(jobs.output)] == ["wc"]
    latest = local.client(2).results("wc")
    res = runner.invoke(cli, ["results", "wc", "--epoch", str(latest["epoch"]), *common])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["rows"] == latest["rows"]
    status = runner.invoke(cli, ["status", *common])
    assert status.exit_code == 0 and json.loads(status.stdout)["jobs"]["wc"]["roles"]
    bad = runner.invoke(cli, ["results", "nope", *common])
    assert bad.exit_code != 0 and "404" in bad.output
    # submit by flags, change at runtime, stop: the job table follows
    sub = runner.invoke(
        cli, ["submit", "--name", "wc2", "--job", "wordcount", "--param", "min_length=2", *common]
    )
    assert sub.exit_code == 0, sub.output
    assert json.loads(sub.output)["version"] == 1
    changed = runner.invoke(cli, ["change", "wc2", "--set", "min_length=4", *common])
    assert changed.exit_code == 0, changed.output
    assert json.loads(changed.output)["version"] == 2

    def wc2_specs() -> list[dict[str, Any]]:  # every agent's job-table entry
        return [
            next(j for j in local.client(i).jobs() if j["name"] == "wc2")["spec"]
            for i in range(len(local.procs))
        ]

    def params_everywhere() -> bool:
        return all(spec["params"] == {"min_length": 4} for spec in wc2_specs())

    wait_until(params_everywhere, 30, "the change in every agent's job table")
    longer = runner.invoke(cli, ["change", "wc2", "--epoch-seconds", "3", *common])
    assert longer.exit_code == 0, longer.output
    assert json.loads(longer.output)["version"] == 3

    def schedule_everywhere() -> bool:
        schedules = [spec["epoch_schedule"] for spec in wc2_specs()]
        return (
            bool(schedules[0])
            and schedules[0][-1][1] == 3.0
            and all(s == schedules[0] for s in schedules)
        )

    wait_until(schedule_everywhere, 30, "the new epoch length in every agent's job table")
    stop = runner.invoke(cli, ["stop", "wc2", *common])
    assert stop.exit_code == 0 and json.loads(stop.output)["state"] == "stopped"


def test_sigterm_leaves_gracefully_and_the_rest_keeps_exact_results(cluster: Any) -> None:
    local, _ = cluster
    tid = job_tree(local)
    states = statuses(local)
    master = min(range(len(states)), key=lambda i: int(states[i]["node_id"], 16) ^ tid)
    victim = next(i for i in range(1, AGENTS) if i != master)
    proc = local.procs[victim].process
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 0  # clean shutdown: left the overlay, handed its trees over
    alive = [i for i in range(len(local.procs)) if i != victim]
    victim_id = states[victim]["node_id"]

    def repaired() -> bool:
        for i in alive:
            st = local.client(i).status()
            if victim_id in st["neighbours"]:
                return False
            for view in st["jobs"]["wc"]["trees"]:
                if (view.get("parent") or {}).get("id") == victim_id:
                    return False
        return True

    wait_until(repaired, 30, "every agent to forget the departed one")
    rng = random.Random(13)
    start = math.floor(time.time()) + 2
    expected: dict[int, Counter] = defaultdict(Counter)
    for i in alive:
        path = Path(local.inputs[i]["lines"])
        write_lines(path, range(start, start + 2), rng, expected)
    for epoch in range(start, start + 2):
        wait_equal(
            lambda e=epoch: result_counter(local.client(alive[0]), "wc", e),
            expected[epoch],
            60,
            f"epoch {epoch} after the departure",
        )
