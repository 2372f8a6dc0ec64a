"""A scheduler's module is imported off the daemon's event loop: while one takes its time
(tests/plugins/txd_slowimport.py waits for a gate file the test creates), every other call is
answered."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from txd.v1 import AppState
from txd_testing import Daemon, install_plugin, log_alarms, remove_tree, sh_app, short_tmpdir


@pytest.fixture
def slow_daemon() -> Iterator[tuple[Daemon, Path]]:
    root = short_tmpdir()
    site = root / "site"
    install_plugin(site, "slowimport", "fakepoll")
    gate = root / "gate"
    path = [str(site), *filter(None, [os.environ.get("PYTHONPATH")])]
    env = {"PYTHONPATH": os.pathsep.join(path), "TXD_SLOWIMPORT_GATE": str(gate)}
    d = Daemon(root, env=env).start()
    try:
        yield d, gate
    finally:
        gate.touch()
        d.close()
        log = d.log()
        remove_tree(root)
    assert not log_alarms(log), log


async def test_calls_are_answered_while_a_scheduler_module_imports(
    slow_daemon: tuple[Daemon, Path],
) -> None:
    d, gate = slow_daemon
    async with d.client() as client:
        infos = asyncio.ensure_future(client.schedulers())  # waits for slowimport's module
        async with asyncio.timeout(20):
            assert await client.list() == []
            handle = await client.run(sh_app("echo hi"), "local_cwd", {})
            assert (await client.wait(handle)).state == AppState.SUCCEEDED
        assert not infos.done()
        gate.touch()
        async with asyncio.timeout(60):
            names = [s.name for s in (await infos).schedulers if not s.load_error]
    assert "slowimport" in names


# Every built-in scheduler's module imported one after the other (kubernetes_asyncio and
# aioboto3 take about a second each): a daemon that imported them ahead of use would reach a
# plugin's module well within this.
IMPORT_ALL_BOUND = 20.0


async def test_a_scheduler_module_is_imported_only_once_it_is_used() -> None:
    """A daemon running local jobs does not import the other backends' libraries (they were
    all preloaded once it served: 111 MiB peak instead of 59 MiB while it took 10,000 jobs)."""
    root = short_tmpdir()
    site = root / "site"
    install_plugin(site, "markimport", "fakepoll")
    marker = root / "imported"
    path = [str(site), *filter(None, [os.environ.get("PYTHONPATH")])]
    env = {"PYTHONPATH": os.pathsep.join(path), "TXD_MARKIMPORT_FILE": str(marker)}
    d = Daemon(root, env=env).start()
    try:
        async with d.client() as client:
            handle = await client.run(sh_app("echo hi"), "local_cwd", {})
            assert (await client.wait(handle)).state == AppState.SUCCEEDED
            # A bound on the absence of an import that, ahead of use, would come in seconds.
            await asyncio.to_thread(_wait_for, marker, IMPORT_ALL_BOUND)
            assert not marker.exists(), "the daemon imported a scheduler nobody used"
            names = [s.name for s in (await client.schedulers()).schedulers if not s.load_error]
            assert "markimport" in names  # imported once asked for
            assert marker.exists()
    finally:
        d.close()
        log = d.log()
        remove_tree(root)
    assert not log_alarms(log), log


def _wait_for(path: Path, seconds: float) -> None:
    """Returns once `path` exists, or after `seconds`."""
    deadline = time.monotonic() + seconds
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
