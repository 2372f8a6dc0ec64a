"""The serving record's heartbeat (txd.daemon.serving) beats on a thread of its own, not driven
by the event loop: neither a loop's shared worker pool full of slow blocking work (module
imports, job folders on a hung file system) nor the loop itself held (the job store's opening
reads every page of it) may delay it, or another host would take a live daemon's state dir
over."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from pathlib import Path

from txd.daemon import serving
from txd_testing import remove_tree, short_tmpdir

PERIOD = 0.05
BOUND = 5.0  # seconds: 100 periods; a beat comes within one or two


def _observed(root: Path, on_beat: Callable[[], object]) -> tuple[serving.Serving, serving.Record]:
    """The state dir under `root` held by host h1, every beat followed by on_beat() (in the
    beating thread), and the record as first written."""
    s = serving.acquire(root / "state", Path(root / "txd.sock"), period=PERIOD, host="h1")
    first = serving.read_record(root / "state")
    assert first is not None
    beat = s.beat

    def observed_beat() -> bool:
        ours = beat()
        on_beat()
        return ours

    s.beat = observed_beat  # type: ignore[method-assign]
    return s, first


async def test_a_full_worker_pool_does_not_hold_the_heartbeat_back() -> None:
    root = short_tmpdir("txdhb-")
    release = threading.Event()
    loop = asyncio.get_running_loop()
    beaten = asyncio.Event()
    try:
        s, first = _observed(root, lambda: loop.call_soon_threadsafe(beaten.set))
        # Every worker of the loop's shared pool blocked until the end of the test.
        blockers = [loop.run_in_executor(None, release.wait) for _ in range(64)]
        s.start_beating(loop)
        try:
            async with asyncio.timeout(BOUND):
                await beaten.wait()
        finally:
            release.set()
            await asyncio.gather(*blockers)
            s.close()
        now = serving.read_record(root / "state")
        assert now is not None and now.heartbeat > first.heartbeat
    finally:
        release.set()
        remove_tree(root)


def test_a_held_event_loop_does_not_hold_the_heartbeat_back() -> None:
    """The loop's thread blocked (as while the job store opens, before the daemon serves): the
    beats go on. Before, the beats were the loop's to schedule and none came until it was free."""
    root = short_tmpdir("txdhb-")
    beaten = threading.Event()
    loop = asyncio.new_event_loop()
    try:
        s, first = _observed(root, beaten.set)
        s.start_beating(loop)
        try:
            assert beaten.wait(BOUND)  # this thread, the loop's, never runs the loop meanwhile
        finally:
            s.close()
        now = serving.read_record(root / "state")
        assert now is not None and now.heartbeat > first.heartbeat
        assert now.state == "stopped"
    finally:
        loop.close()
        remove_tree(root)
