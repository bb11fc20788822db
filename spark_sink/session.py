"""SparkSession for the rollup lake: embedded ``local[*]`` by default, a standalone cluster
(``spark://host:port``) or Spark Connect (``sc://host:port``) by configuration.

Contract: :func:`get_session` returns a session with ``format("elf")`` registered. The master
comes from the argument, else ``ELF_SPARK_MASTER``, else ``local[*]``. Every mode except Spark
Connect runs a JVM here, so :func:`check_java` runs first and raises :class:`JavaMissing`
with what to install when ``java`` is absent or older than 17 (Spark 4's minimum). Spark
Connect needs no local JVM: the session is a gRPC client of the server.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping
from typing import Any

MIN_JAVA = 17
DEFAULT_MASTER = "local[*]"
LOCAL_DEFAULTS = {
    "spark.ui.enabled": "false",
    "spark.sql.shuffle.partitions": "4",
    "spark.sql.session.timeZone": "UTC",
}


class JavaMissing(RuntimeError):
    """No usable Java for an embedded or cluster-client Spark session."""


def java_version(java: str | None = None) -> int | None:
    """The major version of ``java`` (``$JAVA_HOME/bin/java`` or the one on PATH), or None."""
    if java is None:
        home = os.environ.get("JAVA_HOME")
        java = os.path.join(home, "bin", "java") if home else shutil.which("java")
    if not java or not os.path.exists(java):
        return None
    try:
        out = subprocess.run(
            [java, "-version"], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return parse_java_version(out.stderr + out.stdout)


def parse_java_version(text: str) -> int | None:
    """``openjdk version "17.0.15"`` → 17; ``java version "1.8.0_392"`` → 8."""
    m = re.search(r'version "(\d+)(?:\.(\d+))?', text)
    if m is None:
        return None
    major = int(m.group(1))
    return int(m.group(2) or 0) if major == 1 else major


def check_java() -> int:
    """Raise :class:`JavaMissing` naming what to install unless Java ≥ 17 is available."""
    version = java_version()
    if version is None:
        raise JavaMissing(
            "Spark needs Java 17 or newer and no `java` was found (JAVA_HOME or PATH): install "
            "a JDK 17+ (e.g. `apt-get install openjdk-17-jre-headless`) or use Spark Connect "
            "(master sc://host:15002), which needs no local Java"
        )
    if version < MIN_JAVA:
        raise JavaMissing(
            f"Spark 4 needs Java {MIN_JAVA} or newer, found Java {version}: install a JDK "
            f"{MIN_JAVA}+ and point JAVA_HOME at it, or use Spark Connect (sc://host:15002)"
        )
    return version


def get_session(
    master: str | None = None,
    *,
    app_name: str = "elf",
    conf: Mapping[str, str] | None = None,
) -> Any:
    """A SparkSession (module contract) with the ``elf`` data source registered."""
    from pyspark.sql import SparkSession

    from spark_sink.datasource import register

    master = master or os.environ.get("ELF_SPARK_MASTER") or DEFAULT_MASTER
    # Python workers run this interpreter (the data source needs pyarrow and spark_sink)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    if master.startswith("sc://"):
        builder = SparkSession.builder.remote(master).appName(app_name)
    else:
        check_java()
        builder = SparkSession.builder.master(master).appName(app_name)
        for key, value in LOCAL_DEFAULTS.items():
            builder = builder.config(key, value)
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    register(spark)
    return spark
