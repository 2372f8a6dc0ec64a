"""A scheduler's module is imported off the daemon's event loop: while one takes its time
(tests/plugins/txd_slowimport.py waits for a gate file the test creates), every other call is
answered."""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from txd import install
from txd.v1 import AppDef, AppState, Role
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


# A module that fails to import is imported again at its next use, and says what to install
# (issue 18, item 11): no restart once the package is there, one log line, no traceback.

NEEDSDEP_METADATA = 'Provides-Extra: fast\nRequires-Dist: txd-needsdep-lib>=1; extra == "fast"\n'
NEEDSDEP_REASON = "No module named 'txd_needsdep_lib': pip install 'txd-needsdep[fast]' installs it"


def _infos(d: Daemon) -> dict[str, dict[str, Any]]:
    out = json.loads(d.txctl("schedulers", "--json", check=0).stdout)
    return {s["name"]: s for s in out["schedulers"]}


def _pythonpath(*dirs: Path) -> str:
    return os.pathsep.join([*map(str, dirs), *filter(None, [os.environ.get("PYTHONPATH")])])


@pytest.fixture
def needsdep_daemon() -> Iterator[tuple[Daemon, Path]]:
    root = short_tmpdir()
    site = root / "site"
    install_plugin(site, "needsdep", "fakepoll", metadata=NEEDSDEP_METADATA)
    d = Daemon(root, env={"PYTHONPATH": _pythonpath(site)}).start()
    try:
        yield d, site
    finally:
        d.close()
        log = d.log()
        remove_tree(root)
    assert not log_alarms(log), log


async def test_a_plugin_whose_import_fails_names_the_extra_and_loads_once_installed(
    needsdep_daemon: tuple[Daemon, Path],
) -> None:
    d, site = needsdep_daemon
    for _ in range(3):  # every use tries again, and says the same
        assert _infos(d)["needsdep"]["load_error"] == NEEDSDEP_REASON
    run = d.txctl("run", "-s", "needsdep", "utils.echo")
    assert run.returncode == 2, run
    assert f"scheduler needsdep is unusable: {NEEDSDEP_REASON}" in run.stderr
    text = d.txctl("schedulers", check=0).stdout
    assert re.search(r"^needsdep +unusable: No module named 'txd_needsdep_lib': pip", text, re.M)
    # One line in the daemon's log however often it was used, and no traceback.
    said = [ln for ln in d.log().splitlines() if "needsdep" in ln]
    assert len(said) == 1 and said[0].endswith(f"scheduler needsdep is unusable: {NEEDSDEP_REASON}")
    assert "Traceback" not in d.log()

    (site / "txd_needsdep_lib.py").write_text("")  # the package is installed: no restart
    info = _infos(d)["needsdep"]
    assert info["load_error"] == ""
    assert info["description"] == "test double: jobs are files, status is polled"
    assert info.get("not_ready", "") == ""
    async with d.client() as c:
        handle = await c.run(AppDef(name="n", roles=[Role(name="r", entrypoint="x")]), "needsdep")
        assert (await c.wait(handle, timeout=30)).state == AppState.SUCCEEDED
    assert "scheduler needsdep: its module imports now" in d.log()


async def test_a_builtin_scheduler_names_the_txd_extra(tmp_path: Path) -> None:
    """aiodocker made unimportable (a module of that name first on the path that fails as a
    missing one does): local_docker names txd's extra; with the module gone, it loads."""
    root = short_tmpdir()
    shadow = root / "shadow"
    shadow.mkdir()
    (shadow / "aiodocker.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'aiodocker'\", name='aiodocker')\n"
    )
    socket = root / "no-engine.sock"
    env = {"PYTHONPATH": _pythonpath(shadow), "DOCKER_HOST": f"unix://{socket}"}
    d = Daemon(root, env=env).start()
    try:
        reason = f"No module named 'aiodocker': {install.command('docker')} installs it"
        assert _infos(d)["local_docker"]["load_error"] == reason
        assert _infos(d)["local_docker"]["load_error"] == reason
        said = [ln for ln in d.log().splitlines() if "local_docker" in ln]
        assert len(said) == 1 and said[0].endswith(f"local_docker is unusable: {reason}"), said
        (shadow / "aiodocker.py").unlink()
        info = _infos(d)["local_docker"]
        assert info["load_error"] == ""
        assert info["not_ready"] == (
            f"no Docker engine: nothing at {socket} (start one, or set DOCKER_HOST)"
        )
    finally:
        d.close()
        log = d.log()
        remove_tree(root)
    assert not log_alarms(log), log


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


async def test_the_listing_gives_each_scheduler_its_state(tmp_path: Path) -> None:
    """Every scheduler is ready, or says in one line why not: here no engine, no cluster
    configured, no LSF commands. Only a listing that asks looks at the backends (shell
    completion and runopts want the names at once)."""
    root = short_tmpdir()
    socket = root / "no-engine.sock"
    env = {
        "DOCKER_HOST": f"unix://{socket}",
        "KUBECONFIG": "/nonexistent/txd-tests/kubeconfig",
        "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
    }
    d = Daemon(root, env=env).start()
    try:
        infos = _infos(d)
        text = d.txctl("schedulers", check=0).stdout
        async with d.client() as c:
            unchecked = (await c.schedulers()).schedulers
            checked = (await c.schedulers(check_backends=True)).schedulers
    finally:
        d.close()
        log = d.log()
        remove_tree(root)
    assert not log_alarms(log), log
    assert [s.not_ready for s in unchecked] == [""] * len(infos)
    assert {s.name: s.not_ready for s in checked} == {
        name: info.get("not_ready", "") for name, info in infos.items()
    }
    assert infos["local_cwd"].get("not_ready", "") == ""
    assert infos["local_docker"]["not_ready"] == (
        f"no Docker engine: nothing at {socket} (start one, or set DOCKER_HOST)"
    )
    for name in ("kubernetes", "kubernetes_mcad"):
        assert infos[name]["not_ready"] == (
            "no cluster configured: kubeconfig /nonexistent/txd-tests/kubeconfig does not exist"
        )
    assert infos["lsf"]["not_ready"] == (
        "no lsf client here: bhosts is not on txd's PATH (a run may name a login node: "
        "-c ssh_host=HOST)"
    )
    states = {}
    for line in text.splitlines():
        if not line.startswith(" "):
            name, state = (
                line.split(maxsplit=1)
                if "(default)" not in line
                else ("local_cwd", line.split(")", 1)[1])
            )
            states[name] = state.strip().split(":", 1)[0]
    assert set(states) == set(infos)
    assert set(states.values()) <= {"ready", "not ready", "unusable"}, states
    assert states["local_cwd"] == "ready" and states["local_docker"] == "not ready"


def _wait_for(path: Path, seconds: float) -> None:
    """Returns once `path` exists, or after `seconds`."""
    deadline = time.monotonic() + seconds
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.1)


async def test_an_import_that_fails_for_want_of_fds_is_tried_again_at_the_next_use() -> None:
    """An OSError while importing (EMFILE: the daemon was out of file descriptors) is the
    moment's, not the module's: the use is RESOURCE_EXHAUSTED, with no traceback logged, and the
    next use imports it (the module was marked broken for the daemon's life)."""
    root = short_tmpdir()
    site = root / "site"
    install_plugin(site, "fdshort", "fakepoll")
    short = root / "short"
    short.touch()
    env = {"PYTHONPATH": _pythonpath(site), "TXD_FDSHORT_FILE": str(short)}
    d = Daemon(root, env=env).start()
    try:
        run = d.txctl("run", "-s", "fdshort", "utils.echo")
        assert run.returncode == 6, run
        assert "scheduler fdshort could not be imported now: [Errno 24]" in run.stderr
        short.unlink()  # descriptors are back
        async with d.client() as c:
            app = AppDef(name="n", roles=[Role(name="r", entrypoint="x")])
            handle = await c.run(app, "fdshort")
            assert (await c.wait(handle, timeout=30)).state == AppState.SUCCEEDED
    finally:
        d.close()
        log = d.log()
        remove_tree(root)
    assert not log_alarms(log), log
    assert "Traceback" not in log
