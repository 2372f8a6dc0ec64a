"""A scheduler's module is imported off the daemon's event loop: while one takes its time
(tests/plugins/txd_slowimport.py waits for a gate file the test creates), every other call is
answered."""

from __future__ import annotations

import asyncio
import os
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
