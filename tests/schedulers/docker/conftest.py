"""A real Docker engine (scripts/docker-up), a local registry, and txd daemons that use them,
for the docker tests. The helpers live in tests/schedulers/docker/docker_testing.py.

- `docker_engine` (session, in tests/conftest.py: the kubernetes tests' kubelet runs on it too).
- `docker_registry` (session): a registry on 127.0.0.1; `.address` is `127.0.0.1:PORT`.
- `docker_daemon` (session) and `docker_client`: a txd whose Docker host is the engine;
  `own_docker_daemon`: a started txd of the test's own (restarts, crashes). A test during
  which either logs a traceback or an internal error fails. `make_docker_daemon(engine, args)`
  (docker_testing) makes one with more arguments.
- `engine`: an EngineClient on the engine, for assertions and for waiting on engine events.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from docker_testing import Engine, EngineClient, make_docker_daemon
from txd_testing import Daemon, call_failed, log_alarms, own_daemon, remove_tree


@pytest.fixture(scope="session")
def docker_daemon(docker_engine: Engine) -> Iterator[Daemon]:
    d = make_docker_daemon(docker_engine).start()
    try:
        yield d
    finally:
        d.close()
        remove_tree(d.root)


@pytest.fixture
def own_docker_daemon(docker_engine: Engine, request: pytest.FixtureRequest) -> Iterator[Daemon]:
    """A started txd of the test's own on the session's engine (restarts, crashes). A passing
    test also fails if the daemon logged a traceback or an internal error."""
    d = make_docker_daemon(docker_engine)
    with own_daemon(d, request) as started:
        yield started


@pytest.fixture(autouse=True)
def _docker_daemon_log_clean(request: pytest.FixtureRequest) -> Iterator[None]:
    """Fails a test during which the session's docker_daemon logged a traceback or an internal
    error."""
    if not {"docker_daemon", "docker_client"} & set(request.fixturenames):
        yield
        return
    d = request.getfixturevalue("docker_daemon")
    start = len(d.log())
    yield
    new = d.log()[start:]
    assert call_failed(request) or not log_alarms(new), "the docker daemon logged errors:\n" + new


@pytest.fixture
async def docker_client(docker_daemon: Daemon) -> AsyncIterator[Any]:
    async with docker_daemon.client() as c:
        yield c


@pytest.fixture
async def engine(docker_engine: Engine) -> AsyncIterator[EngineClient]:
    async with docker_engine.client() as docker:
        yield EngineClient(docker_engine.host, docker)
