"""Every cluster test leaves no agent process behind: a test that fails before its own
``stop()`` (an assertion inside the fault phase, say) would leave its agents running for the
rest of the session, loading the 2-core machine every later cluster test runs on.

The chaos tests' fixtures: ``chaos``, a :class:`~agent.server.chaos.ChaosCluster` of the
test module's ``AGENTS`` agent processes, and ``watch``, the every-version reader started on
it before any job or fault (jobs are added as they are submitted:
:meth:`~agent.server.version_watch.VersionWatch.watch`)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.server.chaos import ChaosCluster
from agent.server.cluster import running_clusters
from agent.server.version_watch import VersionWatch, chaos_watch

log = logging.getLogger(__name__)


@pytest.fixture(autouse=True)
def _no_cluster_left_running() -> Iterator[None]:
    # clusters of wider-scoped fixtures (a module's shared cluster) run before the test: theirs
    before = {id(c) for c in running_clusters()}
    yield
    for cluster in [c for c in running_clusters() if id(c) not in before]:
        log.warning("a cluster in %s was left running by its test: stopped", cluster.workdir)
        cluster.stop(timeout=10.0)


@pytest.fixture
def chaos(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ChaosCluster]:
    """The module's ``AGENTS`` agent processes, or the cluster its ``CLUSTER(workdir)``
    builds (e.g. fixed node ids)."""
    build = getattr(request.module, "CLUSTER", None)
    cluster = (build(tmp_path) if build else ChaosCluster(request.module.AGENTS, tmp_path)).start()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def watch(chaos: ChaosCluster) -> Iterator[VersionWatch]:
    reader = chaos_watch(chaos, [])
    try:
        yield reader
    finally:
        reader.stop()
