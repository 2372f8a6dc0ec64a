"""A scheduler's module is imported off the daemon's event loop: while one takes its time
(tests/plugins/txd_slowimport.py waits for a gate file the test creates), every other call is
answered."""

from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from txd.v1 import AppState
from txd_testing import REPO, Daemon, log_alarms, remove_tree, sh_app, short_tmpdir

PLUGINS = REPO / "tests" / "plugins"


@pytest.fixture
def slow_daemon() -> Iterator[tuple[Daemon, Path]]:
    root = short_tmpdir()
    site = root / "site"
    site.mkdir()
    for name in ("txd_slowimport.py", "txd_fakepoll.py"):
        shutil.copy(PLUGINS / name, site / name)
    info = site / "txd_slowimport-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: txd-slowimport\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        "[txd.schedulers]\nslowimport = txd_slowimport:create_scheduler\n"
    )
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
