"""One local SparkSession for every Spark test of this directory (JVM start-up is the cost);
tests/agent's in-process agent helpers and this directory's helpers (``ql_lake``) made
importable."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent.parent / "agent"))
sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    pytest.importorskip("pyspark")
    from spark_sink.session import JavaMissing, get_session

    try:
        session = get_session(
            "local[2]",
            app_name="elf-tests",
            conf={"spark.sql.shuffle.partitions": "2", "spark.driver.memory": "1g"},
        )
    except JavaMissing as exc:
        pytest.skip(str(exc))
    yield session
    session.stop()
