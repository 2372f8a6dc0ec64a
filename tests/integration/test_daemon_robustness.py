"""A push backend that becomes unreachable, seen from a real daemon: while its change stream is
down, or at shutdown, the daemon keeps answering with stale statuses, recovers when the backend
does, and still exits 0 on SIGTERM without a traceback.

The backend is the fakepush plugin (tests/plugins/txd_fakepush.py), installed as a distribution
with an entry point: a job is a file in its state dir, and it is down while `down` exists there.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from txd.client import UnavailableError
from txd.v1 import AppDef, AppState, AppStatus, Role
from txd_testing import Daemon, install_plugin, remove_tree, short_tmpdir, until

TIMEOUT = 30.0
# What a daemon log must never show, whatever the backend did.
ALARMS = ("Traceback", "Task exception was never retrieved", "internal error", "never awaited")


@pytest.fixture
def push_daemon() -> Iterator[Daemon]:
    root = short_tmpdir()
    install_plugin(root / "site", "fakepush")
    d = Daemon(root, env={"PYTHONPATH": str(root / "site")}).start()
    try:
        yield d
    finally:
        d.close()
        remove_tree(root)


class Backend:
    """The fakepush backend of a daemon: its jobs' files and its `down` switch."""

    def __init__(self, daemon: Daemon) -> None:
        self.dir = daemon.state_dir / "schedulers" / "fakepush"

    def down(self) -> None:
        (self.dir / "down").touch()

    def up(self) -> None:
        (self.dir / "down").unlink()

    def finish(self, handle: str, state: str = "SUCCEEDED") -> None:
        (self.dir / "jobs" / handle.rsplit("/", 1)[1]).write_text(state)


def blocking_app() -> AppDef:
    return AppDef(name="blk", roles=[Role(name="r", entrypoint="x", args=["block"])])


def stale(status: AppStatus) -> bool:
    return status.HasField("stale_since")


async def next_status(queue: asyncio.Queue[AppStatus | None]) -> AppStatus | None:
    async with asyncio.timeout(TIMEOUT):
        return await queue.get()


async def watch_into(client: Any, handle: str, queue: asyncio.Queue[AppStatus | None]) -> None:
    async for status in client.watch(handle):
        await queue.put(status)
    await queue.put(None)


def assert_clean_log(daemon: Daemon) -> None:
    log = daemon.log()
    alarms = [line for line in log.splitlines() if any(a in line for a in ALARMS)]
    assert not alarms, "the daemon logged errors:\n" + log


def reconnects(daemon: Daemon) -> int:
    return len(re.findall(r"fakepush: .*reconnecting in", daemon.log()))


async def test_watchers_see_a_dropped_change_stream_as_stale_then_current(
    push_daemon: Daemon,
) -> None:
    backend = Backend(push_daemon)
    async with push_daemon.client() as c:
        handle = await c.run(blocking_app(), "fakepush", cwd="/")
        statuses: asyncio.Queue[AppStatus | None] = asyncio.Queue()
        watcher = asyncio.create_task(watch_into(c, handle, statuses))
        try:
            first = await next_status(statuses)
            assert first is not None and first.state == AppState.RUNNING and not stale(first)

            backend.down()
            marked = await next_status(statuses)
            assert marked is not None and marked.state == AppState.RUNNING, marked
            assert stale(marked), marked
            since = marked.stale_since.ToDatetime().strftime("%Y-%m-%d %H:%M:%S UTC")
            assert marked.stale_msg.startswith(f"fakepush has not answered since {since}: ")
            assert "the backend is down" in marked.stale_msg

            # The daemon answers meanwhile, and keeps the time of the first failure while the
            # stream is reopened and fails again.
            runs_before = reconnects(push_daemon)

            async def retried() -> bool:
                return reconnects(push_daemon) >= runs_before + 2

            await until(retried, "two more reconnects")
            now = await c.status(handle)
            assert stale(now) and now.stale_since == marked.stale_since, now
            assert any(s.app_handle == handle and stale(s) for s in await c.list("fakepush"))
            with pytest.raises(UnavailableError, match="the backend is down"):
                await c.run(blocking_app(), "fakepush", cwd="/")

            backend.up()
            current = await next_status(statuses)
            assert current is not None and current.state == AppState.RUNNING, current
            assert not stale(current) and current.stale_msg == "", current

            backend.finish(handle)
            last = await next_status(statuses)
            assert last is not None and last.state == AppState.SUCCEEDED, last
            assert await next_status(statuses) is None  # the watch has ended
        finally:
            watcher.cancel()
            await asyncio.gather(watcher, return_exceptions=True)
    assert push_daemon.stop() == 0
    assert_clean_log(push_daemon)


async def test_sigterm_with_the_push_backend_down_exits_cleanly(push_daemon: Daemon) -> None:
    """shutdown() of the scheduler and the final refresh both meet BackendUnavailable: the
    daemon logs them, stops within its grace period and exits 0. The job is still followed
    after a restart, once the backend is back."""
    backend = Backend(push_daemon)
    # reconnect=0: the daemon's own word at shutdown, not a client riding it out (test_resume)
    async with push_daemon.client(reconnect=0) as c:
        handle = await c.run(blocking_app(), "fakepush", cwd="/")
        assert (await c.status(handle)).state == AppState.RUNNING
        waiter = asyncio.create_task(c.wait(handle))
        backend.down()

        async def marked_stale() -> bool:
            return stale(await c.status(handle))

        await until(marked_stale, "the status marked stale")
        assert push_daemon.stop() == 0
        # The job outlives the daemon: a Wait open at shutdown is told so, not cut off.
        with pytest.raises(UnavailableError, match="txd is shutting down"):
            async with asyncio.timeout(TIMEOUT):
                await waiter
    assert_clean_log(push_daemon)
    assert "fakepush: shutdown" in push_daemon.log()

    backend.up()
    push_daemon.restart()
    async with push_daemon.client() as c:
        status = await c.status(handle)
        assert status.state == AppState.RUNNING and not stale(status), status
        backend.finish(handle, "FAILED")
        async with asyncio.timeout(TIMEOUT):
            assert (await c.wait(handle)).state == AppState.FAILED
    assert push_daemon.stop() == 0
    assert_clean_log(push_daemon)


async def test_sigterm_while_the_change_stream_is_reconnecting(push_daemon: Daemon) -> None:
    """The feed sleeps between reconnects when SIGTERM comes; watchers are still open."""
    backend = Backend(push_daemon)
    async with push_daemon.client(reconnect=0) as c:  # the daemon's word, as above
        handles = [await c.run(blocking_app(), "fakepush", cwd="/") for _ in range(3)]
        backend.down()

        async def all_stale() -> bool:
            return all([stale(await c.status(h)) for h in handles])

        await until(all_stale, "every status marked stale")
        watches: list[AsyncIterator[AppStatus]] = [c.watch(h) for h in handles]
        for w in watches:
            assert stale(await anext(w))
        assert push_daemon.stop() == 0
        for w in watches:
            with pytest.raises(UnavailableError, match="txd is shutting down"):
                async with asyncio.timeout(TIMEOUT):
                    await anext(w)
    assert_clean_log(push_daemon)
