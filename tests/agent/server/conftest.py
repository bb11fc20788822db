"""Every cluster test leaves no agent process behind: a test that fails before its own
``stop()`` (an assertion inside the fault phase, say) would leave its agents running for the
rest of the session, loading the 2-core machine every later cluster test runs on."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from agent.server.cluster import running_clusters

log = logging.getLogger(__name__)


@pytest.fixture(autouse=True)
def _no_cluster_left_running() -> Iterator[None]:
    # clusters of wider-scoped fixtures (a module's shared cluster) run before the test: theirs
    before = {id(c) for c in running_clusters()}
    yield
    for cluster in [c for c in running_clusters() if id(c) not in before]:
        log.warning("a cluster in %s was left running by its test: stopped", cluster.workdir)
        cluster.stop(timeout=10.0)
