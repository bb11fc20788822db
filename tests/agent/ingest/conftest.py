"""Shared by the ingest tests: one parse-ahead helper process per test module."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from agent.ingest.columnar.pool import ChunkParsePool


@pytest.fixture(scope="module")
def pool() -> Iterator[ChunkParsePool]:
    """A :class:`ChunkParsePool` of one helper process, started before the module's tests."""
    p = ChunkParsePool(1)
    p.warm()
    yield p
    p.close()
