"""moto for the AWS tests (helpers in tests/schedulers/aws/moto_testing.py).

- `moto` (session): one `moto_server` subprocess on 127.0.0.1 whose Batch jobs run as
  containers on the session's Docker engine (`docker_engine`, with host networking); stopped
  by pid at the end.
- `moto_reset`: forgets every moto resource before the test (for tests that count or list).
- `batch_queue`: an UNMANAGED compute environment and a job queue of the test's own
  (moto_testing.Queue; `.name` is the queue's name).
- `batch_daemon` (session) and `batch_client`: a txd whose aws_batch talks to moto.
- `proxy` (aws_proxy.AwsProxy, in front of moto) and `proxied_daemon`: a txd of the test's own
  talking to moto through it (throttling, log streams of running jobs, AWS down).
- `sm_moto` (module) and `standin` (module): a `moto_server` of the module's own without a
  Docker engine (SageMaker's needs none), and the stand-in proxy in front of it
  (sagemaker_standin.StandIn) that aws_sagemaker is pointed at.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from aws_proxy import AwsProxy
from moto_testing import Moto, Queue, make_batch_daemon, make_queue
from sagemaker_standin import StandIn
from txd_testing import Daemon, call_failed, log_alarms, own_daemon, remove_tree, short_tmpdir


@pytest.fixture(scope="session")
def moto(docker_engine: Any) -> Iterator[Moto]:
    root = short_tmpdir("txd-moto-")
    server = Moto.start_new(docker_engine.host, root / "moto.log")
    try:
        yield server
    finally:
        server.stop()
        remove_tree(root)


@pytest.fixture(scope="module")
def sm_moto() -> Iterator[Moto]:
    root = short_tmpdir("txd-smmoto-")
    server = Moto.start_new("unix:///nonexistent/docker.sock", root / "moto.log")
    try:
        yield server
    finally:
        server.stop()
        remove_tree(root)


@pytest.fixture(scope="module")
def standin(sm_moto: Moto) -> Iterator[StandIn]:
    proxy = StandIn(sm_moto.url).start()
    try:
        yield proxy
    finally:
        proxy.stop()


@pytest.fixture
def moto_reset(moto: Moto) -> Moto:
    moto.reset()
    return moto


@pytest.fixture
async def batch_queue(moto: Moto) -> Queue:
    return await make_queue(moto)


@pytest.fixture(scope="session")
def batch_daemon(moto: Moto) -> Iterator[Daemon]:
    d = make_batch_daemon(moto.url, docker_host=moto.docker_host).start()
    try:
        yield d
    finally:
        d.close()
        remove_tree(d.root)


@pytest.fixture
async def batch_client(batch_daemon: Daemon) -> AsyncIterator[Any]:
    async with batch_daemon.client() as c:
        yield c


@pytest.fixture
async def proxy(moto: Moto) -> AsyncIterator[AwsProxy]:
    p = await AwsProxy(moto.url).start()
    try:
        yield p
    finally:
        await p.close()


@pytest.fixture
def proxied_daemon(proxy: AwsProxy, request: pytest.FixtureRequest) -> Iterator[Daemon]:
    """A txd of the test's own talking to moto through `proxy`. Drive it with its async
    client only: the proxy runs on the test's event loop, which a blocking txctl would stop.
    A passing test also fails if the daemon logged a traceback or an internal error."""
    with own_daemon(make_batch_daemon(proxy.url), request) as d:
        yield d


@pytest.fixture(autouse=True)
def _batch_daemon_log_clean(request: pytest.FixtureRequest) -> Iterator[None]:
    """Fails a test during which the session's batch_daemon logged a traceback or an internal
    error."""
    if not {"batch_daemon", "batch_client"} & set(request.fixturenames):
        yield
        return
    d = request.getfixturevalue("batch_daemon")
    start = len(d.log())
    yield
    new = d.log()[start:]
    assert call_failed(request) or not log_alarms(new), "the batch daemon logged errors:\n" + new
