"""Heavy libraries load where they are used (issue "A lightweight agent"): a real agent
process with nothing to do maps no pyarrow (nor pandas, nor datasketches), a job's master
writing the lake maps pyarrow but no pandas, and the job
classes it loads at start - every ``elf.jobs`` entry point - import it only with their first
columnar batch.

Observable: the agent process's memory maps (``/proc/<pid>/maps`` via psutil), and a fresh
interpreter's ``sys.modules`` after the imports an agent makes at start.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import time
from pathlib import Path

import psutil

from agent.server.chaos import wait_until
from agent.server.cluster import LocalCluster

HEAVY = ("pyarrow", "pandas", "datasketches")


def mapped(pid: int) -> set[str]:
    """The heavy packages whose files the process maps (datasketches' extension lies beside
    its package: ``site-packages/_datasketches.*.so``)."""
    paths = [m.path for m in psutil.Process(pid).memory_maps(grouped=True)]
    marks = {h: (f"/site-packages/{h}/", f"/site-packages/_{h}.") for h in HEAVY}
    return {h for h in HEAVY for p in paths if any(m in p for m in marks[h])}


def test_an_idle_agent_maps_no_arrow_nor_sketches(tmp_path: Path) -> None:
    cluster = LocalCluster(1, tmp_path).start()
    try:
        client = cluster.client(0)
        wait_until(lambda: client.status().get("node_id") is not None, 30, "the agent's status")
        assert mapped(cluster.procs[0].process.pid) == set()
    finally:
        cluster.stop()


def test_loading_the_job_classes_imports_no_arrow() -> None:
    probe = (
        "import sys, json\n"
        "import agent.server.daemon, agent.runtime.host.agent, agent.runtime.epochs.worker\n"
        "from agent.jobs.job import load_entry_points\n"
        "load_entry_points()\n"
        f"print(json.dumps([m for m in {list(HEAVY)!r} if m in sys.modules]))\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []


def test_a_master_writing_the_lake_maps_arrow_but_no_pandas(tmp_path: Path) -> None:
    """A job's master loads pyarrow for its lake and results; pyarrow's probe for pandas is
    answered "none" (``agent/ingest/columnar/pandas_probe.py``), so pandas (40 MB) stays out."""
    lake = tmp_path / "lake"
    cluster = LocalCluster(1, tmp_path / "c", extra_args=["--lake", str(lake)]).start()
    try:
        client = cluster.client(0)
        start = math.floor(time.time()) + 1
        spec = {"name": "wc", "creator": "t", "job_class": "wordcount", "start_epoch": start}
        client.submit(spec)
        wait_until(lambda: any(lake.rglob("*.parquet")), 60, "a lake file from the master")
        assert mapped(cluster.procs[0].process.pid) >= {"pyarrow"}
        assert "pandas" not in mapped(cluster.procs[0].process.pid)
    finally:
        cluster.stop()
