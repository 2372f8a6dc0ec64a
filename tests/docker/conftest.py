"""A real Docker engine (scripts/docker-up), a local registry, and txd daemons that use them,
for the docker tests. The helpers live in tests/docker/docker_testing.py.

- `docker_engine` (session): one dockerd per test run, with the test images (`.images`:
  docker_testing.BUSYBOX, docker_testing.PYTHON). `.host` is its DOCKER_HOST, `.pid`,
  `.restart()` stops and starts it on the same socket, `.docker(*args)` runs the CLI on it.
  Stopped by pid at the end, every container the tests left removed. Without root to install
  Debian's docker.io, the docker tests are skipped, saying so.
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
from docker_testing import (
    Engine,
    EngineClient,
    EngineUnavailable,
    Registry,
    make_docker_daemon,
    prepare,
)
from txd_testing import Daemon, log_alarms, remove_tree

# What preparing the engine raised (see pytest_collection_finish), for docker_engine to report.
_PREPARE_ERROR = pytest.StashKey[Exception]()


def pytest_collection_finish(session: pytest.Session) -> None:
    """When tests that need the engine were collected: installs it if missing and builds the
    test images' rootfs if not cached (debootstrap, ~30 s once), before the first test, so
    that no test's timeout covers them."""
    if session.config.option.collectonly or not any(
        "docker_engine" in getattr(item, "fixturenames", ()) for item in session.items
    ):
        return
    try:
        prepare()
    except Exception as e:
        session.config.stash[_PREPARE_ERROR] = e


@pytest.fixture(scope="session")
def docker_engine(request: pytest.FixtureRequest) -> Iterator[Engine]:
    error = request.config.stash.get(_PREPARE_ERROR, None)
    if isinstance(error, EngineUnavailable):
        pytest.skip(str(error))
    if error is not None:
        pytest.fail(f"could not prepare the Docker engine: {error}")
    engine = Engine.start_new()
    try:
        yield engine
    finally:
        engine.close()


@pytest.fixture(scope="session")
def docker_registry(docker_engine: Engine) -> Iterator[Registry]:
    registry = Registry.start_new()
    try:
        yield registry
    finally:
        registry.close()


@pytest.fixture(scope="session")
def docker_daemon(docker_engine: Engine) -> Iterator[Daemon]:
    d = make_docker_daemon(docker_engine).start()
    try:
        yield d
    finally:
        d.close()
        remove_tree(d.root)


def _failed(request: pytest.FixtureRequest) -> bool:
    rep = getattr(request.node, "rep_call", None)  # set by tests/conftest.py
    return rep is None or rep.failed


@pytest.fixture
def own_docker_daemon(docker_engine: Engine, request: pytest.FixtureRequest) -> Iterator[Daemon]:
    """A started txd of the test's own on the session's engine (restarts, crashes). A passing
    test also fails if the daemon logged a traceback or an internal error."""
    d = make_docker_daemon(docker_engine)
    try:
        yield d.start()
    finally:
        d.close()
        log = d.log()
        remove_tree(d.root)
    assert _failed(request) or not log_alarms(log), "the daemon logged errors:\n" + log


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
    assert _failed(request) or not log_alarms(new), "the docker daemon logged errors:\n" + new


@pytest.fixture
async def docker_client(docker_daemon: Daemon) -> AsyncIterator[Any]:
    async with docker_daemon.client() as c:
        yield c


@pytest.fixture
async def engine(docker_engine: Engine) -> AsyncIterator[EngineClient]:
    async with docker_engine.client() as docker:
        yield EngineClient(docker_engine.host, docker)
