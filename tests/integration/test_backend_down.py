"""A backend that stops answering: statuses say they are stale (and since when) until it answers
again, clients keep getting answers, and SIGTERM still shuts the daemon down cleanly."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from txd.v1 import AppDef, AppState, AppStatus, Role
from txd_testing import repeated_statuses, sh_app

DOWN = "fakepoll's backend is down (test)"  # txd_fakepoll.DOWN


def _down_file(daemon: Any) -> Path:
    path = Path(daemon.state_dir) / "schedulers" / "fakepoll" / "down"
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def _app(name: str) -> AppDef:
    return AppDef(name=name, roles=[Role(name="r", entrypoint="anything")])


async def _first(c: Any, handle: str, stale: bool) -> AppStatus:
    """The first status Watch sends whose staleness is `stale`."""
    async with asyncio.timeout(20):
        async for status in c.watch(handle):
            if status.HasField("stale_since") == stale:
                return status
    raise AssertionError(f"the watch of {handle} ended first")


async def test_watch_sends_only_changes(plugin_daemon: Any) -> None:
    """The backend goes down and comes back while a client watches: every status the watch
    sends differs from the one before in more than the time of the last state change."""
    down = _down_file(plugin_daemon)
    async with plugin_daemon.client() as c:
        handle = await c.run(_app("changes"), "fakepoll", cwd="/")
        sent: list[AppStatus] = []
        async with asyncio.timeout(30):
            async for status in c.watch(handle):
                sent.append(status)
                if len(sent) == 1:
                    down.touch()
                elif status.HasField("stale_since") and down.exists():
                    down.unlink()
    assert any(s.HasField("stale_since") for s in sent)
    assert not sent[-1].HasField("stale_since") and sent[-1].state == AppState.SUCCEEDED
    assert repeated_statuses(sent) == [], sent


async def test_status_is_stale_while_the_backend_is_down(plugin_daemon: Any) -> None:
    down = _down_file(plugin_daemon)
    down.touch()
    async with plugin_daemon.client() as c:
        handle = await c.run(_app("stale"), "fakepoll", cwd="/")
        stale = await _first(c, handle, stale=True)
        assert stale.state == AppState.SUBMITTED
        assert stale.stale_msg.startswith("fakepoll has not answered since ")
        assert stale.stale_msg.endswith(f" UTC: {DOWN}")
        # Every client sees it, and so does the CLI.
        assert (await c.status(handle)).stale_since == stale.stale_since
        text = plugin_daemon.txctl("status", handle, check=0).stdout
        assert f"  STALE:    {stale.stale_msg}\n" in text
        listed = plugin_daemon.txctl("list", check=0).stdout.splitlines()
        row = next(line for line in listed if line.startswith(handle))
        assert row.split()[2:4] == ["SUBMITTED", "(stale)"], listed
        assert listed[-1].startswith("(stale): the backend has not confirmed"), listed
        # No poll has been answered yet (a failed query is not counted).
        calls = Path(plugin_daemon.state_dir) / "schedulers" / "fakepoll" / "calls"
        assert not calls.exists(), "no poll should have succeeded"

        down.unlink()
        fresh = await _first(c, handle, stale=False)
        assert fresh.stale_msg == ""
        assert (await c.wait(handle, timeout=20)).state == AppState.SUCCEEDED
        assert not (await c.status(handle)).HasField("stale_since")
    listed = plugin_daemon.txctl("list", check=0).stdout
    assert "(stale)" not in listed, listed  # fresh again: no mark, no note


async def test_sigterm_while_a_polled_backend_is_down(plugin_daemon: Any, workdir: Path) -> None:
    """Defect 1 of issue 7: this used to exit 1 with a traceback, skipping the gRPC server's
    graceful stop."""
    down = _down_file(plugin_daemon)
    down.touch()
    async with plugin_daemon.client() as c:
        polled = await c.run(_app("down"), "fakepoll", cwd="/")
        local = await c.run(sh_app("sleep 600", name="local"), cwd=str(workdir))
        await _first(c, polled, stale=True)
    assert plugin_daemon.stop() == 0
    log = plugin_daemon.log()
    assert "Traceback" not in log, log
    assert "never awaited" not in log, log
    assert not plugin_daemon.socket.exists()

    down.unlink()
    plugin_daemon.restart()
    async with plugin_daemon.client() as c:
        ended = await c.status(local)
        assert (ended.state, ended.msg) == (AppState.CANCELLED, "cancelled by txd shutdown")
        # The polled job is left to its backend and followed again after the restart.
        assert (await c.wait(polled, timeout=20)).state == AppState.SUCCEEDED


async def test_wait_on_a_job_the_backend_forgot_prints_unknown_and_exits_1(
    plugin_daemon: Any,
) -> None:
    """A job the backend no longer knows ends UNKNOWN: nothing about it can change any more, so
    `txctl wait` (and `run --wait`) prints that final status and exits 1, as for any job that
    did not succeed, instead of saying the daemon ended the watch early (exit 3)."""
    down = _down_file(plugin_daemon)
    down.touch()  # no describe answers until the job's file is gone: it never finishes first
    async with plugin_daemon.client() as c:
        handle = await c.run(_app("forgotten"), "fakepoll", cwd="/")
        job_file = down.parent / f"{handle.rsplit('/', 1)[-1]}.job"
        job_file.unlink()
        down.unlink()
        async with asyncio.timeout(20):
            final = await c.wait(handle)
    assert final.state == AppState.UNKNOWN, final
    proc = await asyncio.to_thread(plugin_daemon.txctl, "wait", handle)
    assert proc.returncode == 1, proc
    assert "UNKNOWN" in proc.stdout, proc.stdout
    assert "ended the watch" not in proc.stderr, proc.stderr
