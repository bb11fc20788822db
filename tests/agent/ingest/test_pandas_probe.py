"""pyarrow's pandas probe loads no pandas (``agent/ingest/columnar/pandas_probe.py``).

Each case runs in a fresh interpreter (the probe's answer is per process): answered before
pyarrow is imported and after; pandas loaded first (nothing changes); the values pyarrow
builds are the same; pandas still works with pyarrow when code asks for it.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

CASE = r"""
import json, sys
order = sys.argv[1]
if order == "pandas_first":
    import pandas
if order == "pyarrow_first":
    import pyarrow
from agent.ingest.columnar.pandas_probe import answer_pandas_probe
answer_pandas_probe()
answer_pandas_probe()  # idempotent
import pyarrow as pa
import pyarrow.compute as pc
values = [pa.array([1, None, 3]).to_pylist(), str(pa.array(["a", "b"]).type),
          pa.table({"k": ["x", "y"], "v": [1.5, 2.0]}).to_pylist(),
          pc.sum(pa.array([1, 2])).as_py()]
loaded = "pandas" in sys.modules
frame = pa.table({"k": ["x"]}).to_pandas()  # pandas on demand still works
back = pa.Table.from_pandas(frame).column("k").to_pylist()
print(json.dumps({"values": values, "pandas_after_arrays": loaded, "round_trip": back,
                  "finders_left": sum(type(f).__module__.endswith("pandas_probe")
                                      for f in sys.meta_path)}))
"""


def run(order: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", CASE, order], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


EXPECTED = [[1, None, 3], "string", [{"k": "x", "v": 1.5}, {"k": "y", "v": 2.0}], 3]


@pytest.mark.parametrize("order", ["probe_first", "pyarrow_first"])
def test_pyarrow_builds_the_same_arrays_without_loading_pandas(order: str) -> None:
    got = run(order)
    assert got["values"] == EXPECTED
    assert got["pandas_after_arrays"] is False
    assert got["round_trip"] == ["x"]
    assert got["finders_left"] == 0  # the one-shot finder left sys.meta_path


def test_pandas_loaded_first_changes_nothing() -> None:
    got = run("pandas_first")
    assert got["values"] == EXPECTED
    assert got["pandas_after_arrays"] is True
    assert got["round_trip"] == ["x"]
