"""Compiled extensions (metadata stays in pyproject.toml).

Each is ``optional=True``: where no C compiler is available the install still succeeds and the
Python code falls back to its pure-Python kernel (docs/ingest.md).
"""

from setuptools import Extension, setup

EXTENSIONS = [
    # the strict JSON-lines scanner of the projected JSON kernel (json_native.py)
    Extension(
        "agent.ingest.columnar._json_scan",
        ["agent/ingest/columnar/_json_scan.c"],
        extra_compile_args=["-O2", "-std=c11"],
        optional=True,
    ),
]

setup(ext_modules=EXTENSIONS)
