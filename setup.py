"""Compiled extensions (the project's metadata is pyproject.toml's).

Each is optional: without a C compiler the install succeeds without it, and its Python
module falls back to its pure-Python kernel (docs/ingest.md). ``pip install -e .`` builds them
in place; after editing a ``.c`` file: ``python setup.py build_ext --inplace``.
"""

from setuptools import Extension, setup

EXTENSIONS = [
    # the access-log status/size scan (agent/ingest/columnar/access_scan.py)
    Extension(
        "agent.ingest.columnar.access_scan_c",
        sources=["agent/ingest/columnar/access_scan_c.c"],
        extra_compile_args=["-O2"],
        optional=True,
    ),
    # the newline offsets of every columnar chunk (agent/ingest/columnar/lines.py)
    Extension(
        "agent.ingest.columnar.newlines_c",
        sources=["agent/ingest/columnar/newlines_c.c"],
        extra_compile_args=["-O2"],
        optional=True,
    ),
    # the strict JSON-lines scanner of the projected JSON kernel (json_native.py)
    Extension(
        "agent.ingest.columnar.json_scan_c",
        sources=["agent/ingest/columnar/json_scan_c.c"],
        extra_compile_args=["-O2", "-std=c11"],
        optional=True,
    ),
]

setup(ext_modules=EXTENSIONS)
