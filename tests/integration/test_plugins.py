"""Third-party schedulers (entry-point group `txd.schedulers`) and the daemon's status poller."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from txd.v1 import TERMINAL_STATES, AppDef, AppState, Role
from txd_testing import Daemon, remove_tree, short_tmpdir

PLUGIN = Path(__file__).resolve().parent.parent / "plugins" / "txd_fakepoll.py"


def _install_plugin(site: Path) -> None:
    """A minimal installed distribution: the module, and a dist-info with its entry point."""
    site.mkdir(parents=True)
    shutil.copy(PLUGIN, site / "txd_fakepoll.py")
    info = site / "txd_fakepoll-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: txd-fakepoll\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        "[txd.schedulers]\nfakepoll = txd_fakepoll:create_scheduler\n"
    )


@pytest.fixture
def plugin_daemon() -> Iterator[Daemon]:
    root = short_tmpdir()
    _install_plugin(root / "site")
    d = Daemon(root, env={"PYTHONPATH": str(root / "site")}).start()
    try:
        yield d
    finally:
        d.close()
        remove_tree(root)


def _app(name: str) -> AppDef:
    return AppDef(name=name, roles=[Role(name="r", entrypoint="anything")])


def test_third_party_scheduler_is_listed_with_its_options(plugin_daemon: Daemon) -> None:
    proc = plugin_daemon.txctl("schedulers", "--json", check=0)
    infos = {s["name"]: s for s in json.loads(proc.stdout)["schedulers"]}
    assert infos["fakepoll"]["description"] == "test double: jobs are files, status is polled"
    assert infos["fakepoll"]["load_error"] == ""
    assert "local_cwd" in infos
    opts = json.loads(plugin_daemon.txctl("runopts", "fakepoll", "--json", check=0).stdout)
    assert [o["name"] for o in opts["fakepoll"]] == ["tag"]


async def test_polled_status_costs_one_batched_query_per_interval(plugin_daemon: Daemon) -> None:
    """Three jobs, twenty watchers: the scheduler is asked exactly once per interval, about
    all three jobs at once, and stops being asked when they are done."""
    spec = importlib.util.spec_from_file_location("txd_fakepoll", PLUGIN)
    assert spec is not None and spec.loader is not None
    plugin = sys.modules.setdefault("txd_fakepoll", importlib.util.module_from_spec(spec))
    spec.loader.exec_module(plugin)

    calls_file = plugin_daemon.state_dir / "schedulers" / "fakepoll" / "calls"
    async with plugin_daemon.client() as c:
        handles = [await c.run(_app(f"p{i}"), "fakepoll", {"tag": "x"}, cwd="/") for i in range(3)]

        async def watch(handle: str) -> list[int]:
            return [s.state async for s in c.watch(handle)]

        seen = await asyncio.wait_for(
            asyncio.gather(*(watch(h) for i in range(20) for h in [handles[i % 3]])), 30
        )
        for states in seen:
            assert states[-1] == AppState.SUCCEEDED, states
            # SUBMITTED until the first poll: a polled job is not described on its own.
            assert set(states) <= {AppState.SUBMITTED, AppState.RUNNING, AppState.SUCCEEDED}
        assert [(await c.status(h)).state for h in handles] == [AppState.SUCCEEDED] * 3
        # The poller has stopped: another round trip changes nothing.
        assert (await c.wait(handles[0])).state in TERMINAL_STATES
    calls = calls_file.read_text().splitlines()
    assert len(calls) == plugin.FINISH_AFTER, calls
    assert sorted(calls[-1].split()) == sorted(h.rsplit("/", 1)[1] for h in handles)
    described = json.loads(plugin_daemon.txctl("describe", "--json", handles[0], check=0).stdout)
    assert described["cfg"]["tag"] == {"str": "x"}
