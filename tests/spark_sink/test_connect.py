"""A real Spark Connect server started from the pyspark installation
(sbin/start-connect-server.sh, foreground, loopback, a free port) serves format("elf") to a
Connect client (its own process): the rows equal the rows written."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from spark_sink.lake import Lake, Rollup

pyspark = pytest.importorskip("pyspark")
# A second JVM: ~40 s on the 2-core VM (server start ~15 s), under the 60 s "slow" mark.

E = 1_795_300_000
CLIENT = """
import json, sys
from spark_sink.session import get_session
spark = get_session(sys.argv[1])
df = spark.read.format("elf").option("job", "wc").load(sys.argv[2])
print(json.dumps([[r["epoch"], r["key"], r["value"]] for r in df.collect()]))
print(json.dumps(type(spark).__module__))
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture(scope="module")
def connect_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    home = Path(pyspark.__file__).parent
    script = home / "sbin" / "start-connect-server.sh"
    if not script.exists():
        pytest.skip(f"{script} not in this pyspark installation")
    work = tmp_path_factory.mktemp("connect")
    port = free_port()
    env = dict(
        os.environ,
        SPARK_HOME=str(home),
        SPARK_LOG_DIR=str(work),
        SPARK_PID_DIR=str(work),
        SPARK_IDENT_STRING=f"elf-test-{os.getpid()}",
        PYSPARK_PYTHON=sys.executable,
    )
    cmd = [
        "nice", "-n", "19", "bash", str(script), "--wait",
        "--master", "local[1]",
        "--driver-memory", "768m",
        "--conf", f"spark.connect.grpc.binding.port={port}",
        "--conf", "spark.connect.grpc.binding.address=127.0.0.1",
        "--conf", "spark.ui.enabled=false",
        "--conf", "spark.sql.shuffle.partitions=2",
    ]  # fmt: skip
    log = (work / "server.log").open("wb")
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while not listening(port):
            if proc.poll() is not None:
                pytest.fail(f"Connect server exited: {(work / 'server.log').read_text()[-2000:]}")
            if time.monotonic() > deadline:
                pytest.fail("Connect server did not listen within 120 s")
            time.sleep(0.2)  # polling a condition (the port), with a deadline
        yield f"sc://127.0.0.1:{port}"
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
        log.close()


def test_rollups_read_through_spark_connect(connect_url: str, tmp_path: Path) -> None:
    lake = Lake(str(tmp_path))
    want: Counter = Counter()
    for e in range(E, E + 3):
        rows = [(f"w{i}", e - E + i) for i in range(4)]
        lake.write(Rollup("wc", 0, 1, e, 1.0, rows))
        want.update((e, k, v) for k, v in rows)
    out = subprocess.run(
        ["nice", "-n", "19", sys.executable, "-c", CLIENT, connect_url, str(tmp_path)],
        capture_output=True, text=True, timeout=180, check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.strip().splitlines()
    assert Counter(tuple(r) for r in json.loads(lines[-2])) == want
    assert "connect" in json.loads(lines[-1])  # it really was a Connect session
