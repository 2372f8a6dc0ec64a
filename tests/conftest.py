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
  Debian's docker.io, the tests that need it are skipped, saying so. Under scripts/test the
  docker, aws and kubernetes tiers share one engine and one registry it started (SHARED_ENGINE).
- Each test is marked with its tier (tests/tiers.py: unit, daemon, slurm, docker, aws,
  kubernetes, by its folder); scripts/test runs each tier as a pytest process of its own.

The helpers live in tests/txd_testing.py (module `txd_testing`), the table of nasty values in
tests/nasty.py (`nasty`): pyproject's pytest `pythonpath` puts tests/ on sys.path, as it does each
folder that holds a harness module (the suite runs with --import-mode=importlib, which adds none).
"""

from __future__ import annotations

import functools
import os
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import tiers
import txd_testing

Daemon = txd_testing.Daemon
DAEMON_ONLY_VAR = txd_testing.DAEMON_ONLY_VAR


@pytest.hookimpl(tryfirst=True)  # before -m deselects by marker
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Marks each test with its tier (tests/tiers.py: by its folder)."""
    wrong = []
    for item in items:
        tier = tiers.tier_of(item.path)
        item.add_marker(tier)
        fixtures = getattr(item, "fixturenames", ())
        # A test that asks for an engine outside the tiers that may start it would start it in
        # a second process, beside scripts/test's lock or shared engine.
        wrong += [
            f"{item.nodeid} ({tier}) uses {name}"
            for name, allowed in tiers.ENGINES.items()
            if name in fixtures and tier not in allowed
        ]
    if wrong:
        raise pytest.UsageError("tests outside their engine's tiers:\n" + "\n".join(wrong))


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
    assert txd_testing.call_failed(request) or not alarms, "the daemon logged errors:\n" + log


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
    failed = txd_testing.call_failed(request)
    assert failed or not alarms, "the shared daemon logged errors in this test:\n" + new


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


# An engine and a registry scripts/test started for several test processes in turn (the docker,
# aws and kubernetes tiers): their run dirs, addresses and owner, which the fixtures below use
# instead of starting their own. Each process leaves the engine clean; scripts/test stops both.
SHARED_ENGINE = ("TXD_TEST_DOCKER_RUN", "TXD_TEST_DOCKER_HOST", "TXD_TEST_DOCKER_OWNER")
SHARED_REGISTRY = ("TXD_TEST_REGISTRY_RUN", "TXD_TEST_REGISTRY")


def _shared(names: tuple[str, ...]) -> list[str] | None:
    values = [os.environ.get(name, "") for name in names]
    return values if all(values) else None


@pytest.fixture(scope="session")
def docker_engine(request: pytest.FixtureRequest) -> Iterator[Any]:
    from docker_testing import Engine, EngineUnavailable

    error = request.config.stash.get(_PREPARE_ERROR, None)
    if isinstance(error, EngineUnavailable):
        pytest.skip(str(error))
    if error is not None:
        pytest.fail(f"could not prepare the Docker engine: {error}")
    shared = _shared(SHARED_ENGINE)
    if shared:
        run_dir, host, owner = shared
        engine = Engine.attach(Path(run_dir), host, int(owner))
        try:
            yield engine
        finally:
            engine.clean()
        return
    engine = Engine.start_new()
    try:
        yield engine
    finally:
        engine.close()


@pytest.fixture(scope="session")
def docker_registry(docker_engine: Any) -> Iterator[Any]:
    """A real registry on 127.0.0.1 (Debian's docker-registry), for image_repo pushes."""
    from docker_testing import Registry

    shared = _shared(SHARED_REGISTRY)
    if shared:
        yield Registry.attach(Path(shared[0]), shared[1])
        return
    registry = Registry.start_new()
    try:
        yield registry
    finally:
        registry.close()
