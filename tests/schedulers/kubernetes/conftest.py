"""A real single-node Kubernetes (scripts/k8s-up) whose kubelet runs pods on the session's
Docker engine. The helpers live in tests/schedulers/kubernetes/k8s_testing.py.

- `k8s_cluster` (session): `.kubeconfig`, `.server`, `.token`, `.ca`, `.kubectl(*args)`.
  Started once per test run, stopped by pid at the end (no process, container or mount left).
  Its binaries are built before the first test (scripts/k8s-build; scripts/test builds them
  even earlier), so no test's timeout covers the build. Without root to build them, the
  kubernetes tests are skipped, saying so.
- `k8s_namespace` (session): a namespace of this test run, the daemons' default one.
- `k8s_daemon` (session) and `k8s_client`: a txd whose kubernetes and kubernetes_mcad schedulers
  use the cluster (k8s_testing.make_k8s_daemon); `own_k8s_daemon`: a started txd of the test's
  own (restarts). A test during which either logs a traceback or an internal error fails.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from k8s_testing import Cluster, ClusterUnavailable, make_k8s_daemon, prepare
from txd.schedulers.kubernetes.client import Kube
from txd_testing import Daemon, call_failed, log_alarms, own_daemon, remove_tree

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


@pytest.fixture(scope="session")
def k8s_namespace(k8s_cluster: Cluster) -> Iterator[str]:
    name = f"txd-e2e-{uuid.uuid4().hex[:8]}"
    k8s_cluster.kubectl("create", "namespace", name)
    try:
        yield name
    finally:  # the cluster goes next: no need to wait for the namespace controller
        k8s_cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


@pytest.fixture(scope="session")
def k8s_daemon(k8s_cluster: Cluster, k8s_namespace: str) -> Iterator[Daemon]:
    d = make_k8s_daemon(k8s_cluster, k8s_namespace).start()
    try:
        yield d
    finally:
        d.close()
        remove_tree(d.root)


@pytest.fixture
def own_k8s_daemon(
    k8s_cluster: Cluster, k8s_namespace: str, request: pytest.FixtureRequest
) -> Iterator[Daemon]:
    """A started txd of the test's own on the session's cluster (restarts). A passing test
    also fails if the daemon logged a traceback or an internal error."""
    d = make_k8s_daemon(k8s_cluster, k8s_namespace)
    with own_daemon(d, request) as started:
        yield started


@pytest.fixture(autouse=True)
def _k8s_daemon_log_clean(request: pytest.FixtureRequest) -> Iterator[None]:
    """Fails a test during which the session's k8s_daemon logged a traceback or an internal
    error."""
    if not {"k8s_daemon", "k8s_client"} & set(request.fixturenames):
        yield
        return
    d = request.getfixturevalue("k8s_daemon")
    start = len(d.log())
    yield
    new = d.log()[start:]
    assert call_failed(request) or not log_alarms(new), "the k8s daemon logged errors:\n" + new


@pytest.fixture
async def k8s_client(k8s_daemon: Daemon) -> AsyncIterator[Any]:
    async with k8s_daemon.client() as c:
        yield c


@pytest.fixture(scope="module")
def crds(k8s_cluster: Cluster) -> list[str]:
    """Volcano's and MCAD's CRDs on the cluster (their controllers are the tests')."""
    return k8s_cluster.install_crds()


@pytest.fixture
async def kube(k8s_cluster: Cluster, crds: list[str]) -> AsyncIterator[Kube]:
    """An admin connection to the cluster, for a test playing a controller."""
    k = await Kube.connect(str(k8s_cluster.kubeconfig))
    try:
        yield k
    finally:
        await k.aclose()
