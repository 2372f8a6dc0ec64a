"""A real single-node Kubernetes (scripts/k8s-up) whose kubelet runs pods on the session's
Docker engine. The helpers live in tests/k8s/k8s_testing.py.

- `k8s_cluster` (session): `.kubeconfig`, `.server`, `.token`, `.ca`, `.kubectl(*args)`.
  Started once per test run, stopped by pid at the end (no process, container or mount left).
  Its binaries are built before the first test (scripts/k8s-build; scripts/test builds them
  even earlier), so no test's timeout covers the build. Without root to build them, the
  kubernetes tests are skipped, saying so.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from k8s_testing import Cluster, ClusterUnavailable, prepare

# What preparing the cluster raised (see pytest_collection_finish), for k8s_cluster to report.
_PREPARE_ERROR = pytest.StashKey[Exception]()


def pytest_collection_finish(session: pytest.Session) -> None:
    """When tests that need the cluster were collected: builds its binaries if not cached."""
    if session.config.option.collectonly or not any(
        "k8s_cluster" in getattr(item, "fixturenames", ()) for item in session.items
    ):
        return
    try:
        prepare()
    except Exception as e:
        session.config.stash[_PREPARE_ERROR] = e


@pytest.fixture(scope="session")
def k8s_cluster(request: pytest.FixtureRequest, docker_engine: Any) -> Iterator[Cluster]:
    error = request.config.stash.get(_PREPARE_ERROR, None)
    if isinstance(error, ClusterUnavailable):
        pytest.skip(str(error))
    if error is not None:
        pytest.fail(f"could not build Kubernetes: {error}")
    cluster = Cluster.start_new(docker_engine.host)
    try:
        yield cluster
    finally:
        cluster.close()
