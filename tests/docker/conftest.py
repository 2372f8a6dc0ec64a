"""A real Docker engine (scripts/docker-up), a local registry, and txd daemons that use them,
for the docker tests. The helpers live in tests/docker/docker_testing.py.

- `docker_engine` (session): one dockerd per test run, with the test images (`.images`:
  docker_testing.BUSYBOX, docker_testing.PYTHON). `.host` is its DOCKER_HOST, `.pid`,
  `.restart()` stops and starts it on the same socket, `.docker(*args)` runs the CLI on it.
  Stopped by pid at the end, every container the tests left removed. Without root to install
  Debian's docker.io, the docker tests are skipped, saying so.
- `docker_registry` (session): a registry on 127.0.0.1; `.address` is `127.0.0.1:PORT`.
- `docker_daemon` (session) and `docker_client`: a txd whose Docker host is the engine;
  `own_docker_daemon`: a started txd of the test's own (restarts, crashes).
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
    check_installed,
    make_docker_daemon,
)
from txd_testing import Daemon, remove_tree


@pytest.fixture(scope="session")
def docker_engine() -> Iterator[Engine]:
    try:
        check_installed()
    except EngineUnavailable as e:
        pytest.skip(str(e))
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


@pytest.fixture
def own_docker_daemon(docker_engine: Engine) -> Iterator[Daemon]:
    """A started txd of the test's own on the session's engine."""
    d = make_docker_daemon(docker_engine)
    try:
        yield d.start()
    finally:
        d.close()
        remove_tree(d.root)


@pytest.fixture
async def docker_client(docker_daemon: Daemon) -> AsyncIterator[Any]:
    async with docker_daemon.client() as c:
        yield c


@pytest.fixture
async def engine(docker_engine: Engine) -> AsyncIterator[EngineClient]:
    async with docker_engine.client() as docker:
        yield EngineClient(docker_engine.host, docker)
