"""Fixtures that start a real `txd` daemon on a temporary socket.

- `shared_daemon` (session): one daemon for every test that needs no isolation.
- `daemon` (function): a fresh daemon of the test's own, for restart / crash / signal tests;
  `unstarted_daemon` the same before start(), for tests that prepare its state dir.
- `txctl(*args, input=None, check=None)`: runs the CLI against the shared daemon, in `workdir`.
- `client`: a txd.client.AsyncClient on the shared daemon (function-scoped, so it lives on the
  test's own event loop).
- `docker_engine` (session): one real dockerd per test run (docker_testing.Engine), for the
  docker and aws tests and the kubernetes tests' kubelet, with the test images (`.images`:
  docker_testing.BUSYBOX, docker_testing.PYTHON). `.host` is its DOCKER_HOST, `.pid`,
  `.restart()` stops and starts it on the same socket, `.docker(*args)` runs the CLI on it.
  Stopped by pid at the end, every container the tests left removed. Without root to install
  Debian's docker.io, the tests that need it are skipped, saying so.

The helpers live in tests/txd_testing.py (module `txd_testing`), the table of nasty values in
tests/nasty.py (`nasty`): pyproject's pytest `pythonpath` puts tests/ on sys.path, as it does each
folder that holds a harness module (the suite runs with --import-mode=importlib, which adds none).
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import txd_testing

Daemon = txd_testing.Daemon
DAEMON_ONLY_VAR = txd_testing.DAEMON_ONLY_VAR


@pytest.fixture(scope="session")
def shared_daemon() -> Iterator[Any]:
    root = txd_testing.short_tmpdir("txdt-shared-")
    d = Daemon(root, env={DAEMON_ONLY_VAR: "daemon-value"}).start()
    try:
        yield d
    finally:
        d.close()
        txd_testing.remove_tree(root)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    rep = yield
    setattr(item, f"rep_{rep.when}", rep)
    return rep


def _failed(request: pytest.FixtureRequest) -> bool:
    rep = getattr(request.node, "rep_call", None)
    return rep is None or rep.failed


@pytest.fixture
def unstarted_daemon(request: pytest.FixtureRequest) -> Iterator[Any]:
    """A daemon of this test's own, not started yet: the test may fill its `state_dir` first,
    then calls start(). Stopped, its leftovers ended, at teardown; a passing test also fails
    if the daemon logged a traceback or an internal error."""
    root = txd_testing.short_tmpdir()
    d = Daemon(root)
    try:
        yield d
    finally:
        d.close()
        log = d.log()
        txd_testing.remove_tree(root)
    alarms = txd_testing.log_alarms(log)
    assert _failed(request) or not alarms, "the daemon logged errors:\n" + log


@pytest.fixture
def daemon(unstarted_daemon: Any) -> Any:
    """A daemon of this test's own, started (see unstarted_daemon)."""
    return unstarted_daemon.start()


@pytest.fixture(autouse=True)
def _shared_daemon_log_clean(request: pytest.FixtureRequest) -> Iterator[None]:
    """Fails a test during which the shared daemon logged a traceback or internal error."""
    uses_shared = {"shared_daemon", "client", "txctl"} & set(request.fixturenames)
    if not uses_shared:
        yield
        return
    d = request.getfixturevalue("shared_daemon")
    start = len(d.log())
    yield
    new = d.log()[start:]
    alarms = txd_testing.log_alarms(new)
    assert _failed(request) or not alarms, "the shared daemon logged errors in this test:\n" + new


@pytest.fixture
def plugin_daemon() -> Iterator[Any]:
    """A daemon of the test's own that can load the fakepoll test scheduler (tests/plugins)."""
    root = txd_testing.short_tmpdir()
    txd_testing.install_plugin(root / "site")
    d = Daemon(root, env={"PYTHONPATH": str(root / "site")}).start()
    try:
        yield d
    finally:
        d.close()
        txd_testing.remove_tree(root)


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """The caller's working directory for txctl runs and client runs."""
    path = tmp_path / "cwd"
    path.mkdir()
    return path


@pytest.fixture
def txctl(shared_daemon: Any, workdir: Path) -> Callable[..., Any]:
    return functools.partial(shared_daemon.txctl, cwd=workdir)


@pytest.fixture
async def client(shared_daemon: Any) -> AsyncIterator[Any]:
    async with shared_daemon.client() as c:
        yield c


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
    from docker_testing import prepare  # aiodocker: only for the tests that need it

    try:
        prepare()
    except Exception as e:
        session.config.stash[_PREPARE_ERROR] = e


@pytest.fixture(scope="session")
def docker_engine(request: pytest.FixtureRequest) -> Iterator[Any]:
    from docker_testing import Engine, EngineUnavailable

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
def docker_registry(docker_engine: Any) -> Iterator[Any]:
    """A real registry on 127.0.0.1 (Debian's docker-registry), for image_repo pushes."""
    from docker_testing import Registry

    registry = Registry.start_new()
    try:
        yield registry
    finally:
        registry.close()
