"""``elf retire``, ``elf leave`` and ``elf status`` against real ``elf agent`` processes on
loopback (two of them, :class:`agent.server.cluster.LocalCluster`): retiring a real origin -
the other agent, killed -9 - of one job and of every job, read back from the master (its
``membership``, the epoch that lacked it now partial), the refusals (unknown origin or job, a
malformed id, no token), and ``elf leave`` stopping a process as SIGTERM does, its end
declared to the master (``membership.left``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from agent_helpers import wait_until

from agent.client import ApiClient
from agent.server.cluster import LocalCluster

JOB = "wc"


def elf(agent: dict[str, Any], secret: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ELF_")}
    env |= {"ELF_API": agent["api_url"], "ELF_SECRET_FILE": str(secret)}
    return subprocess.run(
        [sys.executable, "-m", "agent.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )


def job_status(client: ApiClient) -> dict[str, Any]:
    return client.status()["jobs"].get(JOB) or {}


def the_master(cluster: LocalCluster) -> int | None:
    for i in range(cluster.n):
        if cluster.alive(i) and "master" in job_status(cluster.client(i)).get("roles", []):
            return i
    return None


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[LocalCluster, int, int]]:
    """Two agent processes running the job, each an origin of it (both read the default
    ``ingest`` input); yields (cluster, the master's index, the other's)."""
    c = LocalCluster(2, tmp_path)
    try:
        c.start()
        c.wait_settled(60)
        c.client(0).submit({"name": JOB, "creator": "t", "job_class": "wordcount"})
        master = wait_until(
            lambda: (i := the_master(c)) is not None and [i], 30, "an agent to master the job"
        )[0]
        wait_until(
            lambda: job_status(c.client(master)).get("origins_expected") == 2,
            30,
            "the master to know both agents as origins",
        )
        yield c, master, 1 - master
    finally:
        c.stop()


def newest(client: ApiClient) -> dict[str, Any]:
    return client.results(JOB)


def test_elf_retire_asks_the_master_and_says_what_it_answered(
    cluster: tuple[LocalCluster, int, int],
) -> None:
    c, m, o = cluster
    secret = c.secret_file
    master, other = c.procs[m].agents[0], c.procs[o].agents[0]
    gone = format(int(other["node_id"], 16), "x")
    c.kill(o)  # kill -9: no leave declared; the master counts it absent, not gone
    client = c.client(m)
    # stored lacking it, not a deadline's preview (its barrier still waits: a retirement
    # turns it partial only when that resolves, so it would not count in partial_epochs)
    lacking = wait_until(
        lambda: (r := newest(client))["lacking"] == [gone] and not r.get("preview") and r,
        30,
        "an epoch lacking it",
    )
    assert lacking["state"] == "tentative"
    assert gone not in {r["origin"] for r in job_status(client)["membership"]["retired"]}

    done = elf(master, secret, "retire", other["node_id"], "--job", JOB, "--why", "test")
    assert done.returncode == 0, done.stderr
    reply = json.loads(done.stdout)
    assert reply["complete"] and reply["origin"] == other["node_id"]
    assert [m["status"] for m in reply["masters"]] == [200]
    assert reply["masters"][0]["master"] == master["data_url"]
    assert reply["masters"][0]["partial_epochs"] >= 1
    from_epoch = reply["masters"][0]["from_epoch"]
    assert from_epoch > lacking["epoch"]
    (entry,) = job_status(client)["membership"]["retired"]
    assert (entry["origin"], entry["why"], entry["from_epoch"]) == (gone, "test", from_epoch)
    after = client.results(JOB, lacking["epoch"])
    assert (after["state"], after["lacking"]) == ("partial", [gone])
    assert after["version"] > lacking["version"]
    wait_until(
        lambda: (r := newest(client))["epoch"] >= from_epoch and r["state"] == "final",
        30,
        "a final epoch after the retirement",
    )
    # every job, asked again: already retired, nothing new
    done = elf(master, secret, "retire", other["node_id"])
    assert done.returncode == 0, done.stderr
    again = json.loads(done.stdout)
    assert again["retired"] == [JOB]
    assert again["jobs"][JOB]["masters"][0]["partial_epochs"] == 0

    refused = elf(master, secret, "retire", "00ff", "--job", JOB)
    assert refused.returncode == 1 and "404" in refused.stderr and "not a member" in refused.stderr
    refused = elf(master, secret, "retire", "00ff")
    assert refused.returncode == 1 and "no running job" in refused.stderr
    refused = elf(master, secret, "retire", gone, "--job", "nope")
    assert refused.returncode == 1 and "404" in refused.stderr and "nope" in refused.stderr
    refused = elf(master, secret, "retire", "not-hex", "--job", JOB)
    assert refused.returncode == 1 and "400" in refused.stderr and "origin" in refused.stderr
    assert refused.stdout == ""
    no_token = subprocess.run(
        [sys.executable, "-m", "agent.cli", "retire", gone, "--api", master["api_url"]],
        capture_output=True,
        text=True,
        timeout=60,
        env={k: v for k, v in os.environ.items() if not k.startswith("ELF_")},
    )
    assert no_token.returncode != 0 and "no API token" in no_token.stderr
    on_argv = elf(master, secret, "retire", gone, "--token", "x")
    assert on_argv.returncode != 0 and "--token is refused" in on_argv.stderr

    status = elf(master, secret, "status")
    assert status.returncode == 0, status.stderr
    shown = json.loads(status.stdout)["jobs"][JOB]["membership"]["retired"]
    assert [r["origin"] for r in shown] == [gone]


def leave_and_read_membership(c: LocalCluster, m: int, o: int) -> tuple[str, dict[str, Any]]:
    """``elf leave`` on agent ``o``: it stops as on SIGTERM and exits 0; returns its id and
    the master's ``membership`` then."""
    other = c.procs[o].agents[0]
    done = elf(other, c.secret_file, "leave")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"leaving": True, "node_id": other["node_id"]}
    assert c.procs[o].process.wait(60) == 0  # the daemon's graceful stop, then a clean exit
    gone = elf(other, c.secret_file, "status")
    assert gone.returncode == 1 and "cannot reach" in gone.stderr
    return format(int(other["node_id"], 16), "x"), job_status(c.client(m))["membership"]


def test_elf_leave_stops_the_agent_as_sigterm_does(
    cluster: tuple[LocalCluster, int, int],
) -> None:
    c, m, o = cluster
    client = c.client(m)
    wait_until(lambda: newest(client)["state"] == "final", 30, "a final epoch of both")
    left, membership = leave_and_read_membership(c, m, o)
    # its end was declared to the master: left, not absent
    assert [x["origin"] for x in membership["left"]] == [left], membership
    assert membership["absent"] == [] and membership["retired"] == []
    through = membership["left"][0]["from_epoch"]
    wait_until(
        lambda: (r := newest(client))["epoch"] >= through + 1 and r["state"] == "final",
        30,
        "a final epoch without it",
    )


def test_elf_leave_before_the_first_epoch_is_declared_too(
    cluster: tuple[LocalCluster, int, int],
) -> None:
    c, m, o = cluster
    left, membership = leave_and_read_membership(c, m, o)
    assert [x["origin"] for x in membership["left"]] == [left], membership
